"""``run_bo``: the BO core (:class:`~botorch_nn_uq.bo.optimizer.BayesianOptimizer`) on a
registered test problem, configured by keyword arguments, with records that report the
problem's regret; the CLI's ``optimize`` on a built-in problem and the benchmarks'
protocols use it."""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from botorch_nn_uq.bo.continual import ContinualTraining
from botorch_nn_uq.bo.fitting import ColdFit, ContinualFit
from botorch_nn_uq.bo.optimizer import BayesianOptimizer
from botorch_nn_uq.bo.problems import RegisteredProblem
from botorch_nn_uq.bo.proposers import (
    AcquisitionProposer,
    Proposer,
    RandomProposer,
    TrustRegionProposer,
)
from botorch_nn_uq.bo.state import StepRecord
from botorch_nn_uq.bo.surrogates import RANDOM_SEARCH
from botorch_nn_uq.bo.turbo import TurboProposer
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
    model: str,
    acquisition: str = "logei",
    *,
    iterations: int = 30,
    n_initial: int = 8,
    seed: int = 0,
    num_restarts: int = 10,
    raw_samples: int = 512,
    acquisition_options: Mapping[str, Any] | None = None,
    target: float | None = None,
    callback: Callable[[BOIterationRecord], None] | None = None,
    batch_size: int = 1,
    sequential: bool = False,
    continual: ContinualTraining | None = None,
    design: str = "uniform",
    time_budget: float | None = None,
    cpu_budget: float | None = None,
    trust_region: bool = False,
    turbo: bool = False,
    turbo_options: Mapping[str, Any] | None = None,
    local_fit: float | None = None,
    on_evaluations: Callable[[Tensor, Tensor, BOIterationRecord], None] | None = None,
    device: str | torch.device = "cpu",
) -> BOResult:
    r"""Minimise ``problem`` (or, with ``target``, hit a target value) with Bayesian
    optimisation, ``batch_size`` evaluations per step: a
    :class:`~botorch_nn_uq.bo.optimizer.BayesianOptimizer` configured by the arguments,
    run with :meth:`~botorch_nn_uq.bo.optimizer.BayesianOptimizer.run`.

    The surrogate is fitted to ``Y = -f(X)`` (BoTorch maximises) with inputs
    normalised to the problem's bounds and standardised outcomes, refitted every step
    with the step's seed (from scratch, or warm-started with ``continual``); the
    acquisition is maximised with ``optimize_acqf`` under the same seed, so a run is
    reproducible from ``seed`` whatever the caller's random state
    (:func:`~botorch_nn_uq.bo.state.step_seed`). A proposing strategy (batch Thompson
    sampling, ``"ts"``) proposes the batch itself under the same seed. ``model="random"``
    evaluates uniformly random points instead. The initial design depends on ``seed``
    only, so all surrogates with the same seed start from the same points.

    Target-value mode (``target`` given): the best point is the one with the smallest
    squared error ``(f(x) - target)^2``, its regret is ``2 |f(x_best) - target| /
    (f_max - f_min)``, and the acquisition receives ``options["target"] = -target``
    (the target in the model's units, since the model sees ``-f``). The acquisition
    must be a target-value one (``AcquisitionSpec.requires_target``).

    Args:
        problem: The benchmark problem.
        model: A registered surrogate name or ``"random"``.
        acquisition: A registered acquisition name (ignored for random search).
        iterations: Number of BO steps after the initial design.
        n_initial: Number of initial uniformly random points.
        seed: Seed of the initial design, the fits and the acquisition samplers.
        num_restarts: ``optimize_acqf`` restarts.
        raw_samples: ``optimize_acqf`` raw samples for the initialisation heuristic.
        acquisition_options: Extra options passed to the acquisition builder.
        target: Optional target value of ``f`` (target-value optimisation).
        callback: Called with each :class:`BOIterationRecord` as it is produced.
        batch_size: Evaluations per BO step (``q``).
        sequential: Maximise a q-batch acquisition greedily, one point after the other
            (``optimize_acqf(sequential=True)``) instead of jointly; joint optimisation
            of large batches on a GP costs O(q^2) to O(q^3) per sample.
        continual: Warm-start refits from the previous step's model on this schedule
            (:class:`~botorch_nn_uq.bo.continual.ContinualTraining`); ``None`` fits
            from scratch at every step. Needs a surrogate that supports warm starts.
        design: The initial design, ``"uniform"`` or ``"sobol"`` (see
            :func:`~botorch_nn_uq.bo.optimizer.initial_design`).
        time_budget: Stop after the step at which the BO steps' cumulative wall-clock
            seconds pass this budget (a cap for slow surrogates; the result then has
            fewer steps); ``None`` runs all ``iterations``.
        cpu_budget: The same cap in the BO steps' cumulative process CPU seconds, which
            other jobs on a shared machine do not inflate; ``None`` runs all
            ``iterations``.
        trust_region: Propose inside a TuRBO-style trust region around the best point
            (:class:`~botorch_nn_uq.bo.proposers.TrustRegionProposer`), resized after
            every batch; the surrogate is still fitted on all data.
        turbo: Propose with TuRBO-1 (:class:`~botorch_nn_uq.bo.turbo.TurboProposer`:
            Thompson sampling on TuRBO's candidates in a region weighted by the model's
            lengthscales, restarts from a fresh Sobol design of ``n_initial`` points
            with the run's data set aside) instead of ``acquisition``; not with
            ``trust_region`` or a ``target``.
        turbo_options: Keyword arguments of
            :class:`~botorch_nn_uq.bo.turbo.TurboProposer` with ``turbo``, e.g.
            ``{"success_tolerance": 3}`` (the TuRBO paper's code) in place of the
            tutorial's 10.
        local_fit: With ``trust_region`` or ``turbo``: fit region-locally, the
            surrogate's inputs normalised to the region grown ``local_fit`` (at least
            1, e.g. 4) times around the incumbent instead of to the problem's box (see
            :class:`~botorch_nn_uq.bo.proposers.TrustRegionProposer`); ``None``
            normalises to the box.
        on_evaluations: Called after every evaluated batch, the initial design first,
            with the batch's ``q x d`` inputs, its ``q`` objective values and its
            record (before ``callback``), e.g. to write each evaluation to disk as it
            happens, so an interrupted run keeps every evaluation made.
        device: The device of the run: the problem's bounds and evaluations, the
            initial design, the surrogate's fits and the acquisition optimisation. Every
            random draw of the run is made on the CPU and moved, so a seed gives the
            same run on any device up to floating-point rounding.

    Returns:
        A :class:`BOResult` with one record for the initial design and one per step
        (its ``value`` is the best of the step's batch); ``X`` and ``values`` are on
        ``device``.

    Raises:
        ValueError: If an argument is invalid, e.g. ``device`` names no device or one
            that is not available (``"cuda"`` without CUDA).
    """
    device = check_device("device", device)
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 0:
        raise ValueError(f"iterations must be >= 0; got {iterations!r}.")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer; got {batch_size!r}.")
    random_search = model == RANDOM_SEARCH
    proposer: Proposer
    if turbo and (trust_region or random_search):
        raise ValueError("TuRBO has its own trust region and needs a surrogate.")
    if turbo_options and not turbo:
        raise ValueError("turbo_options apply to turbo=True only.")
    if local_fit is not None and not (trust_region or turbo):
        raise ValueError("local_fit needs a trust region (trust_region=True or turbo=True).")
    if random_search:
        if trust_region:
            raise ValueError("Random search proposes in the whole box; it takes no trust region.")
        proposer = RandomProposer()
    elif turbo:
        proposer = TurboProposer(
            batch_size, n_initial, local_fit=local_fit, **(turbo_options or {})
        )
    else:
        proposer = AcquisitionProposer(
            acquisition,
            num_restarts=num_restarts,
            raw_samples=raw_samples,
            sequential=sequential,
            options=acquisition_options,
        )
        if trust_region:
            proposer = TrustRegionProposer(proposer, batch_size, local_fit=local_fit)
    bo_problem = RegisteredProblem(problem, target, device=device)
    optimizer = BayesianOptimizer.for_problem(
        bo_problem,
        surrogate=None if random_search else model,
        proposer=proposer,
        fit_policy=ColdFit() if continual is None or random_search else ContinualFit(continual),
        seed=seed,
        n_initial=n_initial,
        design=design,
    )
    result = BOResult(
        problem=bo_problem.name,
        model=model,
        acquisition="" if random_search else "turbo" if turbo else acquisition,
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
