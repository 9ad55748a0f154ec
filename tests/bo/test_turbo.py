"""TuRBO-1 in the BO core: the region's lengthscale weights, the candidates, the
tolerances, and restarts that set the run's data aside."""

from __future__ import annotations

import math

import gpytorch
import pytest
import torch
from botorch.models import SingleTaskGP

from botorch_nn_uq.bo import (
    BayesianOptimizer,
    Composite,
    FunctionProblem,
    HitTarget,
    TurboProposer,
    turbo,
)
from botorch_nn_uq.bo.proposer_configs import proposer_from_config
from botorch_nn_uq.bo.turbo import lengthscale_weights, turbo_candidates, turbo_num_candidates
from botorch_nn_uq.models import DeepEnsemble


def _bowl(X: torch.Tensor) -> torch.Tensor:
    return (X - 0.3).square().sum(-1)


def test_the_sides_are_weighted_by_the_lengthscales_at_the_volume_of_the_cube() -> None:
    X = torch.rand(8, 3, dtype=torch.float64)
    gp = SingleTaskGP(X, _bowl(X).unsqueeze(-1))
    gp.covar_module.lengthscale = torch.tensor([[1.0, 2.0, 4.0]], dtype=torch.float64)
    weights = lengthscale_weights(gp, 3)
    # w = ls / mean(ls) = (3/7, 6/7, 12/7), scaled to a product of 1: (1/2, 1, 2).
    torch.testing.assert_close(weights, torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64))
    network = DeepEnsemble(X, _bowl(X).unsqueeze(-1), ensemble_size=2, hidden_widths=(4,))
    assert lengthscale_weights(network, 3) is None


@pytest.mark.parametrize(("dim", "perturbed"), [(5, 1.0), (100, 0.2)])
def test_candidates_perturb_each_coordinate_with_probability_min_20_over_d(dim, perturbed):
    center = torch.full((dim,), 0.5, dtype=torch.float64)
    lower, upper = center - 0.1, center + 0.1
    candidates = turbo_candidates(center, lower, upper, 2000, seed=0)
    assert candidates.shape == (2000, dim)
    assert ((candidates >= lower) & (candidates <= upper)).all()
    changed = candidates != center
    assert changed.any(-1).all()  # at least one coordinate per candidate
    assert abs(changed.double().mean().item() - perturbed) < 0.02
    torch.testing.assert_close(candidates, turbo_candidates(center, lower, upper, 2000, seed=0))
    assert turbo_num_candidates(5) == 2000 and turbo_num_candidates(20) == 4000
    assert turbo_num_candidates(60) == 5000


def test_tolerances_follow_turbo_and_a_collapse_restarts_with_the_data_set_aside() -> None:
    problem = FunctionProblem(_bowl, [[0.0] * 4, [1.0] * 4], vectorized=True)
    proposer = TurboProposer(length_min=0.3, num_candidates=200)
    optimizer = BayesianOptimizer.for_problem(
        problem, surrogate="gp", proposer=proposer, n_initial=5, seed=0
    )
    design, first = optimizer.run(problem, steps=1, q=3)
    assert (design.fit_points, first.fit_points) == (0, 5)
    region = proposer.region
    # The tutorial's success tolerance; failures: ceil(max(4 / q, d / q)) = 2.
    assert (region.success_tolerance, region.tolerance(3)) == (10, 2)
    steps = 0
    while proposer.segment_start == 0:
        optimizer.run(problem, steps=1, q=3)
        steps += 1
        assert steps < 40, "the region never collapsed"
    collapse = proposer.segment_start
    assert collapse == optimizer.X.shape[0] and proposer.region.length == 0.8
    assert math.isinf(proposer.region.best_value)
    # The restart design: ceil(5 / 3) = 2 batches of Sobol points, proposed without a fit.
    records = optimizer.run(problem, steps=3, q=3)
    assert [("restart_design" in r.details) for r in records] == [True, True, False]
    assert records[0].fit_seconds == records[1].fit_seconds == 0.0 < records[2].fit_seconds
    assert [r.fit_points for r in records] == [0, 0, 6]
    # The model after the design is fitted on the new run's 6 points only, around its best.
    assert optimizer.model.train_inputs[0].shape[-2] == 6
    new_run = optimizer.values[collapse : collapse + 6]
    assert proposer.region.best_value == pytest.approx(-float(new_run.min()))
    # The optimizer's best point is over all evaluations.
    assert optimizer.best().value == float(optimizer.values.min())


def test_turbo_round_trips_through_its_config_and_refuses_bad_settings() -> None:
    proposer = TurboProposer(success_tolerance=3, local_fit=4)
    rebuilt = proposer_from_config(proposer.to_config())
    assert isinstance(rebuilt, TurboProposer) and rebuilt.to_config() == proposer.to_config()
    assert rebuilt.local_fit == 4.0
    with pytest.raises(ValueError, match="local_fit must be a finite real number of at least 1"):
        TurboProposer(local_fit=0.5)
    with pytest.raises(ValueError, match="num_candidates must be a positive integer"):
        TurboProposer(num_candidates=0)
    with pytest.raises(ValueError, match="length_min <= length_init"):
        TurboProposer(length_min=0.9)
    problem = FunctionProblem(_bowl, [[0.0] * 2, [1.0] * 2], vectorized=True)
    optimizer = BayesianOptimizer.for_problem(
        problem, surrogate="gp", proposer=TurboProposer(), n_initial=4
    )
    optimizer.run(problem, steps=1, q=2)
    # The first BO step's batch size set the tolerances and the restart design.
    with pytest.raises(ValueError, match="run has batches of 2"):
        optimizer.ask(3)


def test_turbo_serves_minimisation_and_maximisation_only() -> None:
    bounds = [[0.0] * 2, [1.0] * 2]
    with pytest.raises(ValueError, match="not target 1"):
        BayesianOptimizer(bounds, proposer=TurboProposer(), objective=HitTarget(1.0))
    composite = Composite(lambda Y: Y.sum(-1), num_outputs=2)
    with pytest.raises(ValueError, match="maximises the model's single output"):
        BayesianOptimizer(bounds, proposer=TurboProposer(), objective=composite)


def test_thompson_samples_factorise_the_candidates_exactly(monkeypatch) -> None:
    sizes = []
    sampler = turbo.MaxPosteriorSampling

    class Recording(sampler):
        def forward(self, X, num_samples=1, observation_noise=False):
            sizes.append(gpytorch.settings.max_cholesky_size.value())
            return super().forward(X, num_samples=num_samples)

    monkeypatch.setattr(turbo, "MaxPosteriorSampling", Recording)
    problem = FunctionProblem(_bowl, [[0.0] * 4, [1.0] * 4], vectorized=True)
    proposer = TurboProposer(num_candidates=900)
    optimizer = BayesianOptimizer.for_problem(
        problem, surrogate="gp", proposer=proposer, n_initial=4, seed=0
    )
    optimizer.run(problem, steps=1, q=2)
    assert sizes == [math.inf]


def test_batch_thompson_spreads_an_ensembles_batch_over_turbos_candidates() -> None:
    problem = FunctionProblem(_bowl, [[0.0] * 4, [1.0] * 4], vectorized=True)
    proposer = TurboProposer(num_candidates=500, batch_thompson=True)
    optimizer = BayesianOptimizer.for_problem(
        problem, surrogate="deep-ensemble", proposer=proposer, n_initial=8, seed=0
    )
    optimizer.run(problem, steps=0)
    batch = optimizer.ask(12)
    # Inside the cube region of side 0.8 around the best point (a network has no
    # lengthscales), and 12 distinct points from 5 members: every pair at least 1% of the
    # region's diagonal apart, and none on an evaluated point.
    center = optimizer.X[optimizer.values.argmin()]
    lower, upper = (center - 0.4).clamp(0, 1), (center + 0.4).clamp(0, 1)
    assert ((batch >= lower) & (batch <= upper)).all()
    unit = (batch - lower) / (upper - lower)
    distances = torch.cdist(unit, unit) + torch.eye(12, dtype=unit.dtype)
    assert distances.min() > 0.01 * math.sqrt(4)
    assert torch.cdist(batch, optimizer.X).min() > 0
    assert proposer_from_config(proposer.to_config()).batch_thompson


def test_candidates_follow_the_device_of_the_region() -> None:
    # Drawn on the CPU and moved: meta tensors (no values) fail on a CPU tensor left behind.
    center = torch.full((4,), 0.5, dtype=torch.float64, device="meta")
    candidates = turbo_candidates(center, center - 0.1, center + 0.1, 64, seed=0)
    assert candidates.device.type == "meta" and candidates.shape == (64, 4)
