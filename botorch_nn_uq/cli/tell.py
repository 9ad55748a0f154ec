r"""``botorch-nn-uq tell --state FILE RESULTS.csv``: add the results of the pending batch
(the points ``ask`` printed) to the run saved in ``FILE``.

The results file is the batch that ``ask`` wrote with a column ``y`` of results; this
module alone checks it (:func:`read_results`): a UTF-8 CSV, a byte-order mark allowed,
not a state file, each needed column once, the rows of the asked batch (its step, each
index once, the asked points) and a finite number for each result. A file that fails a
check is refused in one line that names the file and, where it applies, the line
(the parser's error, exit code 2), and the state file is left unchanged.
"""

from __future__ import annotations

import argparse
import csv
import math
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

from botorch_nn_uq.bo import BayesianOptimizer
from botorch_nn_uq.bo.state import STATE_MAGIC
from botorch_nn_uq.cli.ask import BATCH_COLUMNS, RESULT_COLUMN
from botorch_nn_uq.cli.run_state import load_state, save_state

#: A row of the results file: its cells by column.
Row = dict[str, str]
#: The line of the file's first row (the header is line 1).
_FIRST_LINE = 2


class _RefusedResultsError(Exception):
    r"""Why the results file is refused: the message that follows the file's name."""


def tell_command(args: argparse.Namespace, tell: argparse.ArgumentParser) -> int:
    r"""Run ``tell``: load the run, read and check its results file, add the results and
    save the run, then print the best point so far.

    Args:
        args: The parsed ``tell`` command (``state``, ``results``, ``device``).
        tell: Its parser, whose error exits (code 2) on any refused file.

    Returns:
        The exit code, 0.
    """
    optimizer = load_state(args.state, tell, args.device)
    X, Y = read_results(args.results, optimizer, tell)
    record = optimizer.tell(X, Y)
    save_state(optimizer, args.state, tell)
    best = optimizer.best()
    point = ", ".join(f"{x:.6g}" for x in best.x.tolist())
    print(
        f"step {record.step}: told {X.shape[0]} results | best value so far {best.value:.6g} at "
        f"x = [{point}] | {optimizer.X.shape[0]} evaluations; next: botorch-nn-uq ask --state "
        f"{args.state}",
        flush=True,
    )
    return 0


def read_results(
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

    Returns:
        The ``q x d`` inputs and ``q`` results, in the order of the asked batch.
    """
    inputs = [f"x{i}" for i in range(optimizer.bounds.shape[-1])]
    try:
        rows = _read_rows(path, (*BATCH_COLUMNS, *inputs, RESULT_COLUMN))
        _check_step(rows, optimizer)
        _check_indices(rows, len(optimizer.state.pending))
        return _told_batch(rows, optimizer, inputs)
    except _RefusedResultsError as refused:
        tell.error(f"argument results: {path}: {refused}")


def _read_rows(path: Path, columns: Sequence[str]) -> list[Row]:
    r"""The rows of the results file, which must be a UTF-8 CSV (not a state file) with
    each of ``columns`` once and at least one row."""
    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:
            # A state file is binary after its first line: say what it is rather than
            # that it is not text.
            if handle.buffer.peek(len(STATE_MAGIC)).startswith(STATE_MAGIC):
                raise _RefusedResultsError("is a botorch-nn-uq run state file, not results")
            reader = csv.DictReader(handle)
            _check_header(reader.fieldnames or [], columns)
            rows = list(reader)
    except UnicodeDecodeError:
        raise _RefusedResultsError("not UTF-8 text (save it as CSV UTF-8)") from None
    except OSError as error:
        raise _RefusedResultsError(error.strerror or str(error)) from None
    except csv.Error as error:
        raise _RefusedResultsError(f"not a CSV file ({error})") from None
    if not rows:
        raise _RefusedResultsError("no rows")
    return rows


def _check_header(header: Sequence[str], columns: Sequence[str]) -> None:
    r"""Refuse a header without each of ``columns`` exactly once."""
    missing = [column for column in columns if column not in header]
    if missing:
        raise _RefusedResultsError(
            f"no column {', '.join(missing)} (expected the batch ask wrote with a column y)"
        )
    # DictReader keeps the last of two equal columns: which one was meant is unknown.
    repeated = [column for column in columns if header.count(column) > 1]
    if repeated:
        raise _RefusedResultsError(f"the column {repeated[0]} appears twice")


def _number(row: Row, column: str, line: int) -> float:
    r"""The number in ``column`` of the ``row`` on ``line``."""
    text = (row.get(column) or "").strip()
    try:
        return float(text)
    except ValueError:
        raise _RefusedResultsError(f"line {line}: {column} is {text!r}, not a number") from None


def _count(row: Row, column: str, line: int) -> int:
    r"""The non-negative integer in ``column`` of the ``row`` on ``line``."""
    text = (row.get(column) or "").strip()
    if not text.isdigit():
        raise _RefusedResultsError(f"line {line}: {column} is {text!r}, not a non-negative integer")
    return int(text)


def _check_step(rows: Sequence[Row], optimizer: BayesianOptimizer) -> None:
    r"""Refuse rows that are not all of the pending batch's step (rows of several steps,
    a step told before, a step not asked)."""
    steps = {_count(row, "step", line) for line, row in enumerate(rows, start=_FIRST_LINE)}
    pending = set(optimizer.state.pending.steps.tolist())
    if len(steps) > 1:
        raise _RefusedResultsError(
            f"rows of several steps ({', '.join(map(str, sorted(steps)))}); tell one batch"
        )
    (step,) = steps
    if step < optimizer.step and step not in pending:
        raise _RefusedResultsError(f"the results of step {step} were told already")
    if step not in pending:
        raise _RefusedResultsError(
            f"no batch of step {step} was asked"
            + (f" (the asked batch is step {max(pending)})" if pending else "")
        )


def _check_indices(rows: Sequence[Row], batch_size: int) -> None:
    r"""Refuse rows whose indices are not each of the ``batch_size`` asked points once."""
    line_of: dict[int, int] = {}
    for line, row in enumerate(rows, start=_FIRST_LINE):
        index = _count(row, "index", line)
        if index >= batch_size:
            raise _RefusedResultsError(
                f"line {line}: index {index} was not asked (the batch has {batch_size} points)"
            )
        if index in line_of:
            raise _RefusedResultsError(
                f"index {index} appears twice (lines {line_of[index]} and {line})"
            )
        line_of[index] = line
    absent = sorted(set(range(batch_size)) - set(line_of))
    if absent:
        raise _RefusedResultsError(
            f"no results for index {', '.join(map(str, absent))} of the asked batch"
        )


def _told_batch(
    rows: Sequence[Row], optimizer: BayesianOptimizer, inputs: Sequence[str]
) -> tuple[Tensor, Tensor]:
    r"""The inputs and results of ``rows`` in the order of the asked batch, refused where
    the inputs are not the asked point (up to a billionth of the box) or the result is
    not a finite number; the indices were checked before."""
    asked = optimizer.state.pending.X
    X = torch.empty_like(asked)
    Y = torch.empty(asked.shape[0], dtype=asked.dtype, device=asked.device)
    tolerance = 1e-9 * (optimizer.bounds[1] - optimizer.bounds[0])
    for line, row in enumerate(rows, start=_FIRST_LINE):
        index = int(row["index"])
        X[index] = torch.tensor(
            [_number(row, column, line) for column in inputs], dtype=asked.dtype
        )
        if not ((X[index] - asked[index]).abs() <= tolerance).all():
            raise _RefusedResultsError(
                f"line {line}: the inputs of index {index} are not the asked point"
            )
        Y[index] = _number(row, RESULT_COLUMN, line)
        if not math.isfinite(Y[index]):
            raise _RefusedResultsError(
                f"line {line}: {RESULT_COLUMN} is {row[RESULT_COLUMN].strip()}; not finite"
            )
    return X, Y
