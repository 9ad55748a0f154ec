r"""``botorch-nn-uq ask --state FILE``: propose the next batch of a run whose evaluations
are made elsewhere, and print it as CSV (or write it to ``--csv``).

A ``--state`` file that does not exist starts a run with the given box and strategy.
The batch is written before the state is saved, and the batch file is moved into place
only after, so a command that fails leaves the run as it was (a new run without a state
file) and no batch file behind.

The command line keeps one batch in flight: asking again before telling prints the
pending points again (so a batch file that was lost, or a command that was killed
after saving, costs nothing), where the Python API's ``ask`` would propose new points
that take the pending ones into account.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import secrets
import sys
from pathlib import Path

from torch import Tensor

from botorch_nn_uq.bo import BayesianOptimizer
from botorch_nn_uq.bo.state_file import same_file
from botorch_nn_uq.cli.objectives import objective_from_options, parse_bounds
from botorch_nn_uq.cli.outputs import cannot_write, check_output
from botorch_nn_uq.cli.parsers import STRATEGY_DEFAULTS, option_flag
from botorch_nn_uq.cli.run_state import load_state, save_state
from botorch_nn_uq.cli.strategy_options import check_strategy, with_strategy_defaults

#: The columns of the batch that ``ask`` writes (then ``x0``, ``x1``, ...) and the
#: column of the results that ``tell`` reads.
BATCH_COLUMNS = ("step", "index")
RESULT_COLUMN = "y"


def ask_command(args: argparse.Namespace, ask: argparse.ArgumentParser) -> int:
    r"""Run ``ask``: check its files, start or load the run, propose (or repeat) the
    batch, and write the batch before the state (see :func:`_write_batch`).

    Args:
        args: The parsed ``ask`` command.
        ask: Its parser, whose error exits (code 2) on any refused option or file.

    Returns:
        The exit code, 0.
    """
    new_run = not args.state.exists()
    stream = False
    if args.csv is not None:
        if same_file(args.csv, args.state):
            ask.error(
                f"argument --csv: {str(args.csv)!r} is the --state file; write the batch to "
                "another file"
            )
        stream = check_output(args.csv, "--csv", ask, args.overwrite)
    optimizer = _new_run(args, ask) if new_run else _existing_run(args, ask)
    pending = optimizer.pending
    # Asking a pending batch again changes nothing to save.
    changed = pending is None
    if pending is None:
        # The initial design has its own size.
        q = None if optimizer.step == 0 else args.batch_size
        try:
            _, X, step = optimizer.ask_trials(q)
        except ValueError as error:
            ask.error(f"argument --batch-size: {error}")
        steps = [step] * X.shape[0]
    else:
        # Without --batch-size the pending points are printed again whatever their
        # number.
        X, steps = pending, optimizer.state.pending.steps.tolist()
        step = max(steps)
        if args.batch_size is not None and args.batch_size != X.shape[0]:
            ask.error(
                f"argument --batch-size: The batch of step {step} ({X.shape[0]} points) was "
                f"asked and not told; tell its results before asking for a batch of "
                f"{args.batch_size}."
            )
    text = _batch_text(X, steps)
    temporary = None
    if args.csv is not None:
        # The batch is written before the state is saved, so a --csv that cannot be
        # written leaves the run as it was (and a new run without a state file).
        temporary = _write_batch(text, args.csv, stream, ask)
    if changed:
        save_state(
            optimizer,
            args.state,
            ask,
            clean_up=None if temporary is None else lambda: temporary.unlink(missing_ok=True),
        )
    if args.csv is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    elif temporary is not None:
        _move_batch(temporary, args, new_run, ask)
    what = "the initial design" if step == 0 else f"BO step {step}"
    destination = "" if args.csv is None else f" in {args.csv}"
    print(
        f"{what}: {X.shape[0]} points{destination}; evaluate them, add a column "
        f"{RESULT_COLUMN} with the results and run: botorch-nn-uq tell --state {args.state} "
        "RESULTS.csv",
        file=sys.stderr,
        flush=True,
    )
    return 0


def _new_run_options(args: argparse.Namespace) -> list[str]:
    r"""The flags given that configure a new run (its strategy and box), in the order of
    the help."""
    return [
        option_flag(name)
        for name in ["strategy", *STRATEGY_DEFAULTS, "bounds", "dim"]
        if getattr(args, name) is not None
    ]


def _existing_run(args: argparse.Namespace, ask: argparse.ArgumentParser) -> BayesianOptimizer:
    r"""The run saved in ``--state``; an option of a new run is refused, as the run's
    strategy and box are in the file."""
    given = _new_run_options(args)
    if given:
        ask.error(
            f"argument {given[0]}: {str(args.state)!r} holds a run whose strategy is in "
            "the file; start a new run with another --state"
        )
    return load_state(args.state, ask, args.device)


def _new_run(args: argparse.Namespace, ask: argparse.ArgumentParser) -> BayesianOptimizer:
    r"""The run that ``ask`` starts: its box (``--bounds``, required) and its strategy,
    checked before any work."""
    if args.bounds is None:
        ask.error(
            f"argument --bounds: {str(args.state)!r} does not exist; a new run needs "
            "the box of its inputs"
        )
    args = with_strategy_defaults(args)
    check_strategy(args, ask, args.batch_size or 1)
    return BayesianOptimizer(
        parse_bounds(args, ask).to(args.device),
        objective=objective_from_options(args),
        strategy=args.run_strategy,
        seed=args.seed,
        n_initial=args.n_initial,
    )


def _batch_text(X: Tensor, steps: list[int]) -> str:
    r"""The CSV text of the pending points: a row per point with the ``step`` that
    asked it, its ``index`` among the pending points and its inputs ``x0``, ``x1``, ...
    (written exactly, as ``repr``, so ``tell`` finds the asked points)."""
    buffer = io.StringIO()
    columns = [*BATCH_COLUMNS, *(f"x{i}" for i in range(X.shape[-1]))]
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(
        {"step": step, "index": index, **{f"x{i}": repr(x) for i, x in enumerate(row)}}
        for index, (step, row) in enumerate(zip(steps, X.tolist(), strict=True))
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
        stream: Whether ``path`` is a stream
            (:func:`~botorch_nn_uq.cli.outputs.check_output`).
        ask: The parser of ``ask``, whose error exits.

    Returns:
        The temporary file, or ``None`` for a stream.
    """
    if stream:
        try:
            with path.open("w", encoding="utf-8", newline="") as handle:
                handle.write(text)
        except OSError as error:
            cannot_write(ask, "--csv", path, error)
        return None
    target = Path(os.path.realpath(path))
    temporary = target.parent / f".{target.name}.{secrets.token_hex(8)}.tmp"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        # Not tempfile.mkstemp, whose files only their owner may read: the batch file is
        # created as any other file of the user (0o666 less the umask).
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as error:
        cannot_write(ask, "--csv", path, error)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(text.encode())
            handle.flush()
            # A full disk may fail only when the data reaches it.
            os.fsync(handle.fileno())
    except OSError as error:
        temporary.unlink(missing_ok=True)
        cannot_write(ask, "--csv", path, error)
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
        cannot_write(ask, "--csv", args.csv, error)
