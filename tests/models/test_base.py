"""Behaviour of the shared NeuralSurrogateModel base (exercised through MC dropout)."""

import pytest
import torch
from botorch.exceptions.errors import UnsupportedError
from botorch.exceptions.warnings import InputDataWarning
from botorch.models.transforms.outcome import Log

from botorch_nn_uq.models import MCDropout
from botorch_nn_uq.training import NonFiniteLossError
from tests.cards import fast_settings
from tests.testing import tolerances

#: MC dropout's card's fast settings, with the widths and bank that the checks below name.
FAST = fast_settings("mc-dropout", hidden_widths=(16, 16), epochs=60, num_masks=8)


def _data(n: int = 16):
    generator = torch.Generator().manual_seed(0)
    train_X = torch.rand(n, 2, generator=generator, dtype=torch.float64)
    return train_X, torch.cos(3 * train_X).sum(-1, keepdim=True)


def test_non_finite_loss_stops_fit_with_clear_error() -> None:
    train_X, train_Y = _data()
    with (
        pytest.raises(NonFiniteLossError, match="training loss became inf"),
        pytest.warns(InputDataWarning, match="not standardized"),
    ):
        MCDropout(train_X, train_Y * 1e200, outcome_transform=None, **FAST).fit(seed=0)


def test_overrides_are_kept_and_validated() -> None:
    train_X, train_Y = _data()
    model = MCDropout(train_X, train_Y, **FAST).fit(seed=0, num_masks=5)
    assert model.hyperparameters.num_masks == 5
    assert model.posterior(train_X[:3]).values.shape[-3] == 5
    with pytest.raises(TypeError, match="Unknown hyperparameter.*valid: hidden_widths"):
        model.fit(seed=0, masks=3)
    with pytest.raises(ValueError, match="dropout"):
        model.fit(seed=0, dropout=1.5)


def test_warm_start_initialises_from_previous_weights() -> None:
    train_X, train_Y = _data()
    previous = MCDropout(train_X, train_Y, **FAST).fit(seed=0)
    warm = MCDropout(train_X, train_Y, **{**FAST, "epochs": 1, "learning_rate": 1e-12})
    warm.fit(seed=1, warm_start=previous)
    for mine, theirs in zip(warm.network.parameters(), previous.network.parameters(), strict=True):
        torch.testing.assert_close(mine, theirs, atol=1e-9, rtol=0)
    cold = MCDropout(train_X, train_Y, **{**FAST, "epochs": 1, "learning_rate": 1e-12}).fit(seed=1)
    assert not torch.equal(cold.network.output_layer.weight, previous.network.output_layer.weight)
    with pytest.raises(ValueError, match="warm_start must be a fitted MCDropout"):
        warm.fit(seed=0, warm_start=MCDropout(train_X, train_Y, **FAST))


@pytest.mark.parametrize("factor", [0.0, 1.5, float("nan"), True])
def test_the_warm_start_learning_rate_factor_is_validated(factor) -> None:
    train_X, train_Y = _data()
    model = MCDropout(train_X, train_Y, **FAST)
    with pytest.raises(ValueError, match="warm_start_learning_rate_factor must be"):
        model.fit(seed=0, warm_start_learning_rate_factor=factor)
    assert not model.is_fitted


def test_unsupported_posterior_arguments_are_named() -> None:
    train_X, train_Y = _data()
    model = MCDropout(train_X, train_Y, **FAST).fit(seed=0)
    with pytest.raises(UnsupportedError, match="gradient_free"):
        model.posterior(train_X, gradient_free=True)


def test_nonlinear_outcome_transform_maps_every_function() -> None:
    train_X, train_Y = _data()
    # Standardised, so that the log of the positive outcomes needs no further transform.
    train_Y = (train_Y - train_Y.mean()) / train_Y.std()
    positive_Y = train_Y.exp()
    model = MCDropout(train_X, positive_Y, outcome_transform=Log(), **FAST).fit(seed=0)
    reference = MCDropout(train_X, train_Y, outcome_transform=None, **FAST).fit(seed=0)
    X = torch.rand(4, 1, 2, dtype=torch.float64)
    torch.testing.assert_close(model.posterior(X).values, reference.posterior(X).values.exp())
    with pytest.raises(UnsupportedError, match="linear outcome transform"):
        model.posterior(X, observation_noise=True)


def test_training_result_and_buffers_follow_the_model() -> None:
    train_X, train_Y = _data()
    model = MCDropout(train_X, train_Y, **FAST)
    assert not model.is_fitted
    model.fit(seed=0)
    assert model.training_result.epochs_run == FAST["epochs"]
    assert model.fit_seed == 0
    model_32 = model.to(torch.float32)
    assert model_32.train_X.dtype == torch.float32
    assert model_32.posterior(train_X[:2].float()).mean.dtype == torch.float32


def test_fit_and_function_bank_arguments_are_checked() -> None:
    X = torch.rand(10, 2, dtype=torch.float64)
    model = MCDropout(X, X.sum(-1, keepdim=True), epochs=2, num_masks=4)
    with pytest.raises(ValueError, match="progress"):
        model.fit(seed=0, progress="yes")
    assert not model.is_fitted
    model.fit(seed=0)
    for size, seed, name in [
        (2.5, 0, "size"),
        (True, 0, "size"),
        (4, -1, "seed"),
        (4, 1.5, "seed"),
    ]:
        with pytest.raises(ValueError, match=name):
            model.resample_function_bank(size, seed)


def test_function_bank_subset_serves_the_first_functions_and_leaves_the_model_as_it_was() -> None:
    train_X, train_Y = _data()
    model = MCDropout(train_X, train_Y, **FAST).fit(seed=0)
    masks = [mask.clone() for mask in model.masks]
    X = torch.rand(4, 3, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    values = model.posterior(X).values
    subset = model.function_bank_subset(3)
    assert (model.function_bank_size, subset.function_bank_size) == (FAST["num_masks"], 3)
    assert all(torch.equal(mine, full[:3]) for mine, full in zip(subset.masks, masks, strict=True))
    assert all(torch.equal(now, before) for now, before in zip(model.masks, masks, strict=True))
    assert subset.network is not model.network
    assert torch.equal(subset.noise_variance, model.noise_variance)
    torch.testing.assert_close(
        subset.posterior(X).values, values[..., :3, :, :], **tolerances(torch.float64)
    )
    torch.testing.assert_close(model.posterior(X).values, values, rtol=0, atol=0)
    # The copy is a checkpoint like any other, and follows the model in .to().
    fresh = MCDropout(train_X, train_Y, **FAST)
    fresh.load_state_dict(subset.state_dict())
    assert fresh.function_bank_size == 3
    torch.testing.assert_close(fresh.posterior(X).values, subset.posterior(X).values)
    assert subset.to(torch.float32).posterior(X.float()).values.shape == (4, 3, 3, 1)


def test_function_bank_subset_arguments_are_checked() -> None:
    train_X, train_Y = _data()
    unfitted = MCDropout(train_X, train_Y, **FAST)
    with pytest.raises(RuntimeError, match="MCDropout is not fitted"):
        unfitted.function_bank_subset(2)
    with pytest.raises(RuntimeError, match="MCDropout is not fitted"):
        unfitted.function_bank_size  # noqa: B018
    model = unfitted.fit(seed=0)
    for size, message in [
        (1, "size must be an integer of at least 2"),
        (2.0, "size must be an integer of at least 2"),
        (True, "size must be an integer of at least 2"),
        (9, "size must be at most the bank's 8 functions; got 9"),
    ]:
        with pytest.raises(ValueError, match=message):
            model.function_bank_subset(size)
    assert model.function_bank_subset(8).function_bank_size == 8


def test_calling_a_model_gives_its_latent_gaussian_as_a_gp_call_does() -> None:
    train_X, train_Y = _data()
    model = MCDropout(train_X, 10 + 3 * train_Y, **FAST).fit(seed=0)
    X = torch.rand(4, 3, 2, dtype=torch.float64)
    distribution = model(X)
    functions = model.outcome_transform(model.posterior(X).values)[0]  # 4 x s x 3 x 1
    torch.testing.assert_close(distribution.mean, functions.mean(-3).squeeze(-1))
    deviations = (functions - functions.mean(-3, keepdim=True)).squeeze(-1)
    covariance = deviations.transpose(-2, -1) @ deviations / functions.shape[-3]
    torch.testing.assert_close(
        distribution.covariance_matrix, covariance + 1e-10 * torch.eye(3, dtype=torch.float64)
    )
    two_outputs = MCDropout(train_X, torch.cat([train_Y, -train_Y], -1), **FAST).fit(seed=0)
    assert two_outputs(X).mean.shape == (4, 2, 3)
    assert two_outputs.subset_output([1])(X).mean.shape == (4, 3)
    with pytest.raises(RuntimeError, match="not fitted"):
        MCDropout(train_X, train_Y, **FAST)(X)
