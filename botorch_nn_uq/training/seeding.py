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


@contextmanager
def global_rng_generator() -> Iterator[torch.Generator]:
    r"""A CPU :class:`torch.Generator` that continues torch's global random stream.

    The generator starts from the global CPU RNG's state and, when the block ends (also
    on an exception), the global RNG resumes from the generator's state: drawing from
    the generator inside the block is exactly drawing from the global RNG. This lets a
    function that takes an explicit generator be called where the randomness comes from
    torch's global RNG (seeded, e.g., with :func:`seeded`) without changing a single
    drawn value. The global RNG must not be drawn from inside the block.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> with global_rng_generator() as generator:
        ...     a = torch.rand(2, generator=generator)
        >>> b = torch.rand(2)
        >>> _ = torch.manual_seed(0)
        >>> torch.equal(a, torch.rand(2)) and torch.equal(b, torch.rand(2))
        True
    """
    generator = torch.Generator()
    generator.set_state(torch.random.get_rng_state())
    try:
        yield generator
    finally:
        torch.random.set_rng_state(generator.get_state())
