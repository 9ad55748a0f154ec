"""Smoke run of the conditioning benchmark (benchmarks/conditioning.py)."""

from benchmarks import conditioning


def test_smoke_run_writes_the_distance_table(tmp_path) -> None:
    out = tmp_path / "conditioning.md"
    table = conditioning.main(["--smoke", "--out", str(out)])
    assert out.read_text() == table
    (row,) = [line for line in table.splitlines() if line.startswith("| branin")]
    cells = [float(cell) for cell in row.strip("|").split("|")[3:]]
    assert len(cells) == 9 and all(value >= 0 for value in cells)
