r"""Fit policies: how a BO run refits its surrogate at every step.

- :class:`ColdFit`: a fresh fit on all data at every step.
- :class:`ContinualFit`: warm-started refits from the previous step's model, with a
  cold fit every ``cold_refit_every`` steps and when the held-out error on the newest
  batch degrades (:mod:`botorch_nn_uq.bo.continual`).

A policy's decisions depend only on the data, the previous model and its own state
(:meth:`FitPolicy.state_dict`), which the run state saves, so a run continued from a
saved state fits exactly as an uninterrupted one.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from typing import Any

from botorch.models.model import Model
from torch import Tensor

from botorch_nn_uq.bo.continual import ContinualTraining, ContinualTrainingState
from botorch_nn_uq.bo.surrogates import SURROGATES, SurrogateSpec
from botorch_nn_uq.checks import is_int_in_range
from botorch_nn_uq.models.input_transforms import InputCoordinatesError
from botorch_nn_uq.training import NonFiniteLossError


@dataclass(frozen=True)
class FitData:
    r"""The data of one step's fit.

    Attributes:
        train_X: ``n x d`` inputs (problem units).
        train_Y: ``n x k`` model targets (to maximise).
        bounds: ``2 x d`` box.
        seed: The step's seed.
        num_new: How many of the last rows were evaluated after the previous fit.
    """

    train_X: Tensor
    train_Y: Tensor
    bounds: Tensor
    seed: int
    num_new: int


class FitPolicy(ABC):
    r"""When a step's fit is warm-started and how."""

    #: Whether the policy needs the previous step's model (the run then keeps it and
    #: saves its ``state_dict`` with the run state).
    needs_previous_model: bool = False

    @abstractmethod
    def fit(self, surrogate: SurrogateSpec, data: FitData, previous: Model | None) -> Model:
        r"""The step's fitted model.

        Args:
            surrogate: How to build the model.
            data: The step's data and seed.
            previous: The previous step's model (``None`` at the first step, or when
                the policy does not keep one).

        Returns:
            The fitted model; :attr:`last_fit_was_warm` says how it was fitted.
        """

    @property
    def last_fit_was_warm(self) -> bool:
        r"""Whether the last :meth:`fit` continued from the previous model."""
        return False

    def check(self, surrogate: SurrogateSpec) -> None:
        r"""Raise a clear error if the policy cannot fit ``surrogate``."""
        return None

    def state_dict(self) -> dict[str, Any]:
        r"""The policy's state (JSON values) for the run state."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        r"""Restore a :meth:`state_dict`."""
        return None

    def to_config(self) -> dict[str, Any]:
        r"""A JSON description that :func:`fit_policy_from_config` turns back into the
        policy (in its initial state)."""
        raise NotImplementedError


class ColdFit(FitPolicy):
    r"""A fresh fit on all data at every step, seeded with the step's seed."""

    def fit(self, surrogate: SurrogateSpec, data: FitData, previous: Model | None) -> Model:
        return surrogate.build(data.train_X, data.train_Y, data.bounds, data.seed)

    def to_config(self) -> dict[str, Any]:
        return {"type": "cold"}


class ContinualFit(FitPolicy):
    r"""Warm-started refits on the schedule of :class:`ContinualTraining`.

    A warm-started refit that diverges (:class:`~botorch_nn_uq.training.NonFiniteLossError`:
    a non-finite loss, or a loss that ends clearly above the warm start's), or that the
    model cannot take because the previous model was normalised to another box and its
    network cannot be re-expressed there
    (:class:`~botorch_nn_uq.models.input_transforms.InputCoordinatesError`: a region-local
    fit whose neighbourhood moved), is replaced by a cold refit of the same step, which
    counts as the step's fit.

    Args:
        schedule: Steps of a warm-started refit, how often a cold refit comes, and the
            degradation factor that brings one early.

    Example:
        >>> ContinualFit(ContinualTraining(warm_start_steps=100, cold_refit_every=10))
    """

    needs_previous_model = True

    def __init__(self, schedule: ContinualTraining | None = None) -> None:
        self.schedule = ContinualTraining() if schedule is None else schedule
        self._state = ContinualTrainingState(self.schedule)
        self._warm = False

    def check(self, surrogate: SurrogateSpec) -> None:
        if not surrogate.supports_warm_start:
            warm = ", ".join(
                sorted(name for name, spec in SURROGATES.items() if spec.supports_warm_start)
            )
            raise ValueError(
                f"Surrogate {surrogate.name!r} does not support warm-started refits; continual "
                f"training needs one that does (registered: {warm})."
            )

    def fit(self, surrogate: SurrogateSpec, data: FitData, previous: Model | None) -> Model:
        warm = False
        if previous is not None and data.num_new > 0:
            # The held-out error is measured in the previous model's dtype.
            dtype = next(iter(previous.parameters()), data.train_Y).dtype
            train_Y = data.train_Y.to(dtype)
            warm = self._state.next_fit_is_warm(
                previous,
                data.train_X[-data.num_new :].to(dtype),
                train_Y[-data.num_new :],
                train_Y,
            )
        model = None
        if warm:
            try:
                model = surrogate.build(
                    data.train_X,
                    data.train_Y,
                    data.bounds,
                    data.seed,
                    warm_start=previous,
                    max_steps=self.schedule.warm_start_steps,
                )
            except (NonFiniteLossError, InputCoordinatesError):
                warm = False
        if model is None:
            model = surrogate.build(data.train_X, data.train_Y, data.bounds, data.seed)
        self._state.record_fit(warm)
        self._warm = warm
        return model

    @property
    def last_fit_was_warm(self) -> bool:
        return self._warm

    def state_dict(self) -> dict[str, Any]:
        return {
            "fits_since_cold": self._state.fits_since_cold,
            "reference_error": self._state.reference_error,
            "last_error": self._state.last_error,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if set(state) != {"fits_since_cold", "reference_error", "last_error"}:
            raise ValueError(f"Unexpected continual-training state {sorted(state)}.")
        fits = state["fits_since_cold"]
        if not is_int_in_range(fits):
            raise ValueError(f"fits_since_cold must be a non-negative integer; got {fits!r}.")
        for name in ("reference_error", "last_error"):
            error = state[name]
            valid = isinstance(error, (int, float)) and not isinstance(error, bool)
            if error is not None and not (valid and math.isfinite(error) and error >= 0):
                raise ValueError(f"{name} must be a non-negative number or None; got {error!r}.")
        self._state.fits_since_cold = fits
        self._state.reference_error = state["reference_error"]
        self._state.last_error = state["last_error"]

    def to_config(self) -> dict[str, Any]:
        return {"type": "continual", **asdict(self.schedule)}


def fit_policy_from_config(config: dict[str, Any]) -> FitPolicy:
    r"""The policy a :meth:`FitPolicy.to_config` describes."""
    options = dict(config)
    kind = options.pop("type", None)
    if kind == "cold" and not options:
        return ColdFit()
    if kind == "continual":
        return ContinualFit(ContinualTraining(**options))
    raise ValueError(f"Unknown fit policy {config!r}.")
