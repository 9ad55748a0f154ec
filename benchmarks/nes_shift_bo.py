"""The BO side of protocol 10: the dataset shift a BO run makes by itself. A BO run moves
into regions its first evaluations do not cover, so a surrogate trained on the first half
of a run's evaluations and tested on the second half is tested under a shift nobody
designed. Do the ensembles searched with shift adaptation (NES-RS, NES-RE, NES-RE-0,
DeepEns (RS)) keep a lower NLL and calibration error there than the references?

The runs are protocol 6's and 7's (``benchmarks.scale_suite``: the problem's budget,
``--run-method``'s strategy, a Sobol initial design, seed = run seed), stored in
``--out/bo_runs`` as that runner stores them. Each run's evaluations, in the order they
were made, are cut in two: the first ``ceil(N / 2)`` are the training part (inputs and
values standardised on it, 20 % held out as ``D_val``), the others are the test part,
untouched. Every method of ``benchmarks.nes_shift`` is trained on the training part as
there (the same pools, searches, budgets and references), and each search's ensemble is
selected twice from its one pool: on ``D_val`` (selection severity 0) and on
``D_val^shift`` of severity 5 (``shift_validation_set``, the adaptation of Zaidi et al.,
2021, Section 4.3); the references are fitted once and appear in both rows. Scores, in
the objective's units: test NLL, RMSE, coverage of the central 50, 80 and 95 % intervals
and calibration error, and the average member's and the oracle's NLL.

Writes ``runs.csv`` (one row per problem, seed, method, size and selection severity) and
``summary.md`` (mean ± standard error over seeds) into ``--out``; the BO runs, the pools'
checkpoints and the results are stored in ``--out`` so an interrupted benchmark resumes.

Examples:
    python -m benchmarks.nes_shift_bo --problems rastrigin warped-hartmann --seeds 3 \\
        --threads 1 --jobs 2 --out benchmarks/results/nes_shift_bo
    python -m benchmarks.nes_shift_bo --smoke --out /tmp/nes_shift_bo_smoke
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from torch import Tensor

from benchmarks import nes_shift, scale_suite
from benchmarks.common import (
    add_jobs_option,
    add_seed_options,
    integer_argument,
    run_jobs,
    runner_parser,
    seed_range,
    stored_run,
    summary_header,
    use_threads,
    write_text,
)
from botorch_nn_uq.bo import BOResult, Strategy, write_rows_csv
from botorch_nn_uq.ensembles import MAX_SEVERITY

#: The problems run by default: protocol 7's Rastrigin-10 (also protocol 6's) and its
#: non-stationary warped Hartmann-6, whose runs are short enough to repeat.
DEFAULT_PROBLEMS = ("rastrigin", "warped-hartmann")
#: The strategy of the BO runs (protocol 6's deep-ensemble arm).
DEFAULT_RUN_METHOD = "deep-ensemble:ts"
#: The selection severities: on ``D_val`` (0) and on ``D_val^shift`` of the highest one.
SELECTION_SEVERITIES = (0, MAX_SEVERITY)
#: The BO budget of ``--smoke``: a short run on a 3-D Rastrigin, halves of 12 points.
SMOKE_RUN_BUDGET = scale_suite.ProblemBudget(dim=3, n_initial=16, iterations=2, batch_size=4)
#: ``optimize_acqf``'s restarts and raw samples in the BO runs (``scale_suite``'s defaults).
NUM_RESTARTS, RAW_SAMPLES = 10, 512


@dataclass(frozen=True)
class ShiftJob:
    r"""One method trained on the first half of one BO run and tested on its second.

    Args:
        run: The BO run (``scale_suite``'s spec; its ``key`` names the stored run).
        method: One of ``nes_shift.METHODS``.
        sizes: The ensemble sizes ``M``.
        budget: The searches' budget.
        runs: The folder of the stored BO runs.
        smoke: Whether the references use their smoke budgets.
    """

    run: scale_suite.RunSpec
    method: str
    sizes: tuple[int, ...]
    budget: nes_shift.Budget
    runs: Path
    smoke: bool = False

    @property
    def pools(self) -> nes_shift.JobSpec:
        r"""The job as ``nes_shift`` trains and selects it: the run's key is its data set,
        the run's seed its split."""
        return nes_shift.JobSpec(
            dataset=self.run.key.replace(":", "-").replace("+", "-"),
            split=self.run.seed,
            method=self.method,
            sizes=self.sizes,
            severities=SELECTION_SEVERITIES,
            budget=self.budget,
            data_dir=self.runs,
            smoke=self.smoke,
        )


def halves(result: BOResult) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    r"""A run's first ``ceil(N / 2)`` evaluations and the rest, in evaluation order.

    Returns:
        ``train_X`` (``n x d``), ``train_Y`` (``n x 1``), ``test_X`` and ``test_Y``.
    """
    X, Y = result.X.double(), result.values.double().unsqueeze(-1)
    middle = math.ceil(X.shape[0] / 2)
    return X[:middle], Y[:middle], X[middle:], Y[middle:]


def evaluate(job: ShiftJob, store: Path) -> dict[int, list[dict[str, Any]]]:
    r"""Train and select on the run's first half, score on its second; ``size -> rows``
    (one row per selection severity)."""
    result = stored_run(job.run, job.runs, scale_suite.run)
    train_X, train_Y, test_X, test_Y = halves(result)
    spec = job.pools
    split = nes_shift.standardise(train_X, train_Y, test_X, test_Y, spec.split)
    test_sets = {severity: (test_X, test_Y) for severity in SELECTION_SEVERITIES}
    rows = nes_shift.scored_rows(spec, split, test_sets, store)
    for size_rows in rows.values():
        for row in size_rows:
            row["dataset"] = result.problem
            row["num_train"] = train_X.shape[0]
    return rows


def execute(job: ShiftJob, store: Path) -> list[dict[str, Any]]:
    r"""Run one job on this process's torch threads, or load its results from ``store``
    if an earlier invocation finished them; returns its rows."""
    return nes_shift.stored_rows(job.pools, store, lambda: evaluate(job, store))


def progress_line(job: ShiftJob, rows: list[dict[str, Any]]) -> str:
    r"""What the progress output says of a finished job."""
    largest = [row for row in rows if row["ensemble_size"] == max(job.sizes)]
    nll = ", ".join(
        f"{row['test_nll']:.3f} (selection severity {row['severity']})" for row in largest
    )
    return f"{largest[0]['dataset']} seed {job.run.seed} {job.method}: NLL {nll}"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = runner_parser(
        __doc__,
        out=Path("benchmarks/results/nes_shift_bo"),
        smoke="tiny budget (for the test suite): one short run of a 3-D Rastrigin, pools of "
        "4 networks trained 3 epochs, the references' smoke budgets, size 2",
    )
    parser.add_argument(
        "--problems",
        nargs="+",
        choices=list(scale_suite.BUDGETS),
        default=list(DEFAULT_PROBLEMS),
        help="problems of the BO runs, at scale_suite's budgets",
    )
    parser.add_argument(
        "--run-method", default=DEFAULT_RUN_METHOD, help="the strategy of the BO runs"
    )
    parser.add_argument(
        "--methods",
        nargs="+",
        choices=nes_shift.METHODS,
        default=list(nes_shift.METHODS),
        help="the ensembles and references trained on the first halves",
    )
    add_seed_options(parser, default=3, help="number of BO runs per problem (seeds 0, 1, ...)")
    parser.add_argument(
        "--sizes", nargs="+", type=integer_argument(1), default=[5], help="ensemble sizes M"
    )
    nes_shift.add_budget_options(
        parser, nes_shift.Budget(pool_size=15, epochs=100, population_size=5)
    )
    add_jobs_option(parser)
    args = parser.parse_args(argv)
    try:
        Strategy.parse(args.run_method)
    except ValueError as error:
        parser.error(f"unknown --run-method {args.run_method!r}: {error}")
    if args.smoke:
        args.problems, args.seeds, args.sizes = ["rastrigin"], 1, [2]
        args.budget = nes_shift.SMOKE_BUDGET
        args.run_budgets = {"rastrigin": SMOKE_RUN_BUDGET}
        args.num_restarts, args.raw_samples = 2, 32
    else:
        args.budget = nes_shift.budget_from_arguments(args)
        args.run_budgets = scale_suite.BUDGETS
        args.num_restarts, args.raw_samples = NUM_RESTARTS, RAW_SAMPLES
    nes_shift.check_budget(parser, args)
    return args


def main(argv: Sequence[str] | None = None) -> Path:
    r"""Run the benchmark; returns the path of the markdown summary."""
    args = parse_args(argv)
    use_threads(args.threads)
    runs = [
        scale_suite.RunSpec(
            problem=problem,
            method=args.run_method,
            seed=seed,
            budget=args.run_budgets[problem],
            num_restarts=args.num_restarts,
            raw_samples=args.raw_samples,
            time_budget=None,
        )
        for seed in seed_range(args)
        for problem in args.problems
    ]
    run_store = args.out / "bo_runs"
    start = time.perf_counter()
    # The runs first: every method of a run reads the same stored run.
    run_jobs(
        partial(stored_run, store=run_store, run=scale_suite.run),
        runs,
        args.jobs,
        args.threads,
        scale_suite.progress_line,
    )
    jobs = [
        ShiftJob(run, method, tuple(args.sizes), args.budget, run_store, args.smoke)
        for run in runs
        for method in args.methods
    ]
    results = run_jobs(
        partial(execute, store=args.out / "runs"), jobs, args.jobs, args.threads, progress_line
    )
    rows = [row for job_rows in results for row in job_rows]
    write_rows_csv(rows, args.out / "runs.csv")
    table_args = argparse.Namespace(
        datasets=list(dict.fromkeys(row["dataset"] for row in rows)),
        sizes=args.sizes,
        methods=args.methods,
        severities=list(SELECTION_SEVERITIES),
    )
    summary = args.out / "summary.md"
    write_text(
        summary,
        f"{summary_header(__file__, argv, args.threads)}\n\n{len(runs)} BO runs of "
        f"{args.run_method} ({len(args.problems)} problem(s) x {args.seeds} seed(s)), "
        f"{len(jobs)} jobs (search budget {args.budget}), "
        f"{time.perf_counter() - start:.0f} s wall-clock in this invocation (runs and jobs "
        f"loaded from {args.out} are not timed again).\n\n"
        "Trained on the first half of each run's evaluations, tested on the second half; "
        "the severity column is the selection's: 0 selects on D_val, "
        f"{MAX_SEVERITY} on D_val^shift of severity {MAX_SEVERITY} (the references are "
        "fitted once and repeated). Mean ± standard error over seeds; NLL in the "
        "objective's units (including ½ log 2π; lower is better); calibration error: mean "
        "absolute gap between the coverage of the central 50, 80, 95 % intervals and their "
        "level; oracle NLL: the best member's NLL per point.\n\n"
        + nes_shift.summary_table(rows, table_args, repeats="seeds")
        + "\n"
        + nes_shift.claim_table(rows, table_args, SELECTION_SEVERITIES, "selection severity"),
    )
    print(summary.read_text())
    return summary


if __name__ == "__main__":
    main()
