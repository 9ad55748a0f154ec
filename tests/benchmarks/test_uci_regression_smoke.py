"""Smoke runs of the protocol-2 benchmark runner (benchmarks/uci_regression.py)."""

import csv
import math
from pathlib import Path

import pytest

from benchmarks import uci_regression
from tests.benchmarks import require_uci_dataset, write_fake_uci_dataset


def _table_row(summary: Path, dataset: str, model: str) -> list[str]:
    rows = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in summary.read_text().splitlines()
        if line.startswith(f"| {dataset} | {model} |")
    ]
    assert len(rows) == 1
    return rows[0]


def _runs(out: Path) -> list[dict[str, str]]:
    with (out / "runs.csv").open() as handle:
        return list(csv.DictReader(handle))


def test_smoke_run_on_the_shared_yacht_data(tmp_path) -> None:
    data_dir = require_uci_dataset("yacht")
    summary = uci_regression.main(
        [
            "--smoke",
            "--models",
            "mc-dropout",
            "--datasets",
            "yacht",
            "--data-dir",
            str(data_dir),
            "--out",
            str(tmp_path),
        ]
    )
    row = _table_row(summary, "yacht", "mc-dropout")
    assert row[2] == "1"
    assert math.isfinite(float(row[3].split("±")[0]))
    assert row[6] == "1.18 / -0.17"
    (run,) = _runs(tmp_path)
    assert (run["dataset"], run["split"], run["model"]) == ("yacht", "0", "mc-dropout")
    assert int(run["num_train"]) + int(run["num_test"]) == 308
    assert math.isfinite(float(run["test_nll"])) and float(run["test_rmse"]) > 0


def test_smoke_run_on_a_fake_data_set_resumes_from_stored_jobs(tmp_path, monkeypatch) -> None:
    write_fake_uci_dataset(tmp_path / "data", "toy")
    argv = [
        "--smoke",
        "--models",
        "mc-dropout",
        "--datasets",
        "toy",
        "absent",
        "--data-dir",
        str(tmp_path / "data"),
        "--out",
        str(tmp_path / "out"),
    ]
    first = uci_regression.main(argv).read_text()
    row = _table_row(tmp_path / "out" / "summary.md", "toy", "mc-dropout")
    assert math.isfinite(float(row[3].split("±")[0])) and row[6] == "–"
    assert "Command: `python -m benchmarks.uci_regression --smoke" in first
    assert [run["dataset"] for run in _runs(tmp_path / "out")] == ["toy"]
    assert len(list((tmp_path / "out" / "runs").glob("*.json"))) == 1

    def fail(*args, **kwargs):
        raise AssertionError("a stored job was run again")

    monkeypatch.setitem(uci_regression.MODELS, "mc-dropout", fail)
    second = uci_regression.main(argv).read_text()
    assert first.split("| data set")[1] == second.split("| data set")[1]


def test_invalid_arguments_are_parser_errors(tmp_path, capsys) -> None:
    write_fake_uci_dataset(tmp_path, "toy")
    base = ["--data-dir", str(tmp_path), "--datasets", "toy"]
    for argv, message in [
        (["--models", "gp", *base], "unknown model(s) ['gp']; valid: mc-dropout, deep-ensemble"),
        (["--data-dir", str(tmp_path / "missing")], "not shipped with the package"),
        ([*base, "boston"], "['boston'] not found"),
        ([*base, "--splits", "3"], "exceeds the 2 splits of toy"),
    ]:
        with pytest.raises(SystemExit):
            uci_regression.parse_args(argv)
        assert message in capsys.readouterr().err
