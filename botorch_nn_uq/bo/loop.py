"""``run_bo``: the BO core (:class:`~botorch_nn_uq.bo.optimizer.BayesianOptimizer`) on a
registered test problem with a :class:`~botorch_nn_uq.bo.strategy.Strategy`, with
records that report the problem's regret; the benchmarks' protocols use it."""

from __future__ import annotations

import csv
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from botorch_nn_uq.bo.optimizer import BayesianOptimizer
from botorch_nn_uq.bo.problems import RegisteredProblem
from botorch_nn_uq.bo.state import StepRecord
from botorch_nn_uq.bo.strategy import Strategy, as_strategy
from botorch_nn_uq.checks import check_device
from botorch_nn_uq.problems import BOProblem


@dataclass(frozen=True)
class BOIterationRecord:
    r"""One evaluation of a BO run.

    Attributes:
        iteration: 0 for the initial design, then 1, 2, ... for BO steps.
        num_evaluations: Evaluations so far, including this one.
        value: The objective value ``f(x)`` (to minimise) of this evaluation.
        best_value: The value ``f`` of the best point so far (the smallest ``f``, or in
            target-value mode the ``f`` closest to the target).
        regret: The problem's normalised regret of ``best_value`` (``nan`` for a
            problem without one, such as a user's function).
        seconds: Wall-clock seconds of the step that proposed this point (fit +
            acquisition optimisation and the batch-diversity metric); 0 for the initial
            design.
        fit_seconds: The part of ``seconds`` spent fitting the surrogate.
        fit_points: The points the step's surrogate was fitted on (0 without a fit).
        warm_start: Whether the step's fit continued from the previous model's weights.
        batch_min_distance: The smallest distance between two points of the step's
            batch in the unit cube (``inf`` for a single point).
        batch_duplicates: Points of the batch that repeat an earlier point of it.
        trust_region_length: The side length (fraction of the box) of the trust region
            the step proposed in; ``nan`` without one.
        cpu_seconds: CPU seconds of the process during that step (all threads): the
            cost that other jobs on a shared machine do not inflate.
    """

    iteration: int
    num_evaluations: int
    value: float
    best_value: float
    regret: float
    seconds: float
    fit_seconds: float = 0.0
    fit_points: int = 0
    warm_start: bool = False
    batch_min_distance: float = math.inf
    batch_duplicates: int = 0
    trust_region_length: float = math.nan
    cpu_seconds: float = 0.0

    @classmethod
    def from_step(cls, record: StepRecord, regret: float = math.nan) -> BOIterationRecord:
        r"""The record of a told batch of the BO core, with the problem's ``regret`` of
        its best value (``nan`` where the problem has none)."""
        return cls(
            iteration=record.step,
            num_evaluations=record.num_evaluations,
            value=record.value,
            best_value=record.best_value,
            regret=regret,
            seconds=record.seconds,
            fit_seconds=record.fit_seconds,
            fit_points=record.fit_points,
            warm_start=record.warm_start,
            batch_min_distance=record.batch_min_distance,
            batch_duplicates=record.batch_duplicates,
            trust_region_length=record.details.get("trust_region_length", math.nan),
            cpu_seconds=record.cpu_seconds,
        )


@dataclass
class BOResult:
    r"""The outcome of :func:`run_bo`.

    Attributes:
        problem: The problem's name and dimension, e.g. ``"levy-5d"``.
        model: The surrogate name (or ``"random"``).
        acquisition: The acquisition name (``"turbo"`` for TuRBO, ``""`` for random
            search).
        seed: The run's seed.
        X: ``N x d`` evaluated inputs.
        values: ``N`` objective values (to minimise).
        records: One :class:`BOIterationRecord` for the whole initial design, then one
            per BO step.
    """

    problem: str
    model: str
    acquisition: str
    seed: int
    X: Tensor
    values: Tensor
    records: list[BOIterationRecord] = field(default_factory=list)

    @property
    def final_regret(self) -> float:
        r"""Normalised regret of the best point after all evaluations."""
        return self.records[-1].regret

    @property
    def seconds_per_iteration(self) -> float:
        r"""Mean wall-clock seconds of the BO steps."""
        steps = [r.seconds for r in self.records if r.iteration > 0]
        return sum(steps) / max(len(steps), 1)

    def rows(self) -> list[dict[str, Any]]:
        r"""One dict per record (the initial design, then each step), with the run's
        identifiers (for CSV files)."""
        identity = {
            "problem": self.problem,
            "model": self.model,
            "acquisition": self.acquisition,
            "seed": self.seed,
        }
        return [{**identity, **asdict(record)} for record in self.records]

    def write_csv(self, path: str | Path) -> None:
        r"""Write :meth:`rows` to ``path``."""
        write_rows_csv(self.rows(), path)


def write_rows_csv(rows: list[dict[str, Any]], path: str | Path) -> None:
    r"""Write dict rows (all with the same keys) to a CSV file, creating its folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def run_bo(
    problem: BOProblem,
    strategy: Strategy | str,
    *,
    iterations: int = 30,
    batch_size: int = 1,
    n_initial: int = 8,
    seed: int = 0,
    target: float | None = None,
    design: str = "uniform",
    time_budget: float | None = None,
    cpu_budget: float | None = None,
    callback: Callable[[BOIterationRecord], None] | None = None,
    on_evaluations: Callable[[Tensor, Tensor, BOIterationRecord], None] | None = None,
    device: str | torch.device = "cpu",
) -> BOResult:
    r"""Minimise ``problem`` (or, with ``target``, hit a target value) with Bayesian
    optimisation by ``strategy``, ``batch_size`` evaluations per step: a
    :class:`~botorch_nn_uq.bo.optimizer.BayesianOptimizer` run with
    :meth:`~botorch_nn_uq.bo.optimizer.BayesianOptimizer.run`.

    The surrogate is fitted to ``Y = -f(X)`` (BoTorch maximises) with inputs
    normalised to the problem's bounds and standardised outcomes, refitted every step
    with the step's seed; the acquisition is maximised with ``optimize_acqf`` under the
    same seed, so a run is reproducible from ``seed`` whatever the caller's random state
    (:func:`~botorch_nn_uq.bo.state.step_seed`). The initial design depends on ``seed``
    only, so all strategies with the same seed start from the same points.

    Target-value mode (``target`` given): the best point is the one with the smallest
    squared error ``(f(x) - target)^2``, its regret is ``2 |f(x_best) - target| /
    (f_max - f_min)``, and the acquisition (a target-value one) receives the target in
    the model's units.

    Args:
        problem: The benchmark problem.
        strategy: A :class:`~botorch_nn_uq.bo.strategy.Strategy` or its spelling, e.g.
            ``"gp:logei"``, ``"deep-ensemble:ts+tr+continual"``,
            ``"deep-ensemble(max_steps=200):ts+turbo+bts+local(4)"`` or ``"random"``.
        iterations: Number of BO steps after the initial design.
        batch_size: Evaluations per BO step (``q``).
        n_initial: Number of initial points.
        seed: Seed of the initial design, the fits and the acquisition samplers.
        target: Optional target value of ``f`` (target-value optimisation).
        design: The initial design, ``"uniform"`` or ``"sobol"`` (see
            :func:`~botorch_nn_uq.bo.optimizer.initial_design`).
        time_budget: Stop after the step at which the BO steps' cumulative wall-clock
            seconds pass this budget (a cap for slow surrogates; the result then has
            fewer steps); ``None`` runs all ``iterations``.
        cpu_budget: The same cap in the BO steps' cumulative process CPU seconds, which
            other jobs on a shared machine do not inflate.
        callback: Called with each :class:`BOIterationRecord` as it is produced.
        on_evaluations: Called after every evaluated batch, the initial design first,
            with the batch's ``q x d`` inputs, its ``q`` objective values and its
            record (before ``callback``), e.g. to write each evaluation to disk as it
            happens.
        device: The device of the run: the problem's bounds and evaluations, the
            initial design, the surrogate's fits and the acquisition optimisation. Every
            random draw is made on the CPU and moved, so a seed gives the same run on
            any device up to floating-point rounding.

    Returns:
        A :class:`BOResult` with one record for the initial design and one per step
        (its ``value`` is the best of the step's batch); ``X`` and ``values`` are on
        ``device``.

    Raises:
        ValueError: If an argument is invalid (a strategy that does not parse or does
            not serve the problem's objective, a device that is not available, ...).
    """
    device = check_device("device", device)
    strategy = as_strategy(strategy)
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 0:
        raise ValueError(f"iterations must be >= 0; got {iterations!r}.")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer; got {batch_size!r}.")
    bo_problem = RegisteredProblem(problem, target, device=device)
    optimizer = BayesianOptimizer.for_problem(
        bo_problem, strategy=strategy, seed=seed, n_initial=n_initial, design=design
    )
    result = BOResult(
        problem=bo_problem.name,
        model=strategy.model,
        acquisition=strategy_label(strategy),
        seed=seed,
        X=optimizer.X,
        values=optimizer.values,
    )

    def on_batch(step: StepRecord, X: Tensor, Y: Tensor) -> None:
        record = BOIterationRecord.from_step(step, bo_problem.regret(step.best_value))
        result.records.append(record)
        result.X, result.values = optimizer.X, optimizer.values
        if on_evaluations is not None:
            on_evaluations(X, optimizer.values[-X.shape[0] :], record)
        if callback is not None:
            callback(record)

    optimizer.run(
        bo_problem,
        iterations,
        q=batch_size,
        callback=on_batch,
        time_budget=time_budget,
        cpu_budget=cpu_budget,
    )
    return result


def strategy_label(strategy: Strategy) -> str:
    r"""What proposes a strategy's points, for output: the acquisition's name,
    ``"turbo"`` for TuRBO-1, or ``""`` for random search."""
    if not strategy.uses_model:
        return ""
    return "turbo" if strategy.turbo else strategy.acquisition
