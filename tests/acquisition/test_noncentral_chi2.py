"""Numerical truth of the squared-Gaussian (noncentral χ², 1 dof) maths."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.stats import ncx2

from botorch_nn_uq.acquisition.noncentral_chi2 import (
    check_resolvable_quantile,
    log_squared_gaussian_cdf,
    sankaran_noncentral_chi2_cdf,
    sankaran_squared_gaussian_cdf,
    sankaran_squared_gaussian_expected_improvement,
    sankaran_squared_gaussian_quantile,
    squared_gaussian_cdf,
    squared_gaussian_expected_improvement,
    squared_gaussian_quantile,
)

# The exact forms are checked against scipy, numerical integration and gradcheck in
# float64 (rtol 1e-8 and finite differences need it); the extreme-regime, zero-threshold
# and Sankaran tests run in both dtypes.
DTYPE = torch.float64


@pytest.fixture
def moderate_cases() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Thresholds, offsets and stds with noncentralities λ between ~1e-3 and ~100."""
    generator = torch.Generator().manual_seed(1)
    offset = torch.randn(40, generator=generator, dtype=DTYPE) * 2
    std = 0.2 + 1.5 * torch.rand(40, generator=generator, dtype=DTYPE)
    threshold = 0.05 + 6 * torch.rand(40, generator=generator, dtype=DTYPE)
    return threshold, offset, std


def normalised(threshold, offset, std) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``e = c/σ²``, ``λ = offset²/σ²`` and ``σ²`` as numpy arrays."""
    variance = std.square().numpy()
    return threshold.numpy() / variance, offset.square().numpy() / variance, variance


def test_cdf_matches_scipy_ncx2(moderate_cases):
    threshold, offset, std = moderate_cases
    e, lam, _ = normalised(threshold, offset, std)
    expected = ncx2.cdf(e, 1, lam)
    np.testing.assert_allclose(
        squared_gaussian_cdf(threshold, offset, std).numpy(), expected, rtol=1e-8
    )
    np.testing.assert_allclose(
        log_squared_gaussian_cdf(threshold, offset, std).numpy(),
        np.log(expected),
        rtol=1e-8,
        atol=1e-14,
    )


def test_expected_improvement_equals_corrected_eq13(moderate_cases):
    threshold, offset, std = moderate_cases
    e, lam, variance = normalised(threshold, offset, std)
    corrected = variance * (
        e * ncx2.cdf(e, 1, lam) - ncx2.cdf(e, 3, lam) - lam * ncx2.cdf(e, 5, lam)
    )
    printed = variance * (e * ncx2.cdf(e, 1, lam) - ncx2.cdf(e, 3, lam) + lam * ncx2.cdf(e, 5, lam))
    closed_form = squared_gaussian_expected_improvement(threshold, offset, std).numpy()
    np.testing.assert_allclose(closed_form, corrected, rtol=1e-8, atol=1e-300)
    # The sign printed in the paper gives a different (wrong) value wherever λF₅ matters.
    material = lam * ncx2.cdf(e, 5, lam) * variance > 1e-3
    assert material.sum() > 5
    assert not np.allclose(closed_form[material], printed[material], rtol=1e-3)


def test_expected_improvement_matches_numerical_integration():
    threshold, offset, std = (torch.tensor(v, dtype=DTYPE) for v in (1.3, 0.7, 0.4))
    grid = torch.linspace(-(1.3**0.5), 1.3**0.5, 200_001, dtype=DTYPE)
    density = torch.exp(-0.5 * ((grid - offset) / std).square()) / (std * (2 * torch.pi) ** 0.5)
    integral = torch.trapezoid((threshold - grid.square()) * density, grid)
    closed_form = squared_gaussian_expected_improvement(threshold, offset, std)
    assert torch.allclose(closed_form, integral, rtol=1e-8)


@pytest.mark.parametrize("quantile", [1e-4, 0.05, 0.3, 0.5, 0.9, 0.999])
def test_quantile_matches_scipy_ppf(moderate_cases, quantile):
    _, offset, std = moderate_cases
    _, lam, variance = normalised(torch.ones_like(offset), offset, std)
    expected = variance * ncx2.ppf(quantile, 1, lam)
    np.testing.assert_allclose(
        squared_gaussian_quantile(quantile, offset, std).numpy(), expected, rtol=1e-8
    )


def test_quantile_inverts_cdf_at_extreme_noncentrality():
    offset = torch.tensor([10.0, 1e-7, 0.0, 3.0], dtype=DTYPE)
    std = torch.tensor([1e-6, 1e-6, 1e-6, 1e-3], dtype=DTYPE)
    for quantile in (1e-6, 0.2, 0.8):
        value = squared_gaussian_quantile(quantile, offset, std)
        recovered = squared_gaussian_cdf(value, offset, std)
        assert torch.allclose(recovered, torch.full_like(recovered, quantile), rtol=1e-6)


def test_quantile_gradients_pass_gradcheck():
    offset = torch.tensor([0.3, -1.2, 2.0, 1e-3], dtype=DTYPE, requires_grad=True)
    std = torch.tensor([0.5, 0.1, 1.5, 0.2], dtype=DTYPE, requires_grad=True)
    for quantile in (0.05, 0.5, 0.95):
        assert torch.autograd.gradcheck(
            lambda o, s, q=quantile: squared_gaussian_quantile(q, o, s), (offset, std)
        )


def test_cdf_and_expected_improvement_pass_gradcheck():
    threshold = torch.tensor([0.5, 2.0, 0.01, 4.0], dtype=DTYPE, requires_grad=True)
    offset = torch.tensor([0.3, -1.2, 0.05, 1.0], dtype=DTYPE, requires_grad=True)
    std = torch.tensor([0.5, 0.3, 0.2, 1.5], dtype=DTYPE, requires_grad=True)
    for function in (
        squared_gaussian_cdf,
        log_squared_gaussian_cdf,
        squared_gaussian_expected_improvement,
    ):
        assert torch.autograd.gradcheck(function, (threshold, offset, std))


def test_finite_values_and_gradients_in_extreme_regimes(dtype):
    # λ = offset²/std² up to 1e14, thresholds c ≤ 0 and tiny, std at the 1e-6 clamp.
    threshold = torch.tensor([1.0, 0.25, 1e-12, -1.0, 0.0, 0.1, 1e-30, 1e-20, 4.0], dtype=dtype)
    offset = torch.tensor([10.0, 0.0, 1e-7, 0.5, 0.5, 3.0, 0.0, 1e-12, 1e-3], dtype=dtype)
    std = torch.tensor([1e-6, 1e-6, 1e-6, 1e-6, 1e-6, 1.0, 1e-3, 1e-6, 1e-6], dtype=dtype)
    threshold.requires_grad_(True)
    offset.requires_grad_(True)
    std.requires_grad_(True)
    for function in (
        squared_gaussian_cdf,
        squared_gaussian_expected_improvement,
        sankaran_squared_gaussian_cdf,
        sankaran_squared_gaussian_expected_improvement,
    ):
        value = function(threshold, offset, std)
        gradients = torch.autograd.grad(value.sum(), (threshold, offset, std))
        assert value.isfinite().all(), function.__name__
        assert all(gradient.isfinite().all() for gradient in gradients), function.__name__
    log_value = log_squared_gaussian_cdf(threshold, offset, std)
    gradients = torch.autograd.grad(log_value[log_value.isfinite()].sum(), (threshold, offset, std))
    assert log_value[threshold <= 0].isneginf().all()
    assert not log_value.isnan().any()
    assert all(gradient.isfinite().all() for gradient in gradients)
    for function in (squared_gaussian_quantile, sankaran_squared_gaussian_quantile):
        for quantile in (1e-6, 0.1, 0.9):
            value = function(quantile, offset, std)
            gradients = torch.autograd.grad(value.sum(), (offset, std))
            assert value.isfinite().all()
            assert all(gradient.isfinite().all() for gradient in gradients)


def test_zero_or_negative_threshold_gives_zero(dtype):
    offset = torch.tensor([0.0, 1.0], dtype=dtype)
    std = torch.tensor([1.0, 0.1], dtype=dtype)
    for threshold in (0.0, -2.0):
        threshold = torch.full_like(offset, threshold)
        assert torch.equal(
            squared_gaussian_cdf(threshold, offset, std), torch.zeros(2, dtype=dtype)
        )
        assert torch.equal(
            squared_gaussian_expected_improvement(threshold, offset, std),
            torch.zeros(2, dtype=dtype),
        )
        assert log_squared_gaussian_cdf(threshold, offset, std).isneginf().all()


def test_sankaran_approximates_ncx2_for_large_noncentrality():
    lam = torch.tensor([20.0, 100.0, 1e4], dtype=DTYPE)
    x = lam + 1 + torch.tensor([-2.0, 5.0, 50.0], dtype=DTYPE)
    approximate = sankaran_noncentral_chi2_cdf(x, 1, lam).numpy()
    np.testing.assert_allclose(approximate, ncx2.cdf(x.numpy(), 1, lam.numpy()), atol=5e-3)
    for df in (3, 5):
        np.testing.assert_allclose(
            sankaran_noncentral_chi2_cdf(x, df, lam).numpy(),
            ncx2.cdf(x.numpy(), df, lam.numpy()),
            atol=5e-3,
        )


def test_sankaran_forms_agree_with_exact_forms_for_large_noncentrality(dtype):
    offset = torch.tensor([2.0, -3.0, 1.5], dtype=dtype)
    std = torch.tensor([0.2, 0.3, 0.1], dtype=dtype)
    threshold = offset.square() + torch.tensor([0.5, -1.0, 0.3], dtype=dtype)
    assert torch.allclose(
        sankaran_squared_gaussian_cdf(threshold, offset, std),
        squared_gaussian_cdf(threshold, offset, std),
        atol=5e-3,
    )
    assert torch.allclose(
        sankaran_squared_gaussian_expected_improvement(threshold, offset, std),
        squared_gaussian_expected_improvement(threshold, offset, std),
        rtol=2e-2,
        atol=1e-3,
    )
    assert torch.allclose(
        sankaran_squared_gaussian_quantile(0.3, offset, std),
        squared_gaussian_quantile(0.3, offset, std),
        rtol=1e-2,
    )


def test_sankaran_normalised_and_original_units_agree(dtype):
    offset = torch.tensor([0.4, 1.0], dtype=dtype)
    std = torch.tensor([0.5, 0.25], dtype=dtype)
    threshold = torch.tensor([0.3, 2.0], dtype=dtype)
    lam = (offset / std).square()
    assert torch.allclose(
        sankaran_squared_gaussian_cdf(threshold, offset, std),
        sankaran_noncentral_chi2_cdf(threshold / std.square(), 1, lam),
    )


@pytest.mark.parametrize("quantile", [0.0, 1.0, -0.1, 1.5])
def test_quantile_outside_unit_interval_raises(quantile, dtype):
    offset, std = torch.zeros(2, dtype=dtype), torch.ones(2, dtype=dtype)
    with pytest.raises(ValueError, match="quantile must lie in the open interval"):
        squared_gaussian_quantile(quantile, offset, std)
    with pytest.raises(ValueError, match="quantile must lie in the open interval"):
        sankaran_squared_gaussian_quantile(quantile, offset, std)


def test_the_log_cdf_of_a_narrow_interval_is_finite_and_accurate() -> None:
    f64 = {"dtype": torch.float64}
    # P(Z^2 <= c) for a tiny c: about 2 sqrt(c) phi(offset) / std.
    threshold, offset, std = (
        torch.tensor(1e-36, **f64),
        torch.tensor(0.5, **f64),
        torch.tensor(1.0, **f64),
    )
    expected = math.log(2e-18) - 0.125 - 0.5 * math.log(2 * math.pi)
    assert log_squared_gaussian_cdf(threshold, offset, std).item() == pytest.approx(
        expected, rel=1e-9
    )
    # A huge standard deviation (variance 1e100): the interval is 2e-50 standard units wide.
    huge = log_squared_gaussian_cdf(
        torch.tensor(1.0, **f64), torch.tensor(0.0, **f64), torch.tensor(1e50, **f64)
    )
    assert huge.item() == pytest.approx(math.log(2e-50) - 0.5 * math.log(2 * math.pi), rel=1e-9)
    # Continuous across the switch to the midpoint rule.
    std = torch.tensor([0.99e4, 1.01e4], **f64)
    values = log_squared_gaussian_cdf(torch.tensor(0.25, **f64), torch.tensor(0.1, **f64), std)
    exact = torch.log(2 * 0.5 / std) - 0.5 * (0.1 / std) ** 2 - 0.5 * math.log(2 * math.pi)
    torch.testing.assert_close(values, exact, rtol=1e-7, atol=0)


def test_quantiles_too_close_to_one_are_refused() -> None:
    with pytest.raises(ValueError, match="too close to 0 or 1"):
        check_resolvable_quantile(torch.tensor(1 - 2**-53, dtype=torch.float64))
    with pytest.raises(ValueError, match="too close to 0 or 1"):
        squared_gaussian_quantile(0.99999994, torch.zeros(2), torch.ones(2))
    check_resolvable_quantile(torch.tensor(1 - 1e-9, dtype=torch.float64))
