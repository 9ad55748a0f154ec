"""Smoke run of the ensemble training-cost benchmark (benchmarks/ensemble_training_cost.py)."""

import importlib.util
import sys
from pathlib import Path

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "ensemble_training_cost.py"


def test_smoke_run_writes_the_ratio_table(tmp_path) -> None:
    spec = importlib.util.spec_from_file_location("ensemble_training_cost", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    out = tmp_path / "cost.md"
    table = module.main(["--smoke", "--out", str(out)])
    assert out.read_text() == table
    rows = [line for line in table.splitlines() if line.startswith("| BO") or "UCI" in line]
    assert len(rows) == 2
    ratios = [float(cell) for cell in rows[0].strip("|").split("|")[-2:]]
    assert all(ratio > 0 for ratio in ratios)
