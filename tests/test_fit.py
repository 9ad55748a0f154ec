"""Tests of fitting any model of the package, and BoTorch GPs, with one function."""

import pytest
import torch
from botorch.models import (
    ModelList,
    PairwiseGP,
    SingleTaskGP,
    SingleTaskVariationalGP,
)
from botorch.models.fully_bayesian import SaasFullyBayesianSingleTaskGP
from botorch.models.gpytorch import GPyTorchModel
from botorch.models.pairwise_gp import PairwiseLaplaceMarginalLogLikelihood
from gpytorch.mlls import ExactMarginalLogLikelihood, VariationalELBO

from botorch_nn_uq import fit_model
from botorch_nn_uq.fit import marginal_log_likelihood
from botorch_nn_uq.models import MCDropout


def _data():
    generator = torch.Generator().manual_seed(0)
    train_X = torch.rand(12, 2, generator=generator, dtype=torch.float64)
    return train_X, torch.sin(6 * train_X).sum(-1, keepdim=True)


def test_fit_model_fits_neural_models_reproducibly() -> None:
    train_X, train_Y = _data()
    first = fit_model(MCDropout(train_X, train_Y, epochs=50), seed=3)
    second = fit_model(MCDropout(train_X, train_Y, epochs=50), seed=3)
    assert first.is_fitted
    torch.testing.assert_close(first.posterior(train_X).mean, second.posterior(train_X).mean)


def test_fit_model_fits_gps_and_model_lists() -> None:
    train_X, train_Y = _data()
    gp = SingleTaskGP(train_X, train_Y)
    initial = gp.covar_module.lengthscale.clone()
    network = MCDropout(train_X, train_Y, epochs=20)
    fitted = fit_model(ModelList(network, gp), seed=0)
    assert isinstance(fitted, ModelList)
    assert network.is_fitted
    assert not torch.equal(gp.covar_module.lengthscale, initial)


def test_fit_model_rejects_unknown_models() -> None:
    with pytest.raises(TypeError, match="does not know how to fit"):
        fit_model(torch.nn.Linear(2, 1))


def test_fit_model_fits_a_variational_gp_by_its_elbo() -> None:
    train_X, train_Y = _data()
    train_Y = (train_Y - train_Y.mean()) / train_Y.std()
    gp = SingleTaskVariationalGP(train_X, train_Y, inducing_points=6)
    initial = gp.model.covar_module.lengthscale.clone()
    mll = marginal_log_likelihood(gp)
    assert isinstance(mll, VariationalELBO)
    assert mll.model is gp.model
    assert mll.num_data == train_X.shape[-2]
    assert fit_model(gp, seed=0) is gp
    assert not torch.equal(gp.model.covar_module.lengthscale, initial)
    assert gp.posterior(train_X).mean.shape == train_Y.shape


def test_variational_elbo_counts_training_points_not_outputs() -> None:
    train_X, train_Y = _data()
    train_Y = (train_Y - train_Y.mean()) / train_Y.std()
    gp = SingleTaskVariationalGP(train_X, train_Y.repeat(1, 2), inducing_points=6)
    assert marginal_log_likelihood(gp).num_data == train_X.shape[-2]


def test_exact_and_pairwise_gps_get_their_own_likelihoods() -> None:
    train_X, train_Y = _data()
    assert isinstance(
        marginal_log_likelihood(SingleTaskGP(train_X, train_Y)), ExactMarginalLogLikelihood
    )
    comparisons = torch.tensor([[0, 1], [2, 3], [4, 5]])
    preference = PairwiseGP(train_X[:6], comparisons)
    assert isinstance(marginal_log_likelihood(preference), PairwiseLaplaceMarginalLogLikelihood)
    assert fit_model(preference, seed=0) is preference


def test_gps_without_a_likelihood_to_fit_are_rejected_with_the_way_to_fit_them() -> None:
    train_X, _ = _data()
    # Constructing a fully Bayesian GP needs JAX, an optional dependency of BoTorch; the
    # dispatch reads only the model's type.
    fully_bayesian = SaasFullyBayesianSingleTaskGP.__new__(SaasFullyBayesianSingleTaskGP)
    with pytest.raises(TypeError, match="fit_fully_bayesian_model_nuts"):
        fit_model(fully_bayesian)
    with pytest.raises(TypeError, match="no training data"):
        fit_model(SingleTaskVariationalGP(train_X, inducing_points=6))


class _NeitherExactNorVariationalGP(GPyTorchModel, torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.likelihood = None


def test_gpytorch_models_that_are_neither_exact_nor_variational_are_rejected() -> None:
    with pytest.raises(TypeError, match="none of them"):
        fit_model(_NeitherExactNorVariationalGP())
