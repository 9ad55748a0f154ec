"""Runs every model of the package (every model card but the GP baseline's) through the
conformance kit."""

import pytest

from tests.cards import NEURAL_CARDS
from tests.models.conformance import ConformanceEntry, ConformanceKit

MODEL_ENTRIES = [
    *(ConformanceEntry.from_card(card) for card in NEURAL_CARDS),
    # A deep ensemble of mean-only members (homoscedastic noise from the residuals).
    ConformanceEntry.from_card(
        next(card for card in NEURAL_CARDS if card.name == "deep-ensemble"),
        name="deep-ensemble-mse",
        likelihood="mse",
    ),
]


@pytest.fixture(params=MODEL_ENTRIES, ids=lambda entry: entry.name)
def entry(request: pytest.FixtureRequest) -> ConformanceEntry:
    return request.param


class TestConformance(ConformanceKit):
    pass
