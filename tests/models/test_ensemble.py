"""Tests of the deep ensemble: the mixture posterior and its aleatoric / epistemic split,
member resampling, member weights and warm starts. Shapes, transforms and acquisitions
are covered by the conformance kit (``tests/models/test_conformance.py``)."""

import math

import pytest
import torch
from botorch.models.transforms import Normalize, Standardize

from botorch_nn_uq.ensembles.holdout import holdout_size
from botorch_nn_uq.models import (
    DeepEnsemble,
    DeepEnsembleHyperparameters,
    MCDropout,
    UncertaintyDecomposition,
)
from botorch_nn_uq.models.ensemble import member_validation_masks, resampling_row_weights
from botorch_nn_uq.nn.batched_mlp import BatchedMLP
from botorch_nn_uq.posteriors import FunctionEnsemblePosterior, MixtureOfGaussiansPosterior
from botorch_nn_uq.training import NonFiniteLossError
from botorch_nn_uq.training.members import fit_members
from tests.cards import fast_settings

DTYPE = torch.float64
#: The deep ensemble's card's fast settings, with the widths that the warm-start checks
#: tell apart from (32, 32).
FAST = fast_settings("deep-ensemble", hidden_widths=(16, 16), epochs=100)


def _one_dimensional_data(n=30, seed=0, scale=1.0, offset=0.0, noise=0.05, upper=0.5):
    r"""``n`` points on ``[0, upper]`` of ``offset + scale * (sin(6 x) + noise * eps)``."""
    generator = torch.Generator().manual_seed(seed)
    train_X = upper * torch.rand(n, 1, generator=generator, dtype=DTYPE)
    eps = torch.randn(n, 1, generator=generator, dtype=DTYPE)
    return train_X, offset + scale * (torch.sin(6 * train_X) + noise * eps)


def _grid(low, high, num):
    return torch.linspace(low, high, num, dtype=DTYPE).view(num, 1, 1)


def _member_outputs(model, X):
    r"""Member means and variances in ORIGINAL units, computed from the network and the
    ``Standardize`` statistics by hand (``K x q x m``)."""
    with torch.no_grad():
        output = model.network(model.transform_inputs(X))
    transform = getattr(model, "outcome_transform", None)
    if transform is None:
        return output.mean, None if output.std is None else output.std.pow(2)
    mean = output.mean * transform.stdvs + transform.means
    variance = None if output.std is None else output.std.pow(2) * transform.stdvs.pow(2)
    return mean, variance


def _parameters(model):
    return [p.detach().clone() for p in model.network.parameters()]


# ---------------------------------------------------------------------------
# Seeds


def test_seeds_determine_the_members():
    train_X, train_Y = _one_dimensional_data()
    X = _grid(0, 1, 5)
    first = DeepEnsemble(train_X, train_Y, **FAST).fit(seed=0)
    torch.manual_seed(123)  # the global RNG plays no part
    again = DeepEnsemble(train_X, train_Y, **FAST).fit(seed=0)
    other = DeepEnsemble(train_X, train_Y, **FAST).fit(seed=1)
    (members,) = first.network.groups
    assert members.member_seeds == again.network.groups[0].member_seeds
    assert len(set(members.member_seeds)) == 5
    assert not set(members.member_seeds) & set(other.network.groups[0].member_seeds)
    for a, b in zip(_parameters(first), _parameters(again), strict=True):
        assert torch.equal(a, b)
    values = first.posterior(X).values
    torch.testing.assert_close(again.posterior(X).values, values, rtol=0, atol=0)
    other_values = other.posterior(X).values
    for k in range(5):
        assert not torch.allclose(values[:, k], other_values[:, k])
        for j in range(k):
            assert not torch.allclose(values[:, k], values[:, j])


# ---------------------------------------------------------------------------
# The mixture posterior and the aleatoric / epistemic split


def _large_units_data():
    return _one_dimensional_data(n=40, scale=50.0, offset=100.0, noise=0.1)


@pytest.fixture(scope="module")
def large_units_model():
    r"""A Gaussian ensemble on data of scale ~100 (noise std 5) with ``Standardize``."""
    train_X, train_Y = _large_units_data()
    return DeepEnsemble(
        train_X,
        train_Y,
        outcome_transform=Standardize(1),
        ensemble_size=4,
        hidden_widths=(16, 16),
        epochs=300,
    ).fit(seed=0)


def test_mixture_moments_equal_a_monte_carlo_estimate(large_units_model):
    model = large_units_model
    # Points at the data and beyond it, where the members disagree.
    X = torch.tensor([[0.1], [0.4], [1.0], [2.0]], dtype=DTYPE)
    with torch.no_grad():
        posterior = model.posterior(X, observation_noise=True)
    assert isinstance(posterior, MixtureOfGaussiansPosterior)
    num_samples = 200_000
    torch.manual_seed(0)
    samples = posterior.rsample(torch.Size([num_samples]))
    assert samples.shape == (num_samples, 4, 1)
    sample_mean = samples.mean(0)
    squared = (samples - sample_mean).pow(2)
    sample_variance = squared.mean(0)
    # Five standard errors of the mean and of the variance estimate.
    mean_error = (sample_variance / num_samples).sqrt()
    variance_error = squared.std(0) / math.sqrt(num_samples)
    assert ((sample_mean - posterior.mean).abs() < 5 * mean_error).all()
    assert ((sample_variance - posterior.variance).abs() < 5 * variance_error).all()
    # The sampled mixture exercises both parts: mostly aleatoric at the data, mostly
    # epistemic beyond it (5 model seeds gave epistemic / aleatoric >= 4 there).
    assert (posterior.epistemic_variance[2:] > posterior.aleatoric_variance[2:]).all()
    assert (posterior.epistemic_variance[:2] < posterior.aleatoric_variance[:2]).all()
    assert (posterior.aleatoric_variance > 0).all()


def test_decomposition_is_in_original_units(large_units_model):
    model = large_units_model
    train_X, train_Y = _large_units_data()
    X = torch.tensor([[[0.05], [0.3]], [[0.7], [1.0]]], dtype=DTYPE)  # batch x q x d
    with torch.no_grad():
        posterior = model.posterior(X, observation_noise=True)
    decomposition = model.uncertainty_decomposition(X)
    assert isinstance(decomposition, UncertaintyDecomposition)
    assert decomposition.mean.shape == (2, 2, 1)
    torch.testing.assert_close(decomposition.mean, posterior.mean)
    torch.testing.assert_close(decomposition.aleatoric_variance, posterior.aleatoric_variance)
    torch.testing.assert_close(decomposition.epistemic_variance, posterior.epistemic_variance)
    torch.testing.assert_close(decomposition.total_variance, posterior.variance)
    torch.testing.assert_close(
        posterior.variance, posterior.aleatoric_variance + posterior.epistemic_variance
    )
    # By hand: members in original units, then the law of total variance (divisor one).
    means, variances = _member_outputs(model, X)
    ensemble_mean = means.mean(-3)
    torch.testing.assert_close(decomposition.mean, ensemble_mean)
    torch.testing.assert_close(decomposition.aleatoric_variance, variances.mean(-3))
    torch.testing.assert_close(
        decomposition.epistemic_variance, (means - ensemble_mean.unsqueeze(-3)).pow(2).mean(-3)
    )
    # Original units: the fit at the data is on the scale of the data (~100), and the
    # aleatoric std is near the data's noise (0.1 * 50 = 5), not the transformed ~0.1.
    fit = model.uncertainty_decomposition(train_X.unsqueeze(-2))
    assert (fit.mean.squeeze(-2) - train_Y).abs().mean() < 10.0
    assert 1.5 < fit.aleatoric_variance.sqrt().median() < 15.0


def test_epistemic_variance_grows_away_from_the_data():
    # Training inputs on [0, 0.5]; 5 seeds gave ratios of at least 200 at every far point.
    train_X, train_Y = _one_dimensional_data(n=30)
    model = DeepEnsemble(train_X, train_Y, hidden_widths=(32, 32), epochs=300).fit(seed=0)
    at_data = model.uncertainty_decomposition(train_X.unsqueeze(-2)).epistemic_variance
    far_away = model.uncertainty_decomposition(_grid(0.8, 1.5, 15)).epistemic_variance
    assert (far_away > 20 * at_data.mean()).all()


def test_aleatoric_variance_tracks_heteroscedastic_noise():
    generator = torch.Generator().manual_seed(0)
    train_X = torch.rand(400, 1, generator=generator, dtype=DTYPE)
    noise_std = 0.05 + 0.5 * train_X
    train_Y = 0.5 * torch.sin(2 * math.pi * train_X) + noise_std * torch.randn(
        400, 1, generator=generator, dtype=DTYPE
    )
    model = DeepEnsemble(train_X, train_Y, ensemble_size=3, hidden_widths=(32, 32), epochs=300)
    model.fit(seed=0)
    X = _grid(0.1, 0.9, 5)
    aleatoric_std = model.uncertainty_decomposition(X).aleatoric_variance.sqrt().view(-1)
    true_std = (0.05 + 0.5 * X).view(-1)
    # 5 seeds gave ratios of 4.5 to 6 (truth: 5) and std / truth within [0.82, 1.08].
    assert aleatoric_std[-1] > 3 * aleatoric_std[0]
    assert ((aleatoric_std / true_std - 1).abs() < 0.5).all()


def test_latent_posterior_is_the_set_of_member_means(large_units_model):
    model = large_units_model
    X = _grid(0, 1, 6)
    posterior = model.posterior(X)
    assert isinstance(posterior, FunctionEnsemblePosterior)
    assert posterior.values.shape == (6, 4, 1, 1)
    means, _ = _member_outputs(model, X)
    torch.testing.assert_close(posterior.values, means)
    torch.testing.assert_close(posterior.weights, torch.full((4,), 0.25, dtype=DTYPE))
    noisy = model.posterior(X, observation_noise=True)
    torch.testing.assert_close(posterior.mean, noisy.mean)
    torch.testing.assert_close(posterior.variance, noisy.epistemic_variance)


def test_mse_members_add_the_estimated_homoscedastic_noise():
    train_X, train_Y = _one_dimensional_data(n=40, scale=50.0, offset=100.0, noise=0.2)
    model = DeepEnsemble(
        train_X, train_Y, outcome_transform=Standardize(1), likelihood="mse", **FAST
    ).fit(seed=0)
    assert model.network.gaussian_head is False
    X = _grid(0, 1, 5)
    latent = model.posterior(X)
    assert isinstance(latent, FunctionEnsemblePosterior)
    means, variances = _member_outputs(model, X)
    assert variances is None
    torch.testing.assert_close(latent.values, means)
    # The noise variance (transformed units) is the ensemble mean's mean squared residual.
    transform = model.outcome_transform
    fit_means, _ = _member_outputs(model, train_X)
    residuals = (fit_means.mean(-3) - train_Y) / transform.stdvs
    torch.testing.assert_close(model.noise_variance, residuals.pow(2).mean(0))
    assert model.noise_variance.shape == (1,)
    # observation_noise=True: every member gets that variance, in original units.
    noisy = model.posterior(X, observation_noise=True)
    assert isinstance(noisy, MixtureOfGaussiansPosterior)
    torch.testing.assert_close(noisy.component_means, means)
    expected = model.noise_variance * transform.stdvs.pow(2)
    torch.testing.assert_close(noisy.component_variances, expected.expand_as(means))
    torch.testing.assert_close(noisy.variance, latent.variance + expected)
    decomposition = model.uncertainty_decomposition(X)
    torch.testing.assert_close(decomposition.aleatoric_variance, expected.expand(5, 1, 1))
    # A given noise variance replaces the estimate.
    fixed = DeepEnsemble(train_X, train_Y, likelihood="mse", noise_variance=0.3, **FAST)
    fixed.fit(seed=0)
    torch.testing.assert_close(fixed.noise_variance, torch.tensor([0.3], dtype=DTYPE))


# ---------------------------------------------------------------------------
# Bootstrap, random subsets and validation rows


def _members(seeds):
    return BatchedMLP(1, 1, (4,), seeds)


def test_bootstrap_row_weights():
    weights = resampling_row_weights(_members([5, 7, 9]), 50, True, None, DTYPE)
    assert weights.shape == (3, 50) and weights.dtype == DTYPE
    torch.testing.assert_close(weights.sum(-1), torch.full((3,), 50.0, dtype=DTYPE))
    assert (weights == weights.round()).all() and (weights >= 0).all()
    assert (weights == 0).any(-1).all()  # a bootstrap leaves rows out
    assert not torch.equal(weights[0], weights[1]) and not torch.equal(weights[1], weights[2])
    # A member's resample depends on its own seed only.
    alone = resampling_row_weights(_members([9, 1]), 50, True, None, DTYPE)
    torch.testing.assert_close(alone[0], weights[2], rtol=0, atol=0)


@pytest.mark.parametrize(("fraction", "size"), [(0.5, 25), (0.33, 16), (0.01, 1), (1.0, 50)])
def test_subset_row_weights(fraction, size):
    weights = resampling_row_weights(_members([5, 7, 9]), 50, False, fraction, DTYPE)
    assert weights.shape == (3, 50)
    assert ((weights == 0) | (weights == 1)).all()
    assert weights.sum(-1).tolist() == [size] * 3
    if 1 < size < 50:
        assert not torch.equal(weights[0], weights[1])
    alone = resampling_row_weights(_members([7]), 50, False, fraction, DTYPE)
    torch.testing.assert_close(alone[0], weights[1], rtol=0, atol=0)


def test_no_resampling_uses_every_row():
    assert resampling_row_weights(_members([5, 7]), 50, False, None, DTYPE) is None


@pytest.mark.parametrize(("num_data", "fraction"), [(2, 0.5), (5, 0.2), (30, 0.1), (50, 0.2)])
def test_each_member_holds_out_its_own_holdout_size_rows(num_data, fraction):
    masks = member_validation_masks(_members([5, 7, 9]), num_data, fraction, DTYPE)
    assert ((masks == 0) | (masks == 1)).all()
    assert masks.sum(-1).tolist() == [holdout_size(num_data, fraction)] * 3
    if num_data > 2:
        assert not torch.equal(masks[0], masks[1])
    alone = member_validation_masks(_members([7]), num_data, fraction, DTYPE)
    torch.testing.assert_close(alone[0], masks[1], rtol=0, atol=0)


@pytest.mark.parametrize("resampling", [{"bootstrap": True}, {"subset_fraction": 0.6}])
def test_resampled_ensemble_trains_each_member_on_its_rows(resampling):
    train_X, train_Y = _one_dimensional_data(n=30)
    X = _grid(0, 1, 5)
    hyperparameters = {"ensemble_size": 3, "hidden_widths": (8, 8), "epochs": 30}
    plain = DeepEnsemble(train_X, train_Y, **hyperparameters).fit(seed=0)
    model = DeepEnsemble(train_X, train_Y, **hyperparameters, **resampling).fit(seed=0)
    (members,) = model.network.groups
    assert members.member_seeds == plain.network.groups[0].member_seeds
    assert not torch.allclose(model.posterior(X).values, plain.posterior(X).values)
    # By hand: the same members trained with the resampled row weights.
    hp = model.hyperparameters
    manual = BatchedMLP(
        1, 1, (8, 8), members.member_seeds, activation=hp.activation, gaussian_head=True
    ).to(DTYPE)
    row_weights = resampling_row_weights(
        manual,
        30,
        resampling.get("bootstrap", False),
        resampling.get("subset_fraction"),
        DTYPE,
    )
    hp = model.hyperparameters
    fit_members(
        manual,
        *model.transformed_training_data(),
        hp.training_config(),
        l2_regularization=hp.l2_regularization,
        row_weights=row_weights,
        training_dtype=hp.training_dtype,
    )
    for a, b in zip(members.parameters(), manual.parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-8)


# ---------------------------------------------------------------------------
# Hyperparameters and member weights


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"ensemble_size": 0}, "ensemble_size"),
        ({"ensemble_size": 2.0}, "ensemble_size"),
        ({"likelihood": "laplace"}, "likelihood"),
        ({"bootstrap": True, "subset_fraction": 0.5}, "either bootstrap or subset_fraction"),
        ({"subset_fraction": 0.0}, "subset_fraction"),
        ({"subset_fraction": 1.5}, "subset_fraction"),
        ({"dropout": 1.0}, "dropout"),
        ({"dropout": -0.1}, "dropout"),
        ({"min_std": 0.0}, "min_std"),
        ({"l2_regularization": -1.0}, "l2_regularization"),
        ({"noise_variance": 0.0}, "noise_variance"),
        ({"hidden_widths": ()}, "hidden_widths"),
        ({"activation": "nope"}, "activation"),
        ({"epochs": 0}, "epochs"),
        ({"learning_rate": -1.0}, "learning_rate"),
        ({"optimizer": "lbfgs"}, "optimizer"),
        ({"early_stopping_patience": 0}, "early_stopping_patience"),
        ({"gradient_clip_norm": 0.0}, "gradient_clip_norm"),
    ],
)
def test_invalid_hyperparameters(values, message):
    with pytest.raises(ValueError, match=message):
        DeepEnsembleHyperparameters(**values)


def test_hyperparameters_reach_the_network_and_the_training():
    hp = DeepEnsembleHyperparameters(
        ensemble_size=3, hidden_widths=[8], dropout=0.1, min_std=0.01, early_stopping_patience=4
    )
    assert hp.hidden_widths == (8,)
    config = hp.training_config()
    assert (config.epochs, config.learning_rate, config.early_stopping_patience) == (500, 5e-3, 4)
    train_X, train_Y = _one_dimensional_data(n=10)
    model = DeepEnsemble(train_X, train_Y, **{**vars(hp), "activation": "tanh", "epochs": 5})
    model.fit(seed=0)
    (members,) = model.network.groups
    assert members.num_members == 3 and members.hidden_widths == [8]
    assert members.activation_names == ("tanh",) and members.min_std == 0.01
    torch.testing.assert_close(members.dropout_rates, torch.full((3,), 0.1, dtype=DTYPE))
    assert model.training_result.best_epoch.shape == (3,)


def test_member_weights():
    train_X, train_Y = _large_units_data()
    model = DeepEnsemble(
        train_X, train_Y, outcome_transform=Standardize(1), ensemble_size=4, **FAST
    ).fit(seed=0)
    X = _grid(0, 1, 3)
    torch.testing.assert_close(model.member_weights, torch.full((4,), 0.25, dtype=DTYPE))
    means, _ = _member_outputs(model, X)
    model.set_member_weights(torch.tensor([1.0, 3.0, 0.0, 0.0], dtype=DTYPE))
    torch.testing.assert_close(
        model.member_weights, torch.tensor([0.25, 0.75, 0.0, 0.0], dtype=DTYPE)
    )
    first, second = means[:, 0], means[:, 1]
    expected_mean = 0.25 * first + 0.75 * second
    torch.testing.assert_close(model.posterior(X).mean, expected_mean)
    noisy = model.posterior(X, observation_noise=True)
    torch.testing.assert_close(noisy.mean, expected_mean)
    torch.testing.assert_close(
        noisy.epistemic_variance,
        0.25 * (first - expected_mean) ** 2 + 0.75 * (second - expected_mean) ** 2,
    )
    for weights, message in [
        (torch.ones(3, dtype=DTYPE), "non-negative 4-vector"),
        (torch.ones(1, 4, dtype=DTYPE), "non-negative 4-vector"),
        (torch.tensor([1.0, -1.0, 1.0, 1.0], dtype=DTYPE), "non-negative 4-vector"),
        (torch.zeros(4, dtype=DTYPE), "positive sum"),
    ]:
        with pytest.raises(ValueError, match=message):
            model.set_member_weights(weights)
    # A refit resets the weights to uniform.
    model.fit(seed=0, epochs=2)
    torch.testing.assert_close(model.member_weights, torch.full((4,), 0.25, dtype=DTYPE))


# ---------------------------------------------------------------------------
# Warm starts


def test_warm_start_begins_at_the_previous_weights():
    train_X, train_Y = _one_dimensional_data()
    previous = DeepEnsemble(train_X, train_Y, **FAST).fit(seed=0)
    # One full-batch epoch keeps the weights before its step: exactly the previous ones.
    model = DeepEnsemble(train_X, train_Y, **FAST).fit(seed=1, warm_start=previous, epochs=1)
    for a, b in zip(_parameters(model), _parameters(previous), strict=True):
        assert torch.equal(a, b)
    # A few tiny steps stay close to the previous model (a fresh fit would not).
    model.fit(seed=1, warm_start=previous, epochs=5, learning_rate=1e-7)
    fresh = DeepEnsemble(train_X, train_Y, **FAST).fit(seed=1, epochs=5, learning_rate=1e-7)
    X = _grid(0, 1, 5)
    torch.testing.assert_close(
        model.posterior(X).values, previous.posterior(X).values, atol=1e-4, rtol=0
    )
    assert not torch.allclose(fresh.posterior(X).values, previous.posterior(X).values, atol=0.1)
    moved = zip(_parameters(model), _parameters(previous), strict=True)
    assert any(not torch.equal(a, b) for a, b in moved)


def test_warm_start_must_be_a_fitted_deep_ensemble():
    train_X, train_Y = _one_dimensional_data(n=10)
    model = DeepEnsemble(train_X, train_Y, **FAST)
    with pytest.raises(ValueError, match="warm_start must be a fitted DeepEnsemble"):
        model.fit(seed=0, warm_start=DeepEnsemble(train_X, train_Y))
    dropout = MCDropout(train_X, train_Y, hidden_widths=(16, 16), epochs=2).fit(seed=0)
    with pytest.raises(ValueError, match="warm_start must be a fitted DeepEnsemble"):
        model.fit(seed=0, warm_start=dropout)
    wider = DeepEnsemble(train_X, train_Y, hidden_widths=(32, 32), epochs=2).fit(seed=0)
    with pytest.raises(ValueError, match="different architecture"):
        model.fit(seed=0, warm_start=wider)


def test_warm_start_keeps_the_new_fits_dropout_rate() -> None:
    X = torch.rand(20, 1, dtype=torch.float64)
    Y = torch.sin(6 * X)
    previous = DeepEnsemble(X, Y, hidden_widths=(8,), epochs=5, ensemble_size=2).fit(seed=0)
    model = DeepEnsemble(X, Y, hidden_widths=(8,), epochs=5, ensemble_size=2, dropout=0.3)
    model.fit(seed=1, warm_start=previous)
    torch.testing.assert_close(
        model.network.groups[0].dropout_rates, torch.full((2,), 0.3, dtype=torch.float64)
    )


def test_member_weights_need_a_fitted_model() -> None:
    X = torch.rand(10, 1, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="not fitted"):
        DeepEnsemble(X, X.sin()).set_member_weights(torch.ones(5))


def _converged_and_more_data():
    generator = torch.Generator().manual_seed(0)
    X = torch.rand(400, 20, generator=generator, dtype=DTYPE)
    Y = -((X - 0.3) ** 2).sum(-1, keepdim=True)
    # ReLU members: this fit ends at an optimum that no step from it improves.
    settings = {"hidden_widths": (16,), "ensemble_size": 3, "activation": "relu"}

    def model(rows: int, **options) -> DeepEnsemble:
        transforms = {"input_transform": Normalize(20), "outcome_transform": Standardize(1)}
        return DeepEnsemble(X[:rows], Y[:rows], **transforms, **{**settings, **options})

    return model(380, max_steps=400).fit(seed=0), model


def test_a_warm_start_at_its_optimum_is_not_taken_for_a_divergence() -> None:
    converged, model = _converged_and_more_data()
    # At the full learning rate no step improves on a start at the optimum.
    warm = model(400, max_steps=20).fit(
        seed=1, warm_start=converged, warm_start_learning_rate_factor=1.0
    )
    result = warm.training_result
    # A member that started at its optimum never improved, and yet is served.
    assert (result.best_epoch == 0).any() and warm.warm_started
    assert not result.diverged.any()


def _converged_on_a_rugged_function():
    r"""A deep ensemble trained to its minimum on a Rastrigin-like function in 10-D, and
    the same data with five more points (one BO step)."""
    generator = torch.Generator().manual_seed(1)
    X = torch.rand(205, 10, generator=generator, dtype=DTYPE)
    Y = (100 * (X - 0.55) ** 2 - 10 * torch.cos(20 * torch.pi * (X - 0.55))).sum(-1, keepdim=True)

    def model(rows: int, **options) -> DeepEnsemble:
        transforms = {"input_transform": Normalize(10), "outcome_transform": Standardize(1)}
        return DeepEnsemble(X[:rows], Y[:rows], **transforms, **options)

    return model(200, max_steps=500).fit(seed=0), model


def test_a_warm_start_continues_from_the_minimum_at_a_tenth_of_the_learning_rate() -> None:
    converged, model = _converged_on_a_rugged_function()
    # At the full learning rate Adam's first steps throw every member off its minimum.
    with pytest.raises(NonFiniteLossError, match="ended clearly above"):
        model(205, max_steps=100).fit(
            seed=1, warm_start=converged, warm_start_learning_rate_factor=1.0
        )
    warm = model(205, max_steps=100).fit(seed=1, warm_start=converged)
    history = torch.stack(warm.training_result.loss_history)
    assert (history[-1] < history[0]).all()
    assert (history.max(0).values < history[0] + 1.0).all()


def test_the_warm_start_factor_scales_the_learning_rate_of_that_fit_only() -> None:
    converged, model = _converged_and_more_data()
    scaled = model(400, max_steps=20, learning_rate=0.02)
    scaled.fit(seed=1, warm_start=converged, warm_start_learning_rate_factor=0.25)
    explicit = model(400, max_steps=20, learning_rate=0.005)
    explicit.fit(seed=1, warm_start=converged, warm_start_learning_rate_factor=1.0)
    for a, b in zip(_parameters(scaled), _parameters(explicit), strict=True):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)
    assert scaled.hyperparameters.learning_rate == 0.02
    cold = model(400, max_steps=20, learning_rate=0.005).fit(seed=1)
    recold = model(400, max_steps=20, learning_rate=0.005).fit(
        seed=1, warm_start_learning_rate_factor=0.25
    )
    for a, b in zip(_parameters(cold), _parameters(recold), strict=True):
        assert torch.equal(a, b)


def test_a_warm_start_that_ends_clearly_worse_is_refused() -> None:
    converged, model = _converged_and_more_data()
    with pytest.raises(NonFiniteLossError, match="ended clearly above"):
        model(400, max_steps=20, learning_rate=3.0).fit(seed=1, warm_start=converged)


def test_members_trained_in_single_precision_serve_in_the_datas_precision():
    train_X, train_Y = _one_dimensional_data()
    model = DeepEnsemble(
        train_X,
        train_Y,
        input_transform=Normalize(1),
        epochs=200,
        learning_rate=1e-2,
        training_dtype=torch.float32,
    ).fit(seed=0)
    reference = DeepEnsemble(
        train_X, train_Y, input_transform=Normalize(1), epochs=200, learning_rate=1e-2
    ).fit(seed=0)
    assert all(parameter.dtype == DTYPE for parameter in model.network.parameters())
    test_X = _grid(0.0, 0.5, 20)
    posterior, reference_posterior = model.posterior(test_X), reference.posterior(test_X)
    assert posterior.mean.dtype == DTYPE
    # The same fit up to single-precision rounding, which 200 steps leave small here.
    torch.testing.assert_close(posterior.mean, reference_posterior.mean, atol=0.05, rtol=0)
    with pytest.raises(ValueError, match="training_dtype must be torch.float32"):
        DeepEnsemble(train_X, train_Y, training_dtype=torch.float16)
