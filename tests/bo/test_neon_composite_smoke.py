"""Smoke run of the protocol-3 benchmark runner (benchmarks/neon_composite.py)."""

import importlib.util
import sys
from pathlib import Path

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "neon_composite.py"


def test_smoke_run_writes_table_plots_and_resumes(tmp_path) -> None:
    spec = importlib.util.spec_from_file_location("neon_composite", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    text = module.main(["--smoke", "--out", str(tmp_path)]).read_text()
    for method in ("neon+q-leaky-ei", "gp+logei", "random"):
        assert f"| pollutants | {method} | 1 | 7 |" in text
    assert "| 27746 |" in text  # NEON's trainable parameters on the pollutants problem
    assert (tmp_path / "best_so_far_pollutants.png").stat().st_size > 1000
    rows = (tmp_path / "runs.csv").read_text().splitlines()
    assert len(rows) == 1 + 3 * 3  # header + 3 methods x (initial design + 2 iterations)
    assert len(list((tmp_path / "runs").glob("*.pt"))) == 3
    assert (
        module.main(["--smoke", "--out", str(tmp_path)]).read_text().split("\n\n")[2]
        == (text.split("\n\n")[2])
    )
