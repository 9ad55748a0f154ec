"""Smoke run of the hyper-deep search precision benchmark
(benchmarks/hyper_deep_search_cost.py)."""

import pytest

from benchmarks import hyper_deep_search_cost
from tests.testing import allow_single_member_warning


@allow_single_member_warning
def test_smoke_run_writes_both_precisions_side_by_side(tmp_path) -> None:
    out = tmp_path / "cost.md"
    table = hyper_deep_search_cost.main(["--smoke", "--out", str(out)])
    assert out.read_text() == table
    (row,) = [line for line in table.splitlines() if line.startswith("| 12 ")]
    cells = [float(cell) for cell in row.strip("|").split("|")]
    assert len(cells) == 7 and all(value > 0 for value in cells[1:5])


def test_too_few_points_are_rejected(capsys) -> None:
    with pytest.raises(SystemExit):
        hyper_deep_search_cost.main(["--points", "4"])
    assert "--points must be at least 6" in capsys.readouterr().err
