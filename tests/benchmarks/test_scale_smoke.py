"""Smoke runs of the protocol-6 and protocol-7 runners (benchmarks/scale_suite.py,
scale_cost.py) and their summary's comparisons."""

import dataclasses
import json

import pytest
import torch

from benchmarks import scale_cost, scale_suite
from botorch_nn_uq.bo import BOResult, StepCost, StepRecord


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

    monkeypatch.setattr(scale_suite, "run_bo_for_storing", fail)
    again = scale_suite.main(["--smoke", "--out", str(tmp_path)]).read_text()
    assert again.split("\n\n", 2)[2] == text.split("\n\n", 2)[2]


def test_scale_cost_smoke_measures_every_phase_in_its_own_process(tmp_path) -> None:
    text = scale_cost.main(["--smoke", "--out", str(tmp_path)]).read_text()
    assert "| 40 | gp |" in text and "| 40 | deep-ensemble |" in text
    assert "| n | method | first fit s | fit s | warm refit s |" in text
    assert "warms up, untimed" in text
    rows = [json.loads(path.read_text()) for path in (tmp_path / "runs").glob("*.json")]
    assert len(rows) == 2
    for row in rows:
        assert not row["timed_out"]
        assert all(row[phase] > 0 for phase in ("first_fit", "fit", "warm", "q1", "q100"))
        assert row["peak_mb"] >= 0
        # The step adds the steady-state fit, the second.
        cells = _table_row(text, f"| 40 | {row['method']} |")
        assert cells[2:4] == [f"{row['first_fit']:.2f}", f"{row['fit']:.2f}"]
        assert cells[7] == f"{row['fit'] + row['q100']:.2f}"
    header = (tmp_path / "cost.csv").read_text().splitlines()[0]
    assert header.startswith("method,n,timed_out,timeout,first_fit,fit,warm,q1,q100,peak_mb")
    assert (tmp_path / "cost.png").stat().st_size > 1000


def _table_row(text: str, start: str) -> list[str]:
    r"""The cells of the markdown table's row that starts with ``start``."""
    (line,) = [line for line in text.splitlines() if line.startswith(start)]
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_scale_cost_tabulates_rows_stored_before_the_first_fit_was_timed(tmp_path) -> None:
    # A row of an earlier version: one fit, no first_fit; and a measurement that timed out.
    store = tmp_path / "runs"
    store.mkdir()
    phases = {"fit": 2.0, "warm": 0.5, "q1": 0.25, "q100": 1.0, "peak_mb": 100.0}
    old = {"method": "deep-ensemble", "n": 40, "timed_out": False, "timeout": 60.0, **phases}
    (store / "deep-ensemble_n40_d3_seed0_w100.json").write_text(json.dumps(old))
    timed_out = {"method": "gp", "n": 40, "timed_out": True, "timeout": 60.0}
    (store / "gp_n40_d3_seed0_w100.json").write_text(json.dumps(timed_out))
    argv = ["--methods", "gp", "deep-ensemble", "--points", "40", "--dim", "3", "--stored-only"]
    text = scale_cost.main([*argv, "--out", str(tmp_path)]).read_text()
    cells = _table_row(text, "| 40 | deep-ensemble |")
    assert cells[2:8] == ["n/a", "2.00", "0.50", "0.25", "1.00", "3.00"]
    assert "| 40 | gp | past 60 s |" in text
    csv_rows = (tmp_path / "cost.csv").read_text().splitlines()
    assert csv_rows[1:] == [
        "gp,40,True,60.0,,,,,,",
        "deep-ensemble,40,False,60.0,,2.0,0.5,0.25,1.0,100.0",
    ]


def test_scale_cost_times_a_large_batch_and_tabulates_stored_rows_only(tmp_path) -> None:
    argv = ["--smoke", "--large-batch", "8", "--out", str(tmp_path)]
    text = scale_cost.main(argv).read_text()
    assert "| q = 8 s |" in text and "| step s (fit + q = 8) |" in text
    paths = sorted((tmp_path / "runs").glob("*.json"))
    assert [path.name.endswith("_q8.json") for path in paths] == [True, True]
    assert all(json.loads(path.read_text())["q8"] > 0 for path in paths)

    # A table of what is stored: no new measurement, rows not stored are left out.
    argv = ["--methods", "gp", "deep-ensemble", "gp-turbo", "--points", "40", "41", "--dim", "3"]
    stored = scale_cost.main(
        [*argv, "--large-batch", "8", "--stored-only", "--out", str(tmp_path)]
    ).read_text()
    assert "| 40 | gp |" in stored and "| 40 | deep-ensemble |" in stored
    assert "| 41 |" not in stored and "gp-turbo |" not in stored
    assert sorted((tmp_path / "runs").glob("*.json")) == paths


def test_scale_cost_measures_gp_turbo_without_a_warm_refit() -> None:
    row = scale_cost.measure("gp-turbo", 30, 3, seed=0, warm_start_steps=5, threads=1)
    assert row["warm"] is None
    assert all(row[phase] > 0 for phase in ("first_fit", "fit", "q1", "q100"))
    assert scale_cost.batch_candidates(100) == 4096
    assert scale_cost.batch_candidates(1000) == 10_000


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
    with pytest.raises(SystemExit):
        scale_suite.main(["--smoke", "--methods", "mc-dropout:ts+bts", "--out", str(tmp_path)])


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


def _record_strategies(monkeypatch) -> list:
    r"""The strategies of the runs the benchmark makes, in order (the runs still
    happen)."""
    seen = []
    run_bo_for_storing = scale_suite.run_bo_for_storing

    def recording(problem, dim, strategy, **kwargs):
        seen.append(strategy)
        return run_bo_for_storing(problem, dim, strategy, **kwargs)

    monkeypatch.setattr(scale_suite, "run_bo_for_storing", recording)
    return seen


def test_turbo_settings_reach_the_proposer_and_mark_the_runs(tmp_path, monkeypatch) -> None:
    seen = _record_strategies(monkeypatch)
    methods = ["gp-turbo:ts+turbo", "deep-ensemble:ts+turbo+bts", "random"]
    argv = ["--smoke", "--problems", "rastrigin", "--methods", *methods]
    text = scale_suite.main([*argv, "--turbo-success-tolerance", "3", "--out", str(tmp_path)])
    assert "success tolerance (`+turbo` methods): 3." in text.read_text()
    assert [str(strategy) for strategy in seen] == [
        "gp-turbo:ts+turbo(success_tolerance=3)",
        "deep-ensemble:ts+turbo(success_tolerance=3)+bts",
        "random",
    ]
    stored = sorted(path.name for path in (tmp_path / "runs").glob("*.pt"))
    assert ["_success3" in name for name in stored] == [True, True, False]


def test_local_fits_reach_run_bo_with_a_region_only(tmp_path, monkeypatch) -> None:
    seen = _record_strategies(monkeypatch)
    methods = ["deep-ensemble:ts+tr+local", "deep-ensemble:ts+turbo+bts+local", "random"]
    argv = ["--smoke", "--problems", "rastrigin", "--methods", *methods]
    text = scale_suite.main([*argv, "--out", str(tmp_path)]).read_text()
    assert [strategy.local_fit for strategy in seen] == [4.0, 4.0, None]
    assert "| deep-ensemble:ts+tr+local |" in text
    with pytest.raises(SystemExit):
        scale_suite.parse_args(["--smoke", "--methods", "deep-ensemble:ts+local"])


def test_a_cpu_budget_caps_the_capped_models_and_marks_their_runs(tmp_path) -> None:
    argv = ["--smoke", "--problems", "rastrigin", "--methods", "gp-turbo:ts+turbo", "random"]
    capped = ["--capped-models", "gp-turbo", "--cpu-budget", "1e-6", "--out", str(tmp_path)]
    scale_suite.main([*argv, *capped])
    stored = {path.name.split("_")[1]: path.name for path in (tmp_path / "runs").glob("*.pt")}
    assert stored["gp-turbo+ts+turbo"].endswith("_cpucap1e-06.pt")
    assert "cap" not in stored["random"]
    rows = (tmp_path / "runs.csv").read_text().splitlines()
    # GP-TuRBO-1 stops after its first step (initial design + 1), random runs both steps.
    assert sum(row.split(",")[-1] == "gp-turbo:ts+turbo" for row in rows) == 2
    assert sum(row.split(",")[-1] == "random" for row in rows) == 3
    with pytest.raises(SystemExit):
        scale_suite.parse_args([*argv, "--cpu-budget", "0"])


def _run(best_values: list[float], cpu_seconds: list[float]) -> BOResult:
    r"""A stored run with these best values after the initial design and each step, whose
    steps cost these CPU seconds."""
    records = [
        StepRecord(
            step=step, num_evaluations=step + 1, value=best, best_value=best, regret=0.0,
            cost=StepCost(seconds=cpu, cpu_seconds=cpu),
        )
        for step, (best, cpu) in enumerate(zip(best_values, [0.0, *cpu_seconds], strict=True))
    ]  # fmt: skip
    empty = torch.zeros(0)
    return BOResult("p", "m", "a", 0, empty, empty, records)


def test_wins_at_equal_cpu_compare_what_each_run_had_found_within_the_cheaper_run() -> None:
    # A cheap arm (1 CPU s per step) against an expensive one (10 s per step): the cheap
    # arm's 3 s buy it 2.0; the expensive arm had found nothing past its design by then,
    # though its final value is better.
    cheap = _run([9.0, 5.0, 3.0, 2.0], [1.0, 1.0, 1.0])
    expensive = _run([9.0, 4.0, 1.0, 0.5], [10.0, 10.0, 10.0])
    assert scale_suite.best_within_cpu_seconds(cheap, 2.5) == 3.0
    assert scale_suite.best_within_cpu_seconds(expensive, 3.0) == 9.0
    assert scale_suite.best_within_cpu_seconds(expensive, 30.0) == 0.5
    runs = {("cheap", 0): cheap, ("expensive", 0): expensive}
    assert scale_suite._wins_at_equal_cpu(runs, "cheap", "expensive", [0]) == "1/1"
    assert scale_suite._wins_at_equal_cpu(runs, "expensive", "cheap", [0]) == "0/1"
    assert scale_suite._wins(runs, "cheap", "expensive", [0]) == "0/1"


def test_wins_at_equal_evaluations_meet_a_capped_run_where_it_stopped() -> None:
    # The capped reference stopped after 2 evaluations at 4.0; the full run had 5.0 there
    # and ends at 1.0: it wins at its end, loses at equal evaluations.
    full = _run([9.0, 5.0, 3.0, 1.0], [1.0, 1.0, 1.0])
    capped = _run([9.0, 4.0], [10.0])
    assert scale_suite.best_within_evaluations(full, 2) == 5.0
    assert scale_suite.best_within_evaluations(full, 0) == 9.0
    assert scale_suite.best_within_evaluations(full, 10) == 1.0
    runs = {("full", 0): full, ("capped", 0): capped}
    assert scale_suite._wins(runs, "full", "capped", [0]) == "1/1"
    assert scale_suite._wins_at_equal_evaluations(runs, "full", "capped", [0]) == "0/1"
    assert scale_suite._wins_at_equal_evaluations(runs, "capped", "full", [0]) == "1/1"


def test_reach_ratios_read_the_mean_curves_against_the_references_end() -> None:
    # The reference ends at 0.5 after 4 records (3 steps, 30 CPU s); the cheap arm's mean
    # curve reaches 0.5 at its third record: 3 of 4 evaluations, 2 of 30 CPU seconds.
    reference = [_run([9.0, 4.0, 1.0, 0.5], [10.0, 10.0, 10.0])]
    cheap = [_run([9.0, 5.0, 1.0, 0.0], [1.0, 1.0, 1.0]), _run([9.0, 5.0, 0.0, 0.0], [1.0] * 3)]
    assert scale_suite.reach_ratios(cheap, reference) == "0.75×, 0.067×"
    assert scale_suite.reach_ratios([_run([9.0, 8.0, 7.0, 6.0], [1.0] * 3)], reference) == (
        "not reached"
    )


def test_runs_on_the_cpu_keep_their_stored_names_and_other_devices_mark_theirs() -> None:
    spec = scale_suite.RunSpec(
        problem="ackley",
        method="deep-ensemble:ts+continual",
        seed=2,
        budget=scale_suite.BUDGETS["ackley"],
        num_restarts=10,
        raw_samples=512,
        time_budget=None,
    )
    b = spec.budget
    # The names of the runs stored before --device existed.
    assert spec.key == (
        f"ackley-{b.dim}d_deep-ensemble+ts+continual_seed2_init{b.n_initial}"
        f"_it{b.iterations}_q{b.batch_size}_r10_raw512"
    )
    assert dataclasses.replace(spec, device="cpu").key == spec.key
    assert dataclasses.replace(spec, device="cuda:1").key == f"{spec.key}_cuda1"
