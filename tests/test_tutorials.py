"""The tutorial notebooks: saved executed and current, runnable, and listed in the index.

The notebooks are stored with the outputs of a full run of
``scripts/execute_tutorials.py``. The tests here check the stored outputs (every code
cell executed once, in order, without errors, plots saved, and the stamp's hash of the
code equal to the hash of the code stored next to them, so a notebook whose code changed
since its outputs were made fails) and that ``tutorials/README.md`` lists exactly the
notebooks.

Each ``tutorials/*.ipynb`` is also run top to bottom with nbclient, in memory (the stored
notebook is not written), with ``BOTORCH_NN_UQ_SMOKE=1`` (tiny budgets), ``MPLBACKEND=Agg``
and (unless set) ``OMP_NUM_THREADS=1`` in the kernel's environment; a cell that raises
fails the test with that cell's error. The kernel is the interpreter running pytest: the
script's ``python3`` kernelspec pointing at ``sys.executable`` is written to a temporary
directory that ``JUPYTER_PATH`` puts ahead of any other kernelspec (user or system), so
nothing outside this environment is used.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
TUTORIALS_DIR = REPO_ROOT / "tutorials"
NOTEBOOKS = sorted(TUTORIALS_DIR.glob("*.ipynb"))
NOTEBOOK_IDS = [path.name for path in NOTEBOOKS]

#: Per-cell timeout (seconds) when executing a notebook in smoke mode.
CELL_TIMEOUT = 600


def _load_execute_script() -> ModuleType:
    r"""Import ``scripts/execute_tutorials.py``, which holds the stamp's hash and the
    kernelspec (a script, not a package module)."""
    spec = importlib.util.spec_from_file_location(
        "execute_tutorials", REPO_ROOT / "scripts" / "execute_tutorials.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


execute_tutorials = _load_execute_script()
RERUN_HINT = "run `python scripts/execute_tutorials.py {name}` and commit the result"
#: The first line of a warning as Python prints it: ``<file>.py:<line>: <category>: ...``.
PYTHON_WARNING = re.compile(r"\.py:\d+: \w*Warning: ")


def _read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def _code_cells(notebook: dict[str, Any]) -> list[dict[str, Any]]:
    return [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]


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


def test_the_code_hash_covers_the_code_cells_only() -> None:
    def notebook(*cells: tuple[str, str | list[str]]) -> dict[str, Any]:
        return {"cells": [{"cell_type": kind, "source": source} for kind, source in cells]}

    digest = execute_tutorials.code_sources_sha256
    reference = digest(notebook(("markdown", "# A"), ("code", "x = 1\nprint(x)")))
    # Sources as read from JSON (lists of lines) or by nbformat (strings) hash alike.
    assert reference == digest(notebook(("markdown", "# B"), ("code", ["x = 1\n", "print(x)"])))
    assert reference != digest(notebook(("code", "x = 2\nprint(x)")))
    assert reference != digest(notebook(("code", "x = 1"), ("code", "print(x)")))


def test_consecutive_streams_are_merged_in_order() -> None:
    def stream(name: str, text: str) -> dict[str, str]:
        return {"output_type": "stream", "name": name, "text": text}

    figure = {"output_type": "display_data", "data": {"text/plain": "<Figure>"}}
    outputs = [stream("stdout", "a\n"), stream("stdout", "b\n"), figure, stream("stdout", "c\n")]
    outputs += [stream("stderr", "d\n"), stream("stderr", "e\n")]
    assert execute_tutorials.merge_consecutive_streams(outputs) == [
        stream("stdout", "a\nb\n"),
        figure,
        stream("stdout", "c\n"),
        stream("stderr", "d\ne\n"),
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_stored_outputs_belong_to_the_stored_code(path: Path) -> None:
    r"""The stamp's hash of the code equals the hash of the code cells stored: editing a
    notebook's code without executing it again fails here."""
    notebook = _read(path)
    stamp = notebook["metadata"].get(execute_tutorials.STAMP_KEY)
    hint = RERUN_HINT.format(name=path.name)
    assert stamp is not None, f"{path.name} was not saved by the execute script: {hint}."
    assert stamp["source_sha256"] == execute_tutorials.code_sources_sha256(notebook), (
        f"{path.name}: its code changed since its outputs were made: {hint}."
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_every_code_cell_was_executed_once_in_order(path: Path) -> None:
    cells = _code_cells(_read(path))
    counts = [cell["execution_count"] for cell in cells]
    assert counts == list(range(1, len(cells) + 1)), (
        f"{path.name}: execution counts {counts} are not 1..{len(cells)} (a cell not run, run "
        f"twice or out of order): {RERUN_HINT.format(name=path.name)}."
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_stored_outputs_hold_no_errors(path: Path) -> None:
    failed = [
        cell["execution_count"]
        for cell in _code_cells(_read(path))
        if any(output["output_type"] == "error" for output in cell["outputs"])
    ]
    assert not failed, f"{path.name}: cells {failed} have error outputs."


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_stored_outputs_hold_no_python_warnings(path: Path) -> None:
    r"""A printed warning names a file on the machine that executed the notebook (and a
    kernel's temporary file changes every run): silence a warning the text explains in
    the notebook's first cell, or remove its cause."""
    warned = [
        cell["execution_count"]
        for cell in _code_cells(_read(path))
        for output in cell["outputs"]
        if output["output_type"] == "stream" and PYTHON_WARNING.search("".join(output["text"]))
    ]
    assert not warned, f"{path.name}: cells {warned} print Python warnings."


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_plots_are_stored(path: Path) -> None:
    r"""A cell that shows a figure carries a PNG, and a notebook that uses matplotlib at
    least one."""
    notebook = _read(path)
    cells = _code_cells(notebook)
    sources = execute_tutorials.code_sources(notebook)
    has_png = [
        any("image/png" in output.get("data", {}) for output in cell["outputs"]) for cell in cells
    ]
    missing = [
        cell["execution_count"]
        for cell, source, png in zip(cells, sources, has_png, strict=True)
        if "plt.show()" in source and not png
    ]
    assert not missing, f"{path.name}: cells {missing} show a figure but store no PNG."
    if any("matplotlib" in source for source in sources):
        assert any(has_png), f"{path.name} uses matplotlib but stores no PNG."


@pytest.fixture(scope="session")
def kernel_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    r"""A directory holding a ``python3`` kernelspec that runs ``sys.executable``; to be
    put first on ``JUPYTER_PATH``."""
    pytest.importorskip("ipykernel", reason="executing tutorials needs ipykernel")
    root = tmp_path_factory.mktemp("jupyter")
    execute_tutorials.write_kernelspec(root)
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
        kernel_name=execute_tutorials.KERNEL_NAME,
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
