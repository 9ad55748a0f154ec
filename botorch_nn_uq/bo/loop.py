"""``run_bo``: the BO core (:class:`~botorch_nn_uq.bo.optimizer.BayesianOptimizer`) on a
registered test problem with a :class:`~botorch_nn_uq.bo.strategy.Strategy`, with
records that report the problem's regret; the benchmarks' protocols use it."""

from __future__ import annotations

import csv
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from botorch_nn_uq.bo.objectives import RegisteredProblem
from botorch_nn_uq.bo.optimizer import BayesianOptimizer
from botorch_nn_uq.bo.state import StepRecord
from botorch_nn_uq.bo.strategy import Strategy, as_strategy
from botorch_nn_uq.checks import check_device, is_int_in_range
from botorch_nn_uq.problems import BOProblem


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
        records: One :class:`~botorch_nn_uq.bo.state.StepRecord` (with the problem's
            regret) for the whole initial design, then one
            per BO step.
    """

    problem: str
    model: str
    acquisition: str
    seed: int
    X: Tensor
    values: Tensor
    records: list[StepRecord] = field(default_factory=list)

    @property
    def final_regret(self) -> float:
        r"""Normalised regret of the best point after all evaluations."""
        return self.records[-1].regret

    @property
    def seconds_per_iteration(self) -> float:
        r"""Mean wall-clock seconds of the BO steps."""
        steps = [r.seconds for r in self.records if r.step > 0]
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
        return [{**identity, **record.row()} for record in self.records]

    def write_csv(self, path: str | Path) -> None:
        r"""Write :meth:`rows` to ``path``."""
        write_rows_csv(self.rows(), path)


def write_rows_csv(rows: Sequence[Mapping[str, Any]], path: str | Path) -> None:
    r"""Write dict rows (all with the keys of the first, in its order) to a CSV file,
    creating its folder.

    Args:
        rows: The rows, one mapping from column name to value each (at least one).
        path: The CSV file to write (replaced if it exists).
    """
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
    callback: Callable[[StepRecord], None] | None = None,
    on_evaluations: Callable[[Tensor, Tensor, StepRecord], None] | None = None,
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
            :func:`~botorch_nn_uq.bo.designs.initial_design`).
        time_budget: Stop after the step at which the BO steps' cumulative wall-clock
            seconds pass this budget (a cap for slow surrogates; the result then has
            fewer steps); ``None`` runs all ``iterations``.
        cpu_budget: The same cap in the BO steps' cumulative process CPU seconds, which
            other jobs on a shared machine do not inflate.
        callback: Called with each step's record (with the problem's regret) as it is
            produced.
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
    if not is_int_in_range(iterations):
        raise ValueError(f"iterations must be >= 0; got {iterations!r}.")
    if not is_int_in_range(batch_size, minimum=1):
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
        record = dataclasses.replace(step, regret=bo_problem.regret(step.best_value))
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
