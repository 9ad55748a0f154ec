"""BoTorch's input-scaling warnings for the training data, and the warning about test
inputs far outside the bounds declared to ``Normalize``."""

import warnings

import pytest
import torch
from botorch.exceptions.warnings import InputDataWarning
from botorch.models.transforms import Normalize, Standardize

from botorch_nn_uq.models import NEON, DeepEnsemble
from tests.testing import seeded_rand


def _data(dtype: torch.dtype):
    X = seeded_rand(20, 2, seed=0, dtype=dtype)
    return X, X.sin().sum(-1, keepdim=True)


def _bounds(dtype: torch.dtype, high: float = 1.0):
    return torch.tensor([[0.0, 0.0], [high, 1.0]], dtype=dtype)


@pytest.mark.parametrize("model_class", [DeepEnsemble, NEON])
def test_outcomes_are_standardised_by_default(model_class, dtype: torch.dtype) -> None:
    X, Y = _data(dtype)
    model = model_class(X, Y * 1e12)
    assert isinstance(model.outcome_transform, Standardize)
    torch.testing.assert_close(model.transformed_train_Y.mean(), torch.zeros((), dtype=dtype))


@pytest.mark.parametrize("model_class", [DeepEnsemble, NEON])
def test_raw_targets_that_are_not_standardised_warn(model_class, dtype: torch.dtype) -> None:
    X, Y = _data(dtype)
    with pytest.warns(InputDataWarning, match="not standardized"):
        model = model_class(X, Y * 1e12, outcome_transform=None)
    assert getattr(model, "outcome_transform", None) is None


def test_a_transform_that_collapses_the_spread_warns(dtype: torch.dtype) -> None:
    X, Y = _data(dtype)
    with pytest.warns(InputDataWarning, match="not standardized"):
        DeepEnsemble(X, Y * 1e-12, outcome_transform=Standardize(1))


def test_training_inputs_outside_the_unit_cube_warn(dtype: torch.dtype) -> None:
    X, Y = _data(dtype)
    with pytest.warns(InputDataWarning, match="unit cube"):
        DeepEnsemble(X, Y, input_transform=Normalize(2, bounds=_bounds(dtype, 0.5)))
    with pytest.warns(InputDataWarning, match="unit cube"):
        DeepEnsemble(10 * X, Y)


def test_test_inputs_far_outside_declared_bounds_warn(dtype: torch.dtype) -> None:
    X, Y = _data(dtype)
    model = DeepEnsemble(X, Y, epochs=3, input_transform=Normalize(2, bounds=_bounds(dtype))).fit(
        seed=0
    )
    with pytest.warns(InputDataWarning, match=r"test inputs .*up to 2 box widths"):
        model.posterior(torch.tensor([[[3.0, 0.5]]], dtype=dtype))


def test_ordinary_data_do_not_warn(dtype: torch.dtype) -> None:
    X, Y = _data(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error", InputDataWarning)
        model = DeepEnsemble(
            X,
            100 * Y,
            epochs=3,
            input_transform=Normalize(2, bounds=_bounds(dtype)),
            outcome_transform=Standardize(1),
        ).fit(seed=0)
        DeepEnsemble(X, 100 * Y)
        DeepEnsemble(X, Y, input_transform=Normalize(2))
        # Just outside the box, as an optimiser's step may be.
        model.posterior(torch.tensor([[[1.2, -0.2]]], dtype=dtype))
