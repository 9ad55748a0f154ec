"""Smoke runs of the protocol-6 runners (benchmarks/scale_suite.py, scale_cost.py)."""

import json

import pytest

from benchmarks import scale_cost, scale_suite


def test_scale_suite_smoke_writes_tables_curves_and_stored_runs(tmp_path, monkeypatch) -> None:
    text = scale_suite.main(["--smoke", "--out", str(tmp_path)]).read_text()
    for heading in ("**nn-draw-6d** (1 seeds)", "**rastrigin-3d** (1 seeds)"):
        assert heading in text
    for method in ("gp:qlogei", "deep-ensemble:ts+continual+tr", "vbll:vbll-ts", "random"):
        assert f"| {method} |" in text
    assert "better than GP" in text and "better than VBLL" in text
    runs = (tmp_path / "runs.csv").read_text().splitlines()
    # 2 problems x 4 methods x (initial design + 2 steps)
    assert len(runs) == 1 + 2 * 4 * 3
    summary = (tmp_path / "summary.csv").read_text().splitlines()
    header = summary[0].split(",")
    duplicates = {}
    for row in summary[1:]:
        cells = row.split(",")
        method = cells[header.index("method")]
        duplicates[method] = duplicates.get(method, 0) + int(cells[header.index("duplicates")])
    # The package's proposals never repeat a point; VBLL's own sampler may (it is measured).
    assert duplicates["deep-ensemble:ts+continual+tr"] == duplicates["random"] == 0
    assert (tmp_path / "best_value_nn-draw.png").stat().st_size > 1000

    def fail(*args, **kwargs):
        raise AssertionError("a stored run was run again")

    monkeypatch.setattr(scale_suite, "run_bo", fail)
    again = scale_suite.main(["--smoke", "--out", str(tmp_path)]).read_text()
    assert again.split("\n\n", 2)[2] == text.split("\n\n", 2)[2]


def test_scale_cost_smoke_measures_every_phase_in_its_own_process(tmp_path) -> None:
    text = scale_cost.main(["--smoke", "--out", str(tmp_path)]).read_text()
    assert "| 40 | gp |" in text and "| 40 | deep-ensemble |" in text
    rows = [json.loads(path.read_text()) for path in (tmp_path / "runs").glob("*.json")]
    assert len(rows) == 2
    for row in rows:
        assert not row["timed_out"]
        assert all(row[phase] > 0 for phase in ("fit", "warm", "q1", "q100"))
        assert row["peak_mb"] >= 0
    assert (tmp_path / "cost.png").stat().st_size > 1000


def test_stored_only_summaries_leave_out_missing_runs(tmp_path, capsys) -> None:
    argv = ["--smoke", "--runs", str(tmp_path / "store"), "--methods", "random"]
    scale_suite.main([*argv, "--out", str(tmp_path / "first")])
    text = scale_suite.main(
        [*argv, "--out", str(tmp_path / "second"), "--stored-only", "--seeds", "2"]
    ).read_text()
    assert "| random |" in text
    assert "runs not stored yet (left out)" in capsys.readouterr().out


def test_protocol_7_peers_and_turbo_arms_run_on_the_warped_hartmann(tmp_path) -> None:
    methods = ["gp-turbo:ts+turbo", "gp-warp:qlogei", "deep-ensemble:ts+turbo+continual"]
    argv = ["--smoke", "--problems", "warped-hartmann", "--methods", *methods]
    text = scale_suite.main([*argv, "--out", str(tmp_path)]).read_text()
    assert "**warped-hartmann-6d** (1 seeds)" in text
    assert "better than GP-TuRBO" in text and "CPU s per step" in text
    for method in methods:
        assert f"| {method} |" in text
    summary = (tmp_path / "summary.csv").read_text().splitlines()
    header = summary[0].split(",")
    assert all(float(row.split(",")[header.index("total_cpu_seconds")]) > 0 for row in summary[1:])
    with pytest.raises(SystemExit):
        scale_suite.main(["--smoke", "--problems", "ackley", "--out", str(tmp_path)])
    with pytest.raises(SystemExit):
        scale_suite.main(["--smoke", "--methods", "gp:ts+tr+turbo", "--out", str(tmp_path)])


def test_protocol_7_control_problems_run_with_their_smoke_budgets(tmp_path) -> None:
    pytest.importorskip("gymnasium", reason="the lunar lander needs the lunar extra (gymnasium)")
    methods = ["deep-ensemble:ts+turbo+continual", "random"]
    argv = ["--smoke", "--problems", "lunar-lander", "rover", "--methods", *methods]
    text = scale_suite.main([*argv, "--out", str(tmp_path)]).read_text()
    assert "**lunar-lander-12d** (1 seeds)" in text and "**rover-60d** (1 seeds)" in text
    runs = (tmp_path / "runs.csv").read_text().splitlines()
    # 2 problems x 2 methods x (initial design + 2 steps)
    assert len(runs) == 1 + 2 * 2 * 3
    assert (tmp_path / "best_value_rover.png").stat().st_size > 1000


def test_the_turbo_success_tolerance_reaches_the_proposer_and_marks_the_runs(
    tmp_path, monkeypatch
) -> None:
    seen = []
    run_bo = scale_suite.run_bo

    def recording(*args, **kwargs):
        seen.append(kwargs["turbo_options"])
        return run_bo(*args, **kwargs)

    monkeypatch.setattr(scale_suite, "run_bo", recording)
    argv = ["--smoke", "--problems", "rastrigin", "--methods", "gp-turbo:ts+turbo", "random"]
    text = scale_suite.main([*argv, "--turbo-success-tolerance", "3", "--out", str(tmp_path)])
    assert "success tolerance (`+turbo` methods): 3." in text.read_text()
    assert seen == [{"success_tolerance": 3}, None]
    stored = sorted(path.name for path in (tmp_path / "runs").glob("*.pt"))
    assert "_success3" in stored[0] and "_success" not in stored[1]
