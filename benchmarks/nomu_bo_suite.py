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
    python benchmarks/nomu_bo_suite.py --models mc-dropout --dims 5 --seeds 5 --jobs 2
    python benchmarks/nomu_bo_suite.py --models deep-ensemble deep-ensemble:qlogei --dims 5
    python benchmarks/nomu_bo_suite.py --models hyper-deep-ensemble:qlogei --first-seed 5 --seeds 5
    python benchmarks/nomu_bo_suite.py --smoke
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
import warnings
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch

from botorch_nn_uq.bo.loop import BOResult, run_bo, save_atomically, write_rows_csv
from botorch_nn_uq.bo.registry import ACQUISITIONS, RANDOM_SEARCH, SURROGATES
from botorch_nn_uq.problems import NOMU_SUITE_NAMES, get_bo_problem

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

    @property
    def method(self) -> str:
        return self.model if self.model == RANDOM_SEARCH else f"{self.model}+{self.acquisition}"

    @property
    def key(self) -> str:
        r"""A file-name-safe identifier of the run and its budget."""
        return (
            f"{self.problem}-{self.dim}d_{self.method}_seed{self.seed}_it{self.iterations}"
            f"_init{self.n_initial}_r{self.num_restarts}_raw{self.raw_samples}"
        )


def execute(spec: RunSpec, store: Path) -> BOResult:
    r"""Run one BO run single-threaded (runs are parallelised across processes), or load
    it from ``store`` if an earlier invocation finished it; finished runs are saved there."""
    path = store / f"{spec.key}.pt"
    if path.exists():
        return torch.load(path, weights_only=False)
    torch.set_num_threads(1)
    # Only the final "optimisation failed" notice; optimize_acqf has retried by then.
    warnings.filterwarnings("ignore", message="Optimization failed", category=RuntimeWarning)
    problem = get_bo_problem(spec.problem, spec.dim)
    result = run_bo(
        problem,
        spec.model,
        spec.acquisition,
        iterations=spec.iterations,
        n_initial=spec.n_initial,
        seed=spec.seed,
        num_restarts=spec.num_restarts,
        raw_samples=spec.raw_samples,
    )
    save_atomically(result, path)
    return result


def mean_and_standard_error(values: Sequence[float]) -> tuple[float, float]:
    r"""Mean and standard error of the mean (0 for a single value)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, 0.0
    return mean, statistics.stdev(values) / math.sqrt(len(values))


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


def plot_best_so_far(
    results: Sequence[tuple[RunSpec, BOResult]], methods: Sequence[str], out: Path
) -> list[Path]:
    r"""One plot per problem: mean normalised regret (± s.e.) versus evaluations."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves: dict[tuple[str, str], list[list[float]]] = defaultdict(list)
    for spec, result in results:
        curves[(result.problem, spec.method)].append([r.regret for r in result.records])
    paths = []
    for problem in sorted({problem for problem, _ in curves}):
        figure, axis = plt.subplots(figsize=(6, 4))
        for method in methods:
            runs = torch.tensor(curves[(problem, method)], dtype=torch.float64)
            mean = runs.mean(0)
            error = runs.std(0) / math.sqrt(runs.shape[0]) if runs.shape[0] > 1 else 0 * mean
            n_initial = results[0][0].n_initial
            evaluations = torch.arange(runs.shape[1]) + n_initial
            axis.plot(evaluations, mean.clamp_min(1e-12), label=method)
            axis.fill_between(
                evaluations,
                (mean - error).clamp_min(1e-12),
                (mean + error).clamp_min(1e-12),
                alpha=0.2,
            )
        axis.set_yscale("log")
        axis.set_xlabel("evaluations")
        axis.set_ylabel("normalised regret (mean ± s.e.)")
        axis.set_title(problem)
        axis.legend()
        figure.tight_layout()
        path = out / f"best_so_far_{problem}.png"
        figure.savefig(path, dpi=110)
        plt.close(figure)
        paths.append(path)
    return paths


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
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
    parser.add_argument("--problems", nargs="+", default=list(NOMU_SUITE_NAMES))
    parser.add_argument("--dims", nargs="+", type=int, default=[5])
    parser.add_argument("--seeds", type=int, default=5, help="number of seeds")
    parser.add_argument(
        "--first-seed",
        type=int,
        default=0,
        help="seeds start here (so several processes or machines can share the seeds)",
    )
    parser.add_argument("--iterations", type=int, default=64)
    parser.add_argument("--n-initial", type=int, default=8)
    parser.add_argument("--num-restarts", type=int, default=10)
    parser.add_argument("--raw-samples", type=int, default=512)
    parser.add_argument("--jobs", type=int, default=1, help="parallel worker processes")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/nomu_bo_suite"))
    parser.add_argument(
        "--smoke", action="store_true", help="tiny budget (for the test suite): 1 seed, 2 steps"
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.problems, args.dims, args.seeds = ["levy", "g-function"], [2], 1
        args.iterations, args.n_initial, args.num_restarts, args.raw_samples = 2, 4, 2, 32
    if args.seeds < 1 or args.first_seed < 0:
        parser.error("--seeds must be positive and --first-seed non-negative.")
    args.methods = [_method(entry, args.acquisition) for entry in args.models]
    unknown = [model for model, _ in args.methods if model not in SURROGATES]
    if unknown:
        parser.error(f"unknown model(s) {unknown}; valid: {', '.join(SURROGATES)}")
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
    r"""``(model, acquisition)`` of a ``MODEL`` or ``MODEL:ACQUISITION`` entry."""
    model, _, acquisition = entry.partition(":")
    return model, acquisition or default_acquisition


def main(argv: Sequence[str] | None = None) -> Path:
    r"""Run the benchmark; returns the path of the markdown summary."""
    args = parse_args(argv)
    methods_specs = [method for method in args.methods if method != BASELINE]
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
        )
        for seed in range(args.first_seed, args.first_seed + args.seeds)
        for dim in args.dims
        for problem in args.problems
        for model, acquisition in methods_specs
    ]
    store = args.out / "runs"
    methods = list(dict.fromkeys(spec.method for spec in specs))
    start = time.perf_counter()

    def report(index: int, spec: RunSpec, result: BOResult) -> None:
        print(
            f"[{index}/{len(specs)}] {result.problem} {spec.method} seed {spec.seed}: "
            f"regret {result.final_regret:.3e}, {result.seconds_per_iteration:.2f} s/iteration "
            f"({time.perf_counter() - start:.0f} s elapsed)",
            flush=True,
        )

    if args.jobs > 1:
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            outcomes = []
            for index, (spec, result) in enumerate(
                zip(specs, pool.map(execute, specs, [store] * len(specs)), strict=True), start=1
            ):
                report(index, spec, result)
                outcomes.append(result)
    else:
        outcomes = []
        for index, spec in enumerate(specs, start=1):
            outcomes.append(execute(spec, store))
            report(index, spec, outcomes[-1])
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
    command = "python benchmarks/nomu_bo_suite.py " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    table = summary_table(results, methods)
    summary = args.out / "summary.md"
    summary.write_text(
        f"Command: `{command.strip()}`\n\n{len(specs)} runs, "
        f"{args.n_initial} initial points + {args.iterations} iterations each, "
        f"{time.perf_counter() - start:.0f} s wall-clock in this invocation (runs loaded "
        f"from {store} are not timed again).\n\n"
        "Normalised final regret (mean ± standard error over seeds):\n\n" + table
    )
    plot_best_so_far(results, methods, args.out)
    print(summary.read_text())
    return summary


if __name__ == "__main__":
    main()
