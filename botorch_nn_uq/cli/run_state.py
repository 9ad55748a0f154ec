r"""The run's state file (``--state``) as ``ask`` and ``tell`` use it: each command holds
the file's lock while it runs, loads the run from it, and says in one line why the run
could not be loaded or saved (the command's parser error, exit code 2), the file left as
it was.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable
from pathlib import Path

import torch

from botorch_nn_uq.bo import BayesianOptimizer, StateFileError
from botorch_nn_uq.bo.state_file import locked_state_file

#: A command that works on a run's state file: it takes the parsed command and its
#: parser (whose error exits) and returns the exit code.
StateCommand = Callable[[argparse.Namespace, argparse.ArgumentParser], int]


def run_locked(
    args: argparse.Namespace, command: argparse.ArgumentParser, run: StateCommand
) -> int:
    r"""Run ``ask`` or ``tell`` holding the lock of the run's state file, so that two
    commands on one run cannot erase each other's work: a command that finds the lock
    held is refused before it reads anything (a new run has no file to lock yet; its
    file is created only if none appeared meanwhile).

    Args:
        args: The parsed command, with ``state``.
        command: Its parser, whose error exits with code 2.
        run: What the command does once it holds the lock.

    Returns:
        The exit code of ``run``.
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
        return run(args, command)


def load_state(
    path: Path, parser: argparse.ArgumentParser, device: torch.device
) -> BayesianOptimizer:
    r"""The run saved at ``path`` with its tensors on ``device``, or a parser error that
    says why it cannot be read (``ask`` and ``tell`` hold the file's lock, which refused
    a path that is not a regular file before anything read it).

    Args:
        path: The ``--state`` path.
        parser: The command's parser, whose error exits.
        device: The ``--device`` of the command.
    """
    try:
        return BayesianOptimizer.load(path, device=device)
    except FileNotFoundError:
        parser.error(f"argument --state: {str(path)!r} does not exist")
    except (StateFileError, ValueError, OSError) as error:
        parser.error(f"argument --state: {error}")


def save_state(
    optimizer: BayesianOptimizer,
    path: Path,
    parser: argparse.ArgumentParser,
    clean_up: Callable[[], None] | None = None,
) -> None:
    r"""Save the run to ``path``, or exit with the parser's error that says why it could
    not be saved. The save is atomic: on failure the state file is as it was before the
    command.

    Args:
        optimizer: The run.
        path: The ``--state`` path.
        parser: The command's parser, whose error exits.
        clean_up: Removes what the command wrote before saving, before it exits on a
            failure (``None``: nothing to remove).
    """
    try:
        optimizer.save(path)
    except (OSError, StateFileError) as error:
        if clean_up is not None:
            clean_up()
        # An OSError is a read-only folder or a full disk; a StateFileError says that
        # another command wrote the file since it was read, or holds its lock.
        reason = (
            f"cannot write {str(path)!r}: {error.strerror or error}"
            if isinstance(error, OSError)
            else str(error)
        )
        parser.error(f"argument --state: {reason}")
