"""Execute every tutorial notebook (in smoke mode), check that they are saved clean and that
the index, ``tutorials/README.md``, lists exactly them.

Each ``tutorials/*.ipynb`` is run top to bottom with nbclient, with
``BOTORCH_NN_UQ_SMOKE=1`` (tiny budgets), ``MPLBACKEND=Agg`` and (unless set)
``OMP_NUM_THREADS=1`` in the kernel's environment; a cell that raises fails the
test with that cell's error. The kernel is the interpreter running pytest: a
``python3`` kernelspec pointing at ``sys.executable`` is written to a temporary
directory that ``JUPYTER_PATH`` puts ahead of any other kernelspec (user or
system), so nothing outside this environment is used.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
TUTORIALS_DIR = REPO_ROOT / "tutorials"
NOTEBOOKS = sorted(TUTORIALS_DIR.glob("*.ipynb"))
NOTEBOOK_IDS = [path.name for path in NOTEBOOKS]

#: Per-cell timeout (seconds) when executing a notebook.
CELL_TIMEOUT = 600
KERNEL_NAME = "python3"


def test_tutorials_are_found() -> None:
    assert NOTEBOOKS, f"No tutorial notebooks found in {TUTORIALS_DIR}."


def test_index_lists_exactly_the_notebooks() -> None:
    r"""``tutorials/README.md`` links every notebook in ``tutorials/`` once, in its
    numbered list, and names no notebook that does not exist."""
    index = (TUTORIALS_DIR / "README.md").read_text(encoding="utf-8")
    named = set(re.findall(r"[\w.-]+\.ipynb", index))
    existing = set(NOTEBOOK_IDS)
    assert not named - existing, f"tutorials/README.md names missing notebooks: {named - existing}"
    listed = re.findall(r"^\d+\. \[`([^`]+)`\]\(([^)]+)\)", index, flags=re.MULTILINE)
    mislinked = [(text, target) for text, target in listed if text != target]
    assert not mislinked, f"tutorials/README.md links a name to another file: {mislinked}"
    linked = [target for _, target in listed]
    assert not existing - set(linked), (
        f"tutorials/README.md does not list {sorted(existing - set(linked))}: add a line for each."
    )
    assert len(linked) == len(set(linked)), f"tutorials/README.md lists a notebook twice: {linked}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_notebook_is_saved_without_outputs(path: Path) -> None:
    notebook = json.loads(path.read_text(encoding="utf-8"))
    dirty = [
        index
        for index, cell in enumerate(notebook["cells"])
        if cell["cell_type"] == "code" and (cell.get("outputs") or cell.get("execution_count"))
    ]
    assert not dirty, (
        f"{path.name}: code cells {dirty} have outputs or execution counts; clear all "
        "outputs before saving."
    )


@pytest.fixture(scope="session")
def kernel_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    r"""A directory holding a ``python3`` kernelspec that runs ``sys.executable``; to be
    put first on ``JUPYTER_PATH``."""
    pytest.importorskip("ipykernel", reason="executing tutorials needs ipykernel")
    root = tmp_path_factory.mktemp("jupyter")
    spec_dir = root / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (tutorial tests)",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")
    return str(root)


def _use_test_kernel(monkeypatch: pytest.MonkeyPatch, kernel_path: str) -> None:
    r"""Set the environment that the kernel inherits."""
    monkeypatch.setenv(
        "JUPYTER_PATH", os.pathsep.join(filter(None, [kernel_path, os.environ.get("JUPYTER_PATH")]))
    )
    monkeypatch.setenv("BOTORCH_NN_UQ_SMOKE", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    # The smoke-mode workloads are tiny; one intra-op thread avoids thread contention
    # (which slows them down many times on a busy machine) unless the caller chose.
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))
    # Import the package from this checkout even if it is not installed in editable mode.
    monkeypatch.setenv(
        "PYTHONPATH",
        os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
    )


def _execute(notebook, monkeypatch: pytest.MonkeyPatch, kernel_path: str):
    nbclient = pytest.importorskip("nbclient", reason="executing tutorials needs nbclient")
    _use_test_kernel(monkeypatch, kernel_path)
    client = nbclient.NotebookClient(
        notebook,
        timeout=CELL_TIMEOUT,
        kernel_name=KERNEL_NAME,
        resources={"metadata": {"path": str(TUTORIALS_DIR)}},
    )
    return client.execute()


def test_kernel_runs_this_interpreter(monkeypatch: pytest.MonkeyPatch, kernel_path: str) -> None:
    nbformat = pytest.importorskip("nbformat", reason="executing tutorials needs nbformat")
    code = "import os, sys\nprint(repr((sys.executable, sys.prefix, os.environ['MPLBACKEND'])))"
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    executed = _execute(notebook, monkeypatch, kernel_path)
    reported = executed.cells[0].outputs[0]["text"].strip()
    assert reported == repr((sys.executable, sys.prefix, "Agg"))


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_tutorial_runs(path: Path, monkeypatch: pytest.MonkeyPatch, kernel_path: str) -> None:
    nbformat = pytest.importorskip("nbformat", reason="executing tutorials needs nbformat")
    notebook = nbformat.read(path, as_version=4)
    _execute(notebook, monkeypatch, kernel_path)
