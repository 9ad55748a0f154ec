"""condition_on_observations, fantasize and FantasyModel (botorch_nn_uq.models.fantasy)."""

import pytest
import torch
from botorch.exceptions.errors import UnsupportedError
from botorch.models.transforms import Normalize, Standardize
from botorch.sampling import IIDNormalSampler, SobolQMCNormalSampler
from botorch.sampling.get_sampler import get_sampler

from botorch_nn_uq.models import DeepEnsemble, MCDropout
from botorch_nn_uq.models.fantasy import FantasyModel
from botorch_nn_uq.posteriors import FunctionEnsemblePosterior, MixtureOfGaussiansPosterior

DIM = 2
F64 = {"dtype": torch.float64}


def data(n: int = 12, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    X = torch.rand(n, DIM, generator=generator, dtype=torch.float64)
    Y = torch.stack([(3 * X).sin().sum(-1), X.pow(2).sum(-1)], dim=-1)
    return X, Y


def fitted(model_class: type = DeepEnsemble, num_outputs: int = 1, **hyperparameters):
    X, Y = data()
    settings = {"hidden_widths": (8,), "epochs": 40}
    if model_class is DeepEnsemble:
        settings["ensemble_size"] = 3
    else:
        settings["num_masks"] = 8
    model = model_class(
        X,
        Y[:, :num_outputs],
        input_transform=Normalize(DIM, bounds=torch.tensor([[0.0, 0.0], [1.0, 1.0]])),
        outcome_transform=Standardize(num_outputs),
        **{**settings, **hyperparameters},
    ).fit(seed=0)
    model.conditioning_steps = 5
    return model


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
        samples = get_sampler(posterior, torch.Size([6]), seed=0)(posterior)
        assert samples.shape == (6, *expected)
    noisy = fantasy.posterior(points(3), observation_noise=True)
    assert isinstance(noisy, MixtureOfGaussiansPosterior)
    assert (noisy.variance > fantasy.posterior(points(3)).variance).all()
    assert model.fantasize(points(3), sampler).batch_shape == (2,)
    with pytest.raises(ValueError, match="does not broadcast"):
        fantasy.posterior(points(3, 3, 3))


def test_each_fantasy_model_is_the_model_conditioned_on_its_fantasy(ensemble) -> None:
    sampler = SobolQMCNormalSampler(torch.Size([2]), seed=0)
    X = points(3, 1)
    fantasy = ensemble.fantasize(X, sampler)
    # The mixture's own sampler, with the normal sampler's shape and seed, draws them.
    posterior = ensemble.posterior(X, observation_noise=True)
    Y = get_sampler(posterior, torch.Size([2]), seed=0)(posterior)
    assert Y.shape == (2, 3, 1, 1)
    test_X = points(5)
    stacked = fantasy.posterior(test_X).mean
    for f in range(2):
        for b in range(3):
            alone = ensemble.condition_on_observations(X[b], Y[f, b])
            torch.testing.assert_close(stacked[f, b], alone.posterior(test_X).mean)


def test_condition_on_observations_returns_a_model_of_the_same_class(ensemble) -> None:
    X, Y = points(2), torch.tensor([[5.0], [-5.0]], dtype=torch.float64)
    before = ensemble.posterior(points(4, 1)).mean
    conditioned = ensemble.condition_on_observations(X, Y)
    assert type(conditioned) is DeepEnsemble and conditioned.batch_shape == ()
    assert conditioned.train_X.shape == (14, DIM) and ensemble.train_X.shape == (12, DIM)
    torch.testing.assert_close(conditioned.train_X[-2:], X)
    torch.testing.assert_close(
        conditioned.transformed_train_Y[-2:], ensemble.outcome_transform(Y)[0], rtol=0, atol=0
    )
    assert conditioned.training_result.steps_run == 5
    assert conditioned.hyperparameters == ensemble.hyperparameters
    assert conditioned.fit_seed == ensemble.fit_seed
    # The model itself is unchanged, and the conditioned copy shares none of its weights.
    torch.testing.assert_close(ensemble.posterior(points(4, 1)).mean, before, rtol=0, atol=0)
    assert not any(
        a.data_ptr() == b.data_ptr()
        for a, b in zip(conditioned.parameters(), ensemble.parameters(), strict=True)
    )


@pytest.mark.parametrize("model_class", [DeepEnsemble, MCDropout])
def test_conditioning_fits_the_new_observation(model_class: type) -> None:
    model = fitted(model_class)
    x = points(1)
    before = model.posterior(x, observation_noise=True)
    target = before.mean + 3 * before.variance.sqrt()
    conditioned = model.condition_on_observations(x, target, max_steps=30)
    assert conditioned.training_result.steps_run == 30
    mean = conditioned.posterior(x).mean
    assert (mean - target).abs() < (model.posterior(x).mean - target).abs()
    # More steps fit it more closely.
    closer = model.condition_on_observations(x, target, max_steps=150).posterior(x).mean
    assert (closer - target).abs() < (mean - target).abs()


def test_batched_conditioning_equals_conditioning_each_alone(ensemble) -> None:
    X = points(3, 2)
    Y = torch.randn(3, 2, 1, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    batched = ensemble.condition_on_observations(X, Y)
    assert isinstance(batched, FantasyModel) and batched.batch_shape == (3,)
    for i in range(3):
        alone = ensemble.condition_on_observations(X[i], Y[i])
        for a, b in zip(batched.models[i].parameters(), alone.parameters(), strict=True):
            torch.testing.assert_close(a, b)
    # Y broadcasts over X's batch (the same observations everywhere) and vice versa.
    assert ensemble.condition_on_observations(X, Y[0]).batch_shape == (3,)
    assert ensemble.condition_on_observations(X[0], Y).batch_shape == (3,)


def test_conditioning_is_reproducible_under_a_seed() -> None:
    model = fitted(MCDropout)
    X, Y = points(1), torch.tensor([[2.0]], dtype=torch.float64)
    test_X = points(4, 1)
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    first = model.condition_on_observations(X, Y).posterior(test_X)
    assert torch.equal(torch.rand(3), expected)  # the global RNG is untouched
    torch.manual_seed(1)
    second = model.condition_on_observations(X, Y, seed=model.fit_seed).posterior(test_X)
    other = model.condition_on_observations(X, Y, seed=123).posterior(test_X)
    assert torch.equal(first.mean, second.mean) and torch.equal(first.variance, second.variance)
    assert not torch.equal(first.mean, other.mean)
    sampler = SobolQMCNormalSampler(torch.Size([2]), seed=4)
    fantasies = [model.fantasize(points(2, 1), sampler).posterior(points(3)) for _ in range(2)]
    assert torch.equal(fantasies[0].mean, fantasies[1].mean)


def test_samplers_of_the_posterior_family_are_used_as_given(ensemble) -> None:
    X = points(2, 1)
    posterior = ensemble.posterior(X, observation_noise=True)
    family_sampler = get_sampler(posterior, torch.Size([3]), seed=9)
    fantasy = ensemble.fantasize(X, family_sampler)
    expected = family_sampler(posterior)
    for f in range(3):
        alone = ensemble.condition_on_observations(X[1], expected[f, 1])
        torch.testing.assert_close(
            fantasy.posterior(points(2)).mean[f, 1], alone.posterior(points(2)).mean
        )
    # Noiseless fantasies, and explicit noise (transformed units) that broadcasts.
    assert ensemble.fantasize(X, family_sampler, observation_noise=False).batch_shape == (3, 2)
    noise = torch.full((1, 1), 0.1, dtype=torch.float64)
    assert ensemble.fantasize(X, IIDNormalSampler(torch.Size([2])), noise).batch_shape == (2, 2)
    with pytest.raises(ValueError, match="does not broadcast"):
        ensemble.fantasize(X, family_sampler, observation_noise=torch.ones(3, 1, 1))


def test_conditioning_on_no_points_is_exact(ensemble) -> None:
    X = points(0)
    assert ensemble.condition_on_observations(X, torch.zeros(0, 1).to(X)) is ensemble
    fantasy = ensemble.fantasize(points(4, 0), SobolQMCNormalSampler(torch.Size([2])))
    assert fantasy.batch_shape == (2, 4)
    test_X = points(3)
    expected = ensemble.posterior(test_X).mean.expand(2, 4, 3, 1)
    torch.testing.assert_close(fantasy.posterior(test_X).mean, expected, rtol=0, atol=0)


def test_a_subset_model_conditions_its_served_outputs() -> None:
    model = fitted(num_outputs=2).subset_output([1])
    conditioned = model.condition_on_observations(points(1), torch.tensor([[3.0]]).double())
    assert conditioned.num_outputs == 1 and conditioned.transformed_train_Y.shape == (13, 2)
    fantasy = model.fantasize(points(2, 1), SobolQMCNormalSampler(torch.Size([2])))
    assert fantasy.posterior(points(3)).mean.shape == (2, 2, 3, 1)


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
        ({"noise": torch.ones(2, 1, **F64)}, UnsupportedError, "known noise"),
        ({"propagate_grads": True}, UnsupportedError, "propagate_grads"),
        ({"max_steps": 0}, ValueError, "max_steps"),
        ({"learning_rate": -1.0}, ValueError, "learning_rate"),
        ({"seed": -1}, ValueError, "seed"),
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


def test_fantasy_model_checks_its_models(ensemble) -> None:
    with pytest.raises(ValueError, match="needs 4 models"):
        FantasyModel([ensemble] * 3, torch.Size([2, 2]))
    with pytest.raises(ValueError, match="same num_outputs"):
        FantasyModel([ensemble, fitted(num_outputs=2)], torch.Size([2]))
    fantasy = FantasyModel([ensemble] * 2, torch.Size([2]))
    with pytest.raises(UnsupportedError, match="unknown"):
        fantasy.posterior(points(3), unknown=1)
    with pytest.raises(ValueError, match="at least two dimensions"):
        fantasy.posterior(points(3)[0])
