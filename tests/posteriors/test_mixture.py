"""Tests of the mixture-of-Gaussians posterior and its sampler."""

import pytest
import torch
from botorch.exceptions.errors import UnsupportedError
from botorch.models.transforms.outcome import Log, Standardize
from botorch.sampling.get_sampler import get_sampler
from botorch.sampling.normal import SobolQMCNormalSampler

from botorch_nn_uq.posteriors import MixtureOfGaussiansPosterior, MixtureSampler
from tests.testing import seeded_randn

MULTIPLICITIES = [3.0, 1.0, 1.0]


def _multiplicities(tkwargs):
    return torch.tensor(MULTIPLICITIES, **tkwargs)


def _components(shape, tkwargs, seed=0):
    generator = torch.Generator().manual_seed(seed)
    means = 2.0 * torch.randn(*shape, generator=generator, dtype=tkwargs["dtype"])
    variances = 0.2 + torch.rand(*shape, generator=generator, dtype=tkwargs["dtype"])
    return means.to(**tkwargs), variances.to(**tkwargs)


def _expected_moments(means, variances, weights):
    w = (weights / weights.sum()).reshape(-1, 1, 1)
    mean = (w * means).sum(-3)
    aleatoric = (w * variances).sum(-3)
    epistemic = (w * (means - mean.unsqueeze(-3)) ** 2).sum(-3)
    return mean, aleatoric, epistemic


def test_moments_follow_the_law_of_total_variance(tkwargs):
    means, variances = _components((2, 3, 4, 2), tkwargs)
    posterior = MixtureOfGaussiansPosterior(means, variances, _multiplicities(tkwargs))
    w = [0.6, 0.2, 0.2]
    mean = sum(w[k] * means[:, k] for k in range(3))
    aleatoric = sum(w[k] * variances[:, k] for k in range(3))
    epistemic = sum(w[k] * (means[:, k] - mean) ** 2 for k in range(3))
    torch.testing.assert_close(posterior.mean, mean)
    torch.testing.assert_close(posterior.aleatoric_variance, aleatoric)
    torch.testing.assert_close(posterior.epistemic_variance, epistemic)
    torch.testing.assert_close(posterior.variance, aleatoric + epistemic)
    assert posterior.mean.shape == torch.Size([2, 4, 2])
    assert posterior.batch_shape == torch.Size([2])
    assert posterior.ensemble_size == 3


def test_weights_are_normalised(tkwargs):
    means, variances = _components((3, 4, 1), tkwargs)
    posterior = MixtureOfGaussiansPosterior(means, variances, _multiplicities(tkwargs))
    torch.testing.assert_close(posterior.weights, torch.tensor([0.6, 0.2, 0.2], **tkwargs))
    assert abs(posterior.weights.sum().item() - 1.0) <= 2 * torch.finfo(tkwargs["dtype"]).eps
    scaled = MixtureOfGaussiansPosterior(means, variances, 10.0 * _multiplicities(tkwargs))
    torch.testing.assert_close(scaled.mean, posterior.mean)
    torch.testing.assert_close(scaled.variance, posterior.variance)
    uniform = MixtureOfGaussiansPosterior(means, variances)
    torch.testing.assert_close(uniform.weights, torch.full((3,), 1 / 3, **tkwargs))
    torch.testing.assert_close(uniform.mean, means.mean(-3))
    torch.testing.assert_close(uniform.epistemic_variance, means.var(-3, unbiased=False))


def test_moments_match_monte_carlo_of_rsample(tkwargs):
    means, variances = _components((2, 3, 2, 1), tkwargs, seed=1)
    posterior = MixtureOfGaussiansPosterior(means, variances, _multiplicities(tkwargs))
    num_samples = 20000
    torch.manual_seed(0)
    samples = posterior.rsample(torch.Size([num_samples]))
    assert samples.shape == torch.Size([num_samples, 2, 2, 1])
    standard_error = (posterior.variance / num_samples).sqrt()
    assert ((samples.mean(0) - posterior.mean) / standard_error).abs().max() < 5
    # The sample variance of a mixture has a standard error of about
    # variance * sqrt((kurtosis - 1) / n); a relative tolerance of 6% is several of them.
    torch.testing.assert_close(samples.var(0), posterior.variance, rtol=0.06, atol=0.0)


def test_aleatoric_and_epistemic_parts_match_monte_carlo_by_member(tkwargs):
    means, variances = _components((3, 2, 1), tkwargs, seed=2)
    posterior = MixtureOfGaussiansPosterior(means, variances, _multiplicities(tkwargs))
    num_samples = 20000
    sampler = MixtureSampler(torch.Size([num_samples]), seed=0)
    samples = sampler(posterior)
    members = sampler.base_indices
    frequencies = torch.bincount(members, minlength=3).to(tkwargs["dtype"]) / num_samples
    torch.testing.assert_close(frequencies, posterior.weights)
    # Law of total variance, estimated: E[Var(Y | k)] and Var(E[Y | k]).
    conditional_means = torch.stack([samples[members == k].mean(0) for k in range(3)])
    conditional_variances = torch.stack([samples[members == k].var(0) for k in range(3)])
    w = posterior.weights.reshape(3, 1, 1)
    mc_mean = (w * conditional_means).sum(0)
    mc_aleatoric = (w * conditional_variances).sum(0)
    mc_epistemic = (w * (conditional_means - mc_mean) ** 2).sum(0)
    standard_error = (posterior.variance / num_samples).sqrt()
    assert ((mc_mean - posterior.mean) / standard_error).abs().max() < 5
    torch.testing.assert_close(mc_aleatoric, posterior.aleatoric_variance, rtol=0.05, atol=0.0)
    torch.testing.assert_close(mc_epistemic, posterior.epistemic_variance, rtol=0.05, atol=0.02)
    # Each member's samples have that member's Gaussian moments.
    for k in range(3):
        count = (members == k).sum()
        member_error = (conditional_means[k] - means[k]) / (variances[k] / count).sqrt()
        assert member_error.abs().max() < 5


def test_samples_are_joint_across_q_through_the_member(tkwargs):
    # Members far apart with tiny variances: every sample's q-vector comes from one member.
    means = torch.tensor([[0.0, 10.0], [100.0, 110.0], [200.0, 210.0]], **tkwargs)
    means = means.unsqueeze(-1)
    variances = torch.full_like(means, 1e-6)
    posterior = MixtureOfGaussiansPosterior(means, variances, _multiplicities(tkwargs))
    samples = MixtureSampler(torch.Size([50]), seed=4)(posterior)
    member_at_point = (samples / 100).round()
    assert torch.equal(member_at_point[:, 0], member_at_point[:, 1])
    counts = torch.bincount(member_at_point[:, 0, 0].long(), minlength=3)
    assert counts.tolist() == [30, 10, 10]


def test_get_sampler_returns_the_mixture_sampler(tkwargs):
    means, variances = _components((3, 2, 1), tkwargs)
    posterior = MixtureOfGaussiansPosterior(means, variances)
    sampler = get_sampler(posterior, torch.Size([8]), seed=5)
    assert isinstance(sampler, MixtureSampler)
    assert sampler(posterior).shape == torch.Size([8, 2, 1])


def test_sampler_is_deterministic_under_a_seed(tkwargs):
    means, variances = _components((2, 3, 4, 2), tkwargs, seed=3)
    posterior = MixtureOfGaussiansPosterior(means, variances, _multiplicities(tkwargs))
    first = MixtureSampler(torch.Size([16]), seed=7)(posterior)
    torch.manual_seed(123)  # the global RNG plays no role
    second = MixtureSampler(torch.Size([16]), seed=7)(posterior)
    assert torch.equal(first, second)
    # Another seed changes both the members and the normals.
    sampler, other_sampler = (
        MixtureSampler(torch.Size([16]), seed=7),
        MixtureSampler(torch.Size([16]), seed=8),
    )
    sampler(posterior)
    other = other_sampler(posterior)
    assert not torch.allclose(first, other)
    assert not torch.equal(sampler.base_indices, other_sampler.base_indices)
    assert not torch.allclose(sampler.base_samples, other_sampler.base_samples)


def test_sampler_shares_base_samples_across_the_batch(tkwargs):
    means, variances = _components((3, 4, 2), tkwargs, seed=5)
    batched = MixtureOfGaussiansPosterior(
        means.expand(2, 3, 3, 4, 2), variances.expand(2, 3, 3, 4, 2), _multiplicities(tkwargs)
    )
    samples = MixtureSampler(torch.Size([12]), seed=1)(batched)
    assert samples.shape == torch.Size([12, 2, 3, 4, 2])
    # Identical batch elements get identical samples (same members, same normals).
    for i in range(2):
        for j in range(3):
            assert torch.equal(samples[:, i, j], samples[:, 0, 0])
    # And the unbatched posterior with the same seed gives the same samples.
    single = MixtureSampler(torch.Size([12]), seed=1)(
        MixtureOfGaussiansPosterior(means, variances, _multiplicities(tkwargs))
    )
    torch.testing.assert_close(single, samples[:, 0, 0])


def test_sampler_reuses_and_redraws_base_samples(tkwargs):
    means, variances = _components((3, 4, 1), tkwargs, seed=6)
    sampler = MixtureSampler(torch.Size([10]), seed=0)
    first = sampler(MixtureOfGaussiansPosterior(means, variances, _multiplicities(tkwargs)))
    base_samples, base_indices = sampler.base_samples, sampler.base_indices
    # Same shapes and weights: base samples reused, so a shifted posterior shifts samples.
    shifted = sampler(MixtureOfGaussiansPosterior(means + 1.0, variances, _multiplicities(tkwargs)))
    assert sampler.base_samples is base_samples
    torch.testing.assert_close(shifted, first + 1.0)
    # New weights: indices redrawn to the new frequencies.
    sampler(MixtureOfGaussiansPosterior(means, variances, torch.tensor([1.0, 1.0, 8.0], **tkwargs)))
    assert torch.bincount(sampler.base_indices, minlength=3).tolist() == [1, 1, 8]
    assert not torch.equal(sampler.base_indices, base_indices)


def test_rsample_from_base_samples_is_the_reparameterisation(tkwargs):
    means, variances = _components((2, 3, 4, 1), tkwargs, seed=7)
    posterior = MixtureOfGaussiansPosterior(means, variances, _multiplicities(tkwargs))
    indices = torch.tensor([2, 0, 1], device=tkwargs["device"])
    normals = seeded_randn(3, 1, 4, 1, seed=0, **tkwargs)
    samples = posterior.rsample_from_base_samples(torch.Size([3]), normals, indices)
    for i, k in enumerate(indices.tolist()):
        expected = means[:, k] + variances[:, k].sqrt() * normals[i]
        torch.testing.assert_close(samples[i], expected)


def test_subset_outputs(tkwargs):
    means, variances = _components((2, 3, 4, 3), tkwargs, seed=8)
    posterior = MixtureOfGaussiansPosterior(means, variances, _multiplicities(tkwargs))
    subset = posterior.subset_outputs([2, 0])
    assert isinstance(subset, MixtureOfGaussiansPosterior)
    torch.testing.assert_close(subset.mean, posterior.mean[..., [2, 0]])
    torch.testing.assert_close(subset.aleatoric_variance, posterior.aleatoric_variance[..., [2, 0]])
    torch.testing.assert_close(subset.epistemic_variance, posterior.epistemic_variance[..., [2, 0]])
    torch.testing.assert_close(subset.weights, posterior.weights)


def test_add_observation_noise_adds_to_the_aleatoric_part_only(tkwargs):
    means, variances = _components((2, 3, 4, 2), tkwargs, seed=9)
    posterior = MixtureOfGaussiansPosterior(means, variances, _multiplicities(tkwargs))
    noise = torch.tensor([0.5, 1.5], **tkwargs)
    noisy = posterior.add_observation_noise(noise)
    torch.testing.assert_close(noisy.mean, posterior.mean)
    torch.testing.assert_close(noisy.epistemic_variance, posterior.epistemic_variance)
    torch.testing.assert_close(noisy.aleatoric_variance, posterior.aleatoric_variance + noise)
    torch.testing.assert_close(noisy.variance, posterior.variance + noise)


def test_scalarize_gives_the_moments_of_the_affine_map(tkwargs):
    means, variances = _components((2, 3, 4, 2), tkwargs, seed=10)
    posterior = MixtureOfGaussiansPosterior(means, variances, _multiplicities(tkwargs))
    weights = torch.tensor([2.0, -1.0], **tkwargs)
    scalarized = posterior.scalarize(weights, offset=0.5)
    component_means = 0.5 + means @ weights[:, None]
    component_variances = variances @ (weights**2)[:, None]
    mean, aleatoric, epistemic = _expected_moments(
        component_means, component_variances, _multiplicities(tkwargs)
    )
    torch.testing.assert_close(scalarized.mean, mean)
    torch.testing.assert_close(scalarized.aleatoric_variance, aleatoric)
    torch.testing.assert_close(scalarized.epistemic_variance, epistemic)
    torch.testing.assert_close(scalarized.mean, 0.5 + posterior.mean @ weights[:, None])


def _fitted_standardize(m, tkwargs):
    train_Y = 4.0 * seeded_randn(9, m, seed=0, **tkwargs) - 2.0
    transform = Standardize(m=m)
    transform.train()
    transform(train_Y)
    transform.eval()
    return transform, train_Y.mean(0), train_Y.std(0)


@pytest.mark.parametrize("m", [1, 2])
def test_untransform_outcomes_with_standardize_matches_the_formula(m, tkwargs):
    transform, location, scale = _fitted_standardize(m, tkwargs)
    means, variances = _components((2, 3, 4, m), tkwargs, seed=11)
    posterior = MixtureOfGaussiansPosterior(means, variances, _multiplicities(tkwargs))
    untransformed = posterior.untransform_outcomes(transform)
    assert isinstance(untransformed, MixtureOfGaussiansPosterior)
    torch.testing.assert_close(untransformed.component_means, location + scale * means)
    torch.testing.assert_close(untransformed.component_variances, scale**2 * variances)
    torch.testing.assert_close(untransformed.mean, location + scale * posterior.mean)
    torch.testing.assert_close(untransformed.variance, scale**2 * posterior.variance)
    torch.testing.assert_close(untransformed.weights, posterior.weights)


def test_untransform_outcomes_with_a_nonlinear_transform_raises(tkwargs):
    means, variances = _components((3, 4, 1), tkwargs)
    posterior = MixtureOfGaussiansPosterior(means, variances)
    with pytest.raises(UnsupportedError, match="linear outcome transform"):
        posterior.untransform_outcomes(Log())


def test_negative_component_variances_are_clamped_at_zero(tkwargs):
    means = torch.zeros(2, 1, 1, **tkwargs)
    variances = torch.tensor([-1.0, 2.0], **tkwargs).reshape(2, 1, 1)
    posterior = MixtureOfGaussiansPosterior(means, variances)
    torch.testing.assert_close(posterior.aleatoric_variance, torch.ones(1, 1, **tkwargs))


@pytest.mark.parametrize("weights", [[1.0, 1.0], [[1.0, 1.0, 1.0]], [1.0, -0.5, 1.0], [0.0] * 3])
def test_invalid_weights_raise(weights, tkwargs):
    means, variances = _components((3, 4, 1), tkwargs)
    with pytest.raises(ValueError, match="weights"):
        MixtureOfGaussiansPosterior(means, variances, torch.tensor(weights, **tkwargs))


@pytest.mark.parametrize(
    ("mean_shape", "variance_shape"), [((3, 4), (3, 4)), ((3, 4, 1), (3, 4, 2))]
)
def test_invalid_component_shapes_raise(mean_shape, variance_shape, tkwargs):
    with pytest.raises(ValueError, match="batch_shape x s x q x m"):
        MixtureOfGaussiansPosterior(
            torch.zeros(mean_shape, **tkwargs), torch.ones(variance_shape, **tkwargs)
        )


@pytest.mark.parametrize("num_outputs", [1, 2])
def test_moment_matched_gaussian_has_the_mixture_covariance(num_outputs, tkwargs):
    means, variances = _components((2, 3, 4, num_outputs), tkwargs, seed=5)
    posterior = MixtureOfGaussiansPosterior(means, variances, _multiplicities(tkwargs))
    gaussian = posterior.moment_matched_posterior()
    torch.testing.assert_close(gaussian.mean, posterior.mean)
    torch.testing.assert_close(gaussian.variance, posterior.variance)
    # Cov(Y) = E[Cov(Y | k)] + Cov(E[Y | k]) over the flattened q x m values.
    flat_means = means.flatten(-2)
    deviations = flat_means - (posterior.weights[:, None] * flat_means).sum(-2, keepdim=True)
    epistemic = torch.einsum("k,bki,bkj->bij", posterior.weights, deviations, deviations)
    aleatoric = torch.diag_embed(posterior.aleatoric_variance.flatten(-2))
    expected = epistemic + aleatoric
    torch.testing.assert_close(posterior.distribution.covariance_matrix, expected)
    assert posterior.mvn is posterior.distribution
    assert (epistemic.diagonal(dim1=-2, dim2=-1) > 0).all() and (epistemic.triu(1) != 0).any()


def test_normal_samplers_draw_from_the_moment_matched_gaussian(tkwargs):
    means, variances = _components((3, 2, 1), tkwargs, seed=6)
    posterior = MixtureOfGaussiansPosterior(means, variances, _multiplicities(tkwargs))
    samples = SobolQMCNormalSampler(torch.Size([4096]), seed=0)(posterior)
    assert samples.shape == torch.Size([4096, 2, 1])
    flat = samples.squeeze(-1)
    torch.testing.assert_close(flat.mean(0), posterior.mean.squeeze(-1), atol=0.05, rtol=0)
    empirical = torch.cov(flat.T)
    expected = posterior.distribution.covariance_matrix
    torch.testing.assert_close(empirical, expected, rtol=0.05, atol=0.05)
    # get_sampler stays with the exact mixture sampler.
    assert isinstance(get_sampler(posterior, torch.Size([8])), MixtureSampler)


def test_moment_matched_covariance_stays_positive_definite_without_member_noise(tkwargs):
    means = torch.randn(2, 5, 1, **tkwargs)
    posterior = MixtureOfGaussiansPosterior(means, torch.zeros_like(means))
    torch.linalg.cholesky(posterior.distribution.covariance_matrix)
