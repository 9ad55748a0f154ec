"""Behaviour of the shared NeuralSurrogateModel base (exercised mostly through MC dropout)."""

import pytest
import torch
from botorch.exceptions.warnings import InputDataWarning

from botorch_nn_uq.models import NEON, DeepEnsemble, MCDropout
from botorch_nn_uq.training import NonFiniteLossError
from tests.models.mc_dropout_toy import FAST, toy_data


def test_non_finite_loss_stops_fit_with_clear_error() -> None:
    train_X, train_Y = toy_data()
    with (
        pytest.raises(NonFiniteLossError, match="training loss became inf"),
        pytest.warns(InputDataWarning, match="not standardized"),
    ):
        MCDropout(train_X, train_Y * 1e200, outcome_transform=None, **FAST).fit(seed=0)


def test_overrides_are_kept_and_validated() -> None:
    train_X, train_Y = toy_data()
    model = MCDropout(train_X, train_Y, **FAST).fit(seed=0, num_masks=5)
    assert model.hyperparameters.num_masks == 5
    assert model.posterior(train_X[:3]).values.shape[-3] == 5
    with pytest.raises(TypeError, match="Unknown hyperparameter.*valid: hidden_widths"):
        model.fit(seed=0, masks=3)
    with pytest.raises(ValueError, match="dropout"):
        model.fit(seed=0, dropout=1.5)


def test_warm_start_initialises_from_previous_weights() -> None:
    train_X, train_Y = toy_data()
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
    train_X, train_Y = toy_data()
    model = MCDropout(train_X, train_Y, **FAST)
    with pytest.raises(ValueError, match="warm_start_learning_rate_factor must be"):
        model.fit(seed=0, warm_start_learning_rate_factor=factor)
    assert not model.is_fitted


def test_training_result_and_buffers_follow_the_model() -> None:
    train_X, train_Y = toy_data()
    model = MCDropout(train_X, train_Y, **FAST)
    assert not model.is_fitted
    model.fit(seed=0)
    assert model.training_result.epochs_run == FAST["epochs"]
    assert model.fit_seed == 0
    model_32 = model.to(torch.float32)
    assert model_32.train_X.dtype == torch.float32
    assert model_32.posterior(train_X[:2].float()).mean.dtype == torch.float32


def test_fit_arguments_are_checked() -> None:
    X = torch.rand(10, 2, dtype=torch.float64)
    model = MCDropout(X, X.sum(-1, keepdim=True), epochs=2, num_masks=4)
    with pytest.raises(ValueError, match="progress"):
        model.fit(seed=0, progress="yes")
    assert not model.is_fitted


@pytest.mark.parametrize(
    ("model_class", "options"),
    # A stack of members and a single network diverge through the two modes of the
    # training loop; NEON's default gradient clipping would keep it from diverging.
    [(DeepEnsemble, {}), (NEON, {"gradient_clip_norm": None})],
    ids=["deep-ensemble", "neon"],
)
def test_a_diverging_refit_leaves_the_previous_fit_in_service(model_class, options) -> None:
    X = torch.rand(20, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    Y = X.sin().sum(-1, keepdim=True)
    model = model_class(X, Y, epochs=50).fit(seed=0)
    before = model.posterior(X[:3, None]).mean
    with pytest.raises(NonFiniteLossError):
        model.fit(seed=0, learning_rate=1e8, **options)
    assert model.is_fitted and model.hyperparameters.learning_rate != 1e8
    assert torch.equal(model.posterior(X[:3, None]).mean, before)
