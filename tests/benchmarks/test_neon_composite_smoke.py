"""Smoke run of the protocol-3 benchmark runner (benchmarks/neon_composite.py)."""

import pytest
import torch

from benchmarks import neon_composite


def pollutants_killed_at_evaluation(evaluation: int) -> type:
    r"""The runner's Pollutants problem with a simulator that raises ("killed") on its
    ``evaluation``-th call, the first being the initial design."""

    class FailingPollutants(neon_composite.Pollutants):
        calls = 0

        def h(self, U):
            FailingPollutants.calls += 1
            if FailingPollutants.calls == evaluation:
                raise RuntimeError("killed")
            return super().h(U)

    return FailingPollutants


def test_smoke_run_writes_table_plots_and_resumes(tmp_path) -> None:
    text = neon_composite.main(["--smoke", "--out", str(tmp_path)]).read_text()
    for method in ("neon+q-leaky-ei", "gp+logei", "random"):
        assert f"| pollutants | {method} | 1 | 7 |" in text
    assert "| 27746 |" in text  # NEON's trainable parameters on the pollutants problem
    assert (tmp_path / "best_so_far_pollutants.png").stat().st_size > 1000
    rows = (tmp_path / "runs.csv").read_text().splitlines()
    assert len(rows) == 1 + 3 * 3  # header + 3 methods x (initial design + 2 iterations)
    assert len(list((tmp_path / "runs").glob("*.pt"))) == 3
    assert (
        neon_composite.main(["--smoke", "--out", str(tmp_path)]).read_text().split("\n\n")[2]
        == (text.split("\n\n")[2])
    )


def test_interrupted_run_continues_from_its_checkpoint(tmp_path, monkeypatch) -> None:
    run = neon_composite.RunSpec("pollutants", "random", 3, 5, 3, 20, 2, 16)
    uninterrupted = neon_composite.execute(run, tmp_path / "uninterrupted")

    store = tmp_path / "interrupted"
    # Initial design, iteration 0, then the simulator fails.
    monkeypatch.setitem(neon_composite.PROBLEMS, "pollutants", pollutants_killed_at_evaluation(3))
    with pytest.raises(RuntimeError, match="killed"):
        neon_composite.execute(run, store)
    assert not (store / f"{run.key}.pt").exists()
    assert (store / f"{run.key}.checkpoint").exists()

    class CountingPollutants(neon_composite.Pollutants):
        calls = 0

        def h(self, U):
            CountingPollutants.calls += 1
            return super().h(U)

    monkeypatch.setitem(neon_composite.PROBLEMS, "pollutants", CountingPollutants)
    resumed = neon_composite.execute(run, store)
    assert CountingPollutants.calls == 2  # iterations 1 and 2 only: no new initial design
    assert resumed.best_so_far == uninterrupted.best_so_far
    assert len(resumed.seconds) == 3
    assert not (store / f"{run.key}.checkpoint").exists()


def test_interrupted_neon_run_resumes_its_warm_starts(tmp_path, monkeypatch) -> None:
    r"""A resumed run loads the last model and the continual-training state, so it
    warm-starts (and screens) exactly as the uninterrupted run."""
    run = neon_composite.RunSpec(
        "pollutants",
        "neon+q-leaky-ei",
        seed=3,
        n_initial=5,
        iterations=4,
        steps=20,
        num_restarts=2,
        raw_samples=16,
        batch_size=16,
        warm_steps=10,
        cold_every=3,
        screening_indices=4,
        optimize_on="screening",
    )
    uninterrupted = neon_composite.execute(run, tmp_path / "uninterrupted")
    assert uninterrupted.warm_fits == [False, True, True, False]
    assert len(uninterrupted.fit_seconds) == 4

    store = tmp_path / "interrupted"
    # Initial design, iterations 0 and 1, then the simulator fails.
    monkeypatch.setitem(neon_composite.PROBLEMS, "pollutants", pollutants_killed_at_evaluation(4))
    with pytest.raises(RuntimeError, match="killed"):
        neon_composite.execute(run, store)
    monkeypatch.setitem(neon_composite.PROBLEMS, "pollutants", neon_composite.Pollutants)
    resumed = neon_composite.execute(run, store)
    assert resumed.warm_fits == uninterrupted.warm_fits
    assert resumed.best_so_far == uninterrupted.best_so_far


def test_gaps_are_measured_from_the_best_known_g() -> None:

    def result(problem, method, best_so_far):
        spec = neon_composite.RunSpec(problem, method, 0, 5, len(best_so_far) - 1, 20, 2, 16)
        return neon_composite.RunResult(
            spec, best_so_far=best_so_far, seconds=[1.0] * len(best_so_far)
        )

    known = neon_composite.BEST_KNOWN_G["brusselator"]
    results = [
        result("brusselator", "gp+logei", [0.1, known + 1e-3]),
        result("brusselator", "random", [0.2, 0.1]),
        result("pollutants", "random", [0.5, 0.25]),
    ]
    assert neon_composite.best_known_g(results) == {"pollutants": 0.0, "brusselator": known}
    table = neon_composite.summary_table(results)
    assert f"| brusselator | gp+logei | 1 | 6 | {known + 1e-3:.3e} | 1.00e-03 |" in table
    assert "| pollutants | random | 1 | 6 | 2.500e-01 | 2.50e-01 |" in table
    curves = neon_composite.best_g_curves(results)
    torch.testing.assert_close(
        curves["brusselator"]["random"][1],
        torch.tensor([[0.2 - known, 0.1 - known]], dtype=torch.float64),
    )
    # A run below the best known value becomes the reference.
    lower = result("brusselator", "random", [0.2, known - 1e-4])
    assert neon_composite.best_known_g([*results, lower])["brusselator"] == known - 1e-4


def test_neon_settings_default_per_problem_and_zero_switches_off(tmp_path) -> None:
    parser = neon_composite.runner_parser(neon_composite.__doc__, out=tmp_path)
    neon_composite.add_neon_options(parser)
    defaults = parser.parse_args([])
    assert (
        neon_composite.neon_settings(defaults, "brusselator")
        == neon_composite.NEON_DEFAULTS["brusselator"]
    )
    assert (
        neon_composite.neon_settings(defaults, "pollutants")
        == neon_composite.NEON_DEFAULTS["pollutants"]
    )
    given = parser.parse_args(["--screening-indices", "0", "--batch-size", "512"])
    settings = neon_composite.neon_settings(given, "brusselator")
    assert settings["screening_indices"] is None and settings["batch_size"] == 512
    assert settings["warm_steps"] == neon_composite.NEON_DEFAULTS["brusselator"]["warm_steps"]
    with pytest.raises(SystemExit):
        parser.parse_args(["--warm-steps", "-1"])


def test_first_seed_selects_the_seeds_and_bad_counts_are_rejected(tmp_path) -> None:
    arguments = ["--smoke", "--methods", "random", "--out", str(tmp_path)]
    neon_composite.main([*arguments, "--first-seed", "4"])
    assert [path.name.split("_")[2] for path in (tmp_path / "runs").glob("*.pt")] == ["seed4"]
    for bad in (["--seeds", "0"], ["--first-seed", "-1"]):
        with pytest.raises(SystemExit):
            neon_composite.main([*arguments, *bad])
