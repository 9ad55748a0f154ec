"""The ``botorch-nn-uq`` command line (also ``python -m botorch_nn_uq``).

- ``botorch-nn-uq optimize`` runs Bayesian optimisation with a chosen surrogate and
  acquisition on a built-in problem (``--problem``) or on a user's Python function
  (``--objective package.module:function --bounds ...``);
- ``botorch-nn-uq ask --state FILE`` proposes the next batch of a run whose evaluations
  are made elsewhere (a lab, a cluster job) and prints it as CSV, and ``botorch-nn-uq
  tell --state FILE RESULTS.csv`` reads their results back; the run's state lives in
  ``FILE`` between the two;
- ``botorch-nn-uq list`` shows what is registered.

A module per job:

- :mod:`~botorch_nn_uq.cli.parsers`: the parsers and the argument types;
- :mod:`~botorch_nn_uq.cli.strategy_options`: the strategy options, checked together;
- :mod:`~botorch_nn_uq.cli.objectives`: the user's objective, its box and its direction;
- :mod:`~botorch_nn_uq.cli.optimize`, :mod:`~botorch_nn_uq.cli.ask` and
  :mod:`~botorch_nn_uq.cli.tell`: the commands, the state file of the last two in
  :mod:`~botorch_nn_uq.cli.run_state`;
- :mod:`~botorch_nn_uq.cli.outputs` and :mod:`~botorch_nn_uq.cli.evaluations_csv`: the
  files the commands write;
- :mod:`~botorch_nn_uq.cli.reports`: what they print.
"""

from __future__ import annotations

from collections.abc import Sequence

from botorch_nn_uq.cli.ask import BATCH_COLUMNS, RESULT_COLUMN, ask_command
from botorch_nn_uq.cli.objectives import ObjectiveError, load_objective
from botorch_nn_uq.cli.optimize import optimize_command
from botorch_nn_uq.cli.parsers import (
    MAX_DIM,
    MAX_ITERATIONS,
    MAX_POINTS,
    MAX_RESTARTS,
    MAX_TARGET,
    MAX_THREADS,
    STRATEGY_DEFAULTS,
    build_parsers,
    device_argument,
    integer_argument,
)
from botorch_nn_uq.cli.reports import (
    list_registered,
    no_improvement_note,
    plot_best_so_far,
    slow_run_hint,
)
from botorch_nn_uq.cli.run_state import run_locked
from botorch_nn_uq.cli.strategy_options import STRATEGY_FLAGS
from botorch_nn_uq.cli.tell import tell_command

__all__ = [
    "BATCH_COLUMNS",
    "MAX_DIM",
    "MAX_ITERATIONS",
    "MAX_POINTS",
    "MAX_RESTARTS",
    "MAX_TARGET",
    "MAX_THREADS",
    "RESULT_COLUMN",
    "STRATEGY_DEFAULTS",
    "STRATEGY_FLAGS",
    "ObjectiveError",
    "device_argument",
    "integer_argument",
    "load_objective",
    "main",
    "no_improvement_note",
    "plot_best_so_far",
    "slow_run_hint",
]


def main(argv: Sequence[str] | None = None) -> int:
    r"""Run the command line with ``argv`` (default: ``sys.argv[1:]``); returns the exit
    code.

    Invalid options and unusable files exit with code 2 (``SystemExit``) before any
    evaluation and without changing a state file; a run interrupted with Ctrl-C returns
    130, its CSV holding every evaluation made; a user's objective that fails returns 1.

    Args:
        argv: The command's arguments, without the program's name.
    """
    parser, commands = build_parsers()
    args = parser.parse_args(argv)
    if args.command == "list":
        return list_registered()
    if args.command == "ask":
        return run_locked(args, commands["ask"], ask_command)
    if args.command == "tell":
        return run_locked(args, commands["tell"], tell_command)
    return optimize_command(args, commands["optimize"])
