"""Warnings about targets and inputs a network cannot learn from as given."""

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
def test_huge_untransformed_targets_warn(model_class, dtype: torch.dtype) -> None:
    X, Y = _data(dtype)
    with pytest.warns(InputDataWarning, match="magnitudes up to 1.*e\\+12.*Standardize"):
        model_class(X, Y * 1e12)


def test_a_transform_that_collapses_the_spread_warns(dtype: torch.dtype) -> None:
    X, Y = _data(dtype)
    with pytest.warns(InputDataWarning, match="after Standardize.*spread of only"):
        DeepEnsemble(X, Y * 1e-12, outcome_transform=Standardize(1))


def test_tiny_untransformed_targets_warn(dtype: torch.dtype) -> None:
    X, Y = _data(dtype)
    with pytest.warns(InputDataWarning, match="no outcome transform.*spread of only"):
        DeepEnsemble(X, Y * 1e-9)


def test_training_inputs_outside_declared_bounds_warn(dtype: torch.dtype) -> None:
    X, Y = _data(dtype)
    with pytest.warns(InputDataWarning, match=r"training inputs .*dimension\(s\) \[0\]"):
        DeepEnsemble(X, Y, input_transform=Normalize(2, bounds=_bounds(dtype, 0.5)))


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
        DeepEnsemble(X, torch.ones_like(Y))
        # Just outside the box, as an optimiser's step may be.
        model.posterior(torch.tensor([[[1.2, -0.2]]], dtype=dtype))
