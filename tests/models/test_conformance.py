"""Runs every model of the package through the conformance kit."""

import pytest

from botorch_nn_uq.models import NOMU, DeepEnsemble, HyperDeepEnsemble, MCDropout
from tests.models.conformance import ConformanceEntry, ConformanceKit

MODEL_ENTRIES = [
    ConformanceEntry(
        name="deep-ensemble",
        model_class=DeepEnsemble,
        hyperparameters={"hidden_widths": (32, 32), "epochs": 150},
    ),
    ConformanceEntry(
        name="deep-ensemble-mse",
        model_class=DeepEnsemble,
        hyperparameters={"hidden_widths": (32, 32), "epochs": 150, "likelihood": "mse"},
    ),
    ConformanceEntry(
        name="mc-dropout",
        model_class=MCDropout,
        hyperparameters={"hidden_widths": (32, 32), "epochs": 150, "num_masks": 16},
    ),
    ConformanceEntry(
        name="hyper-deep-ensemble",
        model_class=HyperDeepEnsemble,
        hyperparameters={
            "hidden_widths": (32, 32),
            "epochs": 150,
            "num_candidates": 4,
            "ensemble_size": 3,
            "num_folds": 3,
            # Keeps the searched learning rates where 150 epochs fit the toy data.
            "learning_rate_range": (5e-3, 2e-2),
            "dropout_range": (1e-3, 0.1),
        },
    ),
    ConformanceEntry(
        name="nomu",
        model_class=NOMU,
        hyperparameters={
            "mean_widths": (32, 32),
            "uncertainty_widths": (16,),
            "epochs": 150,
            "num_artificial_points": 64,
        },
        # The noiseless NOMU has no noise model: observation_noise=True adds nothing.
        has_observation_noise_model=False,
        extra_kwargs=lambda bounds: {"bounds": bounds},
    ),
]


@pytest.fixture(params=MODEL_ENTRIES, ids=lambda entry: entry.name)
def entry(request: pytest.FixtureRequest) -> ConformanceEntry:
    return request.param


class TestConformance(ConformanceKit):
    pass
