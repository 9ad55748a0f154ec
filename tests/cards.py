"""The test suite's view of the model catalogue (:data:`botorch_nn_uq.models.MODEL_CARDS`):
every list of models in the tests is derived from the cards, so a new card is tested
everywhere without editing a list (``tests/test_cards.py`` checks that every list covers
every card)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from botorch_nn_uq.models import MODEL_CARDS, ModelCard, NeuralSurrogateModel
from botorch_nn_uq.models.card import Family

#: The cards of the package's own (neural) models: every card but BoTorch's GP baseline.
NEURAL_CARDS: tuple[ModelCard, ...] = tuple(
    card for card in MODEL_CARDS if issubclass(card.model_class, NeuralSurrogateModel)
)

#: Every card by its name (the registry key).
CARDS: dict[str, ModelCard] = {card.name: card for card in MODEL_CARDS}

#: The searched ensembles' smallest searches (checks of plumbing, not of fits).
SMALLEST_SEARCHES = {"pool_size": 3, "ensemble_size": 2, "num_candidates": 3, "num_folds": 2}


def families(
    cards: Iterable[ModelCard] = MODEL_CARDS,
) -> dict[str, tuple[Family, list[ModelCard]]]:
    r"""The cards grouped by family: family key -> (family, its cards), the families in
    the order of their first card."""
    grouped: dict[str, tuple[Family, list[ModelCard]]] = {}
    for card in cards:
        grouped.setdefault(card.family.key, (card.family, []))[1].append(card)
    return grouped


def representatives(cards: Iterable[ModelCard] = MODEL_CARDS) -> dict[str, ModelCard]:
    r"""Family key -> the family's first card, which stands for the family where a test
    runs once per family (the feature table's cells, say)."""
    return {key: family_cards[0] for key, (_, family_cards) in families(cards).items()}


#: The first card of each neural family.
NEURAL_REPRESENTATIVES: tuple[ModelCard, ...] = tuple(
    card for card in representatives().values() if card in NEURAL_CARDS
)


def smallest(hyperparameters: Mapping[str, Any], epochs: int) -> dict[str, Any]:
    r"""``hyperparameters`` (a card's fast settings) shrunk for checks of plumbing, not of
    fit quality: ``epochs`` epochs and, for a searched ensemble, the smallest search
    (:data:`SMALLEST_SEARCHES`, for the settings it has)."""
    shrunk = {key: value for key, value in SMALLEST_SEARCHES.items() if key in hyperparameters}
    return {**hyperparameters, "epochs": epochs, **shrunk}


def fast_settings(name: str, *, without: Iterable[str] = (), **overrides: Any) -> dict[str, Any]:
    r"""The fast hyperparameters of the card ``name`` (:attr:`ModelCard.fast`), which a
    test's own settings start from: ``overrides`` replace or add hyperparameters, and the
    ones named in ``without`` are left to the test's calls (or the class defaults)."""
    hyperparameters = CARDS[name].fast.hyperparameters
    dropped = set(without)
    return {
        **{key: value for key, value in hyperparameters.items() if key not in dropped},
        **overrides,
    }
