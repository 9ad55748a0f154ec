import pytest
import torch
from botorch.models import ModelList, SingleTaskGP

from botorch_nn_uq import MCDropout, fit_model


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
