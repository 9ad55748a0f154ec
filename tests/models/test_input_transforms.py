"""Input transforms as networks see them, and learnable ones trained with the network
(botorch_nn_uq.models.input_transforms)."""

import pytest
import torch
from botorch.exceptions.errors import UnsupportedError
from botorch.models.transforms.input import AppendFeatures, ChainedInputTransform, Normalize, Warp
from botorch.models.transforms.outcome import Standardize
from botorch.sampling import SobolQMCNormalSampler
from torch import nn

from botorch_nn_uq.models import NOMU, DeepEnsemble, MCDropout
from botorch_nn_uq.models.card import Status
from botorch_nn_uq.models.input_transforms import (
    InputCoordinatesError,
    TransformedInputNetwork,
    affine_rebase,
    apply_training_transforms,
    learnable_parameter_names,
)
from tests.cards import NEURAL_CARDS, families, smallest
from tests.models.conformance import training_interrupted_after

F64 = {"dtype": torch.float64}
BOUNDS = torch.tensor([[0.0, 0.0], [2.0, 2.0]], **F64)

#: The models that train learnable input transforms with the network, and those that
#: refuse them (a family's cell says which of its models do).
LEARNING, REFUSING = (
    [card.model_class for card in NEURAL_CARDS if card.model_class.trains_input_transform == learns]
    for learns in (True, False)
)


def _data():
    X = 2 * torch.rand(16, 2, generator=torch.Generator().manual_seed(0), **F64)
    return X, (X**2).sin().sum(-1, keepdim=True)


def test_training_transforms_skip_evaluation_only_ones_and_refit_nothing() -> None:
    X, _ = _data()
    normalize = Normalize(2)
    normalize(X)  # learns the bounds of X in train mode
    chained = ChainedInputTransform(
        normalize=normalize, append=AppendFeatures(feature_set=torch.zeros(3, 1, **F64))
    )
    coefficient, offset = normalize.coefficient.clone(), normalize.offset.clone()
    mapped = apply_training_transforms(chained, 10 * X)
    torch.testing.assert_close(mapped, (10 * X - offset) / coefficient)
    assert torch.equal(normalize.coefficient, coefficient) and normalize.training


def test_learnable_parameters_are_named() -> None:
    warp = Warp(2, indices=[0, 1])
    assert learnable_parameter_names(warp) == ["concentration0", "concentration1"]
    assert learnable_parameter_names(Normalize(2)) == []
    assert learnable_parameter_names(None) == []
    warp.requires_grad_(False)
    assert learnable_parameter_names(warp) == []


def test_a_transformed_input_network_trains_both_and_keeps_the_transform_in_eval() -> None:
    module = TransformedInputNetwork(Warp(2, indices=[0, 1]), nn.Linear(2, 1).double())
    module.train()
    assert not module.transform.training and module.network.training
    names = dict(module.named_parameters()).keys()
    assert {"inputs.transform.concentration0", "network.weight"} <= names
    assert module.in_features == 2  # the network's attributes
    X = torch.rand(4, 2, **F64)
    torch.testing.assert_close(module(X), module.network(module.transform.transform(X)))


@pytest.mark.parametrize("model_class", LEARNING, ids=lambda cls: cls.__name__)
def test_a_learnable_warp_trains_with_the_network(model_class) -> None:
    X, Y = _data()
    warp = Warp(2, indices=[0, 1], bounds=BOUNDS)
    model = model_class(X, Y, input_transform=warp, epochs=60).fit(seed=0)
    learned = model.input_transform
    assert learned is not warp  # the model's own copy, trained
    assert not torch.equal(learned.concentration0, warp.concentration0)
    assert torch.equal(warp.concentration0, torch.ones_like(warp.concentration0))
    # The posterior maps inputs through the learned warp.
    X_test = torch.rand(5, 1, 2, **F64)
    if model_class is MCDropout:
        functions = model.network(learned(X_test), masks=model.masks)
        expected = model.outcome_transform.untransform(functions)[0]
        torch.testing.assert_close(model.posterior(X_test).values, expected)
    again = model_class(X, Y, input_transform=Warp(2, indices=[0, 1], bounds=BOUNDS), epochs=60)
    again.fit(seed=0)
    torch.testing.assert_close(again.input_transform.concentration1, learned.concentration1)


def test_a_failed_fit_leaves_the_learnable_transform_as_it_was() -> None:
    X, Y = _data()
    model = MCDropout(X, Y, input_transform=Warp(2, indices=[0, 1], bounds=BOUNDS), epochs=20)
    model.fit(seed=0)
    transform = model.input_transform
    before = [parameter.detach().clone() for parameter in transform.parameters()]
    with training_interrupted_after(3, KeyboardInterrupt()), pytest.raises(KeyboardInterrupt):
        model.fit(seed=1)
    assert model.input_transform is transform
    assert all(torch.equal(a, b) for a, b in zip(before, transform.parameters(), strict=True))


def _warp() -> Warp:
    return Warp(2, indices=[0, 1], bounds=BOUNDS)


def _warped(model_class, X=None, Y=None, **options):
    if X is None:
        X, Y = _data()
    return model_class(X, Y, input_transform=_warp(), **{"epochs": 40, **options})


def _concentrations(model) -> torch.Tensor:
    transform = model.input_transform
    return torch.cat([transform.concentration0, transform.concentration1]).detach()


@pytest.mark.parametrize("model_class", LEARNING, ids=lambda cls: cls.__name__)
def test_a_refit_with_the_same_seed_starts_from_the_constructed_warp(model_class) -> None:
    model = _warped(model_class).fit(seed=0)
    learned = _concentrations(model)
    X_test = torch.rand(4, 1, 2, **F64)
    mean = model.posterior(X_test).mean
    model.fit(seed=0)
    torch.testing.assert_close(_concentrations(model), learned, rtol=0, atol=0)
    torch.testing.assert_close(model.posterior(X_test).mean, mean, rtol=0, atol=0)


@pytest.mark.parametrize("model_class", LEARNING, ids=lambda cls: cls.__name__)
def test_a_checkpoint_carries_the_learned_warp(model_class) -> None:
    model = _warped(model_class).fit(seed=0)
    loaded = _warped(model_class)
    loaded.load_state_dict(model.state_dict())
    torch.testing.assert_close(_concentrations(loaded), _concentrations(model), rtol=0, atol=0)
    assert not loaded.input_transform.training
    X_test = torch.rand(4, 1, 2, **F64)
    torch.testing.assert_close(loaded.posterior(X_test).mean, model.posterior(X_test).mean)


@pytest.mark.parametrize(
    "card",
    [card for card in NEURAL_CARDS if card.model_class in LEARNING and card.bo.supports_warm_start],
    ids=lambda card: card.name,
)
def test_a_warm_start_continues_from_its_learned_warp(card) -> None:
    previous = _warped(card.model_class).fit(seed=0)
    X, Y = _data()
    model = _warped(card.model_class, torch.cat([X, X[:2] / 2]), torch.cat([Y, Y[:2]]))
    # A negligible learning rate keeps what the fit started from: the warm start's warp,
    # which its network was trained with, not the constructed identity.
    model.fit(seed=1, warm_start=previous, epochs=1, learning_rate=1e-12)
    torch.testing.assert_close(_concentrations(model), _concentrations(previous))
    assert not torch.allclose(_concentrations(model), torch.ones(4, **F64))


@pytest.mark.parametrize("model_class", LEARNING, ids=lambda cls: cls.__name__)
def test_conditioned_and_fantasy_models_serve_the_learned_warp(model_class) -> None:
    model = _warped(model_class).fit(seed=0)
    X_new = torch.rand(3, 2, **F64) * 2
    learned = _concentrations(model)
    # Conditioned models evaluate the fitted model, which maps inputs through its warp.
    conditioned = model.condition_on_observations(X_new, torch.zeros(3, 1, **F64))
    assert conditioned.model is model
    assert conditioned.posterior(X_new.unsqueeze(-2)).mean.isfinite().all()
    sampler = SobolQMCNormalSampler(torch.Size([2]), seed=0)
    fantasy = model.fantasize(X_new.unsqueeze(-2), sampler=sampler)
    assert fantasy.model is model
    assert fantasy.posterior(X_new.unsqueeze(-2)).mean.isfinite().all()
    torch.testing.assert_close(_concentrations(model), learned, rtol=0, atol=0)


def test_the_deep_ensembles_members_keep_the_best_epoch_of_the_warp_jointly() -> None:
    model = _warped(DeepEnsemble, epochs=60).fit(seed=0)
    best = model.training_result.best_epoch
    assert len(set(best.tolist())) == 1


def test_a_familys_cell_is_unsupported_exactly_when_none_of_its_models_learns() -> None:
    for family, cards in families().values():
        refused = family.support["learnable-transforms"].status is Status.UNSUPPORTED
        learns = (getattr(card.model_class, "trains_input_transform", True) for card in cards)
        assert refused == (not any(learns))


@pytest.mark.parametrize("model_class", REFUSING, ids=lambda cls: cls.__name__)
def test_models_that_cannot_learn_a_transform_refuse_it(model_class) -> None:
    X, Y = _data()
    with pytest.raises(UnsupportedError, match=r"cannot learn the parameters \['concentration0'"):
        model_class(X, Y, input_transform=Warp(2, indices=[0, 1], bounds=BOUNDS))
    # The refusal names the models that learn them.
    with pytest.raises(UnsupportedError, match="use DeepEnsemble, MCDropout, NEON or NOMU"):
        model_class(X, Y, input_transform=Warp(2, indices=[0, 1], bounds=BOUNDS))
    fixed = Warp(2, indices=[0, 1], bounds=BOUNDS).requires_grad_(False)
    model_class(X, Y, input_transform=fixed)


@pytest.mark.parametrize(
    "card",
    [card for card in NEURAL_CARDS if card.bo.supports_warm_start],
    ids=lambda card: card.name,
)
def test_a_warm_start_normalised_to_another_box_is_re_expressed_or_refused(card) -> None:
    X, Y = _data()
    wide, narrow = BOUNDS + torch.tensor([[-1.0], [1.0]], **F64), BOUNDS

    def build(bounds):
        options = smallest(card.fast.hyperparameters, epochs=20)
        return card.model_class(
            X,
            Y,
            input_transform=Normalize(2, bounds=bounds),
            outcome_transform=Standardize(1),
            **card.fast_options(bounds, **options),
        )

    previous = build(wide).fit(seed=0)
    model = build(narrow)
    if not hasattr(previous.network, "rebase_inputs"):
        with pytest.raises(InputCoordinatesError, match="normalised its inputs to another box"):
            model.fit(seed=0, warm_start=previous)
        return
    # A negligible learning rate keeps the warm start's weights, re-expressed in the new box.
    model.fit(seed=0, warm_start=previous, epochs=1, learning_rate=1e-12)
    grid = 2 * torch.rand(9, 2, generator=torch.Generator().manual_seed(1), **F64)

    def network_output(fitted, network=None):
        with torch.no_grad():
            output = (network or fitted.network).eval()(fitted.transform_inputs(grid))
        return output if isinstance(output, torch.Tensor) else output.mean

    torch.testing.assert_close(network_output(model), network_output(previous))
    # Without the re-expression, the same weights in the new box are another function.
    moved = network_output(model, previous.network)
    assert not torch.allclose(moved, network_output(previous), rtol=0.1, atol=0)


def test_an_affine_rebase_maps_the_new_coordinates_to_the_old_ones() -> None:
    old, new = Normalize(2, bounds=BOUNDS), Normalize(2, bounds=BOUNDS / 2 + 0.5)
    scale, shift = affine_rebase(old, new)
    X = 2 * torch.rand(5, 2, generator=torch.Generator().manual_seed(0), **F64)
    torch.testing.assert_close(old(X), shift + scale * new(X))
    assert affine_rebase(old, Normalize(2, bounds=BOUNDS.clone())) is None
    assert affine_rebase(old, Warp(2, indices=[0, 1], bounds=BOUNDS)) is None
    batched = Normalize(2, bounds=BOUNDS.expand(3, 2, 2), batch_shape=torch.Size([3]))
    with pytest.raises(InputCoordinatesError, match="batched affine input transform"):
        affine_rebase(old, batched)


def test_nomu_refuses_to_learn_a_transform_for_a_pre_trained_mean() -> None:
    X, Y = _data()
    mean = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 1)).double()
    with pytest.raises(UnsupportedError, match="pre-trained mean_network"):
        NOMU(X, Y, input_transform=_warp(), mean_network=mean)
    NOMU(X, Y, input_transform=_warp().requires_grad_(False), mean_network=mean)
