r"""A TuRBO-style trust region for the BO loop, for any surrogate.

TuRBO (Eriksson et al., NeurIPS 2019) owes its results on 20-D to 200-D problems to
local modelling: proposals are restricted to a hyper-rectangle around the best point,
which doubles after ``success_tolerance`` improving batches in a row, halves after
``failure_tolerance`` batches without improvement, and starts over at its initial size
when it has shrunk below ``length_min``. Here the region restricts where proposals go
(the candidates of batch Thompson sampling, or the box given to ``optimize_acqf``); the
surrogate is still fitted on all data, so the region works with every model of the
package and with BoTorch's GPs. Side lengths are fractions of the problem's box (the
unit cube after normalisation); unlike TuRBO's GP version the region is a cube, since a
network has no lengthscales to stretch it with.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from botorch_nn_uq.checks import is_int_in_range


@dataclass
class TrustRegion:
    r"""The state of one trust region.

    Args:
        dim: The input dimension ``d``.
        batch_size: Evaluations per BO step ``q``, or ``None``: each told batch's size
            (the failure tolerance then follows the batch size the run asks for).
        length: The current side length (fraction of the box).
        length_min: Below this side length the region starts over at ``length_init``.
        length_max: The largest side length.
        length_init: The side length at the start and after a restart.
        success_tolerance: Improving batches in a row that double the side length.
        failure_tolerance: Batches without improvement in a row that halve it;
            ``None`` uses TuRBO's ``ceil(max(4 / q, d / q))`` (:meth:`tolerance`).
        best_value: The best observation so far (to maximise).
        successes: Improving batches in a row.
        failures: Batches without improvement in a row.
        restarts: How often the region started over.

    Example:
        >>> region = TrustRegion(dim=20, batch_size=100)
        >>> region.update(torch.tensor([1.0, 3.0]))  # first batch sets the incumbent
        >>> region.box(center=torch.full((20,), 0.5), bounds=bounds)  # 2 x 20
    """

    dim: int
    batch_size: int | None = None
    length: float = 0.8
    length_min: float = 0.5**7
    length_max: float = 1.6
    length_init: float = 0.8
    success_tolerance: int = 3
    failure_tolerance: int | None = None
    best_value: float = -math.inf
    successes: int = 0
    failures: int = 0
    restarts: int = 0

    def __post_init__(self) -> None:
        if self.dim < 1 or (self.batch_size is not None and self.batch_size < 1):
            raise ValueError(
                f"dim and batch_size must be positive; got {self.dim} and {self.batch_size}."
            )
        if not 0 < self.length_min <= self.length_init <= self.length_max:
            raise ValueError(
                "Need 0 < length_min <= length_init <= length_max; got "
                f"{self.length_min}, {self.length_init}, {self.length_max}."
            )
        if self.failure_tolerance is None and self.batch_size is not None:
            self.failure_tolerance = self.tolerance(self.batch_size)
        # A region restored from a saved run: its state must be one the updates reach.
        if not self.length_min <= self.length <= self.length_max:
            raise ValueError(
                f"length must lie in [length_min, length_max] = [{self.length_min}, "
                f"{self.length_max}]; got {self.length}."
            )
        counts = {
            "success_tolerance": self.success_tolerance,
            "failure_tolerance": self.failure_tolerance,
            "successes": self.successes,
            "failures": self.failures,
            "restarts": self.restarts,
        }
        for name, count in counts.items():
            if name == "failure_tolerance" and count is None:
                continue
            least = 1 if name.endswith("tolerance") else 0
            if not is_int_in_range(count, minimum=least):
                raise ValueError(f"{name} must be an integer of at least {least}; got {count!r}.")
        if math.isnan(self.best_value) or self.best_value == math.inf:
            raise ValueError(f"best_value must be a number or -inf; got {self.best_value}.")

    def tolerance(self, batch_size: int) -> int:
        r"""The failure tolerance for batches of ``batch_size``: the given one, or
        TuRBO's ``ceil(max(4 / q, d / q))``."""
        if self.failure_tolerance is not None:
            return self.failure_tolerance
        return math.ceil(max(4 / batch_size, self.dim / batch_size))

    def update(self, batch_Y: Tensor) -> None:
        r"""Record a batch's observations (to maximise) and resize the region.

        A batch improves when its best value beats the incumbent by more than
        ``1e-3 |incumbent|`` (TuRBO's rule). The first batch only sets the incumbent.

        Args:
            batch_Y: A ``q``-tensor (or ``q x 1``) of the batch's observations.
        """
        batch_best = float(batch_Y.max())
        if math.isinf(self.best_value):
            self.best_value = batch_best
            return
        if batch_best > self.best_value + 1e-3 * abs(self.best_value):
            self.successes, self.failures = self.successes + 1, 0
        else:
            self.successes, self.failures = 0, self.failures + 1
        if self.successes >= self.success_tolerance:
            self.length, self.successes = min(2 * self.length, self.length_max), 0
        elif self.failures >= self.tolerance(batch_Y.shape[0]):
            self.length, self.failures = self.length / 2, 0
        self.best_value = max(self.best_value, batch_best)
        if self.length < self.length_min:
            self.length, self.restarts = self.length_init, self.restarts + 1

    def box(self, center: Tensor, bounds: Tensor, scale: float = 1.0) -> Tensor:
        r"""The region around ``center``, clipped to the problem's box.

        Args:
            center: A ``d``-tensor (problem units), usually the best point so far.
            bounds: The ``2 x d`` box of the problem.
            scale: A factor on the side length (e.g. 4 for the neighbourhood a
                region-local fit normalises its inputs to).

        Returns:
            A ``2 x d`` tensor of the region's lower and upper bounds (problem units).
        """
        half = 0.5 * scale * self.length * (bounds[1] - bounds[0])
        return torch.stack(
            [torch.maximum(center - half, bounds[0]), torch.minimum(center + half, bounds[1])]
        )
