r"""The BO core: an ask/tell optimizer that runs the package's strategies on any objective.

:class:`BayesianOptimizer` holds a run's state (:class:`~botorch_nn_uq.bo.state.RunState`)
and its components: the objective (:mod:`botorch_nn_uq.bo.objectives`), the surrogate
(:mod:`botorch_nn_uq.bo.surrogates`), the fit policy (:mod:`botorch_nn_uq.bo.fitting`)
and the proposer (:mod:`botorch_nn_uq.bo.proposers`). ``ask(q)`` fits the surrogate and
proposes a batch, ``tell(X, Y)`` adds its evaluations, ``best()`` is the best evaluation
so far, ``save``/``load`` write and read the state, and ``run(problem, steps)`` is
nothing but ask, evaluate, tell. Every random draw follows the one seeding rule of
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
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import torch
from botorch.exceptions.warnings import InputDataWarning
from botorch.models.model import Model
from torch import Tensor
from torch.quasirandom import SobolEngine

from botorch_nn_uq.bo.acquisitions import AcquisitionContext
from botorch_nn_uq.bo.fitting import ColdFit, FitData, FitPolicy, fit_policy_from_config
from botorch_nn_uq.bo.objectives import (
    Minimize,
    Objective,
    Problem,
    as_real_tensor,
    check_bounds,
    objective_from_config,
)
from botorch_nn_uq.bo.proposer_configs import proposer_from_config
from botorch_nn_uq.bo.proposers import (
    AcquisitionProposer,
    Proposer,
    RandomProposer,
)
from botorch_nn_uq.bo.state import (
    PendingBatch,
    RunState,
    StateFileError,
    StepCost,
    StepRecord,
    check_seed,
    step_seed,
)
from botorch_nn_uq.bo.state_file import same_file
from botorch_nn_uq.bo.strategy import Strategy, as_strategy
from botorch_nn_uq.bo.surrogates import RANDOM_SEARCH, SurrogateSpec, get_surrogate
from botorch_nn_uq.checks import check_device, is_int_in_range
from botorch_nn_uq.metrics import batch_diversity

INITIAL_DESIGNS = ("uniform", "sobol")
#: Told inputs match asked ones within this fraction of the box's side (a CSV that
#: rounds the inputs it was given).
MATCH_TOLERANCE = 1e-9


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
        r"""One record per told batch (the initial design first)."""
        return self.state.records

    @property
    def step(self) -> int:
        r"""The next step to propose (0: the initial design)."""
        return self.state.step

    @property
    def pending(self) -> Tensor | None:
        r"""The ``q x d`` batch asked and not yet told, if any."""
        return None if self.state.pending is None else self.state.pending.X.clone()

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
        r"""The next batch to evaluate.

        The first batch is the initial design (``n_initial`` points; ``q`` must then be
        ``None`` or ``n_initial``). Every later call fits the surrogate (as the fit
        policy says) and proposes ``q`` points (default 1). Asking again before the
        batch was told returns the same batch.

        Args:
            q: The batch size of a BO step.

        Returns:
            A ``q x d`` tensor of points in the box.
        """
        pending = self.state.pending
        if pending is not None:
            if q is None or q == pending.X.shape[0]:
                return pending.X.clone()
            raise ValueError(
                f"The batch of step {pending.step} ({pending.X.shape[0]} points) was asked and "
                f"not told; tell its results before asking for a batch of {q}."
            )
        if self.state.step == 0:
            if q is not None and q != self.n_initial:
                raise ValueError(
                    f"The first batch is the initial design of n_initial = {self.n_initial} "
                    f"points; ask without q (or with q = {self.n_initial})."
                )
            X = initial_design(self.bounds, self.n_initial, self.state.seed, self.design)
            self.state.pending = PendingBatch(step=0, X=X)
            return X.clone()
        q = 1 if q is None else q
        self._check_batch_size(q)
        self.state.pending = self._propose(q)
        return self.state.pending.X.clone()

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

    def _propose(self, q: int) -> PendingBatch:
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
        model, fit_seconds, warm = None, 0.0, False
        fit_bounds = self.proposer.fit_bounds(self.bounds, center)
        region_local = fit_bounds is not self.bounds
        if self.proposer.needs_model():
            # The last model continues only if it was fitted on rows the step keeps.
            keeps_previous = state.model_num_points > rows.start
            previous = (
                self.model if self.fit_policy.needs_previous_model and keeps_previous else None
            )
            data = FitData(
                train_X=train_X,
                train_Y=train_Y,
                bounds=fit_bounds,
                seed=seed,
                num_new=state.X.shape[0] - state.model_num_points if previous is not None else 0,
            )
            with _quiet_outside_fit_box(region_local):
                model = self.fit_policy.fit(self.surrogate, data, previous)
            warm = self.fit_policy.last_fit_was_warm
            fit_seconds = time.perf_counter() - start
            self.model, state.model_num_points = model, state.X.shape[0]
        context = AcquisitionContext(
            train_X=train_X,
            train_Y=train_Y,
            bounds=self.bounds,
            seed=seed,
            options=self.objective.acquisition_options(),
            center=center,
            objective=self.objective.mc_objective,
            step=state.step,
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
            fit_points=train_X.shape[0] if model is not None else 0,
            warm_start=warm,
            batch_min_distance=diversity.min_distance,
            batch_duplicates=diversity.duplicates,
            details=dict(proposal.details),
        )
        return PendingBatch(step=state.step, X=X, cost=cost)

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

    def tell(self, X: Tensor, Y: Tensor) -> StepRecord:
        r"""Add the evaluations of the asked batch.

        ``X`` must hold the asked points (in any order, each once; a told point may
        differ from the asked one by rounding, up to ``MATCH_TOLERANCE`` of the box's
        side); the asked points are stored. Before anything was asked, ``tell`` adds
        evaluations made beforehand as the initial design instead.

        Args:
            X: ``q x d`` evaluated inputs.
            Y: ``q x m`` outputs (``q`` for one output); finite.

        Returns:
            The batch's :class:`~botorch_nn_uq.bo.state.StepRecord`.

        Raises:
            ValueError: If no batch is pending (e.g. this batch was told already), the
                rows do not match the asked ones (missing, extra or repeated points),
                ``X`` or ``Y`` is complex, or the outputs have the wrong shape or
                non-finite values. Nothing changes then.
        """
        state = self.state
        X = as_real_tensor(X, "Told inputs")
        # Outputs may come from anywhere (a user's function returns CPU numbers, or a
        # tensor still attached to its autograd graph); the run keeps them detached, on
        # its own device.
        Y = as_real_tensor(Y, "Told outputs", self.bounds.dtype, self.bounds.device)
        pending = state.pending
        if pending is None:
            if state.step > 0:
                raise ValueError(
                    f"No batch is pending: the batch of step {state.step - 1} was told "
                    "already; ask for the next one first."
                )
            pending = PendingBatch(step=0, X=self._check_points(X))
        order = self._match(X, pending.X)
        Y = self.objective.check_outputs(Y)
        if Y.shape[0] != X.shape[0]:
            raise ValueError(f"Got {Y.shape[0]} outputs for {X.shape[0]} points.")
        if state.Y.shape[0] and Y.shape[-1] != state.Y.shape[-1]:
            raise ValueError(
                f"Got {Y.shape[-1]} outputs per point; the run has {state.Y.shape[-1]}."
            )
        Y = Y[order]
        values = self.objective.values(Y)
        state.X = torch.cat([state.X, pending.X])
        state.Y = Y.clone() if state.Y.shape[0] == 0 else torch.cat([state.Y, Y])
        state.values = torch.cat([state.values, values])
        scores = self.objective.scores(values)
        record = StepRecord(
            step=pending.step,
            num_evaluations=state.X.shape[0],
            value=float(values[scores.argmin()]),
            best_value=float(state.values[self.objective.scores(state.values).argmin()]),
            cost=pending.cost,
        )
        state.records.append(record)
        self.proposer.observe(pending.X, values, scores)
        state.step, state.pending = state.step + 1, None
        return record

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

    def _match(self, X: Tensor, asked: Tensor) -> Tensor:
        r"""For each asked row, the row of ``X`` that holds it; a clear error unless
        ``X`` holds every asked point exactly once (a batch may ask for one point
        several times; it is then told as often)."""
        if X.dim() != 2 or X.shape[-1] != asked.shape[-1]:
            raise ValueError(
                f"Told inputs must be a q x {asked.shape[-1]} tensor; got shape {tuple(X.shape)}."
            )
        X = X.to(asked)
        if X.shape == asked.shape and torch.equal(X, asked):
            return torch.arange(asked.shape[0], device=asked.device)
        tolerance = MATCH_TOLERANCE * (self.bounds[1] - self.bounds[0])
        close = ((X.unsqueeze(1) - asked.unsqueeze(0)).abs() <= tolerance).all(-1)
        unmatched = (~close.any(1)).nonzero().squeeze(-1).tolist()
        if unmatched:
            raise ValueError(
                f"Told rows {unmatched} are not points of the asked batch (step {self.state.step})."
            )
        # Told rows take the asked rows they match in order, so repeated asked points
        # are matched one to one.
        order = torch.full((asked.shape[0],), -1, dtype=torch.long, device=asked.device)
        repeated = []
        for row, candidates in enumerate(close):
            free = (candidates & (order < 0)).nonzero().squeeze(-1)
            if free.numel() == 0:
                repeated.append(int(candidates.nonzero()[0]))
            else:
                order[free[0]] = row
        missing = (order < 0).nonzero().squeeze(-1).tolist()
        if repeated or missing:
            raise ValueError(
                f"The told rows must hold each of the {asked.shape[0]} asked points once; "
                + (f"asked points {sorted(set(repeated))} are repeated" if repeated else "")
                + ("; " if repeated and missing else "")
                + (f"asked points {missing} are missing" if missing else "")
                + "."
            )
        return order

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
        r"""Ask, evaluate, tell: the initial design (if not told yet), then ``steps``
        BO steps of ``q`` points.

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
                holds the points and outputs; the batch stays pending).
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
            X = self.ask(q)
            # The problem gets a copy: an objective that changes its input in place must
            # not change the points told.
            Y = problem.evaluate(X.clone())
            try:
                records.append(self.tell(X, Y))
            except ValueError as error:
                raise EvaluationsNotToldError(
                    f"The outputs of {problem.name} at the {X.shape[0]} points of step "
                    f"{self.state.step} were evaluated but not told: {error} The batch is "
                    "still pending; this error's X and Y hold its points and outputs, to "
                    f"tell once usable (the run keeps its {self.state.X.shape[0]} earlier "
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
            "surrogate": None if self.surrogate is None else _describe(self.surrogate),
            "proposer": self.proposer.to_config(),
            "fit_policy": self.fit_policy.to_config(),
            "n_initial": self.n_initial,
            "design": self.design,
        }

    def save(self, path: str | Path, *, overwrite: bool = False) -> None:
        r"""Write the run's state to ``path`` atomically (see
        :class:`~botorch_nn_uq.bo.state.RunState`): data, records, seed and step, the
        pending batch, the random stream, the fit policy's and the proposer's states, and
        the last model's weights where the fit policy warm-starts from them.

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
        state, digest = RunState.read(path)
        if device is not None:
            state.to(check_device("device", device))
        config = state.config
        expected = {"bounds", "objective", "surrogate", "proposer", "fit_policy"}
        if not expected | {"n_initial", "design"} <= set(config):
            raise StateFileError(f"{str(path)!r} holds no optimizer configuration (field config).")

        def restored(field: str, restore: Callable[[], Any]) -> Any:
            r"""What ``restore`` rebuilds from the file's ``field``, or a
            :class:`StateFileError` that names the file and the field."""
            try:
                return restore()
            except (ValueError, TypeError, KeyError, IndexError, AttributeError, RuntimeError) as e:
                raise StateFileError(
                    f"{str(path)!r} holds an unusable {field}: {type(e).__name__}: {e}"
                ) from None

        def component(name: str, given: Any, build: Callable[[Any], Any]) -> Any:
            saved = config[name]
            if given is None:
                if saved is None or saved == "<custom>":
                    raise ValueError(
                        f"{str(path)!r} was saved with a {name.replace('_', ' ')} given as "
                        f"code; pass {name}=... to load it."
                    )
                return restored(f"config.{name}", lambda: build(saved))
            described = given if isinstance(given, str) else _describe(given)
            if saved not in (None, "<custom>") and described != saved:
                raise ValueError(
                    f"{str(path)!r} was saved with {name.replace('_', ' ')} {saved!r}; got "
                    f"{described!r}."
                )
            return given

        chosen_proposer = component("proposer", proposer, proposer_from_config)
        chosen_surrogate = (
            None
            if config["surrogate"] is None and surrogate is None
            else component("surrogate", surrogate, get_surrogate)
        )
        chosen_objective = component("objective", objective, objective_from_config)
        chosen_fit_policy = component("fit_policy", fit_policy, fit_policy_from_config)
        strategy = config.get("strategy")
        given = (surrogate, proposer, fit_policy) != (None, None, None)
        components = (
            {"strategy": restored("config.strategy", lambda: Strategy.parse(strategy))}
            if strategy is not None and not given
            else {
                "surrogate": chosen_surrogate,
                "proposer": chosen_proposer,
                "fit_policy": chosen_fit_policy,
            }
        )
        optimizer = restored(
            "config",
            lambda: cls(
                torch.tensor(
                    config["bounds"], dtype=state.bounds.dtype, device=state.bounds.device
                ),
                objective=chosen_objective,
                seed=state.seed,
                n_initial=config["n_initial"],
                design=config["design"],
                **components,
            ),
        )
        # Components given as code describe no strategy; the file's must match the rest.
        rebuilt = optimizer._config()
        if {**rebuilt, "strategy": None} != {**config, "strategy": None}:
            raise StateFileError(
                f"{str(path)!r} holds a strategy that does not match its components "
                "(field config.strategy)."
            )
        if not torch.equal(optimizer.bounds, state.bounds):
            raise StateFileError(f"{str(path)!r} holds inconsistent bounds (field config.bounds).")
        if state.X.shape[0]:
            values = restored("Y", lambda: optimizer.objective.values(state.Y))
            tolerance = 64 * torch.finfo(state.values.dtype).eps
            if not torch.allclose(values, state.values, rtol=tolerance, atol=0.0):
                raise StateFileError(
                    f"{str(path)!r} holds objective values inconsistent with its outputs "
                    "(fields values and Y)."
                )
        state.config = optimizer.state.config
        optimizer.state = state
        restored("random_state", lambda: optimizer._random.set_state(state.random_state))
        restored("fit_state", lambda: optimizer.fit_policy.load_state_dict(state.fit_state))
        restored("proposer_state", lambda: optimizer.proposer.load_state_dict(state.proposer_state))
        rows = optimizer.proposer.fit_rows(state.model_num_points)
        # A model fitted on rows that a restart has set aside is not continued.
        if state.model_state is not None and rows.start < rows.stop:
            optimizer.model = restored(
                "model_state",
                lambda: optimizer.surrogate.restore(
                    state.X[rows],
                    optimizer.objective.model_targets(state.Y[rows]),
                    state.bounds,
                    state.model_state,
                ),
            )
        optimizer._file = (Path(path), digest)
        return optimizer


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


def _describe(component: Any) -> Any:
    r"""What the configuration says of ``component``: a surrogate's name (registered,
    or with hyperparameter overrides), else ``"<custom>"``, or ``to_config()``."""
    if isinstance(component, SurrogateSpec):
        try:
            registered = get_surrogate(component.name) is component
        except ValueError:
            registered = False
        return component.name if registered else "<custom>"
    return component.to_config()
