"""Leaky EI and q-Leaky EI: closed form, Theorem 1, gradients, crafted samples."""

from __future__ import annotations

import warnings

import pytest
import torch
from botorch.acquisition import ExpectedImprovement, qExpectedImprovement
from botorch.acquisition.objective import GenericMCObjective, ScalarizedPosteriorTransform
from botorch.optim import optimize_acqf, optimize_acqf_discrete
from botorch.sampling import SobolQMCNormalSampler
from torch.nn.functional import leaky_relu

from botorch_nn_uq.acquisition import LeakyExpectedImprovement, qLeakyExpectedImprovement
from tests.acquisition.conftest import (
    DTYPE,
    CoordinateEnsembleModel,
    LinearEnsembleModel,
    all_members_sampler,
    make_gp,
)
from tests.testing import seeded_rand, seeded_randn


def plain_ei(model, best_f, maximize=True, posterior_transform=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # A float64 tensor: BoTorch stores a Python float as float32.
        return ExpectedImprovement(
            model,
            best_f=torch.tensor(best_f, dtype=DTYPE),
            maximize=maximize,
            posterior_transform=posterior_transform,
        )


def plain_qei(model, best_f, sampler, tkwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return qExpectedImprovement(model, best_f=torch.tensor(best_f, **tkwargs), sampler=sampler)


@pytest.fixture
def test_X() -> torch.Tensor:
    return torch.rand(6, 1, 2, generator=torch.Generator().manual_seed(3), dtype=DTYPE)


def linear_ensemble(tkwargs: dict, num_members: int = 16, seed: int = 0) -> LinearEnsembleModel:
    """Members ``w_kᵀx`` with ``w_k ∈ [−1, 1]²``: values in ``[−2, 2]`` on the unit square."""
    weights = 2 * seeded_rand(num_members, 2, seed=seed, **tkwargs) - 1
    return LinearEnsembleModel(weights, torch.zeros(num_members, **tkwargs))


def test_closed_form_equals_million_sample_monte_carlo(gp, test_X):
    best_f, slope = 0.8, 0.05
    values = LeakyExpectedImprovement(gp, best_f=best_f, negative_slope=slope)(test_X)
    posterior = gp.posterior(test_X)
    mean, std = posterior.mean.reshape(-1, 1), posterior.variance.sqrt().reshape(-1, 1)
    normal = torch.randn(
        test_X.shape[0], 1_000_000, generator=torch.Generator().manual_seed(0), dtype=DTYPE
    )
    utilities = leaky_relu(mean + std * normal - best_f, negative_slope=slope)
    estimate = utilities.mean(-1)
    standard_error = utilities.std(-1) / 1_000_000**0.5
    assert ((values - estimate).abs() < 4 * standard_error).all()


@pytest.mark.parametrize("maximize", [True, False])
def test_difference_to_ei_is_slope_times_expected_shortfall(gp, test_X, maximize):
    # LeakyReLU_δ(t) − ReLU(t) = δ·min(t, 0), so L-EI − EI = −δ·E[(y* − f)₊] exactly,
    # which vanishes linearly as δ → 0 (Theorem 1).
    best_f = 0.5
    ei = plain_ei(gp, best_f, maximize)(test_X)
    shortfall = plain_ei(gp, best_f, not maximize)(test_X)
    for slope in (0.1, 0.01, 1e-3, 1e-4):
        leaky = LeakyExpectedImprovement(gp, best_f, negative_slope=slope, maximize=maximize)
        assert torch.allclose(leaky(test_X) - ei, -slope * shortfall, rtol=1e-9, atol=1e-15)
    exact_ei = LeakyExpectedImprovement(gp, best_f, negative_slope=0.0, maximize=maximize)
    assert torch.allclose(exact_ei(test_X), ei, rtol=1e-9, atol=1e-15)


def test_theorem_1_bound_for_bounded_ensemble(tkwargs):
    model = linear_ensemble(tkwargs)
    X = seeded_rand(10, 1, 2, seed=1, **tkwargs)
    lower, upper, best_f = -2.0, 2.0, 0.5
    sampler = all_members_sampler(16)
    ei = plain_qei(model, best_f, sampler, tkwargs)(X)
    for slope in (0.1, 0.01, 1e-3):
        leaky = qLeakyExpectedImprovement(model, best_f, negative_slope=slope, sampler=sampler)(X)
        assert ((leaky - ei).abs() <= slope * (upper - lower)).all()


def test_gradient_is_non_zero_where_ei_gradient_vanishes(gp):
    X = torch.tensor([[[0.3, 0.6]]], dtype=DTYPE, requires_grad=True)
    posterior = gp.posterior(X)
    far_best_f = (posterior.mean + 60 * posterior.variance.sqrt()).item()
    (ei_gradient,) = torch.autograd.grad(plain_ei(gp, far_best_f)(X).sum(), X)
    leaky = LeakyExpectedImprovement(gp, far_best_f)(X)
    (leaky_gradient,) = torch.autograd.grad(leaky.sum(), X)
    assert torch.count_nonzero(ei_gradient) == 0
    assert leaky.isfinite().all() and leaky < 0
    (mean_gradient,) = torch.autograd.grad(gp.posterior(X).mean.sum(), X)
    assert torch.allclose(leaky_gradient, 0.01 * mean_gradient, rtol=1e-6)


def test_q_gradient_is_non_zero_where_qei_gradient_vanishes(tkwargs):
    model = linear_ensemble(tkwargs)
    X = torch.tensor([[[0.2, 0.7], [0.9, 0.1]]], **tkwargs, requires_grad=True)
    best_f = 3.0  # above every member everywhere on the unit square
    sampler = all_members_sampler(16)
    (qei_gradient,) = torch.autograd.grad(plain_qei(model, best_f, sampler, tkwargs)(X).sum(), X)
    (leaky_gradient,) = torch.autograd.grad(
        qLeakyExpectedImprovement(model, best_f, sampler=sampler)(X).sum(), X
    )
    assert torch.count_nonzero(qei_gradient) == 0
    # Every point contributes δ·(f − y*) averaged over members: gradient δ·mean_k(w_k).
    expected = 0.01 * model.member_weights.mean(0).expand(2, 2)
    assert torch.allclose(leaky_gradient[0], expected)


def test_q_leaky_ei_on_crafted_samples(tkwargs):
    # Member k's value at point i is X[i, k]; best_f = 0 so improvements are X itself.
    X = torch.tensor([[1.0, -1.0, 0.0], [2.0, -2.0, -1.0], [2.0, -3.0, 0.0]], **tkwargs)
    slope = 0.01
    acqf = qLeakyExpectedImprovement(
        CoordinateEnsembleModel(), best_f=0.0, negative_slope=slope, sampler=all_members_sampler(3)
    )
    # member 0: I = (1, 2, 2), tie at a positive maximum -> δ·1 + 2 + 2
    # member 1: I = (−1, −2, −3), all negative -> δ·(−6)
    # member 2: I = (0, −1, 0), maximum 0 is not positive -> δ·(−1)
    expected = ((4 + slope) + slope * -6 + slope * -1) / 3
    assert torch.allclose(acqf(X), torch.tensor(expected, **tkwargs))
    # Not LeakyReLU(max_i I_i), which would give (2 + δ·(−1) + 0)/3.
    assert not torch.allclose(acqf(X), torch.tensor((2 - slope) / 3, **tkwargs))


def test_q_equal_one_reduces_to_leaky_relu_mean(tkwargs):
    X = seeded_randn(7, 1, 5, seed=2, **tkwargs)
    best_f, slope = 0.3, 0.2
    acqf = qLeakyExpectedImprovement(
        CoordinateEnsembleModel(),
        best_f=best_f,
        negative_slope=slope,
        sampler=all_members_sampler(5),
    )
    expected = leaky_relu(X[:, 0, :] - best_f, negative_slope=slope).mean(-1)
    assert torch.allclose(acqf(X), expected)


def test_q_leaky_ei_with_gp_matches_analytic_for_q_equal_one(gp, test_X):
    sampler = SobolQMCNormalSampler(sample_shape=torch.Size([2**14]), seed=0)
    mc = qLeakyExpectedImprovement(gp, best_f=0.8, negative_slope=0.05, sampler=sampler)(test_X)
    analytic = LeakyExpectedImprovement(gp, best_f=0.8, negative_slope=0.05)(test_X)
    assert torch.allclose(mc, analytic, rtol=2e-3, atol=1e-4)


def test_q_leaky_ei_with_ensemble_posterior_default_sampler_in_optimize_acqf(bounds):
    model = linear_ensemble({"dtype": DTYPE})
    acqf = qLeakyExpectedImprovement(model, best_f=1.5)
    candidates, value = optimize_acqf(acqf, bounds, q=2, num_restarts=2, raw_samples=32)
    assert candidates.shape == (2, 2)
    assert ((candidates >= 0) & (candidates <= 1)).all()
    assert value.isfinite()
    choices = torch.rand(20, 2, generator=torch.Generator().manual_seed(0), dtype=DTYPE)
    discrete, _ = optimize_acqf_discrete(acqf, q=2, choices=choices)
    assert discrete.shape == (2, 2)


def test_analytic_and_mc_in_optimize_acqf_with_gp(gp, bounds):
    raw_X = torch.rand(64, 1, 2, generator=torch.Generator().manual_seed(5), dtype=DTYPE)
    analytic = LeakyExpectedImprovement(gp, best_f=1.0)
    candidate, value = optimize_acqf(analytic, bounds, q=1, num_restarts=4, raw_samples=64)
    assert candidate.shape == (1, 2)
    assert value >= analytic(raw_X).max() - 1e-9
    sampler = SobolQMCNormalSampler(sample_shape=torch.Size([64]), seed=0)
    mc = qLeakyExpectedImprovement(gp, best_f=1.0, sampler=sampler)
    candidates, value = optimize_acqf(mc, bounds, q=3, num_restarts=2, raw_samples=16)
    assert candidates.shape == (3, 2) and value.isfinite()


def test_shapes_follow_botorch_conventions(gp):
    X = torch.rand(4, 3, 1, 2, dtype=DTYPE)
    assert LeakyExpectedImprovement(gp, best_f=0.5)(X).shape == (4, 3)
    sampler = SobolQMCNormalSampler(sample_shape=torch.Size([32]), seed=0)
    assert qLeakyExpectedImprovement(gp, 0.5, sampler=sampler)(
        torch.rand(4, 3, 2, dtype=DTYPE)
    ).shape == (4,)
    with pytest.raises(AssertionError, match="q=1"):
        LeakyExpectedImprovement(gp, best_f=0.5)(torch.rand(4, 2, 2, dtype=DTYPE))


def test_x_pending_is_appended_to_the_batch(gp):
    sampler = SobolQMCNormalSampler(sample_shape=torch.Size([64]), seed=0)
    pending = torch.tensor([[0.5, 0.5]], dtype=DTYPE)
    X = torch.rand(3, 2, 2, dtype=DTYPE)
    with_pending = qLeakyExpectedImprovement(gp, 0.5, sampler=sampler, X_pending=pending)(X)
    sampler = SobolQMCNormalSampler(sample_shape=torch.Size([64]), seed=0)
    joint = qLeakyExpectedImprovement(gp, 0.5, sampler=sampler)(
        torch.cat([X, pending.expand(3, 1, 2)], dim=-2)
    )
    assert torch.allclose(with_pending, joint)


def test_posterior_transform_and_objective_scalarise_multi_output_models(test_X):
    model = make_gp(num_outputs=2)
    weights = torch.tensor([0.7, 0.3], dtype=DTYPE)
    transform = ScalarizedPosteriorTransform(weights)
    leaky = LeakyExpectedImprovement(model, best_f=0.6, posterior_transform=transform)(test_X)
    ei = plain_ei(model, 0.6, posterior_transform=transform)(test_X)
    shortfall = plain_ei(model, 0.6, maximize=False, posterior_transform=transform)(test_X)
    assert torch.allclose(leaky, ei - 0.01 * shortfall, rtol=1e-9, atol=1e-15)
    # Different base samples (1-d versus 2-d posterior): agreement up to MC error.
    sampler = SobolQMCNormalSampler(sample_shape=torch.Size([4096]), seed=0)
    via_transform = qLeakyExpectedImprovement(
        model, 0.6, sampler=sampler, posterior_transform=transform
    )
    sampler = SobolQMCNormalSampler(sample_shape=torch.Size([4096]), seed=0)
    via_objective = qLeakyExpectedImprovement(
        model, 0.6, sampler=sampler, objective=GenericMCObjective(lambda Y, X: Y @ weights)
    )
    X = torch.rand(3, 2, 2, dtype=DTYPE)
    assert torch.allclose(via_transform(X), via_objective(X), rtol=2e-3)
    with pytest.raises(Exception, match="posterior transform"):
        LeakyExpectedImprovement(model, best_f=0.6)


@pytest.mark.parametrize("slope", [-0.01, 1.0, 1.5])
def test_negative_slope_outside_unit_interval_raises(gp, slope):
    with pytest.raises(ValueError, match=r"negative_slope must be a real number in \[0, 1\)"):
        LeakyExpectedImprovement(gp, best_f=0.0, negative_slope=slope)
    with pytest.raises(ValueError, match=r"negative_slope must be a real number in \[0, 1\)"):
        qLeakyExpectedImprovement(gp, best_f=0.0, negative_slope=slope)


def test_float32_models_work(test_X):
    model = make_gp().to(torch.float32)
    values = LeakyExpectedImprovement(model, best_f=0.5)(test_X.float())
    assert values.dtype == torch.float32 and values.isfinite().all()
