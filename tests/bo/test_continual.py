"""Tests of continual training (warm-started refits) in the BO loop."""

import pytest
import torch

from botorch_nn_uq.bo import strategy as bo_strategy
from botorch_nn_uq.bo.continual import (
    ContinualTraining,
    ContinualTrainingState,
    held_out_error,
)
from botorch_nn_uq.bo.loop import run_bo
from botorch_nn_uq.bo.surrogates import get_surrogate
from botorch_nn_uq.problems import get_bo_problem


@pytest.fixture
def problem():
    return get_bo_problem("levy", 2)


def _run(problem, continual: str = ""):
    r"""Five steps of a deep ensemble with Thompson sampling; ``continual`` is the
    strategy's ``+continual(...)`` option, if any."""
    strategy = f"deep-ensemble:ts(num_candidates=256){continual}"
    return run_bo(problem, strategy, iterations=5, n_initial=10, seed=4, batch_size=3)


def test_warm_started_runs_are_reproducible_from_the_seed(problem) -> None:
    policy = "+continual(warm_start_steps=20,cold_refit_every=3,degradation_factor=none)"
    first, again = _run(problem, policy), _run(problem, policy)
    torch.testing.assert_close(first.X, again.X, rtol=0, atol=0)
    cold = _run(problem)
    assert [record.warm_start for record in first.records[1:]] == [False, True, True, False, True]
    assert not any(record.warm_start for record in cold.records)
    # Warm starts change the fits, so the proposals after the first step differ.
    torch.testing.assert_close(first.X[:13], cold.X[:13], rtol=0, atol=0)
    assert not torch.equal(first.X, cold.X)


def test_a_warm_start_continues_from_the_previous_weights_for_a_short_schedule(
    problem, monkeypatch
) -> None:
    fits = []
    original = bo_strategy.get_surrogate

    def recording(name):
        spec = original(name)
        build = spec.build

        def build_and_record(*args, **kwargs):
            model = build(*args, **kwargs)
            fits.append((kwargs.get("warm_start"), model))
            return model

        return type(spec)(spec.name, spec.description, build_and_record, spec.supports_warm_start)

    monkeypatch.setattr(bo_strategy, "get_surrogate", recording)
    _run(problem, "+continual(warm_start_steps=7,cold_refit_every=10,degradation_factor=none)")
    assert fits[0][0] is None and fits[0][1].training_result.steps_run == 500
    for (warm_start, model), (_, previous) in zip(fits[1:], fits[:-1], strict=True):
        assert warm_start is previous
        assert model.training_result.steps_run == 7


def test_a_degraded_held_out_error_brings_back_a_cold_fit(problem) -> None:
    X = torch.rand(12, 2, dtype=torch.float64)
    Y = -problem.evaluate(X).unsqueeze(-1)
    model = get_surrogate("deep-ensemble").build(X, Y, problem.bounds, 0)
    state = ContinualTrainingState(ContinualTraining(cold_refit_every=100, degradation_factor=2.0))
    assert not state.next_fit_is_warm(None, X, Y, Y)
    state.record_fit(warm=False)
    assert state.next_fit_is_warm(model, X[:3], Y[:3], Y)
    reference = state.reference_error
    assert reference == pytest.approx(held_out_error(model, X[:3], Y[:3], Y))
    state.record_fit(warm=True)
    far_off = Y[:3] + 10 * Y.std() * (1 + reference)
    assert not state.next_fit_is_warm(model, X[:3], far_off, Y)
    state.record_fit(warm=False)
    assert state.reference_error is None and state.fits_since_cold == 0


def test_continual_training_needs_a_warm_startable_surrogate(problem) -> None:
    with pytest.raises(ValueError, match="continual needs a warm-startable model.*deep-ensemble"):
        run_bo(problem, "gp:qlogei+continual", iterations=1)
    with pytest.raises(ValueError, match="warm_start_steps must be a positive integer"):
        ContinualTraining(warm_start_steps=0)
    with pytest.raises(ValueError, match="degradation_factor must be at least 1"):
        ContinualTraining(degradation_factor=0.5)


def test_batches_of_q_points_are_recorded_per_step(problem) -> None:
    result = run_bo(problem, "random", iterations=3, n_initial=4, seed=0, batch_size=5)
    assert [record.num_evaluations for record in result.records] == [4, 9, 14, 19]
    assert all(record.batch_duplicates == 0 for record in result.records)
    assert all(0 < record.batch_min_distance < 2 for record in result.records[1:])
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        run_bo(problem, "random", iterations=1, batch_size=0)


def test_sobol_designs_and_time_budgets(problem) -> None:
    from botorch_nn_uq.bo import initial_design

    sobol = initial_design(problem.bounds, 16, seed=2, design="sobol")
    assert torch.equal(sobol, initial_design(problem.bounds, 16, seed=2, design="sobol"))
    unit = (sobol - problem.bounds[0]) / (problem.bounds[1] - problem.bounds[0])
    # A Sobol design puts exactly one point in each of the 4 x 4 cells of the square.
    cells = (unit * 4).floor().to(torch.long)
    assert len({tuple(cell) for cell in cells.tolist()}) == 16
    with pytest.raises(ValueError, match="Unknown design 'grid'"):
        initial_design(problem.bounds, 4, seed=0, design="grid")
    capped = run_bo(problem, "gp:logei", iterations=50, n_initial=4, time_budget=1e-9)
    assert len(capped.records) == 2
    cpu_capped = run_bo(problem, "gp:logei", iterations=50, n_initial=4, cpu_budget=1e-9)
    assert len(cpu_capped.records) == 2
