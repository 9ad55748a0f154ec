"""A sequential Bayesian-optimisation loop on a benchmark problem, shared by the CLI,
the benchmarks and the tutorials."""

from __future__ import annotations

import csv
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from botorch.optim import optimize_acqf
from botorch.utils.sampling import manual_seed
from torch import Tensor
from torch.quasirandom import SobolEngine

from botorch_nn_uq.bo.continual import ContinualTraining, ContinualTrainingState
from botorch_nn_uq.bo.registry import AcquisitionContext, AcquisitionSpec, get_acquisition
from botorch_nn_uq.bo.surrogates import RANDOM_SEARCH, SURROGATES, get_surrogate
from botorch_nn_uq.bo.trust_region import TrustRegion
from botorch_nn_uq.metrics import batch_diversity
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
        regret: The problem's normalised regret of ``best_value``.
        seconds: Wall-clock seconds of the step that proposed this point (fit +
            acquisition optimisation and the batch-diversity metric); 0 for the initial
            design.
        fit_seconds: The part of ``seconds`` spent fitting the surrogate.
        warm_start: Whether the step's fit continued from the previous model's weights.
        batch_min_distance: The smallest distance between two points of the step's
            batch in the unit cube (``inf`` for a single point).
        batch_duplicates: Points of the batch that repeat an earlier point of it.
        trust_region_length: The side length (fraction of the box) of the trust region
            the step proposed in; ``nan`` without one.
    """

    iteration: int
    num_evaluations: int
    value: float
    best_value: float
    regret: float
    seconds: float
    fit_seconds: float = 0.0
    warm_start: bool = False
    batch_min_distance: float = math.inf
    batch_duplicates: int = 0
    trust_region_length: float = math.nan


@dataclass
class BOResult:
    r"""The outcome of :func:`run_bo`.

    Attributes:
        problem: The problem's name and dimension, e.g. ``"levy-5d"``.
        model: The surrogate name (or ``"random"``).
        acquisition: The acquisition name (``""`` for random search).
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


def save_atomically(obj: object, path: str | Path) -> None:
    r"""``torch.save`` ``obj`` to ``path`` through a temporary file and a rename, so a
    process killed while saving never leaves a torn file at ``path``; creates the folder.

    Example:
        >>> save_atomically({"regret": [0.1, 0.05]}, "results/runs/run0.pt")
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    torch.save(obj, partial)
    partial.replace(path)


INITIAL_DESIGNS = ("uniform", "sobol")


def initial_design(problem: BOProblem, n: int, seed: int, design: str = "uniform") -> Tensor:
    r"""``n x d`` initial points in the problem's box, identical for every surrogate run
    with the same ``seed``.

    Args:
        problem: The problem (its ``bounds`` and ``dim``).
        n: The number of points.
        seed: Seed of the draw (or of the Sobol scrambling).
        design: ``"uniform"`` (independent uniform points) or ``"sobol"`` (the first
            ``n`` points of a scrambled Sobol sequence, which cover the box evenly).
    """
    if design not in INITIAL_DESIGNS:
        raise ValueError(f"Unknown design {design!r}; valid: {', '.join(INITIAL_DESIGNS)}.")
    bounds = problem.bounds
    if design == "sobol":
        unit = SobolEngine(problem.dim, scramble=True, seed=seed).draw(n, dtype=bounds.dtype)
    else:
        generator = torch.Generator().manual_seed(seed)
        unit = torch.rand(n, problem.dim, generator=generator, dtype=bounds.dtype)
    return bounds[0] + (bounds[1] - bounds[0]) * unit


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
    trust_region: bool = False,
    on_evaluations: Callable[[Tensor, Tensor, BOIterationRecord], None] | None = None,
) -> BOResult:
    r"""Minimise ``problem`` (or, with ``target``, hit a target value) with Bayesian
    optimisation, ``batch_size`` evaluations per step.

    The surrogate is fitted to ``Y = -f(X)`` (BoTorch maximises) with inputs
    normalised to the problem's bounds and standardised outcomes, refitted every step
    with seed ``1000 * seed + step`` (from scratch, or warm-started with ``continual``);
    the acquisition is maximised with ``optimize_acqf`` under the same seed (its raw
    samples and its choice of restarts), so a run is reproducible from ``seed``
    whatever the caller's random state. A proposing strategy (batch Thompson sampling,
    ``"ts"``) proposes the batch itself under the same seed. ``model="random"``
    evaluates uniformly random points instead. The initial design depends on ``seed``
    only, so all surrogates with the same seed start from the same points.

    Target-value mode (``target`` given): the best point is the one with the smallest
    squared error ``(f(x) - target)^2``, its regret is ``2 |f(x_best) - target| /
    (f_max - f_min)``, and the acquisition builder receives ``options["target"] =
    -target`` (the target in the model's units, since the model sees ``-f``). The
    acquisition must be a target-value one (``AcquisitionSpec.requires_target``).

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
            :func:`initial_design`).
        time_budget: Stop after the step at which the BO steps' cumulative wall-clock
            seconds pass this budget (a cap for slow surrogates; the result then has
            fewer steps); ``None`` runs all ``iterations``.
        trust_region: Propose inside a TuRBO-style trust region around the best point
            (:class:`~botorch_nn_uq.bo.trust_region.TrustRegion`), resized after every
            batch; the surrogate is still fitted on all data.
        on_evaluations: Called after every evaluated batch, the initial design first,
            with the batch's ``q x d`` inputs, its ``q`` objective values and its
            record (before ``callback``), e.g. to write each evaluation to disk as it
            happens, so an interrupted run keeps every evaluation made.

    Returns:
        A :class:`BOResult` with one record for the initial design and one per step
        (its ``value`` is the best of the step's batch).
    """
    if iterations < 0 or n_initial < 2:
        raise ValueError(
            f"iterations must be >= 0 and n_initial >= 2; got {iterations} and {n_initial}."
        )
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer; got {batch_size!r}.")
    random_search = model == RANDOM_SEARCH
    surrogate = None if random_search else get_surrogate(model)
    acquisition_spec = None if random_search else get_acquisition(acquisition)
    if continual is not None and not random_search and not surrogate.supports_warm_start:
        warm = ", ".join(
            sorted(name for name, spec in SURROGATES.items() if spec.supports_warm_start)
        )
        raise ValueError(
            f"Surrogate {model!r} does not support warm-started refits; continual training "
            f"needs one of: {warm}."
        )
    if acquisition_spec is not None and acquisition_spec.requires_target != (target is not None):
        raise ValueError(
            f"Acquisition {acquisition!r} "
            + ("needs a target value." if target is None else "does not take a target value.")
        )
    options = dict(acquisition_options or {})
    if target is not None:
        options["target"] = -float(target)
    if trust_region and random_search:
        raise ValueError("Random search proposes in the whole box; it takes no trust region.")
    if time_budget is not None and not time_budget > 0:
        raise ValueError(f"time_budget must be positive or None; got {time_budget}.")
    bounds = problem.bounds
    X = initial_design(problem, n_initial, seed, design)
    values = problem.evaluate(X)
    result = BOResult(
        problem=f"{problem.name}-{problem.dim}d",
        model=model,
        acquisition="" if random_search else acquisition,
        seed=seed,
        X=X,
        values=values,
    )

    def score(values: Tensor) -> Tensor:
        return values if target is None else (values - target) ** 2

    def regret(best: float) -> float:
        if target is None:
            return float(problem.normalized_regret(best))
        return 2 * abs(best - target) / (problem.max_value - problem.min_value)

    def record(
        iteration: int, batch_X: Tensor, batch_values: Tensor, seconds: float, **details: Any
    ) -> None:
        best = float(result.values[score(result.values).argmin()])
        entry = BOIterationRecord(
            iteration=iteration,
            num_evaluations=result.values.numel(),
            value=float(batch_values[score(batch_values).argmin()]),
            best_value=best,
            regret=regret(best),
            seconds=seconds,
            **details,
        )
        result.records.append(entry)
        if on_evaluations is not None:
            on_evaluations(batch_X, batch_values, entry)
        if callback is not None:
            callback(entry)

    record(0, X, values, 0.0)
    random_generator = torch.Generator().manual_seed(seed + 7919)
    schedule = None if continual is None else ContinualTrainingState(continual)
    region = TrustRegion(problem.dim, batch_size) if trust_region else None
    if region is not None:
        region.update(-score(values))
    previous_model, new_X = None, X
    for step in range(1, iterations + 1):
        start = time.perf_counter()
        step_seed = 1000 * seed + step
        fit_seconds, warm = 0.0, False
        if random_search:
            unit = torch.rand(
                batch_size, problem.dim, generator=random_generator, dtype=bounds.dtype
            )
            candidates = bounds[0] + (bounds[1] - bounds[0]) * unit
        else:
            train_Y = -result.values.unsqueeze(-1)
            if schedule is not None:
                warm = schedule.next_fit_is_warm(
                    previous_model, new_X, train_Y[-new_X.shape[0] :], train_Y
                )
            if warm:
                fitted = surrogate.build(
                    result.X,
                    train_Y,
                    bounds,
                    step_seed,
                    warm_start=previous_model,
                    max_steps=continual.warm_start_steps,
                )
            else:
                fitted = surrogate.build(result.X, train_Y, bounds, step_seed)
            if schedule is not None:
                schedule.record_fit(warm)
            fit_seconds = time.perf_counter() - start
            center = result.X[score(result.values).argmin()]
            context = AcquisitionContext(
                train_X=result.X,
                train_Y=train_Y,
                bounds=bounds,
                seed=step_seed,
                options=options,
                search_bounds=None if region is None else region.box(center, bounds),
                center=center,
            )
            candidates = _propose(
                acquisition_spec,
                fitted,
                context,
                batch_size,
                num_restarts=num_restarts,
                raw_samples=raw_samples,
                sequential=sequential,
            )
            previous_model = fitted
        diversity = batch_diversity(candidates, bounds)
        seconds = time.perf_counter() - start
        value = problem.evaluate(candidates)
        result.X = torch.cat([result.X, candidates])
        result.values = torch.cat([result.values, value])
        new_X = candidates
        record(
            step,
            candidates,
            value,
            seconds,
            fit_seconds=fit_seconds,
            warm_start=warm,
            batch_min_distance=diversity.min_distance,
            batch_duplicates=diversity.duplicates,
            trust_region_length=math.nan if region is None else region.length,
        )
        if region is not None:
            region.update(-score(value))
        spent = sum(entry.seconds for entry in result.records)
        if time_budget is not None and spent > time_budget:
            break
    return result


def _propose(
    spec: AcquisitionSpec,
    model: Any,
    context: AcquisitionContext,
    q: int,
    *,
    num_restarts: int,
    raw_samples: int,
    sequential: bool,
) -> Tensor:
    r"""A ``q x d`` batch from a proposing strategy, or from ``optimize_acqf`` on the
    spec's acquisition function."""
    if spec.propose is not None:
        return spec.propose(model, context, q).detach()
    acquisition_function = spec.build(model, context)
    # The options' seed fixes the raw samples, but optimize_acqf picks the restarts
    # among them with torch's global generator (Boltzmann sampling): without a seeded
    # global state, runs of one seed propose different points.
    with manual_seed(context.seed):
        candidates, _ = optimize_acqf(
            acquisition_function,
            context.proposal_bounds,
            q=q,
            num_restarts=num_restarts,
            raw_samples=raw_samples,
            options={"seed": context.seed},
            sequential=sequential and q > 1,
        )
    return candidates.detach()
