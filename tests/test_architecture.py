"""The package's layering: each part imports only from the parts below it.

The layers are those of the "Architecture" section of ``CONTRIBUTING.md``: data flows from the
building blocks (networks, training, posteriors) to the models that serve predictions, and
from there to the BO loop and the command line. An import against the direction of the
layers (a network importing a model, an acquisition importing a concrete model, a
problem importing the training loop) fails here with the offending module named.

That section is checked against the code, so it cannot drift: its tree lists the
parts layer by layer (a blank line between two layers), and those layers must be
``LAYERS``; every file and folder it names must exist; and every name it gives a part
(a CamelCase or snake_case identifier, an acronym such as ``RMSE``) must occur in that
part's source. The section stays prose and a tree; the test reads the tree's two columns.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGE_ROOT = REPO_ROOT / "botorch_nn_uq"

#: The package's parts (subpackages and top-level modules), lowest layer first; a part
#: may import from its own layer's part and from any lower layer, never from a higher one.
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"checks", "compat", "nn"}),
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
        "to the Architecture section of CONTRIBUTING.md."
    )
    assert LAYER_OF.keys() - parts == set(), (
        f"LAYERS names parts the package no longer has: {sorted(LAYER_OF.keys() - parts)}; "
        "remove them there and from the Architecture section of CONTRIBUTING.md."
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


@dataclass(frozen=True)
class TreeEntry:
    r"""One entry of the architecture tree: the files and folders of its left column
    (``("checks.py", "compat.py")``) and the text to their right, continuation lines
    included."""

    paths: tuple[str, ...]
    description: str

    @property
    def parts(self) -> list[str]:
        return [path.removesuffix("/").removesuffix(".py") for path in self.paths]


def _architecture_section() -> str:
    guide = (REPO_ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    match = re.search(r"^## Architecture\n(.*?)^## ", guide, flags=re.MULTILINE | re.DOTALL)
    assert match, "CONTRIBUTING.md has no '## Architecture' section."
    return match.group(1)


def _tree_layers(section: str) -> list[list[TreeEntry]]:
    r"""The layers of the section's tree (its first code block, under
    ``botorch_nn_uq/``): entries start two spaces in, continuation lines further in,
    and a blank line ends a layer."""
    match = re.search(r"^```\n(.*?)^```", section, flags=re.MULTILINE | re.DOTALL)
    assert match, "The Architecture section has no tree (a ``` block)."
    lines = match.group(1).splitlines()
    assert lines[0] == "botorch_nn_uq/", "The tree starts with `botorch_nn_uq/`."
    layers: list[list[list]] = [[]]
    for line in lines[1:]:
        if not line.strip():
            if layers[-1]:
                layers.append([])
        elif re.match(r"  \S", line):
            left, _, right = line[2:].partition("  ")
            layers[-1].append([tuple(left.split(", ")), right.strip()])
        else:
            assert layers[-1], f"A continuation line without an entry: {line!r}"
            layers[-1][-1][1] += " " + line.strip()
    return [[TreeEntry(*entry) for entry in layer] for layer in layers if layer]


def _part_source(part: str) -> str:
    folder = PACKAGE_ROOT / part
    paths = sorted(folder.rglob("*.py")) if folder.is_dir() else [PACKAGE_ROOT / f"{part}.py"]
    return "\n".join(path.read_text(encoding="utf-8") for path in paths)


SECTION = _architecture_section()
TREE = _tree_layers(SECTION)
ENTRIES = [entry for layer in TREE for entry in layer]


def test_readme_architecture_tree_states_the_layers() -> None:
    stated = [sorted(part for entry in layer for part in entry.parts) for layer in TREE]
    assert stated == [sorted(layer) for layer in LAYERS], (
        "The layers of CONTRIBUTING.md's Architecture tree (blank lines between them) are not "
        f"LAYERS: the tree states {stated}."
    )


def test_readme_architecture_names_every_part() -> None:
    named = [part for entry in ENTRIES for part in entry.parts]
    assert len(named) == len(set(named)), f"The tree names a part twice: {named}"
    missing = LAYER_OF.keys() - set(named)
    assert not missing, f"CONTRIBUTING.md's Architecture section does not name {sorted(missing)}."


def test_readme_architecture_paths_exist() -> None:
    r"""Every file and folder the section names: the tree's left column (in the
    package), the ``.py`` files of a description (in the entry's folder, or in the
    package) and the paths in backticks of the prose (in the repository or the package)."""
    missing = []
    for entry in ENTRIES:
        for path in entry.paths:
            exists = (PACKAGE_ROOT / path).is_dir() if path.endswith("/") else None
            if exists is None:
                exists = path.endswith(".py") and (PACKAGE_ROOT / path).is_file()
            if not exists:
                missing.append(path)
        folders = [PACKAGE_ROOT / path for path in entry.paths if path.endswith("/")]
        for path in re.findall(r"(?<![\w/.])((?:\w+/)*\w+\.py)\b", entry.description):
            if not any((folder / path).is_file() for folder in [*folders, PACKAGE_ROOT]):
                missing.append(f"{path} (in the entry of {', '.join(entry.paths)})")
    prose = re.sub(r"^```\n.*?^```", "", SECTION, flags=re.MULTILINE | re.DOTALL)
    for path in re.findall(r"`([\w./-]+(?:\.py|/))`", prose):
        if not any((root / path).exists() for root in (REPO_ROOT, PACKAGE_ROOT)):
            missing.append(path)
    assert not missing, f"The Architecture section names paths that do not exist: {missing}"


#: What the check of names reads as a name: a CamelCase or snake_case identifier, or an
#: acronym of three or more capitals (``PosteriorList``, ``fit_model``, ``RMSE``).
NAME = re.compile(r"\b(?:[A-Za-z]*[a-z][A-Z]\w*|[A-Za-z]\w*_\w+|[A-Z][A-Z0-9]{2,})\b")


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda entry: ", ".join(entry.paths))
def test_readme_architecture_names_occur_in_their_parts(entry: TreeEntry) -> None:
    r"""What the tree says a part holds is there: every name in an entry's description
    occurs in the source of its parts (a "CRPS" in the metrics' entry, with no CRPS in
    ``metrics.py``, fails)."""
    source = "\n".join(_part_source(part) for part in entry.parts)
    # "(no BoTorch)" claims an absence, which the import checks above hold.
    claims = re.sub(r"\(no [^)]*\)", "", entry.description)
    absent = [name for name in NAME.findall(claims) if not re.search(rf"\b{name}\b", source)]
    assert not absent, (
        f"The Architecture section says {', '.join(entry.paths)} holds {absent}, which "
        "its source does not name."
    )
