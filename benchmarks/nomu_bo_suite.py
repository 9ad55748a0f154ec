"""Protocol 1 (NOMU BO suite): registered surrogates side by side with GP + LogEI and
random search, on identical seeds and initial designs.

Writes ``runs.csv`` (one row per evaluation), ``summary.csv`` (one row per run),
``summary.md`` (mean ± standard error of the normalised final regret, and seconds per
iteration) and one best-so-far plot per problem into ``--out``. Every finished run is also
stored in ``--out/runs/``; a repeated command with the same budget loads those runs instead
of running them again, so an interrupted benchmark resumes where it stopped. Runs are
ordered seed by seed, so a partial results folder covers every problem and method.

A model may name its own acquisition as ``MODEL:ACQUISITION`` (others use
``--acquisition``), so one table can set two acquisitions of one surrogate side by side.

Examples:
    python -m benchmarks.nomu_bo_suite --models mc-dropout --dims 5 --seeds 5 --jobs 2
    python -m benchmarks.nomu_bo_suite --models deep-ensemble deep-ensemble:qlogei --dims 5
    python -m benchmarks.nomu_bo_suite --models hyper-deep-ensemble:qlogei --first-seed 5 --seeds 5
    python -m benchmarks.nomu_bo_suite --smoke
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch

import benchmarks.dropout_variants  # noqa: F401  (registers the MC dropout variants)
import benchmarks.ensemble_variants  # noqa: F401  (registers the deep-ensemble variants)
from benchmarks.common import (
    add_device_option,
    add_jobs_option,
    add_nomu_suite_options,
    add_seed_options,
    mean_and_standard_error,
    nomu_suite_run_key,
    plot_best_so_far,
    run_bo_for_storing,
    run_jobs,
    runner_parser,
    seed_range,
    stored_run,
    summary_header,
    use_threads,
)
from botorch_nn_uq.bo import (
    ACQUISITIONS,
    RANDOM_SEARCH,
    SURROGATES,
    BOResult,
    Strategy,
    write_rows_csv,
)

BASELINE = ("gp", "logei")


@dataclass(frozen=True)
class RunSpec:
    r"""One BO run of the benchmark."""

    problem: str
    dim: int
    model: str
    acquisition: str
    seed: int
    iterations: int
    n_initial: int
    num_restarts: int
    raw_samples: int
    device: str = "cpu"

    @property
    def method(self) -> str:
        return self.model if self.model == RANDOM_SEARCH else f"{self.model}+{self.acquisition}"

    @property
    def strategy(self) -> Strategy:
        r"""The run's strategy: the model and the acquisition, maximised with the
        protocol's ``optimize_acqf`` restarts and raw samples."""
        if self.model == RANDOM_SEARCH:
            return Strategy(RANDOM_SEARCH, acquisition="")
        strategy = Strategy(self.model, acquisition=self.acquisition)
        if not strategy.uses_optimize_acqf:
            return strategy
        options = (("num_restarts", self.num_restarts), ("raw_samples", self.raw_samples))
        return dataclasses.replace(strategy, acquisition_options=options)

    @property
    def key(self) -> str:
        r"""The name of the run's stored result (:func:`~common.nomu_suite_run_key`)."""
        return nomu_suite_run_key(self, label=self.method)


def run(spec: RunSpec) -> BOResult:
    r"""One BO run on ``spec.device`` and this process's torch threads (``--threads``),
    ready for storing (:func:`~common.run_bo_for_storing`)."""
    return run_bo_for_storing(
        spec.problem,
        spec.dim,
        spec.strategy,
        iterations=spec.iterations,
        n_initial=spec.n_initial,
        seed=spec.seed,
        device=spec.device,
    )


def progress_line(spec: RunSpec, result: BOResult) -> str:
    r"""What the progress output says of a finished run."""
    return (
        f"{result.problem} {spec.method} seed {spec.seed}: regret {result.final_regret:.3e}, "
        f"{result.seconds_per_iteration:.2f} s/iteration"
    )


def summary_table(results: Sequence[tuple[RunSpec, BOResult]], methods: Sequence[str]) -> str:
    r"""Markdown tables of final normalised regret and seconds per iteration."""
    regrets: dict[tuple[str, str], list[float]] = defaultdict(list)
    seconds: dict[str, list[float]] = defaultdict(list)
    for spec, result in results:
        regrets[(result.problem, spec.method)].append(result.final_regret)
        if spec.model != RANDOM_SEARCH:
            seconds[spec.method].append(result.seconds_per_iteration)
    problems = sorted({problem for problem, _ in regrets})
    header = "| problem | " + " | ".join(methods) + " |"
    lines = [header, "|" + " --- |" * (len(methods) + 1)]
    for problem in problems:
        cells = []
        for method in methods:
            mean, error = mean_and_standard_error(regrets[(problem, method)])
            cells.append(f"{mean:.3e} ± {error:.1e}")
        lines.append(f"| {problem} | " + " | ".join(cells) + " |")
    averages = []
    for method in methods:
        per_problem = [statistics.fmean(regrets[(problem, method)]) for problem in problems]
        averages.append(f"{statistics.fmean(per_problem):.3e}")
    lines.append("| **average** | " + " | ".join(averages) + " |")
    lines += ["", "| method | seconds per iteration (mean ± s.e.) |", "| --- | --- |"]
    for method in methods:
        if method in seconds:
            mean, error = mean_and_standard_error(seconds[method])
            lines.append(f"| {method} | {mean:.2f} ± {error:.2f} |")
    return "\n".join(lines) + "\n"


def regret_curves(
    results: Sequence[tuple[RunSpec, BOResult]], methods: Sequence[str]
) -> dict[str, dict[str, tuple[torch.Tensor, torch.Tensor]]]:
    r"""``problem -> method -> (evaluations, runs x evaluations regrets)`` for
    :func:`~common.plot_best_so_far`, problems sorted, methods in the order given."""
    regrets: dict[tuple[str, str], list[list[float]]] = defaultdict(list)
    for spec, result in results:
        regrets[(result.problem, spec.method)].append([r.regret for r in result.records])
    n_initial = results[0][0].n_initial
    curves: dict[str, dict[str, tuple[torch.Tensor, torch.Tensor]]] = {}
    for problem in sorted({problem for problem, _ in regrets}):
        curves[problem] = {}
        for method in methods:
            runs = torch.tensor(regrets[(problem, method)], dtype=torch.float64)
            curves[problem][method] = (torch.arange(runs.shape[1]) + n_initial, runs)
    return curves


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = runner_parser(
        __doc__,
        out=Path("benchmarks/results/nomu_bo_suite"),
        smoke="tiny budget (for the test suite): 1 seed, 2 steps",
    )
    parser.add_argument(
        "--models",
        nargs="+",
        default=["mc-dropout"],
        help="surrogates to compare with GP + LogEI and random search, each MODEL or "
        f"MODEL:ACQUISITION (models: {', '.join(SURROGATES)})",
    )
    parser.add_argument(
        "--acquisition",
        default="logei",
        help=f"acquisition of the models that name none ({', '.join(_usable_acquisitions())})",
    )
    parser.add_argument(
        "--without-baselines",
        action="store_true",
        help="run the named models only, without GP + LogEI and random search (to add a "
        "model to runs whose baselines are published)",
    )
    add_nomu_suite_options(parser)
    add_seed_options(parser, default=5)
    add_jobs_option(parser)
    add_device_option(parser)
    args = parser.parse_args(argv)
    if args.smoke:
        args.problems, args.dims, args.seeds = ["levy", "g-function"], [2], 1
        args.iterations, args.n_initial, args.num_restarts, args.raw_samples = 2, 4, 2, 32
    args.methods = []
    for entry in args.models:
        try:
            args.methods.append(_method(entry, args.acquisition))
        except ValueError as error:
            parser.error(
                f"unknown model, or unknown or target-value acquisition, in {entry!r}: {error}"
            )
    unusable = [a for _, a in args.methods if a not in _usable_acquisitions()]
    if unusable:
        parser.error(
            f"unknown or target-value acquisition(s) {unusable}; valid: "
            + ", ".join(_usable_acquisitions())
        )
    return args


def _usable_acquisitions() -> list[str]:
    r"""The registered acquisitions that need no target value."""
    return [name for name, spec in ACQUISITIONS.items() if not spec.requires_target]


def _method(entry: str, default_acquisition: str) -> tuple[str, str]:
    r"""``(model, acquisition)`` of an entry: a strategy's spelling, whose acquisition
    is ``default_acquisition`` when the entry names a model only."""
    strategy = Strategy.parse(entry if ":" in entry else f"{entry}:{default_acquisition}")
    return strategy.model, strategy.acquisition


def main(argv: Sequence[str] | None = None) -> Path:
    r"""Run the benchmark; returns the path of the markdown summary."""
    args = parse_args(argv)
    use_threads(args.threads)
    methods_specs = [method for method in args.methods if method != BASELINE]
    if not args.without_baselines:
        methods_specs += [BASELINE, (RANDOM_SEARCH, "")]
    specs = [
        RunSpec(
            problem=problem,
            dim=dim,
            model=model,
            acquisition=acquisition,
            seed=seed,
            iterations=args.iterations,
            n_initial=args.n_initial,
            num_restarts=args.num_restarts,
            raw_samples=args.raw_samples,
            device=args.device,
        )
        for seed in seed_range(args)
        for dim in args.dims
        for problem in args.problems
        for model, acquisition in methods_specs
    ]
    store = args.out / "runs"
    methods = list(dict.fromkeys(spec.method for spec in specs))
    start = time.perf_counter()
    job = partial(stored_run, store=store, run=run)
    outcomes = run_jobs(job, specs, args.jobs, args.threads, progress_line)
    results = list(zip(specs, outcomes, strict=True))
    args.out.mkdir(parents=True, exist_ok=True)
    write_rows_csv([row for _, result in results for row in result.rows()], args.out / "runs.csv")
    write_rows_csv(
        [
            {
                "problem": result.problem,
                "method": spec.method,
                "seed": spec.seed,
                "final_regret": result.final_regret,
                "seconds_per_iteration": result.seconds_per_iteration,
            }
            for spec, result in results
        ],
        args.out / "summary.csv",
    )
    table = summary_table(results, methods)
    summary = args.out / "summary.md"
    summary.write_text(
        f"{summary_header(__file__, argv, args.threads)}\n\n{len(specs)} runs, "
        f"{args.n_initial} initial points + {args.iterations} iterations each, "
        f"{time.perf_counter() - start:.0f} s wall-clock in this invocation (runs loaded "
        f"from {store} are not timed again).\n\n"
        "Normalised final regret (mean ± standard error over seeds):\n\n" + table
    )
    plot_best_so_far(regret_curves(results, methods), args.out, "normalised regret (mean ± s.e.)")
    print(summary.read_text())
    return summary


if __name__ == "__main__":
    main()
