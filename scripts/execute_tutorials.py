#!/usr/bin/env python
r"""Execute the tutorial notebooks with their full budgets and save them with their outputs.

Usage (from the repository root, in the environment with the package and the
``tutorials`` extra)::

    python scripts/execute_tutorials.py                    # every tutorials/*.ipynb, in place
    python scripts/execute_tutorials.py nomu.ipynb         # some of them
    python scripts/execute_tutorials.py --output-dir DIR   # write the executed copies to DIR

Each notebook runs top to bottom in a fresh kernel of the interpreter running this script
(a ``python3`` kernelspec pointing at ``sys.executable`` is written to a temporary
directory that ``JUPYTER_PATH`` puts first), with this checkout first on ``PYTHONPATH``,
without ``BOTORCH_NN_UQ_SMOKE`` (full budgets), with ``OMP_NUM_THREADS=1`` and
``PYTHONHASHSEED=0`` (the same outputs on every run) and with matplotlib's inline backend
and a ``matplotlibrc`` of this script (figures are PNGs of ``FIGURE_DPI`` dots per inch;
the user's matplotlib settings do not reach the saved plots). A cell that raises stops the
script and nothing is written for that notebook.

The saved notebook keeps its outputs and execution counts and drops what changes from run
to run without the code changing: the cells' execution timings, widget state, the
kernel's language details, and where the kernel happened to split a cell's printed text.
Its metadata gets a stamp under ``STAMP_KEY``: the SHA-256 of its code cells' sources
(``code_sources_sha256``, which ``tests/test_tutorials.py`` compares with the code that is
stored next to the outputs), the package version and the versions of Python, PyTorch,
BoTorch and GPyTorch that executed it.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nbformat import NotebookNode

REPO_ROOT = Path(__file__).resolve().parents[1]
TUTORIALS_DIR = REPO_ROOT / "tutorials"
#: The key of the notebook-level metadata stamp.
STAMP_KEY = "botorch_nn_uq"
KERNEL_NAME = "python3"
#: Resolution of the saved figures: enough to read them, small enough to keep the
#: repository lean.
FIGURE_DPI = 80
#: The distributions whose versions the stamp records.
STAMPED_DISTRIBUTIONS = ("torch", "botorch", "gpytorch")
#: Per-cell limit (seconds); the longest cells of a full run take minutes.
DEFAULT_CELL_TIMEOUT = 3600


def code_sources(notebook: Mapping[str, Any]) -> list[str]:
    r"""The sources of a notebook's code cells, in order.

    Args:
        notebook: A notebook as read by ``json.load`` (sources as lists of lines) or by
            ``nbformat.read`` (sources as strings).

    Returns:
        One string per code cell.
    """
    sources = []
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            source = cell["source"]
            sources.append(source if isinstance(source, str) else "".join(source))
    return sources


def code_sources_sha256(notebook: Mapping[str, Any]) -> str:
    r"""The SHA-256 (hex digest) of a notebook's code, which the stamp records.

    It covers the sources of the code cells and their order, not markdown, outputs or
    metadata: editing the code of an executed notebook changes it, editing its text does
    not.

    Args:
        notebook: A notebook as read by ``json.load`` or ``nbformat.read``.
    """
    encoded = json.dumps(code_sources(notebook), ensure_ascii=False).encode("utf-8")
    return hashlib.sha256(encoded).hexdigest()


def write_kernelspec(root: Path) -> None:
    r"""Write a ``python3`` kernelspec that runs ``sys.executable`` under ``root``.

    Args:
        root: A directory to put first on ``JUPYTER_PATH``; the kernelspec is written to
            ``root/kernels/python3/kernel.json``.
    """
    spec_dir = root / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True, exist_ok=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"Python 3 ({sys.prefix})",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")


def kernel_environment(matplotlibrc: Path) -> dict[str, str]:
    r"""The environment of the executing kernel: this process's, set for a reproducible
    full run.

    Args:
        matplotlibrc: The ``matplotlibrc`` file the kernel's matplotlib reads.
    """
    env = dict(os.environ)
    env.pop("BOTORCH_NN_UQ_SMOKE", None)
    env["OMP_NUM_THREADS"] = "1"
    # Sets of strings iterate in the same order on every run.
    env["PYTHONHASHSEED"] = "0"
    env["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    env["MATPLOTLIBRC"] = str(matplotlibrc)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


def merge_consecutive_streams(outputs: list[NotebookNode]) -> list[NotebookNode]:
    r"""Join each run of consecutive stream outputs of one name (``stdout``, ``stderr``)
    into one output.

    Where the kernel cuts what a cell prints into messages depends on timing; joined,
    the same prints give the same outputs on every run. The order of the outputs (text,
    figures) is kept.

    Args:
        outputs: A code cell's outputs.
    """
    merged: list[NotebookNode] = []
    for output in outputs:
        previous = merged[-1] if merged else None
        if (
            previous is not None
            and output["output_type"] == previous["output_type"] == "stream"
            and output["name"] == previous["name"]
        ):
            previous["text"] += output["text"]
        else:
            merged.append(output)
    return merged


def stamp(notebook: Mapping[str, Any]) -> dict[str, Any]:
    r"""The metadata stamp of ``notebook`` executed by this interpreter and checkout."""
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    import botorch_nn_uq

    versions = {"python": platform.python_version()}
    versions.update({name: importlib.metadata.version(name) for name in STAMPED_DISTRIBUTIONS})
    return {
        "source_sha256": code_sources_sha256(notebook),
        "package_version": botorch_nn_uq.__version__,
        "executed_with": versions,
    }


def execute(path: Path, env: Mapping[str, str], timeout: int | None) -> NotebookNode:
    r"""Execute the notebook at ``path`` in a fresh kernel and return it, stamped and
    without run-to-run variation besides what its code prints.

    Args:
        path: The notebook.
        env: The kernel's environment (``kernel_environment``), whose ``JUPYTER_PATH``
            leads to the kernelspec of ``write_kernelspec``.
        timeout: Seconds a cell may run (``None``: no limit).

    Returns:
        The executed notebook.
    """
    import nbclient
    import nbformat

    notebook = nbformat.read(path, as_version=4)
    metadata = dict(notebook.metadata)
    client = nbclient.NotebookClient(
        notebook,
        timeout=timeout,
        kernel_name=KERNEL_NAME,
        resources={"metadata": {"path": str(path.parent)}},
        record_timing=False,
        store_widget_state=False,
    )
    client.execute(env=dict(env))
    for cell in notebook.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code":
            cell.outputs = merge_consecutive_streams(cell.outputs)
    # nbclient writes the kernel's language_info (with the exact Python version, which
    # the stamp records); keep the notebook's own metadata.
    metadata[STAMP_KEY] = stamp(notebook)
    notebook.metadata = nbformat.from_dict(metadata)
    return notebook


def _children_cpu_seconds() -> float:
    r"""CPU time (user and system) of this process's finished children, such as the
    kernels: the cost of a notebook whatever else runs on the machine (Unix only)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _notebook_paths(names: Sequence[str]) -> list[Path]:
    if not names:
        return sorted(TUTORIALS_DIR.glob("*.ipynb"))
    paths = []
    for name in names:
        path = Path(name)
        if not path.exists():
            path = TUTORIALS_DIR / path.name
        if not path.is_file():
            raise SystemExit(f"No notebook {name!r} (neither a path nor in {TUTORIALS_DIR}).")
        paths.append(path.resolve())
    return paths


def main(argv: Sequence[str] | None = None) -> None:
    r"""Execute the notebooks named in ``argv`` (all tutorials by default) and save them."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "notebooks", nargs="*", help="notebook paths or names in tutorials/ (default: all)"
    )
    parser.add_argument(
        "--output-dir",
        type=Path,
        help="write the executed notebooks here instead of over the originals",
    )
    parser.add_argument(
        "--timeout",
        type=int,
        default=DEFAULT_CELL_TIMEOUT,
        help=f"seconds a cell may run (default {DEFAULT_CELL_TIMEOUT})",
    )
    args = parser.parse_args(argv)
    import nbformat

    paths = _notebook_paths(args.notebooks)
    if args.output_dir is not None:
        args.output_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        write_kernelspec(root)
        matplotlibrc = root / "matplotlibrc"
        matplotlibrc.write_text(f"figure.dpi: {FIGURE_DPI}\n", encoding="utf-8")
        # The kernel manager of this process looks the kernelspec up.
        os.environ["JUPYTER_PATH"] = os.pathsep.join(
            filter(None, [directory, os.environ.get("JUPYTER_PATH")])
        )
        env = kernel_environment(matplotlibrc)
        for path in paths:
            start, start_cpu = time.perf_counter(), _children_cpu_seconds()
            notebook = execute(path, env, args.timeout)
            target = path if args.output_dir is None else args.output_dir / path.name
            nbformat.write(notebook, target)
            print(
                f"{path.name}: {time.perf_counter() - start:.0f} s "
                f"({_children_cpu_seconds() - start_cpu:.0f} s of CPU) -> {target}",
                flush=True,
            )


if __name__ == "__main__":
    main()
