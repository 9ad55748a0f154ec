r"""``botorch-nn-uq optimize``: a Bayesian-optimisation run on a built-in problem
(``--problem``) or on a user's function (``--objective package.module:function --bounds
...``), from its checks to its summary.

Every option and file is checked before any work (:func:`check_optimize`): a refused
command exits with code 2 having evaluated nothing. A run interrupted with Ctrl-C
returns 130 and a user's objective that fails returns 1, the ``--csv`` file holding
every evaluation made.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from botorch_nn_uq.bo import (
    BayesianOptimizer,
    EvaluationsNotToldError,
    FunctionProblem,
    Problem,
    StepRecord,
)
from botorch_nn_uq.bo.objectives import RegisteredProblem
from botorch_nn_uq.bo.state_file import same_file
from botorch_nn_uq.cli.evaluations_csv import (
    EvaluationWriter,
    evaluation_writer,
    open_evaluations_csv,
)
from botorch_nn_uq.cli.objectives import (
    CheckedProblem,
    ObjectiveError,
    load_objective,
    objective_from_options,
    parse_bounds,
)
from botorch_nn_uq.cli.outputs import check_output, check_plot_path
from botorch_nn_uq.cli.reports import plot_best_so_far, print_heading, print_record, print_summary
from botorch_nn_uq.cli.strategy_options import check_strategy
from botorch_nn_uq.problems import get_bo_problem
from botorch_nn_uq.problems.suite import FIXED_DIMENSIONS

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


def optimize_command(args: argparse.Namespace, optimize: argparse.ArgumentParser) -> int:
    r"""Run ``optimize``: check its options and files, set up the problem and the CSV,
    and run the loop with ``--threads`` torch threads.

    Args:
        args: The parsed ``optimize`` command.
        optimize: Its parser, whose error exits (code 2) on any refused option or file.

    Returns:
        The exit code: 0, 1 when a user's objective failed or the CSV could not be
        written during the run, 130 when the run was interrupted.
    """
    check_optimize(args, optimize)
    if args.plot is not None:
        check_plot_path(args.plot, optimize, args.overwrite)
    function, bounds = None, None
    if args.objective is not None:
        try:
            function = load_objective(args.objective)
        except ValueError as error:
            optimize.error(f"argument --objective: {error}")
        bounds = parse_bounds(args, optimize)
        name, dim = args.objective.partition(":")[2], bounds.shape[-1]
    else:
        name, dim = f"{args.problem}-{args.dim}d", args.dim
    with (
        contextlib.nullcontext() if args.csv is None else open_evaluations_csv(args.csv, optimize)
    ) as csv_file:
        writer = (
            None if csv_file is None else evaluation_writer(args, name, dim, csv_file, optimize)
        )
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
            return _run(args, problem, writer, start, load_at_start)
        finally:
            if args.threads is not None:
                torch.set_num_threads(previous_threads)


def check_optimize(args: argparse.Namespace, optimize: argparse.ArgumentParser) -> None:
    r"""Reject combinations of ``optimize`` options that make no sense, before any work,
    and complete the built-in problem's defaults (``levy``, its dimension).

    Args:
        args: The parsed ``optimize`` command; ``problem``, ``dim`` and
            ``run_strategy`` are set.
        optimize: The parser of ``optimize``, whose error exits.
    """
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
    check_strategy(args, optimize, args.batch_size)
    if args.csv is not None and args.plot is not None and same_file(args.csv, args.plot):
        optimize.error("argument --plot: is the --csv file; give them different paths")
    if args.csv is not None:
        check_output(args.csv, "--csv", optimize, args.overwrite)


def _problem(
    args: argparse.Namespace, function: Callable[[Tensor], Any] | None, bounds: Tensor | None
) -> Problem:
    r"""The problem of ``optimize``: a built-in one, or the user's function on ``bounds``
    (its failures reported as :class:`~botorch_nn_uq.cli.objectives.ObjectiveError`)."""
    if function is None:
        bo_problem = get_bo_problem(args.problem, args.dim, problem_seed=args.problem_seed)
        return RegisteredProblem(bo_problem, args.target, device=args.device)
    problem = FunctionProblem(
        function,
        bounds.to(args.device),
        objective_from_options(args),
        name=args.objective.partition(":")[2],
        vectorized=args.vectorized,
    )
    return CheckedProblem(problem)


def _run(
    args: argparse.Namespace,
    problem: Problem,
    writer: EvaluationWriter | None,
    start: float,
    load_at_start: float | None,
) -> int:
    r"""Run the loop on ``problem``, printing a line per step (unless ``--quiet``) and the
    summary, and writing the CSV and the plot.

    Args:
        args: The checked ``optimize`` command.
        problem: The problem to optimise.
        writer: The CSV's writer, or ``None`` without ``--csv``.
        start: The clock when the command's work started.
        load_at_start: The load average then.

    Returns:
        The exit code (see :func:`optimize_command`).
    """
    # L-BFGS-B often stops "abnormally" on the piecewise-linear acquisition surfaces of
    # ReLU networks; optimize_acqf then retries by itself, so the warning is only noise here.
    warnings.filterwarnings("ignore", message="Optimization failed", category=RuntimeWarning)
    strategy = args.run_strategy
    optimizer = BayesianOptimizer.for_problem(
        problem, strategy=strategy, seed=args.seed, n_initial=args.n_initial
    )
    regret = getattr(problem, "regret", None)
    print_heading(problem, strategy, args.n_initial, args.iterations, args.seed)
    records: list[StepRecord] = []

    def on_batch(step: StepRecord, X: Tensor, Y: Tensor) -> None:
        record = step if regret is None else replace(step, regret=regret(step.best_value))
        records.append(record)
        if writer is not None:
            writer(X, optimizer.values[-X.shape[0] :], record)
        if not args.quiet:
            print_record(record, regret is not None)

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
    seconds = _clock() - start
    loads = [load for load in (load_at_start, _load_average()) if load is not None]
    print_summary(
        problem,
        optimizer,
        records,
        target=args.target,
        model=strategy.model,
        seconds=seconds,
        threads=torch.get_num_threads(),
        cores=_cpu_count(),
        load=max(loads) if loads else None,
    )
    if args.csv is not None:
        print(f"wrote {args.csv}")
    if args.plot is not None:
        plot_best_so_far(records, args.plot, f"{problem.name} ({problem.objective.describe()})")
        print(f"wrote {args.plot}")
    return 0
