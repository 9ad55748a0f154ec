"""Protocol 6: where a GP is not enough (many points, many dimensions, big batches); and
protocol 7: the same against the field's standard peers, on non-stationary and control
problems.

Protocol 6's three problems, each with its own budget (``../shared``-free: all problems
are built in), run by default; protocol 7 (design note ``peers.md``) adds, run when
``--problems`` names them, the non-stationary warped Hartmann-6 at its two budgets
(``warped-hartmann``, ``warped-hartmann-q10``) and two control problems of TuRBO's paper,
the lunar lander's 12 controller constants (``lunar-lander``, the ``lunar`` extra) and the
rover's 60-D trajectory (``rover``):

========================  ===========  ================  ======================
problem                   dimension    initial (Sobol)   steps x batch size q
========================  ===========  ================  ======================
nn-draw (random network)  200          100               50 x 10
ackley                    20           200               48 x 100
rastrigin                 10           20                40 x 5
warped-hartmann           6            10                90 x 1
warped-hartmann-q10       6            20                40 x 10
lunar-lander              12           50                30 x 50
rover                     60           200               48 x 100
========================  ===========  ================  ======================

Methods, side by side on the same seeds and the same Sobol initial designs:
``gp:qlogei`` (BoTorch ``SingleTaskGP`` + qLogEI; the q-batch is optimised
sequentially, one greedy point after the other, since joint optimisation of 10 to 100
points is O(q^2) to O(q^3) per sample), the package's networks with batch Thompson
sampling (``MODEL:ts``), with warm-started refits when a method has ``+continual`` and
proposals inside a TuRBO-style trust region when it has ``+tr``, BoTorch's community
``VBLLModel`` with its own Thompson sampling (``vbll:vbll-ts``, see ``vbll_peer.py``)
and random search. A method is a strategy's spelling
(:class:`~botorch_nn_uq.bo.Strategy`): ``MODEL:ACQUISITION`` with optional
``+continual`` and ``+tr``, or ``+turbo`` for TuRBO-1 itself (``TurboProposer``: its
region weighted by a GP's lengthscales, TuRBO's candidates and restarts that set the
run's data aside), with ``+bts`` choosing the batch among TuRBO's candidates by the
package's batch Thompson sampling instead of ``MaxPosteriorSampling``, and ``+local``
(with ``+tr`` or ``+turbo``) fitting region-locally: the surrogate's inputs normalised to
the region grown 4 times around the incumbent. The protocol adds to every strategy
``--num-restarts`` and ``--raw-samples``, ``+seq`` for the GPs' q-acquisitions and TuRBO's
success tolerance (:attr:`RunSpec.strategy`). Protocol 7's
GP peers are registered by ``gp_peers.py``: ``gp-turbo:ts+turbo`` is GP-TuRBO-1 with the
tutorial's kernel and constraints, and ``gp-warp:qlogei`` the GP with BoTorch's ``Warp``
input transform; ``ensemble_variants.py`` registers the deep ensemble with 10 and 20
members (``deep-ensemble-10``, ``deep-ensemble-20``) and with 200 optimizer steps
(``deep-ensemble-200-steps``), and ``warp_variants.py`` the deep ensemble and NOMU with a
learnable ``Warp`` (``deep-ensemble-warp``, ``nomu-warp``).

Per problem the markdown summary gives the best value found (the objective is
minimised) and the normalised regret, mean ± standard error over seeds, each method's
mean rank among the methods on the same seed, its wins against the GP and against VBLL
paired by seed, its wins against GP-TuRBO-1 (``gp-turbo``) at equal evaluations and at
equal CPU time (each pair compared within the smaller of its two runs' evaluations, or CPU
seconds of BO: a capped GP-TuRBO-1 run is met where it stopped), the
evaluations and CPU seconds its mean curve needs to reach GP-TuRBO-1's final mean value
(fractions of GP-TuRBO-1's: below 1 is sooner), seconds and process CPU seconds per step
(CPU time is what other jobs on a shared machine do not inflate), the most points a step's
surrogate was fitted on (TuRBO-1's restarts set data aside), the evaluations reached (a
run of the models in ``--capped-models``, the GP and VBLL by default, stops after the step
at which its BO passes ``--time-budget`` seconds, or ``--cpu-budget`` process CPU
seconds), and the batches' diversity: the closest pair of points within any batch
(Euclidean, unit cube) and the number of repeated points.
The nn-draw optimum is not known: its regret is relative to the best value a gradient search
on the network found, and the best value and the ranks are what count. Plots: best value
against evaluations and against cumulative CPU seconds. Finished runs are stored in
``--out/runs/`` and loaded again, so an interrupted benchmark resumes.

Examples:
    python -m benchmarks.scale_suite --problems rastrigin --seeds 5 --jobs 2
    python -m benchmarks.scale_suite --problems ackley --methods deep-ensemble:ts gp:qlogei
    python -m benchmarks.scale_suite --problems warped-hartmann-q10 --methods gp-turbo:ts+turbo \
        gp-warp:qlogei deep-ensemble:ts+turbo+continual --seeds 5 --jobs 2
    python -m benchmarks.scale_suite --smoke
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

import benchmarks.ensemble_variants  # noqa: F401  (registers the deep-ensemble variants)
import benchmarks.gp_peers  # noqa: F401  (registers the GP peers of protocol 7)
import benchmarks.vbll_peer  # noqa: F401  (registers the VBLL peer)
import benchmarks.warp_variants  # noqa: F401  (registers the warped neural surrogates)
from benchmarks.common import (
    add_device_option,
    add_jobs_option,
    add_seed_options,
    device_suffix,
    integer_argument,
    mean_and_standard_error,
    pyplot,
    run_bo_for_storing,
    run_jobs,
    runner_parser,
    save_figure,
    seed_range,
    stored_run,
    summary_header,
    use_threads,
)
from botorch_nn_uq.bo import (
    RANDOM_SEARCH,
    BOResult,
    StepRecord,
    Strategy,
    write_rows_csv,
)


@dataclass(frozen=True)
class ProblemBudget:
    r"""A benchmark problem and its budget.

    Args:
        dim: The input dimension.
        n_initial: Points of the Sobol initial design.
        iterations: BO steps.
        batch_size: Points per step ``q``.
        problem: The registry's name of the problem, if it is not the budget's name (one
            problem at two budgets).
    """

    dim: int
    n_initial: int
    iterations: int
    batch_size: int
    problem: str | None = None


BUDGETS = {
    "nn-draw": ProblemBudget(dim=200, n_initial=100, iterations=50, batch_size=10),
    "ackley": ProblemBudget(dim=20, n_initial=200, iterations=48, batch_size=100),
    "rastrigin": ProblemBudget(dim=10, n_initial=20, iterations=40, batch_size=5),
    # Protocol 7's non-stationary problem, at its two budgets (design note peers.md).
    "warped-hartmann": ProblemBudget(dim=6, n_initial=10, iterations=90, batch_size=1),
    "warped-hartmann-q10": ProblemBudget(
        dim=6, n_initial=20, iterations=40, batch_size=10, problem="warped-hartmann"
    ),
    # Protocol 7's control problems (TuRBO's budgets).
    "lunar-lander": ProblemBudget(dim=12, n_initial=50, iterations=30, batch_size=50),
    "rover": ProblemBudget(dim=60, n_initial=200, iterations=48, batch_size=100),
}
#: The problems of protocol 6, which the runner runs by default.
PROTOCOL_6_PROBLEMS = ("nn-draw", "ackley", "rastrigin")
SMOKE_BUDGETS = {
    "nn-draw": ProblemBudget(dim=6, n_initial=8, iterations=2, batch_size=3),
    "rastrigin": ProblemBudget(dim=3, n_initial=6, iterations=2, batch_size=4),
    "warped-hartmann": ProblemBudget(dim=6, n_initial=6, iterations=2, batch_size=3),
    "lunar-lander": ProblemBudget(dim=12, n_initial=6, iterations=2, batch_size=3),
    "rover": ProblemBudget(dim=60, n_initial=8, iterations=2, batch_size=4),
}
SMOKE_PROBLEMS = ("nn-draw", "rastrigin")
DEFAULT_METHODS = (
    "gp:qlogei",
    "deep-ensemble:ts",
    "deep-ensemble:ts+continual",
    "mc-dropout:ts",
    "neon:ts+continual",
    "vbll:vbll-ts",
    RANDOM_SEARCH,
)
SMOKE_METHODS = ("gp:qlogei", "deep-ensemble:ts+continual+tr", "vbll:vbll-ts", RANDOM_SEARCH)
#: TuRBO-1's success tolerance in BoTorch's tutorial (``--turbo-success-tolerance``).
TURBO_SUCCESS_TOLERANCE = 10


@dataclass(frozen=True)
class RunSpec:
    r"""One BO run of the benchmark."""

    problem: str
    method: str
    seed: int
    budget: ProblemBudget
    num_restarts: int
    raw_samples: int
    time_budget: float | None
    turbo_success_tolerance: int = TURBO_SUCCESS_TOLERANCE
    cpu_budget: float | None = None
    device: str = "cpu"

    @property
    def strategy(self) -> Strategy:
        r"""The run's strategy: the method's spelling with the protocol's settings:
        ``optimize_acqf``'s restarts and raw samples, a GP's q-acquisition optimised
        point by point, and TuRBO's success tolerance."""
        strategy = Strategy.parse(self.method)
        if not strategy.uses_model:
            return strategy
        changes: dict[str, Any] = {}
        if strategy.uses_optimize_acqf:
            options = {"num_restarts": self.num_restarts, "raw_samples": self.raw_samples}
            options.update(strategy.acquisition_options)
            changes["acquisition_options"] = tuple(sorted(options.items()))
            changes["sequential"] = strategy.sequential or strategy.model.startswith("gp")
        if strategy.turbo:
            region = {"success_tolerance": self.turbo_success_tolerance}
            region.update(strategy.region_options)
            changes["region_options"] = tuple(sorted(region.items()))
        return dataclasses.replace(strategy, **changes)

    @property
    def key(self) -> str:
        r"""A file-name-safe identifier of the run and its budget; a run on another
        device than the CPU ends in the device's name (``_cuda``), so the CPU runs'
        names stay those of the runs stored before ``--device`` existed."""
        b = self.budget
        cap = "" if self.time_budget is None else f"_cap{self.time_budget:g}"
        if self.cpu_budget is not None:
            cap += f"_cpucap{self.cpu_budget:g}"
        if self.strategy.turbo and self.turbo_success_tolerance != TURBO_SUCCESS_TOLERANCE:
            cap += f"_success{self.turbo_success_tolerance}"
        cap += device_suffix(self.device)
        return (
            f"{self.problem}-{b.dim}d_{self.method.replace(':', '+')}_seed{self.seed}"
            f"_init{b.n_initial}_it{b.iterations}_q{b.batch_size}"
            f"_r{self.num_restarts}_raw{self.raw_samples}{cap}"
        )


def run(spec: RunSpec) -> BOResult:
    r"""One BO run on ``spec.device`` and this process's torch threads (``--threads``),
    ready for storing (:func:`~common.run_bo_for_storing`)."""
    budget = spec.budget
    return run_bo_for_storing(
        budget.problem or spec.problem,
        budget.dim,
        spec.strategy,
        iterations=budget.iterations,
        batch_size=budget.batch_size,
        n_initial=budget.n_initial,
        seed=spec.seed,
        design="sobol",
        time_budget=spec.time_budget,
        cpu_budget=spec.cpu_budget,
        device=spec.device,
    )


def progress_line(spec: RunSpec, result: BOResult) -> str:
    r"""What the progress output says of a finished run."""
    return (
        f"{result.problem} {spec.method} seed {spec.seed}: best "
        f"{result.records[-1].best_value:.4g}, regret {result.final_regret:.3e}, "
        f"{result.values.numel()} evaluations, {result.seconds_per_iteration:.2f} s/step"
    )


def _ranks(values: dict[str, float]) -> dict[str, float]:
    r"""Rank of every method's value (1 = smallest; ties share the mean rank)."""
    ordered = sorted(values.values())
    return {
        method: statistics.fmean(
            [index + 1 for index, other in enumerate(ordered) if other == value]
        )
        for method, value in values.items()
    }


def summary_table(results: Sequence[tuple[RunSpec, BOResult]], methods: Sequence[str]) -> str:
    r"""One markdown table per problem (see the module docstring)."""
    by_problem: dict[str, dict[tuple[str, int], BOResult]] = defaultdict(dict)
    for spec, result in results:
        by_problem[spec.problem][(spec.method, spec.seed)] = result
    sections = []
    for runs in by_problem.values():
        seeds = sorted({seed for _, seed in runs})
        ranks: dict[str, list[float]] = defaultdict(list)
        for seed in seeds:
            best = {m: runs[(m, seed)].records[-1].best_value for m in methods if (m, seed) in runs}
            for method, rank in _ranks(best).items():
                ranks[method].append(rank)
        name = next(iter(runs.values())).problem
        lines = [
            f"**{name}** ({len(seeds)} seeds)",
            "",
            "| method | best value | normalised regret | mean rank | better than GP | "
            "better than VBLL | better than GP-TuRBO at equal evaluations | ... at equal CPU s | "
            "evaluations, CPU s to reach GP-TuRBO's final value | s per step | "
            "CPU s per step | largest n fitted on | evaluations | closest pair in a batch | "
            "repeated points |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- "
            "| --- |",
        ]
        for method in methods:
            own = [runs[(method, seed)] for seed in seeds if (method, seed) in runs]
            if not own:
                continue
            best, best_error = mean_and_standard_error([r.records[-1].best_value for r in own])
            regret, regret_error = mean_and_standard_error([r.final_regret for r in own])
            cells = [
                f"{best:.4g} ± {best_error:.2g}",
                f"{regret:.3e} ± {regret_error:.1e}",
                f"{statistics.fmean(ranks[method]):.2f}",
                _wins(runs, method, _reference(methods, "gp"), seeds),
                _wins(runs, method, _reference(methods, "vbll"), seeds),
                _wins_at_equal_evaluations(runs, method, _reference(methods, "gp-turbo"), seeds),
                "-"
                if method == RANDOM_SEARCH
                else _wins_at_equal_cpu(runs, method, _reference(methods, "gp-turbo"), seeds),
                "-"
                if method == RANDOM_SEARCH
                else _reach_ratios(runs, method, _reference(methods, "gp-turbo"), seeds),
                "-" if method == RANDOM_SEARCH else f"{_seconds_per_step(own):.2f}",
                "-" if method == RANDOM_SEARCH else f"{_cpu_seconds_per_step(own):.2f}",
                "-" if method == RANDOM_SEARCH else _largest_fit(own),
                _evaluations(own),
                f"{min(r.batch_min_distance for run in own for r in run.records):.3g}",
                str(sum(r.batch_duplicates for run in own for r in run.records)),
            ]
            lines.append(f"| {method} | " + " | ".join(cells) + " |")
        sections.append("\n".join(lines))
    return "\n\n".join(sections) + "\n"


def _reference(methods: Sequence[str], model: str) -> str | None:
    r"""The first method of ``model`` (the GP or VBLL column's reference)."""
    return next((method for method in methods if Strategy.parse(method).model == model), None)


def _against(
    runs: dict,
    method: str,
    reference: str | None,
    seeds: Sequence[int],
    compare: Callable[[list[tuple[BOResult, BOResult]]], str],
) -> str:
    r"""``compare`` of the ``(method's run, reference's run)`` pairs of the seeds both
    methods ran; ``-`` for the reference itself, ``n/a`` without a reference or a pair."""
    if method == reference:
        return "-"
    if reference is None:
        return "n/a"
    pairs = [
        (runs[(method, s)], runs[(reference, s)])
        for s in seeds
        if (method, s) in runs and (reference, s) in runs
    ]
    return compare(pairs) if pairs else "n/a"


def _wins(runs: dict, method: str, reference: str | None, seeds: Sequence[int]) -> str:
    r"""``wins/pairs``: of the seeds both methods ran, those on which ``method`` ended
    with a smaller best value than ``reference``."""

    def count(pairs: list[tuple[BOResult, BOResult]]) -> str:
        wins = sum(
            own.records[-1].best_value < other.records[-1].best_value for own, other in pairs
        )
        return f"{wins}/{len(pairs)}"

    return _against(runs, method, reference, seeds, count)


def best_within_evaluations(result: BOResult, evaluations: int) -> float:
    r"""The best value a run had found within its first ``evaluations`` evaluations (the
    last told batch that fits; the initial design's best value at the least)."""
    best = result.records[0].best_value
    for record in result.records[1:]:
        if record.num_evaluations > evaluations:
            break
        best = record.best_value
    return best


def _wins_within(
    runs: dict,
    method: str,
    reference: str | None,
    seeds: Sequence[int],
    spent: Callable[[BOResult], float],
    best_within: Callable[[BOResult, float], float],
) -> str:
    r"""``wins/pairs`` at an equal budget: on each seed both methods ran, the best values
    ``best_within(run, budget)`` each had found within the smaller of the two runs'
    ``spent(run)``."""

    def count(pairs: list[tuple[BOResult, BOResult]]) -> str:
        wins = 0
        for own, other in pairs:
            budget = min(spent(own), spent(other))
            wins += best_within(own, budget) < best_within(other, budget)
        return f"{wins}/{len(pairs)}"

    return _against(runs, method, reference, seeds, count)


def _wins_at_equal_evaluations(
    runs: dict, method: str, reference: str | None, seeds: Sequence[int]
) -> str:
    r"""``wins/pairs`` at equal evaluations: on each seed both methods ran, the best
    values each had found within the smaller of the two runs' evaluations (the final
    values, where both ran the whole budget; a run stopped by a cap is compared where it
    stopped)."""
    return _wins_within(
        runs,
        method,
        reference,
        seeds,
        lambda run: run.records[-1].num_evaluations,
        best_within_evaluations,
    )


def best_within_cpu_seconds(result: BOResult, seconds: float) -> float:
    r"""The best value a run had found once its BO steps had used ``seconds`` cumulative
    process CPU seconds (the initial design's best value for ``seconds`` below its first
    step's)."""
    best, spent = result.records[0].best_value, 0.0
    for record in result.records[1:]:
        spent += record.cpu_seconds
        if spent > seconds:
            break
        best = record.best_value
    return best


def _wins_at_equal_cpu(runs: dict, method: str, reference: str | None, seeds: Sequence[int]) -> str:
    r"""``wins/pairs`` at equal CPU time: on each seed both methods ran, the best values
    each had found within the smaller of the two runs' total CPU seconds of BO."""
    return _wins_within(
        runs,
        method,
        reference,
        seeds,
        lambda run: sum(record.cpu_seconds for record in run.records),
        best_within_cpu_seconds,
    )


def mean_curve(runs: Sequence[BOResult]) -> tuple[Tensor, Tensor, Tensor]:
    r"""The mean over runs of the best value, the evaluations and the cumulative process
    CPU seconds of BO after the initial design and each step (up to the shortest run)."""
    length = min(len(run.records) for run in runs)

    def mean(field: str) -> Tensor:
        values = [[getattr(r, field) for r in run.records[:length]] for run in runs]
        return torch.tensor(values, dtype=torch.float64).mean(0)

    return mean("best_value"), mean("num_evaluations"), mean("cpu_seconds").cumsum(0)


def reach_ratios(runs: Sequence[BOResult], reference: Sequence[BOResult]) -> str:
    r"""``"<e>×, <c>×"``: the evaluations and the cumulative CPU seconds of BO after
    which the mean best value of ``runs`` first reaches the reference's final mean best
    value, as fractions of the reference's evaluations and CPU seconds (below 1: the
    method gets there sooner); ``"not reached"`` if it never does."""
    best, evaluations, cpu = mean_curve(runs)
    target, reference_evaluations, reference_cpu = (c[-1] for c in mean_curve(reference))
    reached = (best <= target).nonzero()
    if reached.numel() == 0:
        return "not reached"
    first = int(reached[0])
    return (
        f"{float(evaluations[first] / reference_evaluations):.2g}×, "
        f"{float(cpu[first] / reference_cpu):.2g}×"
    )


def _reach_ratios(runs: dict, method: str, reference: str | None, seeds: Sequence[int]) -> str:
    return _against(
        runs,
        method,
        reference,
        seeds,
        lambda pairs: reach_ratios([own for own, _ in pairs], [other for _, other in pairs]),
    )


def _seconds_per_step(runs: Sequence[BOResult]) -> float:
    return statistics.fmean(run.seconds_per_iteration for run in runs)


def _cpu_seconds_per_step(runs: Sequence[BOResult]) -> float:
    r"""Mean process CPU seconds of a BO step (0 for runs stored before they were
    recorded)."""
    steps = [r.cpu_seconds for run in runs for r in run.records if r.step > 0]
    return statistics.fmean(steps) if steps else 0.0


def _largest_fit(runs: Sequence[BOResult]) -> str:
    r"""The most points a step's surrogate was fitted on, over the runs (``n/a`` for runs
    stored before it was recorded)."""
    largest = max(r.fit_points for run in runs for r in run.records)
    return str(largest) if largest else "n/a"


def _evaluations(runs: Sequence[BOResult]) -> str:
    counts = sorted({run.values.numel() for run in runs})
    return str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"


def plot_curves(
    results: Sequence[tuple[RunSpec, BOResult]], methods: Sequence[str], out: Path
) -> list[Path]:
    r"""Per problem: mean best value against evaluations and against cumulative process
    CPU seconds of BO (wall-clock seconds for runs stored before CPU time was recorded)."""
    plt = pyplot()
    paths = []
    for problem in dict.fromkeys(spec.problem for spec, _ in results):
        problem_runs = [r for s, r in results if s.problem == problem]
        cpu = all(r.cpu_seconds > 0 for run in problem_runs for r in run.records[1:])
        figure, (by_evaluations, by_seconds) = plt.subplots(1, 2, figsize=(11, 4))
        for method in methods:
            runs = [r for s, r in results if s.problem == problem and s.method == method]
            if not runs:
                continue
            length = min(len(run.records) for run in runs)
            best = torch.tensor([[r.best_value for r in run.records[:length]] for run in runs])
            evaluations = [record.num_evaluations for record in runs[0].records[:length]]
            seconds = torch.tensor(
                [[_cost(r, cpu) for r in run.records[:length]] for run in runs]
            ).cumsum(-1)
            by_evaluations.plot(evaluations, best.mean(0), label=method)
            if method != RANDOM_SEARCH:
                by_seconds.plot(seconds.mean(0).clamp_min(1e-2), best.mean(0), label=method)
        by_evaluations.set_xlabel("evaluations")
        by_seconds.set_xlabel(
            "cumulative CPU seconds of BO (fit + proposals)"
            if cpu
            else "cumulative seconds of BO (fit + proposals)"
        )
        by_seconds.set_xscale("log")
        for axis in (by_evaluations, by_seconds):
            axis.set_ylabel("best value found (mean over seeds; lower is better)")
        by_evaluations.set_title(next(r.problem for s, r in results if s.problem == problem))
        by_evaluations.legend(fontsize=7)
        paths.append(save_figure(figure, out / f"best_value_{problem}.png"))
    return paths


def _cost(record: StepRecord, cpu: bool) -> float:
    return record.cpu_seconds if cpu else record.seconds


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = runner_parser(
        __doc__,
        out=Path("benchmarks/results/scale_suite"),
        smoke="tiny budgets (for the test suite): 1 seed",
    )
    parser.add_argument(
        "--problems",
        nargs="+",
        choices=list(BUDGETS),
        help=f"default: {' '.join(PROTOCOL_6_PROBLEMS)} (protocol 6; with --smoke: "
        f"{' '.join(SMOKE_PROBLEMS)}, and --problems may name {', '.join(SMOKE_BUDGETS)})",
    )
    parser.add_argument("--methods", nargs="+", help=f"default: {' '.join(DEFAULT_METHODS)}")
    add_seed_options(parser, default=None, help="number of seeds (default 5; 1 with --smoke)")
    parser.add_argument("--num-restarts", type=int, default=10, help="GP optimize_acqf restarts")
    parser.add_argument("--raw-samples", type=int, default=512, help="GP raw samples")
    parser.add_argument(
        "--time-budget",
        type=float,
        default=1800.0,
        help="seconds of BO after which a run of a capped model stops (it reports the "
        "evaluations reached)",
    )
    parser.add_argument(
        "--capped-models",
        nargs="*",
        default=["gp", "vbll"],
        help="models whose runs stop at --time-budget (or --cpu-budget)",
    )
    parser.add_argument(
        "--cpu-budget",
        type=float,
        help="process CPU seconds of BO after which a run of a capped model stops, in place "
        "of --time-budget's wall-clock seconds (a cap that other jobs on a shared machine "
        "do not shorten; it marks the stored runs' files)",
    )
    parser.add_argument(
        "--turbo-success-tolerance",
        type=integer_argument(1),
        default=TURBO_SUCCESS_TOLERANCE,
        help="improving batches in a row after which a +turbo region doubles (default 10, "
        "BoTorch's tutorial; the TuRBO paper's code uses 3); the summary states it, and "
        "other values mark the stored runs' files",
    )
    add_jobs_option(parser)
    add_device_option(parser)
    parser.add_argument(
        "--runs",
        type=Path,
        help="folder of stored runs (default: OUT/runs), e.g. shared by several summaries",
    )
    parser.add_argument(
        "--stored-only",
        action="store_true",
        help="summarise the stored runs only; runs not stored yet are left out, not run",
    )
    args = parser.parse_args(argv)
    args.budgets = SMOKE_BUDGETS if args.smoke else BUDGETS
    if args.problems is None:
        args.problems = list(SMOKE_PROBLEMS if args.smoke else PROTOCOL_6_PROBLEMS)
    if args.smoke:
        unknown = [problem for problem in args.problems if problem not in SMOKE_BUDGETS]
        if unknown:
            parser.error(f"--smoke has no budget for {', '.join(unknown)}")
        args.num_restarts, args.raw_samples = 2, 32
    args.methods = args.methods or list(SMOKE_METHODS if args.smoke else DEFAULT_METHODS)
    if args.seeds is None:
        args.seeds = 1 if args.smoke else 5
    for name in ("time_budget", "cpu_budget"):
        budget = getattr(args, name)
        if budget is not None and not budget > 0:
            parser.error(f"--{name.replace('_', '-')} must be positive; got {budget}")
    for method in args.methods:
        try:
            Strategy.parse(method)
        except ValueError as error:
            parser.error(f"unknown method {method!r}: {error}")
    return args


def main(argv: Sequence[str] | None = None) -> Path:
    r"""Run the benchmark; returns the path of the markdown summary."""
    args = parse_args(argv)
    use_threads(args.threads)
    specs = [
        RunSpec(
            problem=problem,
            method=method,
            seed=seed,
            budget=args.budgets[problem],
            num_restarts=args.num_restarts,
            raw_samples=args.raw_samples,
            time_budget=args.time_budget
            if Strategy.parse(method).model in args.capped_models and args.cpu_budget is None
            else None,
            turbo_success_tolerance=args.turbo_success_tolerance,
            cpu_budget=args.cpu_budget
            if Strategy.parse(method).model in args.capped_models
            else None,
            device=args.device,
        )
        for seed in seed_range(args)
        for problem in args.problems
        for method in args.methods
    ]
    store = args.runs or args.out / "runs"
    start = time.perf_counter()

    if args.stored_only:
        missing = [spec.key for spec in specs if not (store / f"{spec.key}.pt").exists()]
        specs = [spec for spec in specs if (store / f"{spec.key}.pt").exists()]
        if missing:
            print(f"{len(missing)} runs not stored yet (left out): {', '.join(missing)}")
        if not specs:
            raise SystemExit(f"No stored runs in {store} match the arguments.")
    job = partial(stored_run, store=store, run=run)
    outcomes = run_jobs(job, specs, args.jobs, args.threads, progress_line)
    results = list(zip(specs, outcomes, strict=True))
    args.out.mkdir(parents=True, exist_ok=True)
    write_rows_csv(
        [{**row, "method": spec.method} for spec, result in results for row in result.rows()],
        args.out / "runs.csv",
    )
    write_rows_csv(
        [
            {
                "problem": result.problem,
                "method": spec.method,
                "seed": spec.seed,
                "best_value": result.records[-1].best_value,
                "final_regret": result.final_regret,
                "evaluations": result.values.numel(),
                "seconds_per_step": result.seconds_per_iteration,
                "total_seconds": sum(record.seconds for record in result.records),
                "total_cpu_seconds": sum(record.cpu_seconds for record in result.records),
                "min_batch_distance": min(r.batch_min_distance for r in result.records),
                "duplicates": sum(r.batch_duplicates for r in result.records),
            }
            for spec, result in results
        ],
        args.out / "summary.csv",
    )
    summary = args.out / "summary.md"
    summary.write_text(
        f"{summary_header(__file__, argv, args.threads)}\n\n{len(specs)} runs, "
        f"{time.perf_counter() - start:.0f} s wall-clock in this invocation (stored runs "
        "are loaded, not timed again). Best value: the smallest objective value found "
        f"(mean ± s.e. over seeds). TuRBO-1's success tolerance (`+turbo` methods): "
        f"{args.turbo_success_tolerance}.\n\n" + summary_table(results, args.methods)
    )
    plot_curves(results, args.methods, args.out)
    print(summary.read_text())
    return summary


if __name__ == "__main__":
    main()
