"""Seed handling: every fit is reproducible from one integer seed.

Randomness travels with the data: :meth:`NeuralSurrogateModel.fit
<botorch_nn_uq.models.base.NeuralSurrogateModel.fit>` turns its seed into a
``torch.Generator`` and hands it down to everything that draws (network initialisation,
mini-batch order, dropout masks, validation splits, member seeds, search decisions,
NOMU's artificial inputs, NEON's epistemic indices, in a fixed order), so the library
draws nothing from torch's global generator during a fit. A fit touches the global
generator in two ways only: :func:`resolve_seed` draws the seed of an unseeded fit from
it (so that ``torch.manual_seed`` before ``fit()`` makes the fit reproducible), and
:func:`seeded` fixes it, and restores it afterwards, around third-party calls that draw
from it and take no generator (BoTorch's ``fit_gpytorch_mll`` fitting a GP).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from botorch_nn_uq.checks import check_seed


def resolve_seed(seed: int | None) -> int:
    r"""Return ``seed``, or draw one from torch's global RNG if it is ``None`` (so that
    ``torch.manual_seed`` before an unseeded fit still makes it reproducible).

    Raises:
        ValueError: If ``seed`` is not ``None`` or an integer in ``[0, 2**64)``, the
            seeds ``torch.manual_seed`` accepts.
    """
    if seed is None:
        return int(torch.randint(0, 2**31 - 1, (1,)).item())
    check_seed("seed", seed)
    return int(seed)


def draw_seed(generator: torch.Generator) -> int:
    r"""A seed in ``[0, 2**31 - 1)`` drawn from ``generator`` (e.g. a member seed of a
    search whose randomness comes from one generator)."""
    return int(torch.randint(0, 2**31 - 1, (1,), generator=generator))


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    r"""Run the enclosed block with torch's global RNG seeded to ``seed`` and restore
    the previous RNG state afterwards, so the block's randomness depends on ``seed``
    alone and the caller's random stream is untouched.

    Example:
        >>> with seeded(0):
        ...     a = torch.rand(2)
        >>> with seeded(0):
        ...     b = torch.rand(2)
        >>> torch.equal(a, b)
        True
    """
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        yield
