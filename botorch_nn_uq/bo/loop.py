"""A sequential Bayesian-optimisation loop on a benchmark problem, shared by the CLI,
the benchmarks and the tutorials."""

from __future__ import annotations

import csv
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from botorch.optim import optimize_acqf
from botorch.utils.sampling import manual_seed
from torch import Tensor

from botorch_nn_uq.bo.registry import (
    RANDOM_SEARCH,
    AcquisitionContext,
    get_acquisition,
    get_surrogate,
)
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
            acquisition optimisation); 0 for the initial design.
    """

    iteration: int
    num_evaluations: int
    value: float
    best_value: float
    regret: float
    seconds: float


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


def initial_design(problem: BOProblem, n: int, seed: int) -> Tensor:
    r"""``n x d`` uniformly random points in the problem's box, identical for every
    surrogate run with the same ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    bounds = problem.bounds
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
) -> BOResult:
    r"""Minimise ``problem`` (or, with ``target``, hit a target value) with sequential
    (q = 1) Bayesian optimisation.

    The surrogate is fitted to ``Y = -f(X)`` (BoTorch maximises) with inputs
    normalised to the problem's bounds and standardised outcomes, refitted from
    scratch every step with seed ``1000 * seed + step``; the acquisition is maximised
    with ``optimize_acqf`` under the same seed (its raw samples and its choice of
    restarts), so a run is reproducible from ``seed`` whatever the caller's random state.
    ``model="random"`` evaluates uniformly random points instead. The initial design
    depends on ``seed`` only, so all surrogates with the same seed start from the same
    points.

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

    Returns:
        A :class:`BOResult`.
    """
    if iterations < 0 or n_initial < 2:
        raise ValueError(
            f"iterations must be >= 0 and n_initial >= 2; got {iterations} and {n_initial}."
        )
    random_search = model == RANDOM_SEARCH
    surrogate = None if random_search else get_surrogate(model)
    acquisition_spec = None if random_search else get_acquisition(acquisition)
    if acquisition_spec is not None and acquisition_spec.requires_target != (target is not None):
        raise ValueError(
            f"Acquisition {acquisition!r} "
            + ("needs a target value." if target is None else "does not take a target value.")
        )
    options = dict(acquisition_options or {})
    if target is not None:
        options["target"] = -float(target)
    bounds = problem.bounds
    X = initial_design(problem, n_initial, seed)
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

    def record(iteration: int, value: Tensor, seconds: float) -> None:
        best = float(result.values[score(result.values).argmin()])
        entry = BOIterationRecord(
            iteration=iteration,
            num_evaluations=result.values.numel(),
            value=float(value),
            best_value=best,
            regret=regret(best),
            seconds=seconds,
        )
        result.records.append(entry)
        if callback is not None:
            callback(entry)

    best_initial = score(values).argmin()
    record(0, values[best_initial], 0.0)
    random_generator = torch.Generator().manual_seed(seed + 7919)
    for step in range(1, iterations + 1):
        start = time.perf_counter()
        if random_search:
            unit = torch.rand(1, problem.dim, generator=random_generator, dtype=bounds.dtype)
            candidate = bounds[0] + (bounds[1] - bounds[0]) * unit
        else:
            train_Y = -result.values.unsqueeze(-1)
            fitted = surrogate.build(result.X, train_Y, bounds, 1000 * seed + step)
            context = AcquisitionContext(
                train_X=result.X,
                train_Y=train_Y,
                bounds=bounds,
                seed=1000 * seed + step,
                options=options,
            )
            acquisition_function = acquisition_spec.build(fitted, context)
            # The options' seed fixes the raw samples, but optimize_acqf picks the
            # restarts among them with torch's global generator (Boltzmann sampling):
            # without a seeded global state, runs of one seed propose different points.
            with manual_seed(1000 * seed + step):
                candidate, _ = optimize_acqf(
                    acquisition_function,
                    bounds,
                    q=1,
                    num_restarts=num_restarts,
                    raw_samples=raw_samples,
                    options={"seed": 1000 * seed + step},
                )
            candidate = candidate.detach()
        seconds = time.perf_counter() - start
        value = problem.evaluate(candidate)
        result.X = torch.cat([result.X, candidate])
        result.values = torch.cat([result.values, value])
        record(step, value.squeeze(), seconds)
    return result
