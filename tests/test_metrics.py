"""Tests of the predictive metrics (Gaussian and mixture NLL, dispatch, RMSE)."""

import math

import pytest
import torch
from botorch.models.transforms.outcome import Standardize
from torch.distributions import Categorical, MixtureSameFamily, Normal

from botorch_nn_uq.metrics import gaussian_nll, mixture_nll, predictive_nll, rmse
from botorch_nn_uq.posteriors import (
    FunctionEnsemblePosterior,
    GaussianMarginalPosterior,
    MixtureOfGaussiansPosterior,
)
from tests.testing import seeded_randn


def _gaussian(tkwargs, n=7, m=2, seed=0):
    generator = torch.Generator().manual_seed(seed)
    dtype = tkwargs["dtype"]
    mean = torch.randn(n, m, generator=generator, dtype=dtype)
    variance = 0.1 + torch.rand(n, m, generator=generator, dtype=dtype)
    y = torch.randn(n, m, generator=generator, dtype=dtype)
    return mean.to(**tkwargs), variance.to(**tkwargs), y.to(**tkwargs)


def _mixture(tkwargs, s=4, n=6, m=2, seed=0):
    generator = torch.Generator().manual_seed(seed)
    dtype = tkwargs["dtype"]
    means = 2.0 * torch.randn(s, n, m, generator=generator, dtype=dtype)
    variances = 0.05 + torch.rand(s, n, m, generator=generator, dtype=dtype)
    weights = torch.rand(s, generator=generator, dtype=dtype) + 0.1
    y = torch.randn(n, m, generator=generator, dtype=dtype)
    return means.to(**tkwargs), variances.to(**tkwargs), weights.to(**tkwargs), y.to(**tkwargs)


def _reference_mixture_nll(means, variances, weights, y):
    # Components last, as MixtureSameFamily expects.
    components = Normal(means.movedim(0, -1), variances.sqrt().movedim(0, -1))
    mixture = MixtureSameFamily(Categorical(probs=weights / weights.sum()), components)
    return -mixture.log_prob(y).mean()


def test_gaussian_nll_matches_torch_normal(tkwargs: dict) -> None:
    mean, variance, y = _gaussian(tkwargs)
    expected = -Normal(mean, variance.sqrt()).log_prob(y).mean()
    torch.testing.assert_close(gaussian_nll(mean, variance, y), expected)
    torch.testing.assert_close(
        gaussian_nll(mean[:, 0], variance[:, 0], y[:, 0]),
        (-Normal(mean[:, 0], variance[:, 0].sqrt()).log_prob(y[:, 0]).mean()),
    )


def test_gaussian_nll_includes_the_constant_and_floors_zero_variance(tkwargs: dict) -> None:
    zeros = torch.zeros(3, 1, **tkwargs)
    nll = gaussian_nll(zeros, torch.ones_like(zeros), zeros)
    assert nll.item() == pytest.approx(0.5 * math.log(2 * math.pi))
    assert gaussian_nll(zeros, zeros, zeros).isfinite()
    assert gaussian_nll(zeros, zeros, zeros + 1.0).item() > 1e10


def test_mixture_nll_matches_mixture_same_family(tkwargs: dict) -> None:
    means, variances, weights, y = _mixture(tkwargs)
    expected = _reference_mixture_nll(means, variances, weights, y)
    torch.testing.assert_close(mixture_nll(means, variances, weights, y), expected)
    # Weights are normalised inside.
    torch.testing.assert_close(mixture_nll(means, variances, 7.0 * weights, y), expected)
    # `s x n` components with `n`-dim targets.
    torch.testing.assert_close(
        mixture_nll(means[..., 0], variances[..., 0], weights, y[..., 0]),
        _reference_mixture_nll(means[..., :1], variances[..., :1], weights, y[..., :1]),
    )


def test_mixture_nll_is_not_the_moment_matched_nll(tkwargs: dict) -> None:
    # Two well-separated components with y at one of them: the mixture density is high
    # there, the moment-matched Gaussian (huge variance) is not.
    means = torch.tensor([[[-5.0]], [[5.0]]], **tkwargs)
    variances = torch.full_like(means, 0.01)
    weights = torch.ones(2, **tkwargs)
    y = torch.tensor([[5.0]], **tkwargs)
    moment_matched = MixtureOfGaussiansPosterior(means, variances, weights)
    matched = gaussian_nll(moment_matched.mean, moment_matched.variance, y)
    assert mixture_nll(means, variances, weights, y) < matched - 1.0


def test_one_component_mixture_equals_gaussian_nll(tkwargs: dict) -> None:
    mean, variance, y = _gaussian(tkwargs)
    weights = torch.ones(1, **tkwargs)
    torch.testing.assert_close(
        mixture_nll(mean.unsqueeze(0), variance.unsqueeze(0), weights, y),
        gaussian_nll(mean, variance, y),
    )


def test_zero_weight_components_are_ignored(tkwargs: dict) -> None:
    means, variances, _, y = _mixture(tkwargs, s=3)
    weights = torch.tensor([1.0, 0.0, 0.0], **tkwargs)
    torch.testing.assert_close(
        mixture_nll(means, variances, weights, y), gaussian_nll(means[0], variances[0], y)
    )


def test_predictive_nll_dispatches_on_the_posterior_family(tkwargs: dict) -> None:
    means, variances, weights, y = _mixture(tkwargs)
    mixture = MixtureOfGaussiansPosterior(means, variances, weights)
    torch.testing.assert_close(
        predictive_nll(mixture, y), _reference_mixture_nll(means, variances, weights, y)
    )
    mean, variance, y = _gaussian(tkwargs)
    gaussian = GaussianMarginalPosterior(mean, variance)
    torch.testing.assert_close(predictive_nll(gaussian, y), gaussian_nll(mean, variance, y))


def test_predictive_nll_of_a_noisy_function_ensemble_is_the_mixture_nll(tkwargs: dict) -> None:
    means, _, weights, y = _mixture(tkwargs)
    functions = FunctionEnsemblePosterior(means, weights)
    with pytest.raises(ValueError, match="observation_noise=True"):
        predictive_nll(functions, y)
    noise = torch.tensor([0.3, 0.5], **tkwargs)
    noisy = functions.add_observation_noise(noise)
    torch.testing.assert_close(
        predictive_nll(noisy, y),
        _reference_mixture_nll(means, noise.expand_as(means), weights, y),
    )


def test_predictive_nll_rejects_batched_and_unsupported_posteriors(tkwargs: dict) -> None:
    means, variances, weights, y = _mixture(tkwargs)
    batched = MixtureOfGaussiansPosterior(means.unsqueeze(0), variances.unsqueeze(0), weights)
    with pytest.raises(ValueError, match="s x n x m"):
        predictive_nll(batched, y)
    mean, variance, y = _gaussian(tkwargs)
    with pytest.raises(ValueError, match="no batch"):
        predictive_nll(GaussianMarginalPosterior(mean.unsqueeze(0), variance.unsqueeze(0)), y)

    class NoMoments:
        @property
        def mean(self):
            raise NotImplementedError

    with pytest.raises(TypeError, match="mean and a variance"):
        predictive_nll(NoMoments(), y)


def test_rmse(tkwargs: dict) -> None:
    mean = torch.tensor([[1.0], [2.0], [3.0], [4.0]], **tkwargs)
    y = torch.tensor([[1.0], [0.0], [3.0], [6.0]], **tkwargs)
    assert rmse(mean, y).item() == pytest.approx(math.sqrt(8 / 4))
    assert rmse(mean[:, 0], y[:, 0]).item() == pytest.approx(math.sqrt(2))


def test_invalid_inputs_raise(tkwargs: dict) -> None:
    mean, variance, y = _gaussian(tkwargs)
    with pytest.raises(ValueError, match="same shape"):
        gaussian_nll(mean, variance, y[:, :1])
    with pytest.raises(ValueError, match="same shape"):
        gaussian_nll(mean, variance[:-1], y)
    with pytest.raises(ValueError, match="same shape"):
        rmse(mean.unsqueeze(0), y.unsqueeze(0))
    with pytest.raises(ValueError, match="non-negative"):
        gaussian_nll(mean, -variance, y)
    means, variances, weights, y = _mixture(tkwargs)
    with pytest.raises(ValueError, match="same shape"):
        mixture_nll(means, variances[:-1], weights, y)
    with pytest.raises(ValueError, match="same shape"):
        mixture_nll(means, variances, weights, y[:-1])
    with pytest.raises(ValueError, match="one entry per component"):
        mixture_nll(means, variances, weights[:-1], y)
    with pytest.raises(ValueError, match="positive sum"):
        mixture_nll(means, variances, -weights, y)
    with pytest.raises(ValueError, match="non-negative"):
        mixture_nll(means, -variances, weights, y)


def test_nll_in_original_units_is_the_standardised_nll_plus_log_scale(tkwargs: dict) -> None:
    # The protocol's NLL_orig = NLL_std + log s_y, which predictive_nll gives directly on a
    # posterior mapped back through Standardize.
    means, variances, weights, _ = _mixture(tkwargs, m=1)
    train_Y = 3.0 + 5.0 * seeded_randn(20, 1, seed=1, **tkwargs)
    transform = Standardize(m=1)
    transform(train_Y)
    transform.eval()
    y_standardised = torch.randn(means.shape[1:], **tkwargs)
    y_original, _ = transform.untransform(y_standardised)
    standardised = MixtureOfGaussiansPosterior(means, variances, weights)
    original = standardised.untransform_outcomes(transform)
    torch.testing.assert_close(
        predictive_nll(original, y_original),
        predictive_nll(standardised, y_standardised) + transform.stdvs.log().squeeze(),
    )


def test_batch_diversity_measures_in_the_unit_cube_and_counts_duplicates(tkwargs: dict):
    from botorch_nn_uq.metrics import batch_diversity

    bounds = torch.tensor([[0.0, 0.0], [10.0, 1.0]], **tkwargs)
    X = torch.tensor([[0.0, 0.0], [5.0, 0.0], [5.0, 0.0], [0.0, 0.5]], **tkwargs)
    diversity = batch_diversity(X, bounds)
    assert diversity.min_distance == 0.0 and diversity.duplicates == 1
    assert batch_diversity(X[[0, 1, 3]], bounds).min_distance == pytest.approx(0.5)
    assert batch_diversity(X[:1], bounds) == (float("inf"), 0)
    with pytest.raises(ValueError, match="X must be q x d"):
        batch_diversity(X, bounds[:, :1])


def test_batch_diversity_of_a_large_batch_works_in_bounded_chunks(monkeypatch) -> None:
    from botorch_nn_uq import metrics

    generator = torch.Generator().manual_seed(0)
    X = torch.rand(500, 3, generator=generator, dtype=torch.float64)
    X[400] = X[17]
    bounds = torch.tensor([[0.0] * 3, [1.0] * 3], dtype=torch.float64)
    full = torch.cdist(X, X, compute_mode="donot_use_mm_for_euclid_dist")
    expected = float((full + torch.eye(500, dtype=torch.float64) * 10).min())
    monkeypatch.setattr(metrics, "DIVERSITY_CHUNK_ENTRIES", 1000)  # two rows at a time
    calls = []
    original = torch.cdist

    def counted(a, b, **options):
        calls.append(a.shape[0] * b.shape[0])
        return original(a, b, **options)

    monkeypatch.setattr(torch, "cdist", counted)
    diversity = metrics.batch_diversity(X, bounds)
    assert diversity.min_distance == pytest.approx(expected) and diversity.duplicates == 1
    assert max(calls) <= 1000
