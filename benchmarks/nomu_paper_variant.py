"""NOMU in the BO loop of its paper: ``c`` fixed after the initial design, UCB, dynamic c.

Protocol 1's registered ``nomu`` surrogate rescales ``c`` by MW scaling after every fit and is
paired with LogEI. This runner follows the paper's BO loop instead (App. B.3): after the fit on
the initial design, MW scaling sets ``c`` so that the mean width ``2 c mean(sigma)`` over the
box equals ``--mw-factor`` times the standard deviation of the initial values; ``c`` is then
kept for every later fit. The acquisition is the upper bound ``f + c sigma`` (BoTorch's
``UpperConfidenceBound`` with ``beta = 1``), maximised by ``optimize_acqf``; "dynamic c" doubles
``c`` while the maximiser lies closer than ``delta_i`` to an observed point (``delta_i``
decaying from 1/32 to 0.005 of the unit cube, the paper's 1/16 and 0.01 on ``[-1, 1]^d``).
Problems, initial designs, fit seeds and the regret are those of ``nomu_bo_suite.py``, so the
final regrets compare run by run with its ``nomu+logei`` and ``gp+logei`` runs. The loop is the
library's BO core: ``BayesianOptimizer`` with NOMU fitted at every step and
``DynamicCalibrationProposer``.

Writes ``summary.md`` (final regret per run, mean over seeds, and how often c was doubled)
into ``--out``; finished runs are stored in ``--out/runs/`` and loaded by a repeated command.

Examples:
    python -m benchmarks.nomu_paper_variant --problems g-function levy --seeds 2 --jobs 2
    python -m benchmarks.nomu_paper_variant --smoke
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from botorch.models.transforms import Normalize, Standardize
from torch import Tensor

from benchmarks.common import (
    add_device_option,
    add_jobs_option,
    add_nomu_suite_options,
    add_seed_options,
    nomu_suite_run_key,
    run_jobs,
    runner_parser,
    seed_range,
    stored_run,
    summary_header,
    use_threads,
)
from botorch_nn_uq.bo import (
    BayesianOptimizer,
    DynamicCalibrationProposer,
    SurrogateSpec,
    registered_problem,
)
from botorch_nn_uq.models import NOMU
from botorch_nn_uq.problems import BO_PROBLEM_NAMES


@dataclass(frozen=True)
class RunSpec:
    r"""One BO run: problem, dimension, seed, budget and MW target factor."""

    problem: str
    dim: int
    seed: int
    iterations: int
    n_initial: int
    num_restarts: int
    raw_samples: int
    mw_factor: float
    device: str = "cpu"

    @property
    def key(self) -> str:
        r"""The name of the run's stored result (:func:`~common.nomu_suite_run_key`)."""
        return nomu_suite_run_key(self, suffix=f"_mw{self.mw_factor:g}")


@dataclass
class RunResult:
    r"""Normalised regret after each step, doublings of c per step, seconds per step."""

    spec: RunSpec
    regret: list[float] = field(default_factory=list)
    doublings: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    calibration_constant: float = float("nan")


def nomu_without_recalibration(train_X: Tensor, train_Y: Tensor, bounds: Tensor) -> NOMU:
    r"""The registered NOMU's network and transforms (the class defaults), unfitted; the
    fit keeps the calibration constant the proposer fixes."""
    return NOMU(
        train_X,
        train_Y,
        bounds=bounds,
        input_transform=Normalize(train_X.shape[-1], bounds=bounds),
        outcome_transform=Standardize(1),
    )


#: NOMU fitted from scratch at every step, without MW scaling of its own.
NOMU_FIXED_C = SurrogateSpec.from_constructor(
    "nomu-fixed-c", "NOMU (class defaults), c left to the proposer", nomu_without_recalibration
)


def run(spec: RunSpec) -> RunResult:
    r"""One BO run on ``spec.device`` and this process's torch threads (``--threads``):
    the BO core with NOMU and :class:`~botorch_nn_uq.bo.DynamicCalibrationProposer`."""
    problem = registered_problem(spec.problem, spec.dim, device=spec.device)
    optimizer = BayesianOptimizer.for_problem(
        problem,
        surrogate=NOMU_FIXED_C,
        proposer=DynamicCalibrationProposer(
            horizon=spec.iterations,
            mw_factor=spec.mw_factor,
            num_restarts=spec.num_restarts,
            raw_samples=spec.raw_samples,
        ),
        seed=spec.seed,
        n_initial=spec.n_initial,
    )
    optimizer.run(problem, spec.iterations)
    records, steps = optimizer.records, optimizer.records[1:]
    return RunResult(
        spec,
        regret=[problem.regret(record.best_value) for record in records],
        doublings=[int(record.details["doublings"]) for record in steps],
        seconds=[record.seconds for record in steps],
        calibration_constant=steps[0].details["calibration_constant"] if steps else float("nan"),
    )


def summary_table(results: list[RunResult]) -> str:
    r"""Markdown table: final regret per run, mean per problem, doublings and seconds."""
    lines = [
        "| problem | seed | final regret | c after the initial design | steps with doublings "
        "| seconds / step |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for result in results:
        spec = result.spec
        doubled = sum(count > 0 for count in result.doublings)
        lines.append(
            f"| {spec.problem}-{spec.dim}d | {spec.seed} | {result.regret[-1]:.3e} "
            f"| {result.calibration_constant:.3g} | {doubled} / {len(result.doublings)} "
            f"| {statistics.fmean(result.seconds):.2f} |"
        )
    problems = sorted({(r.spec.problem, r.spec.dim) for r in results})
    lines += ["", "| problem | seeds | mean final regret |", "| --- | --- | --- |"]
    for name, dim in problems:
        finals = [r.regret[-1] for r in results if (r.spec.problem, r.spec.dim) == (name, dim)]
        lines.append(f"| {name}-{dim}d | {len(finals)} | {statistics.fmean(finals):.3e} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> Path:
    r"""Run the benchmark; returns the path of the markdown summary."""
    parser = runner_parser(__doc__, out=Path("benchmarks/results/nomu_paper_variant"))
    add_nomu_suite_options(parser)
    add_seed_options(parser, default=2)
    parser.add_argument(
        "--mw-factor", type=float, default=0.1, help="MW target width / std of initial values"
    )
    add_jobs_option(parser)
    add_device_option(parser)
    args = parser.parse_args(argv)
    use_threads(args.threads)
    if args.smoke:
        args.problems, args.dims, args.seeds, args.iterations = ["levy"], [2], 1, 2
        args.num_restarts, args.raw_samples = 2, 16
    unknown = sorted(set(args.problems) - set(BO_PROBLEM_NAMES))
    if unknown:
        parser.error(f"unknown problems {unknown}; choose from {sorted(BO_PROBLEM_NAMES)}")
    specs = [
        RunSpec(
            problem,
            dim,
            seed,
            args.iterations,
            args.n_initial,
            args.num_restarts,
            args.raw_samples,
            args.mw_factor,
            args.device,
        )
        for seed in seed_range(args)
        for dim in args.dims
        for problem in args.problems
    ]
    store = args.out / "runs"
    results = run_jobs(partial(stored_run, store=store, run=run), specs, args.jobs, args.threads)
    summary = args.out / "summary.md"
    summary.write_text(
        f"{summary_header(__file__, argv, args.threads)}\n\n" + summary_table(results)
    )
    print(summary.read_text())
    return summary


if __name__ == "__main__":
    main()
