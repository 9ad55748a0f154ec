"""The acquisition functions reject, naming them, arguments that would silently give
NaN, all-zero or ``-inf`` values."""

from __future__ import annotations

import math

import pytest
import torch
from botorch.acquisition.input_constructors import get_acqf_input_constructor
from botorch.models import SingleTaskGP
from botorch.utils.datasets import SupervisedDataset

from botorch_nn_uq.acquisition import (
    LeakyExpectedImprovement,
    LogRobustTargetProbabilityOfImprovement,
    RobustTargetExpectedImprovement,
    RobustTargetLowerConfidenceBound,
    RobustTargetProbabilityOfImprovement,
    compute_e_min,
    first_order_input_noise_variance,
    qLeakyExpectedImprovement,
    qRobustTargetExpectedImprovement,
)
from tests.acquisition.conftest import DTYPE, training_points

LEAKY = (LeakyExpectedImprovement, qLeakyExpectedImprovement)
ROBUST_WITH_INCUMBENT = (
    RobustTargetExpectedImprovement,
    RobustTargetProbabilityOfImprovement,
    LogRobustTargetProbabilityOfImprovement,
    qRobustTargetExpectedImprovement,
)
ROBUST = (*ROBUST_WITH_INCUMBENT, RobustTargetLowerConfidenceBound)


def _build(acquisition, model, **overrides):
    if acquisition in LEAKY:
        arguments = {"best_f": 0.5}
    elif acquisition is RobustTargetLowerConfidenceBound:
        arguments = {"target": 0.8, "aleatoric_variance": 0.01}
    else:
        arguments = {"target": 0.8, "best_f": 0.2, "aleatoric_variance": 0.01}
    return acquisition(model, **{**arguments, **overrides})


@pytest.mark.parametrize("acquisition", (*LEAKY, *ROBUST_WITH_INCUMBENT))
@pytest.mark.parametrize(
    "best_f", [math.nan, math.inf, -math.inf, torch.tensor([0.1, math.nan]), True, "x"], ids=repr
)
def test_a_non_finite_or_non_numeric_incumbent_is_rejected(gp, acquisition, best_f):
    with pytest.raises(ValueError, match="best_f must be"):
        _build(acquisition, gp, best_f=best_f)


@pytest.mark.parametrize("acquisition", ROBUST_WITH_INCUMBENT)
def test_a_negative_expected_squared_error_incumbent_is_rejected(gp, acquisition):
    with pytest.raises(ValueError, match="best_f must be non-negative"):
        _build(acquisition, gp, best_f=-0.1)


@pytest.mark.parametrize("acquisition", (*LEAKY, *ROBUST_WITH_INCUMBENT))
def test_the_incumbent_must_broadcast_to_the_model_batch_shape(gp, acquisition):
    with pytest.raises(ValueError, match=r"best_f must be a scalar or broadcast .* \(\)"):
        _build(acquisition, gp, best_f=torch.zeros(5))
    assert _build(acquisition, gp, best_f=torch.tensor([0.3], dtype=DTYPE)).best_f.shape == ()


def test_a_batched_model_takes_one_incumbent_per_batch():
    train_X, train_Y = training_points()
    model = SingleTaskGP(train_X.expand(3, -1, -1), train_Y.expand(3, -1, -1))
    acquisition = LeakyExpectedImprovement(model, best_f=torch.tensor([0.1, 0.2, 0.3]))
    assert acquisition.best_f.shape == (3,)
    with pytest.raises(ValueError, match=r"batch shape \(3,\); got shape \(4,\)"):
        LeakyExpectedImprovement(model, best_f=torch.zeros(4))


@pytest.mark.parametrize("acquisition", ROBUST)
@pytest.mark.parametrize(
    ("argument", "value", "message"),
    [
        ("target", math.nan, "target must be finite"),
        ("target", math.inf, "target must be finite"),
        ("aleatoric_variance", math.nan, "aleatoric_variance must be finite"),
        ("aleatoric_variance", math.inf, "aleatoric_variance must be finite"),
        ("aleatoric_variance", torch.tensor([0.1, math.nan]), "aleatoric_variance must be"),
        ("aleatoric_variance", -0.1, "aleatoric_variance must be non-negative"),
    ],
)
def test_non_finite_targets_and_variances_are_rejected(gp, acquisition, argument, value, message):
    with pytest.raises(ValueError, match=message):
        _build(acquisition, gp, **{argument: value})


@pytest.mark.parametrize("acquisition", ROBUST)
def test_a_variance_function_returning_nan_fails_at_evaluation(gp, acquisition):
    acqf = _build(acquisition, gp, aleatoric_variance=lambda X: X[..., 0] * math.nan)
    with pytest.raises(ValueError, match="aleatoric_variance must be finite"):
        acqf(torch.rand(3, 1, 2, dtype=DTYPE))


@pytest.mark.parametrize(
    ("acquisition", "argument", "value"),
    [
        (RobustTargetProbabilityOfImprovement, "zeta", math.nan),
        (RobustTargetProbabilityOfImprovement, "zeta", math.inf),
        (LogRobustTargetProbabilityOfImprovement, "zeta", True),
        (RobustTargetLowerConfidenceBound, "quantile", math.nan),
        (RobustTargetLowerConfidenceBound, "quantile", "x"),
        (RobustTargetExpectedImprovement, "approximation", None),
        (LeakyExpectedImprovement, "negative_slope", math.nan),
        (qLeakyExpectedImprovement, "negative_slope", True),
        (LeakyExpectedImprovement, "maximize", "no"),
    ],
    ids=repr,
)
def test_bad_settings_are_rejected_naming_them(gp, acquisition, argument, value):
    with pytest.raises(ValueError, match=argument):
        _build(acquisition, gp, **{argument: value})


def test_compute_e_min_checks_its_data():
    Y = torch.tensor([[0.3], [-0.1], [0.5]], dtype=DTYPE)
    with pytest.raises(ValueError, match="Y_mean must be finite"):
        compute_e_min(Y.index_fill(0, torch.tensor([1]), math.nan), 0.0, 0.01)
    with pytest.raises(ValueError, match="Y_mean holds no observations"):
        compute_e_min(torch.zeros(0, 1), 0.0, 0.01)
    with pytest.raises(ValueError, match="Y_mean holds no observations"):
        compute_e_min(torch.zeros(0), 0.0, 0.01)
    with pytest.raises(ValueError, match="target must be finite"):
        compute_e_min(Y, math.nan, 0.01)
    with pytest.raises(ValueError, match="aleatoric_variance must be finite"):
        compute_e_min(Y, 0.0, torch.tensor([[0.1], [math.inf], [0.1]], dtype=DTYPE))


def test_input_noise_variance_must_be_finite(gp):
    with pytest.raises(ValueError, match="input_variance must be finite"):
        first_order_input_noise_variance(gp, input_variance=torch.tensor([0.1, math.nan]))


@pytest.mark.parametrize(
    ("acquisition", "extra", "message"),
    [
        (LeakyExpectedImprovement, {}, "best_f must be finite"),
        (
            RobustTargetExpectedImprovement,
            {"target": 0.8, "aleatoric_variance": 0.01},
            "Y_mean must be finite",
        ),
    ],
)
def test_a_nan_observation_does_not_become_a_nan_incumbent(gp, acquisition, extra, message):
    X, Y = training_points()
    Y[2] = math.nan
    dataset = SupervisedDataset(X, Y, feature_names=["x0", "x1"], outcome_names=["y0"])
    with pytest.raises(ValueError, match=message):
        inputs = get_acqf_input_constructor(acquisition)(model=gp, training_data=dataset, **extra)
        acquisition(**inputs)


def test_an_empty_q_batch_is_refused_by_the_q_acquisitions() -> None:
    from botorch_nn_uq.acquisition import (
        qLeakyExpectedImprovement,
        qRobustTargetExpectedImprovement,
    )
    from botorch_nn_uq.models import MCDropout

    X = torch.rand(10, 2, dtype=torch.float64)
    model = MCDropout(X, X.sum(-1, keepdim=True), epochs=5).fit(seed=0)
    empty = torch.rand(3, 0, 2, dtype=torch.float64)
    acquisitions = [
        qLeakyExpectedImprovement(model, best_f=1.0),
        qRobustTargetExpectedImprovement(model, target=1.0, best_f=0.5, aleatoric_variance=0.1),
    ]
    for acquisition in acquisitions:
        with pytest.raises(ValueError, match="no candidate point"):
            acquisition(empty)
        acquisition.set_X_pending(X[:2])
        assert acquisition(empty).shape == (3,)
