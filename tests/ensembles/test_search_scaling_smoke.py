"""Smoke run of the search-scaling benchmark (benchmarks/search_scaling.py)."""

from pathlib import Path

import pytest

from tests.benchmark_scripts import load_benchmark

UCI = Path(__file__).resolve().parents[3] / "shared" / "data" / "uci"


@pytest.mark.slow
def test_smoke_run_compares_in_process_and_ray(tmp_path) -> None:
    pytest.importorskip("ray", reason="Ray is an optional extra: pip install botorch-nn-uq[ray]")
    if not (UCI / "yacht").is_dir():
        pytest.skip(f"UCI data not found at {UCI}; it is not shipped with the package")
    module = load_benchmark("search_scaling")
    out = tmp_path / "scaling.md"
    table = module.main(
        ["--smoke", "--data-dir", str(UCI), "--dataset", "yacht", "--out", str(out)]
    )
    assert out.read_text() == table
    row = next(line for line in table.splitlines() if line.startswith("| nes-rs"))
    assert row.rstrip().endswith("| yes |")
