"""Smoke run of the protocol-1 benchmark runner (benchmarks/nomu_bo_suite.py)."""

import pytest

from benchmarks import nomu_bo_suite


def test_smoke_run_writes_csv_table_and_plots(tmp_path) -> None:
    summary = nomu_bo_suite.main(["--smoke", "--out", str(tmp_path)])
    text = summary.read_text()
    assert "| problem | mc-dropout+logei | gp+logei | random |" in text
    assert "levy-2d" in text and "g-function-2d" in text and "**average**" in text
    assert "seconds per iteration" in text
    runs = (tmp_path / "runs.csv").read_text().splitlines()
    # 2 problems x 3 methods x (initial design + 2 iterations)
    assert len(runs) == 1 + 2 * 3 * 3
    assert (tmp_path / "summary.csv").exists()
    assert (tmp_path / "best_so_far_levy-2d.png").stat().st_size > 1000


def test_finished_runs_are_stored_and_loaded_again(tmp_path, monkeypatch) -> None:
    first = nomu_bo_suite.main(["--smoke", "--out", str(tmp_path)]).read_text()
    assert len(list((tmp_path / "runs").glob("*.pt"))) == 2 * 3

    def fail(*args, **kwargs):
        raise AssertionError("a stored run was run again")

    monkeypatch.setattr(nomu_bo_suite, "run_bo_for_storing", fail)
    second = nomu_bo_suite.main(["--smoke", "--out", str(tmp_path)]).read_text()
    table = first.split("Normalised final regret")[1]
    assert table == second.split("Normalised final regret")[1]


def test_a_model_can_name_its_own_acquisition(tmp_path) -> None:
    argv = ["--smoke", "--out", str(tmp_path), "--models", "mc-dropout", "mc-dropout:qlogei"]
    summary = nomu_bo_suite.main(argv).read_text()
    assert "| problem | mc-dropout+logei | mc-dropout+qlogei | gp+logei | random |" in summary
    assert len(list((tmp_path / "runs").glob("*_mc-dropout+qlogei_*"))) == 2


def test_without_baselines_runs_the_named_models_only(tmp_path) -> None:
    argv = ["--smoke", "--out", str(tmp_path), "--models", "mc-dropout", "--without-baselines"]
    summary = nomu_bo_suite.main(argv).read_text()
    assert "| problem | mc-dropout+logei |" in summary and "gp+logei" not in summary
    assert {path.name.split("_")[1] for path in (tmp_path / "runs").glob("*.pt")} == {
        "mc-dropout+logei"
    }


def test_first_seed_selects_the_seeds_and_bad_counts_are_rejected(tmp_path, capsys) -> None:
    nomu_bo_suite.main(["--smoke", "--out", str(tmp_path), "--first-seed", "3"])
    seeds = {path.name.split("_seed")[1].split("_")[0] for path in (tmp_path / "runs").glob("*.pt")}
    assert seeds == {"3"}
    for bad, message in [
        (["--seeds", "0"], "argument --seeds: must be at least 1; got 0"),
        (["--first-seed", "-1"], "argument --first-seed: must be at least 0; got -1"),
    ]:
        with pytest.raises(SystemExit):
            nomu_bo_suite.parse_args(bad)
        assert message in capsys.readouterr().err


def test_unknown_models_and_acquisitions_are_rejected(capsys) -> None:
    for models, message in [
        (["no-such-model"], "unknown model"),
        (["mc-dropout:no-such-acquisition"], "unknown or target-value acquisition"),
        (["mc-dropout:robust-ei"], "unknown or target-value acquisition"),
    ]:
        with pytest.raises(SystemExit):
            nomu_bo_suite.parse_args(["--models", *models])
        assert message in capsys.readouterr().err
