"""The serving base of the ensembles: one posterior for deep, hyper-deep and searched
ensembles, and the hyperparameters they all share. The posterior itself is tested through
each model (``test_ensemble.py``, ``test_searched_ensembles.py``,
``tests/ensembles/test_hyper_deep.py``) and the conformance kit."""

import dataclasses

import pytest
import torch

from botorch_nn_uq.models import (
    AutoDEUQ,
    DeepEnsemble,
    HyperDeepEnsemble,
    MemberEnsemble,
    MemberEnsembleHyperparameters,
    NESRandomSearch,
    NESRegularizedEvolution,
)

ENSEMBLES = [DeepEnsemble, HyperDeepEnsemble, NESRandomSearch, NESRegularizedEvolution, AutoDEUQ]
SHARED_FIELDS = {field.name for field in dataclasses.fields(MemberEnsembleHyperparameters)}


def _data():
    X = torch.rand(12, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    return X, X.sin().sum(-1, keepdim=True)


@pytest.mark.parametrize("model_class", ENSEMBLES)
def test_every_ensemble_is_served_by_the_member_ensemble(model_class):
    assert issubclass(model_class, MemberEnsemble)
    assert issubclass(model_class.hyperparameter_class, MemberEnsembleHyperparameters)
    for name in ("_predict", "uncertainty_decomposition", "set_member_weights"):
        assert getattr(model_class, name) is getattr(MemberEnsemble, name)
    assert set(MemberEnsemble.checkpoint_hyperparameters) <= set(
        model_class.checkpoint_hyperparameters
    )


@pytest.mark.parametrize("model_class", ENSEMBLES)
@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"ensemble_size": 1}, "ensemble_size"),
        ({"likelihood": "laplace"}, "likelihood"),
        ({"min_std": 0.0}, "min_std"),
        ({"noise_variance": -1.0}, "noise_variance"),
    ],
)
def test_every_ensemble_checks_the_shared_hyperparameters(model_class, values, message):
    assert set(values) <= SHARED_FIELDS
    with pytest.raises(ValueError, match=message):
        model_class(*_data(), **values)


def test_a_single_served_member_warns_and_has_no_epistemic_variance():
    X, Y = _data()
    model = DeepEnsemble(X, Y, hidden_widths=(4,), epochs=3, ensemble_size=2).fit(seed=0)
    train_X, train_Y = model.transformed_training_data()
    with pytest.warns(UserWarning, match="kept a single member.*zero variance"):
        model._serve_members(model.network, torch.tensor([0.0, 2.0]), train_X, train_Y)
    torch.testing.assert_close(model.member_weights, torch.tensor([0.0, 1.0]).to(X))
    assert (model.posterior(X[:3]).variance == 0).all()
    decomposition = model.uncertainty_decomposition(X[:3])
    assert (decomposition.epistemic_variance == 0).all()
