"""The registry of surrogates: one entry per model card, fitted as its BO defaults say,
with the published defaults pinned."""

import importlib

import pytest
import torch
from botorch.models.model import Model

from botorch_nn_uq.bo.acquisitions import (
    ACQUISITIONS,
    PACKAGE_ACQUISITIONS,
)
from botorch_nn_uq.bo.surrogates import (
    PACKAGE_SURROGATES,
    SURROGATES,
    SurrogateSpec,
    get_surrogate,
    register_surrogate,
    surrogate_from_card,
)
from botorch_nn_uq.models import MODEL_CARDS, NOMU, DeepEnsemble, ModelCard
from botorch_nn_uq.models.card import BODefaults, FastSettings
from tests.testing import allow_single_member_warning, quadratic_bo_data


@allow_single_member_warning
@pytest.mark.parametrize("name", sorted(PACKAGE_SURROGATES))
def test_every_surrogate_builds_a_fitted_model(name: str) -> None:
    train_X, train_Y, bounds = quadratic_bo_data()
    model = get_surrogate(name).build(train_X, train_Y, bounds, 0)
    assert isinstance(model, Model)
    posterior = model.posterior(train_X.unsqueeze(1))
    # Predictions are in original units and track the data.
    assert (posterior.mean.squeeze() - train_Y.squeeze()).abs().mean() < train_Y.std()


def test_names_are_registered_once() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_surrogate(SurrogateSpec("gp", "duplicate", SURROGATES["gp"].build))
    with pytest.raises(ValueError, match="already registered"):
        register_surrogate(SurrogateSpec("random", "reserved", SURROGATES["gp"].build))


@pytest.mark.parametrize(
    ("name", "model_class", "architecture"),
    [
        # The registry's deep ensemble has ReLU members of 2 x 64 units, the class
        # SmeLU members of 2 x 32; the registry's MC dropout ReLU units, the class SmeLU.
        ("deep-ensemble", "DeepEnsemble", {"hidden_widths": (64, 64), "activation": "relu"}),
        ("mc-dropout", "MCDropout", {"activation": "relu"}),
    ],
)
def test_step_budgets_leave_small_data_fits_exactly_as_full_batch_epochs(
    name, model_class, architecture
):
    from botorch.models.transforms import Normalize, Standardize

    import botorch_nn_uq.models as models

    train_X, train_Y, bounds = quadratic_bo_data()
    registered = get_surrogate(name).build(train_X, train_Y, bounds, 3)
    plain = getattr(models, model_class)(
        train_X,
        train_Y,
        input_transform=Normalize(2, bounds=bounds),
        outcome_transform=Standardize(1),
        **architecture,
    ).fit(seed=3)
    assert registered.hyperparameters.batch_size == 256
    assert registered.training_result.steps_run == plain.training_result.steps_run == 500
    test_X = torch.rand(7, 1, 2, dtype=torch.float64)
    torch.testing.assert_close(
        registered.posterior(test_X).mean, plain.posterior(test_X).mean, rtol=0, atol=0
    )


@allow_single_member_warning
@pytest.mark.parametrize(
    ("name", "options", "full_batch"),
    [
        ("hyper-deep-ensemble", {"num_candidates": 3, "ensemble_size": 2}, {"batch_size": None}),
        ("nes-rs", {"pool_size": 3, "ensemble_size": 2}, {}),
        ("autodeuq", {"pool_size": 3, "ensemble_size": 2}, {}),
    ],
)
def test_searches_with_step_budgets_are_unchanged_on_small_data(name, options, full_batch):
    from dataclasses import fields

    generator = torch.Generator().manual_seed(1)
    # 80 points: the most for which the registered budgets equal the registered epochs.
    train_X = torch.rand(80, 2, generator=generator, dtype=torch.float64)
    train_Y = (3 * train_X).sin().sum(-1, keepdim=True)
    bounds = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
    registered = get_surrogate(name).build(train_X, train_Y, bounds, 3, **options)
    hyperparameters = registered.hyperparameters
    assert hyperparameters.max_steps is not None
    without_budget = {
        field.name: getattr(hyperparameters, field.name) for field in fields(hyperparameters)
    }
    without_budget.update(max_steps=None, **full_batch)
    plain = type(registered)(
        train_X,
        train_Y,
        input_transform=registered.input_transform,
        outcome_transform=type(registered.outcome_transform)(1),
        **without_budget,
    ).fit(seed=3)
    test_X = torch.rand(7, 1, 2, dtype=torch.float64)
    torch.testing.assert_close(
        registered.posterior(test_X).mean, plain.posterior(test_X).mean, rtol=0, atol=0
    )


def test_the_package_registers_one_surrogate_per_model_card_in_their_order() -> None:
    names = [card.name for card in MODEL_CARDS]
    assert list(PACKAGE_SURROGATES) == names
    assert [name for name in SURROGATES if name in names] == names
    for card in MODEL_CARDS:
        spec = SURROGATES[card.name]
        assert spec.description == card.description
        assert spec.supports_warm_start == card.bo.supports_warm_start
        assert spec.build.__module__ == "botorch_nn_uq.bo.surrogates"


#: The BO defaults behind the published benchmark results (benchmarks/docs/): the
#: constructor options, the fit options, warm starts and the after-fit hook of every card
#: that was registered then. A card's BO defaults change only with its results.
PUBLISHED_BO_DEFAULTS = {
    "gp": ({}, {}, False, None),
    # The activation of the published runs, named since the class's default may change.
    # Every function bank's published runs drew one function of the bank per MC sample,
    # named since the classes sample continuously by default.
    "mc-dropout": (
        {"activation": "relu", "max_steps": 500, "batch_size": 256, "joint_samples": "functions"},
        {},
        True,
        None,
    ),
    # In single precision since the precision study (benchmarks/docs/protocol-6-scale.md,
    # "Training precision"), which reran the protocols' rows that it names; the width and
    # the activation are those of the published runs, named since the class's changed.
    "deep-ensemble": (
        {
            "hidden_widths": (64, 64),
            "activation": "relu",
            "max_steps": 500,
            "batch_size": 256,
            "training_dtype": torch.float32,
            "joint_samples": "functions",
        },
        {},
        True,
        None,
    ),
    "hyper-deep-ensemble": (
        {
            "num_folds": 3,
            "epochs": 300,
            "max_steps": 300,
            "training_dtype": torch.float32,
            "batch_size": 256,
            "joint_samples": "functions",
        },
        {},
        False,
        None,
    ),
    "nes-rs": ({"max_steps": 600, "joint_samples": "functions"}, {}, False, None),
    "nes-re": ({"max_steps": 600, "joint_samples": "functions"}, {}, False, None),
    "autodeuq": ({"max_steps": 1200, "joint_samples": "functions"}, {}, False, None),
    "neon": ({"max_steps": 2000, "batch_size": 256, "joint_samples": "functions"}, {}, True, None),
    "nomu": ({}, {"max_steps": 1024, "batch_size": 256}, True, "_narrow_mean_width"),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_BO_DEFAULTS))
def test_published_bo_defaults_are_unchanged(name: str) -> None:
    card = next(card for card in MODEL_CARDS if card.name == name)
    options, fit_options, warm_start, after_fit = PUBLISHED_BO_DEFAULTS[name]
    bounds = torch.zeros(2, 2, dtype=torch.float64)
    box = {"bounds": bounds} if name == "nomu" else {}
    assert card.constructor_options(bounds) == {**options, **box}
    assert dict(card.bo.fit_options) == fit_options
    assert card.bo.supports_warm_start == warm_start
    assert getattr(card.bo.after_fit, "__name__", None) == after_fit


def test_a_new_card_is_registered_as_its_bo_defaults_say() -> None:
    r"""A toy card (a NOMU variant with a BO default of its own) builds, fits, calls its
    after-fit hook and restores through the spec derived from it."""
    calls = []
    nomu = next(card for card in MODEL_CARDS if card.model_class is NOMU)
    toy = ModelCard(
        name="toy-nomu",
        description="a toy NOMU",
        model_class=NOMU,
        family=nomu.family,
        summary="a toy",
        posterior="Gaussian",
        bo=BODefaults(
            constructor_options={"mean_widths": (8,), "uncertainty_widths": (8,), "epochs": 7},
            fit_options={"epochs": 5},
            supports_warm_start=True,
            after_fit=lambda model, train_Y: calls.append(train_Y.shape),
        ),
        fast=FastSettings({"epochs": 3}),
        takes_bounds=True,
    )
    spec = surrogate_from_card(toy)
    assert (spec.name, spec.description, spec.supports_warm_start) == (
        "toy-nomu",
        "a toy NOMU",
        True,
    )
    train_X, train_Y, bounds = quadratic_bo_data()
    model = spec.build(train_X, train_Y, bounds, 0)
    assert isinstance(model, NOMU) and model.is_fitted and calls == [train_Y.shape]
    assert model.hyperparameters.epochs == 5 and model.hyperparameters.mean_widths == (8,)
    assert torch.equal(model.bounds, bounds)
    restored = spec.restore(train_X, train_Y, bounds, model.state_dict())
    X = torch.rand(3, 1, 2, dtype=torch.float64)
    torch.testing.assert_close(restored.posterior(X).mean, model.posterior(X).mean)
    assert "toy-nomu" not in SURROGATES


def test_a_toy_card_is_checked() -> None:
    family = next(card.family for card in MODEL_CARDS if card.model_class is DeepEnsemble)
    with pytest.raises(ValueError, match="lower-case words"):
        ModelCard("Toy Model", "a toy", DeepEnsemble, family, "a toy", "none")
    with pytest.raises(ValueError, match="one line"):
        ModelCard("toy", "a\ntoy", DeepEnsemble, family, "a toy", "none")


def test_entries_registered_outside_the_package_are_not_the_packages() -> None:
    # A benchmark's peer registers its own entries on import; the package's lists, which
    # the tests above and the user guide's table cover, stay what the package registers.
    importlib.import_module("benchmarks.vbll_peer")
    assert {"vbll"} <= set(SURROGATES) and "vbll" not in PACKAGE_SURROGATES
    assert {"vbll-ts"} <= set(ACQUISITIONS) and "vbll-ts" not in PACKAGE_ACQUISITIONS
    assert all(
        SURROGATES[name].build.__module__.startswith("botorch_nn_uq") for name in PACKAGE_SURROGATES
    )
