"""The small MC dropout model and toy data through which the tests of the models' shared
machinery (``test_base.py``, ``test_function_bank.py``, ``test_posterior_serving.py``)
exercise it."""

import torch

from tests.cards import fast_settings

#: MC dropout's card's fast settings, with the widths and bank that the checks name.
FAST = fast_settings("mc-dropout", hidden_widths=(16, 16), epochs=60, num_masks=8)


def toy_data(n: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    r"""``n`` training inputs in the unit square (``n x 2``) and their targets (``n x 1``),
    the same on every call."""
    generator = torch.Generator().manual_seed(0)
    train_X = torch.rand(n, 2, generator=generator, dtype=torch.float64)
    return train_X, torch.cos(3 * train_X).sum(-1, keepdim=True)
