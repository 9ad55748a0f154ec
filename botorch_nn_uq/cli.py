"""The ``botorch-nn-uq`` command line (also ``python -m botorch_nn_uq``).

``botorch-nn-uq optimize`` runs a Bayesian-optimisation loop on a built-in problem with
a chosen surrogate and acquisition; ``botorch-nn-uq list`` shows what is registered.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import importlib.util
import math
import os
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, TextIO

import torch
from torch import Tensor

from botorch_nn_uq import __version__
from botorch_nn_uq.bo.continual import ContinualTraining
from botorch_nn_uq.bo.loop import BOIterationRecord, BOResult, run_bo
from botorch_nn_uq.bo.registry import ACQUISITIONS
from botorch_nn_uq.bo.surrogates import RANDOM_SEARCH, SURROGATES
from botorch_nn_uq.checks import NON_NEGATIVE, OPEN_UNIT_INTERVAL, REALS, Interval
from botorch_nn_uq.problems import BO_PROBLEM_NAMES, BOProblem, get_bo_problem

#: Seeds are 64-bit signed integers for torch's generators.
_MAX_SEED = 2**63 - 1
#: Upper bounds of the size options: far beyond what a run on one machine can do, and
#: low enough that a typo (``--dim 1000000000``) is refused before any work instead of
#: failing on an allocation.
MAX_DIM = 10_000
MAX_POINTS = 1_000_000
MAX_RESTARTS = 10_000
MAX_ITERATIONS = 1_000_000
MAX_THREADS = 1024
#: The largest target value: squared distances to it stay finite in float64.
MAX_TARGET = 1e150

#: A run shorter than this is not worth a hint about its speed (seconds).
_SLOW_RUN_SECONDS = 10.0

#: The wall clock of the summary (a name of its own, so tests can replace it).
_clock = time.perf_counter


def _load_average() -> float | None:
    r"""The machine's 1-minute load average, or ``None`` where the platform has none."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def _cpu_count() -> int:
    r"""The cores this process may run on (its affinity mask where the platform has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _choice(valid: Sequence[str], kind: str) -> Callable[[str], str]:
    def parse(value: str) -> str:
        if value not in valid:
            raise argparse.ArgumentTypeError(
                f"unknown {kind} {value!r}; valid {kind}s: {', '.join(valid)}"
            )
        return value

    return parse


def integer_argument(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    r"""An argparse type: an integer in ``[minimum, maximum]`` (no upper bound for
    ``None``), with an error that names the problem.

    The command line and the benchmark runners share it.

    Args:
        minimum: The smallest accepted value.
        maximum: The largest accepted value, or ``None``.

    Returns:
        A function that parses a command-line string.

    Example:
        >>> integer_argument(1)("3")
        3
    """

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer; got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}; got {value}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"must be at most {maximum}; got {value}")
        return value

    return parse


def _real(interval: Interval = REALS) -> Callable[[str], float]:
    r"""An argparse type: a finite number in ``interval``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number; got {text!r}") from None
        if not (math.isfinite(value) and interval.contains(value)):
            raise argparse.ArgumentTypeError(f"must be {interval}; got {text!r}")
        return value

    return parse


def _build_parsers() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    r"""The command line's parser and its ``optimize`` sub-parser (for errors that
    involve several options)."""
    parser = argparse.ArgumentParser(
        prog="botorch-nn-uq",
        description="Neural-network surrogates with uncertainty for BoTorch.",
    )
    parser.add_argument("--version", action="version", version=f"botorch-nn-uq {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    models = [*SURROGATES, RANDOM_SEARCH]
    optimize = commands.add_parser(
        "optimize",
        help="run a Bayesian-optimisation loop on a built-in problem",
        description=(
            "Minimise a built-in test problem with Bayesian optimisation: uniform random "
            "initial points, then per iteration one surrogate fit and a batch of --batch-size "
            "proposals (optimize_acqf, or Thompson sampling with ts). Prints one line per "
            "iteration (best value so far, normalised regret, seconds) and a summary."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    optimize.add_argument(
        "--problem",
        type=_choice(BO_PROBLEM_NAMES, "problem"),
        default="levy",
        help=f"test problem ({', '.join(BO_PROBLEM_NAMES)})",
    )
    optimize.add_argument(
        "--dim",
        type=integer_argument(2, MAX_DIM),
        default=5,
        help="input dimension of the problem",
    )
    optimize.add_argument(
        "--problem-seed",
        type=integer_argument(0, _MAX_SEED),
        help="seed of the random network of nn-draw (default 0; other problems take none)",
    )
    optimize.add_argument(
        "--model",
        type=_choice(models, "model"),
        default="mc-dropout",
        help="surrogate: "
        + "; ".join(f"{name} = {spec.description}" for name, spec in SURROGATES.items())
        + f"; {RANDOM_SEARCH} = uniform random search (no surrogate)",
    )
    optimize.add_argument(
        "--acquisition",
        type=_choice(list(ACQUISITIONS), "acquisition"),
        default="logei",
        help="acquisition function: "
        + "; ".join(f"{name} = {spec.description}" for name, spec in ACQUISITIONS.items()),
    )
    optimize.add_argument(
        "--iterations",
        type=integer_argument(0, MAX_ITERATIONS),
        default=30,
        help="BO iterations",
    )
    optimize.add_argument(
        "--n-initial",
        type=integer_argument(2, MAX_POINTS),
        default=8,
        help="initial random points",
    )
    optimize.add_argument(
        "--seed", type=integer_argument(0, _MAX_SEED), default=0, help="seed of the whole run"
    )
    optimize.add_argument(
        "--num-restarts",
        type=integer_argument(1, MAX_RESTARTS),
        default=10,
        help="optimize_acqf restarts",
    )
    optimize.add_argument(
        "--raw-samples",
        type=integer_argument(1, MAX_POINTS),
        default=512,
        help="optimize_acqf raw samples (at least --num-restarts)",
    )
    optimize.add_argument(
        "--beta", type=_real(NON_NEGATIVE), default=4.0, help="exploration weight of ucb / qucb"
    )
    optimize.add_argument(
        "--negative-slope",
        type=_real(Interval(0.0, 1.0, upper_closed=False)),
        default=0.01,
        help="slope delta of leaky-ei / q-leaky-ei, in [0, 1)",
    )
    optimize.add_argument(
        "--target",
        type=_real(Interval(-MAX_TARGET, MAX_TARGET)),
        help="target value of the objective: hit it instead of minimising (target-value "
        "optimisation; needs a robust-* or q-robust-ei acquisition)",
    )
    optimize.add_argument(
        "--aleatoric-variance",
        type=_real(NON_NEGATIVE),
        default=0.0,
        help="known aleatoric variance of the outputs for the target-value acquisitions",
    )
    optimize.add_argument(
        "--quantile",
        type=_real(OPEN_UNIT_INTERVAL),
        default=0.1,
        help="quantile q of robust-lcb, in (0, 1) (small = optimistic)",
    )
    optimize.add_argument(
        "--batch-size",
        type=integer_argument(1, MAX_POINTS),
        default=1,
        help="evaluations per iteration (q); with ts the batch comes from Thompson sampling, "
        "with a q-acquisition (qlogei, ...) from optimize_acqf",
    )
    optimize.add_argument(
        "--sequential",
        action="store_true",
        help="optimise a q-acquisition greedily point by point instead of jointly",
    )
    optimize.add_argument(
        "--num-candidates",
        type=integer_argument(1, MAX_POINTS),
        default=4096,
        help="candidates scored by every function of the bank for ts",
    )
    optimize.add_argument(
        "--continual",
        action="store_true",
        help="warm-start each refit from the previous iteration's network (mc-dropout, "
        "deep-ensemble, neon), with a cold refit every --cold-refit-every iterations or when "
        "the error on the newest points doubles",
    )
    optimize.add_argument(
        "--warm-start-steps",
        type=integer_argument(1, MAX_ITERATIONS),
        default=100,
        help="optimizer steps of a warm-started refit (with --continual)",
    )
    optimize.add_argument(
        "--cold-refit-every",
        type=integer_argument(1, MAX_ITERATIONS),
        default=10,
        help="a refit from scratch every this many iterations (with --continual)",
    )
    optimize.add_argument(
        "--trust-region",
        action="store_true",
        help="propose inside a TuRBO-style trust region around the best point (any model)",
    )
    optimize.add_argument(
        "--csv",
        type=Path,
        help="write one row per evaluation to this CSV as the run goes (an interrupted run "
        "keeps every evaluation made): iteration (0 for the initial design), phase, "
        "evaluation number, the inputs x0, x1, ..., the value, and the best value, regret "
        "and timings after its batch",
    )
    optimize.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing --csv file (without it, an existing file is refused)",
    )
    optimize.add_argument(
        "--plot", type=Path, help="save a best-so-far plot (needs matplotlib) to this file"
    )
    optimize.add_argument(
        "--quiet", action="store_true", help="print only the summary, not every iteration"
    )
    optimize.add_argument(
        "--threads",
        type=integer_argument(1, MAX_THREADS),
        help="torch intra-op threads for this run (torch.set_num_threads, for this process "
        "only; default: torch's own, OMP_NUM_THREADS or one per core); on a busy machine "
        "--threads 1 avoids oversubscription and is much faster (network training, GP fits "
        "and the acquisition optimisation all run on these threads)",
    )

    commands.add_parser("list", help="list the registered problems, models and acquisitions")
    return parser, optimize


def _print_record(record: BOIterationRecord) -> None:
    label = "init" if record.iteration == 0 else f"{record.iteration:4d}"
    print(
        f"iter {label} | evals {record.num_evaluations:4d} | value {record.value:12.5g} | "
        f"best {record.best_value:12.5g} | regret {record.regret:10.4e} | "
        f"{record.seconds:6.2f} s",
        flush=True,
    )


def plot_best_so_far(results: Sequence[BOResult], path: Path) -> None:
    r"""Save a plot of normalised regret of the best point versus evaluations.

    Args:
        results: BO runs to draw, one line each.
        path: The image file to write (format from its suffix).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise SystemExit("--plot needs matplotlib: pip install 'botorch-nn-uq[plots]'") from error
    figure, axis = plt.subplots(figsize=(6, 4))
    for result in results:
        evaluations = [record.num_evaluations for record in result.records]
        regrets = [max(record.regret, 1e-12) for record in result.records]
        axis.step(evaluations, regrets, where="post", label=f"{result.model} {result.acquisition}")
    axis.set_yscale("log")
    axis.set_xlabel("evaluations")
    axis.set_ylabel("normalised regret of best point")
    axis.set_title(results[0].problem)
    axis.legend()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)


class _EvaluationWriter:
    r"""Writes one CSV row per evaluation of a BO run as the run makes them (a
    ``run_bo`` ``on_evaluations`` hook), flushed after every batch.

    Args:
        handle: The open CSV file.
        identity: The run's identifiers, the first columns of every row.
        dim: The input dimension (one column ``x0``, ``x1``, ... per input).
    """

    def __init__(self, handle: TextIO, identity: dict[str, Any], dim: int) -> None:
        self.handle, self.identity = handle, identity
        # The step's record without its per-batch fields, which each row replaces by
        # per-evaluation ones.
        step_columns = [
            field.name
            for field in fields(BOIterationRecord)
            if field.name not in ("iteration", "num_evaluations", "value")
        ]
        self.writer = csv.DictWriter(
            handle,
            fieldnames=[
                *identity,
                "iteration",
                "phase",
                "evaluation",
                *(f"x{i}" for i in range(dim)),
                "value",
                *step_columns,
            ],
        )
        self.rows = 0
        #: Whether a write to the file failed.
        self.failed = False
        self._write(self.writer.writeheader)

    def _write(self, write: Callable[[], Any]) -> None:
        r"""Run ``write`` and flush, recording a failure (the error propagates)."""
        try:
            write()
            self.handle.flush()
        except OSError:
            self.failed = True
            raise

    def __call__(self, X: Tensor, values: Tensor, record: BOIterationRecord) -> None:
        r"""Append the rows of one evaluated batch and flush them to the file."""
        step = asdict(record)
        first = record.num_evaluations - values.numel() + 1
        del step["num_evaluations"], step["value"]
        rows = [
            {
                **self.identity,
                **step,
                "phase": "initial" if record.iteration == 0 else "bo",
                "evaluation": first + offset,
                **{f"x{i}": coordinate for i, coordinate in enumerate(x)},
                "value": value,
            }
            for offset, (x, value) in enumerate(zip(X.tolist(), values.tolist(), strict=True))
        ]
        self._write(lambda: self.writer.writerows(rows))
        self.rows += values.numel()


def _csv_writer(
    args: argparse.Namespace, csv_file: TextIO, optimize: argparse.ArgumentParser
) -> _EvaluationWriter:
    r"""The CSV's writer, its header written and flushed now: a file that cannot be
    written (a full disk, ``/dev/full``) fails before any work."""
    identity = {
        "problem": f"{args.problem}-{args.dim}d",
        "model": args.model,
        "acquisition": "" if args.model == RANDOM_SEARCH else args.acquisition,
        "seed": args.seed,
    }
    try:
        return _EvaluationWriter(csv_file, identity, args.dim)
    except OSError as error:
        # Closing flushes what is left in the buffer, which fails the same way.
        with contextlib.suppress(OSError):
            csv_file.close()
        optimize.error(f"argument --csv: cannot write {str(args.csv)!r}: {error.strerror or error}")


def _optimize(
    args: argparse.Namespace,
    problem: BOProblem,
    writer: _EvaluationWriter | None,
    start: float,
    load_at_start: float | None,
) -> int:
    # L-BFGS-B often stops "abnormally" on the piecewise-linear acquisition surfaces of
    # ReLU networks; optimize_acqf then retries by itself, so the warning is only noise here.
    warnings.filterwarnings("ignore", message="Optimization failed", category=RuntimeWarning)
    goal = "minimise" if args.target is None else f"target {args.target:g}"
    print(
        f"{problem.name}-{problem.dim}d ({goal}) | model {args.model} | acquisition "
        f"{args.acquisition if args.model != RANDOM_SEARCH else '-'} | {args.n_initial} initial "
        f"points + {args.iterations} iterations | seed {args.seed}",
        flush=True,
    )
    try:
        result = run_bo(
            problem,
            args.model,
            args.acquisition,
            iterations=args.iterations,
            n_initial=args.n_initial,
            seed=args.seed,
            num_restarts=args.num_restarts,
            raw_samples=args.raw_samples,
            acquisition_options={
                "beta": args.beta,
                "negative_slope": args.negative_slope,
                "aleatoric_variance": args.aleatoric_variance,
                "quantile": args.quantile,
                "num_candidates": args.num_candidates,
            },
            target=args.target,
            callback=None if args.quiet else _print_record,
            batch_size=args.batch_size,
            sequential=args.sequential,
            continual=(
                ContinualTraining(
                    warm_start_steps=args.warm_start_steps,
                    cold_refit_every=args.cold_refit_every,
                )
                if args.continual
                else None
            ),
            trust_region=args.trust_region,
            on_evaluations=writer,
        )
    except KeyboardInterrupt:
        kept = "" if writer is None else f"; {args.csv} holds its {writer.rows} evaluations"
        print(f"interrupted{kept}", file=sys.stderr, flush=True)
        return 130
    except OSError as error:
        if writer is None or not writer.failed:
            raise
        print(
            f"error: cannot write {str(args.csv)!r} ({error.strerror or error}); it holds "
            f"the run's first {writer.rows} evaluations",
            file=sys.stderr,
            flush=True,
        )
        return 1
    total = _clock() - start
    threads, cores = torch.get_num_threads(), _cpu_count()
    print(
        f"summary | best value {result.records[-1].best_value:.6g} ("
        + (f"minimum {problem.min_value:.6g}" if args.target is None else f"target {args.target:g}")
        + f") | normalised regret {result.final_regret:.4e} | "
        f"{result.values.numel()} evaluations | {total:.1f} s total (set-up, initial design "
        f"and {len(result.records) - 1} iterations), {result.seconds_per_iteration:.2f} s per "
        f"iteration | torch threads {threads} ({cores} cores)",
        flush=True,
    )
    loads = [load for load in (load_at_start, _load_average()) if load is not None]
    hint = slow_run_hint(total, threads, cores, max(loads) if loads else None)
    if hint is not None:
        print(f"hint | {hint}", flush=True)
    note = no_improvement_note(result, args.model, problem.dim)
    if note is not None:
        print(f"note | {note}", flush=True)
    if args.csv is not None:
        print(f"wrote {args.csv}")
    if args.plot is not None:
        plot_best_so_far([result], args.plot)
        print(f"wrote {args.plot}")
    return 0


def slow_run_hint(seconds: float, threads: int, cores: int, load: float | None) -> str | None:
    r"""Why a run that took ``seconds`` was slow and what avoids it, or ``None``.

    A run of at least :data:`_SLOW_RUN_SECONDS` gets a hint when torch ran more than one
    intra-op thread and either more threads than cores or on a busy machine, whose load
    average ``load`` (this run's own threads included) was at least half a process above
    its cores: the threads then wait for each other on cores that other processes hold,
    and the small tensors of a BO step take many times longer than on one thread. A
    one-thread run on a busy machine gets a note that it shared its cores.

    Args:
        seconds: The run's wall-clock seconds.
        threads: torch's intra-op threads during the run.
        cores: The cores available to the process.
        load: The highest 1-minute load average seen during the run (``None`` where the
            platform has none).
    """
    if seconds < _SLOW_RUN_SECONDS:
        return None
    busy = load is not None and load >= cores + 0.5
    if threads > 1 and (threads > cores or busy):
        under = f" under load {load:.1f}" if busy else ""
        return (
            f"torch used {threads} threads on {cores} cores{under}; `OMP_NUM_THREADS=1` or "
            f"`--threads 1` avoids oversubscription (much faster on a busy machine)"
        )
    if busy:
        return (
            f"the machine was busy (load {load:.1f} on {cores} cores): the run shared its "
            f"cores with other processes and took longer than on an idle machine"
        )
    return None


def no_improvement_note(result: BOResult, model: str, dim: int) -> str | None:
    r"""A note when no BO iteration of ``result`` improved on its initial design's best
    value (the proposals were all worse), with what to try instead; ``None`` otherwise
    or without iterations."""
    iterations = len(result.records) - 1
    if iterations == 0 or result.records[-1].best_value != result.records[0].best_value:
        return None
    remedies = [f"more iterations (--iterations {max(30, 2 * iterations)})"]
    if model == RANDOM_SEARCH:
        remedies.append("a surrogate (--model gp)")
    elif model != "gp":
        remedies.append("a GP (--model gp)")
    proposals = "proposal" if model != RANDOM_SEARCH else "random point"
    return (
        f"no {proposals} improved on the best initial point in {iterations} "
        f"iteration{'s' if iterations > 1 else ''}: with {dim} dimensions, try "
        + " or ".join(remedies)
    )


def _check_optimize(args: argparse.Namespace, optimize: argparse.ArgumentParser) -> None:
    r"""Reject combinations of options that make no sense, before any work (each option
    alone was checked by its argparse type)."""
    if args.trust_region and args.model == RANDOM_SEARCH:
        optimize.error("argument --trust-region: needs a surrogate (not random search)")
    if args.problem_seed is not None and args.problem != "nn-draw":
        optimize.error("argument --problem-seed: applies to nn-draw only")
    # The BO steps are seeded with 1000 * seed + step.
    largest_seed = (_MAX_SEED - args.iterations) // 1000
    if args.seed > largest_seed:
        optimize.error(
            f"argument --seed: must be at most {largest_seed} with --iterations "
            f"{args.iterations} (the steps' seeds 1000 * seed + step stay below 2**63); "
            f"got {args.seed}"
        )
    if (
        args.continual
        and args.model in SURROGATES
        and not SURROGATES[args.model].supports_warm_start
    ):
        warm = ", ".join(name for name, spec in SURROGATES.items() if spec.supports_warm_start)
        optimize.error(f"argument --continual: needs a warm-startable model ({warm})")
    if args.csv is not None and args.plot is not None and _same_file(args.csv, args.plot):
        optimize.error("argument --plot: is the --csv file; give them different paths")
    if args.csv is not None and args.csv.exists() and not args.overwrite:
        optimize.error(f"argument --csv: {str(args.csv)!r} exists; pass --overwrite to replace it")
    if args.model == RANDOM_SEARCH:
        return
    spec = ACQUISITIONS[args.acquisition]
    if args.batch_size > 1 and not spec.proposes_batches:
        batched = [name for name, other in ACQUISITIONS.items() if other.proposes_batches]
        optimize.error(
            f"argument --batch-size: {args.acquisition} is an analytic acquisition, which "
            f"proposes one point per step; for batches use one of {', '.join(batched)}"
        )
    if spec.requires_target and args.target is None:
        optimize.error(f"argument --acquisition: {args.acquisition} needs --target")
    if args.target is not None and not spec.requires_target:
        targeted = [name for name, other in ACQUISITIONS.items() if other.requires_target]
        optimize.error(
            f"argument --target: needs a target-value acquisition ({', '.join(targeted)})"
        )
    # optimize_acqf starts its restarts from the best raw samples.
    if spec.propose is None and args.raw_samples < args.num_restarts:
        optimize.error(
            f"argument --raw-samples: must be at least --num-restarts ({args.num_restarts}); "
            f"got {args.raw_samples}"
        )


def _same_file(first: Path, second: Path) -> bool:
    r"""Whether two paths name the same file (existing or not)."""
    if first.exists() and second.exists():
        return first.samefile(second)
    return first.absolute().resolve() == second.absolute().resolve()


def _check_plot_path(path: Path, optimize: argparse.ArgumentParser) -> None:
    r"""Fail now, not after the run, if the plot cannot be written."""
    if importlib.util.find_spec("matplotlib") is None:
        optimize.error("argument --plot: needs matplotlib: pip install 'botorch-nn-uq[plots]'")
    # The plot's folder is created when missing: its nearest existing ancestor must be
    # writable.
    folder = path.parent.absolute()
    while not folder.exists():
        folder = folder.parent
    if path.is_dir() or not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        optimize.error(f"argument --plot: cannot write {str(path)!r}")


def _open_csv(path: Path, optimize: argparse.ArgumentParser) -> TextIO:
    r"""Open the CSV for writing now, so an unwritable path fails before any work (an
    existing file was refused before, unless ``--overwrite``)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return path.open("w", newline="")
    except OSError as error:
        optimize.error(f"argument --csv: cannot write {str(path)!r}: {error.strerror or error}")


def _list() -> int:
    models = {name: spec.description for name, spec in SURROGATES.items()}
    models[RANDOM_SEARCH] = "uniform random search (no surrogate)"
    acquisitions = {name: spec.description for name, spec in ACQUISITIONS.items()}
    # One name column for both tables, as wide as the longest registered name, so the
    # descriptions line up whatever gets registered (e.g. "hyper-deep-ensemble").
    width = max(map(len, [*models, *acquisitions]))
    print("problems:  " + ", ".join(BO_PROBLEM_NAMES))
    for title, rows in (("models:", models), ("acquisitions:", acquisitions)):
        print(title)
        for name, description in rows.items():
            print(f"  {name:<{width}}  {description}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    r"""Run the command line with ``argv`` (default: ``sys.argv[1:]``); returns the exit
    code.

    Invalid options exit with code 2 (``SystemExit``) before any evaluation; a run
    interrupted with Ctrl-C returns 130, its CSV holding every evaluation made.
    """
    parser, optimize = _build_parsers()
    args = parser.parse_args(argv)
    if args.command == "list":
        return _list()
    _check_optimize(args, optimize)
    if args.plot is not None:
        _check_plot_path(args.plot, optimize)
    with (
        contextlib.nullcontext() if args.csv is None else _open_csv(args.csv, optimize)
    ) as csv_file:
        writer = None if csv_file is None else _csv_writer(args, csv_file, optimize)
        # The total covers everything the command does: the problem's set-up, the initial
        # design and the BO steps.
        start, load_at_start = _clock(), _load_average()
        problem = get_bo_problem(args.problem, args.dim, problem_seed=args.problem_seed)
        # --threads applies to this run only: main() called in a process (e.g. a test)
        # gives the process its own setting back.
        previous_threads = torch.get_num_threads()
        if args.threads is not None:
            torch.set_num_threads(args.threads)
        try:
            return _optimize(args, problem, writer, start, load_at_start)
        finally:
            if args.threads is not None:
                torch.set_num_threads(previous_threads)
