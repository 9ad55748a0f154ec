"""Tests of the Gaussian-marginal posterior family."""

import pytest
import torch
from botorch.models.transforms.outcome import Standardize
from botorch.sampling.get_sampler import get_sampler
from gpytorch.distributions import MultitaskMultivariateNormal, MultivariateNormal

from botorch_nn_uq.posteriors import GaussianMarginalPosterior
from botorch_nn_uq.posteriors.gaussian import min_variance
from tests.testing import seeded_randn


def _moments(shape, tkwargs, seed=0):
    generator = torch.Generator().manual_seed(seed)
    mean = torch.randn(*shape, generator=generator, dtype=tkwargs["dtype"])
    variance = 0.1 + torch.rand(*shape, generator=generator, dtype=tkwargs["dtype"])
    return mean.to(**tkwargs), variance.to(**tkwargs)


@pytest.mark.parametrize("shape", [(3, 1), (4, 3, 1), (2, 3, 4, 1), (3, 2), (4, 3, 2)])
def test_mean_and_variance_round_trip(shape, tkwargs):
    mean, variance = _moments(shape, tkwargs)
    posterior = GaussianMarginalPosterior(mean, variance)
    assert torch.equal(posterior.mean, mean)
    assert torch.equal(posterior.variance, variance)
    # The distribution carries the same moments.
    distribution = posterior.distribution
    if shape[-1] == 1:
        assert isinstance(distribution, MultivariateNormal)
        assert not isinstance(distribution, MultitaskMultivariateNormal)
        torch.testing.assert_close(distribution.mean, mean.squeeze(-1))
        torch.testing.assert_close(distribution.variance, variance.squeeze(-1))
    else:
        assert isinstance(distribution, MultitaskMultivariateNormal)
        torch.testing.assert_close(distribution.mean, mean)
        torch.testing.assert_close(distribution.variance, variance)
    assert posterior._extended_shape(torch.Size([5])) == torch.Size([5, *shape])
    assert posterior.dtype == tkwargs["dtype"]


def test_single_output_covariance_is_diagonal(tkwargs):
    mean, variance = _moments((2, 3, 1), tkwargs)
    posterior = GaussianMarginalPosterior(mean, variance)
    torch.testing.assert_close(
        posterior.distribution.covariance_matrix, torch.diag_embed(variance.squeeze(-1))
    )


def test_multi_output_covariance_is_diagonal_in_point_major_order(tkwargs):
    # Distinct variances so that a wrong (output-major) ordering would be detected.
    variance = torch.arange(1, 13, **tkwargs).reshape(2, 3, 2)
    mean = torch.zeros_like(variance)
    posterior = GaussianMarginalPosterior(mean, variance)
    covariance = posterior.distribution.covariance_matrix
    assert covariance.shape == torch.Size([2, 6, 6])
    torch.testing.assert_close(covariance, torch.diag_embed(variance.flatten(-2)))
    # The diagonal entry of (point 1, output 0) is at flattened index 2.
    assert covariance[0, 2, 2].item() == variance[0, 1, 0].item()


@pytest.mark.parametrize("shape", [(3, 1), (2, 3, 1), (2, 3, 2)])
def test_sampler_samples_have_the_posterior_moments(shape, tkwargs):
    mean, variance = _moments(shape, tkwargs, seed=1)
    posterior = GaussianMarginalPosterior(mean, variance)
    num_samples = 4096
    sampler = get_sampler(posterior, torch.Size([num_samples]), seed=0)
    samples = sampler(posterior)
    assert samples.shape == torch.Size([num_samples, *shape])
    assert samples.dtype == tkwargs["dtype"] and samples.device == tkwargs["device"]
    mean_error = (samples.mean(0) - mean) / (variance / num_samples).sqrt()
    assert mean_error.abs().max() < 5
    # Standard error of a Gaussian sample variance is variance * sqrt(2 / (n - 1)).
    variance_error = (samples.var(0) - variance) / (variance * (2 / (num_samples - 1)) ** 0.5)
    assert variance_error.abs().max() < 5


def test_samples_are_independent_across_points_and_outputs(tkwargs):
    mean = torch.zeros(3, 2, **tkwargs)
    variance = torch.ones(3, 2, **tkwargs)
    posterior = GaussianMarginalPosterior(mean, variance)
    samples = get_sampler(posterior, torch.Size([4096]), seed=3)(posterior).reshape(4096, 6)
    correlation = torch.corrcoef(samples.T)
    off_diagonal = correlation - torch.eye(6, **tkwargs)
    assert off_diagonal.abs().max() < 5 / 4096**0.5


def test_subset_outputs_keeps_the_selected_moments(tkwargs):
    mean, variance = _moments((2, 3, 3), tkwargs)
    posterior = GaussianMarginalPosterior(mean, variance)
    subset = posterior.subset_outputs([2, 0])
    assert isinstance(subset, GaussianMarginalPosterior)
    torch.testing.assert_close(subset.mean, mean[..., [2, 0]])
    torch.testing.assert_close(subset.variance, variance[..., [2, 0]])
    single = posterior.subset_outputs([1])
    torch.testing.assert_close(single.mean, mean[..., [1]])
    torch.testing.assert_close(single.distribution.variance, variance[..., 1])


def test_add_observation_noise_adds_to_the_variance(tkwargs):
    mean, variance = _moments((2, 3, 2), tkwargs)
    posterior = GaussianMarginalPosterior(mean, variance)
    noise = torch.tensor([0.5, 2.0], **tkwargs)
    noisy = posterior.add_observation_noise(noise)
    assert isinstance(noisy, GaussianMarginalPosterior)
    torch.testing.assert_close(noisy.mean, mean)
    torch.testing.assert_close(noisy.variance, variance + noise)
    torch.testing.assert_close(
        noisy.distribution.covariance_matrix, torch.diag_embed((variance + noise).flatten(-2))
    )


def test_scalarize_gives_mean_and_variance_of_the_affine_map(tkwargs):
    mean, variance = _moments((2, 3, 3), tkwargs)
    posterior = GaussianMarginalPosterior(mean, variance)
    weights = torch.tensor([0.5, -2.0, 1.5], **tkwargs)
    scalarized = posterior.scalarize(weights, offset=3.0)
    assert scalarized.mean.shape == torch.Size([2, 3, 1])
    expected_mean = 3.0 + (mean * weights).sum(-1, keepdim=True)
    expected_variance = (variance * weights**2).sum(-1, keepdim=True)
    torch.testing.assert_close(scalarized.mean, expected_mean)
    torch.testing.assert_close(scalarized.variance, expected_variance)


def test_scalarize_matches_monte_carlo_of_the_affine_map(tkwargs):
    mean, variance = _moments((3, 2), tkwargs, seed=4)
    posterior = GaussianMarginalPosterior(mean, variance)
    weights = torch.tensor([1.0, -0.5], **tkwargs)
    samples = get_sampler(posterior, torch.Size([4096]), seed=0)(posterior)
    affine = 2.0 + samples @ weights.unsqueeze(-1)
    scalarized = posterior.scalarize(weights, offset=2.0)
    standard_error = (scalarized.variance / 4096).sqrt()
    assert ((affine.mean(0) - scalarized.mean) / standard_error).abs().max() < 5
    torch.testing.assert_close(affine.var(0), scalarized.variance, rtol=0.15, atol=0.0)


def _fitted_standardize(m, tkwargs, seed=0):
    train_Y = 3.0 * seeded_randn(10, m, seed=seed, **tkwargs) + 5.0
    transform = Standardize(m=m)
    transform.train()
    transform(train_Y)
    transform.eval()
    return transform, train_Y


@pytest.mark.parametrize("m", [1, 2])
def test_untransform_outcomes_with_standardize_matches_the_formula(m, tkwargs):
    transform, train_Y = _fitted_standardize(m, tkwargs)
    location = train_Y.mean(0)
    scale = train_Y.std(0)
    mean, variance = _moments((2, 3, m), tkwargs)
    posterior = GaussianMarginalPosterior(mean, variance)
    untransformed = posterior.untransform_outcomes(transform)
    # An affine transform keeps the family (scalarisation and analytic acquisitions need it).
    assert isinstance(untransformed, GaussianMarginalPosterior)
    torch.testing.assert_close(untransformed.mean, location + scale * mean)
    torch.testing.assert_close(untransformed.variance, scale**2 * variance)
    samples = get_sampler(untransformed, torch.Size([4096]), seed=0)(untransformed)
    standard_error = (scale**2 * variance / 4096).sqrt()
    assert ((samples.mean(0) - (location + scale * mean)) / standard_error).abs().max() < 5


def test_variance_is_clamped_at_min_variance(tkwargs):
    mean = torch.zeros(3, 1, **tkwargs)
    variance = torch.tensor([[0.0], [-1.0], [0.25]], **tkwargs)
    posterior = GaussianMarginalPosterior(mean, variance)
    floor = min_variance(tkwargs["dtype"])
    assert floor == (1e-10 if tkwargs["dtype"] == torch.float64 else 1e-6)
    expected = torch.tensor([[floor], [floor], [0.25]], **tkwargs)
    torch.testing.assert_close(posterior.variance, expected)
    torch.testing.assert_close(posterior.distribution.variance, expected.squeeze(-1))
    torch.testing.assert_close(
        posterior.distribution.covariance_matrix, torch.diag_embed(expected.squeeze(-1))
    )
    # The clamp keeps the covariance positive definite: sampling works.
    samples = get_sampler(posterior, torch.Size([8]), seed=0)(posterior)
    assert torch.isfinite(samples).all()


@pytest.mark.parametrize(
    ("mean_shape", "variance_shape"),
    [((3, 1), (3, 2)), ((2, 3, 1), (3, 1)), ((3,), (3,))],
)
def test_shape_mismatch_raises(mean_shape, variance_shape, tkwargs):
    with pytest.raises(ValueError, match="batch_shape x q x m"):
        GaussianMarginalPosterior(
            torch.zeros(mean_shape, **tkwargs), torch.ones(variance_shape, **tkwargs)
        )


@pytest.mark.parametrize("shape", [(0, 1), (0, 2), (0, 3, 2), (4, 0, 2), (2, 0, 1)])
def test_an_empty_batch_of_points_has_empty_samples(shape, tkwargs):
    posterior = GaussianMarginalPosterior(*_moments(shape, tkwargs))
    assert posterior.mean.shape == posterior.variance.shape == shape
    assert posterior.rsample(torch.Size([3])).shape == (3, *shape)
    sampler = get_sampler(posterior, torch.Size([5]), seed=0)
    assert sampler(posterior).shape == (5, *shape)
