"""Tests of the calibration utilities (NLL, mean-width scaling, dynamic c)."""

import math

import pytest
import torch
from botorch.acquisition import UpperConfidenceBound
from botorch.models.model import Model

from botorch_nn_uq.calibration import (
    CalibratedModel,
    dynamic_calibration_threshold,
    mean_width,
    mean_width_calibration_factor,
    nll_calibration_factor,
    optimize_acqf_with_dynamic_calibration,
    uniform_points,
)
from botorch_nn_uq.posteriors import GaussianMarginalPosterior
from tests.testing import tolerances


class _VShapedModel(Model):
    r"""1-d model with mean ``-(x - 0.5)^2`` and standard deviation
    ``c * (|x - 0.5| + 0.01)`` (plus a fixed noise variance with observation noise)."""

    num_outputs = 1

    def __init__(self, tkwargs: dict, constant: float = 1.0, noise_variance: float = 0.04) -> None:
        super().__init__()
        self.tkwargs = tkwargs
        self.calibration_constant = torch.tensor([constant], **tkwargs)
        self.noise_variance = noise_variance

    def set_calibration_constant(self, value) -> None:
        self.calibration_constant = torch.as_tensor(value, **self.tkwargs).reshape(1)

    def posterior(self, X, output_indices=None, observation_noise=False, **kwargs):
        mean = -((X - 0.5) ** 2)
        variance = (self.calibration_constant * ((X - 0.5).abs() + 0.01)) ** 2
        if observation_noise:
            variance = variance + self.noise_variance
        return GaussianMarginalPosterior(mean, variance)


def _gaussian_nll(residual, variance):
    return (0.5 * variance.log() + 0.5 * residual**2 / variance).mean().item()


def _validation_data(tkwargs: dict, n: int = 50):
    generator = torch.Generator().manual_seed(0)
    X = torch.rand(n, 1, generator=generator, dtype=tkwargs["dtype"])
    normal = torch.randn(n, 1, generator=generator, dtype=tkwargs["dtype"])
    # Moved before the noise is formed from it: a CPU `X` times a CUDA `normal` would mix
    # devices.
    X = X.to(**tkwargs)
    noise = 0.3 * ((X - 0.5).abs() + 0.01) * normal.to(**tkwargs)
    return X, -((X - 0.5) ** 2) + noise


def test_nll_factor_is_the_closed_form_minimiser(tkwargs: dict) -> None:
    model = _VShapedModel(tkwargs)
    X, Y = _validation_data(tkwargs)
    factor = nll_calibration_factor(model, X, Y)
    sigma = (X - 0.5).abs() + 0.01
    residual = Y + (X - 0.5) ** 2
    expected = ((residual / sigma) ** 2).mean().sqrt()
    torch.testing.assert_close(factor, expected.reshape(1))
    assert 0.2 < factor.item() < 0.4  # the data were drawn with c = 0.3
    best = _gaussian_nll(residual, (factor * sigma) ** 2)
    for other in (0.8 * factor, 1.25 * factor):
        assert _gaussian_nll(residual, (other * sigma) ** 2) > best


def test_nll_factor_with_observation_noise_minimises_the_predictive_nll(tkwargs: dict) -> None:
    model = _VShapedModel(tkwargs, noise_variance=1e-3)
    X, Y = _validation_data(tkwargs, n=200)
    factor = nll_calibration_factor(model, X, Y, observation_noise=True)
    sigma = (X - 0.5).abs() + 0.01
    residual = Y + (X - 0.5) ** 2
    grid = torch.linspace(0.01, 1.0, 991, **tkwargs)
    nlls = torch.tensor([_gaussian_nll(residual, (c * sigma) ** 2 + 1e-3) for c in grid])
    assert factor.item() == pytest.approx(grid[nlls.argmin()].item(), abs=2e-3)
    # The noise explains part of the residuals, so the factor is smaller than without it.
    assert factor.item() < nll_calibration_factor(model, X, Y).item()


def test_nll_factor_rejects_bad_shapes(tkwargs: dict) -> None:
    model = _VShapedModel(tkwargs)
    X, Y = _validation_data(tkwargs)
    with pytest.raises(ValueError, match="same n"):
        nll_calibration_factor(model, X, Y[:-1])
    with pytest.raises(ValueError, match="model predicts"):
        nll_calibration_factor(model, X, torch.cat([Y, Y], dim=-1))


def test_mean_width_factor_hits_the_target(tkwargs: dict) -> None:
    model = _VShapedModel(tkwargs)
    bounds = torch.tensor([[0.0], [1.0]], **tkwargs)
    # mean over [0, 1] of 2 * (|x - 0.5| + 0.01) = 0.52
    assert mean_width(model, bounds).item() == pytest.approx(0.52, rel=1e-2)
    factor = mean_width_calibration_factor(model, bounds, target_width=0.26)
    model.set_calibration_constant(factor)
    rtol = tolerances(tkwargs["dtype"])["rtol"]
    assert mean_width(model, bounds).item() == pytest.approx(0.26, rel=rtol)
    with pytest.raises(ValueError, match="target_width"):
        mean_width_calibration_factor(model, bounds, target_width=0.0)


def test_non_finite_targets_do_not_become_a_non_finite_factor(tkwargs: dict) -> None:
    model = _VShapedModel(tkwargs)
    X, Y = _validation_data(tkwargs)
    with pytest.raises(ValueError, match="Y must be finite"):
        nll_calibration_factor(
            model, X, Y.index_fill(0, torch.tensor([3], device=X.device), math.nan)
        )
    bounds = torch.tensor([[0.0], [1.0]], **tkwargs)
    for width in (math.inf, math.nan):
        with pytest.raises(ValueError, match="target_width must be finite"):
            mean_width_calibration_factor(model, bounds, target_width=width)


def test_uniform_points_are_seeded_and_inside_the_box(tkwargs: dict) -> None:
    bounds = torch.tensor([[-1.0, 2.0], [1.0, 3.0]], **tkwargs)
    points = uniform_points(bounds, 1000, seed=4)
    assert points.shape == (1000, 2)
    assert ((points >= bounds[0]) & (points <= bounds[1])).all()
    torch.testing.assert_close(points, uniform_points(bounds, 1000, seed=4), rtol=0, atol=0)
    assert not torch.equal(points, uniform_points(bounds, 1000, seed=5))


def test_dynamic_threshold_decays_exponentially() -> None:
    thresholds = [dynamic_calibration_threshold(step, 5) for step in range(5)]
    assert thresholds[0] == pytest.approx(1 / 32) and thresholds[-1] == pytest.approx(0.005)
    ratios = [b / a for a, b in zip(thresholds[:-1], thresholds[1:], strict=True)]
    assert all(r == pytest.approx(ratios[0]) for r in ratios) and ratios[0] < 1
    assert dynamic_calibration_threshold(0, 1) == pytest.approx(1 / 32)
    with pytest.raises(ValueError, match="step"):
        dynamic_calibration_threshold(5, 5)
    with pytest.raises(ValueError, match="positive"):
        dynamic_calibration_threshold(0, 5, start=0.0)


def test_dynamic_calibration_doubles_c_until_the_maximiser_is_new(tkwargs: dict) -> None:
    model = _VShapedModel(tkwargs, constant=0.01)
    assert isinstance(model, CalibratedModel)
    bounds = torch.tensor([[0.0], [1.0]], **tkwargs)
    train_X = torch.tensor([[0.5], [0.1]], **tkwargs)
    # UCB = -(x - .5)^2 + c (|x - .5| + .01) is maximal at |x - 0.5| = c / 2.
    result = optimize_acqf_with_dynamic_calibration(
        model,
        lambda m: UpperConfidenceBound(m, beta=1.0),
        bounds,
        train_X,
        min_distance=0.05,
        num_restarts=4,
        raw_samples=64,
        options={"seed": 0},
    )
    assert result.accepted and result.doublings == 4  # c = 0.16: distance 0.08 > 0.05
    torch.testing.assert_close(result.calibration_constant, torch.tensor([0.16], **tkwargs))
    assert abs(abs(result.candidate.item() - 0.5) - 0.08) < 1e-3
    torch.testing.assert_close(model.calibration_constant, torch.tensor([0.01], **tkwargs))


# float64 only: in float32, scipy's L-BFGS-B line search on the nearly flat UCB of
# c = 1e-4 stops with ABNORMAL (BoTorch warns that the optimisation failed).
@pytest.mark.parametrize("dtype", [torch.float64])
def test_dynamic_calibration_gives_up_after_max_doublings(tkwargs: dict) -> None:
    model = _VShapedModel(tkwargs, constant=1e-4)
    bounds = torch.tensor([[0.0], [1.0]], **tkwargs)
    result = optimize_acqf_with_dynamic_calibration(
        model,
        lambda m: UpperConfidenceBound(m, beta=1.0),
        bounds,
        torch.tensor([[0.5]], **tkwargs),
        min_distance=0.2,
        max_doublings=3,
        num_restarts=2,
        raw_samples=32,
    )
    assert not result.accepted and result.doublings == 3
    assert result.calibration_constant.item() == pytest.approx(8e-4)
    assert model.calibration_constant.item() == pytest.approx(1e-4)
    with pytest.raises(ValueError, match="max_doublings"):
        optimize_acqf_with_dynamic_calibration(
            model, UpperConfidenceBound, bounds, bounds, min_distance=-1.0
        )
    assert math.isfinite(result.value.item())
