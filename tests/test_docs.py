"""The API reference's set-up (docs/, scripts/docs.sh, CI), checked without running Sphinx:
CI builds the reference with warnings as errors."""

import importlib
import re
import runpy
import sys
from pathlib import Path

import pytest

import botorch_nn_uq

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


@pytest.fixture(scope="module")
def conf() -> dict:
    r"""docs/conf.py's namespace (it imports the package, not Sphinx)."""
    path = list(sys.path)
    try:
        return runpy.run_path(str(DOCS / "conf.py"))
    finally:
        sys.path[:] = path


def _extras(script: str) -> set[str]:
    (extras,) = re.findall(r"setup_env\.sh\"? (\S+)", (ROOT / script).read_text())
    return set(extras.split(","))


def test_version_is_the_package_version(conf) -> None:
    assert conf["release"] == conf["version"] == botorch_nn_uq.__version__


def test_api_page_generates_a_page_for_every_module_of_the_package() -> None:
    text = (DOCS / "api.rst").read_text()
    directive = re.search(r"\.\. autosummary::\n((?:   .*\n|\n)+)", text)
    assert directive is not None
    assert ":recursive:" in directive.group(1)
    assert "botorch_nn_uq" in directive.group(1).split()


def test_package_index_description_stays_out_of_the_build(conf) -> None:
    assert (DOCS / "pypi.md").exists()
    assert "pypi.md" in conf["exclude_patterns"]


def test_references_to_re_exports_link_to_the_defining_module(conf) -> None:
    obj, owner, name = conf["_import_path"]("botorch_nn_uq.models.DeepEnsemble")
    assert conf["_canonical_name"](obj, owner, name) == "botorch_nn_uq.models.ensemble.DeepEnsemble"
    assert conf["_import_path"]("botorch_nn_uq.models.NoSuchModel") is None


def test_ci_builds_the_docs_with_the_set_up_it_already_has() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert "bash scripts/docs.sh" in ci
    # A set-up that covers a script's extras makes the script skip its own.
    assert _extras("scripts/docs.sh") <= _extras(".ci/run")
    assert _extras("scripts/test.sh") <= _extras(".ci/run")
    assert "docs" in _extras("scripts/docs.sh")


def test_importing_the_main_module_does_not_run_the_command_line(monkeypatch) -> None:
    r"""Autosummary imports every module, ``botorch_nn_uq.__main__`` included."""
    monkeypatch.setattr(sys, "argv", ["sphinx-build", "-b", "html"])
    monkeypatch.delitem(sys.modules, "botorch_nn_uq.__main__", raising=False)
    importlib.import_module("botorch_nn_uq.__main__")
