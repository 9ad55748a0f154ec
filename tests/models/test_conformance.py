"""Runs every model of the package through the conformance kit."""

import pytest

from botorch_nn_uq.ensembles import ArchitectureSpace, HyperparameterSpace
from botorch_nn_uq.models import (
    NEON,
    NOMU,
    AutoDEUQ,
    DeepEnsemble,
    HyperDeepEnsemble,
    MCDropout,
    NESRandomSearch,
    NESRegularizedEvolution,
)
from tests.models.conformance import ConformanceEntry, ConformanceKit

# Small searches over two-layer networks that fit the conformance data in a few epochs.
SMALL_SEARCH = {
    "epochs": 100,
    "architecture_space": ArchitectureSpace(
        num_nodes=2, units=(16, 32), activations=("tanh", "swish"), allow_empty_nodes=False
    ),
}

# Patience as long as training: the toy data hold out only 5 validation points.
FAST_NES = {"learning_rate": 3e-2, "early_stopping_patience": 100, "lr_reduction_patience": 100}

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
        name="nes-rs",
        model_class=NESRandomSearch,
        hyperparameters={**SMALL_SEARCH, **FAST_NES, "pool_size": 4, "ensemble_size": 3},
    ),
    ConformanceEntry(
        name="nes-re",
        model_class=NESRegularizedEvolution,
        hyperparameters={
            **SMALL_SEARCH,
            **FAST_NES,
            "pool_size": 5,
            "ensemble_size": 3,
            "population_size": 3,
            "num_parents": 2,
        },
    ),
    ConformanceEntry(
        name="autodeuq",
        model_class=AutoDEUQ,
        hyperparameters={
            **SMALL_SEARCH,
            "pool_size": 8,
            "ensemble_size": 3,
            "population_size": 3,
            "num_initial_random": 3,
            "num_acquisition_candidates": 32,
            "hyperparameter_space": HyperparameterSpace(
                learning_rate=(3e-2, 6e-2),
                batch_size=(16, 32),
                optimizers=("adam", "nadam"),
                lr_reduction_patience=(100, 150),
                early_stopping_patience=(100, 150),
            ),
        },
    ),
    ConformanceEntry(
        name="neon",
        model_class=NEON,
        hyperparameters={
            "encoder_widths": (32, 32),
            "latent_dim": 32,
            "epinet_widths": (16,),
            "epochs": 300,
            "learning_rate": 1e-2,
            "lr_decay_rate": None,
            "num_epistemic_samples": 32,
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
