import pytest
import torch

from botorch_nn_uq.bo import initial_design, run_bo, write_rows_csv
from botorch_nn_uq.problems import get_bo_problem


@pytest.fixture
def problem():
    return get_bo_problem("levy", 2)


def test_initial_design_is_shared_across_models_and_inside_bounds(problem) -> None:
    first = initial_design(problem.bounds, 6, seed=3)
    assert first.shape == (6, 2)
    assert ((first >= problem.bounds[0]) & (first <= problem.bounds[1])).all()
    torch.testing.assert_close(first, initial_design(problem.bounds, 6, seed=3))
    assert not torch.equal(first, initial_design(problem.bounds, 6, seed=4))
    runs = [run_bo(problem, model, iterations=0, n_initial=6, seed=3) for model in ("gp", "random")]
    for run in runs:
        torch.testing.assert_close(run.X, first)


@pytest.mark.parametrize("model", ["gp", "mc-dropout", "random"])
def test_run_bo_records_and_regret(problem, model: str) -> None:
    seen = []
    strategy = "random" if model == "random" else f"{model}:qlogei(num_restarts=2,raw_samples=16)"
    result = run_bo(problem, strategy, iterations=2, n_initial=4, seed=0, callback=seen.append)
    assert result.X.shape == (6, 2)
    torch.testing.assert_close(result.values, problem.evaluate(result.X))
    assert [r.step for r in result.records] == [0, 1, 2]
    assert [r.num_evaluations for r in result.records] == [4, 5, 6]
    assert seen == result.records
    best = [r.best_value for r in result.records]
    assert best == sorted(best, reverse=True)
    assert best[-1] == pytest.approx(float(result.values.min()))
    assert result.final_regret == pytest.approx(float(problem.normalized_regret(best[-1])))
    assert ((result.X >= problem.bounds[0]) & (result.X <= problem.bounds[1])).all()
    rows = result.rows()
    assert rows[0]["model"] == model and len(rows) == 3


def test_run_bo_is_reproducible_whatever_the_global_random_state() -> None:
    # On Levy 5-D the restarts optimize_acqf picks decide the GP's second proposal.
    problem = get_bo_problem("levy", 5)
    kwargs = dict(iterations=2, n_initial=6, seed=0)
    strategy = "gp:logei(num_restarts=4,raw_samples=64)"
    torch.manual_seed(0)
    first = run_bo(problem, strategy, **kwargs)
    torch.manual_seed(1)
    second = run_bo(problem, strategy, **kwargs)
    assert torch.equal(first.X, second.X)


def test_run_bo_finds_better_points_than_its_initial_design() -> None:
    problem = get_bo_problem("g-function", 2)
    result = run_bo(problem, "gp:logei(raw_samples=64)", iterations=8, n_initial=4, seed=0)
    assert result.records[-1].best_value < result.records[0].best_value


def test_run_bo_rejects_bad_arguments(problem) -> None:
    with pytest.raises(ValueError, match="Unknown model 'nope'.*gp.*mc-dropout.*random"):
        run_bo(problem, "nope")
    with pytest.raises(ValueError, match="Unknown acquisition 'nope'.*logei"):
        run_bo(problem, "gp:nope")
    with pytest.raises(ValueError, match="n_initial"):
        run_bo(problem, "gp", n_initial=1)


def test_run_bo_runs_turbo_and_refuses_it_with_another_region(problem) -> None:
    result = run_bo(problem, "gp:ts+turbo", iterations=2, n_initial=5, batch_size=3)
    assert result.acquisition == "turbo" and result.values.numel() == 11
    assert all(record.trust_region_length == 0.8 for record in result.records[1:])
    with pytest.raises(ValueError, match="turbo has its own trust region"):
        run_bo(problem, "gp:ts+tr+turbo")
    with pytest.raises(ValueError, match="random search takes no"):
        run_bo(problem, "random:ts+turbo")
    spelled = "gp:ts+turbo(length_init=0.4,success_tolerance=3)"
    shorter = run_bo(problem, spelled, iterations=1, n_initial=5)
    assert shorter.records[-1].trust_region_length == 0.4
    with pytest.raises(ValueError, match="tr takes"):
        run_bo(problem, "gp:ts(num_candidates=64)+local(2)+tr(num_candidates=3)")


def test_target_value_mode_tracks_the_point_closest_to_the_target() -> None:
    problem = get_bo_problem("g-function", 2)
    target = 5.0
    result = run_bo(
        problem, "gp:robust-ei(raw_samples=64)", iterations=4, n_initial=4, seed=0,
        target=target,
    )  # fmt: skip
    errors = (result.values - target).abs()
    best = float(result.values[errors.argmin()])
    assert result.records[-1].best_value == best
    expected_regret = 2 * abs(best - target) / (problem.max_value - problem.min_value)
    assert result.final_regret == pytest.approx(expected_regret)
    assert result.records[-1].regret < result.records[0].regret


def test_target_and_acquisition_must_match() -> None:
    problem = get_bo_problem("levy", 2)
    with pytest.raises(ValueError, match="needs a target value"):
        run_bo(problem, "gp:robust-lcb", iterations=0)
    with pytest.raises(ValueError, match="needs a target-value acquisition"):
        run_bo(problem, "gp:logei", iterations=0, target=1.0)


def test_run_bo_keeps_every_tensor_on_its_device(problem) -> None:
    strategy = "gp:qlogei(raw_samples=16)"
    result = run_bo(problem, strategy, iterations=1, n_initial=4, device="cpu")
    assert result.X.device.type == result.values.device.type == "cpu"
    default = run_bo(problem, strategy, iterations=1, n_initial=4)
    assert torch.equal(result.X, default.X)


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
def test_run_bo_refuses_a_device_it_cannot_use_before_any_work(problem) -> None:
    with pytest.raises(ValueError, match="device must be a device available on this machine"):
        run_bo(problem, "gp", device="cuda")
    with pytest.raises(ValueError, match="device must be a device name"):
        run_bo(problem, "gp", device="gpu")


def test_the_initial_design_follows_the_device_of_the_bounds(problem) -> None:
    # Meta tensors hold no values: a tensor created on the CPU by mistake and combined
    # with the bounds fails, as it would on a GPU.
    for design in ("uniform", "sobol"):
        points = initial_design(problem.bounds.to("meta"), 5, seed=0, design=design)
        assert points.device.type == "meta" and points.shape == (5, 2)


def test_csv_rows_are_written_with_the_keys_of_the_first_row(tmp_path) -> None:
    path = tmp_path / "tables" / "runs.csv"
    write_rows_csv([{"problem": "levy", "regret": 0.5}, {"problem": "perm", "regret": 1}], path)
    assert path.read_text().splitlines() == ["problem,regret", "levy,0.5", "perm,1"]
