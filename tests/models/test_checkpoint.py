"""Checkpoints: a fitted model's state_dict loads into a fresh model of the same
configuration, and a checkpoint of anything else is refused with the difference named.
(Every model's round trip runs in the conformance kit.)"""

import pickle

import pytest
import torch
from botorch.models.transforms import Normalize, Standardize
from botorch.models.transforms.outcome import ChainedOutcomeTransform, Log
from torch import nn

from botorch_nn_uq.models import DeepEnsemble, HyperDeepEnsemble, MCDropout
from tests.cards import fast_settings

DTYPE = torch.float64
BOUNDS = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=DTYPE)
#: The deep ensemble's card's fast settings, with the widths and size that the messages
#: below name.
SMALL = fast_settings("deep-ensemble", hidden_widths=(8,), epochs=30, ensemble_size=3)


def _data(n: int = 12, seed: int = 0, num_outputs: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    X = torch.rand(n, 2, generator=torch.Generator().manual_seed(seed), dtype=DTYPE)
    Y = torch.stack([X.sin().sum(-1), X.prod(-1)], dim=-1)[..., :num_outputs]
    return X, Y


def _transforms(num_outputs: int = 1) -> dict:
    return {
        "input_transform": Normalize(2, bounds=BOUNDS),
        "outcome_transform": Standardize(num_outputs),
    }


def _ensemble(n: int = 12, seed: int = 0, num_outputs: int = 1, **kwargs) -> DeepEnsemble:
    X, Y = _data(n, seed, num_outputs)
    return DeepEnsemble(X, Y, **_transforms(num_outputs), **{**SMALL, **kwargs})


def _test_points() -> torch.Tensor:
    return torch.rand(5, 1, 2, generator=torch.Generator().manual_seed(9), dtype=DTYPE)


def _assert_same_predictions(a, b) -> None:
    X = _test_points()
    for observation_noise in (False, True):
        expected = a.posterior(X, observation_noise=observation_noise)
        actual = b.posterior(X, observation_noise=observation_noise)
        assert torch.equal(actual.mean, expected.mean)
        assert torch.equal(actual.variance, expected.variance)


@pytest.fixture(scope="module")
def fitted() -> DeepEnsemble:
    return _ensemble().fit(seed=0)


def _without_network_bias(state: dict) -> dict:
    return {name: value for name, value in state.items() if name != "network.groups.0.biases.0"}


@pytest.mark.parametrize(
    ("make_target", "make_state", "message"),
    [
        (
            lambda: _ensemble(hidden_widths=(16,)),
            None,
            r"hidden_widths \(\[8\] in the checkpoint, \[16\]",
        ),
        (lambda: _ensemble(ensemble_size=4), None, r"ensemble_size \(3 in the checkpoint, 4"),
        (lambda: _ensemble(activation="tanh"), None, "activation"),
        (lambda: _ensemble(num_outputs=2), None, r"num_outputs \(1 in the checkpoint, 2"),
        (
            lambda: DeepEnsemble(
                *_data(),
                input_transform=Normalize(2, bounds=BOUNDS),
                outcome_transform=ChainedOutcomeTransform(log=Log(), standardize=Standardize(1)),
                **SMALL,
            ),
            None,
            r"outcome_transform \('Standardize' in the checkpoint, 'ChainedOutcomeTransform'",
        ),
        (
            lambda: MCDropout(*_data(), **_transforms(), hidden_widths=(8,), epochs=30),
            None,
            "checkpoint is of a botorch_nn_uq.models.ensemble.DeepEnsemble, this model is a "
            "botorch_nn_uq.models.mc_dropout.MCDropout",
        ),
        (
            lambda: HyperDeepEnsemble(*_data(), **_transforms(), hidden_widths=(8,)),
            None,
            "this model is a botorch_nn_uq.models.hyper_deep_ensemble.HyperDeepEnsemble",
        ),
        (_ensemble, lambda fitted: _ensemble().state_dict(), "checkpoint is of an unfitted model"),
        (
            _ensemble,
            lambda fitted: _without_network_bias(fitted.state_dict()),
            r"network.groups.0.biases.0 is missing",
        ),
    ],
    ids=[
        "hidden-widths",
        "ensemble-size",
        "activation",
        "outputs",
        "transforms",
        "class",
        "subclass",
        "unfitted",
        "missing-weights",
    ],
)
def test_a_mismatched_checkpoint_is_refused_and_changes_nothing(
    fitted, make_target, make_state, message
) -> None:
    target = make_target()
    state = fitted.state_dict() if make_state is None else make_state(fitted)
    before = {name: value.clone() for name, value in target.state_dict().items()}
    with pytest.raises(RuntimeError, match=message):
        target.load_state_dict(state)
    assert not target.is_fitted
    after = target.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(before[name], after[name]) for name in before)


def test_loading_into_a_fitted_model_replaces_its_fit() -> None:
    X, Y = _data()
    source = MCDropout(X, Y, **_transforms(), hidden_widths=(8,), epochs=30, num_masks=4)
    source.fit(seed=0).resample_function_bank(size=7, seed=3)
    target = MCDropout(X, Y, **_transforms(), hidden_widths=(8,), epochs=30, num_masks=4)
    target.fit(seed=1)
    target.load_state_dict(source.state_dict())
    _assert_same_predictions(source, target)
    assert target.masks[0].shape[0] == 7
    assert target.fit_seed == 0 and target.training_result is None


# A search of two candidates may keep one member, which the fit warns about.
@pytest.mark.filterwarnings("ignore:The member selection of HyperDeepEnsemble kept a single")
def test_loading_into_a_fitted_search_clears_its_search_records() -> None:
    settings = {"hidden_widths": (8,), "epochs": 20, "num_candidates": 2, "ensemble_size": 2}
    source = HyperDeepEnsemble(*_data(), **_transforms(), **settings).fit(seed=0)
    target = HyperDeepEnsemble(*_data(), **_transforms(), **settings).fit(seed=1)
    target.load_state_dict(source.state_dict())
    _assert_same_predictions(source, target)
    assert not hasattr(target, "search_history")
    assert not hasattr(target, "ensemble_validation_nll")


def test_a_refit_after_loading_onto_other_data_trains_in_the_checkpoints_units(fitted) -> None:
    fresh = _ensemble(n=20, seed=1)
    _, train_Y = _data(20, 1)
    fresh.load_state_dict(fitted.state_dict())
    # The posterior maps back through the checkpoint's outcome transform, so the targets
    # of a later fit must be in its units.
    assert torch.equal(fresh.outcome_transform.means, fitted.outcome_transform.means)
    restored_Y, _ = fresh.outcome_transform.untransform(fresh.transformed_train_Y)
    torch.testing.assert_close(restored_Y, train_Y)
    refit = fresh.fit(seed=0, epochs=200)
    residual = refit.posterior(refit.train_X.unsqueeze(-2)).mean.squeeze(-2) - train_Y
    assert residual.abs().max() < 0.5 * train_Y.std()


def test_a_checkpoint_loads_inside_a_parent_module(fitted) -> None:
    parent = nn.ModuleDict({"surrogate": fitted})
    fresh = nn.ModuleDict({"surrogate": _ensemble(n=7, seed=2)})
    fresh.load_state_dict(parent.state_dict())
    _assert_same_predictions(fitted, fresh["surrogate"])


def test_a_subset_output_checkpoint_loads_into_the_same_subset() -> None:
    source = _ensemble(num_outputs=2).fit(seed=0).subset_output([1, 0])
    with pytest.raises(RuntimeError, match=r"output_selection \(\[1, 0\] in the checkpoint, None"):
        _ensemble(num_outputs=2).load_state_dict(source.state_dict())
    target = _ensemble(n=9, seed=1, num_outputs=2).subset_output([1, 0])
    target.load_state_dict(source.state_dict())
    _assert_same_predictions(source, target)
    # The subset's outcome transform holds the served outputs in serving order.
    restored_Y, _ = target.outcome_transform.untransform(target.transformed_train_Y[..., [1, 0]])
    torch.testing.assert_close(restored_Y, _data(9, 1, num_outputs=2)[1][..., [1, 0]])


def test_a_loaded_model_pickles_and_changes_dtype(fitted) -> None:
    loaded = _ensemble(n=7, seed=2)
    loaded.load_state_dict(fitted.state_dict())
    _assert_same_predictions(fitted, pickle.loads(pickle.dumps(loaded)))
    single = loaded.to(torch.float32)
    assert single.train_X.dtype == single.member_weights.dtype == torch.float32
    assert single.posterior(_test_points().float()).mean.dtype == torch.float32
