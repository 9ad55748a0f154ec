"""The package's layering: each part imports only from the parts below it.

The layers are those of the README's "Architecture" section: data flows from the
building blocks (networks, training, posteriors) to the models that serve predictions, and
from there to the BO loop and the command line. An import against the direction of the
layers (a network importing a model, an acquisition importing a concrete model, a
problem importing the training loop) fails here with the offending module named.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGE_ROOT = REPO_ROOT / "botorch_nn_uq"

#: The package's parts (subpackages and top-level modules), lowest layer first; a part
#: may import from its own layer's part and from any lower layer, never from a higher one.
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"checks", "compat", "nn", "features"}),
    frozenset({"problems", "training", "posteriors", "acquisition", "calibration"}),
    frozenset({"ensembles", "generation", "metrics"}),
    frozenset({"models"}),
    frozenset({"fit", "integrations"}),
    frozenset({"bo"}),
    frozenset({"cli"}),
    frozenset({"__main__", "__init__"}),
)
#: Parts that stay free of BoTorch and GPyTorch (plain torch), so they can be reused
#: and tested without either.
TORCH_ONLY = ("nn", "training")
#: Acquisition functions work on BoTorch's Model/Posterior interfaces, never on a
#: concrete model of this package; problems depend on nothing but BoTorch.
FORBIDDEN = {"acquisition": {"models", "posteriors"}, "problems": {"models", "training"}}


def _part(path: Path) -> str:
    return path.relative_to(PACKAGE_ROOT).parts[0].removesuffix(".py")


def _imports(path: Path) -> list[tuple[int, str]]:
    r"""``(line, module)`` of every absolute import in ``path`` (also inside functions
    and ``TYPE_CHECKING`` blocks)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
    return found


SOURCES = sorted(PACKAGE_ROOT.rglob("*.py"))
LAYER_OF = {part: index for index, layer in enumerate(LAYERS) for part in layer}


def test_every_part_has_a_layer() -> None:
    parts = {_part(path) for path in SOURCES}
    assert parts - LAYER_OF.keys() == set(), (
        f"Parts without a layer: {sorted(parts - LAYER_OF.keys())}; add them to LAYERS and "
        "to the README's Architecture section."
    )


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE_ROOT)))
def test_imports_follow_the_layers(path: Path) -> None:
    part = _part(path)
    upward = []
    for line, module in _imports(path):
        names = module.split(".")
        if names[0] in ("botorch", "gpytorch") and part in TORCH_ONLY:
            upward.append(f"line {line}: {module} ({part} stays free of BoTorch/GPyTorch)")
        if names[0] != "botorch_nn_uq" or len(names) < 2:
            continue
        target = names[1]
        if target in FORBIDDEN.get(part, ()):
            upward.append(f"line {line}: {module} ({part} must not import {target})")
        elif target != part and LAYER_OF[target] >= LAYER_OF[part]:
            upward.append(f"line {line}: {module} ({target} is not below {part})")
    assert not upward, f"{path.relative_to(REPO_ROOT)} imports against the layers: {upward}"


def test_readme_architecture_section_names_every_part() -> None:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"^## Architecture\n(.*?)^## ", readme, flags=re.MULTILINE | re.DOTALL)
    assert match, "README.md has no '## Architecture' section."
    section = match.group(1)
    missing = [
        part
        for part in LAYER_OF
        if part != "__init__"
        and f"{part}/" not in section
        and not re.search(rf"\b{re.escape(part)}\.py\b", section)
    ]
    assert not missing, f"README's Architecture section does not name {missing}."
