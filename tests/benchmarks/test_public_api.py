"""The benchmarks use the library through its public API only.

A part of ``botorch_nn_uq`` (the package itself, a subpackage, a top-level module) states
its public API in its ``__all__``. A benchmark may import a name from a part that has an
``__all__`` listing it (``from botorch_nn_uq.bo import run_bo``), and nothing else: no
module inside a subpackage (``botorch_nn_uq.bo.loop``), no part without an ``__all__``
(``botorch_nn_uq.checks``, ``botorch_nn_uq.compat``), no private name. The same holds for
attributes reached from an imported part (``botorch_nn_uq.models.NEON``). Every import is
read from the source (``ast``), including those inside functions.

What a benchmark needs and the library does not offer its users belongs in
``benchmarks/`` (``common.py``, ``uci.py``); what users would use as well is exported from
its part.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from types import ModuleType

import pytest

import botorch_nn_uq

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
PACKAGE = "botorch_nn_uq"

#: Non-public imports that wait for a change outside ``benchmarks/``, each with its reason.
#: The test fails once one of them is no longer made, so the list only shrinks.
PENDING: dict[tuple[str, str, str], str] = {}


def public_parts() -> dict[str, ModuleType]:
    r"""``{dotted name: module}`` of the parts with a public API: the package, and its
    subpackages and top-level modules that declare an ``__all__``."""
    parts = {PACKAGE: botorch_nn_uq}
    root = Path(botorch_nn_uq.__file__).parent
    for path in sorted(root.iterdir()):
        name = path.stem if path.suffix == ".py" else path.name
        if name.startswith("_") or not (path.suffix == ".py" or (path / "__init__.py").exists()):
            continue
        module = importlib.import_module(f"{PACKAGE}.{name}")
        if hasattr(module, "__all__"):
            parts[module.__name__] = module
    return parts


PUBLIC = public_parts()


def _public(module: str, name: str) -> bool:
    part = PUBLIC.get(module)
    return part is not None and not name.startswith("_") and name in part.__all__


def _bindings(tree: ast.Module) -> dict[str, str]:
    r"""``{local name: module}`` for every name an import binds to a module of the
    library (``import botorch_nn_uq.bo`` binds ``botorch_nn_uq``; ``from botorch_nn_uq
    import models`` binds ``models``)."""
    bound = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == PACKAGE:
                    bound[alias.asname or PACKAGE] = alias.name if alias.asname else PACKAGE
        elif isinstance(node, ast.ImportFrom) and node.module == PACKAGE and node.level == 0:
            for alias in node.names:
                if isinstance(getattr(botorch_nn_uq, alias.name, None), ModuleType):
                    bound[alias.asname or alias.name] = f"{PACKAGE}.{alias.name}"
    return bound


def _attribute_chain(node: ast.Attribute) -> tuple[str, list[str]] | None:
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    return (node.id, names[::-1]) if isinstance(node, ast.Name) else None


def library_uses(path: Path) -> list[tuple[int, str, str]]:
    r"""``(line, module, name)`` for every name ``path`` takes from the library: the
    names of ``from ... import`` statements, modules of ``import`` statements (as
    ``(line, parent, child)``) and attributes reached from an imported library module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    uses = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] == PACKAGE:
                uses.extend((node.lineno, node.module, alias.name) for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == PACKAGE and len(parts) > 1:
                    uses.append((node.lineno, ".".join(parts[:-1]), parts[-1]))
    bound = _bindings(tree)
    for node in ast.walk(tree):
        chain = _attribute_chain(node) if isinstance(node, ast.Attribute) else None
        if chain is None or chain[0] not in bound:
            continue
        module = bound[chain[0]]
        for name in chain[1]:
            uses.append((node.lineno, module, name))
            if f"{module}.{name}" not in PUBLIC:
                break
            module = f"{module}.{name}"
    return sorted(set(uses))


SOURCES = sorted(BENCHMARKS.glob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=lambda path: path.name)
def test_benchmarks_import_only_the_public_api(path: Path) -> None:
    private = [
        f"line {line}: {name} from {module}"
        for line, module, name in library_uses(path)
        if not _public(module, name) and (path.name, module, name) not in PENDING
    ]
    assert not private, (
        f"benchmarks/{path.name} uses names outside the library's public API (the __all__ of "
        f"a part of {PACKAGE}, imported from that part): {private}. Import the name from the "
        "part that exports it, export it if users would use it too, or give the benchmarks "
        "their own (benchmarks/common.py)."
    )


@pytest.mark.parametrize("path", SOURCES, ids=lambda path: path.name)
def test_benchmarks_import_each_other_through_the_package(path: Path) -> None:
    r"""``from benchmarks.common import ...``, never ``from common import ...``, which
    only works with ``benchmarks/`` itself on ``sys.path``."""
    modules = {source.stem for source in SOURCES}
    bare = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        bare += [f"line {node.lineno}: {name}" for name in names if name.split(".")[0] in modules]
    assert not bare, f"benchmarks/{path.name} imports its peers as top-level modules: {bare}"


def test_pending_exceptions_are_still_needed() -> None:
    for (file, module, name), reason in PENDING.items():
        uses = {(m, n) for _, m, n in library_uses(BENCHMARKS / file)}
        assert (module, name) in uses and not _public(module, name), (
            f"benchmarks/{file} no longer needs {name} from {module} ({reason}); remove it "
            "from PENDING."
        )


def test_the_check_sees_every_kind_of_non_public_use(tmp_path: Path) -> None:
    source = tmp_path / "runner.py"
    source.write_text(
        "import botorch_nn_uq\n"
        "import botorch_nn_uq.bo.loop\n"
        "from botorch_nn_uq import models\n"
        "from botorch_nn_uq.bo import run_bo, _private\n"
        "from botorch_nn_uq.bo.loop import initial_design\n"
        "from botorch_nn_uq.checks import is_integer\n"
        "def main():\n"
        "    from botorch_nn_uq.models.nomu import NOMU\n"
        "    return botorch_nn_uq.bo.loop.initial_design, models.NEON, models.nomu\n"
    )
    private = sorted(
        {(module, name) for _, module, name in library_uses(source) if not _public(module, name)}
    )
    assert private == [
        ("botorch_nn_uq.bo", "_private"),
        ("botorch_nn_uq.bo", "loop"),
        ("botorch_nn_uq.bo.loop", "initial_design"),
        ("botorch_nn_uq.checks", "is_integer"),
        ("botorch_nn_uq.models", "nomu"),
        ("botorch_nn_uq.models.nomu", "NOMU"),
    ]
    assert _public("botorch_nn_uq.bo", "run_bo") and _public("botorch_nn_uq.models", "NEON")
