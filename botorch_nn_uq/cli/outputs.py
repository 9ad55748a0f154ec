r"""The files the commands write (``optimize --csv`` and ``--plot``, ``ask --csv``), checked
before any work: no command replaces a file it did not create unless told to
(``--overwrite``), and a file that cannot be written is refused in one line (the
command's parser error, exit code 2).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import stat
from pathlib import Path
from typing import NoReturn


def cannot_write(
    parser: argparse.ArgumentParser, option: str, path: Path, error: OSError
) -> NoReturn:
    r"""Exit with the parser's error: ``option``'s file ``path`` cannot be written, and
    why.

    Args:
        parser: The command's parser, whose error exits.
        option: The option, for the error (``"--csv"``).
        path: The path given to ``option``.
        error: Why the file could not be written.
    """
    parser.error(f"argument {option}: cannot write {str(path)!r}: {error.strerror or error}")


def check_output(path: Path, option: str, parser: argparse.ArgumentParser, overwrite: bool) -> bool:
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
        cannot_write(parser, option, path, error)
    if stat.S_ISDIR(mode):
        parser.error(f"argument {option}: cannot write {str(path)!r}: it is a folder")
    if not stat.S_ISREG(mode):
        return True
    if not overwrite:
        parser.error(f"argument {option}: {str(path)!r} exists; pass --overwrite to replace it")
    return False


def check_plot_path(path: Path, optimize: argparse.ArgumentParser, overwrite: bool) -> None:
    r"""Fail now, not after the run, if the plot cannot be written (no matplotlib, a
    folder that cannot be created or written) or would replace a file without
    ``overwrite``.

    Args:
        path: The ``--plot`` path.
        optimize: The parser of ``optimize``, whose error exits.
        overwrite: Whether ``--overwrite`` was given.
    """
    if importlib.util.find_spec("matplotlib") is None:
        optimize.error("argument --plot: needs matplotlib: pip install 'botorch-nn-uq[plots]'")
    check_output(path, "--plot", optimize, overwrite)
    # The plot's folder is created when missing: its nearest existing ancestor must be
    # writable.
    folder = path.parent.absolute()
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        optimize.error(f"argument --plot: cannot write {str(path)!r}")
