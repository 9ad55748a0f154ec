"""The model cards are the one catalogue: the registry of surrogates, the user guide's tables
and every list of models in the test suite cover every card, and a new card is picked up
by each of them without editing a list."""

from __future__ import annotations

import pytest

from botorch_nn_uq.bo.surrogates import SURROGATES
from botorch_nn_uq.models import MODEL_CARDS, DeepEnsemble, ModelCard
from botorch_nn_uq.models.card import FEATURES, Family, FastSettings, Status, Support, catalogue
from tests import guide_tables
from tests.cards import NEURAL_CARDS, NEURAL_REPRESENTATIVES, families, representatives

NAMES = {card.name for card in MODEL_CARDS}
NEURAL_NAMES = {card.name for card in NEURAL_CARDS}
NEURAL_CLASSES = {card.model_class for card in NEURAL_CARDS}
FAMILY_KEYS = {card.family.key for card in MODEL_CARDS}
NEURAL_FAMILY_NAMES = {card.name for card in NEURAL_REPRESENTATIVES}


def test_the_catalogue_is_in_the_registry_order() -> None:
    assert [card.name for card in MODEL_CARDS] == [
        "gp",
        "mc-dropout",
        "deep-ensemble",
        "hyper-deep-ensemble",
        "nes-rs",
        "nes-re",
        "autodeuq",
        "neon",
        "nomu",
    ]
    assert NAMES <= set(SURROGATES)
    assert NEURAL_NAMES == NAMES - {"gp"}
    assert {card.family.key for card in NEURAL_REPRESENTATIVES} == FAMILY_KEYS - {"gp"}


def test_every_test_list_covers_every_card() -> None:
    from tests import test_features
    from tests.drop_in import setting
    from tests.models import (
        test_checkpoint_safety,
        test_conformance,
        test_construct_inputs,
        test_fantasy,
        test_input_transforms,
        test_properties,
        test_validation,
    )

    # Every card of the package's models.
    assert NEURAL_NAMES <= {entry.name for entry in test_conformance.MODEL_ENTRIES}
    assert NEURAL_NAMES <= {entry.name for entry in test_properties.ENTRIES}
    assert set(test_construct_inputs.MODEL_CLASSES) == NEURAL_CLASSES
    assert set(test_input_transforms.LEARNING) | set(test_input_transforms.REFUSING) == (
        NEURAL_CLASSES
    )
    for test in (
        test_validation.test_training_data_must_be_float32_or_float64,
        test_validation.test_posterior_arguments_are_checked,
    ):
        (mark,) = [mark for mark in test.pytestmark if mark.args[0] == "card"]
        assert {card.name for card in mark.args[1]} == NEURAL_NAMES
    # One card per family.
    assert set(setting.FAMILIES) == FAMILY_KEYS
    assert {family.key for _, family in test_features.CELLS} == FAMILY_KEYS
    assert set(test_checkpoint_safety.FAMILIES) == NEURAL_FAMILY_NAMES
    (mark,) = test_fantasy.test_an_observed_point_is_updated_as_a_gp_would_be.pytestmark
    assert set(mark.args[1]) == {card.model_class for card in NEURAL_REPRESENTATIVES}


def test_every_ax_test_list_covers_every_card() -> None:
    pytest.importorskip("ax")
    from tests.integrations import test_ax

    assert set(test_ax.MODEL_OPTIONS) == NEURAL_CLASSES
    assert set(test_ax.FAMILY_CLASSES) == {card.model_class for card in NEURAL_REPRESENTATIVES}


def _toy_card(family: Family | None = None, name: str = "toy-ensemble") -> ModelCard:
    cells = {feature.key: Support(Status.WORKS) for feature in FEATURES}
    return ModelCard(
        name=name,
        description="a toy ensemble",
        model_class=DeepEnsemble,
        family=family or Family("toy", "Toy ensembles", cells),
        summary="a toy",
        posterior="as `DeepEnsemble`",
        fast=FastSettings({"hidden_widths": (4,), "epochs": 3}),
    )


def test_a_new_card_is_picked_up_by_the_tables_and_the_families() -> None:
    toy = _toy_card()
    cards = catalogue(*MODEL_CARDS, toy)
    assert families(cards)["toy"] == (toy.family, [toy])
    assert representatives(cards)["toy"] is toy
    header = guide_tables.render_feature_table(cards).splitlines()[2]
    assert header.endswith("| Toy ensembles |")
    models = guide_tables.render_models_table(cards).splitlines()
    assert models[-2] == (
        "| `toy-ensemble` | `botorch_nn_uq.models.DeepEnsemble`: a toy | as `DeepEnsemble` |"
    )
    # A card of an existing family joins that family's column.
    deep = next(card for card in MODEL_CARDS if card.name == "deep-ensemble")
    member = _toy_card(deep.family)
    assert families(catalogue(*MODEL_CARDS, member))["ensembles"][1][-1] is member
    assert guide_tables.render_feature_table(
        (*MODEL_CARDS, member)
    ) == guide_tables.render_feature_table(MODEL_CARDS)


def test_the_catalogue_refuses_repeated_names_and_diverging_families() -> None:
    with pytest.raises(ValueError, match="Two model cards are named 'gp'"):
        catalogue(*MODEL_CARDS, _toy_card(name="gp"))
    deep = next(card for card in MODEL_CARDS if card.name == "deep-ensemble")
    cells = {**deep.family.support, "dtypes": Support(Status.APPROXIMATE, "float64 only")}
    diverging = _toy_card(Family(deep.family.key, deep.family.title, cells))
    with pytest.raises(ValueError, match="family 'ensembles' must share its title and cells"):
        catalogue(*MODEL_CARDS, diverging)
