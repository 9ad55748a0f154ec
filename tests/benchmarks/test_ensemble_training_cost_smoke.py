"""Smoke run of the ensemble training-cost benchmark (benchmarks/ensemble_training_cost.py)."""

from benchmarks import ensemble_training_cost


def test_smoke_run_writes_the_ratio_table(tmp_path) -> None:
    out = tmp_path / "cost.md"
    table = ensemble_training_cost.main(["--smoke", "--out", str(out)])
    assert out.read_text() == table
    rows = [line for line in table.splitlines() if line.startswith("| BO") or "UCI" in line]
    assert len(rows) == 2
    ratios = [float(cell) for cell in rows[0].strip("|").split("|")[-2:]]
    assert all(ratio > 0 for ratio in ratios)
