"""Tests of the posterior over tensor-valued outputs: the flat posterior's moments and
draws, reshaped, from every kind of sampler."""

import pytest
import torch
from botorch.sampling import IIDNormalSampler, SobolQMCNormalSampler
from botorch.sampling.get_sampler import get_sampler

from botorch_nn_uq.posteriors import (
    FunctionEnsemblePosterior,
    GaussianMarginalPosterior,
    MixtureOfGaussiansPosterior,
    TensorOutputPosterior,
    TensorOutputSampler,
)

DTYPE = torch.float64
OUTPUT_SHAPE = torch.Size([2, 3])


def _values(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=DTYPE)


def _flat_posteriors() -> dict[str, object]:
    r"""One posterior of each family over ``4 x 2 x 6`` (batch, q, flattened outputs)."""
    return {
        "gaussian": GaussianMarginalPosterior(_values(4, 2, 6), _values(4, 2, 6, seed=1).exp()),
        "functions": FunctionEnsemblePosterior(_values(4, 5, 2, 6)),
        "mixture": MixtureOfGaussiansPosterior(
            _values(4, 5, 2, 6), _values(4, 5, 2, 6, seed=2).exp()
        ),
    }


@pytest.mark.parametrize("family", ["gaussian", "functions", "mixture"])
def test_moments_and_shapes_are_the_flat_posteriors_reshaped(family):
    flat = _flat_posteriors()[family]
    posterior = TensorOutputPosterior(flat, OUTPUT_SHAPE)
    assert torch.equal(posterior.mean, flat.mean.unflatten(-1, OUTPUT_SHAPE))
    assert torch.equal(posterior.variance, flat.variance.unflatten(-1, OUTPUT_SHAPE))
    assert posterior._extended_shape(torch.Size([7])) == (7, 4, 2, 2, 3)
    assert posterior._extended_shape() == (4, 2, 2, 3)
    assert posterior.base_sample_shape == flat.base_sample_shape
    assert posterior.batch_range == flat.batch_range
    assert (posterior.device, posterior.dtype) == (flat.device, flat.dtype)


@pytest.mark.parametrize("family", ["gaussian", "functions", "mixture"])
@pytest.mark.parametrize("sampler_type", [IIDNormalSampler, SobolQMCNormalSampler])
def test_an_explicit_normal_sampler_draws_what_it_draws_from_the_flat_posterior(
    family, sampler_type
):
    flat = _flat_posteriors()[family]
    draws = sampler_type(torch.Size([8]), seed=3)(TensorOutputPosterior(flat, OUTPUT_SHAPE))
    expected = sampler_type(torch.Size([8]), seed=3)(flat)
    assert torch.equal(draws, expected.unflatten(-1, OUTPUT_SHAPE))


@pytest.mark.parametrize("family", ["gaussian", "functions", "mixture"])
def test_get_sampler_draws_with_the_flat_posteriors_sampler(family):
    flat = _flat_posteriors()[family]
    posterior = TensorOutputPosterior(flat, OUTPUT_SHAPE)
    sampler = get_sampler(posterior, torch.Size([6]), seed=4)
    assert isinstance(sampler, TensorOutputSampler)
    draws = sampler(posterior)
    expected = get_sampler(flat, torch.Size([6]), seed=4)(flat)
    assert torch.equal(draws, expected.unflatten(-1, OUTPUT_SHAPE))
    # The flat sampler, and with it its base samples, is kept across draws.
    assert torch.equal(sampler(posterior), draws)


def test_rsample_keeps_the_gradient_and_the_shape():
    means = _values(4, 2, 6).requires_grad_(True)
    posterior = TensorOutputPosterior(
        GaussianMarginalPosterior(means, torch.ones(4, 2, 6, dtype=DTYPE)), OUTPUT_SHAPE
    )
    samples = posterior.rsample(torch.Size([3]))
    assert samples.shape == (3, 4, 2, 2, 3)
    samples.sum().backward()
    assert torch.equal(means.grad, torch.full_like(means, 3.0))


def test_an_output_shape_of_another_size_is_refused():
    with pytest.raises(ValueError, match=r"output_shape \(4, 2\) has 8 elements.*6 outputs"):
        TensorOutputPosterior(_flat_posteriors()["gaussian"], torch.Size([4, 2]))


@pytest.mark.parametrize("family", ["functions", "mixture"])
def test_the_gaussian_is_the_flat_posteriors(family):
    flat = _flat_posteriors()[family]
    posterior = TensorOutputPosterior(flat, OUTPUT_SHAPE)
    for distribution in (posterior.distribution, posterior.mvn):
        assert torch.equal(distribution.mean, flat.mvn.mean)
        assert torch.equal(distribution.covariance_matrix, flat.mvn.covariance_matrix)
