"""The acquisition functions can be built by name through BoTorch's input constructors."""

from __future__ import annotations

import pytest
import torch
from botorch.acquisition.input_constructors import get_acqf_input_constructor
from botorch.acquisition.objective import ScalarizedPosteriorTransform
from botorch.sampling import SobolQMCNormalSampler
from botorch.utils.datasets import SupervisedDataset

from botorch_nn_uq.acquisition import (
    LeakyExpectedImprovement,
    LogRobustTargetProbabilityOfImprovement,
    RobustTargetExpectedImprovement,
    RobustTargetLowerConfidenceBound,
    RobustTargetProbabilityOfImprovement,
    compute_e_min,
    qLeakyExpectedImprovement,
    qRobustTargetExpectedImprovement,
)
from tests.acquisition.conftest import DTYPE, make_gp, training_points

TARGET = 0.5


def dataset(num_outputs: int = 1) -> SupervisedDataset:
    X, Y = training_points(num_outputs)
    return SupervisedDataset(
        X, Y, feature_names=["x0", "x1"], outcome_names=[f"y{i}" for i in range(num_outputs)]
    )


@pytest.fixture
def test_X() -> torch.Tensor:
    return torch.rand(5, 1, 2, generator=torch.Generator().manual_seed(0), dtype=DTYPE)


def build(acqf_class, **kwargs):
    inputs = get_acqf_input_constructor(acqf_class)(**kwargs)
    return acqf_class(**inputs)


def build_robust(acqf_class, model, aleatoric_variance, training_data=None, **kwargs):
    r"""``build`` a robust target-value acquisition for ``TARGET``, by default with the
    training data of :func:`dataset`."""
    return build(
        acqf_class,
        model=model,
        training_data=dataset() if training_data is None else training_data,
        target=TARGET,
        aleatoric_variance=aleatoric_variance,
        **kwargs,
    )


def test_leaky_ei_defaults_to_best_observed_value(gp, test_X):
    Y = dataset().Y
    acqf = build(LeakyExpectedImprovement, model=gp, training_data=dataset(), negative_slope=0.1)
    assert torch.allclose(acqf.best_f, Y.max()) and acqf.negative_slope == 0.1
    assert acqf(test_X).shape == (5,)
    minimising = build(LeakyExpectedImprovement, model=gp, training_data=dataset(), maximize=False)
    assert torch.allclose(minimising.best_f, Y.min()) and not minimising.maximize


def test_q_leaky_ei_accepts_mc_arguments(gp):
    sampler = SobolQMCNormalSampler(sample_shape=torch.Size([16]), seed=0)
    pending = torch.tensor([[0.1, 0.9]], dtype=DTYPE)
    acqf = build(
        qLeakyExpectedImprovement,
        model=gp,
        training_data=dataset(),
        sampler=sampler,
        X_pending=pending,
        bounds=torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=DTYPE),
    )
    assert torch.allclose(acqf.best_f, dataset().Y.max())
    assert acqf.sampler is sampler and torch.equal(acqf.X_pending, pending)
    assert acqf(torch.rand(3, 2, 2, dtype=DTYPE)).shape == (3,)


@pytest.mark.parametrize(
    "acqf_class",
    [
        RobustTargetExpectedImprovement,
        RobustTargetProbabilityOfImprovement,
        LogRobustTargetProbabilityOfImprovement,
        qRobustTargetExpectedImprovement,
    ],
)
def test_robust_incumbent_defaults_to_e_min(gp, test_X, acqf_class):
    acqf = build_robust(acqf_class, gp, 0.01)
    expected = compute_e_min(dataset().Y, TARGET, 0.01)
    assert torch.allclose(acqf.best_f, expected)
    assert acqf(test_X).shape == (5,)
    assert build_robust(acqf_class, gp, 0.01, best_f=0.3).best_f.item() == 0.3


def test_callable_variance_is_evaluated_at_training_inputs(gp):
    def variance(X: torch.Tensor) -> torch.Tensor:
        return 0.1 * X[..., 0]

    acqf = build_robust(RobustTargetExpectedImprovement, gp, variance)
    X, Y = training_points()
    expected = ((Y.squeeze(-1) - TARGET).square() + 0.1 * X[:, 0]).min()
    assert torch.allclose(acqf.best_f, expected)
    assert acqf.aleatoric_variance_function is variance


def test_posterior_mean_incumbent_for_noisy_data(gp):
    acqf = build_robust(
        RobustTargetProbabilityOfImprovement, gp, 0.0, zeta=0.01, use_posterior_mean=True
    )
    with torch.no_grad():
        mean = gp.posterior(dataset().X).mean
    assert torch.allclose(acqf.best_f, compute_e_min(mean, TARGET, 0.0))
    assert acqf.zeta == 0.01


def test_lcb_needs_no_training_data(gp, test_X):
    acqf = build_robust(
        RobustTargetLowerConfidenceBound, gp, 0.01, quantile=0.2, approximation="sankaran"
    )
    assert acqf.quantile == 0.2 and acqf.approximation == "sankaran"
    assert acqf(test_X).shape == (5,)


def test_multi_output_datasets_with_scalarising_transform(test_X):
    model = make_gp(num_outputs=2)
    X, Y = training_points(2)
    training_data = {
        name: SupervisedDataset(X, Y[:, [i]], feature_names=["x0", "x1"], outcome_names=[name])
        for i, name in enumerate(["y0", "y1"])
    }
    weights = torch.tensor([0.5, 0.5], dtype=DTYPE)
    transform = ScalarizedPosteriorTransform(weights)
    acqf = build_robust(
        RobustTargetExpectedImprovement,
        model,
        0.0,
        training_data=training_data,
        posterior_transform=transform,
    )
    assert torch.allclose(acqf.best_f, compute_e_min(Y @ weights, TARGET, 0.0))
    assert acqf(test_X).shape == (5,)
    with pytest.raises(ValueError, match="needs a single outcome"):
        build_robust(RobustTargetExpectedImprovement, model, 0.0, training_data=training_data)


def test_unexpected_keyword_raises(gp):
    with pytest.raises(TypeError, match="Unexpected keyword argument `beta`"):
        get_acqf_input_constructor(RobustTargetLowerConfidenceBound)(
            model=gp, target=TARGET, aleatoric_variance=0.0, beta=2.0
        )
