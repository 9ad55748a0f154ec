"""Seed handling: every fit is reproducible from one integer seed."""

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
