r"""Continual training across BO steps: warm-started refits with cold refits on a schedule.

After a BO step adds a batch of points, the network fitted at the previous step is a
good initialisation for the next one: a warm-started refit continues from its weights
for a short schedule (``warm_start_steps`` optimizer steps, at the package's models'
warm-start learning rate, a tenth of their own: see
:data:`~botorch_nn_uq.models.base.WARM_START_LEARNING_RATE_FACTOR`) instead of training a
fresh network for the full budget (the continual-training idea of Brunzema et al., ICLR
2025, for last-layer models). Two safeguards bring back a cold (fresh) fit:

- every ``cold_refit_every`` BO steps, so a run never drifts far from what a cold fit
  would give;
- when the held-out error degrades: the points a BO step has just evaluated were not
  in the previous model's training data, so its error on them is an honest held-out
  error. It is measured as the RMSE of the posterior mean on the new points, divided
  by the standard deviation of all observations; when it exceeds
  ``degradation_factor`` times the same quantity measured at the first step after the
  last cold fit, the next fit is cold.

Everything is a deterministic function of the data and the fit seeds, so a run with
continual training is reproducible from its seed like any other.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from botorch.models.model import Model
from torch import Tensor

from botorch_nn_uq.checks import is_int_in_range


@dataclass(frozen=True)
class ContinualTraining:
    r"""When the BO loop warm-starts a refit and when it refits from scratch.

    Args:
        warm_start_steps: Optimizer steps of a warm-started refit (the model's
            ``max_steps`` for that fit).
        cold_refit_every: A cold refit every this many BO steps (counting the cold
            fits); 1 makes every fit cold.
        degradation_factor: A cold refit when the held-out error on a new batch exceeds
            this factor times its reference value (see the module docstring);
            ``None`` never refits on degradation.

    Example:
        >>> run_bo(problem, "deep-ensemble:ts+continual(warm_start_steps=50)", batch_size=100)
    """

    warm_start_steps: int = 100
    cold_refit_every: int = 10
    degradation_factor: float | None = 2.0

    def __post_init__(self) -> None:
        for name in ("warm_start_steps", "cold_refit_every"):
            value = getattr(self, name)
            if not is_int_in_range(value, minimum=1):
                raise ValueError(f"{name} must be a positive integer; got {value!r}.")
        if self.degradation_factor is not None and not self.degradation_factor >= 1:
            raise ValueError(
                f"degradation_factor must be at least 1 or None; got {self.degradation_factor}."
            )


def held_out_error(model: Model, new_X: Tensor, new_Y: Tensor, all_Y: Tensor) -> float:
    r"""The RMSE of ``model``'s posterior mean on points it was not trained on, in units
    of the standard deviation of all observations.

    Args:
        model: A fitted single-output model.
        new_X: A ``b x d`` tensor of the new points.
        new_Y: A ``b x 1`` tensor of their observations.
        all_Y: An ``n x 1`` tensor of every observation so far (its spread sets the
            unit).

    Returns:
        The standardised held-out RMSE (a float).
    """
    with torch.no_grad():
        mean = model.posterior(new_X).mean
    spread = all_Y.std().clamp_min(1e-12)
    return float((mean - new_Y).pow(2).mean().sqrt() / spread)


class ContinualTrainingState:
    r"""The bookkeeping of :class:`ContinualTraining` inside one BO run.

    Call :meth:`next_fit_is_warm` before each refit and :meth:`record_fit` after it.

    Args:
        policy: The schedule.
    """

    def __init__(self, policy: ContinualTraining) -> None:
        self.policy = policy
        self.fits_since_cold = 0
        self.reference_error: float | None = None
        self.last_error: float | None = None

    def next_fit_is_warm(
        self, previous: Model | None, new_X: Tensor, new_Y: Tensor, all_Y: Tensor
    ) -> bool:
        r"""Whether the coming refit continues from ``previous``.

        Args:
            previous: The model of the previous step (``None`` before the first fit).
            new_X: ``b x d`` points evaluated since ``previous`` was fitted.
            new_Y: ``b x 1`` observations at ``new_X``.
            all_Y: ``n x 1`` observations so far, ``new_Y`` included.

        Returns:
            ``True`` for a warm-started refit, ``False`` for a cold fit.
        """
        if previous is None or self.fits_since_cold + 1 >= self.policy.cold_refit_every:
            return False
        self.last_error = held_out_error(previous, new_X, new_Y, all_Y)
        if self.reference_error is None:
            self.reference_error = self.last_error
            return True
        factor = self.policy.degradation_factor
        return factor is None or self.last_error <= factor * self.reference_error

    def record_fit(self, warm: bool) -> None:
        r"""Note that a fit happened (``warm`` or cold)."""
        if warm:
            self.fits_since_cold += 1
        else:
            self.fits_since_cold = 0
            self.reference_error = None
