"""Behaviour of the shared NeuralSurrogateModel base (exercised through MC dropout)."""

import pytest
import torch
from botorch.exceptions.errors import UnsupportedError
from botorch.exceptions.warnings import InputDataWarning
from botorch.models.transforms.outcome import Log

from botorch_nn_uq.models import MCDropout
from botorch_nn_uq.training import NonFiniteLossError

FAST = {"hidden_widths": (16, 16), "epochs": 60, "num_masks": 8}


def _data(n: int = 16):
    generator = torch.Generator().manual_seed(0)
    train_X = torch.rand(n, 2, generator=generator, dtype=torch.float64)
    return train_X, torch.cos(3 * train_X).sum(-1, keepdim=True)


def test_non_finite_loss_stops_fit_with_clear_error() -> None:
    train_X, train_Y = _data()
    with (
        pytest.raises(NonFiniteLossError, match="training loss became inf"),
        pytest.warns(InputDataWarning, match="magnitudes up to"),
    ):
        MCDropout(train_X, train_Y * 1e200, **FAST).fit(seed=0)


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


def test_unsupported_posterior_arguments_are_named() -> None:
    train_X, train_Y = _data()
    model = MCDropout(train_X, train_Y, **FAST).fit(seed=0)
    with pytest.raises(UnsupportedError, match="gradient_free"):
        model.posterior(train_X, gradient_free=True)


def test_nonlinear_outcome_transform_maps_every_function() -> None:
    train_X, train_Y = _data()
    positive_Y = train_Y.exp()
    model = MCDropout(train_X, positive_Y, outcome_transform=Log(), **FAST).fit(seed=0)
    reference = MCDropout(train_X, train_Y, **FAST).fit(seed=0)
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
