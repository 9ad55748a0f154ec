r"""The command line's parsers: one per command (``optimize``, ``ask``, ``tell``, ``list``),
the option groups that several commands share (the strategy, the box of the inputs, the
device) and the argparse types that check each option alone, before any work.

Checks that involve several options are the commands' own
(:mod:`~botorch_nn_uq.cli.strategy_options`, :mod:`~botorch_nn_uq.cli.optimize`,
:mod:`~botorch_nn_uq.cli.ask`).
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from botorch_nn_uq import __version__
from botorch_nn_uq.bo import ACQUISITIONS, RANDOM_SEARCH, SURROGATES
from botorch_nn_uq.bo.state import MAX_RUN_SEED
from botorch_nn_uq.bo.strategy import Strategy
from botorch_nn_uq.checks import NON_NEGATIVE, OPEN_UNIT_INTERVAL, REALS, Interval, check_device
from botorch_nn_uq.problems import BO_PROBLEM_NAMES

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

#: Each command's line in the command line's help.
_COMMAND_HELP = {
    "optimize": "run a Bayesian-optimisation loop on a built-in problem or on your function",
    "ask": "propose the next batch of a run whose evaluations are made elsewhere",
    "tell": "add the results of an asked batch to a run",
    "list": "list the registered problems, models and acquisitions, and the recommended strategies",
}
#: The descriptions at the top of each command's own help.
_OPTIMIZE_DESCRIPTION = (
    "Minimise a built-in test problem (--problem) or your own Python function "
    "(--objective package.module:function --bounds LOW HIGH ...) with Bayesian "
    "optimisation: uniform random initial points, then per iteration one surrogate "
    "fit and a batch of --batch-size proposals (optimize_acqf, or Thompson sampling "
    "with ts). Prints one line per iteration (best value so far, the normalised "
    "regret of a built-in problem, seconds) and a summary."
)
_ASK_DESCRIPTION = (
    "Propose the next batch of the run saved in --state and print it as CSV "
    "(columns step, index, x0, x1, ...), or write it to --csv. A --state file that "
    "does not exist starts a run: give its --bounds and, optionally, its strategy; "
    "its first batch is the initial design. Evaluate the batch, add a column y "
    "with the results, and give the file to `botorch-nn-uq tell`. Asking again "
    "before telling prints the same batch (without --batch-size, or with the "
    "batch's own). An existing --csv file is replaced only with --overwrite, and "
    "never the --state file."
)
_TELL_DESCRIPTION = (
    "Read the results of the batch asked last from RESULTS (the CSV that ask wrote, "
    "with a column y of results, in UTF-8 with or without a byte-order mark; other "
    "added columns are ignored) and add them to the run saved in --state. Rows "
    "that do not match the asked batch (another step, missing, repeated or changed "
    "points), a column given twice, non-numeric or non-finite results, a batch "
    "told before and a file that cannot be read or saved are refused in one line "
    "(exit status 2), and the state file is left unchanged."
)


def option_flag(name: str) -> str:
    r"""The command-line flag of the option whose ``argparse`` destination is ``name``.

    Args:
        name: The destination, such as ``"n_initial"``.

    Example:
        >>> option_flag("n_initial")
        '--n-initial'
    """
    return "--" + name.replace("_", "-")


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
    r"""An argparse type: one of the names ``valid``; an error lists them, calling them
    ``kind`` (``"model"``)."""

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

    Args:
        text: The device's name (``cpu``, ``cuda``, ``cuda:1``, ...).

    Example:
        >>> device_argument("cpu")
        device(type='cpu')
    """
    try:
        return check_device("device", text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error).removeprefix("device ")) from None


def _real_argument(interval: Interval = REALS) -> Callable[[str], float]:
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


def _strategy_argument(text: str) -> Strategy:
    r"""An argparse type: a strategy's spelling (:class:`~botorch_nn_uq.bo.Strategy`)."""
    try:
        return Strategy.parse(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


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


def _strategy_options() -> dict[str, dict[str, Any]]:
    r"""The argparse arguments of each option of :data:`STRATEGY_DEFAULTS` but its default,
    in the order of the help; the registries' descriptions are read now, so the help
    names what is registered when the parser is built."""
    models = [*SURROGATES, RANDOM_SEARCH]
    return {
        "model": {
            "type": _choice(models, "model"),
            "help": "surrogate: "
            + "; ".join(f"{name} = {spec.description}" for name, spec in SURROGATES.items())
            + f"; {RANDOM_SEARCH} = uniform random search (no surrogate)",
        },
        "acquisition": {
            "type": _choice(list(ACQUISITIONS), "acquisition"),
            "help": "acquisition function: "
            + "; ".join(f"{name} = {spec.description}" for name, spec in ACQUISITIONS.items()),
        },
        "seed": {"type": integer_argument(0, MAX_RUN_SEED), "help": "seed of the whole run"},
        "n_initial": {"type": integer_argument(2, MAX_POINTS), "help": "initial random points"},
        "num_restarts": {
            "type": integer_argument(1, MAX_RESTARTS),
            "help": "optimize_acqf restarts",
        },
        "raw_samples": {
            "type": integer_argument(1, MAX_POINTS),
            "help": "optimize_acqf raw samples (at least --num-restarts)",
        },
        "beta": {"type": _real_argument(NON_NEGATIVE), "help": "exploration weight of ucb / qucb"},
        "negative_slope": {
            "type": _real_argument(Interval(0.0, 1.0, upper_closed=False)),
            "help": "slope delta of leaky-ei / q-leaky-ei, in [0, 1)",
        },
        "target": {
            "type": _real_argument(Interval(-MAX_TARGET, MAX_TARGET)),
            "help": "target value of the objective: hit it instead of minimising (target-value "
            "optimisation; needs a robust-* or q-robust-ei acquisition)",
        },
        "maximize": {
            "action": "store_true",
            "help": "maximise the objective instead of minimising it (a user's objective)",
        },
        "aleatoric_variance": {
            "type": _real_argument(NON_NEGATIVE),
            "help": "known aleatoric variance of the outputs for the target-value acquisitions",
        },
        "quantile": {
            "type": _real_argument(OPEN_UNIT_INTERVAL),
            "help": "quantile q of robust-lcb, in (0, 1) (small = optimistic)",
        },
        "sequential": {
            "action": "store_true",
            "help": "optimise a q-acquisition greedily point by point instead of jointly",
        },
        "num_candidates": {
            "type": integer_argument(1, MAX_POINTS),
            "help": "candidates scored by every function of the bank for ts",
        },
        "continual": {
            "action": "store_true",
            "help": "warm-start each refit from the previous iteration's network (mc-dropout, "
            "deep-ensemble, neon, nomu), with a cold refit every --cold-refit-every iterations "
            "or when the error on the newest points doubles",
        },
        "warm_start_steps": {
            "type": integer_argument(1, MAX_ITERATIONS),
            "help": "optimizer steps of a warm-started refit (with --continual)",
        },
        "cold_refit_every": {
            "type": integer_argument(1, MAX_ITERATIONS),
            "help": "a refit from scratch every this many iterations (with --continual)",
        },
        "trust_region": {
            "action": "store_true",
            "help": "propose inside a TuRBO-style trust region around the best point (any model)",
        },
        "turbo": {
            "action": "store_true",
            "help": "TuRBO-1 (any model): Thompson sampling on TuRBO's candidates in a trust "
            "region weighted by the model's lengthscales, restarting from a fresh design of "
            "--n-initial points with the run's data set aside when it collapses (--acquisition "
            "is not used)",
        },
        "batch_thompson": {
            "action": "store_true",
            "help": "with --turbo: choose each batch among TuRBO's candidates by the package's "
            "batch Thompson sampling (distinct, separated points from a network's functions) "
            "instead of BoTorch's MaxPosteriorSampling",
        },
        "local_fit": {
            "type": _real_argument(Interval(1.0)),
            "metavar": "FACTOR",
            "help": "with --trust-region or --turbo: fit region-locally, the model's inputs "
            "normalised to the trust region grown FACTOR times around the best point (e.g. 4) "
            "instead of to the whole box",
        },
    }


def _add_strategy_options(parser: argparse.ArgumentParser, new_run_only: bool) -> None:
    r"""Add ``--strategy`` and its shorthand options (:data:`STRATEGY_DEFAULTS`) to
    ``parser``, in a group of their own.

    Args:
        parser: A command's parser.
        new_run_only: Whether the options apply only when the command starts a run
            (``ask``): they then default to ``None`` (their defaults are in the help);
            otherwise to :data:`STRATEGY_DEFAULTS`.
    """
    group = parser.add_argument_group(
        "strategy" + (" (only when ask starts a new run)" if new_run_only else "")
    )
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
    for name, options in _strategy_options().items():
        default = STRATEGY_DEFAULTS[name]
        if options.get("action") == "store_true":
            options["default"] = None if new_run_only else False
        else:
            options["default"] = None if new_run_only else default
            if new_run_only and default is not None:
                options["help"] += f" (default: {default})"
        group.add_argument(option_flag(name), dest=name, **options)


def _add_bounds_options(parser: argparse.ArgumentParser, dim_help: str) -> None:
    r"""Add ``--bounds`` and ``--dim`` (the box of a user's inputs) to ``parser``.

    Args:
        parser: A command's parser (or one of its groups).
        dim_help: The help of ``--dim``, which differs between commands.
    """
    parser.add_argument(
        "--bounds",
        nargs="+",
        type=_real_argument(Interval(-MAX_TARGET, MAX_TARGET)),
        metavar="LOW HIGH",
        help="the box of the inputs: a lower and an upper bound per input, e.g. --bounds "
        "-5 10 0 15 (or one pair for all inputs, with --dim)",
    )
    parser.add_argument("--dim", type=integer_argument(1, MAX_DIM), help=dim_help)


def _add_optimize_options(optimize: argparse.ArgumentParser) -> None:
    r"""Add the options of ``optimize`` to its parser ``optimize``."""
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


def _add_ask_options(ask: argparse.ArgumentParser) -> None:
    r"""Add the options of ``ask`` to its parser ``ask``."""
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


def _add_tell_options(tell: argparse.ArgumentParser) -> None:
    r"""Add the options of ``tell`` to its parser ``tell``."""
    tell.add_argument("--state", type=Path, required=True, help="the run's state file")
    tell.add_argument("results", type=Path, help="the asked batch with a column y of results")
    _add_device_option(tell, "the run's tensors while the results are added")


def build_parsers() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    r"""The command line's parser and its sub-parsers by command.

    Returns:
        The parser of ``botorch-nn-uq``, and ``{command: parser}`` for ``optimize``,
        ``ask`` and ``tell``, whose errors report the checks that involve several
        options (exit code 2).
    """
    parser = _ArgumentParser(
        prog="botorch-nn-uq",
        description="Neural-network surrogates with uncertainty for BoTorch.",
    )
    parser.add_argument("--version", action="version", version=f"botorch-nn-uq {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    optimize = commands.add_parser(
        "optimize",
        help=_COMMAND_HELP["optimize"],
        description=_OPTIMIZE_DESCRIPTION,
        # Every option of optimize has a default worth showing; ask's strategy options
        # default to None and name their defaults in their help.
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    _add_optimize_options(optimize)
    ask = commands.add_parser("ask", help=_COMMAND_HELP["ask"], description=_ASK_DESCRIPTION)
    _add_ask_options(ask)
    tell = commands.add_parser("tell", help=_COMMAND_HELP["tell"], description=_TELL_DESCRIPTION)
    _add_tell_options(tell)
    commands.add_parser("list", help=_COMMAND_HELP["list"])
    return parser, {"optimize": optimize, "ask": ask, "tell": tell}
