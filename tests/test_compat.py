"""Pins the behaviour of the BoTorch internals the package relies on
(``botorch_nn_uq.compat``): a BoTorch release that changes one fails here."""

import math

import torch
from botorch.models.transforms.outcome import ChainedOutcomeTransform, Log, Standardize
from botorch.posteriors.ensemble import EnsemblePosterior
from botorch.test_functions import Branin

from botorch_nn_uq.compat import (
    ensemble_weights,
    evaluate_true_unchecked,
    is_linear,
    log_ei_helper,
    scaled_improvement,
    standardize_min_stdv,
    standardize_width,
)

DTYPE = torch.float64


def test_log_ei_helper_is_the_log_of_the_unit_expected_improvement() -> None:
    u = torch.tensor([-3.0, -0.5, 0.0, 0.7, 4.0], dtype=DTYPE)
    normal = torch.distributions.Normal(0.0, 1.0)
    expected = torch.log(normal.log_prob(u).exp() + u * normal.cdf(u))
    torch.testing.assert_close(log_ei_helper(u), expected)
    # Stable far in the tail, where the direct formula underflows to log(0).
    far = log_ei_helper(torch.tensor([-40.0], dtype=DTYPE))
    assert far.isfinite().all() and far.item() < -800


def test_scaled_improvement_is_signed_by_the_direction() -> None:
    mean, sigma, best_f = (torch.tensor([2.0], dtype=DTYPE), torch.tensor([0.5]), 1.0)
    best = torch.tensor(best_f, dtype=DTYPE)
    assert scaled_improvement(mean, sigma, best, maximize=True).item() == 2.0
    assert scaled_improvement(mean, sigma, best, maximize=False).item() == -2.0


def test_is_linear_tells_affine_transforms_apart() -> None:
    assert is_linear(Standardize(1))
    assert not is_linear(Log())
    assert is_linear(ChainedOutcomeTransform(first=Standardize(1)))
    assert not is_linear(ChainedOutcomeTransform(first=Log(), second=Standardize(1)))


def test_standardize_exposes_its_width_and_smallest_standard_deviation() -> None:
    transform = Standardize(3, min_stdv=1e-5)
    assert standardize_width(transform) == 3
    assert standardize_min_stdv(transform) == 1e-5
    Y = torch.tensor([[1.0, 2.0, 5.0], [1.0, 4.0, 9.0]], dtype=DTYPE)
    transform(Y)
    # The constant first output is only centred: its deviation is below min_stdv.
    assert transform.stdvs[0, 0].item() == 1.0


def test_ensemble_weights_are_the_weights_as_given() -> None:
    values = torch.rand(4, 3, 1, dtype=DTYPE)
    weights = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=DTYPE)
    posterior = EnsemblePosterior(values=values.unsqueeze(0), weights=weights)
    assert ensemble_weights(posterior) is weights
    assert ensemble_weights(EnsemblePosterior(values=values.unsqueeze(0))) is None


def test_evaluate_true_unchecked_equals_the_public_evaluation() -> None:
    branin = Branin()
    X = torch.tensor([[-math.pi, 12.275], [0.0, 5.0]], dtype=DTYPE)
    torch.testing.assert_close(evaluate_true_unchecked(branin, X), branin.evaluate_true(X))
