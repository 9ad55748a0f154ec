"""Robust target-value EI / PoI / LCB: closed forms against Monte Carlo and scipy."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from botorch.acquisition.objective import ScalarizedPosteriorTransform
from botorch.optim import optimize_acqf, optimize_acqf_discrete
from botorch.sampling import SobolQMCNormalSampler
from scipy.stats import ncx2

from botorch_nn_uq.acquisition import (
    LogRobustTargetProbabilityOfImprovement,
    RobustTargetExpectedImprovement,
    RobustTargetLowerConfidenceBound,
    RobustTargetProbabilityOfImprovement,
    compute_e_min,
    first_order_input_noise_variance,
    qRobustTargetExpectedImprovement,
)
from botorch_nn_uq.acquisition.noncentral_chi2 import (
    sankaran_squared_gaussian_expected_improvement,
    sankaran_squared_gaussian_quantile,
)
from tests.acquisition.conftest import DTYPE, LinearEnsembleModel, all_members_sampler, make_gp

TARGET = 0.8
ALEATORIC = 0.01
N_CANDIDATES = 32


@pytest.fixture
def candidates() -> torch.Tensor:
    return torch.rand(N_CANDIDATES, 1, 2, generator=torch.Generator().manual_seed(4), dtype=DTYPE)


def posterior_moments(model, X):
    posterior = model.posterior(X)
    return posterior.mean.reshape(-1), posterior.variance.clamp_min(1e-12).reshape(-1)


def squared_error_samples(model, X, aleatoric=ALEATORIC, num_samples=2**16):
    """QMC samples of Ê = (m̂ − y•)² + σ_a², shape ``num_samples x n``."""
    sampler = SobolQMCNormalSampler(sample_shape=torch.Size([num_samples]), seed=0)
    samples = sampler(model.posterior(X)).reshape(num_samples, -1)
    return (samples - TARGET).square() + aleatoric


def test_closed_forms_equal_monte_carlo_estimates(gp, candidates):
    e_min = 0.2
    squared_error = squared_error_samples(gp, candidates)
    ei = RobustTargetExpectedImprovement(gp, TARGET, e_min, ALEATORIC)(candidates)
    poi = RobustTargetProbabilityOfImprovement(gp, TARGET, e_min, ALEATORIC, zeta=0.01)(candidates)
    mc_ei = (e_min - squared_error).clamp_min(0).mean(0)
    mc_poi = (squared_error <= e_min - 0.01).to(DTYPE).mean(0)
    # Relative errors are meaningful where a fair share of the samples improves.
    informative = mc_poi > 0.02
    assert informative.sum() >= 8
    relative_error = ((ei - mc_ei) / mc_ei)[informative].abs()
    assert relative_error.max() < 1e-3
    assert ((poi - mc_poi) / mc_poi)[informative].abs().max() < 1e-3
    for quantile in (0.1, 0.5):
        lcb = RobustTargetLowerConfidenceBound(gp, TARGET, ALEATORIC, quantile=quantile)(candidates)
        mc_quantile = squared_error.quantile(quantile, dim=0)
        assert ((-lcb - mc_quantile) / mc_quantile).abs().max() < 1e-3


def test_q_robust_ei_with_q_equal_one_estimates_the_closed_form(gp, candidates):
    e_min = 0.2
    sampler = SobolQMCNormalSampler(sample_shape=torch.Size([2**16]), seed=0)
    mc = qRobustTargetExpectedImprovement(gp, TARGET, e_min, ALEATORIC, sampler=sampler)(candidates)
    analytic = RobustTargetExpectedImprovement(gp, TARGET, e_min, ALEATORIC)(candidates)
    probability = RobustTargetProbabilityOfImprovement(gp, TARGET, e_min, ALEATORIC)(candidates)
    informative = probability > 0.02
    assert ((mc - analytic) / analytic)[informative].abs().max() < 1e-3


def test_closed_forms_equal_scipy_ncx2(gp, candidates):
    e_min, zeta, quantile = 0.3, 0.02, 0.25
    mean, variance = (t.detach().numpy() for t in posterior_moments(gp, candidates))
    lam = (mean - TARGET) ** 2 / variance
    e = (e_min - ALEATORIC) / variance
    corrected_eq13 = variance * (
        e * ncx2.cdf(e, 1, lam) - ncx2.cdf(e, 3, lam) - lam * ncx2.cdf(e, 5, lam)
    )
    ei = RobustTargetExpectedImprovement(gp, TARGET, e_min, ALEATORIC)(candidates)
    np.testing.assert_allclose(ei.detach().numpy(), corrected_eq13, rtol=1e-8, atol=1e-14)
    poi = RobustTargetProbabilityOfImprovement(gp, TARGET, e_min, ALEATORIC, zeta=zeta)(candidates)
    expected_poi = ncx2.cdf((e_min - zeta - ALEATORIC) / variance, 1, lam)
    np.testing.assert_allclose(poi.detach().numpy(), expected_poi, rtol=1e-8, atol=1e-14)
    log_poi = LogRobustTargetProbabilityOfImprovement(gp, TARGET, e_min, ALEATORIC, zeta=zeta)
    representable = expected_poi > 1e-300  # scipy underflows to 0 where log PoI is finite
    np.testing.assert_allclose(
        log_poi(candidates).detach().numpy()[representable],
        np.log(expected_poi[representable]),
        rtol=1e-8,
        atol=1e-14,
    )
    lcb = RobustTargetLowerConfidenceBound(gp, TARGET, ALEATORIC, quantile=quantile)(candidates)
    expected_lcb = -(ALEATORIC + variance * ncx2.ppf(quantile, 1, lam))
    np.testing.assert_allclose(lcb.detach().numpy(), expected_lcb, rtol=1e-8)


@pytest.mark.parametrize(
    "zero",
    [
        0.0,
        torch.zeros(N_CANDIDATES, 1, dtype=DTYPE),
        lambda X: torch.zeros(X.shape[:-1], dtype=X.dtype),
    ],
    ids=["float", "tensor", "callable"],
)
def test_zero_aleatoric_variance_gives_non_robust_noncentral_chi2(gp, candidates, zero):
    # Uhrenholt & Jensen's EI / LCB for the squared distance to the target.
    e_min, quantile = 0.2, 0.3
    mean, variance = (t.detach().numpy() for t in posterior_moments(gp, candidates))
    lam, e = (mean - TARGET) ** 2 / variance, e_min / variance
    expected_ei = variance * (
        e * ncx2.cdf(e, 1, lam) - ncx2.cdf(e, 3, lam) - lam * ncx2.cdf(e, 5, lam)
    )
    ei = RobustTargetExpectedImprovement(gp, TARGET, e_min, zero)(candidates)
    np.testing.assert_allclose(ei.detach().numpy(), expected_ei, rtol=1e-8, atol=1e-14)
    poi = RobustTargetProbabilityOfImprovement(gp, TARGET, e_min, zero)(candidates)
    np.testing.assert_allclose(poi.detach().numpy(), ncx2.cdf(e, 1, lam), rtol=1e-8, atol=1e-14)
    lcb = RobustTargetLowerConfidenceBound(gp, TARGET, zero, quantile=quantile)(candidates)
    np.testing.assert_allclose(
        lcb.detach().numpy(), -variance * ncx2.ppf(quantile, 1, lam), rtol=1e-8
    )


def test_aleatoric_variance_is_a_deterministic_offset(gp, candidates):
    # Raising σ_a² by Δ is the same as lowering E_min by Δ (EI) or shifting the quantile (LCB).
    ei_high = RobustTargetExpectedImprovement(gp, TARGET, 0.3, 0.05)(candidates)
    ei_low = RobustTargetExpectedImprovement(gp, TARGET, 0.26, 0.01)(candidates)
    assert torch.allclose(ei_high, ei_low)
    lcb_high = RobustTargetLowerConfidenceBound(gp, TARGET, 0.05)(candidates)
    lcb_low = RobustTargetLowerConfidenceBound(gp, TARGET, 0.01)(candidates)
    assert torch.allclose(lcb_high, lcb_low - 0.04)


def test_ei_and_poi_vanish_where_aleatoric_variance_exceeds_e_min(gp, candidates):
    ei = RobustTargetExpectedImprovement(gp, TARGET, best_f=0.05, aleatoric_variance=0.05)
    poi = RobustTargetProbabilityOfImprovement(gp, TARGET, best_f=0.05, aleatoric_variance=0.08)
    log_poi = LogRobustTargetProbabilityOfImprovement(gp, TARGET, 0.05, 0.02, zeta=0.04)
    X = candidates.clone().requires_grad_(True)
    for acqf in (ei, poi):
        values = acqf(X)
        (gradient,) = torch.autograd.grad(values.sum(), X)
        assert torch.equal(values, torch.zeros_like(values))
        assert torch.equal(gradient, torch.zeros_like(gradient))
    log_values = log_poi(X)
    (gradient,) = torch.autograd.grad(log_values.sum(), X)
    assert log_values.isneginf().all()
    assert torch.equal(gradient, torch.zeros_like(gradient))


def test_log_poi_is_finite_where_poi_underflows(gp):
    X = torch.tensor([[[0.5, 0.5]]], dtype=DTYPE)
    mean, variance = posterior_moments(gp, X)
    # Improvement needs a deviation of ~50 posterior standard deviations.
    target = (mean + 50 * variance.sqrt()).item()
    poi = RobustTargetProbabilityOfImprovement(gp, target, best_f=0.01, aleatoric_variance=0.0)(X)
    log_poi = LogRobustTargetProbabilityOfImprovement(
        gp, target, best_f=0.01, aleatoric_variance=0.0
    )
    assert poi.item() < 1e-300
    assert log_poi(X).isfinite().all() and log_poi(X) < -700


# GPyTorch rounds the slightly negative variances it computes at the data up to 1e-10.
@pytest.mark.filterwarnings("ignore:Negative variance values detected")
def test_finite_values_and_gradients_at_and_near_noise_free_training_points():
    # With 1e-10 observation noise, σ_e² at the data is ~1e-10: λ up to ~1e10.
    model = make_gp(noise=1e-10)
    train_X = model.train_inputs[0]
    X = torch.cat([train_X, train_X + 1e-7]).unsqueeze(-2).clone().requires_grad_(True)
    acqfs = [
        RobustTargetExpectedImprovement(model, TARGET, 0.05, ALEATORIC),
        RobustTargetProbabilityOfImprovement(model, TARGET, 0.05, ALEATORIC),
        RobustTargetExpectedImprovement(model, TARGET, 0.005, ALEATORIC),  # c < 0
        RobustTargetLowerConfidenceBound(model, TARGET, ALEATORIC),
        RobustTargetLowerConfidenceBound(model, TARGET, ALEATORIC, approximation="sankaran"),
        RobustTargetExpectedImprovement(model, TARGET, 0.05, ALEATORIC, approximation="sankaran"),
    ]
    posterior = model.posterior(X)
    noncentrality = (posterior.mean - TARGET).square() / posterior.variance.clamp_min(1e-12)
    assert noncentrality.max() > 1e8
    for acqf in acqfs:
        values = acqf(X)
        (gradient,) = torch.autograd.grad(values.sum(), X)
        assert values.isfinite().all() and gradient.isfinite().all()


def test_callable_aleatoric_variance_is_differentiated(gp):
    def heteroscedastic(X: torch.Tensor) -> torch.Tensor:
        return 0.01 + 0.05 * X[..., 0].square()

    X = torch.tensor([[[0.3, 0.6]], [[0.7, 0.2]]], dtype=DTYPE, requires_grad=True)
    acqfs = [
        RobustTargetExpectedImprovement(gp, TARGET, 0.1, heteroscedastic),
        RobustTargetProbabilityOfImprovement(gp, TARGET, 0.1, heteroscedastic),
        RobustTargetLowerConfidenceBound(gp, TARGET, heteroscedastic, quantile=0.2),
    ]
    for acqf in acqfs:
        assert torch.autograd.gradcheck(acqf, (X,))
    constant = RobustTargetLowerConfidenceBound(gp, TARGET, 0.0, quantile=0.2)
    (with_variance,) = torch.autograd.grad(acqfs[2](X).sum(), X)
    (without_variance,) = torch.autograd.grad(constant(X).sum(), X)
    assert torch.allclose(with_variance[..., 0] - without_variance[..., 0], -0.1 * X[..., 0])


def test_first_order_input_noise_variance(gp, candidates):
    input_variance = torch.tensor([0.01, 0.04], dtype=DTYPE)
    variance_function = first_order_input_noise_variance(gp, input_variance)
    X = candidates.clone().requires_grad_(True)
    (mean_gradient,) = torch.autograd.grad(gp.posterior(X).mean.sum(), X)
    expected = (mean_gradient.square() * input_variance).sum(-1)
    assert torch.allclose(variance_function(candidates), expected)
    lcb = RobustTargetLowerConfidenceBound(gp, TARGET, variance_function)
    assert torch.autograd.gradcheck(lcb, (candidates[:3].clone().requires_grad_(True),))
    with pytest.raises(ValueError, match="input_variance must be non-negative"):
        first_order_input_noise_variance(gp, -1.0)


def test_tensor_aleatoric_variance_per_candidate(gp, candidates):
    variance = 0.001 + 0.01 * torch.rand(
        N_CANDIDATES, 1, generator=torch.Generator().manual_seed(0), dtype=DTYPE
    )
    per_candidate = RobustTargetExpectedImprovement(gp, TARGET, 0.2, variance)(candidates)
    one_by_one = torch.stack(
        [
            RobustTargetExpectedImprovement(gp, TARGET, 0.2, v.item())(x.unsqueeze(0)).squeeze(0)
            for x, v in zip(candidates, variance, strict=True)
        ]
    )
    assert torch.allclose(per_candidate, one_by_one)
    choice, _ = optimize_acqf_discrete(
        RobustTargetExpectedImprovement(gp, TARGET, 0.2, variance),
        q=1,
        choices=candidates.squeeze(-2),
    )
    assert torch.equal(choice, candidates[per_candidate.argmax()])


def test_shape_mismatch_raises(gp, candidates):
    wrong = torch.full((N_CANDIDATES - 1, 1), 0.01, dtype=DTYPE)
    with pytest.raises(ValueError, match=r"does not broadcast to the candidates"):
        RobustTargetExpectedImprovement(gp, TARGET, 0.2, wrong)(candidates)
    with pytest.raises(ValueError, match=r"aleatoric_variance\(X\) has shape"):
        RobustTargetLowerConfidenceBound(gp, TARGET, lambda X: torch.ones(5, dtype=DTYPE))(
            candidates
        )
    with pytest.raises(ValueError, match="target must be a scalar"):
        RobustTargetExpectedImprovement(gp, torch.zeros(2), 0.2, 0.01)


def test_negative_aleatoric_variance_raises(gp, candidates):
    with pytest.raises(ValueError, match="aleatoric_variance must be non-negative"):
        RobustTargetExpectedImprovement(gp, TARGET, 0.2, -0.01)
    with pytest.raises(ValueError, match="aleatoric_variance must be non-negative"):
        qRobustTargetExpectedImprovement(gp, TARGET, 0.2, torch.tensor([0.1, -0.1]))
    acqf = RobustTargetLowerConfidenceBound(gp, TARGET, lambda X: X[..., 0] - 0.5)
    with pytest.raises(ValueError, match="aleatoric_variance must be non-negative"):
        acqf(candidates)


@pytest.mark.parametrize("quantile", [0.0, 1.0, -0.5, 2.0])
def test_quantile_outside_unit_interval_raises(gp, quantile):
    with pytest.raises(ValueError, match=r"quantile must be a real number in \(0, 1\)"):
        RobustTargetLowerConfidenceBound(gp, TARGET, 0.01, quantile=quantile)


def test_other_bad_arguments_raise(gp):
    with pytest.raises(ValueError, match="zeta must be non-negative"):
        RobustTargetProbabilityOfImprovement(gp, TARGET, 0.2, 0.01, zeta=-0.1)
    with pytest.raises(ValueError, match="Unknown approximation .wilson."):
        RobustTargetExpectedImprovement(gp, TARGET, 0.2, 0.01, approximation="wilson")


def test_sankaran_option(gp, candidates):
    mean, variance = posterior_moments(gp, candidates)
    ei = RobustTargetExpectedImprovement(gp, TARGET, 0.2, ALEATORIC, approximation="sankaran")
    threshold = torch.tensor(0.2 - ALEATORIC, dtype=DTYPE)
    expected = sankaran_squared_gaussian_expected_improvement(
        threshold, mean - TARGET, variance.sqrt()
    )
    assert torch.allclose(ei(candidates), expected)
    lcb = RobustTargetLowerConfidenceBound(
        gp, TARGET, ALEATORIC, quantile=0.3, approximation="sankaran"
    )
    expected = -(
        ALEATORIC + sankaran_squared_gaussian_quantile(0.3, mean - TARGET, variance.sqrt())
    )
    assert torch.allclose(lcb(candidates), expected)
    exact = RobustTargetLowerConfidenceBound(gp, TARGET, ALEATORIC, quantile=0.3)(candidates)
    assert not torch.allclose(lcb(candidates), exact, rtol=1e-6)
    poi = RobustTargetProbabilityOfImprovement(gp, TARGET, 0.2, ALEATORIC, approximation="sankaran")
    assert ((poi(candidates) >= 0) & (poi(candidates) <= 1)).all()


def test_compute_e_min():
    Y = torch.tensor([[0.3], [-0.1], [0.5]], dtype=DTYPE)
    assert torch.allclose(compute_e_min(Y, 0.0, 0.01), torch.tensor(0.02, dtype=DTYPE))
    variance = torch.tensor([[0.0], [0.5], [0.0]], dtype=DTYPE)
    assert torch.allclose(compute_e_min(Y, 0.0, variance), torch.tensor(0.09, dtype=DTYPE))
    assert torch.allclose(compute_e_min(Y.squeeze(-1), 0.5, 0.0), torch.tensor(0.0, dtype=DTYPE))
    batched = torch.stack([Y, Y + 1])
    assert compute_e_min(batched, 0.0, 0.0).shape == (2,)
    with pytest.raises(ValueError, match="one output"):
        compute_e_min(torch.zeros(3, 2), 0.0, 0.0)
    with pytest.raises(ValueError, match="does not broadcast"):
        compute_e_min(Y, 0.0, torch.zeros(3))
    with pytest.raises(ValueError, match="non-negative"):
        compute_e_min(Y, 0.0, -1.0)


def test_compute_e_min_evaluates_a_callable_variance_at_the_inputs():
    X = torch.tensor([[0.0, 1.0], [0.5, 0.0], [1.0, 1.0]], dtype=DTYPE)
    Y = torch.tensor([[0.3], [-0.1], [0.5]], dtype=DTYPE)

    def variance(X: torch.Tensor) -> torch.Tensor:
        assert X.shape == (3, 1, 2)  # n x q = 1 x d, as the acquisition functions call it
        return 0.1 * X[..., 0]

    # Squared errors plus variances: 0.09 + 0, 0.01 + 0.05, 0.25 + 0.1.
    expected = torch.tensor(0.06, dtype=DTYPE)
    torch.testing.assert_close(compute_e_min(Y, 0.0, variance, X=X), expected)
    torch.testing.assert_close(compute_e_min(Y.squeeze(-1), 0.0, variance, X=X), expected)
    tensor_variance = 0.1 * X[:, :1]
    assert compute_e_min(Y, 0.0, variance, X=X) == compute_e_min(Y, 0.0, tensor_variance)
    with pytest.raises(ValueError, match="needs the observed inputs X"):
        compute_e_min(Y, 0.0, variance)
    with pytest.raises(ValueError, match="non-negative"):
        compute_e_min(Y, 0.0, lambda X: -X[..., 0], X=X)


def test_analytic_acquisitions_in_optimize_acqf(gp, bounds):
    raw_X = torch.rand(128, 1, 2, generator=torch.Generator().manual_seed(7), dtype=DTYPE)
    acqfs = [
        RobustTargetExpectedImprovement(gp, TARGET, 0.1, ALEATORIC),
        RobustTargetProbabilityOfImprovement(gp, TARGET, 0.1, ALEATORIC),
        LogRobustTargetProbabilityOfImprovement(gp, TARGET, 0.1, ALEATORIC),
        RobustTargetLowerConfidenceBound(gp, TARGET, ALEATORIC),
    ]
    for acqf in acqfs:
        with torch.no_grad():
            starts = raw_X[acqf(raw_X).topk(2).indices]
        candidate, value = optimize_acqf(
            acqf, bounds, q=1, num_restarts=2, batch_initial_conditions=starts
        )
        assert candidate.shape == (1, 2) and value.isfinite()
        with torch.no_grad():
            assert value >= acqf(starts).max()
        discrete, _ = optimize_acqf_discrete(acqf, q=1, choices=raw_X.squeeze(-2))
        assert torch.equal(discrete, raw_X[acqf(raw_X).argmax()])


def test_q_robust_ei_in_optimize_acqf_with_pending_points(gp, bounds):
    sampler = SobolQMCNormalSampler(sample_shape=torch.Size([128]), seed=0)
    pending = torch.tensor([[0.2, 0.2]], dtype=DTYPE)
    acqf = qRobustTargetExpectedImprovement(
        gp, TARGET, 0.1, lambda X: 0.01 + 0.01 * X[..., 1], sampler=sampler, X_pending=pending
    )
    candidates, value = optimize_acqf(acqf, bounds, q=2, num_restarts=2, raw_samples=32)
    assert candidates.shape == (2, 2) and value >= 0
    assert acqf(torch.rand(5, 3, 2, dtype=DTYPE)).shape == (5,)


def test_q_robust_ei_with_ensemble_equals_member_average(tkwargs):
    weights = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5], [-1.0, 1.0]], **tkwargs)
    model = LinearEnsembleModel(weights, torch.zeros(4, **tkwargs))
    X = torch.tensor([[[0.2, 0.9], [0.7, 0.4]]], **tkwargs)
    acqf = qRobustTargetExpectedImprovement(
        model, target=0.5, best_f=0.06, aleatoric_variance=0.01, sampler=all_members_sampler(4)
    )
    member_values = X[0] @ weights.T  # q x members
    improvement = (0.06 - (member_values - 0.5).square() - 0.01).clamp_min(0)
    expected = improvement.amax(0).mean()
    assert torch.allclose(acqf(X), expected)
    analytic = RobustTargetExpectedImprovement(model, 0.5, 0.06, 0.01)(X[:, :1])
    assert analytic.shape == (1,) and analytic.isfinite().all()


def test_posterior_transform_scalarises_multi_output_models(candidates):
    model = make_gp(num_outputs=2)
    transform = ScalarizedPosteriorTransform(torch.tensor([0.5, 0.5], dtype=DTYPE))
    acqf = RobustTargetLowerConfidenceBound(model, 0.5, 0.01, posterior_transform=transform)
    assert acqf(candidates).shape == (N_CANDIDATES,)
    with pytest.raises(Exception, match="posterior transform"):
        RobustTargetLowerConfidenceBound(model, 0.5, 0.01)


def test_float32(candidates):
    model = make_gp().to(torch.float32)
    X = candidates.float()
    for acqf in (
        RobustTargetExpectedImprovement(model, TARGET, 0.1, ALEATORIC),
        RobustTargetLowerConfidenceBound(model, TARGET, ALEATORIC),
    ):
        values = acqf(X)
        assert values.dtype == torch.float32 and values.isfinite().all()


def test_integer_observations_give_a_real_incumbent() -> None:
    e_min = compute_e_min(torch.tensor([[1], [3]]), target=2.5, aleatoric_variance=0.3)
    assert e_min.is_floating_point() and e_min.item() == pytest.approx(0.55)


def test_a_lower_confidence_bound_at_an_unresolvable_quantile_is_refused() -> None:
    model = make_gp()
    with pytest.raises(ValueError, match="too close to 0 or 1"):
        RobustTargetLowerConfidenceBound(
            model, target=0.0, aleatoric_variance=0.1, quantile=1 - 2**-53
        )
