"""Tests of the shared training loop's settings."""

import math
from dataclasses import dataclass

import pytest

from botorch_nn_uq.training import OPTIMIZERS, TrainedWithLoop, TrainingConfig


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("epochs", 0),
        ("epochs", -3),
        ("learning_rate", 0.0),
        ("learning_rate", -1e-3),
        ("learning_rate", float("nan")),
        ("batch_size", 0),
        ("optimizer", "lbfgs"),
        ("weight_decay", -0.1),
        ("early_stopping_patience", 0),
        ("gradient_clip_norm", 0.0),
        ("gradient_clip_norm", -1.0),
        ("lr_decay_rate", 0.0),
        ("lr_decay_rate", 1.5),
        ("lr_decay_steps", 0),
        ("min_delta", -0.1),
        ("min_delta", float("nan")),
        ("lr_reduction_patience", 0),
        ("lr_reduction_factor", 1.0),
        ("lr_reduction_factor", 0.0),
    ],
)
def test_invalid_config_raises_naming_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        TrainingConfig(**{field: value})


def test_default_config_is_valid_and_frozen():
    config = TrainingConfig()
    assert config.optimizer in OPTIMIZERS
    with pytest.raises(AttributeError):
        config.epochs = 3  # type: ignore[misc]


@pytest.mark.parametrize("max_steps", [0, -3, 2.5])
def test_invalid_step_budgets_are_rejected(max_steps):
    with pytest.raises(ValueError, match="max_steps must be a positive integer"):
        TrainingConfig(max_steps=max_steps)


_COUNT = (None, True, 2.5, 3.0, math.nan, math.inf, "x", 0, -1)
_OPTIONAL_COUNT = (True, 2.5, math.nan, "x", 0, -1)
_POSITIVE = (None, True, math.nan, math.inf, "x", 0.0, -1.0)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        *[("epochs", value) for value in _COUNT],
        *[("lr_decay_steps", value) for value in _COUNT],
        *[
            (field, value)
            for field in (
                "max_steps",
                "batch_size",
                "early_stopping_patience",
                "lr_reduction_patience",
            )
            for value in _OPTIONAL_COUNT
        ],
        *[("learning_rate", value) for value in _POSITIVE],
        *[("gradient_clip_norm", value) for value in _POSITIVE[1:]],
        *[(field, value) for field in ("weight_decay", "min_delta") for value in _POSITIVE[:5]],
        *[("lr_decay_rate", value) for value in (True, math.nan, "x", 0.0, 1.5)],
        *[("lr_reduction_factor", value) for value in (None, True, math.nan, "x", 0.0, 1.0)],
        *[("optimizer", value) for value in (None, 1, "x")],
    ],
    ids=repr,
)
def test_a_setting_of_the_wrong_type_or_value_is_rejected_naming_it(field, value):
    # (A NaN patience used to stop training after one epoch, epochs=True to train one.)
    with pytest.raises(ValueError, match=field):
        TrainingConfig(**{field: value})


@dataclass(frozen=True)
class _Settings(TrainedWithLoop):
    epochs: int = 7
    batch_size: int | None = 4
    early_stopping_patience: int | None = 3
    hidden_width: int = 16


def test_trained_with_loop_copies_the_shared_fields_and_applies_overrides() -> None:
    config = _Settings().training_config(learning_rate=0.25)
    assert (config.epochs, config.batch_size, config.early_stopping_patience) == (7, 4, 3)
    assert config.learning_rate == 0.25
    assert config.optimizer == TrainingConfig().optimizer
    assert _Settings().training_config(epochs=2).epochs == 2


def test_trained_with_loop_validates_through_the_training_config() -> None:
    with pytest.raises(ValueError, match="epochs"):
        _Settings(epochs=0).training_config()
