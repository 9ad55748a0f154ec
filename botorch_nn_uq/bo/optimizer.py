r"""The BO core: an ask/tell optimizer that runs the package's strategies on any objective.

:class:`BayesianOptimizer` holds a run's state (:class:`~botorch_nn_uq.bo.state.RunState`)
and its components: the objective (:mod:`botorch_nn_uq.bo.objectives`), the surrogate
(:mod:`botorch_nn_uq.bo.surrogates`), the fit policy (:mod:`botorch_nn_uq.bo.fitting`)
and the proposer (:mod:`botorch_nn_uq.bo.proposers`). ``ask(q)`` fits the surrogate and
proposes a batch, ``tell(X, Y)`` adds its evaluations, ``best()`` is the best evaluation
so far, ``save``/``load`` write and read the state, and ``run(problem, steps)`` is
nothing but ask, evaluate, tell.

**Asynchronous runs**: points, not batches, are pending. ``ask_trials(q)`` gives new
points with their ids (``ask`` the points alone), and may be called while points are
pending: the proposer takes them into account. ``tell(ids_or_X, Y)`` takes the results
of any pending points, in any order, one or many; ``tell_failed(ids_or_X, reason)``
records points whose evaluation failed (never fitted, never asked again, avoided by the
proposers). A result told twice, or of a point never asked, is refused
(:class:`~botorch_nn_uq.bo.pending.NotPendingError`);
:class:`~botorch_nn_uq.bo.fitting.StreamingFit` refits only after ``k`` results or ``t``
seconds.

Every random draw follows the one seeding rule of
:func:`~botorch_nn_uq.bo.state.step_seed`, so a run gives the same proposals through
``run``, through ask/tell in one process, and through ask/tell across processes with
the state saved and loaded between steps.

Example:
    >>> optimizer = BayesianOptimizer(bounds, surrogate="deep-ensemble", proposer="ts")
    >>> X = optimizer.ask()              # the initial design
    >>> optimizer.tell(X, evaluate(X))
    >>> X = optimizer.ask(q=10)          # one BO step
    >>> optimizer.tell(X, evaluate(X))
    >>> optimizer.best().x
    >>> ids, X, step = optimizer.ask_trials(3)  # three workers; each tells its own
    >>> optimizer.tell(ids[1:2], evaluate(X[1:2]))
    >>> optimizer.tell_failed(ids[0], "node lost")
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

import torch
from botorch.exceptions.warnings import InputDataWarning
from botorch.models.model import Model
from torch import Tensor

from botorch_nn_uq.bo.acquisitions import AcquisitionContext
from botorch_nn_uq.bo.designs import INITIAL_DESIGNS, initial_design
from botorch_nn_uq.bo.fitting import ColdFit, FitData, FitPolicy
from botorch_nn_uq.bo.objectives import (
    Minimize,
    Objective,
    Problem,
    as_real_tensor,
    check_bounds,
)
from botorch_nn_uq.bo.pending import Points, Trials, are_ids, pending_rows
from botorch_nn_uq.bo.proposers import (
    AcquisitionProposer,
    Proposer,
    RandomProposer,
)
from botorch_nn_uq.bo.saved_config import describe_component, load_optimizer
from botorch_nn_uq.bo.state import (
    MAX_REASON_CHARS,
    FailedPoints,
    PendingPoints,
    RunState,
    StepCost,
    StepRecord,
    check_seed,
    step_seed,
)
from botorch_nn_uq.bo.state_file import same_file
from botorch_nn_uq.bo.strategy import Strategy, as_strategy
from botorch_nn_uq.bo.surrogates import RANDOM_SEARCH, SurrogateSpec, get_surrogate
from botorch_nn_uq.checks import is_int_in_range
from botorch_nn_uq.metrics import batch_diversity


class BestPoint(NamedTuple):
    r"""The best evaluation of a run.

    Attributes:
        x: Its ``d`` inputs.
        value: Its objective value.
        outputs: Its ``m`` outputs.
        index: Its row in the run's data.
    """

    x: Tensor
    value: float
    outputs: Tensor
    index: int


#: ``callback(record, X, Y)`` after every told batch of :meth:`BayesianOptimizer.run`.
RunCallback = Callable[[StepRecord, Tensor, Tensor], None]


class EvaluationsNotToldError(ValueError):
    r"""A batch of :meth:`BayesianOptimizer.run` was evaluated but ``tell`` refused its
    outputs; the batch is still pending, and nothing of the run changed.

    Attributes:
        X: The ``q x d`` asked points.
        Y: What the problem returned for them, to tell once usable.
    """

    def __init__(self, message: str, X: Tensor, Y: Tensor) -> None:
        super().__init__(message)
        self.X = X
        self.Y = Y


class BayesianOptimizer:
    r"""Bayesian optimisation by ask and tell, with the package's strategies.

    Args:
        bounds: The ``2 x d`` box of the inputs (a tensor or nested sequence; a
            sequence is read as float64).
        surrogate: A registered surrogate name (``"gp"``, ``"deep-ensemble"``, ...), a
            :class:`~botorch_nn_uq.bo.surrogates.SurrogateSpec`, or ``None`` for a
            proposer that needs no model (random search).
        proposer: A :class:`~botorch_nn_uq.bo.proposers.Proposer`, a registered
            acquisition name (maximised with ``optimize_acqf``, or ``"ts"``), or
            ``"random"``.
        objective: How the outputs rank evaluations (default :class:`Minimize`).
        fit_policy: How the surrogate is refitted (default :class:`ColdFit`).
        seed: The run's seed (see :func:`~botorch_nn_uq.bo.state.step_seed`).
        n_initial: Points of the initial design (the first ``ask``).
        design: The initial design, ``"uniform"`` or ``"sobol"``.
        strategy: A :class:`~botorch_nn_uq.bo.strategy.Strategy` or its spelling (e.g.
            ``"deep-ensemble:ts+turbo+bts+local(4)"``), which builds the surrogate, the
            proposer and the fit policy; then leave those three at their defaults.

    Example:
        >>> optimizer = BayesianOptimizer([[0.0] * 3, [1.0] * 3], strategy="gp:logei")
        >>> problem = FunctionProblem(my_function, [[0.0] * 3, [1.0] * 3])
        >>> records = optimizer.run(problem, steps=20)
        >>> optimizer.best().value
    """

    def __init__(
        self,
        bounds: Tensor | Sequence[Sequence[float]],
        *,
        surrogate: str | SurrogateSpec | None = "gp",
        proposer: Proposer | str = "logei",
        objective: Objective | None = None,
        fit_policy: FitPolicy | None = None,
        seed: int = 0,
        n_initial: int = 8,
        design: str = "uniform",
        strategy: Strategy | str | None = None,
    ) -> None:
        bounds = bounds if isinstance(bounds, Tensor) else torch.tensor(bounds, dtype=torch.float64)
        self.bounds = check_bounds(bounds)
        self.objective = Minimize() if objective is None else objective
        #: The strategy the components were built from (``None``: given as components).
        self.strategy = None if strategy is None else as_strategy(strategy)
        if self.strategy is not None:
            if not (surrogate == "gp" and proposer == "logei" and fit_policy is None):
                raise ValueError(
                    "Give a strategy or the surrogate, proposer and fit policy, not both."
                )
            self.strategy.check(self.objective)
            surrogate = self.strategy.surrogate()
            proposer = self.strategy.proposer()
            fit_policy = self.strategy.fit_policy()
        if isinstance(proposer, str):
            proposer = (
                RandomProposer() if proposer == RANDOM_SEARCH else AcquisitionProposer(proposer)
            )
        if not isinstance(proposer, Proposer):
            raise TypeError(f"proposer must be a Proposer or a name; got {proposer!r}.")
        self.proposer = proposer
        self.proposer.check(self.objective)
        if not proposer.uses_model:
            surrogate = None
        elif surrogate is None:
            raise ValueError(f"{proposer.describe()} needs a surrogate.")
        self.surrogate = get_surrogate(surrogate) if isinstance(surrogate, str) else surrogate
        self.fit_policy = ColdFit() if fit_policy is None else fit_policy
        if self.surrogate is not None:
            self.fit_policy.check(self.surrogate)
        if not is_int_in_range(n_initial, minimum=2):
            raise ValueError(f"n_initial must be an integer of at least 2; got {n_initial!r}.")
        if design not in INITIAL_DESIGNS:
            raise ValueError(f"Unknown design {design!r}; valid: {', '.join(INITIAL_DESIGNS)}.")
        self.n_initial = n_initial
        self.design = design
        self.state = RunState.empty(check_seed(seed), self.bounds, self._config())
        self._random = torch.Generator()
        self._random.set_state(self.state.random_state)
        #: The model of the last step (``None`` before the first BO step).
        self.model: Model | None = None
        #: The state file this optimizer last read or wrote, and the checksum of that
        #: state (compare-before-write in :meth:`save`).
        self._file: tuple[Path, str] | None = None

    @classmethod
    def for_problem(cls, problem: Problem, **options: Any) -> BayesianOptimizer:
        r"""An optimizer with the problem's bounds and objective; ``options`` are the
        other arguments of :class:`BayesianOptimizer`."""
        return cls(problem.bounds, objective=problem.objective, **options)

    # Data -------------------------------------------------------------------------------

    @property
    def X(self) -> Tensor:
        r"""``n x d`` evaluated inputs."""
        return self.state.X

    @property
    def Y(self) -> Tensor:
        r"""``n x m`` observed outputs."""
        return self.state.Y

    @property
    def values(self) -> Tensor:
        r"""``n`` objective values."""
        return self.state.values

    @property
    def records(self) -> list[StepRecord]:
        r"""One record per ``tell`` (the initial design's first), in the order told."""
        return self.state.records

    @property
    def step(self) -> int:
        r"""The next step to propose (0: the initial design)."""
        return self.state.step

    @property
    def pending(self) -> Tensor | None:
        r"""The ``p x d`` points asked and not yet told, in the order asked (``None``
        when none is pending)."""
        return self.state.pending.X.clone() if len(self.state.pending) else None

    @property
    def pending_ids(self) -> Tensor:
        r"""The ``p`` ids of the :attr:`pending` points (``int64``; empty when none)."""
        return self.state.pending.ids.clone()

    @property
    def failed(self) -> FailedPoints:
        r"""The points told as failed, with their ids, steps and reasons."""
        failed = self.state.failed
        return FailedPoints(
            failed.ids.clone(), failed.X.clone(), failed.steps.clone(), [*failed.reasons]
        )

    def best(self) -> BestPoint:
        r"""The best evaluation so far (the smallest score of the objective)."""
        if self.state.X.shape[0] == 0:
            raise ValueError("No evaluation has been told yet.")
        index = int(self.objective.scores(self.state.values).argmin())
        return BestPoint(
            self.state.X[index].clone(),
            float(self.state.values[index]),
            self.state.Y[index].clone(),
            index,
        )

    # Ask and tell -----------------------------------------------------------------------

    def ask(self, q: int | None = None) -> Tensor:
        r"""The next points to evaluate, as a tensor (:meth:`ask_trials` gives their ids
        too).

        Args:
            q: The batch size of a BO step.

        Returns:
            A ``q x d`` tensor of points in the box.
        """
        return self.ask_trials(q).X

    def ask_trials(self, q: int | None = None) -> Trials:
        r"""The next points to evaluate, with their ids.

        The first ask is the initial design (``n_initial`` points; ``q`` must then be
        ``None`` or ``n_initial``). Every later ask fits the surrogate (as the fit policy
        says: at most one fit, on every result told so far) and proposes ``q`` new points
        (default 1). Asking while points are pending proposes new points that take the
        pending ones into account: an MC acquisition gets them as BoTorch's
        ``X_pending``, Thompson sampling and TuRBO-1 leave them (and the failed points)
        out of their candidates; an analytic acquisition cannot and refuses. A BO step
        needs at least one told result when its proposer fits a model.

        Args:
            q: The batch size of a BO step.

        Returns:
            :class:`~botorch_nn_uq.bo.pending.Trials`: the ``q`` new ids, the ``q x d``
            points and the step.

        Raises:
            ValueError: If ``q`` is a batch size the proposer cannot serve, or the
                proposer needs a model and no result has been told yet.
        """
        state = self.state
        if state.step == 0:
            if q is not None and q != self.n_initial:
                raise ValueError(
                    f"The first batch is the initial design of n_initial = {self.n_initial} "
                    f"points; ask without q (or with q = {self.n_initial})."
                )
            X = initial_design(self.bounds, self.n_initial, self.state.seed, self.design)
            self.proposer.start(self.n_initial)
            cost = StepCost()
        else:
            q = 1 if q is None else q
            self._check_batch_size(q)
            X, cost = self._propose(q)
        step = state.step
        ids = torch.arange(state.next_id, state.next_id + X.shape[0], device=X.device)
        asked = PendingPoints(
            ids,
            X,
            torch.full_like(ids, step),
            torch.full((X.shape[0],), time.time(), dtype=torch.float64, device=X.device),
        )
        state.pending = state.pending.append(asked)
        state.ask_costs[step] = cost
        state.next_id += X.shape[0]
        state.step += 1
        return Trials(ids.clone(), X.clone(), step)

    def _check_batch_size(self, q: int) -> None:
        r"""Refuse a BO step's batch size ``q`` that the proposer cannot serve (e.g. one
        whose acquisition would not fit in memory), before any work."""
        if not is_int_in_range(q, minimum=1):
            raise ValueError(f"q must be a positive integer; got {q!r}.")
        if q > 1 and not self.proposer.proposes_batches:
            raise ValueError(
                f"{self.proposer.describe()} proposes one point per step; got q = {q}."
            )
        self.proposer.check_batch_size(q, self.bounds.shape[-1])

    def _propose(self, q: int) -> tuple[Tensor, StepCost]:
        r"""A BO step's ``q x d`` points and the cost of the ask."""
        state = self.state
        seed = step_seed(state.seed, state.step)
        start, cpu_start = time.perf_counter(), time.process_time()
        rows = self.proposer.fit_rows(state.X.shape[0])
        train_X, train_Y = state.X[rows], self.objective.model_targets(state.Y)[rows]
        center = (
            train_X[self.objective.scores(state.values[rows]).argmin()]
            if train_X.shape[0]
            else None
        )
        model, fit_seconds, warm, fit_points = None, 0.0, False, 0
        fit_bounds = self.proposer.fit_bounds(self.bounds, center)
        region_local = fit_bounds is not self.bounds
        if self.proposer.needs_model():
            if train_X.shape[0] == 0:
                raise ValueError(
                    f"{self.proposer.describe()} has no told result to fit a model on "
                    f"({len(state.pending)} points are pending); tell a result before "
                    "asking for more points."
                )
            # The last model continues (or serves again) only if it was fitted on rows
            # the step keeps.
            keeps_previous = state.model_num_points > rows.start
            num_new = state.X.shape[0] - state.model_num_points
            if self.model is not None and keeps_previous and not self.fit_policy.refit_due(num_new):
                model, fit_points = self.model, state.model_num_points - rows.start
            else:
                previous = (
                    self.model if self.fit_policy.needs_previous_model and keeps_previous else None
                )
                data = FitData(
                    train_X=train_X,
                    train_Y=train_Y,
                    bounds=fit_bounds,
                    seed=seed,
                    num_new=num_new if previous is not None else 0,
                )
                with _quiet_outside_fit_box(region_local):
                    model = self.fit_policy.fit(self.surrogate, data, previous)
                warm = self.fit_policy.last_fit_was_warm
                fit_seconds = time.perf_counter() - start
                fit_points = train_X.shape[0]
                self.model, state.model_num_points = model, state.X.shape[0]
        # Failed points told with a penalty are in the data; the others are avoided.
        unfitted = state.failed.X[~torch.isin(state.failed.ids, state.ids)]
        context = AcquisitionContext(
            train_X=train_X,
            train_Y=train_Y,
            bounds=self.bounds,
            seed=seed,
            options=self.objective.acquisition_options(),
            center=center,
            objective=self.objective.mc_objective,
            step=state.step,
            X_pending=self.pending,
            X_failed=unfitted if unfitted.shape[0] else None,
        )
        with _quiet_outside_fit_box(region_local):
            proposal = self.proposer.propose(model, context, q, self._random)
        X = self._check_proposal(proposal.X, q)
        diversity = batch_diversity(X, self.bounds)
        state.random_state = self._random.get_state()
        cost = StepCost(
            seconds=time.perf_counter() - start,
            cpu_seconds=time.process_time() - cpu_start,
            fit_seconds=fit_seconds,
            fit_points=fit_points,
            warm_start=warm,
            batch_min_distance=diversity.min_distance,
            batch_duplicates=diversity.duplicates,
            details=dict(proposal.details),
        )
        return X, cost

    def _check_proposal(self, X: Tensor, q: int) -> Tensor:
        if X.shape != (q, self.bounds.shape[-1]):
            raise RuntimeError(
                f"{self.proposer.describe()} proposed a batch of shape {tuple(X.shape)}; "
                f"expected ({q}, {self.bounds.shape[-1]})."
            )
        X = X.detach().to(self.bounds)
        if not X.isfinite().all() or not ((X >= self.bounds[0]) & (X <= self.bounds[1])).all():
            raise RuntimeError(f"{self.proposer.describe()} proposed points outside the box.")
        return X

    def tell(self, points: Points, Y: Tensor) -> StepRecord:
        r"""Add the results of pending points: any of them, in any order, one or many.

        ``points`` names the told points by their ids (as :meth:`ask_trials` gave them)
        or by their rows (each matched to a pending point, up to
        :data:`~botorch_nn_uq.bo.pending.MATCH_TOLERANCE` of the box's side, as a CSV that
        rounds its inputs needs; a point pending twice is told twice); the asked points
        are stored. Before anything was asked, ``tell`` adds evaluations made beforehand
        as the initial design instead.

        Args:
            points: ``q`` ids (integers) or ``q x d`` evaluated inputs.
            Y: ``q x m`` outputs (``q`` for one output); finite.

        Returns:
            The :class:`~botorch_nn_uq.bo.state.StepRecord` of this tell: its step is the
            latest ask among the told points, and it carries the cost of the asks whose
            first results it tells.

        Raises:
            NotPendingError: If a point is not pending (told already, failed, never
                asked) or named twice.
            ValueError: If the outputs have the wrong shape, are complex or not finite,
                or ``points`` is neither ids nor ``q x d`` rows. Nothing changes then.
        """
        state = self.state
        # Outputs may come from anywhere (a user's function returns CPU numbers, or a
        # tensor still attached to its autograd graph); the run keeps them detached, on
        # its own device.
        Y = as_real_tensor(Y, "Told outputs", self.bounds.dtype, self.bounds.device)
        if state.step == 0 and not are_ids(points):
            X = self._check_points(as_real_tensor(points, "Told inputs"))
            ids = torch.arange(X.shape[0], device=X.device)
            now = torch.full((X.shape[0],), time.time(), dtype=torch.float64, device=X.device)
            told, rows = PendingPoints(ids, X, torch.zeros_like(ids), now), None
        else:
            rows = pending_rows(points, self.state, self.bounds)
        Y = self.objective.check_outputs(Y)
        count = len(told) if rows is None else rows.shape[0]
        if Y.shape[0] != count:
            raise ValueError(f"Got {Y.shape[0]} outputs for {count} points.")
        if state.Y.shape[0] and Y.shape[-1] != state.Y.shape[-1]:
            raise ValueError(
                f"Got {Y.shape[-1]} outputs per point; the run has {state.Y.shape[-1]}."
            )
        # Checked: from here on the tell changes the run.
        if rows is None:
            self.proposer.start(len(told))
            state.next_id, state.step, costs = len(told), 1, []
        else:
            # Stored in the order asked, whatever the order told, so that a batch told
            # in any order gives the same data (and the same fits).
            rows, order = rows.sort()
            told, Y = state.pending.select(rows), Y[order]
            # An ask's cost goes with the first results told from it.
            steps = sorted(set(told.steps.tolist()) & set(state.ask_costs))
            costs = [state.ask_costs.pop(step) for step in steps]
            self._drop_pending(rows)
        values = self.objective.values(Y)
        state.X = torch.cat([state.X, told.X])
        state.Y = Y.clone() if state.Y.shape[0] == 0 else torch.cat([state.Y, Y])
        state.values = torch.cat([state.values, values])
        state.ids = torch.cat([state.ids, told.ids])
        scores = self.objective.scores(values)
        record = StepRecord(
            step=int(told.steps.max()),
            num_evaluations=state.X.shape[0],
            value=float(values[scores.argmin()]),
            best_value=float(state.values[self.objective.scores(state.values).argmin()]),
            cost=_merged_costs(costs),
        )
        state.records.append(record)
        self.proposer.observe(told.X, values, scores)
        return record

    def tell_failed(
        self,
        points: Points,
        reason: str | Sequence[str],
        *,
        penalty: Tensor | float | Sequence[float] | None = None,
    ) -> StepRecord | None:
        r"""Record that the evaluation of pending points failed (crashed, timed out, was
        lost), with a reason; they leave the pending set and are never asked again.

        The policy for the model, by default: a failed point is never fitted (it has no
        value), and it stays among the points the proposers avoid (with the pending
        ones: an MC acquisition's ``X_pending``, Thompson sampling's and TuRBO-1's
        excluded candidates), so a failing point is not proposed again by accident; an
        analytic acquisition, which cannot take such points, ignores it. With
        ``penalty``, the failed points are also told as evaluations with those outputs
        (e.g. the worst value seen), so the model learns that the region fails; they
        then count as results (records, the trust region, the best point if the penalty
        is the best value).

        Args:
            points: ``f`` ids or ``f x d`` rows of pending points (as :meth:`tell`).
            reason: One reason for all of them, or one per point.
            penalty: ``None``, or the outputs told for each failed point: a number (one
                output) or ``m`` numbers.

        Returns:
            ``None``, or with ``penalty`` the record of the penalised evaluations.

        Raises:
            NotPendingError: If a point is not pending or named twice.
            ValueError: If the reasons are not text, or not one per point, or the
                penalty is not finite outputs of the run's shape. Nothing changes then.
        """
        rows = pending_rows(points, self.state, self.bounds)
        reasons = [reason] * rows.shape[0] if isinstance(reason, str) else list(reason)
        if len(reasons) != rows.shape[0] or not all(isinstance(r, str) for r in reasons):
            raise ValueError(
                f"Give one reason (text) or one per failed point ({rows.shape[0]}); got {reason!r}."
            )
        if any(len(r) > MAX_REASON_CHARS for r in reasons):
            raise ValueError(f"A reason holds at most {MAX_REASON_CHARS} characters.")
        state = self.state
        failed = state.pending.select(rows)
        record = None
        if penalty is not None:
            outputs = as_real_tensor(penalty, "penalty", self.bounds.dtype, self.bounds.device)
            if outputs.dim() > 1:
                raise ValueError(f"penalty must be a number or m numbers; got {outputs.shape}.")
            # Checked by tell, which changes nothing if it refuses them.
            record = self.tell(failed.ids, outputs.expand(rows.shape[0], *outputs.shape))
        else:
            self._drop_pending(rows)
        state.failed = FailedPoints(
            torch.cat([state.failed.ids, failed.ids]),
            torch.cat([state.failed.X, failed.X]),
            torch.cat([state.failed.steps, failed.steps]),
            [*state.failed.reasons, *reasons],
        )
        return record

    def _drop_pending(self, rows: Tensor) -> None:
        r"""Remove the pending points at ``rows``, and the unreported cost of an ask
        none of whose points is pending any more (all its points failed)."""
        state = self.state
        keep = torch.ones(len(state.pending), dtype=torch.bool, device=rows.device)
        keep[rows] = False
        state.pending = state.pending.select(keep)
        asked = set(state.pending.steps.tolist())
        state.ask_costs = {step: cost for step, cost in state.ask_costs.items() if step in asked}

    def _check_points(self, X: Tensor) -> Tensor:
        if X.dim() != 2 or X.shape[-1] != self.bounds.shape[-1] or X.shape[0] < 2:
            raise ValueError(
                f"Initial evaluations must be an n x {self.bounds.shape[-1]} tensor with n >= 2; "
                f"got shape {tuple(X.shape)}."
            )
        X = X.to(self.bounds)
        if not X.isfinite().all() or not ((X >= self.bounds[0]) & (X <= self.bounds[1])).all():
            raise ValueError("Initial evaluations must lie inside the bounds.")
        return X

    # The loop ---------------------------------------------------------------------------

    def run(
        self,
        problem: Problem,
        steps: int,
        q: int = 1,
        *,
        callback: RunCallback | None = None,
        time_budget: float | None = None,
        cpu_budget: float | None = None,
    ) -> list[StepRecord]:
        r"""Ask, evaluate, tell: the initial design (if not asked yet), then ``steps``
        BO steps of ``q`` points. Points pending before the call stay pending (their
        results are told by whoever evaluates them), and the steps take them into
        account.

        Args:
            problem: What to evaluate (:class:`~botorch_nn_uq.bo.objectives.Problem`); its
                bounds must be the optimizer's.
            steps: BO steps after the initial design.
            q: Points per step.
            callback: ``callback(record, X, Y)`` after every told batch (e.g. to write
                each evaluation to disk as it happens).
            time_budget: Stop after the step at which the steps' cumulative ``ask``
                seconds pass this budget; ``None`` runs all ``steps``.
            cpu_budget: Stop after the step at which the steps' cumulative ``ask``
                process CPU seconds pass this budget (a cap that other jobs on a shared
                machine do not shorten); ``None`` runs all ``steps``.

        Returns:
            The records of the batches told by this call.

        Raises:
            ValueError: If ``q`` is a batch size the proposer cannot serve (before the
                initial design is evaluated).
            EvaluationsNotToldError: If ``tell`` refuses a batch's outputs (the error
                holds the points and outputs; the points stay pending).
        """
        if not torch.equal(problem.bounds.to(self.bounds), self.bounds):
            raise ValueError("The problem's bounds are not the optimizer's.")
        if not is_int_in_range(steps):
            raise ValueError(f"steps must be a non-negative integer; got {steps!r}.")
        for name, budget in (("time_budget", time_budget), ("cpu_budget", cpu_budget)):
            if budget is not None and not budget > 0:
                raise ValueError(f"{name} must be positive or None; got {budget}.")
        if steps > 0:
            # A batch size the proposer cannot serve would fail after the initial design
            # was evaluated.
            self._check_batch_size(q)
        records: list[StepRecord] = []

        def evaluate(q: int | None) -> None:
            ids, X, step = self.ask_trials(q)
            # The problem gets a copy: an objective that changes its input in place must
            # not change the points told.
            Y = problem.evaluate(X.clone())
            try:
                records.append(self.tell(ids, Y))
            except ValueError as error:
                raise EvaluationsNotToldError(
                    f"The outputs of {problem.name} at the {X.shape[0]} points of step "
                    f"{step} were evaluated but not told: {error} The points are still "
                    "pending; this error's X and Y hold them and their outputs, to tell "
                    f"once usable (the run keeps its {self.state.X.shape[0]} earlier "
                    "evaluations).",
                    X,
                    Y,
                ) from error
            if callback is not None:
                callback(records[-1], X, self.state.Y[-X.shape[0] :])

        if self.state.step == 0:
            evaluate(None)
        for _ in range(steps):
            evaluate(q)
            if time_budget is not None and time_budget < sum(
                record.seconds for record in self.state.records
            ):
                break
            if cpu_budget is not None and cpu_budget < sum(
                record.cpu_seconds for record in self.state.records
            ):
                break
        return records

    # Saving and loading -----------------------------------------------------------------

    def _config(self) -> dict[str, Any]:
        return {
            "strategy": None if self.strategy is None else str(self.strategy),
            "bounds": self.bounds.tolist(),
            "objective": self.objective.to_config(),
            "surrogate": None if self.surrogate is None else describe_component(self.surrogate),
            "proposer": self.proposer.to_config(),
            "fit_policy": self.fit_policy.to_config(),
            "n_initial": self.n_initial,
            "design": self.design,
        }

    def save(self, path: str | Path, *, overwrite: bool = False) -> None:
        r"""Write the run's state to ``path`` atomically (see
        :class:`~botorch_nn_uq.bo.state.RunState`): data, records, seed and step, the
        pending and failed points, the random stream, the fit policy's and the proposer's
        states, and the last model's weights where the fit policy keeps it.

        Compare-before-write: a file this optimizer was loaded from or saved to is
        replaced only if it still holds what the optimizer read or wrote there (another
        command that wrote it meanwhile is not erased); any other existing file is
        replaced only with ``overwrite``.

        Args:
            path: The state file.
            overwrite: Replace ``path`` whatever it holds.

        Raises:
            StateFileError: If the file changed since this optimizer read or wrote it
                (:class:`~botorch_nn_uq.bo.state_file.StaleStateFileError`), exists
                though the optimizer never read it (without ``overwrite``), or another
                command holds its lock
                (:class:`~botorch_nn_uq.bo.state_file.StateFileBusyError`).
            OSError: If the file cannot be written; the file is then unchanged.
        """
        state = self.state
        state.fit_state = self.fit_policy.state_dict()
        state.proposer_state = self.proposer.state_dict()
        state.model_state = None
        if self.fit_policy.needs_previous_model and self.model is not None:
            if self.surrogate.restore is None:
                raise ValueError(
                    f"Surrogate {self.surrogate.name!r} cannot rebuild a model from its "
                    "state_dict (no restore); a continual run with it cannot be saved."
                )
            state.model_state = self.model.state_dict()
        path = Path(path)
        known = self._file is not None and same_file(self._file[0], path)
        digest = state.save(path, replaces=self._file[1] if known else None, overwrite=overwrite)
        self._file = (path, digest)

    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        device: str | torch.device | None = None,
        surrogate: str | SurrogateSpec | None = None,
        proposer: Proposer | None = None,
        objective: Objective | None = None,
        fit_policy: FitPolicy | None = None,
    ) -> BayesianOptimizer:
        r"""The run saved at ``path``, ready to continue.

        Components saved by name (registered surrogates and acquisitions, the built-in
        objectives, proposers and fit policies) are rebuilt from the file; a component
        given as code (a custom proposer, a composite objective's ``g``) must be passed
        again, and a passed component must equal the saved one.

        Args:
            path: The state file.
            device: The device of the run's tensors (default: the CPU).
            surrogate: The surrogate, if it was given as code (or to check it).
            proposer: The proposer, if it was given as code (or to check it).
            objective: The objective, if it was given as code (or to check it).
            fit_policy: The fit policy, if it was given as code (or to check it).

        Raises:
            StateFileError: If the file is not a run state of this version, is corrupted
                or holds an unexpected layout.
            ValueError: If a component is missing or differs from the saved one, or
                ``device`` is not available.
        """
        return load_optimizer(
            cls,
            path,
            device=device,
            surrogate=surrogate,
            proposer=proposer,
            objective=objective,
            fit_policy=fit_policy,
        )


def _merged_costs(costs: list[StepCost]) -> StepCost:
    r"""One cost for the asks a record reports (in step order): their times summed,
    the rest the latest ask's; an empty cost when it reports none."""
    if not costs:
        return StepCost()
    return replace(
        costs[-1],
        seconds=sum(cost.seconds for cost in costs),
        cpu_seconds=sum(cost.cpu_seconds for cost in costs),
        fit_seconds=sum(cost.fit_seconds for cost in costs),
    )


@contextmanager
def _quiet_outside_fit_box(region_local: bool) -> Iterator[None]:
    r"""For a region-local fit, silence BoTorch's ``InputDataWarning``: such a model
    normalises its inputs to a neighbourhood of the trust region on purpose, so its
    training data and an acquisition's baseline points outside it lie outside the unit
    cube."""
    with warnings.catch_warnings():
        if region_local:
            warnings.simplefilter("ignore", InputDataWarning)
        yield
