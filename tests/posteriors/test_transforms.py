"""Tests of apply_posterior_transform on the three posterior families."""

import pytest
import torch
from botorch.acquisition.objective import PosteriorTransform, ScalarizedPosteriorTransform
from botorch.sampling.get_sampler import get_sampler

from botorch_nn_uq.posteriors import (
    EnsembleIndexSampler,
    FunctionEnsemblePosterior,
    GaussianMarginalPosterior,
    MixtureOfGaussiansPosterior,
    MixtureSampler,
)
from botorch_nn_uq.posteriors.transforms import apply_posterior_transform
from tests.testing import seeded_randn

OFFSET = 0.75


@pytest.fixture
def weights(tkwargs):
    return torch.tensor([1.5, -0.5, 2.0], **tkwargs)


def _transform(weights):
    return ScalarizedPosteriorTransform(weights=weights, offset=OFFSET)


def test_scalarized_transform_on_a_function_ensemble_equals_the_map_on_samples(weights, tkwargs):
    values = seeded_randn(2, 4, 3, 3, seed=0, **tkwargs)
    posterior = FunctionEnsemblePosterior(values, torch.tensor([1.0, 2.0, 3.0, 2.0], **tkwargs))
    transformed = apply_posterior_transform(posterior, _transform(weights))
    assert isinstance(transformed, FunctionEnsemblePosterior)
    samples = EnsembleIndexSampler(torch.Size([32]), seed=1)(posterior)
    transformed_samples = EnsembleIndexSampler(torch.Size([32]), seed=1)(transformed)
    assert transformed_samples.shape == torch.Size([32, 2, 3, 1])
    torch.testing.assert_close(transformed_samples, OFFSET + samples @ weights.unsqueeze(-1))
    torch.testing.assert_close(transformed.mean, OFFSET + posterior.mean @ weights.unsqueeze(-1))
    # The mixture variance of the scalarised functions (not the sum of per-output variances).
    scalar_values = OFFSET + values @ weights.unsqueeze(-1)
    w = transformed.weights.reshape(-1, 1, 1)
    expected_variance = (w * (scalar_values - transformed.mean.unsqueeze(-3)) ** 2).sum(-3)
    torch.testing.assert_close(transformed.variance, expected_variance)


def test_scalarized_transform_on_a_gaussian_equals_the_map_on_samples(weights, tkwargs):
    mean = seeded_randn(2, 3, 3, seed=1, **tkwargs)
    variance = 0.5 + seeded_randn(2, 3, 3, seed=2, **tkwargs).abs()
    posterior = GaussianMarginalPosterior(mean, variance)
    transformed = apply_posterior_transform(posterior, _transform(weights))
    assert isinstance(transformed, GaussianMarginalPosterior)
    samples = get_sampler(posterior, torch.Size([4096]), seed=0)(posterior)
    affine = OFFSET + samples @ weights.unsqueeze(-1)
    torch.testing.assert_close(transformed.mean, OFFSET + mean @ weights.unsqueeze(-1))
    torch.testing.assert_close(transformed.variance, variance @ (weights**2).unsqueeze(-1))
    standard_error = (transformed.variance / 4096).sqrt()
    assert ((affine.mean(0) - transformed.mean) / standard_error).abs().max() < 5
    torch.testing.assert_close(affine.var(0), transformed.variance, rtol=0.12, atol=0.0)


def test_scalarized_transform_on_a_mixture_equals_the_map_on_samples(weights, tkwargs):
    means = 2.0 * seeded_randn(2, 3, 2, 3, seed=3, **tkwargs)
    variances = 0.2 + seeded_randn(2, 3, 2, 3, seed=4, **tkwargs).abs()
    posterior = MixtureOfGaussiansPosterior(
        means, variances, torch.tensor([3.0, 1.0, 1.0], **tkwargs)
    )
    transformed = apply_posterior_transform(posterior, _transform(weights))
    assert isinstance(transformed, MixtureOfGaussiansPosterior)
    num_samples = 20000
    samples = MixtureSampler(torch.Size([num_samples]), seed=0)(posterior)
    affine = OFFSET + samples @ weights.unsqueeze(-1)
    standard_error = (transformed.variance / num_samples).sqrt()
    assert ((affine.mean(0) - transformed.mean) / standard_error).abs().max() < 5
    torch.testing.assert_close(affine.var(0), transformed.variance, rtol=0.06, atol=0.0)
    # Exact moments of the scalarised mixture.
    w = posterior.weights.reshape(-1, 1, 1)
    scalar_means = OFFSET + means @ weights.unsqueeze(-1)
    mean = (w * scalar_means).sum(-3)
    torch.testing.assert_close(transformed.mean, mean)
    expected_variance = (w * variances @ (weights**2).unsqueeze(-1)).sum(-3) + (
        w * (scalar_means - mean.unsqueeze(-3)) ** 2
    ).sum(-3)
    torch.testing.assert_close(transformed.variance, expected_variance)
    # Member selection is unchanged: the same members for the same seed.
    transformed_samples = MixtureSampler(torch.Size([64]), seed=5)(transformed)
    sampler = MixtureSampler(torch.Size([64]), seed=5)
    sampler(posterior)
    member_means = scalar_means.index_select(-3, sampler.base_indices).movedim(1, 0)
    member_stds = (variances @ (weights**2).unsqueeze(-1)).sqrt()
    member_stds = member_stds.index_select(-3, sampler.base_indices).movedim(1, 0)
    assert ((transformed_samples - member_means).abs() < 6 * member_stds).all()


@pytest.mark.parametrize(
    "make_posterior",
    [
        lambda tkwargs: GaussianMarginalPosterior(
            torch.zeros(3, 2, **tkwargs), torch.ones(3, 2, **tkwargs)
        ),
        lambda tkwargs: FunctionEnsemblePosterior(torch.zeros(4, 3, 2, **tkwargs)),
        lambda tkwargs: MixtureOfGaussiansPosterior(
            torch.zeros(4, 3, 2, **tkwargs), torch.ones(4, 3, 2, **tkwargs)
        ),
    ],
    ids=["gaussian", "function-ensemble", "mixture"],
)
def test_wrong_number_of_scalarization_weights_raises(make_posterior, weights, tkwargs):
    with pytest.raises(ValueError, match="3 weights but the posterior has 2 outputs"):
        apply_posterior_transform(make_posterior(tkwargs), _transform(weights))


def test_other_transforms_are_called_as_botorch_would(tkwargs):
    calls = []

    class RecordingTransform(PosteriorTransform):
        scalarize = True

        def evaluate(self, Y):
            return Y.sum(-1)

        def forward(self, posterior, X=None):
            calls.append((posterior, X))
            return posterior

    posterior = FunctionEnsemblePosterior(torch.zeros(4, 3, 2, **tkwargs))
    X = torch.zeros(3, 2, **tkwargs)
    result = apply_posterior_transform(posterior, RecordingTransform(), X=X)
    assert result is posterior
    assert len(calls) == 1
    assert calls[0][0] is posterior and calls[0][1] is X
