"""What frameworks that build models from data (Ax) rely on: ``construct_inputs``, the
transforms among the positional-or-keyword arguments, and ``refit_on_load``."""

import inspect

import pytest
import torch
from botorch.models.transforms import Normalize, Standardize
from botorch.utils.datasets import SupervisedDataset

from botorch_nn_uq.models import DeepEnsemble, MCDropout, NESRandomSearch
from tests.cards import NEURAL_CARDS, fast_settings

DTYPE = torch.float64
MODEL_CLASSES = list(dict.fromkeys(card.model_class for card in NEURAL_CARDS))
#: The deep ensemble's card's fast settings, smaller.
SMALL = fast_settings("deep-ensemble", hidden_widths=(8,), epochs=30, ensemble_size=2)


def _data(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    X = torch.rand(n, 2, generator=torch.Generator().manual_seed(seed), dtype=DTYPE)
    Y = X.sin().sum(-1, keepdim=True)
    return X, (Y - Y.mean()) / Y.std()


def _dataset(n: int = 6, with_noise: bool = False) -> SupervisedDataset:
    X, Y = _data(n, seed=0)
    return SupervisedDataset(
        X=X,
        Y=Y,
        Yvar=torch.full_like(Y, 0.01) if with_noise else None,
        feature_names=["x0", "x1"],
        outcome_names=["y"],
    )


def _transforms() -> dict:
    return {"input_transform": Normalize(2), "outcome_transform": Standardize(1)}


def _ensemble(n: int, seed: int, **kwargs) -> DeepEnsemble:
    return DeepEnsemble(*_data(n, seed), **{**SMALL, **kwargs})


@pytest.mark.parametrize("model_class", MODEL_CLASSES, ids=lambda cls: cls.__name__)
def test_the_transforms_are_positional_or_keyword_arguments(model_class) -> None:
    # Ax offers transforms only to models that list them there (as BoTorch's GPs do).
    arguments = inspect.getfullargspec(model_class).args
    assert {"input_transform", "outcome_transform"} <= set(arguments)


def test_construct_inputs_passes_the_model_options_through() -> None:
    inputs = DeepEnsemble.construct_inputs(_dataset(), ensemble_size=3)
    dataset = _dataset()
    assert set(inputs) == {"train_X", "train_Y", "ensemble_size"}
    assert torch.equal(inputs["train_X"], dataset.X)
    assert torch.equal(inputs["train_Y"], dataset.Y)
    assert DeepEnsemble(**inputs).hyperparameters.ensemble_size == 3


def test_construct_inputs_passes_observed_noise_as_train_Yvar() -> None:
    # As BoTorch's Model.construct_inputs does for a GP.
    dataset = _dataset(with_noise=True)
    inputs = DeepEnsemble.construct_inputs(dataset, ensemble_size=3)
    assert set(inputs) == {"train_X", "train_Y", "train_Yvar", "ensemble_size"}
    assert torch.equal(inputs["train_Yvar"], dataset.Yvar)
    assert DeepEnsemble(**inputs).has_known_noise
    with pytest.raises(TypeError, match=r"got \['train_Yvar'\] in the model options"):
        DeepEnsemble.construct_inputs(dataset, train_Yvar=dataset.Yvar)


def test_a_searched_ensemble_takes_observed_noise_as_train_Yvar() -> None:
    dataset = _dataset(with_noise=True)
    inputs = NESRandomSearch.construct_inputs(dataset)
    assert set(inputs) == {"train_X", "train_Y", "train_Yvar"}
    assert NESRandomSearch(**inputs).has_known_noise


def test_construct_inputs_refuses_a_second_copy_of_the_training_data() -> None:
    with pytest.raises(TypeError, match=r"got \['train_X'\] in the model options"):
        DeepEnsemble.construct_inputs(_dataset(), train_X=torch.zeros(6, 2, dtype=DTYPE))
    with pytest.raises(TypeError, match="SupervisedDataset"):
        DeepEnsemble.construct_inputs(_data(6, 0))


def test_an_unknown_model_option_is_named() -> None:
    inputs = MCDropout.construct_inputs(_dataset(), ensemble_size=3)
    with pytest.raises(TypeError, match=r"Unknown hyperparameter\(s\) \['ensemble_size'\]"):
        MCDropout(**inputs)


def test_refit_on_load_retrains_on_the_models_own_data_with_the_checkpoints_seed() -> None:
    # Without transforms, whose loaded statistics would make the refit differ from a
    # fit of a fresh model (hence standardised data).
    checkpoint = _ensemble(12, seed=0, outcome_transform=None).fit(seed=3).state_dict()
    loaded = _ensemble(8, seed=1, refit_on_load=True, outcome_transform=None)
    # Loading happens under no_grad in prediction code; the refit still trains.
    with torch.no_grad():
        loaded.load_state_dict(checkpoint)
    expected = _ensemble(8, seed=1, outcome_transform=None).fit(seed=3)

    assert loaded.fit_seed == 3
    assert loaded.training_result is not None
    X = torch.rand(5, 1, 2, generator=torch.Generator().manual_seed(9), dtype=DTYPE)
    assert torch.equal(loaded.posterior(X).mean, expected.posterior(X).mean)
    assert torch.equal(loaded.posterior(X).variance, expected.posterior(X).variance)


def test_without_refit_on_load_a_checkpoint_serves_its_own_network() -> None:
    source = _ensemble(12, seed=0, **_transforms()).fit(seed=3)
    loaded = _ensemble(8, seed=1, **_transforms())
    loaded.load_state_dict(source.state_dict())
    X = torch.rand(5, 1, 2, generator=torch.Generator().manual_seed(9), dtype=DTYPE)
    assert torch.equal(loaded.posterior(X).mean, source.posterior(X).mean)


def test_refit_on_load_must_be_a_boolean() -> None:
    with pytest.raises(ValueError, match="refit_on_load"):
        _ensemble(8, seed=1, refit_on_load="yes")
