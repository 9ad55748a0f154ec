"""Tests of the finite-set-of-functions posterior and its index sampler."""

import pytest
import torch
from botorch.models.transforms.outcome import Log, Standardize
from botorch.posteriors.ensemble import EnsemblePosterior
from botorch.sampling.get_sampler import get_sampler
from botorch.sampling.index_sampler import IndexSampler

from botorch_nn_uq.posteriors import (
    EnsembleIndexSampler,
    FunctionEnsemblePosterior,
    MixtureOfGaussiansPosterior,
)
from tests.testing import seeded_rand, seeded_randn, tolerances


def _values(shape, tkwargs, seed=0):
    return seeded_randn(*shape, seed=seed, **tkwargs)


# ---------------------------------------------------------------------------
# FunctionEnsemblePosterior moments


def test_mean_is_the_weighted_mean_of_the_functions(tkwargs):
    values = _values((2, 3, 4, 2), tkwargs)
    weights = torch.tensor([3.0, 1.0, 1.0], **tkwargs)
    posterior = FunctionEnsemblePosterior(values, weights)
    expected = 0.6 * values[:, 0] + 0.2 * values[:, 1] + 0.2 * values[:, 2]
    torch.testing.assert_close(posterior.mean, expected)
    torch.testing.assert_close(posterior.weights, torch.tensor([0.6, 0.2, 0.2], **tkwargs))


def test_variance_is_the_mixture_variance_with_divisor_one(tkwargs):
    values = _values((2, 3, 4, 2), tkwargs, seed=1)
    weights = torch.tensor([3.0, 1.0, 1.0], **tkwargs)
    posterior = FunctionEnsemblePosterior(values, weights)
    w = weights / weights.sum()
    mean = sum(w[k] * values[:, k] for k in range(3))
    expected = sum(w[k] * (values[:, k] - mean) ** 2 for k in range(3))
    torch.testing.assert_close(posterior.variance, expected)


def test_variance_differs_from_botorch_unbiased_variance_by_the_expected_factor(tkwargs):
    num_members = 4
    values = _values((2, num_members, 3, 1), tkwargs, seed=2)
    ours = FunctionEnsemblePosterior(values).variance
    botorch_variance = EnsemblePosterior(values).variance
    # Uniform weights: BoTorch divides by 1 - sum w^2 = 1 - 1 / s.
    torch.testing.assert_close(ours, botorch_variance * (1 - 1 / num_members))
    assert not torch.allclose(ours, botorch_variance)
    # Also equals the population variance (unbiased=False) over members.
    torch.testing.assert_close(ours, values.var(dim=-3, unbiased=False))


def test_single_member_has_zero_variance(tkwargs):
    values = _values((1, 3, 1), tkwargs)
    posterior = FunctionEnsemblePosterior(values)
    torch.testing.assert_close(posterior.variance, torch.zeros(3, 1, **tkwargs))
    torch.testing.assert_close(posterior.mean, values[0])


@pytest.mark.parametrize("num_members", [1, 2, 5])
def test_mixture_statistics_are_the_mean_and_variance(num_members, tkwargs):
    # Ax predicts from the mixture statistics of ensemble posteriors.
    weights = torch.arange(1, num_members + 1, **tkwargs)
    posterior = FunctionEnsemblePosterior(_values((num_members, 3, 1), tkwargs), weights)
    torch.testing.assert_close(posterior.mixture_mean, posterior.mean)
    torch.testing.assert_close(posterior.mixture_variance, posterior.variance)


def test_is_a_botorch_ensemble_posterior(tkwargs):
    posterior = FunctionEnsemblePosterior(_values((2, 4, 3, 1), tkwargs))
    assert isinstance(posterior, EnsemblePosterior)
    assert posterior.batch_shape == torch.Size([2])
    assert posterior.ensemble_size == 4


# ---------------------------------------------------------------------------
# Sampling


def test_get_sampler_returns_the_index_sampler(tkwargs):
    posterior = FunctionEnsemblePosterior(_values((4, 3, 1), tkwargs))
    sampler = get_sampler(posterior, torch.Size([8]), seed=0)
    assert isinstance(sampler, EnsembleIndexSampler)
    assert sampler.seed == 0


def _member_of_each_sample(samples, values):
    r"""For ``sample_shape x batch x q x m`` samples of ``batch x s x q x m`` values,
    return the ``sample_shape x batch`` index of the member each sample equals in full
    (all q points and outputs), asserting that there is one."""
    # samples: n x b x q x m; values: b x s x q x m -> n x b x s
    equal = (samples.unsqueeze(-3) == values.unsqueeze(0)).all(dim=-1).all(dim=-1)
    assert equal.any(dim=-1).all(), "a sample is not one member's full q-vector"
    return equal.to(torch.long).argmax(dim=-1)


def test_samples_are_joint_across_q_and_share_the_member_across_the_batch(tkwargs):
    values = _values((3, 5, 4, 2), tkwargs, seed=3)
    posterior = FunctionEnsemblePosterior(values)
    sampler = EnsembleIndexSampler(torch.Size([20]), seed=1)
    samples = sampler(posterior)
    assert samples.shape == torch.Size([20, 3, 4, 2])
    members = _member_of_each_sample(samples, values)
    # The same member for every batch element, and it is the drawn base sample.
    assert torch.equal(members, sampler.base_samples.unsqueeze(-1).expand(20, 3))


def test_samples_with_multidimensional_sample_shape(tkwargs):
    values = _values((2, 3, 4, 1), tkwargs, seed=4)
    posterior = FunctionEnsemblePosterior(values)
    sampler = EnsembleIndexSampler(torch.Size([2, 3]), seed=0)
    samples = sampler(posterior)
    assert samples.shape == torch.Size([2, 3, 2, 4, 1])
    for i in range(2):
        for j in range(3):
            index = sampler.base_samples[i, j]
            torch.testing.assert_close(samples[i, j], values[:, index])


def test_uniform_weights_and_multiple_sample_count_give_the_exact_mean(tkwargs):
    values = _values((2, 4, 3, 1), tkwargs, seed=5)
    posterior = FunctionEnsemblePosterior(values)
    samples = EnsembleIndexSampler(torch.Size([4 * 3]), seed=7)(posterior)
    exact = tolerances(tkwargs["dtype"])
    torch.testing.assert_close(samples.mean(0), posterior.mean, **exact)
    # The empirical population variance is the mixture variance, also exactly.
    torch.testing.assert_close(samples.var(0, unbiased=False), posterior.variance, **exact)


def test_non_uniform_weights_give_samples_with_the_weighted_frequencies(tkwargs):
    values = torch.arange(3, **tkwargs).reshape(3, 1, 1)
    weights = torch.tensor([3.0, 1.0, 1.0], **tkwargs)
    posterior = FunctionEnsemblePosterior(values, weights)
    samples = EnsembleIndexSampler(torch.Size([50]), seed=0)(posterior)
    counts = torch.bincount(samples.reshape(-1).long(), minlength=3)
    assert counts.tolist() == [30, 10, 10]
    torch.testing.assert_close(samples.mean(0), posterior.mean)


def test_sampler_is_deterministic_under_a_seed(tkwargs):
    values = _values((2, 6, 3, 1), tkwargs, seed=6)
    posterior = FunctionEnsemblePosterior(values)
    first = EnsembleIndexSampler(torch.Size([16]), seed=3)(posterior)
    second = EnsembleIndexSampler(torch.Size([16]), seed=3)(posterior)
    other = EnsembleIndexSampler(torch.Size([16]), seed=4)(posterior)
    assert torch.equal(first, second)
    assert not torch.equal(first, other)


def test_sampler_reuses_base_samples_for_an_unchanged_shape_and_weights(tkwargs):
    sampler = EnsembleIndexSampler(torch.Size([8]), seed=0)
    weights = torch.tensor([1.0, 2.0, 1.0], **tkwargs)
    sampler(FunctionEnsemblePosterior(_values((2, 3, 4, 1), tkwargs, seed=0), weights))
    base_samples = sampler.base_samples
    # New values, other batch and q sizes, same weights: indices reused.
    values = _values((5, 3, 2, 1), tkwargs, seed=1)
    samples = sampler(FunctionEnsemblePosterior(values, weights))
    assert sampler.base_samples is base_samples
    torch.testing.assert_close(samples, values[:, base_samples].movedim(1, 0))


def test_sampler_redraws_base_samples_when_the_weights_change(tkwargs):
    sampler = EnsembleIndexSampler(torch.Size([10]), seed=0)
    values = _values((3, 4, 1), tkwargs)
    sampler(FunctionEnsemblePosterior(values, torch.tensor([1.0, 1.0, 8.0], **tkwargs)))
    counts_before = torch.bincount(sampler.base_samples, minlength=3)
    assert counts_before.tolist() == [1, 1, 8]
    sampler(FunctionEnsemblePosterior(values, torch.tensor([8.0, 1.0, 1.0], **tkwargs)))
    counts_after = torch.bincount(sampler.base_samples, minlength=3)
    assert counts_after.tolist() == [8, 1, 1]
    # A different ensemble size is also a weight change.
    sampler(FunctionEnsemblePosterior(_values((2, 4, 1), tkwargs), None))
    assert sampler.base_samples.max().item() <= 1
    assert torch.bincount(sampler.base_samples, minlength=2).tolist() == [5, 5]


def test_botorch_style_base_samples_with_batch_dimensions_fall_back_to_the_parent(tkwargs):
    values = _values((2, 4, 3, 1), tkwargs, seed=8)
    posterior = FunctionEnsemblePosterior(values)
    # sample_shape x batch_shape
    base_samples = torch.tensor([[0, 3], [2, 2], [1, 0]], device=tkwargs["device"])
    samples = posterior.rsample_from_base_samples(torch.Size([3]), base_samples)
    assert samples.shape == torch.Size([3, 2, 3, 1])
    for i in range(3):
        for b in range(2):
            torch.testing.assert_close(samples[i, b], values[b, base_samples[i, b]])
    # BoTorch's own IndexSampler works with the posterior too.
    botorch_samples = IndexSampler(torch.Size([5]), seed=0)(posterior)
    assert botorch_samples.shape == torch.Size([5, 2, 3, 1])
    _member_of_each_sample(botorch_samples, values)


def test_rsample_draws_members_with_gradients(tkwargs):
    values = _values((2, 3, 4, 1), tkwargs, seed=9).requires_grad_(True)
    posterior = FunctionEnsemblePosterior(values)
    torch.manual_seed(0)
    samples = posterior.rsample(torch.Size([6]))
    assert samples.shape == torch.Size([6, 2, 4, 1])
    members = _member_of_each_sample(samples.detach(), values.detach())
    assert torch.bincount(members[:, 0], minlength=3).tolist() == [2, 2, 2]
    assert torch.equal(members[:, 0], members[:, 1])
    samples.sum().backward()
    # Every member was drawn twice, for every point of both batch elements.
    torch.testing.assert_close(values.grad, torch.full_like(values, 2.0))
    torch.manual_seed(0)
    assert torch.equal(posterior.rsample(torch.Size([6])), samples)


def test_rsample_default_shape_is_one_sample(tkwargs):
    posterior = FunctionEnsemblePosterior(_values((3, 2, 1), tkwargs))
    assert posterior.rsample().shape == torch.Size([1, 2, 1])


# ---------------------------------------------------------------------------
# Derived posteriors


def test_subset_outputs_keeps_the_weights(tkwargs):
    values = _values((2, 3, 4, 3), tkwargs, seed=10)
    weights = torch.tensor([1.0, 2.0, 5.0], **tkwargs)
    posterior = FunctionEnsemblePosterior(values, weights)
    subset = posterior.subset_outputs([2, 0])
    assert isinstance(subset, FunctionEnsemblePosterior)
    torch.testing.assert_close(subset.values, values[..., [2, 0]])
    torch.testing.assert_close(subset.weights, weights / weights.sum())
    torch.testing.assert_close(subset.mean, posterior.mean[..., [2, 0]])
    torch.testing.assert_close(subset.variance, posterior.variance[..., [2, 0]])


@pytest.mark.parametrize("noise_shape", [(), (1,), (4, 2)])
def test_add_observation_noise_gives_a_mixture_with_the_noise_added(noise_shape, tkwargs):
    values = _values((3, 5, 4, 2), tkwargs, seed=11)
    weights = torch.tensor([2.0, 1.0, 1.0, 3.0, 1.0], **tkwargs)
    posterior = FunctionEnsemblePosterior(values, weights)
    noise = 0.3 + seeded_rand(*noise_shape, seed=0, **tkwargs)
    noisy = posterior.add_observation_noise(noise)
    assert isinstance(noisy, MixtureOfGaussiansPosterior)
    torch.testing.assert_close(noisy.mean, posterior.mean)
    torch.testing.assert_close(noisy.epistemic_variance, posterior.variance)
    expected_noise = noise.expand(3, 4, 2)
    torch.testing.assert_close(noisy.aleatoric_variance, expected_noise)
    torch.testing.assert_close(noisy.variance, posterior.variance + expected_noise)
    torch.testing.assert_close(noisy.weights, weights / weights.sum())


def test_scalarize_is_the_affine_map_of_every_function(tkwargs):
    values = _values((2, 4, 3, 2), tkwargs, seed=12)
    weights = torch.tensor([1.0, 1.0, 2.0, 4.0], **tkwargs)
    posterior = FunctionEnsemblePosterior(values, weights)
    scalar_weights = torch.tensor([2.0, -1.0], **tkwargs)
    scalarized = posterior.scalarize(scalar_weights, offset=1.5)
    expected_values = 1.5 + 2.0 * values[..., :1] - values[..., 1:]
    torch.testing.assert_close(scalarized.values, expected_values)
    torch.testing.assert_close(scalarized.weights, posterior.weights)
    torch.testing.assert_close(scalarized.mean, 1.5 + posterior.mean @ scalar_weights[:, None])
    # Samples with the same seed are the affine map of the original samples.
    samples = EnsembleIndexSampler(torch.Size([16]), seed=2)(posterior)
    scalar_samples = EnsembleIndexSampler(torch.Size([16]), seed=2)(scalarized)
    torch.testing.assert_close(scalar_samples, 1.5 + samples @ scalar_weights[:, None])


def test_untransform_outcomes_with_standardize(tkwargs):
    train_Y = seeded_randn(12, 2, seed=0, **tkwargs) * torch.tensor(
        [2.0, 0.5], **tkwargs
    ) + torch.tensor([1.0, -3.0], **tkwargs)
    transform = Standardize(m=2)
    transform.train()
    transform(train_Y)
    transform.eval()
    location, scale = train_Y.mean(0), train_Y.std(0)
    values = _values((2, 3, 4, 2), tkwargs, seed=13)
    weights = torch.tensor([1.0, 3.0, 1.0], **tkwargs)
    posterior = FunctionEnsemblePosterior(values, weights)
    untransformed = posterior.untransform_outcomes(transform)
    assert isinstance(untransformed, FunctionEnsemblePosterior)
    torch.testing.assert_close(untransformed.values, location + scale * values)
    torch.testing.assert_close(untransformed.mean, location + scale * posterior.mean)
    torch.testing.assert_close(untransformed.variance, scale**2 * posterior.variance)
    torch.testing.assert_close(untransformed.weights, posterior.weights)


def test_untransform_outcomes_with_a_nonlinear_transform_maps_every_function(tkwargs):
    values = _values((3, 4, 1), tkwargs, seed=14)
    posterior = FunctionEnsemblePosterior(values)
    untransformed = posterior.untransform_outcomes(Log())
    torch.testing.assert_close(untransformed.values, values.exp())
    torch.testing.assert_close(untransformed.mean, values.exp().mean(dim=-3))


@pytest.mark.parametrize(
    "weights", [[1.0] * 4, [1.0, 1.0], [[1.0, 1.0, 1.0]], [1.0, -1.0, 1.0], [0.0] * 3]
)
def test_invalid_weights_raise(weights, tkwargs):
    with pytest.raises(ValueError, match="weights"):
        FunctionEnsemblePosterior(_values((2, 3, 4, 1), tkwargs), torch.tensor(weights, **tkwargs))


# ---------------------------------------------------------------------------
# Fresh functions beyond the bank (draw_functions)


class _LinearFunctions:
    r"""Functions ``f_a(x) = a x`` with ``a ~ N(0, 1)`` at fixed ``batch x q x 1`` points."""

    def __init__(self, points):
        self.points = points
        self.slopes = []

    def __call__(self, n):
        slopes = torch.randn(n, dtype=self.points.dtype).to(self.points.device)
        self.slopes.append(slopes)
        return slopes[:, None, None] * self.points.unsqueeze(-3)


def _bank_posterior(tkwargs, num_functions=4):
    points = torch.linspace(1.0, 2.0, 6, **tkwargs).reshape(2, 3, 1)
    draw = _LinearFunctions(points)
    torch.manual_seed(0)
    return FunctionEnsemblePosterior(draw(num_functions), draw_functions=draw), draw


def _slopes(samples, points):
    # Every sample is a * x at all points: recover a from the first point.
    slopes = samples[:, 0, 0, 0] / points[0, 0, 0]
    torch.testing.assert_close(samples, slopes[:, None, None, None] * points)
    return slopes


def test_rsample_within_the_bank_gives_distinct_bank_functions(tkwargs):
    posterior, draw = _bank_posterior(tkwargs)
    torch.manual_seed(1)
    slopes = _slopes(posterior.rsample(torch.Size([4])), draw.points)
    assert len(draw.slopes) == 1
    torch.testing.assert_close(slopes.sort().values, draw.slopes[0].sort().values)


def test_rsample_beyond_the_bank_draws_fresh_functions_all_distinct(tkwargs):
    posterior, draw = _bank_posterior(tkwargs)
    torch.manual_seed(1)
    samples = posterior.rsample(torch.Size([5, 2]))
    assert samples.shape == torch.Size([5, 2, 2, 3, 1])
    slopes = _slopes(samples.flatten(0, 1), draw.points)
    expected = torch.cat(draw.slopes)
    assert [len(s) for s in draw.slopes] == [4, 6]
    torch.testing.assert_close(slopes.sort().values, expected.sort().values)
    assert slopes.unique().numel() == 10


def test_fresh_functions_follow_outcome_transforms_subsets_and_scalarisation(tkwargs):
    posterior, draw = _bank_posterior(tkwargs)
    transform = Standardize(m=1)
    transform(torch.tensor([[1.0], [3.0], [8.0]], **tkwargs))
    transform.eval()
    mapped = posterior.untransform_outcomes(transform).subset_outputs([0])
    mapped = mapped.scalarize(torch.tensor([2.0], **tkwargs), offset=1.0)
    torch.manual_seed(1)
    samples = mapped.rsample(torch.Size([9]))
    torch.manual_seed(1)
    expected = posterior.rsample(torch.Size([9]))
    expected = 1.0 + 2.0 * (transform.means + transform.stdvs * expected)
    torch.testing.assert_close(samples, expected)


def test_draw_functions_needs_an_equally_weighted_bank(tkwargs):
    with pytest.raises(ValueError, match="equally weighted"):
        FunctionEnsemblePosterior(
            _values((3, 2, 1), tkwargs), torch.ones(3, **tkwargs), draw_functions=lambda n: None
        )
