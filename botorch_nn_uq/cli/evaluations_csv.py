r"""``optimize --csv``: one row per evaluation, written and flushed as the run makes them,
so an interrupted or killed run keeps every evaluation made.

The file is opened and its header written before any work (:func:`open_evaluations_csv`,
:func:`evaluation_writer`), so a path that cannot be written fails before the first
evaluation; :class:`EvaluationWriter` then appends each evaluated batch.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from torch import Tensor

from botorch_nn_uq.bo import StepRecord
from botorch_nn_uq.bo.loop import strategy_label
from botorch_nn_uq.cli.outputs import cannot_write


class EvaluationWriter:
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
        r"""Append the rows of one evaluated batch and flush them to the file.

        Args:
            X: The batch's ``q x d`` inputs.
            values: Their ``q`` objective values.
            record: The record of the batch's step.
        """
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


def open_evaluations_csv(path: Path, optimize: argparse.ArgumentParser) -> TextIO:
    r"""Open the CSV for writing now, so an unwritable path fails before any work (an
    existing file was refused before, unless ``--overwrite``).

    Args:
        path: The ``--csv`` path; its missing folders are created.
        optimize: The parser of ``optimize``, whose error exits.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return path.open("w", newline="")
    except OSError as error:
        cannot_write(optimize, "--csv", path, error)


def evaluation_writer(
    args: argparse.Namespace,
    name: str,
    dim: int,
    csv_file: TextIO,
    optimize: argparse.ArgumentParser,
) -> EvaluationWriter:
    r"""The CSV's writer, its header written and flushed now: a file that cannot be
    written (a full disk, ``/dev/full``) fails before any work, and leaves no file.

    Args:
        args: The parsed ``optimize`` command (``run_strategy``, ``seed``, ``csv``).
        name: The problem's name, a column of every row.
        dim: The input dimension.
        csv_file: The file :func:`open_evaluations_csv` opened.
        optimize: The parser of ``optimize``, whose error exits.
    """
    identity = {
        "problem": name,
        "model": args.run_strategy.model,
        "acquisition": strategy_label(args.run_strategy),
        "seed": args.seed,
    }
    try:
        return EvaluationWriter(csv_file, identity, dim)
    except OSError as error:
        # Closing flushes what is left in the buffer, which fails the same way.
        with contextlib.suppress(OSError):
            csv_file.close()
        # A refused command leaves no file behind: this one was created or, with
        # --overwrite, emptied when it was opened.
        if args.csv.is_file():
            args.csv.unlink(missing_ok=True)
        cannot_write(optimize, "--csv", args.csv, error)
