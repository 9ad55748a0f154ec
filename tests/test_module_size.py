"""No module of the package grows past the size at which it stops holding one concept.

The limit is BoTorch's 90th percentile of module size: nine in ten of BoTorch's modules
are at most this long, so a module of this package that is longer most likely holds more
than one concept and should be split into modules of one concept each.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[1] / "botorch_nn_uq"

#: The most lines a module of the package may have: BoTorch's 90th percentile of module
#: size.
MAX_MODULE_LINES = 815


def _line_count(path: Path) -> int:
    r"""The number of lines of the file at ``path``, as ``wc -l`` counts them."""
    with path.open("rb") as file:
        return sum(1 for _ in file)


def test_no_module_exceeds_the_size_limit() -> None:
    too_long = {
        str(path.relative_to(PACKAGE_ROOT.parent)): lines
        for path in sorted(PACKAGE_ROOT.rglob("*.py"))
        if (lines := _line_count(path)) > MAX_MODULE_LINES
    }
    assert not too_long, (
        f"Modules longer than {MAX_MODULE_LINES} lines (BoTorch's 90th percentile of module "
        f"size): {', '.join(f'{path} ({lines} lines)' for path, lines in too_long.items())}. "
        "Split each by concept into modules of one concept each."
    )
