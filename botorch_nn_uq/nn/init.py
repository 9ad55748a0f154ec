"""Layers initialised from an explicit random generator, so that building a network
draws nothing from torch's global generator."""

from __future__ import annotations

import math

import torch
from torch import nn


def linear(
    in_features: int, out_features: int, generator: torch.Generator | None = None
) -> nn.Linear:
    r"""An ``nn.Linear`` initialised by ``nn.Linear``'s own rule with draws from
    ``generator``.

    The rule and the order of the draws are those of ``nn.Linear.reset_parameters``:
    ``kaiming_uniform_`` with ``a = sqrt(5)`` for the ``out x in`` weight, then the bias
    uniform in ``+-1 / sqrt(in_features)``, in torch's default dtype. The layer therefore
    equals ``nn.Linear(in_features, out_features)`` built after
    ``torch.manual_seed(s)`` when ``generator`` is seeded with ``s``, and the global
    generator is not drawn from.

    Args:
        in_features: Input width.
        out_features: Output width.
        generator: The source of the initial weights; ``None`` draws from torch's global
            generator, as ``nn.Linear`` does.

    Returns:
        The initialised layer.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> expected = nn.Linear(3, 2)
        >>> layer = linear(3, 2, torch.Generator().manual_seed(0))
        >>> torch.equal(layer.weight, expected.weight) and torch.equal(layer.bias, expected.bias)
        True
    """
    # Built on the meta device, so that nn.Linear's own initialisation draws nothing.
    layer = nn.utils.skip_init(nn.Linear, in_features, out_features)
    nn.init.kaiming_uniform_(layer.weight, a=math.sqrt(5), generator=generator)
    bound = 1.0 / math.sqrt(in_features) if in_features > 0 else 0.0
    nn.init.uniform_(layer.bias, -bound, bound, generator=generator)
    return layer
