r"""Fit policies: how a BO run refits its surrogate at every step.

- :class:`ColdFit`: a fresh fit on all data at every step.
- :class:`ContinualFit`: warm-started refits from the previous step's model, with a
  cold fit every ``cold_refit_every`` steps and when the held-out error on the newest
  batch degrades (:mod:`botorch_nn_uq.bo.continual`).
- :class:`StreamingFit`: for results that stream in (an asynchronous run), a refit only
  after ``every`` new results or ``seconds`` since the last fit, warm-started or cold;
  the asks in between reuse the last model.

Whatever the policy, an ``ask`` fits at most once, on every result told so far
(:meth:`FitPolicy.refit_due` says whether it fits at all).

A policy's decisions depend only on the data, the previous model and its own state
(:meth:`FitPolicy.state_dict`), which the run state saves, so a run continued from a
saved state fits exactly as an uninterrupted one.
"""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from typing import Any

from botorch.models.model import Model
from torch import Tensor

from botorch_nn_uq.bo.continual import ContinualTraining, ContinualTrainingState
from botorch_nn_uq.bo.surrogates import SURROGATES, SurrogateSpec
from botorch_nn_uq.checks import Interval, check_real_number, is_int_in_range
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

    def refit_due(self, num_new: int) -> bool:
        r"""Whether an ``ask`` that has a model already refits, given ``num_new``
        results told since that model's fit; if not, the ask proposes with the last
        model. Default: always (every ask fits, so a run's fits do not depend on whether
        its model was kept in memory)."""
        return True

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


class StreamingFit(FitPolicy):
    r"""Refits for results that stream in: after every ``every`` new results, or
    ``seconds`` after the last fit, each refit on all results told so far.

    An ask refits when at least ``every`` results were told since the last fit, or when
    at least one was and ``seconds`` have passed since it; otherwise it proposes with the
    last model. So an ask waits on one fit at most, and with several results told since
    the last fit it fits once on all of them. A refit continues from the last model
    (``warm_start``: :class:`ContinualFit`'s schedule) or starts afresh
    (:class:`ColdFit`). The last model is saved with the run state (the surrogate must
    be able to restore one), so a run continued from its file reuses the same model.
    ``seconds`` makes the fits depend on the clock: a seeded run is then repeatable only
    up to the timing of its results.

    Args:
        every: Refit after this many new results (1: after every result).
        seconds: Also refit when this many seconds have passed since the last fit and a
            result is new; ``None``: only ``every`` decides.
        warm_start: ``True`` (:class:`ContinualTraining`'s defaults), a
            :class:`ContinualTraining` schedule, or ``False`` for cold refits.

    Example:
        >>> StreamingFit(every=4, seconds=60.0, warm_start=ContinualTraining(50))
    """

    needs_previous_model = True

    def __init__(
        self,
        every: int = 1,
        seconds: float | None = None,
        warm_start: bool | ContinualTraining = True,
    ) -> None:
        if not is_int_in_range(every, minimum=1):
            raise ValueError(f"every must be a positive integer; got {every!r}.")
        check_real_number("seconds", seconds, Interval(0.0, lower_closed=False), optional=True)
        if not isinstance(warm_start, (bool, ContinualTraining)):
            raise TypeError(
                f"warm_start must be a bool or a ContinualTraining; got {warm_start!r}."
            )
        self.every = every
        self.seconds = None if seconds is None else float(seconds)
        self.warm_start = warm_start
        self.inner: FitPolicy = (
            ColdFit()
            if warm_start is False
            else ContinualFit(None if warm_start is True else warm_start)
        )
        #: The fits so far, and the time (``time.time()``) of the last one.
        self.fits = 0
        self.last_fit_time: float | None = None

    def check(self, surrogate: SurrogateSpec) -> None:
        self.inner.check(surrogate)
        if surrogate.restore is None:
            raise ValueError(
                f"Surrogate {surrogate.name!r} cannot restore a saved model (no restore); "
                "StreamingFit keeps the last model with the run state."
            )

    def refit_due(self, num_new: int) -> bool:
        if num_new >= self.every:
            return True
        return (
            num_new > 0
            and self.seconds is not None
            and (self.last_fit_time is None or time.time() - self.last_fit_time >= self.seconds)
        )

    def fit(self, surrogate: SurrogateSpec, data: FitData, previous: Model | None) -> Model:
        model = self.inner.fit(surrogate, data, previous)
        self.fits += 1
        self.last_fit_time = time.time()
        return model

    @property
    def last_fit_was_warm(self) -> bool:
        return self.inner.last_fit_was_warm

    def state_dict(self) -> dict[str, Any]:
        return {
            "fits": self.fits,
            "last_fit_time": self.last_fit_time,
            "inner": self.inner.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if set(state) != {"fits", "last_fit_time", "inner"}:
            raise ValueError(f"Unexpected streaming-fit state {sorted(state)}.")
        if not is_int_in_range(state["fits"]):
            raise ValueError(f"fits must be a non-negative integer; got {state['fits']!r}.")
        check_real_number("last_fit_time", state["last_fit_time"], optional=True)
        self.inner.load_state_dict(state["inner"])
        self.fits, self.last_fit_time = state["fits"], state["last_fit_time"]

    def to_config(self) -> dict[str, Any]:
        return {
            "type": "streaming",
            "every": self.every,
            "seconds": self.seconds,
            "warm_start": self.warm_start
            if isinstance(self.warm_start, bool)
            else asdict(self.warm_start),
        }


def fit_policy_from_config(config: dict[str, Any]) -> FitPolicy:
    r"""The policy a :meth:`FitPolicy.to_config` describes."""
    options = dict(config)
    kind = options.pop("type", None)
    if kind == "streaming" and set(options) == {"every", "seconds", "warm_start"}:
        warm_start = options["warm_start"]
        return StreamingFit(
            options["every"],
            options["seconds"],
            ContinualTraining(**warm_start) if isinstance(warm_start, dict) else warm_start,
        )
    if kind == "cold" and not options:
        return ColdFit()
    if kind == "continual":
        return ContinualFit(ContinualTraining(**options))
    raise ValueError(f"Unknown fit policy {config!r}.")
