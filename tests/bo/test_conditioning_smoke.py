"""Smoke run of the conditioning benchmark (benchmarks/conditioning.py)."""

from tests.benchmark_scripts import load_benchmark


def test_smoke_run_writes_the_distance_table(tmp_path) -> None:
    module = load_benchmark("conditioning")
    out = tmp_path / "conditioning.md"
    table = module.main(["--smoke", "--out", str(out)])
    assert out.read_text() == table
    (row,) = [line for line in table.splitlines() if line.startswith("| branin")]
    cells = [float(cell) for cell in row.strip("|").split("|")[3:]]
    assert len(cells) == 9 and all(value >= 0 for value in cells)
