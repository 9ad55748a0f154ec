r"""Proposers: how a BO step turns a fitted model into the next batch.

Every proposer takes the step's model, an
:class:`~botorch_nn_uq.bo.acquisitions.AcquisitionContext` (data, seed, bounds, options) and
the batch size ``q``, and returns a :class:`Proposal`:

- :class:`AcquisitionProposer`: a registered acquisition (or any acquisition builder)
  maximised with BoTorch's ``optimize_acqf``, jointly or point by point
  (``sequential``); or a registered strategy that proposes a batch itself, such as
  batch Thompson sampling (``"ts"``);
- :class:`ScreenedProposer`: the acquisition optimised with its raw samples screened by
  the same acquisition on a sub-bank of the model's functions
  (:func:`~botorch_nn_uq.generation.optimize_acqf_screened`);
- :class:`DynamicCalibrationProposer`: NOMU's BO loop, ``c`` fixed after the first fit
  and doubled while the maximiser is too close to an observed point ("dynamic c");
- :class:`TrustRegionProposer`: any other proposer, restricted to a TuRBO-style trust
  region around the best point (TuRBO-1 itself, with restarts that set the data aside,
  is :class:`~botorch_nn_uq.bo.turbo.TurboProposer`);
- :class:`RandomProposer`: uniformly random points (no model);
- :class:`CandidateSetProposer`: the best of a finite candidate set, never proposing a
  candidate twice, ties broken at random.

A proposer refuses a batch size it cannot serve before any work
(:meth:`Proposer.check_batch_size`): an ``optimize_acqf`` q-acquisition one whose joint
posterior would not fit :data:`ACQUISITION_MEMORY_BUDGET`, Thompson sampling more points
than it has candidates.

Points asked and not yet told reach every proposer in the context (its ``X_pending``,
with the failed points in ``X_failed``): an MC acquisition gets both as BoTorch's
``X_pending`` (:func:`with_pending_points`), Thompson sampling and TuRBO-1 exclude
candidates near them, NOMU's dynamic c keeps its maximiser away from them as from
observed points, and an analytic acquisition, which cannot account for them, refuses to
propose while points are pending (it ignores failed points).

A proposer's state (a trust region, NOMU's fixed ``c``, the candidates used) is saved
with the run state (:meth:`Proposer.state_dict`). Draws that continue across steps come
from the run's random stream, passed to :meth:`Proposer.propose`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch
from botorch.acquisition import AcquisitionFunction, UpperConfidenceBound
from botorch.acquisition.analytic import AnalyticAcquisitionFunction
from botorch.models.model import Model
from botorch.optim import optimize_acqf
from botorch.utils.sampling import manual_seed
from torch import Tensor

from botorch_nn_uq.bo.acquisitions import ACQUISITIONS, AcquisitionContext, get_acquisition
from botorch_nn_uq.bo.batch_limits import (
    ACQUISITION_MEMORY_BUDGET,
    largest_optimize_acqf_batch,
    optimize_acqf_memory,
)
from botorch_nn_uq.bo.objectives import Objective
from botorch_nn_uq.bo.trust_region import TrustRegion
from botorch_nn_uq.calibration import (
    dynamic_calibration_threshold,
    optimize_acqf_with_dynamic_calibration,
)
from botorch_nn_uq.checks import Interval, check_real_number, is_int_in_range
from botorch_nn_uq.generation import optimize_acqf_screened

#: ``builder(model, context) -> AcquisitionFunction``.
AcquisitionBuilder = Callable[[Model, AcquisitionContext], AcquisitionFunction]


@dataclass(frozen=True)
class Proposal:
    r"""A proposed batch.

    Attributes:
        X: ``q x d`` points (problem units).
        details: What the proposer reports of the step (numbers), e.g.
            ``trust_region_length``.
    """

    X: Tensor
    details: dict[str, float] = field(default_factory=dict)


class Proposer(ABC):
    r"""How a BO step proposes a batch."""

    #: Whether the proposer needs a fitted model (random search does not).
    uses_model: bool = True

    @abstractmethod
    def propose(
        self, model: Model | None, context: AcquisitionContext, q: int, random: torch.Generator
    ) -> Proposal:
        r"""The step's batch.

        Args:
            model: The step's fitted model (``None`` if :attr:`uses_model` is false).
            context: The step's data, seed, bounds and options.
            q: The batch size.
            random: The run's random stream (for draws that continue across steps).

        Returns:
            A :class:`Proposal` of ``q`` points.
        """

    @property
    def proposes_batches(self) -> bool:
        r"""Whether it proposes more than one point per step."""
        return True

    def check(self, objective: Objective) -> None:
        r"""Raise a clear error if the proposer cannot serve ``objective``."""
        return None

    def check_batch_size(self, q: int, dim: int) -> None:
        r"""Raise a ``ValueError`` that names the limit and the remedy if the proposer
        cannot propose a batch of ``q`` points in ``dim`` dimensions (one that would not
        fit in memory, or more points than it has candidates). The optimizer calls it
        before any work of a step (and ``run`` before the initial design). Default: no
        limit.

        Args:
            q: The batch size.
            dim: The input dimension ``d``.
        """
        return None

    def fit_rows(self, num_rows: int) -> slice:
        r"""The rows of the run's ``num_rows`` evaluations that the step's surrogate is
        fitted on and that the step's context holds (its incumbent and trust-region
        centre): all of them, unless the proposer sets earlier data aside (a TuRBO
        restart)."""
        return slice(0, num_rows)

    def fit_bounds(self, bounds: Tensor, center: Tensor | None) -> Tensor:
        r"""The box the step's surrogate normalises its inputs to: the problem's
        ``bounds``, unless the proposer fits region-locally (``local_fit`` of the trust
        region proposers).

        Args:
            bounds: The ``2 x d`` box of the problem.
            center: The ``d``-vector incumbent of the step's data (``None`` without
                data).

        Returns:
            A ``2 x d`` box inside ``bounds``.
        """
        return bounds

    def needs_model(self) -> bool:
        r"""Whether this step needs a fitted model (a proposer that uses one may propose
        some steps without it, e.g. the design of a TuRBO restart)."""
        return self.uses_model

    def start(self, n_initial: int) -> None:
        r"""Take note of the size of the run's initial design, when it is asked (or told
        without an ask): its results may then be told in several parts."""
        return None

    def observe(self, X: Tensor, values: Tensor, scores: Tensor) -> None:
        r"""Take note of told results (``q x d`` inputs, their ``q`` values and ranking
        scores, smaller is better), the initial design's first. Every ``tell`` is one
        call, with the points it tells: in an asynchronous run one or a few at a time,
        in the order their results arrive."""
        return None

    def state_dict(self) -> dict[str, Any]:
        r"""The proposer's state (JSON values) for the run state."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        r"""Restore a :meth:`state_dict`."""
        if state:
            raise ValueError(f"{type(self).__name__} has no state; got {sorted(state)}.")

    def to_config(self) -> dict[str, Any] | None:
        r"""A JSON description that
        :func:`~botorch_nn_uq.bo.proposer_configs.proposer_from_config` turns back into the
        proposer (in its initial state), or ``None`` for one that holds code."""
        return None

    def describe(self) -> str:
        r"""A few words for progress output."""
        return type(self).__name__


class SinglePointProposer(Proposer):
    r"""A proposer of one point per step.

    :meth:`~SinglePointProposer.propose` refuses a batch of ``q != 1`` points, naming the
    proposer by :attr:`~SinglePointProposer.single_point_name`; subclasses implement
    :meth:`~SinglePointProposer.propose_point`."""

    #: How the error that refuses a batch names the proposer.
    single_point_name: str = "This proposer"

    @property
    def proposes_batches(self) -> bool:
        return False

    def propose(
        self, model: Model | None, context: AcquisitionContext, q: int, random: torch.Generator
    ) -> Proposal:
        if q != 1:
            raise ValueError(f"{self.single_point_name} proposes one point per step; got q = {q}.")
        return self.propose_point(model, context, random)

    @abstractmethod
    def propose_point(
        self, model: Model | None, context: AcquisitionContext, random: torch.Generator
    ) -> Proposal:
        r"""The step's point.

        Args:
            model: The step's fitted model (``None`` if :attr:`uses_model` is false).
            context: The step's data, seed, bounds and options.
            random: The run's random stream (for draws that continue across steps).

        Returns:
            A :class:`Proposal` of one point (``1 x d``).
        """


class AcquisitionProposer(Proposer):
    r"""A registered acquisition maximised with ``optimize_acqf``, or a registered
    batch-proposing strategy.

    The acquisition is built as Ax builds one (the registry's
    :class:`~botorch_nn_uq.bo.acquisitions.AcquisitionSpec`, through BoTorch's input
    constructors; MC acquisitions get 128 samples seeded with the step's seed), or by a
    builder given as code. ``optimize_acqf`` runs under the step's seed (its raw samples
    and its choice of restarts), so a step proposes the same batch whatever the global
    random state.

    Args:
        acquisition: A registered acquisition name (e.g. ``"logei"``, ``"qlogei"``,
            ``"ts"``) or a builder ``builder(model, context) -> AcquisitionFunction``.
        num_restarts: ``optimize_acqf`` restarts.
        raw_samples: ``optimize_acqf`` raw samples.
        sequential: Maximise a q-batch acquisition greedily, point by point, instead of
            jointly.
        options: Options the acquisition reads (e.g. ``{"beta": 2.0}``; the objective's
            options, such as a target, are added).
        dtype: Optimise in this dtype (a model trained in float32); the batch is cast to
            the bounds' dtype and clamped to them.

    Example:
        >>> AcquisitionProposer("qlogei", sequential=True)
    """

    def __init__(
        self,
        acquisition: str | AcquisitionBuilder = "logei",
        *,
        num_restarts: int = 10,
        raw_samples: int = 512,
        sequential: bool = False,
        options: Mapping[str, Any] | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        self.spec = get_acquisition(acquisition) if isinstance(acquisition, str) else None
        if self.spec is None and not callable(acquisition):
            raise TypeError(
                f"acquisition must be a registered name or a builder; got {acquisition!r}."
            )
        for name, value in (("num_restarts", num_restarts), ("raw_samples", raw_samples)):
            if not is_int_in_range(value, minimum=1):
                raise ValueError(f"{name} must be a positive integer; got {value!r}.")
        if raw_samples < num_restarts and (self.spec is None or self.spec.propose is None):
            raise ValueError(
                f"raw_samples must be at least num_restarts ({num_restarts}); got {raw_samples}."
            )
        self.acquisition = acquisition
        self.num_restarts = num_restarts
        self.raw_samples = raw_samples
        self.sequential = sequential
        self.options = dict(options or {})
        self.dtype = dtype

    @property
    def proposes_batches(self) -> bool:
        return self.spec is None or self.spec.proposes_batches

    def check_batch_size(self, q: int, dim: int) -> None:
        r"""Refuse a batch the acquisition cannot hold: for an MC acquisition maximised
        with ``optimize_acqf``, one whose estimated memory
        (:func:`optimize_acqf_memory`) exceeds :data:`ACQUISITION_MEMORY_BUDGET`; for a
        strategy that proposes batches itself, what its registry entry refuses (``ts``:
        more points than candidates). A builder given as code is not checked (its
        memory is unknown), nor an analytic acquisition (one point per step)."""
        if self.spec is None:
            return
        if self.spec.propose is not None:
            if self.spec.check_batch_size is not None:
                self.spec.check_batch_size(q, dim, self.options)
            return
        if not self.spec.proposes_batches:
            return
        element_size = torch.finfo(self.dtype or torch.float64).bits // 8
        limit = largest_optimize_acqf_batch(
            self.raw_samples, self.num_restarts, element_size=element_size
        )
        if q <= limit:
            return
        needed = optimize_acqf_memory(q, self.raw_samples, self.num_restarts, element_size)
        raise ValueError(
            f"{self.spec.name} cannot propose a batch of q = {q}: optimize_acqf would need "
            f"about {needed / 2**30:,.1f} GiB for it (each of its {self.raw_samples} raw "
            "samples, scored at once, holds the joint posterior over the batch), more than "
            f"the memory budget of {ACQUISITION_MEMORY_BUDGET / 2**30:g} GiB "
            f"(ACQUISITION_MEMORY_BUDGET); at most q = {limit} with {self.raw_samples} raw "
            f"samples and {self.num_restarts} restarts. Ask for a smaller batch or use "
            "fewer raw samples (optimising the batch point by point, sequential, does not "
            "help: its last point is scored jointly with the points chosen before it), or "
            "use ts (Thompson sampling), which proposes batches of thousands of points, up "
            "to its num_candidates."
        )

    def check(self, objective: Objective) -> None:
        if self.spec is None:
            return
        if self.spec.requires_target != objective.requires_target:
            raise ValueError(
                f"Acquisition {self.spec.name!r} "
                + (
                    "needs a target value (a HitTarget objective)."
                    if self.spec.requires_target
                    else "does not take a target value; use a target-value acquisition "
                    f"({', '.join(n for n, s in ACQUISITIONS.items() if s.requires_target)})."
                )
            )
        if objective.mc_objective is not None and (
            self.spec.propose is not None or not self.spec.proposes_batches
        ):
            raise ValueError(
                f"Acquisition {self.spec.name!r} scores the model's single output; a "
                "composite objective needs an MC acquisition (e.g. qlogei, q-leaky-ei)."
            )

    def propose(
        self, model: Model | None, context: AcquisitionContext, q: int, random: torch.Generator
    ) -> Proposal:
        if q > 1 and not self.proposes_batches:
            raise ValueError(
                f"Acquisition {self.spec.name!r} is analytic and proposes one point per step; "
                "for batches use an MC acquisition or ts."
            )
        context = replace(context, options={**self.options, **context.options})
        if self.spec is not None and self.spec.propose is not None:
            return Proposal(self.spec.propose(model, context, q).detach())
        acquisition = with_pending_points(
            self.spec.build(model, context)
            if self.spec is not None
            else self.acquisition(model, context),
            context,
            self.dtype,
        )
        bounds = context.proposal_bounds
        # The options' seed fixes the raw samples, but optimize_acqf picks the restarts
        # among them with torch's global generator (Boltzmann sampling): without a seeded
        # global state, runs of one seed propose different points.
        with manual_seed(context.seed):
            candidates, _ = optimize_acqf(
                acquisition,
                bounds if self.dtype is None else bounds.to(self.dtype),
                q=q,
                num_restarts=self.num_restarts,
                raw_samples=self.raw_samples,
                options={"seed": context.seed},
                sequential=self.sequential and q > 1,
            )
        return Proposal(_in_box(candidates, context.bounds))

    def to_config(self) -> dict[str, Any] | None:
        if self.spec is None or self.dtype is not None:
            return None
        return {
            "type": "acquisition",
            "acquisition": self.spec.name,
            "num_restarts": self.num_restarts,
            "raw_samples": self.raw_samples,
            "sequential": self.sequential,
            "options": self.options,
        }

    def describe(self) -> str:
        name = self.spec.name if self.spec is not None else "custom acquisition"
        return name + (" (sequential)" if self.sequential else "")


class ScreenedProposer(Proposer):
    r"""An acquisition over a model's bank of functions, optimised with its raw samples
    screened by the same acquisition on the bank's first ``screening_functions``
    functions (:func:`~botorch_nn_uq.generation.optimize_acqf_screened`).

    Args:
        acquisition: ``builder(model, context)``; it is called with the model and with
            ``model.function_bank_subset(screening_functions)``.
        screening_functions: The size of the screening sub-bank.
        num_restarts: L-BFGS-B restarts.
        raw_samples: Raw candidate sets screened.
        optimize_on: ``"screening"`` (L-BFGS-B on the screening acquisition) or
            ``"full"``; the proposal is always the best by the full acquisition.
        dtype: Optimise in this dtype (a model trained in float32); the batch is cast to
            the bounds' dtype and clamped to them.
    """

    def __init__(
        self,
        acquisition: AcquisitionBuilder,
        screening_functions: int,
        *,
        num_restarts: int = 10,
        raw_samples: int = 512,
        optimize_on: str = "screening",
        dtype: torch.dtype | None = None,
    ) -> None:
        if isinstance(screening_functions, bool) or screening_functions < 1:
            raise ValueError(
                f"screening_functions must be a positive integer; got {screening_functions!r}."
            )
        self.acquisition = acquisition
        self.screening_functions = screening_functions
        self.num_restarts = num_restarts
        self.raw_samples = raw_samples
        self.optimize_on = optimize_on
        self.dtype = dtype

    def propose(
        self, model: Model | None, context: AcquisitionContext, q: int, random: torch.Generator
    ) -> Proposal:
        bounds = context.proposal_bounds
        with manual_seed(context.seed):
            candidates, _ = optimize_acqf_screened(
                with_pending_points(self.acquisition(model, context), context, self.dtype),
                with_pending_points(
                    self.acquisition(model.function_bank_subset(self.screening_functions), context),
                    context,
                    self.dtype,
                ),
                bounds=bounds if self.dtype is None else bounds.to(self.dtype),
                q=q,
                num_restarts=self.num_restarts,
                raw_samples=self.raw_samples,
                optimize_on=self.optimize_on,
                seed=context.seed,
            )
        return Proposal(_in_box(candidates, context.bounds))


def with_pending_points(
    acquisition: AcquisitionFunction,
    context: AcquisitionContext,
    dtype: torch.dtype | None = None,
) -> AcquisitionFunction:
    r"""``acquisition`` told the step's pending and failed points (``context.X_avoid``)
    as BoTorch's ``X_pending``, so it scores a candidate given that they are being (or
    could not be) evaluated.

    An analytic acquisition cannot take ``X_pending``: it is returned as it is when only
    failed points exist (they are then not avoided), and refused while points are
    pending (it would propose them again).

    Args:
        acquisition: The step's acquisition.
        context: The step's context.
        dtype: The dtype the acquisition is optimised in (``None``: the data's).

    Returns:
        ``acquisition``, its ``X_pending`` set.

    Raises:
        ValueError: If ``acquisition`` is analytic and points are pending.
    """
    avoid = context.X_avoid
    if avoid is None:
        return acquisition
    if isinstance(acquisition, AnalyticAcquisitionFunction):
        if context.X_pending is None:
            return acquisition
        raise ValueError(
            f"{type(acquisition).__name__} is analytic and cannot account for the "
            f"{context.X_pending.shape[0]} pending points (BoTorch's X_pending); ask while "
            "points are pending with an MC acquisition (e.g. qlogei) or ts, or tell the "
            "pending results first."
        )
    acquisition.set_X_pending(avoid if dtype is None else avoid.to(dtype))
    return acquisition


def _upper_confidence_bound(model: Model) -> AcquisitionFunction:
    return UpperConfidenceBound(model, beta=1.0)


class DynamicCalibrationProposer(SinglePointProposer):
    r"""NOMU's BO loop (App. B.3 of the NOMU paper): ``c`` set once, then dynamic c.

    At the first step, MW scaling sets NOMU's calibration constant so that the mean
    width ``2 c mean(sigma)`` over the box is ``mw_factor`` times the standard deviation
    of the observations; ``c`` is then kept for every later fit. The acquisition (by
    default the upper bound ``f + c sigma``, BoTorch's ``UpperConfidenceBound`` with
    ``beta = 1``) is maximised by ``optimize_acqf``; while the maximiser lies closer than
    ``delta_i`` to an observed point, ``c`` is doubled and the maximisation repeated,
    ``delta_i`` decaying from 1/32 to 0.005 of the unit cube over ``horizon`` steps
    (:func:`~botorch_nn_uq.calibration.dynamic_calibration_threshold`). One point per
    step; the step's ``doublings`` are reported.

    Args:
        horizon: The number of BO steps the run is planned for (the decay of
            ``delta_i``).
        mw_factor: The MW target width in standard deviations of the observations.
        make_acquisition: ``make_acquisition(model) -> AcquisitionFunction`` (default
            UCB with ``beta = 1``).
        num_restarts: ``optimize_acqf`` restarts.
        raw_samples: ``optimize_acqf`` raw samples.
    """

    single_point_name = "Dynamic c"

    def __init__(
        self,
        horizon: int,
        mw_factor: float = 0.1,
        make_acquisition: Callable[[Model], AcquisitionFunction] | None = None,
        *,
        num_restarts: int = 10,
        raw_samples: int = 512,
    ) -> None:
        if not is_int_in_range(horizon, minimum=1):
            raise ValueError(f"horizon must be a positive integer; got {horizon!r}.")
        if not mw_factor > 0 or not math.isfinite(mw_factor):
            raise ValueError(f"mw_factor must be positive; got {mw_factor}.")
        self.horizon = horizon
        self.mw_factor = mw_factor
        self.make_acquisition = make_acquisition or _upper_confidence_bound
        self.num_restarts = num_restarts
        self.raw_samples = raw_samples
        self.calibration_constant: Tensor | None = None

    def propose_point(
        self, model: Model | None, context: AcquisitionContext, random: torch.Generator
    ) -> Proposal:
        if context.step > self.horizon:
            raise ValueError(
                f"Step {context.step} is past the horizon ({self.horizon}) of dynamic c."
            )
        if self.calibration_constant is None:
            model.calibrate_mean_width(target_width=self.mw_factor * context.train_Y.std())
            self.calibration_constant = model.calibration_constant.clone()
        model.set_calibration_constant(self.calibration_constant)
        with manual_seed(context.seed):
            result = optimize_acqf_with_dynamic_calibration(
                model,
                self.make_acquisition,
                context.proposal_bounds,
                # Pending and failed points count as observed: a maximiser near one
                # doubles c as a maximiser near an evaluation does.
                context.train_X
                if context.X_avoid is None
                else torch.cat([context.train_X, context.X_avoid]),
                min_distance=dynamic_calibration_threshold(context.step - 1, self.horizon),
                num_restarts=self.num_restarts,
                raw_samples=self.raw_samples,
                options={"seed": context.seed},
            )
        return Proposal(
            result.candidate.detach(),
            {
                "doublings": float(result.doublings),
                "calibration_constant": float(self.calibration_constant[0]),
            },
        )

    def state_dict(self) -> dict[str, Any]:
        constant = self.calibration_constant
        if constant is None:
            return {"calibration_constant": None}
        return {
            "calibration_constant": constant.tolist(),
            "dtype": str(constant.dtype).removeprefix("torch."),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        values = state.get("calibration_constant")
        if values is None:
            self.calibration_constant = None
            return
        dtype = {"float32": torch.float32, "float64": torch.float64}[state["dtype"]]
        self.calibration_constant = torch.tensor(values, dtype=dtype)

    def to_config(self) -> dict[str, Any] | None:
        if self.make_acquisition is not _upper_confidence_bound:
            return None
        return {
            "type": "dynamic-c",
            "horizon": self.horizon,
            "mw_factor": self.mw_factor,
            "num_restarts": self.num_restarts,
            "raw_samples": self.raw_samples,
        }

    def describe(self) -> str:
        return "UCB with NOMU's dynamic c"


class TrustRegionProposer(Proposer):
    r"""Another proposer, restricted to a TuRBO-style trust region around the best
    point (:class:`~botorch_nn_uq.bo.trust_region.TrustRegion`), resized after every
    batch; the surrogate is still fitted on all data.

    With ``local_fit``, the fit is region-local: the surrogate normalises its inputs to
    the region grown ``local_fit`` times around the incumbent (clipped to the box)
    instead of to the whole box, so a region that has shrunk to a few percent of the
    box spans the unit cube the network was initialised for; the points outside that
    neighbourhood still train it (they lie outside the unit cube). A warm start from a
    model normalised to another neighbourhood carries its function over exactly (see
    :meth:`~botorch_nn_uq.models.base.NeuralSurrogateModel.fit`).

    The region's failure tolerance (TuRBO's ``ceil(max(4 / q, d / q))`` unless given)
    follows the size ``q`` of each told batch, so it is the one of the batch size that
    the run's ``ask`` uses. In an asynchronous run every ``tell`` is one batch of the
    results it tells (one result: the sequential tolerance ``max(4, d)``), judged
    against the incumbent when it is told, so a late result counts when it arrives;
    pending points are in flight and count for nothing until told.

    Args:
        inner: The proposer that proposes inside the region.
        local_fit: ``None`` (normalise to the whole box) or the factor, at least 1, by
            which the region grows into the box a region-local fit normalises to.
        **region_options: Further :class:`TrustRegion` arguments (``length_init``,
            ``length_min``, ``success_tolerance``, ...).

    Example:
        >>> TrustRegionProposer(AcquisitionProposer("ts"), local_fit=4.0)
    """

    def __init__(
        self,
        inner: Proposer,
        local_fit: float | None = None,
        **region_options: Any,
    ) -> None:
        if not inner.uses_model:
            raise ValueError(
                f"{inner.describe()} proposes in the whole box; it takes no trust region."
            )
        TrustRegion(1, **region_options)  # checks the options
        self.inner = inner
        self.local_fit = check_local_fit(local_fit)
        self.region_options = region_options
        self.region: TrustRegion | None = None

    @property
    def proposes_batches(self) -> bool:
        return self.inner.proposes_batches

    def check(self, objective: Objective) -> None:
        self.inner.check(objective)

    def check_batch_size(self, q: int, dim: int) -> None:
        self.inner.check_batch_size(q, dim)

    def fit_rows(self, num_rows: int) -> slice:
        return self.inner.fit_rows(num_rows)

    def needs_model(self) -> bool:
        return self.inner.needs_model()

    def fit_bounds(self, bounds: Tensor, center: Tensor | None) -> Tensor:
        return local_fit_bounds(self.region, self.local_fit, bounds, center)

    def start(self, n_initial: int) -> None:
        self.inner.start(n_initial)

    def observe(self, X: Tensor, values: Tensor, scores: Tensor) -> None:
        if self.region is None:
            self.region = TrustRegion(X.shape[-1], **self.region_options)
        self.region.update(-scores)
        self.inner.observe(X, values, scores)

    def propose(
        self, model: Model | None, context: AcquisitionContext, q: int, random: torch.Generator
    ) -> Proposal:
        region = self.region
        box = region.box(context.center, context.bounds)
        proposal = self.inner.propose(model, replace(context, search_bounds=box), q, random)
        return Proposal(proposal.X, {**proposal.details, "trust_region_length": region.length})

    def state_dict(self) -> dict[str, Any]:
        return {
            "region": None if self.region is None else asdict(self.region),
            "inner": self.inner.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.region = None if state["region"] is None else TrustRegion(**state["region"])
        self.inner.load_state_dict(state["inner"])

    def to_config(self) -> dict[str, Any] | None:
        inner = self.inner.to_config()
        if inner is None:
            return None
        return {
            "type": "trust-region",
            "inner": inner,
            "local_fit": self.local_fit,
            "region": self.region_options,
        }

    def describe(self) -> str:
        local = "" if self.local_fit is None else f" (fitted region-locally, x{self.local_fit:g})"
        return f"{self.inner.describe()} in a trust region{local}"


def check_local_fit(local_fit: float | None) -> float | None:
    r"""``local_fit`` as a float, or a clear error unless it is ``None`` or a finite
    number of at least 1."""
    check_real_number("local_fit", local_fit, Interval(1.0), optional=True)
    return None if local_fit is None else float(local_fit)


def local_fit_bounds(
    region: TrustRegion | None, local_fit: float | None, bounds: Tensor, center: Tensor | None
) -> Tensor:
    r"""The box a region-local fit normalises to: ``region`` grown ``local_fit`` times
    around ``center`` and clipped to ``bounds`` (``2 x d``); ``bounds`` itself without
    ``local_fit``, a region or a centre (the initial design's fit)."""
    if local_fit is None or region is None or center is None:
        return bounds
    return region.box(center, bounds, scale=local_fit)


class RandomProposer(Proposer):
    r"""Uniformly random points in the box, from the run's random stream (no model)."""

    uses_model = False

    def propose(
        self, model: Model | None, context: AcquisitionContext, q: int, random: torch.Generator
    ) -> Proposal:
        bounds = context.bounds
        # Drawn on the CPU (the run's random stream): the same points on any device.
        unit = torch.rand(q, bounds.shape[-1], generator=random, dtype=bounds.dtype)
        return Proposal(bounds[0] + (bounds[1] - bounds[0]) * unit.to(bounds.device))

    def to_config(self) -> dict[str, Any]:
        return {"type": "random"}

    def describe(self) -> str:
        return "random search"


class CandidateSetProposer(SinglePointProposer):
    r"""The best point of a finite candidate set by an acquisition, one point per step,
    never a candidate proposed before; ties (and, without an acquisition, every choice)
    are broken uniformly at random from the run's random stream.

    Args:
        candidates: ``N x d`` candidate points (problem units).
        acquisition: ``builder(model, context)`` scoring ``N' x 1 x d`` candidates, or
            ``None`` to choose uniformly at random (no model).
    """

    single_point_name = "A candidate set"

    def __init__(self, candidates: Tensor, acquisition: AcquisitionBuilder | None = None) -> None:
        if candidates.dim() != 2 or candidates.shape[0] < 1:
            raise ValueError(f"candidates must be N x d; got shape {tuple(candidates.shape)}.")
        self.candidates = candidates
        self.acquisition = acquisition
        self.uses_model = acquisition is not None
        self.used = torch.zeros(candidates.shape[0], dtype=torch.bool, device=candidates.device)

    def propose_point(
        self, model: Model | None, context: AcquisitionContext, random: torch.Generator
    ) -> Proposal:
        available = (~self.used).nonzero().squeeze(-1)
        if available.numel() == 0:
            raise ValueError("Every candidate has been proposed.")
        if self.acquisition is None:
            scores = self.candidates.new_zeros(available.numel())
        else:
            with torch.no_grad():
                scores = self.acquisition(model, context)(self.candidates[available].unsqueeze(-2))
        tied = (scores == scores.max()).nonzero().squeeze(-1)
        index = available[tied[torch.randint(len(tied), (1,), generator=random)]]
        self.used[index] = True
        return Proposal(self.candidates[index].reshape(1, -1))

    def state_dict(self) -> dict[str, Any]:
        return {"used": self.used.nonzero().squeeze(-1).tolist()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        candidates = self.candidates
        self.used = torch.zeros(candidates.shape[0], dtype=torch.bool, device=candidates.device)
        self.used[torch.as_tensor(state["used"], dtype=torch.long, device=candidates.device)] = True


def _in_box(candidates: Tensor, bounds: Tensor) -> Tensor:
    r"""Candidates as points of the problem: in the ``2 x d`` ``bounds``' dtype and
    clamped to them (a bound rounded to float32, e.g. 0.01, can lie just outside the
    float64 box)."""
    return candidates.detach().to(bounds).clamp(bounds[0], bounds[1])
