"""condition_on_observations, fantasize and FantasyModel (botorch_nn_uq.models.fantasy,
botorch_nn_uq.models.last_layer)."""

import pytest
import torch
from botorch.exceptions.errors import UnsupportedError
from botorch.models.transforms import Normalize, Standardize
from botorch.models.transforms.input import AppendFeatures
from botorch.sampling import IIDNormalSampler, SobolQMCNormalSampler

from botorch_nn_uq.models import NEON, NOMU, DeepEnsemble, MCDropout
from botorch_nn_uq.models.fantasy import FantasyModel
from botorch_nn_uq.models.last_layer import observation_perturbations, training_precision
from botorch_nn_uq.posteriors import (
    FunctionEnsemblePosterior,
    GaussianMarginalPosterior,
    MixtureOfGaussiansPosterior,
)
from tests.cards import NEURAL_CARDS, NEURAL_REPRESENTATIVES

DIM = 2
F64 = {"dtype": torch.float64}
UNIT_BOUNDS = torch.tensor([[0.0, 0.0], [1.0, 1.0]], **F64)


def data(n: int = 12, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    X = torch.rand(n, DIM, generator=generator, dtype=torch.float64)
    Y = torch.stack([(3 * X).sin().sum(-1), X.pow(2).sum(-1)], dim=-1)
    return X, Y


#: Small settings of each family's model; another model fits with its card's fast settings.
SETTINGS = {
    DeepEnsemble: {"hidden_widths": (8,), "epochs": 60, "ensemble_size": 3},
    MCDropout: {"hidden_widths": (8,), "epochs": 60, "num_masks": 8},
    NEON: {"encoder_widths": (8,), "latent_dim": 8, "epinet_widths": (8,), "epochs": 60},
    NOMU: {"mean_widths": (8,), "uncertainty_widths": (8,), "epochs": 60, "bounds": UNIT_BOUNDS},
}


def _settings(model_class: type) -> dict:
    if model_class in SETTINGS:
        return SETTINGS[model_class]
    card = next(card for card in NEURAL_CARDS if card.model_class is model_class)
    return card.fast_options(UNIT_BOUNDS, epochs=60)


def fitted(model_class: type = DeepEnsemble, num_outputs: int = 1, **hyperparameters):
    X, Y = data()
    model = model_class(
        X,
        Y[:, :num_outputs],
        input_transform=Normalize(DIM, bounds=UNIT_BOUNDS),
        outcome_transform=Standardize(num_outputs),
        **{**_settings(model_class), **hyperparameters},
    )
    return model.fit(seed=0)


def points(*shape: int, seed: int = 1) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.rand(*shape, DIM, generator=generator, dtype=torch.float64)


@pytest.fixture(scope="module")
def ensemble():
    return fitted()


@pytest.mark.parametrize("model_class", [DeepEnsemble, MCDropout])
def test_fantasize_batch_and_posterior_shapes(model_class: type) -> None:
    model = fitted(model_class)
    sampler = SobolQMCNormalSampler(torch.Size([2]), seed=0)
    fantasy = model.fantasize(points(4, 1), sampler)
    assert isinstance(fantasy, FantasyModel)
    assert fantasy.batch_shape == (2, 4) and fantasy.num_outputs == 1
    for X, expected in [
        (points(2, 4, 3), (2, 4, 3, 1)),  # num_fantasies x b x q x d
        (points(3), (2, 4, 3, 1)),  # the same points in every fantasy model
        (points(4, 3), (2, 4, 3, 1)),
        (points(5, 2, 4, 3), (5, 2, 4, 3, 1)),
    ]:
        posterior = fantasy.posterior(X)
        assert posterior.mean.shape == posterior.variance.shape == expected
        assert isinstance(posterior, FunctionEnsemblePosterior)
    noisy = fantasy.posterior(points(3), observation_noise=True)
    assert isinstance(noisy, MixtureOfGaussiansPosterior)
    assert (noisy.variance > fantasy.posterior(points(3)).variance).all()
    with pytest.raises(ValueError, match="does not broadcast"):
        fantasy.posterior(points(3, 3, 3))


def test_a_fantasy_model_is_the_model_conditioned_on_its_fantasies(ensemble) -> None:
    X = points(3, 1)
    sampler = SobolQMCNormalSampler(torch.Size([2]), seed=0)
    fantasy = ensemble.fantasize(X, sampler)
    # The sampler is used as given: a normal sampler draws exact mixture samples.
    posterior = ensemble.posterior(X, observation_noise=True)
    Y = SobolQMCNormalSampler(torch.Size([2]), seed=0)(posterior)
    conditioned = ensemble.condition_on_observations(X, Y)
    test_X = points(5)
    torch.testing.assert_close(fantasy.posterior(test_X).mean, conditioned.posterior(test_X).mean)
    noiseless = ensemble.fantasize(X, IIDNormalSampler(torch.Size([4]), seed=0), False)
    assert noiseless.batch_shape == (4, 3)


def test_batched_conditioning_equals_conditioning_each_alone(ensemble) -> None:
    X = points(3, 2)
    Y = torch.randn(3, 2, 1, generator=torch.Generator().manual_seed(0), **F64)
    batched = ensemble.condition_on_observations(X, Y)
    assert isinstance(batched, FantasyModel) and batched.batch_shape == (3,)
    test_X = points(4)
    means = batched.posterior(test_X).mean
    for i in range(3):
        alone = ensemble.condition_on_observations(X[i], Y[i]).posterior(test_X).mean
        torch.testing.assert_close(means[i], alone)
    # Y broadcasts over X's batch (the same observations everywhere) and vice versa.
    assert ensemble.condition_on_observations(X, Y[0]).batch_shape == (3,)
    assert ensemble.condition_on_observations(X[0], Y).batch_shape == (3,)


@pytest.mark.parametrize("model_class", [card.model_class for card in NEURAL_REPRESENTATIVES])
def test_an_observed_point_is_updated_as_a_gp_would_be(model_class: type) -> None:
    r"""At an observed point, the mean moves by the gain ``sigma^2 / (sigma^2 + N)`` of a
    GP with the model's variance and noise, and the variance shrinks to
    ``sigma^2 N / (sigma^2 + N)``."""
    model = fitted(model_class)
    x = points(1)
    latent = model.posterior(x)
    noisy = model.posterior(x, observation_noise=True)
    variance, noise = latent.variance, (noisy.variance - latent.variance)
    y = latent.mean + 2.0 * noisy.variance.sqrt()
    after = model.condition_on_observations(x, y).posterior(x)
    # The jitter added to the noise, relative to the variance.
    noise = noise + 1e-6 * variance
    gain = variance / (variance + noise)
    # Up to rounding in the correlation of a point with itself.
    close = {"rtol": 1e-5, "atol": 1e-8}
    torch.testing.assert_close(after.mean, latent.mean + gain * (y - latent.mean), **close)
    torch.testing.assert_close(after.variance, variance * noise / (variance + noise), **close)


def test_conditioning_again_is_conditioning_on_everything_at_once(ensemble) -> None:
    X1, X2 = points(2, 1), points(2, 2, seed=2)
    Y1 = torch.tensor([[[0.5]], [[-1.0]]], **F64)
    Y2 = torch.tensor([[[1.0], [0.0]], [[2.0], [-2.0]]], **F64)
    stepwise = ensemble.condition_on_observations(X1, Y1).condition_on_observations(X2, Y2)
    at_once = ensemble.condition_on_observations(torch.cat([X1, X2], -2), torch.cat([Y1, Y2], -2))
    test_X = points(6)
    torch.testing.assert_close(stepwise.posterior(test_X).mean, at_once.posterior(test_X).mean)
    sampler = SobolQMCNormalSampler(torch.Size([3]), seed=0)
    two_step = stepwise.fantasize(points(2, 1, seed=3), sampler)
    assert two_step.batch_shape == (3, 2)


def test_conditioning_is_differentiable_and_moves_look_ahead_candidates(ensemble) -> None:
    X = points(2, 1).requires_grad_(True)
    sampler = SobolQMCNormalSampler(torch.Size([4]), seed=0)
    fantasy = ensemble.fantasize(X, sampler)
    fantasy.posterior(points(5)).mean.sum().backward()
    assert X.grad.abs().sum() > 0


def test_conditioning_on_no_points_is_exact(ensemble) -> None:
    X = points(0)
    assert ensemble.condition_on_observations(X, torch.zeros(0, 1).to(X)) is ensemble


def test_a_subset_model_conditions_its_served_outputs() -> None:
    model = fitted(num_outputs=2)
    subset = model.subset_output([1])
    x, test_X = points(1), points(5)
    y = subset.posterior(x).mean + 1.0
    conditioned = subset.condition_on_observations(x, y)
    assert conditioned.num_outputs == 1
    assert not torch.allclose(conditioned.posterior(test_X).mean, subset.posterior(test_X).mean)
    # Observing the second output tells nothing about the first.
    both = model.condition_on_observations(x, torch.cat([model.posterior(x).mean[..., :1], y], -1))
    torch.testing.assert_close(
        both.posterior(test_X).mean[..., 1:], conditioned.posterior(test_X).mean
    )
    fantasy = subset.fantasize(points(2, 1), SobolQMCNormalSampler(torch.Size([2])))
    assert fantasy.posterior(points(3)).mean.shape == (2, 2, 3, 1)


def test_a_refitted_model_refuses_its_old_conditioning() -> None:
    model = fitted()
    conditioned = model.condition_on_observations(points(1), torch.zeros(1, 1, **F64))
    conditioned.posterior(points(2))
    model.fit(seed=1)
    with pytest.raises(RuntimeError, match="refitted or changed"):
        conditioned.posterior(points(2))


def test_the_training_precision_is_cached_until_the_model_changes() -> None:
    model = fitted()
    first = training_precision(model)
    assert training_precision(model) is first
    model.fit(seed=1)
    assert training_precision(model) is not first


def test_perturbations_are_centred_unit_and_free_of_the_functions() -> None:
    weights = torch.tensor([0.2, 0.3, 0.5], **F64)
    functions = torch.randn(4, 3, 2, 1, generator=torch.Generator().manual_seed(0), **F64)
    z = observation_perturbations(weights, functions)
    w = weights[:, None, None]
    deviations = functions - (w * functions).sum(-3, keepdim=True)
    torch.testing.assert_close((w * z).sum(-3), torch.zeros(4, 2, 1, **F64))
    torch.testing.assert_close((w * z.pow(2)).sum(-3), torch.ones(4, 2, 1, **F64))
    torch.testing.assert_close((w * z * deviations).sum(-3), torch.zeros(4, 2, 1, **F64))
    # Two functions leave no free direction: no perturbation.
    two = observation_perturbations(torch.tensor([0.5, 0.5], **F64), functions[:, :2])
    assert torch.equal(two, torch.zeros_like(two))


def test_fantasies_leave_append_features_to_the_value_function() -> None:
    X, Y = data()
    w_set = torch.tensor([[0.2], [0.8]], **F64)
    model = DeepEnsemble(
        X, Y[:, :1], input_transform=AppendFeatures(feature_set=w_set), **SETTINGS[DeepEnsemble]
    ).fit(seed=0)
    # The fantasy points hold (x, w); the value function's points hold x alone.
    fantasy = model.fantasize(points(3, 1), SobolQMCNormalSampler(torch.Size([2])))
    posterior = fantasy.posterior(torch.rand(2, 3, 4, 1, **F64))
    assert posterior.mean.shape == (2, 3, 8, 1)
    with pytest.raises(UnsupportedError, match="different number of points"):
        model.condition_on_observations(torch.rand(2, 1, **F64), torch.zeros(2, 1, **F64))


def test_models_that_cannot_be_conditioned_say_why() -> None:
    neon = fitted(NEON, output_activation="tanh")
    with pytest.raises(UnsupportedError, match="not linear in the last layer"):
        neon.condition_on_observations(points(1), torch.zeros(1, 1, **F64))
    X, _ = data()
    grid = torch.linspace(0, 1, 3, **F64).unsqueeze(-1)
    function_valued = NEON(X, (X[:, :1] + grid.T).sin(), output_grid=grid, **SETTINGS[NEON]).fit(
        seed=0
    )
    with pytest.raises(UnsupportedError, match="functions on a grid"):
        function_valued.condition_on_observations(points(1), torch.zeros(1, 3, **F64))


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"Y": torch.zeros(2, 2, **F64)}, ValueError, "m = 1"),
        ({"Y": torch.zeros(3, 1, **F64)}, ValueError, "n' = 2"),
        ({"Y": torch.zeros(2, **F64)}, ValueError, r"batch_shape x n' x m"),
        ({"Y": torch.tensor([[0.0], [float("nan")]], **F64)}, ValueError, "Y contains NaN"),
        ({"Y": torch.zeros(2, 1)}, ValueError, "dtype"),
        ({"Y": torch.zeros(3, 2, 1, **F64), "X": points(4, 2)}, ValueError, "do not broadcast"),
        ({"X": points(2)[:, :1]}, ValueError, "input dimensions"),
        ({"X": torch.full((2, DIM), float("nan"), **F64)}, ValueError, "NaN"),
        ({"noise": -torch.ones(2, 1, **F64)}, ValueError, "non-negative"),
        ({"noise": torch.ones(3, 1, **F64)}, ValueError, "does not broadcast"),
        ({"noise": torch.ones(2, 1)}, ValueError, "dtype and device of Y"),
        ({"noise": 0.1}, TypeError, "noise must be a torch.Tensor"),
        ({"propagate_grads": True}, UnsupportedError, "propagate_grads"),
    ],
)
def test_bad_observations_raise_clear_errors(ensemble, arguments, error, message) -> None:
    arguments = {"X": points(2), "Y": torch.zeros(2, 1, **F64), **arguments}
    with pytest.raises(error, match=message):
        ensemble.condition_on_observations(**arguments)


def test_an_unfitted_model_cannot_be_conditioned() -> None:
    X, Y = data()
    model = DeepEnsemble(X, Y[:, :1])
    with pytest.raises(RuntimeError, match="not fitted"):
        model.condition_on_observations(X[:1], Y[:1, :1])
    with pytest.raises(RuntimeError, match="not fitted"):
        model.fantasize(X[:1], SobolQMCNormalSampler(torch.Size([2])))


def test_fantasy_model_posterior_checks_its_arguments(ensemble) -> None:
    fantasy = ensemble.condition_on_observations(points(2), torch.zeros(2, 1, **F64))
    with pytest.raises(UnsupportedError, match="unknown"):
        fantasy.posterior(points(3), unknown=1)
    with pytest.raises(ValueError, match="at least two dimensions"):
        fantasy.posterior(points(3)[0])
    with pytest.raises(TypeError, match="MCSampler"):
        fantasy.fantasize(points(1), sampler=None)
    nomu = fitted(NOMU)
    conditioned = nomu.condition_on_observations(points(2), torch.zeros(2, 1, **F64))
    assert isinstance(conditioned.posterior(points(3)), GaussianMarginalPosterior)


def test_nomu_draws_fantasies_correlated_as_it_conditions() -> None:
    model = fitted(NOMU)
    x = points(1)
    near = torch.cat([x, x + 1e-4], dim=-2)  # two nearly equal points
    posterior = model._fantasy_posterior(near, observation_noise=True)
    covariance = posterior.distribution.covariance_matrix
    correlation = covariance[0, 1] / (covariance[0, 0] * covariance[1, 1]).sqrt()
    assert correlation > 0.99
    torch.testing.assert_close(posterior.mean, model.posterior(near).mean)
    torch.testing.assert_close(
        posterior.variance, model.posterior(near, observation_noise=True).variance
    )
    # Nearly equal fantasy points then get nearly equal fantasies: a bounded update.
    fantasy = model.fantasize(near.unsqueeze(0), SobolQMCNormalSampler(torch.Size([8]), seed=0))
    assert fantasy.posterior(points(5)).mean.abs().max() < 10
    noisy = model._fantasy_posterior(near, observation_noise=torch.full((2, 1), 0.5, **F64))
    assert (noisy.variance > posterior.variance).all()
