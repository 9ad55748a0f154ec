"""How the models serve posterior() and model(X) (exercised through MC dropout)."""

import pytest
import torch
from botorch.exceptions.errors import UnsupportedError
from botorch.models.transforms.outcome import Log

from botorch_nn_uq.models import MCDropout
from tests.models.mc_dropout_toy import FAST, toy_data


def test_unsupported_posterior_arguments_are_named() -> None:
    train_X, train_Y = toy_data()
    model = MCDropout(train_X, train_Y, **FAST).fit(seed=0)
    with pytest.raises(UnsupportedError, match="gradient_free"):
        model.posterior(train_X, gradient_free=True)


def test_nonlinear_outcome_transform_maps_every_function() -> None:
    train_X, train_Y = toy_data()
    # Standardised, so that the log of the positive outcomes needs no further transform.
    train_Y = (train_Y - train_Y.mean()) / train_Y.std()
    positive_Y = train_Y.exp()
    model = MCDropout(train_X, positive_Y, outcome_transform=Log(), **FAST).fit(seed=0)
    reference = MCDropout(train_X, train_Y, outcome_transform=None, **FAST).fit(seed=0)
    X = torch.rand(4, 1, 2, dtype=torch.float64)
    torch.testing.assert_close(model.posterior(X).values, reference.posterior(X).values.exp())
    with pytest.raises(UnsupportedError, match="linear outcome transform"):
        model.posterior(X, observation_noise=True)


def test_calling_a_model_gives_its_latent_gaussian_as_a_gp_call_does() -> None:
    train_X, train_Y = toy_data()
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
