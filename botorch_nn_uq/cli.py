"""The ``botorch-nn-uq`` command line (also ``python -m botorch_nn_uq``).

- ``botorch-nn-uq optimize`` runs Bayesian optimisation with a chosen surrogate and
  acquisition on a built-in problem (``--problem``) or on a user's Python function
  (``--objective package.module:function --bounds ...``);
- ``botorch-nn-uq ask --state FILE`` proposes the next batch of a run whose evaluations
  are made elsewhere (a lab, a cluster job) and prints it as CSV, and ``botorch-nn-uq
  tell --state FILE RESULTS.csv`` reads their results back; the run's state lives in
  ``FILE`` between the two;
- ``botorch-nn-uq list`` shows what is registered.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import importlib
import importlib.util
import io
import math
import os
import re
import secrets
import stat
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, NoReturn, TextIO

import torch
from torch import Tensor

from botorch_nn_uq import __version__
from botorch_nn_uq.bo import (
    ACQUISITIONS,
    RANDOM_SEARCH,
    SURROGATES,
    BayesianOptimizer,
    ContinualTraining,
    EvaluationsNotToldError,
    FunctionProblem,
    HitTarget,
    Maximize,
    Minimize,
    Objective,
    Problem,
    StateFileError,
    StepRecord,
)
from botorch_nn_uq.bo.loop import strategy_label
from botorch_nn_uq.bo.objectives import RegisteredProblem
from botorch_nn_uq.bo.state import MAX_RUN_SEED, STATE_MAGIC
from botorch_nn_uq.bo.state_file import locked_state_file, same_file
from botorch_nn_uq.bo.strategy import (
    RECOMMENDED_STRATEGIES,
    Strategy,
    acquisition_arguments,
)
from botorch_nn_uq.checks import NON_NEGATIVE, OPEN_UNIT_INTERVAL, REALS, Interval, check_device
from botorch_nn_uq.problems import BO_PROBLEM_NAMES, get_bo_problem
from botorch_nn_uq.problems.suite import FIXED_DIMENSIONS

#: Upper bounds of the size options: far beyond what a run on one machine can do, and
#: low enough that a typo (``--dim 1000000000``) is refused before any work instead of
#: failing on an allocation.
MAX_DIM = 10_000
MAX_POINTS = 1_000_000
MAX_RESTARTS = 10_000
MAX_ITERATIONS = 1_000_000
MAX_THREADS = 1024
#: The largest target value and bound: squared distances stay finite in float64.
MAX_TARGET = 1e150

#: A run shorter than this is not worth a hint about its speed (seconds).
_SLOW_RUN_SECONDS = 10.0

#: The wall clock of the summary (a name of its own, so tests can replace it).
_clock = time.perf_counter

#: The options that configure a run's strategy, with their defaults. ``ask`` takes them
#: only when it starts a run (a run's strategy is in its state file afterwards).
STRATEGY_DEFAULTS: dict[str, Any] = {
    "model": "mc-dropout",
    "acquisition": "logei",
    "seed": 0,
    "n_initial": 8,
    "num_restarts": 10,
    "raw_samples": 512,
    "beta": 4.0,
    "negative_slope": 0.01,
    "target": None,
    "maximize": False,
    "aleatoric_variance": 0.0,
    "quantile": 0.1,
    "sequential": False,
    "num_candidates": 4096,
    "continual": False,
    "warm_start_steps": 100,
    "cold_refit_every": 10,
    "trust_region": False,
    "turbo": False,
    "batch_thompson": False,
    "local_fit": None,
}
#: The columns of the batch that ``ask`` writes (then ``x0``, ``x1``, ...) and the
#: column of the results that ``tell`` reads.
BATCH_COLUMNS = ("step", "index")
RESULT_COLUMN = "y"


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


class _ArgumentParser(argparse.ArgumentParser):
    r"""An ``ArgumentParser`` that takes every argument starting with ``-`` and a digit
    (or ``-.`` and a digit) for a value: argparse's own pattern of a negative number
    (``-5``, ``-.5``) misses exponent notation, so ``--bounds -1e-3 1e-3`` was read as an
    unknown option. No option of this command line looks like a number. Sub-parsers are
    made of the same class."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = re.compile(r"^-\.?\d")


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


def device_argument(text: str) -> torch.device:
    r"""An argparse type: a device this machine can compute on
    (:func:`~botorch_nn_uq.checks.check_device`), with an error that says why not.

    Example:
        >>> device_argument("cpu")
        device(type='cpu')
    """
    try:
        return check_device("device", text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error).removeprefix("device ")) from None


def _add_device_option(parser: argparse.ArgumentParser, what: str) -> None:
    r"""Add ``--device`` (default ``cpu``) to ``parser``.

    Args:
        parser: A command's parser.
        what: What runs on the device, for the help.
    """
    parser.add_argument(
        "--device",
        type=device_argument,
        default="cpu",
        help=f"torch device (cpu, cuda, cuda:1, ...) of {what}; random draws are made on "
        "the CPU, so a seed gives the same run on any device up to rounding",
    )


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


def _objective_reference(text: str) -> str:
    r"""An argparse type: ``package.module:function``."""
    module, _, name = text.partition(":")
    if not module or not name or not all(part.isidentifier() for part in module.split(".")):
        raise argparse.ArgumentTypeError(f"must be package.module:function; got {text!r}")
    if not name.isidentifier():
        raise argparse.ArgumentTypeError(f"must be package.module:function; got {text!r}")
    return text


def _add_strategy_options(parser: argparse.ArgumentParser, new_run_only: bool) -> None:
    r"""The options of a run's strategy (:data:`STRATEGY_DEFAULTS`).

    With ``new_run_only`` (``ask``) they default to ``None`` and apply only when the
    command starts a run; otherwise they default to :data:`STRATEGY_DEFAULTS`.
    """
    group = parser.add_argument_group(
        "strategy" + (" (only when ask starts a new run)" if new_run_only else "")
    )

    def add(name: str, *flags: str, **options: Any) -> None:
        default = STRATEGY_DEFAULTS[name]
        if options.get("action") == "store_true":
            options["default"] = None if new_run_only else False
        else:
            options["default"] = None if new_run_only else default
            if new_run_only and default is not None:
                options["help"] += f" (default: {default})"
        group.add_argument(*flags, dest=name, **options)

    group.add_argument(
        "--strategy",
        type=_strategy_argument,
        metavar="SPELLING",
        help="the whole strategy in one spelling, MODEL[(OPTIONS)]:ACQUISITION[(OPTIONS)]"
        "[+OPTION...] with the options tr, turbo, bts, local(FACTOR), continual and seq, "
        "e.g. deep-ensemble(max_steps=200):ts+turbo+bts+local(4) (botorch-nn-uq list shows "
        "the recommended ones); the options --model to --local-fit below are shorthands "
        "for parts of it, not to be given with it",
    )
    models = [*SURROGATES, RANDOM_SEARCH]
    add(
        "model",
        "--model",
        type=_choice(models, "model"),
        help="surrogate: "
        + "; ".join(f"{name} = {spec.description}" for name, spec in SURROGATES.items())
        + f"; {RANDOM_SEARCH} = uniform random search (no surrogate)",
    )
    add(
        "acquisition",
        "--acquisition",
        type=_choice(list(ACQUISITIONS), "acquisition"),
        help="acquisition function: "
        + "; ".join(f"{name} = {spec.description}" for name, spec in ACQUISITIONS.items()),
    )
    add("seed", "--seed", type=integer_argument(0, MAX_RUN_SEED), help="seed of the whole run")
    add(
        "n_initial",
        "--n-initial",
        type=integer_argument(2, MAX_POINTS),
        help="initial random points",
    )
    add(
        "num_restarts",
        "--num-restarts",
        type=integer_argument(1, MAX_RESTARTS),
        help="optimize_acqf restarts",
    )
    add(
        "raw_samples",
        "--raw-samples",
        type=integer_argument(1, MAX_POINTS),
        help="optimize_acqf raw samples (at least --num-restarts)",
    )
    add("beta", "--beta", type=_real(NON_NEGATIVE), help="exploration weight of ucb / qucb")
    add(
        "negative_slope",
        "--negative-slope",
        type=_real(Interval(0.0, 1.0, upper_closed=False)),
        help="slope delta of leaky-ei / q-leaky-ei, in [0, 1)",
    )
    add(
        "target",
        "--target",
        type=_real(Interval(-MAX_TARGET, MAX_TARGET)),
        help="target value of the objective: hit it instead of minimising (target-value "
        "optimisation; needs a robust-* or q-robust-ei acquisition)",
    )
    add(
        "maximize",
        "--maximize",
        action="store_true",
        help="maximise the objective instead of minimising it (a user's objective)",
    )
    add(
        "aleatoric_variance",
        "--aleatoric-variance",
        type=_real(NON_NEGATIVE),
        help="known aleatoric variance of the outputs for the target-value acquisitions",
    )
    add(
        "quantile",
        "--quantile",
        type=_real(OPEN_UNIT_INTERVAL),
        help="quantile q of robust-lcb, in (0, 1) (small = optimistic)",
    )
    add(
        "sequential",
        "--sequential",
        action="store_true",
        help="optimise a q-acquisition greedily point by point instead of jointly",
    )
    add(
        "num_candidates",
        "--num-candidates",
        type=integer_argument(1, MAX_POINTS),
        help="candidates scored by every function of the bank for ts",
    )
    add(
        "continual",
        "--continual",
        action="store_true",
        help="warm-start each refit from the previous iteration's network (mc-dropout, "
        "deep-ensemble, neon, nomu), with a cold refit every --cold-refit-every iterations "
        "or when the error on the newest points doubles",
    )
    add(
        "warm_start_steps",
        "--warm-start-steps",
        type=integer_argument(1, MAX_ITERATIONS),
        help="optimizer steps of a warm-started refit (with --continual)",
    )
    add(
        "cold_refit_every",
        "--cold-refit-every",
        type=integer_argument(1, MAX_ITERATIONS),
        help="a refit from scratch every this many iterations (with --continual)",
    )
    add(
        "trust_region",
        "--trust-region",
        action="store_true",
        help="propose inside a TuRBO-style trust region around the best point (any model)",
    )
    add(
        "turbo",
        "--turbo",
        action="store_true",
        help="TuRBO-1 (any model): Thompson sampling on TuRBO's candidates in a trust region "
        "weighted by the model's lengthscales, restarting from a fresh design of --n-initial "
        "points with the run's data set aside when it collapses (--acquisition is not used)",
    )
    add(
        "batch_thompson",
        "--batch-thompson",
        action="store_true",
        help="with --turbo: choose each batch among TuRBO's candidates by the package's "
        "batch Thompson sampling (distinct, separated points from a network's functions) "
        "instead of BoTorch's MaxPosteriorSampling",
    )
    add(
        "local_fit",
        "--local-fit",
        type=_real(Interval(1.0)),
        metavar="FACTOR",
        help="with --trust-region or --turbo: fit region-locally, the model's inputs "
        "normalised to the trust region grown FACTOR times around the best point (e.g. 4) "
        "instead of to the whole box",
    )


def _add_bounds_options(parser: argparse.ArgumentParser, dim_help: str) -> None:
    parser.add_argument(
        "--bounds",
        nargs="+",
        type=_real(Interval(-MAX_TARGET, MAX_TARGET)),
        metavar="LOW HIGH",
        help="the box of the inputs: a lower and an upper bound per input, e.g. --bounds "
        "-5 10 0 15 (or one pair for all inputs, with --dim)",
    )
    parser.add_argument("--dim", type=integer_argument(1, MAX_DIM), help=dim_help)


def _build_parsers() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    r"""The command line's parser and its sub-parsers by command (for errors that involve
    several options)."""
    parser = _ArgumentParser(
        prog="botorch-nn-uq",
        description="Neural-network surrogates with uncertainty for BoTorch.",
    )
    parser.add_argument("--version", action="version", version=f"botorch-nn-uq {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    optimize = commands.add_parser(
        "optimize",
        help="run a Bayesian-optimisation loop on a built-in problem or on your function",
        description=(
            "Minimise a built-in test problem (--problem) or your own Python function "
            "(--objective package.module:function --bounds LOW HIGH ...) with Bayesian "
            "optimisation: uniform random initial points, then per iteration one surrogate "
            "fit and a batch of --batch-size proposals (optimize_acqf, or Thompson sampling "
            "with ts). Prints one line per iteration (best value so far, the normalised "
            "regret of a built-in problem, seconds) and a summary."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    problem = optimize.add_argument_group("problem")
    problem.add_argument(
        "--problem",
        type=_choice(BO_PROBLEM_NAMES, "problem"),
        help=f"built-in test problem ({', '.join(BO_PROBLEM_NAMES)}; default levy)",
    )
    problem.add_argument(
        "--problem-seed",
        type=integer_argument(0, MAX_RUN_SEED),
        help="seed of the random network of nn-draw (default 0; other problems take none)",
    )
    problem.add_argument(
        "--objective",
        type=_objective_reference,
        metavar="MODULE:FUNCTION",
        help="your function to optimise instead of a built-in problem, imported from "
        "MODULE (the current folder is searched first); it takes one point (a 1-D tensor) "
        "and returns a number, or with --vectorized a q x d tensor and returns q numbers",
    )
    problem.add_argument(
        "--vectorized",
        action="store_true",
        help="--objective evaluates a whole batch (q x d tensor) at once",
    )
    _add_bounds_options(
        problem,
        "input dimension (a built-in problem's, default 5, or its own for warped-hartmann, "
        "lunar-lander and rover; or repeats one --bounds)",
    )
    _add_strategy_options(optimize, new_run_only=False)
    optimize.add_argument(
        "--iterations",
        type=integer_argument(0, MAX_ITERATIONS),
        default=30,
        help="BO iterations",
    )
    optimize.add_argument(
        "--batch-size",
        type=integer_argument(1, MAX_POINTS),
        default=1,
        help="evaluations per iteration (q); with ts the batch comes from Thompson sampling, "
        "with a q-acquisition (qlogei, ...) from optimize_acqf",
    )
    optimize.add_argument(
        "--csv",
        type=Path,
        help="write one row per evaluation to this CSV as the run goes (an interrupted run "
        "keeps every evaluation made): step (0 for the initial design), phase, "
        "evaluation number, the inputs x0, x1, ..., the value, and the best value, regret "
        "and timings after its batch",
    )
    optimize.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing --csv or --plot file (without it, an existing file is refused)",
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
    _add_device_option(
        optimize,
        "the problem's points and evaluations, the surrogate's fits and the acquisition "
        "optimisation",
    )

    ask = commands.add_parser(
        "ask",
        help="propose the next batch of a run whose evaluations are made elsewhere",
        description=(
            "Propose the next batch of the run saved in --state and print it as CSV "
            "(columns step, index, x0, x1, ...), or write it to --csv. A --state file that "
            "does not exist starts a run: give its --bounds and, optionally, its strategy; "
            "its first batch is the initial design. Evaluate the batch, add a column y "
            "with the results, and give the file to `botorch-nn-uq tell`. Asking again "
            "before telling prints the same batch (without --batch-size, or with the "
            "batch's own). An existing --csv file is replaced only with --overwrite, and "
            "never the --state file."
        ),
    )
    ask.add_argument("--state", type=Path, required=True, help="the run's state file")
    ask.add_argument(
        "--batch-size",
        type=integer_argument(1, MAX_POINTS),
        help="points of a BO step (default 1, or the pending batch's size when asking "
        "again; the first batch is the initial design of --n-initial points); with "
        "--trust-region or --turbo the region's failure tolerance follows it, and TuRBO-1 "
        "keeps the batch size of its first BO step",
    )
    ask.add_argument("--csv", type=Path, help="write the batch to this file instead of stdout")
    ask.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing --csv file (without it, an existing file is refused; a "
        "device or FIFO such as /dev/stdout is written to without it)",
    )
    _add_device_option(
        ask,
        "the surrogate's fit and the acquisition optimisation of this batch (the state file "
        "holds CPU tensors, so each ask and tell may use another device)",
    )
    _add_bounds_options(ask, "input dimension (repeats one --bounds)")
    _add_strategy_options(ask, new_run_only=True)

    tell = commands.add_parser(
        "tell",
        help="add the results of an asked batch to a run",
        description=(
            "Read the results of the batch asked last from RESULTS (the CSV that ask wrote, "
            "with a column y of results, in UTF-8 with or without a byte-order mark; other "
            "added columns are ignored) and add them to the run saved in --state. Rows "
            "that do not match the asked batch (another step, missing, repeated or changed "
            "points), a column given twice, non-numeric or non-finite results, a batch "
            "told before and a file that cannot be read or saved are refused in one line "
            "(exit status 2), and the state file is left unchanged."
        ),
    )
    tell.add_argument("--state", type=Path, required=True, help="the run's state file")
    tell.add_argument("results", type=Path, help="the asked batch with a column y of results")
    _add_device_option(tell, "the run's tensors while the results are added")

    commands.add_parser(
        "list",
        help="list the registered problems, models and acquisitions, and the recommended "
        "strategies",
    )
    return parser, {"optimize": optimize, "ask": ask, "tell": tell}


def _strategy(args: argparse.Namespace) -> argparse.Namespace:
    r"""``args`` with every strategy option that was not given set to its default."""
    for name, default in STRATEGY_DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    return args


def _objective(args: argparse.Namespace) -> Objective:
    if args.target is not None:
        return HitTarget(args.target)
    return Maximize() if args.maximize else Minimize()


#: The options that are parts of a strategy (the others configure the run).
STRATEGY_FLAGS = tuple(
    name for name in STRATEGY_DEFAULTS if name not in ("seed", "n_initial", "target", "maximize")
)


def _strategy_argument(text: str) -> Strategy:
    r"""An argparse type: a strategy's spelling (:class:`Strategy`)."""
    try:
        return Strategy.parse(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _flags_strategy(args: argparse.Namespace) -> Strategy:
    r"""The strategy that the shorthand options spell (``--model``, ``--acquisition``,
    ``--trust-region``, ...): each is a part of :class:`Strategy`'s spelling."""
    if args.model == RANDOM_SEARCH:
        return Strategy(RANDOM_SEARCH, acquisition="")
    acquisition = "ts" if args.turbo else args.acquisition
    accepted = () if args.turbo else acquisition_arguments(acquisition)
    options = {
        name: getattr(args, name)
        for name in accepted
        if getattr(args, name) != STRATEGY_DEFAULTS[name]
    }
    continual = ContinualTraining(
        warm_start_steps=args.warm_start_steps, cold_refit_every=args.cold_refit_every
    )
    return Strategy(
        args.model,
        acquisition=acquisition,
        acquisition_options=tuple(sorted(options.items())),
        trust_region=args.trust_region,
        turbo=args.turbo,
        batch_thompson=args.batch_thompson,
        local_fit=args.local_fit,
        continual=continual if args.continual else None,
        sequential=args.sequential,
    )


def _check_strategy(args: argparse.Namespace, parser: argparse.ArgumentParser, q: int) -> None:
    r"""Reject combinations of strategy options that make no sense, before any work (each
    option alone was checked by its argparse type), and set ``args.run_strategy``: the
    :class:`Strategy` of ``--strategy``, or the one its shorthand options spell."""
    if args.target is not None and args.maximize:
        parser.error("argument --maximize: not with --target (a target has no direction)")
    if args.strategy is not None:
        shorthands = [
            "--" + name.replace("_", "-")
            for name in STRATEGY_FLAGS
            if getattr(args, name) not in (None, STRATEGY_DEFAULTS[name])
        ]
        if shorthands:
            parser.error(
                f"argument {shorthands[0]}: a part of the strategy; not with --strategy "
                "(spell it in the strategy)"
            )
        args.run_strategy = args.strategy
        try:
            args.strategy.check(_objective(args))
        except ValueError as error:
            parser.error(f"argument --strategy: {error}")
    else:
        _check_shorthands(args, parser)
        try:
            args.run_strategy = _flags_strategy(args)
        except ValueError as error:
            parser.error(f"argument --model: {error}")
    _check_batch_size(args, parser, q)


def _check_shorthands(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    r"""The checks of the shorthand strategy options, each error naming its option."""
    if args.model == RANDOM_SEARCH:
        if args.trust_region or args.turbo:
            option = "--trust-region" if args.trust_region else "--turbo"
            parser.error(f"argument {option}: needs a surrogate (not random search)")
        return
    if args.batch_thompson and not args.turbo:
        parser.error("argument --batch-thompson: applies to --turbo only")
    if args.local_fit is not None and not (args.trust_region or args.turbo):
        parser.error("argument --local-fit: needs a trust region (--trust-region or --turbo)")
    if args.turbo and args.trust_region:
        parser.error("argument --turbo: has its own trust region (not with --trust-region)")
    if args.turbo and args.target is not None:
        parser.error("argument --turbo: minimises or maximises (not with --target)")
    if args.continual and not SURROGATES[args.model].supports_warm_start:
        warm = ", ".join(name for name, spec in SURROGATES.items() if spec.supports_warm_start)
        parser.error(f"argument --continual: needs a warm-startable model ({warm})")
    spec = ACQUISITIONS[args.acquisition]
    if args.turbo:
        return
    if spec.requires_target and args.target is None:
        parser.error(f"argument --acquisition: {args.acquisition} needs --target")
    if args.target is not None and not spec.requires_target:
        targeted = [name for name, other in ACQUISITIONS.items() if other.requires_target]
        parser.error(f"argument --target: needs a target-value acquisition ({', '.join(targeted)})")
    # optimize_acqf starts its restarts from the best raw samples.
    if spec.propose is None and args.raw_samples < args.num_restarts:
        parser.error(
            f"argument --raw-samples: must be at least --num-restarts ({args.num_restarts}); "
            f"got {args.raw_samples}"
        )


def _check_batch_size(args: argparse.Namespace, parser: argparse.ArgumentParser, q: int) -> None:
    r"""Reject a batch size ``q`` the run's proposer cannot serve (a q-acquisition's batch
    that would not fit in memory, more points than Thompson sampling has candidates),
    which would otherwise fail after the initial design was evaluated."""
    # The input dimension: --dim, or one input per pair of --bounds.
    dim = args.dim if args.dim is not None else max(len(args.bounds or ()) // 2, 1)
    proposer = args.run_strategy.proposer()
    if q > 1 and not proposer.proposes_batches:
        batched = [name for name, other in ACQUISITIONS.items() if other.proposes_batches]
        parser.error(
            f"argument --batch-size: {args.run_strategy.acquisition} is an analytic "
            "acquisition, which proposes one point per step; for batches use one of "
            + ", ".join(batched)
        )
    try:
        proposer.check_batch_size(q, dim)
    except ValueError as error:
        parser.error(f"argument --batch-size: {error}")


def _bounds(args: argparse.Namespace, parser: argparse.ArgumentParser) -> Tensor:
    r"""The ``2 x d`` box of ``--bounds`` (one pair repeated ``--dim`` times)."""
    numbers = list(args.bounds)
    if len(numbers) % 2:
        parser.error(
            f"argument --bounds: needs a lower and an upper bound per input; got {len(numbers)} "
            "numbers"
        )
    pairs = list(zip(numbers[::2], numbers[1::2], strict=True))
    wrong = [index for index, (low, high) in enumerate(pairs) if not low < high]
    if wrong:
        parser.error(
            f"argument --bounds: the lower bound of input {wrong[0]} is not below its upper bound"
        )
    if args.dim is not None and len(pairs) == 1:
        pairs *= args.dim
    elif args.dim is not None and len(pairs) != args.dim:
        parser.error(
            f"argument --bounds: {len(pairs)} pairs for --dim {args.dim} (give one pair per "
            "input, or one pair for all)"
        )
    if len(pairs) > MAX_DIM:
        parser.error(f"argument --bounds: at most {MAX_DIM} inputs; got {len(pairs)}")
    return torch.tensor(pairs, dtype=torch.float64).T.contiguous()


def load_objective(reference: str) -> Callable[[Tensor], Any]:
    r"""The function ``package.module:function`` names, imported with the current folder
    first on the module search path.

    Args:
        reference: ``package.module:function``.

    Returns:
        The function.

    Raises:
        ValueError: If the module cannot be imported, or has no such callable.
    """
    module_name, _, name = reference.partition(":")
    folder = os.getcwd()
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # an objective module can fail in any way on import
        raise ValueError(
            f"cannot import {module_name!r}: {type(error).__name__}: {error}"
        ) from None
    finally:
        if added:
            sys.path.remove(folder)
    function = getattr(module, name, None)
    if function is None:
        raise ValueError(f"module {module_name!r} has no {name!r}")
    if not callable(function):
        raise ValueError(f"{reference} is a {type(function).__name__}, not a function")
    return function


def _check_optimize(args: argparse.Namespace, optimize: argparse.ArgumentParser) -> None:
    r"""Reject combinations of ``optimize`` options that make no sense, before any work."""
    if args.objective is not None:
        if args.problem is not None or args.problem_seed is not None:
            flag = "--problem" if args.problem is not None else "--problem-seed"
            optimize.error(f"argument {flag}: not with --objective (a built-in problem)")
        if args.bounds is None:
            optimize.error("argument --bounds: --objective needs the box of its inputs")
    else:
        if args.bounds is not None or args.vectorized:
            flag = "--bounds" if args.bounds is not None else "--vectorized"
            optimize.error(f"argument {flag}: applies to --objective only")
        if args.maximize:
            optimize.error(
                "argument --maximize: applies to --objective (built-in problems are minimised)"
            )
        args.problem = args.problem or "levy"
        fixed_dim = FIXED_DIMENSIONS.get(args.problem)
        args.dim = (fixed_dim or 5) if args.dim is None else args.dim
        if fixed_dim is not None and args.dim != fixed_dim:
            optimize.error(f"argument --dim: {args.problem} is {fixed_dim}-dimensional")
        if args.dim < 2:
            optimize.error(
                f"argument --dim: must be at least 2; got {args.dim} (a built-in problem)"
            )
        if args.problem_seed is not None and args.problem != "nn-draw":
            optimize.error("argument --problem-seed: applies to nn-draw only")
    _check_strategy(args, optimize, args.batch_size)
    if args.csv is not None and args.plot is not None and same_file(args.csv, args.plot):
        optimize.error("argument --plot: is the --csv file; give them different paths")
    if args.csv is not None:
        _check_output(args.csv, "--csv", optimize, args.overwrite)


def _print_record(record: StepRecord, with_regret: bool) -> None:
    label = "init" if record.step == 0 else f"{record.step:4d}"
    regret = f" | regret {record.regret:10.4e}" if with_regret else ""
    print(
        f"iter {label} | evals {record.num_evaluations:4d} | value {record.value:12.5g} | "
        f"best {record.best_value:12.5g}{regret} | {record.seconds:6.2f} s",
        flush=True,
    )


def plot_best_so_far(records: Sequence[StepRecord], path: Path, title: str) -> None:
    r"""Save a plot of the best point's normalised regret (or, for a problem without
    one, its value) against evaluations.

    Args:
        records: The run's records (the initial design first).
        path: The image file to write (format from its suffix).
        title: The plot's title.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise SystemExit("--plot needs matplotlib: pip install 'botorch-nn-uq[plots]'") from error
    with_regret = records[0].regret is not None
    figure, axis = plt.subplots(figsize=(6, 4))
    evaluations = [record.num_evaluations for record in records]
    if with_regret:
        axis.step(evaluations, [max(r.regret, 1e-12) for r in records], where="post")
        axis.set_yscale("log")
        axis.set_ylabel("normalised regret of best point")
    else:
        axis.step(evaluations, [r.best_value for r in records], where="post")
        axis.set_ylabel("best value so far")
    axis.set_xlabel("evaluations")
    axis.set_title(title)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)


def _csv_writer(
    args: argparse.Namespace,
    name: str,
    dim: int,
    csv_file: TextIO,
    optimize: argparse.ArgumentParser,
) -> _EvaluationWriter:
    r"""The CSV's writer, its header written and flushed now: a file that cannot be
    written (a full disk, ``/dev/full``) fails before any work."""
    identity = {
        "problem": name,
        "model": args.run_strategy.model,
        "acquisition": strategy_label(args.run_strategy),
        "seed": args.seed,
    }
    try:
        return _EvaluationWriter(csv_file, identity, dim)
    except OSError as error:
        # Closing flushes what is left in the buffer, which fails the same way.
        with contextlib.suppress(OSError):
            csv_file.close()
        # A refused command leaves no file behind: this one was created or, with
        # --overwrite, emptied when it was opened.
        if args.csv.is_file():
            args.csv.unlink(missing_ok=True)
        _cannot_write(optimize, "--csv", args.csv, error)


def _problem(
    args: argparse.Namespace, function: Callable[[Tensor], Any] | None, bounds: Tensor | None
) -> Problem:
    r"""The problem of ``optimize``: a built-in one, or the user's function on ``bounds``
    (its failures reported as :class:`ObjectiveError`)."""
    if function is None:
        bo_problem = get_bo_problem(args.problem, args.dim, problem_seed=args.problem_seed)
        return RegisteredProblem(bo_problem, args.target, device=args.device)
    problem = FunctionProblem(
        function,
        bounds.to(args.device),
        _objective(args),
        name=args.objective.partition(":")[2],
        vectorized=args.vectorized,
    )
    return _CheckedProblem(problem)


def _optimize(
    args: argparse.Namespace,
    problem: Problem,
    writer: _EvaluationWriter | None,
    start: float,
    load_at_start: float | None,
) -> int:
    # L-BFGS-B often stops "abnormally" on the piecewise-linear acquisition surfaces of
    # ReLU networks; optimize_acqf then retries by itself, so the warning is only noise here.
    warnings.filterwarnings("ignore", message="Optimization failed", category=RuntimeWarning)
    strategy = args.run_strategy
    optimizer = BayesianOptimizer.for_problem(
        problem, strategy=strategy, seed=args.seed, n_initial=args.n_initial
    )
    regret = getattr(problem, "regret", None)
    print(
        f"{problem.name} ({problem.objective.describe()}) | strategy {strategy} | "
        f"{args.n_initial} initial "
        f"points + {args.iterations} iterations | seed {args.seed}",
        flush=True,
    )
    records: list[StepRecord] = []

    def on_batch(step: StepRecord, X: Tensor, Y: Tensor) -> None:
        record = step if regret is None else replace(step, regret=regret(step.best_value))
        records.append(record)
        if writer is not None:
            writer(X, optimizer.values[-X.shape[0] :], record)
        if not args.quiet:
            _print_record(record, regret is not None)

    try:
        optimizer.run(problem, args.iterations, q=args.batch_size, callback=on_batch)
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
    except (ObjectiveError, EvaluationsNotToldError) as error:
        kept = "" if writer is None else f"; {args.csv} holds {writer.rows} evaluations"
        print(f"error: {error}{kept}", file=sys.stderr, flush=True)
        return 1
    total = _clock() - start
    threads, cores = torch.get_num_threads(), _cpu_count()
    best = optimizer.best()
    steps = [record.seconds for record in records if record.step > 0]
    if regret is not None:
        goal = (
            f"minimum {problem.problem.min_value:.6g}"
            if args.target is None
            else f"target {args.target:g}"
        )
        outcome = f"({goal}) | normalised regret {records[-1].regret:.4e}"
    else:
        point = ", ".join(f"{x:.6g}" for x in best.x.tolist())
        outcome = f"at x = [{point}]"
    print(
        f"summary | best value {best.value:.6g} {outcome} | {optimizer.X.shape[0]} evaluations | "
        f"{total:.1f} s total (set-up, initial design and {len(records) - 1} iterations), "
        f"{sum(steps) / max(len(steps), 1):.2f} s per iteration | torch threads {threads} "
        f"({cores} cores)",
        flush=True,
    )
    loads = [load for load in (load_at_start, _load_average()) if load is not None]
    hint = slow_run_hint(total, threads, cores, max(loads) if loads else None)
    if hint is not None:
        print(f"hint | {hint}", flush=True)
    note = no_improvement_note(records, args.run_strategy.model, problem.bounds.shape[-1])
    if note is not None:
        print(f"note | {note}", flush=True)
    if args.csv is not None:
        print(f"wrote {args.csv}")
    if args.plot is not None:
        plot_best_so_far(records, args.plot, f"{problem.name} ({problem.objective.describe()})")
        print(f"wrote {args.plot}")
    return 0


class ObjectiveError(Exception):
    r"""A user's objective failed or returned unusable values."""


class _CheckedProblem:
    r"""A user's problem whose failures become :class:`ObjectiveError` with the batch
    named, so the command line reports them instead of a traceback of the loop."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        self.name, self.bounds, self.objective = problem.name, problem.bounds, problem.objective

    def evaluate(self, X: Tensor) -> Tensor:
        try:
            outputs = self.problem.evaluate(X)
            self.objective.check_outputs(outputs)
        except Exception as error:  # the user's code may fail in any way
            raise ObjectiveError(
                f"the objective {self.name} failed on a batch of {X.shape[0]} points: "
                f"{type(error).__name__}: {error}"
            ) from error
        return outputs


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


def no_improvement_note(records: Sequence[StepRecord], model: str, dim: int) -> str | None:
    r"""A note when no BO iteration of a run improved on its initial design's best value
    (the proposals were all worse), with what to try instead; ``None`` otherwise or
    without iterations.

    Args:
        records: The run's records, the initial design first.
        model: The surrogate's name (or ``"random"``).
        dim: The input dimension.
    """
    iterations = len(records) - 1
    if iterations == 0 or records[-1].best_value != records[0].best_value:
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


def _cannot_write(
    parser: argparse.ArgumentParser, option: str, path: Path, error: OSError
) -> NoReturn:
    r"""Exit with the parser's error: ``option``'s file ``path`` cannot be written, and
    why."""
    parser.error(f"argument {option}: cannot write {str(path)!r}: {error.strerror or error}")


def _check_output(
    path: Path, option: str, parser: argparse.ArgumentParser, overwrite: bool
) -> bool:
    r"""Refuse an output file that a command must not write, before any work: a folder,
    or an existing regular file unless ``--overwrite`` (no command replaces a file it
    did not create without being told to).

    Args:
        path: The path given to ``option``.
        option: The option, for the error (``"--csv"``).
        parser: The command's parser, whose error exits.
        overwrite: Whether ``--overwrite`` was given.

    Returns:
        Whether ``path`` is a stream, such as a character device (``/dev/stdout``,
        ``/dev/null``) or a FIFO: it is written to directly, as no file is replaced.
    """
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return False
    except OSError as error:
        _cannot_write(parser, option, path, error)
    if stat.S_ISDIR(mode):
        parser.error(f"argument {option}: cannot write {str(path)!r}: it is a folder")
    if not stat.S_ISREG(mode):
        return True
    if not overwrite:
        parser.error(f"argument {option}: {str(path)!r} exists; pass --overwrite to replace it")
    return False


def _check_plot_path(path: Path, optimize: argparse.ArgumentParser, overwrite: bool) -> None:
    r"""Fail now, not after the run, if the plot cannot be written or would replace a
    file without ``overwrite``."""
    if importlib.util.find_spec("matplotlib") is None:
        optimize.error("argument --plot: needs matplotlib: pip install 'botorch-nn-uq[plots]'")
    _check_output(path, "--plot", optimize, overwrite)
    # The plot's folder is created when missing: its nearest existing ancestor must be
    # writable.
    folder = path.parent.absolute()
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        optimize.error(f"argument --plot: cannot write {str(path)!r}")


def _open_csv(path: Path, optimize: argparse.ArgumentParser) -> TextIO:
    r"""Open the CSV for writing now, so an unwritable path fails before any work (an
    existing file was refused before, unless ``--overwrite``)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return path.open("w", newline="")
    except OSError as error:
        _cannot_write(optimize, "--csv", path, error)


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
            name
            for name in StepRecord(0, 0, 0.0, 0.0).row()
            if name not in ("step", "num_evaluations", "value")
        ]
        self.writer = csv.DictWriter(
            handle,
            fieldnames=[
                *identity,
                "step",
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

    def __call__(self, X: Tensor, values: Tensor, record: StepRecord) -> None:
        r"""Append the rows of one evaluated batch and flush them to the file."""
        step = record.row()
        first = record.num_evaluations - values.numel() + 1
        del step["num_evaluations"], step["value"]
        rows = [
            {
                **self.identity,
                **step,
                "phase": "initial" if record.step == 0 else "bo",
                "evaluation": first + offset,
                **{f"x{i}": coordinate for i, coordinate in enumerate(x)},
                "value": value,
            }
            for offset, (x, value) in enumerate(zip(X.tolist(), values.tolist(), strict=True))
        ]
        self._write(lambda: self.writer.writerows(rows))
        self.rows += values.numel()


def _load_state(
    path: Path, parser: argparse.ArgumentParser, device: torch.device
) -> BayesianOptimizer:
    r"""The run saved at ``path`` with its tensors on ``device``, or a parser error that
    says why it cannot be read (``ask`` and ``tell`` hold the file's lock, which refused
    a path that is not a regular file before anything read it)."""
    try:
        return BayesianOptimizer.load(path, device=device)
    except FileNotFoundError:
        parser.error(f"argument --state: {str(path)!r} does not exist")
    except (StateFileError, ValueError, OSError) as error:
        parser.error(f"argument --state: {error}")


def _ask(args: argparse.Namespace, ask: argparse.ArgumentParser) -> int:
    r"""Run ``ask``: check its files, start or load the run, propose (or repeat) the
    batch, and write the batch before the state (see :func:`_write_batch`).

    Args:
        args: The parsed ``ask`` command.
        ask: Its parser, whose error exits (code 2) on any refused option or file.
    """
    new_run = not args.state.exists()
    stream = False
    if args.csv is not None:
        if same_file(args.csv, args.state):
            ask.error(
                f"argument --csv: {str(args.csv)!r} is the --state file; write the batch to "
                "another file"
            )
        stream = _check_output(args.csv, "--csv", ask, args.overwrite)
    given = [
        "--" + name.replace("_", "-")
        for name in ["strategy", *STRATEGY_DEFAULTS, "bounds", "dim"]
        if getattr(args, name) is not None
    ]
    if not new_run:
        if given:
            ask.error(
                f"argument {given[0]}: {str(args.state)!r} holds a run whose strategy is in "
                "the file; start a new run with another --state"
            )
        optimizer = _load_state(args.state, ask, args.device)
    else:
        if args.bounds is None:
            ask.error(
                f"argument --bounds: {str(args.state)!r} does not exist; a new run needs "
                "the box of its inputs"
            )
        args = _strategy(args)
        batch_size = args.batch_size or 1
        _check_strategy(args, ask, batch_size)
        optimizer = BayesianOptimizer(
            _bounds(args, ask).to(args.device),
            objective=_objective(args),
            strategy=args.run_strategy,
            seed=args.seed,
            n_initial=args.n_initial,
        )
    # Without --batch-size a pending batch is asked again whatever its size (a new BO
    # step then has one point); the initial design has its own size.
    q = None if optimizer.step == 0 else args.batch_size
    # Asking a pending batch again changes nothing to save.
    changed = optimizer.pending is None
    try:
        X = optimizer.ask(q)
    except ValueError as error:
        ask.error(f"argument --batch-size: {error}")
    text = _batch_text(X, optimizer.step)
    temporary = None
    if args.csv is not None:
        # The batch is written before the state is saved, so a --csv that cannot be
        # written leaves the run as it was (and a new run without a state file).
        temporary = _write_batch(text, args.csv, stream, ask)
    if changed:
        try:
            optimizer.save(args.state)
        except (OSError, StateFileError) as error:
            if temporary is not None:
                temporary.unlink(missing_ok=True)
            ask.error(f"argument --state: {_save_failure(args.state, error)}")
    if args.csv is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    elif temporary is not None:
        _move_batch(temporary, args, new_run, ask)
    what = "the initial design" if optimizer.step == 0 else f"BO step {optimizer.step}"
    destination = "" if args.csv is None else f" in {args.csv}"
    print(
        f"{what}: {X.shape[0]} points{destination}; evaluate them, add a column "
        f"{RESULT_COLUMN} with the results and run: botorch-nn-uq tell --state {args.state} "
        "RESULTS.csv",
        file=sys.stderr,
        flush=True,
    )
    return 0


def _run_locked(args: argparse.Namespace, command: argparse.ArgumentParser) -> int:
    r"""Run ``ask`` or ``tell`` holding the lock of the run's state file, so that two
    commands on one run cannot erase each other's work: a command that finds the lock
    held is refused before it reads anything (a new run has no file to lock yet; its
    file is created only if none appeared meanwhile).

    Args:
        args: The parsed command.
        command: Its parser, whose error exits with code 2.
    """
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(locked_state_file(args.state))
        except StateFileError as error:
            command.error(f"argument --state: {error}")
        except OSError as error:
            command.error(
                f"argument --state: cannot read {str(args.state)!r}: {error.strerror or error}"
            )
        return (_ask if args.command == "ask" else _tell)(args, command)


def _save_failure(path: Path, error: OSError | StateFileError) -> str:
    r"""Why the run could not be saved to ``path``, for a parser error.

    Args:
        path: The ``--state`` path.
        error: What ``BayesianOptimizer.save`` raised: an ``OSError`` (a read-only
            folder, a full disk) or a ``StateFileError`` (another command wrote the file
            since it was read, or holds its lock).
    """
    if isinstance(error, OSError):
        return f"cannot write {str(path)!r}: {error.strerror or error}"
    return str(error)


def _batch_text(X: Tensor, step: int) -> str:
    r"""The CSV text of an asked batch: a row per point with ``step``, its ``index`` and
    its inputs ``x0``, ``x1``, ... (written exactly, as ``repr``, so ``tell`` finds the
    asked points)."""
    buffer = io.StringIO()
    columns = [*BATCH_COLUMNS, *(f"x{i}" for i in range(X.shape[-1]))]
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(
        {"step": step, "index": index, **{f"x{i}": repr(x) for i, x in enumerate(row)}}
        for index, row in enumerate(X.tolist())
    )
    return buffer.getvalue()


def _write_batch(text: str, path: Path, stream: bool, ask: argparse.ArgumentParser) -> Path | None:
    r"""Write the batch's CSV ``text`` for ``--csv path``: to a stream (a device or a
    FIFO) directly, otherwise to a new temporary file in the folder of the file ``path``
    names (its symbolic links followed), which :func:`_move_batch` moves into place once
    the state is saved. A failure removes what was written and exits with the parser's
    error.

    Args:
        text: The batch as CSV.
        path: The ``--csv`` path.
        stream: Whether ``path`` is a stream (:func:`_check_output`).
        ask: The parser of ``ask``, whose error exits.

    Returns:
        The temporary file, or ``None`` for a stream.
    """
    if stream:
        try:
            with path.open("w", encoding="utf-8", newline="") as handle:
                handle.write(text)
        except OSError as error:
            _cannot_write(ask, "--csv", path, error)
        return None
    target = Path(os.path.realpath(path))
    temporary = target.parent / f".{target.name}.{secrets.token_hex(8)}.tmp"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        # Not tempfile.mkstemp, whose files only their owner may read: the batch file is
        # created as any other file of the user (0o666 less the umask).
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as error:
        _cannot_write(ask, "--csv", path, error)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(text.encode())
            handle.flush()
            # A full disk may fail only when the data reaches it.
            os.fsync(handle.fileno())
    except OSError as error:
        temporary.unlink(missing_ok=True)
        _cannot_write(ask, "--csv", path, error)
    return temporary


def _move_batch(
    temporary: Path, args: argparse.Namespace, new_run: bool, ask: argparse.ArgumentParser
) -> None:
    r"""Move the batch written to ``temporary`` (:func:`_write_batch`) to the file
    ``--csv`` names, replacing an existing one (which ``--overwrite`` allowed before any
    work). On failure the temporary file and a new run's state file are removed, so the
    same command can be given again; an existing run keeps its saved batch, which
    asking again writes.

    Args:
        temporary: The written batch.
        args: The parsed ``ask`` command (``csv``, ``state``).
        new_run: Whether this command started the run.
        ask: The parser of ``ask``, whose error exits.
    """
    try:
        os.replace(temporary, os.path.realpath(args.csv))
    except OSError as error:
        temporary.unlink(missing_ok=True)
        if new_run:
            args.state.unlink(missing_ok=True)
        _cannot_write(ask, "--csv", args.csv, error)


def _read_results(
    path: Path, optimizer: BayesianOptimizer, tell: argparse.ArgumentParser
) -> tuple[Tensor, Tensor]:
    r"""The told inputs and results of ``path``, checked against the pending batch: the
    rows must be those of the asked batch (its step, each index once, the asked points)
    with a finite number in the result column.

    Args:
        path: The results file: UTF-8 CSV (a byte-order mark, as Excel writes, is
            allowed) with each of the columns ``step``, ``index``, ``x0``, ``x1``, ...
            and ``y`` once.
        optimizer: The run, with its pending batch.
        tell: The parser of ``tell``, whose error exits.
    """
    dim = optimizer.bounds.shape[-1]
    inputs = [f"x{i}" for i in range(dim)]
    columns = (*BATCH_COLUMNS, *inputs, RESULT_COLUMN)

    def refuse(message: str) -> NoReturn:
        tell.error(f"argument results: {path}: {message}")

    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:
            # A state file is binary after its first line: say what it is rather than
            # that it is not text.
            if handle.buffer.peek(len(STATE_MAGIC)).startswith(STATE_MAGIC):
                refuse("is a botorch-nn-uq run state file, not results")
            reader = csv.DictReader(handle)
            header = reader.fieldnames or []
            missing = [c for c in columns if c not in header]
            if missing:
                refuse(
                    f"no column {', '.join(missing)} (expected the batch ask wrote with a column y)"
                )
            # DictReader keeps the last of two equal columns: which one was meant is unknown.
            repeated = [c for c in columns if header.count(c) > 1]
            if repeated:
                refuse(f"the column {repeated[0]} appears twice")
            rows = list(reader)
    except UnicodeDecodeError:
        refuse("not UTF-8 text (save it as CSV UTF-8)")
    except OSError as error:
        refuse(error.strerror or str(error))
    except csv.Error as error:
        refuse(f"not a CSV file ({error})")
    if not rows:
        refuse("no rows")

    def number(row: dict[str, str], column: str, line: int) -> float:
        text = (row.get(column) or "").strip()
        try:
            return float(text)
        except ValueError:
            refuse(f"line {line}: {column} is {text!r}, not a number")

    def integer(row: dict[str, str], column: str, line: int) -> int:
        text = (row.get(column) or "").strip()
        if not text.isdigit():
            refuse(f"line {line}: {column} is {text!r}, not a non-negative integer")
        return int(text)

    steps = {integer(row, "step", line) for line, row in enumerate(rows, start=2)}
    pending = optimizer.state.pending
    if len(steps) > 1:
        refuse(f"rows of several steps ({', '.join(map(str, sorted(steps)))}); tell one batch")
    (step,) = steps
    if step < optimizer.step:
        refuse(f"the results of step {step} were told already")
    if pending is None or step != pending.step:
        refuse(
            f"no batch of step {step} was asked"
            + ("" if pending is None else f" (the asked batch is step {pending.step})")
        )
    asked = pending.X
    by_index: dict[int, int] = {}
    for line, row in enumerate(rows, start=2):
        index = integer(row, "index", line)
        if index >= asked.shape[0]:
            refuse(
                f"line {line}: index {index} was not asked (the batch has {asked.shape[0]} points)"
            )
        if index in by_index:
            refuse(f"index {index} appears twice (lines {by_index[index]} and {line})")
        by_index[index] = line
    absent = sorted(set(range(asked.shape[0])) - set(by_index))
    if absent:
        refuse(f"no results for index {', '.join(map(str, absent))} of the asked batch")
    X = torch.empty_like(asked)
    Y = torch.empty(asked.shape[0], dtype=asked.dtype, device=asked.device)
    tolerance = 1e-9 * (optimizer.bounds[1] - optimizer.bounds[0])
    for line, row in enumerate(rows, start=2):
        index = int(row["index"])
        X[index] = torch.tensor([number(row, column, line) for column in inputs], dtype=asked.dtype)
        if not ((X[index] - asked[index]).abs() <= tolerance).all():
            refuse(f"line {line}: the inputs of index {index} are not the asked point")
        Y[index] = number(row, RESULT_COLUMN, line)
        if not math.isfinite(Y[index]):
            refuse(f"line {line}: {RESULT_COLUMN} is {row[RESULT_COLUMN].strip()}; not finite")
    return X, Y


def _tell(args: argparse.Namespace, tell: argparse.ArgumentParser) -> int:
    optimizer = _load_state(args.state, tell, args.device)
    X, Y = _read_results(args.results, optimizer, tell)
    record = optimizer.tell(X, Y)
    try:
        optimizer.save(args.state)
    except (OSError, StateFileError) as error:
        # The save is atomic: the state file is as it was before this command.
        tell.error(f"argument --state: {_save_failure(args.state, error)}")
    best = optimizer.best()
    point = ", ".join(f"{x:.6g}" for x in best.x.tolist())
    print(
        f"step {record.step}: told {X.shape[0]} results | best value so far {best.value:.6g} at "
        f"x = [{point}] | {optimizer.X.shape[0]} evaluations; next: botorch-nn-uq ask --state "
        f"{args.state}",
        flush=True,
    )
    return 0


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
    print("recommended strategies (--strategy SPELLING; evidence in benchmarks/README.md):")
    spelling_width = max(len(spelling) for spelling, _ in RECOMMENDED_STRATEGIES)
    for spelling, regime in RECOMMENDED_STRATEGIES:
        print(f"  {spelling:<{spelling_width}}  {regime}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    r"""Run the command line with ``argv`` (default: ``sys.argv[1:]``); returns the exit
    code.

    Invalid options and unusable files exit with code 2 (``SystemExit``) before any
    evaluation and without changing a state file; a run interrupted with Ctrl-C returns
    130, its CSV holding every evaluation made; a user's objective that fails returns 1.
    """
    parser, commands = _build_parsers()
    args = parser.parse_args(argv)
    if args.command == "list":
        return _list()
    if args.command in ("ask", "tell"):
        return _run_locked(args, commands[args.command])
    optimize = commands["optimize"]
    _check_optimize(args, optimize)
    if args.plot is not None:
        _check_plot_path(args.plot, optimize, args.overwrite)
    function, bounds = None, None
    if args.objective is not None:
        try:
            function = load_objective(args.objective)
        except ValueError as error:
            optimize.error(f"argument --objective: {error}")
        bounds = _bounds(args, optimize)
        name, dim = args.objective.partition(":")[2], bounds.shape[-1]
    else:
        name, dim = f"{args.problem}-{args.dim}d", args.dim
    with (
        contextlib.nullcontext() if args.csv is None else _open_csv(args.csv, optimize)
    ) as csv_file:
        writer = None if csv_file is None else _csv_writer(args, name, dim, csv_file, optimize)
        # The total covers everything the command does: the problem's set-up, the initial
        # design and the BO steps.
        start, load_at_start = _clock(), _load_average()
        problem = _problem(args, function, bounds)
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
