"""The built wheel: licence, typing marker, every module, and the metadata the package
index shows (version, bounded requirements, a description without relative links)."""

import importlib.metadata
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import zipfile
from email.message import Message
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.requirements import Requirement

import botorch_nn_uq

ROOT = Path(__file__).resolve().parents[1]
#: What the build reads: the wheel is built from a copy of these, so the checkout gets no
#: build/ or egg-info directories.
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "docs", "botorch_nn_uq")
#: The libraries whose tested releases bound the requirements.
TESTED = ("torch", "botorch", "gpytorch")

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    try:
        import tomli as tomllib
    except ModuleNotFoundError:
        tomllib = None


def _skip_unless_offline_build_possible() -> None:
    r"""The build runs without isolation (offline), with the backend installed here."""
    if importlib.util.find_spec("pip") is None:
        pytest.skip("pip is not installed, so the wheel cannot be built")
    if tomllib is None:
        pytest.skip("reading the build requirements needs tomllib (Python 3.11+) or tomli")
    build_system = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]
    for requirement in map(Requirement, build_system["requires"]):
        try:
            installed = importlib.metadata.version(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            pytest.skip(f"the build backend needs {requirement}, which is not installed")
        if not requirement.specifier.contains(installed, prereleases=True):
            pytest.skip(f"the build backend needs {requirement}; {installed} is installed")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    _skip_unless_offline_build_possible()
    source = tmp_path_factory.mktemp("source")
    # docs/_build and docs/_autosummary: the API reference's output (scripts/docs.sh).
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "_build", "_autosummary")
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=ignore)
        else:
            shutil.copy2(path, source / name)
    out = tmp_path_factory.mktemp("wheel")
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    command += ["--no-index", "--quiet", "--wheel-dir", str(out), str(source)]
    build = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stdout + build.stderr
    (path,) = out.glob("botorch_nn_uq-*.whl")
    with zipfile.ZipFile(path) as archive:
        yield archive


def dist_info_file(wheel: zipfile.ZipFile, name: str) -> str:
    (path,) = [path for path in wheel.namelist() if re.fullmatch(rf"[^/]+\.dist-info/{name}", path)]
    return wheel.read(path).decode("utf-8")


@pytest.fixture(scope="module")
def metadata(wheel: zipfile.ZipFile) -> Message:
    return Parser().parsestr(dist_info_file(wheel, "METADATA"))


def test_wheel_carries_the_licence_and_the_typing_marker(wheel, metadata) -> None:
    assert dist_info_file(wheel, "licenses/LICENSE") == (ROOT / "LICENSE").read_text()
    assert metadata["License-Expression"] == "MIT"
    assert wheel.read("botorch_nn_uq/py.typed") == b""
    assert "Typing :: Typed" in metadata.get_all("Classifier")


def test_wheel_carries_every_module_and_the_command(wheel) -> None:
    package = ROOT / "botorch_nn_uq"
    modules = {
        path.relative_to(ROOT).as_posix()
        for path in package.rglob("*.py")
        if "__pycache__" not in path.parts
    }
    assert modules <= set(wheel.namelist())
    assert "botorch-nn-uq = botorch_nn_uq.cli:main" in dist_info_file(wheel, "entry_points.txt")


def test_package_discovery_installs_the_library_alone() -> None:
    r"""The repository's other packages (``benchmarks``, ``tests``) stay out of the wheel:
    the package discovery of pyproject.toml finds ``botorch_nn_uq`` and its subpackages
    only. Setuptools runs in a process of its own: importing it here after the standard
    library's distutils fails."""
    if tomllib is None:
        pytest.skip("reading pyproject.toml needs tomllib (Python 3.11+) or tomli")
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    find = find["packages"]["find"]
    finder = "find_namespace_packages" if find.get("namespaces", True) else "find_packages"
    script = (
        f"import json, sys; from setuptools import {finder} as find; "
        "where, include, exclude = json.loads(sys.argv[1]); "
        "print(json.dumps([n for w in where for n in find(w, include=include, exclude=exclude)]))"
    )
    config = [find.get("where", ["."]), find.get("include", ["*"]), find.get("exclude", [])]
    command = [sys.executable, "-W", "ignore", "-c", script, json.dumps(config)]
    found = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert found.returncode == 0, found.stderr
    packages = json.loads(found.stdout)
    assert (ROOT / "benchmarks" / "__init__.py").exists() and (
        ROOT / "tests" / "__init__.py"
    ).exists()
    assert "botorch_nn_uq" in packages
    assert {name.split(".")[0] for name in packages} == {"botorch_nn_uq"}, packages


def test_version_is_the_package_version(metadata) -> None:
    assert metadata["Version"] == botorch_nn_uq.__version__


@pytest.mark.parametrize("name", TESTED)
def test_tested_libraries_are_bounded_to_a_range_holding_the_installed_release(
    metadata, name
) -> None:
    requirements = [Requirement(line) for line in metadata.get_all("Requires-Dist")]
    (requirement,) = [r for r in requirements if r.name == name and r.marker is None]
    operators = {specifier.operator for specifier in requirement.specifier}
    assert {">=", "<"} <= operators, f"{requirement} needs a lower and an upper bound"
    installed = importlib.metadata.version(name)
    assert requirement.specifier.contains(installed, prereleases=True), (
        f"the installed {name} {installed} is outside {requirement}"
    )


def test_package_index_description_has_no_relative_links(metadata) -> None:
    assert metadata["Description-Content-Type"].startswith("text/markdown")
    description = metadata.get_payload()
    targets = re.findall(r"\]\(([^)\s]+)", description)
    targets += re.findall(r"""(?:href|src)=["']([^"']+)""", description)
    relative = [target for target in targets if not target.startswith("https://")]
    assert not relative, f"links that break on the package index: {relative}"


def test_package_index_quick_start_is_the_readme_quick_start(metadata) -> None:
    r"""The README's quick start is executed by tests/test_readme.py; the copy in
    docs/pypi.md (the package index description) must stay identical to it."""

    def quick_start(text: str) -> str:
        blocks = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
        return next(block for block in blocks if "optimize_acqf" in block)

    readme = quick_start((ROOT / "README.md").read_text())
    assert quick_start(metadata.get_payload()) == readme, (
        "copy the README's quick start into docs/pypi.md"
    )
