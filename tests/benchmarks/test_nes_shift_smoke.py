"""Smoke runs of the runner of ensembles under dataset shift (benchmarks/nes_shift.py)."""

import math
from types import SimpleNamespace

import pytest

from benchmarks import nes_shift
from tests.benchmarks import (
    check_shift_scores,
    read_runs_csv,
    require_uci_dataset,
    write_fake_uci_dataset,
)


# The smoke budget's tiny searches may keep one member (AutoDEUQ's Caruana selection).
@pytest.mark.filterwarnings("ignore:The member selection of .* kept a single member")
def test_smoke_run_on_the_shared_yacht_data(tmp_path) -> None:
    data_dir = require_uci_dataset("yacht")
    argv = ["--smoke", "--datasets", "yacht", "--data-dir", str(data_dir), "--out", str(tmp_path)]
    summary = nes_shift.main(argv).read_text()
    assert "Command: `python -m benchmarks.nes_shift --smoke" in summary
    assert "### yacht, M = 2" in summary
    assert "| gp | 0 | 1 |" in summary and "| – | – |" in summary
    runs = read_runs_csv(tmp_path)
    assert [(run["method"], run["severity"]) for run in runs] == [
        (method, severity) for method in nes_shift.METHODS for severity in ("0", "5")
    ]
    for run in runs:
        check_shift_scores(run, nes_shift.SEARCHES)
        assert run["ensemble_size"] == "2"
    # The test shift of severity 5 keeps a quarter of the rows toward the extremes.
    assert {run["num_test"] for run in runs if run["severity"] == "0"} == {"31"}
    assert {run["num_test"] for run in runs if run["severity"] == "5"} == {"8"}
    assert (tmp_path / "shift_yacht.png").stat().st_size > 0


def test_smoke_run_on_a_fake_data_set_resumes_from_stored_results_and_pools(
    tmp_path, monkeypatch
) -> None:
    write_fake_uci_dataset(tmp_path / "data", "toy")
    out = tmp_path / "out"
    # The hyper-deep ensemble's selection keeps one member of a 40-row data set, and warns.
    methods = [*nes_shift.SEARCHES, "mc-dropout", "gp"]
    argv = ["--smoke", "--datasets", "toy", "--methods", *methods]
    argv += ["--data-dir", str(tmp_path / "data"), "--out", str(out)]
    first = nes_shift.main(argv).read_text()
    stored = out / "runs"
    assert len(list(stored.glob("*.json"))) == len(methods)
    assert len(list(stored.glob("*.history"))) == len(nes_shift.SEARCHES)

    def fail(*args, **kwargs):
        raise AssertionError("a stored job was run again")

    with monkeypatch.context() as patch:
        patch.setattr(nes_shift, "evaluate", fail)
        second = nes_shift.main(argv).read_text()
    assert first.split("### toy")[1] == second.split("### toy")[1]

    # Without the stored results, the checkpointed pools give the same ensembles again.
    for path in stored.glob("*.json"):
        path.unlink()
    third = nes_shift.main(argv).read_text()
    assert first.split("### toy")[1] == third.split("### toy")[1]


def test_the_summary_leaves_the_references_diversity_lens_empty() -> None:
    rows = [
        {
            "dataset": "toy",
            "split": split,
            "method": "gp",
            "ensemble_size": 5,
            "severity": 0,
            **{key: 1.0 + split for key, _, _ in nes_shift.SUMMARY_COLUMNS},
            "average_member_nll": math.nan,
            "oracle_nll": math.nan,
        }
        for split in range(2)
    ]
    args = SimpleNamespace(datasets=["toy"], sizes=[5], methods=["gp"], severities=[0])
    (row,) = [line for line in nes_shift.summary_table(rows, args).splitlines() if "| gp |" in line]
    assert row.startswith("| gp | 0 | 2 | 1.500 ± 0.500 |") and row.endswith("| – | – |")


def test_the_claim_table_pairs_nes_re_and_deepens_by_split() -> None:
    nll = {("nes-re", 0): 1.0, ("nes-re", 1): 3.0, ("deepens-rs", 0): 2.0, ("deepens-rs", 1): 2.5}
    rows = [
        {
            "dataset": "toy",
            "split": split,
            "method": method,
            "ensemble_size": 5,
            "severity": severity,
            "test_nll": nll[(method, split)] + severity,
            "coverage_95": 0.9 if method == "nes-re" else 0.5,
        }
        for (method, split) in nll
        for severity in (0, 3, 5)
    ]
    args = SimpleNamespace(
        datasets=["toy"], sizes=[5], methods=["nes-re", "deepens-rs"], severities=[0, 3, 5]
    )
    table = nes_shift.claim_table(rows, args)
    (row,) = [line for line in table.splitlines() if line.startswith("| toy |")]
    # Differences -1.0 and +0.5 at both severities: mean -0.25, standard error 0.75.
    assert row == ("| toy | 5 | -0.250 ± 0.750 (1/2) | -0.250 ± 0.750 (1/2) | 0.90 (nes-re) |")
    assert nes_shift.claim_table(rows, SimpleNamespace(**{**vars(args), "methods": ["gp"]})) == ""


def test_invalid_arguments_are_parser_errors(tmp_path, capsys) -> None:
    write_fake_uci_dataset(tmp_path, "toy")
    base = ["--data-dir", str(tmp_path), "--splits", "1", "--datasets", "toy"]
    for argv, message in [
        (["--methods", "svgp", *base], "invalid choice: 'svgp'"),
        (["--data-dir", str(tmp_path / "missing")], "not shipped with the package"),
        ([*base, "boston"], "['boston'] not found"),
        ([*base, "--splits", "3"], "exceeds the 2 splits of toy"),
        ([*base, "--pool-size", "4", "--sizes", "5"], "exceed --pool-size 4"),
        ([*base, "--pool-size", "4", "--sizes", "2", "--population-size", "4"], "smaller"),
        ([*base, "--severities", "6"], "--severities"),
    ]:
        with pytest.raises(SystemExit):
            nes_shift.parse_args(argv)
        assert message in capsys.readouterr().err
