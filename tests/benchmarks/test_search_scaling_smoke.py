"""Smoke run of the search-scaling benchmark (benchmarks/search_scaling.py)."""

import pytest

from benchmarks import search_scaling
from tests.benchmarks import require_uci_dataset


@pytest.mark.slow
def test_smoke_run_compares_in_process_and_ray(tmp_path) -> None:
    pytest.importorskip("ray", reason="Ray is an optional extra: pip install botorch-nn-uq[ray]")
    data_dir = require_uci_dataset("yacht")
    out = tmp_path / "scaling.md"
    table = search_scaling.main(
        ["--smoke", "--data-dir", str(data_dir), "--dataset", "yacht", "--out", str(out)]
    )
    assert out.read_text() == table
    row = next(line for line in table.splitlines() if line.startswith("| nes-rs"))
    assert row.rstrip().endswith("| yes |")
