"""The documentation (docs/: the user guide and the API reference, scripts/docs.sh, CI),
checked without running Sphinx (CI builds it with warnings as errors): every guide page is
in the table of contents, its generated tables are current, and its examples run."""

import contextlib
import importlib
import io
import re
import runpy
import sys
from pathlib import Path

import pytest
import torch

import botorch_nn_uq
from botorch_nn_uq.bo.surrogates import PACKAGE_SURROGATES, RANDOM_SEARCH
from tests.guide_tables import MODELS_TABLE, render_models_table, replace_block

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
GUIDE = DOCS / "guide"


def _python_blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.DOTALL)


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


def test_every_guide_page_is_in_the_table_of_contents() -> None:
    index = (DOCS / "index.rst").read_text()
    listed = re.findall(r"^   (guide/[\w-]+)$", index, flags=re.MULTILINE)
    pages = sorted(f"guide/{page.stem}" for page in GUIDE.glob("*.md"))
    assert sorted(listed) == pages
    assert len(listed) == len(set(listed))


def test_the_guide_is_read_by_myst(conf) -> None:
    assert "myst_parser" in conf["extensions"]
    assert conf["source_suffix"][".md"] == "markdown"
    pyproject = (ROOT / "pyproject.toml").read_text()
    (docs_extra,) = re.findall(r"^docs = \[(.*)\]$", pyproject, flags=re.MULTILINE)
    assert "myst-parser" in docs_extra


def test_models_table_is_rendered_from_the_cards_and_lists_every_registered_model() -> None:
    text = (GUIDE / "models.md").read_text(encoding="utf-8")
    assert replace_block(text, MODELS_TABLE, render_models_table()) == text, (
        "The guide's models table is stale: run `python -m tests.guide_tables`."
    )
    table = text.split(MODELS_TABLE[0], 1)[1].split(MODELS_TABLE[1], 1)[0]
    first_cells = [row.split("|")[1] for row in table.strip().splitlines()[2:]]
    listed = {name for cell in first_cells for name in re.findall(r"`([^`]+)`", cell)}
    # Only the package's own registrations: benchmark runners register peers (VBLL) too.
    assert listed == {*PACKAGE_SURROGATES, RANDOM_SEARCH}


def test_the_ask_tell_page_shows_the_readme_example() -> None:
    r"""One example, executed by tests/test_readme.py, in both places."""
    readme = _python_blocks(ROOT / "README.md")
    (page_example,) = _python_blocks(GUIDE / "ask-tell.md")
    assert page_example in readme


def test_large_batch_example_runs_and_its_checkpoint_loads(tmp_path, monkeypatch) -> None:
    r"""The example of "Many points and big batches", then the saving and loading of
    "Models", which continues it."""
    (example,) = _python_blocks(GUIDE / "scale.md")
    (saving,) = [block for block in _python_blocks(GUIDE / "models.md") if "torch.save" in block]
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(example, str(GUIDE / "scale.md"), "exec"), namespace)
    proposals, bounds = namespace["X_next"], namespace["bounds"]
    assert proposals.shape == (100, 20)
    assert ((proposals >= bounds[0]) & (proposals <= bounds[1])).all()
    assert torch.cdist(proposals, proposals).fill_diagonal_(1.0).min() > 0
    assert namespace["warm"].training_result.steps_run == 100
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(saving, str(GUIDE / "models.md"), "exec"), namespace)
    X_test = torch.rand(5, 20, dtype=torch.float64)
    torch.testing.assert_close(
        namespace["fresh"].posterior(X_test).mean,
        namespace["model"].posterior(X_test).mean,
        rtol=0,
        atol=0,
    )


def test_the_tensor_valued_outputs_example_runs() -> None:
    (example,) = [
        block for block in _python_blocks(GUIDE / "models.md") if "FlattenedStandardize" in block
    ]
    namespace: dict = {}
    exec(compile(example, str(GUIDE / "models.md"), "exec"), namespace)
    candidates, bounds = namespace["candidates"], namespace["bounds"]
    assert candidates.shape == (3, 2)
    assert ((candidates >= bounds[0]) & (candidates <= bounds[1])).all()


def test_the_batch_cross_validation_example_runs() -> None:
    (example,) = [
        block for block in _python_blocks(GUIDE / "models.md") if "batch_cross_validation" in block
    ]
    namespace: dict = {}
    exec(compile(example, str(GUIDE / "models.md"), "exec"), namespace)
    results = namespace["results"]
    assert results.model.batch_shape == (16,)
    assert results.posterior.mean.shape == (16, 1, 1)
    assert namespace["cv_error"].isfinite()


def test_the_learnable_warp_example_runs() -> None:
    (example,) = [block for block in _python_blocks(GUIDE / "models.md") if "Warp(d=" in block]
    namespace: dict = {}
    exec(compile(example, str(GUIDE / "models.md"), "exec"), namespace)
    learned, warp = namespace["learned"], namespace["warp"]
    assert learned is namespace["model"].input_transform and not learned.training
    assert not torch.equal(learned.concentration0, warp.concentration0)
    assert torch.equal(warp.concentration0, torch.ones(2, dtype=torch.float64))
    assert namespace["acquisition"](torch.rand(3, 1, 2, dtype=torch.float64)).isfinite().all()
