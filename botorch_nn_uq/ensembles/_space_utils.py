r"""Helpers shared by the architecture and hyperparameter search spaces: the integer
check of their fields and the draws from an explicit :class:`torch.Generator`."""

from __future__ import annotations

from typing import Any

import torch


def is_int(value: Any) -> bool:
    r"""Whether ``value`` is a Python ``int`` and not a ``bool``."""
    # bool is an int subclass; True as a width or a patience is a bug, not a 1.
    return isinstance(value, int) and not isinstance(value, bool)


def randint(low: int, high: int, generator: torch.Generator) -> int:
    r"""A uniform integer in ``[low, high)`` drawn from ``generator``."""
    return int(torch.randint(low, high, (1,), generator=generator).item())


def uniform(generator: torch.Generator) -> float:
    r"""A uniform float in ``[0, 1)`` drawn from ``generator``."""
    return float(torch.rand(1, generator=generator, dtype=torch.float64).item())
