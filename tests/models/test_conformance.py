"""Runs every model of the package through the conformance kit."""

import pytest

from botorch_nn_uq.models import MCDropout
from tests.models.conformance import ConformanceEntry, ConformanceKit

MODEL_ENTRIES = [
    ConformanceEntry(
        name="mc-dropout",
        model_class=MCDropout,
        hyperparameters={"hidden_widths": (32, 32), "epochs": 150, "num_masks": 16},
    ),
]


@pytest.fixture(params=MODEL_ENTRIES, ids=lambda entry: entry.name)
def entry(request: pytest.FixtureRequest) -> ConformanceEntry:
    return request.param


class TestConformance(ConformanceKit):
    pass
