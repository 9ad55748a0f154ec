r"""The initial design of a run: the points evaluated before the first model is fitted,
the same for every surrogate and proposer with the same seed."""

from __future__ import annotations

import torch
from torch import Tensor
from torch.quasirandom import SobolEngine

INITIAL_DESIGNS = ("uniform", "sobol")


def initial_design(bounds: Tensor, n: int, seed: int, design: str = "uniform") -> Tensor:
    r"""``n x d`` initial points in the box, the same for every surrogate with ``seed``.

    Args:
        bounds: The ``2 x d`` box.
        n: The number of points.
        seed: Seed of the draw (or of the Sobol scrambling).
        design: ``"uniform"`` (independent uniform points) or ``"sobol"`` (the first
            ``n`` points of a scrambled Sobol sequence, which cover the box evenly).

    Example:
        >>> initial_design(torch.tensor([[0.0, 0.0], [1.0, 2.0]]), 4, seed=0).shape
        torch.Size([4, 2])
    """
    if design not in INITIAL_DESIGNS:
        raise ValueError(f"Unknown design {design!r}; valid: {', '.join(INITIAL_DESIGNS)}.")
    dim = bounds.shape[-1]
    # Drawn on the CPU: the same points whatever the device of the bounds.
    if design == "sobol":
        unit = SobolEngine(dim, scramble=True, seed=seed).draw(n, dtype=bounds.dtype)
    else:
        generator = torch.Generator().manual_seed(seed)
        unit = torch.rand(n, dim, generator=generator, dtype=bounds.dtype)
    return bounds[0] + (bounds[1] - bounds[0]) * unit.to(bounds.device)
