"""Every model checks what it is given, before any work, with errors that name it."""

import math

import pytest
import torch

from botorch_nn_uq.ensembles import hyper_deep as hyper_deep_module
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
from tests.cards import NEURAL_CARDS, fast_settings, smallest
from tests.testing import allow_single_member_warning

# Bad values by kind of field: each must fail at construction, naming the field.
POSITIVE_INTEGER = (None, True, 2.5, 3.0, math.nan, math.inf, "x", 0, -1)
AT_LEAST_TWO = (*POSITIVE_INTEGER, 1)
OPTIONAL_POSITIVE_INTEGER = (True, 2.5, math.nan, "x", 0, -1)
OPTIONAL_AT_LEAST_TWO = (*OPTIONAL_POSITIVE_INTEGER, 1)
POSITIVE = (None, True, math.nan, math.inf, -math.inf, "x", 0.0, -1.0)
OPTIONAL_POSITIVE = (True, math.nan, math.inf, "x", 0.0, -1.0)
NON_NEGATIVE = (None, True, math.nan, math.inf, "x", -1.0)
OPTIONAL_NON_NEGATIVE = (True, math.nan, math.inf, "x", -1.0)
OPEN_FRACTION = (None, True, math.nan, math.inf, "x", 0.0, 1.0, -0.5)
OPTIONAL_OPEN_FRACTION = (True, math.nan, "x", 0.0, 1.0)
BOOLEAN = (None, 1, 0, "x", "False")
CHOICE = (None, True, 1, "x")
WIDTHS = (None, (), (0,), (2.5,), (True,), "x", 4)
POSITIVE_RANGE = (None, (1e-3,), (math.nan, 1e-2), (1e-3, math.inf), (1e-2, 1e-3), (0.0, 1.0), "x")

TRAINING = {
    "epochs": POSITIVE_INTEGER,
    "max_steps": OPTIONAL_POSITIVE_INTEGER,
    "learning_rate": POSITIVE,
    "batch_size": OPTIONAL_POSITIVE_INTEGER,
}
SEARCHED = {
    "ensemble_size": AT_LEAST_TWO,
    "pool_size": POSITIVE_INTEGER,
    "epochs": POSITIVE_INTEGER,
    "max_steps": OPTIONAL_POSITIVE_INTEGER,
    "validation_fraction": OPEN_FRACTION,
    "likelihood": CHOICE,
    "min_std": POSITIVE,
    "l2_regularization": NON_NEGATIVE,
    "lr_reduction_factor": OPEN_FRACTION,
    "noise_variance": OPTIONAL_POSITIVE,
    "architecture_space": (None, "x", {"num_nodes": 3}),
    "executor": ("x", 3),
    "checkpoint_path": (3, True),
}
NES = {
    **SEARCHED,
    "learning_rate": POSITIVE,
    "batch_size": POSITIVE_INTEGER,
    "optimizer": CHOICE,
    "lr_reduction_patience": POSITIVE_INTEGER,
    "early_stopping_patience": POSITIVE_INTEGER,
    "population_size": POSITIVE_INTEGER,
    "num_parents": POSITIVE_INTEGER,
    "children_per_generation": POSITIVE_INTEGER,
    "validation_shift_severity": (None, True, 2.5, "x", -1, 6),
    "evolve_on_plain_validation": BOOLEAN,
}
DEEP_ENSEMBLE = {
    **TRAINING,
    "ensemble_size": AT_LEAST_TWO,
    "hidden_widths": WIDTHS,
    "activation": CHOICE,
    "likelihood": CHOICE,
    "min_std": POSITIVE,
    "optimizer": CHOICE,
    "l2_regularization": NON_NEGATIVE,
    "dropout": (None, True, math.nan, "x", 1.0, -0.1),
    "early_stopping_patience": OPTIONAL_POSITIVE_INTEGER,
    "gradient_clip_norm": OPTIONAL_POSITIVE,
    "bootstrap": BOOLEAN,
    "subset_fraction": (True, math.nan, "x", 0.0, 1.5),
    "validation_fraction": OPTIONAL_OPEN_FRACTION,
    "noise_variance": OPTIONAL_POSITIVE,
}
#: Deep-ensemble fields that a hyper-deep ensemble has not: its search draws L2, dropout
#: and learning rate, and it scores candidates on held-out rows, not on resamples.
SEARCHED_BY_HYPER_DEEP_ENSEMBLE = (
    "learning_rate",
    "l2_regularization",
    "dropout",
    "bootstrap",
    "subset_fraction",
)
HYPERPARAMETER_TABLE = {
    DeepEnsemble: DEEP_ENSEMBLE,
    HyperDeepEnsemble: {
        **{
            name: values
            for name, values in DEEP_ENSEMBLE.items()
            if name not in SEARCHED_BY_HYPER_DEEP_ENSEMBLE
        },
        "num_candidates": POSITIVE_INTEGER,
        "l2_range": POSITIVE_RANGE,
        "dropout_range": (*POSITIVE_RANGE, (0.1, 1.0)),
        "learning_rate_range": POSITIVE_RANGE,
        "validation": CHOICE,
        "num_folds": AT_LEAST_TWO,
        "validation_fraction": OPEN_FRACTION,
        "max_selection_iterations": OPTIONAL_AT_LEAST_TWO,
        "training_dtype": ("float32", torch.int64, torch.float16, torch.bfloat16),
    },
    MCDropout: {
        **TRAINING,
        "hidden_widths": WIDTHS,
        "activation": CHOICE,
        "dropout": OPEN_FRACTION,
        "num_masks": AT_LEAST_TWO,
        "weight_decay": NON_NEGATIVE,
        "early_stopping_patience": OPTIONAL_POSITIVE_INTEGER,
        "noise_variance": OPTIONAL_POSITIVE,
    },
    NEON: {
        **TRAINING,
        "encoder_widths": WIDTHS,
        "latent_dim": POSITIVE_INTEGER,
        "decoder_depth": POSITIVE_INTEGER,
        "decoder_width": POSITIVE_INTEGER,
        "fourier_scale": OPTIONAL_POSITIVE,
        "activation": CHOICE,
        "epinet_widths": WIDTHS,
        "index_dim": POSITIVE_INTEGER,
        "prior_widths": WIDTHS,
        "prior_scale": NON_NEGATIVE,
        "output_activation": CHOICE,
        "num_epistemic_samples": AT_LEAST_TWO,
        "num_training_indices": POSITIVE_INTEGER,
        "loss": CHOICE,
        "lr_decay_rate": (True, math.nan, "x", 0.0, 1.5),
        "lr_decay_steps": POSITIVE_INTEGER,
        "gradient_clip_norm": OPTIONAL_POSITIVE,
        "evaluation_chunk_rows": POSITIVE_INTEGER,
        "noise_variance": OPTIONAL_POSITIVE,
    },
    NOMU: {
        **TRAINING,
        "mean_widths": WIDTHS,
        "uncertainty_widths": WIDTHS,
        "activation": CHOICE,
        "detach_mean_features": BOOLEAN,
        "connected_mean_layers": (None, (), (0.0,), (True,), "x", -1),
        "init_scale": OPTIONAL_POSITIVE,
        "pi_sqr": NON_NEGATIVE,
        "pi_exp": NON_NEGATIVE,
        "c_exp": POSITIVE,
        "l2_regularization": NON_NEGATIVE,
        "uncertainty_l2_regularization": OPTIONAL_NON_NEGATIVE,
        "min_uncertainty": NON_NEGATIVE,
        "max_uncertainty": POSITIVE,
        "readout": CHOICE,
        "num_artificial_points": POSITIVE_INTEGER,
        "box_enlargement": NON_NEGATIVE,
        "stable_loss": BOOLEAN,
        "learn_noise": BOOLEAN,
        "min_noise_std": POSITIVE,
    },
    NESRandomSearch: NES,
    NESRegularizedEvolution: NES,
    AutoDEUQ: {
        **SEARCHED,
        "hyperparameter_space": (None, "x", {"batch_size": (16, 32)}),
        "population_size": POSITIVE_INTEGER,
        "tournament_size": POSITIVE_INTEGER,
        "generation_size": POSITIVE_INTEGER,
        "num_initial_random": POSITIVE_INTEGER,
        "kappa": NON_NEGATIVE,
        "num_acquisition_candidates": POSITIVE_INTEGER,
        "max_selection_iterations": OPTIONAL_AT_LEAST_TWO,
    },
}

BAD_HYPERPARAMETERS = [
    pytest.param(model_class, field, value, id=f"{model_class.__name__}-{field}-{value!r}")
    for model_class, fields in HYPERPARAMETER_TABLE.items()
    for field, values in fields.items()
    for value in values
]

#: Settings under which these models fit in a fraction of a second (the checks of one
#: model below): their cards' fast settings for 3 epochs, with the smallest search and, for
#: the deep ensemble, the two members that test_member_weights_must_be_finite weighs.
TINY = {
    DeepEnsemble: smallest(fast_settings("deep-ensemble", ensemble_size=2), epochs=3),
    HyperDeepEnsemble: smallest(fast_settings("hyper-deep-ensemble"), epochs=3),
    MCDropout: smallest(fast_settings("mc-dropout"), epochs=3),
}


def _data(dtype: torch.dtype = torch.float64):
    X = torch.rand(20, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    return X.to(dtype), X.sin().sum(-1, keepdim=True).to(dtype)


@pytest.mark.parametrize(("model_class", "field", "value"), BAD_HYPERPARAMETERS)
def test_a_bad_hyperparameter_fails_at_construction_naming_the_field(model_class, field, value):
    X, Y = _data()
    with pytest.raises((ValueError, TypeError), match=field):
        model_class(X, Y, **{field: value})


@pytest.mark.parametrize(
    ("model_class", "values", "message"),
    [
        (NOMU, {"min_uncertainty": 2.0, "max_uncertainty": 1.0}, "min_uncertainty .* smaller"),
        (NOMU, {"min_uncertainty": 1.0, "max_uncertainty": 1.0}, "min_uncertainty .* smaller"),
        (DeepEnsemble, {"bootstrap": True, "subset_fraction": 0.5}, "either bootstrap"),
    ],
)
def test_inconsistent_hyperparameters_are_rejected(model_class, values, message):
    X, Y = _data()
    with pytest.raises(ValueError, match=message):
        model_class(X, Y, **values)


@pytest.mark.parametrize("card", NEURAL_CARDS, ids=lambda card: card.name)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int64])
def test_training_data_must_be_float32_or_float64(card, dtype):
    model_class = card.model_class
    X, Y = _data(dtype)
    with pytest.raises(TypeError, match=f"train_X .*float32 or torch.float64; got dtype {dtype}"):
        model_class(X, Y)


@allow_single_member_warning
@pytest.mark.parametrize("card", NEURAL_CARDS, ids=lambda card: card.name)
def test_posterior_arguments_are_checked(card):
    X, Y = _data()
    options = smallest(card.fast.hyperparameters, epochs=3)
    model = card.model_class(X, Y, **options).fit(seed=0)
    for dtype in (torch.float16, torch.bfloat16):
        with pytest.raises(TypeError, match=f"X must be .*float64; got dtype {dtype}"):
            model.posterior(X[:3].to(dtype))
    for noise in (math.nan, math.inf):
        with pytest.raises(ValueError, match="observation_noise must be finite"):
            model.posterior(X[:3], observation_noise=torch.full((3, 1), noise, dtype=X.dtype))
    with pytest.raises(ValueError, match="observation_noise must be True, False or a tensor"):
        model.posterior(X[:3], observation_noise=0.1)
    for indices in ([0.0], [True], "0", [0, None]):
        with pytest.raises(ValueError, match="output_indices"):
            model.posterior(X[:3], output_indices=indices)


def test_a_seed_beyond_what_torch_accepts_is_rejected_before_training():
    X, Y = _data()
    model = MCDropout(X, Y, **TINY[MCDropout])
    with pytest.raises(ValueError, match=r"seed must be an integer in \[0, 2\*\*64\)"):
        model.fit(seed=2**64)
    assert not model.is_fitted
    assert model.fit(seed=2**64 - 1).fit_seed == 2**64 - 1


def test_neon_output_grid_and_channels_are_checked():
    X, Y = _data()
    with pytest.raises(ValueError, match="num_channels must be a positive integer"):
        NEON(X, Y, num_channels=1.0)
    with pytest.raises(ValueError, match="output_grid must be a floating-point tensor"):
        NEON(X, Y, output_grid=[[0.0]])


def test_nomu_rejects_an_infinite_calibration_constant():
    X, Y = _data()
    with pytest.raises(ValueError, match="calibration_constant must be finite"):
        NOMU(X, Y, calibration_constant=math.inf)


def test_a_hyper_deep_ensemble_of_one_selected_member_warns(monkeypatch):
    select = hyper_deep_module.caruana_select

    def select_one(log_likelihoods, ensemble_size, max_iterations=None):
        return select(log_likelihoods, ensemble_size, 1)

    monkeypatch.setattr(hyper_deep_module, "caruana_select", select_one)
    X, Y = _data()
    with pytest.warns(UserWarning, match="kept a single member.*zero variance"):
        model = HyperDeepEnsemble(X, Y, **TINY[HyperDeepEnsemble]).fit(seed=0)
    assert model.network.num_members == 1


def test_member_weights_must_be_finite():
    X, Y = _data()
    model = DeepEnsemble(X, Y, **TINY[DeepEnsemble]).fit(seed=0)
    for weights in ([1.0, math.inf], [1.0, math.nan]):
        with pytest.raises(ValueError, match="member weights must be a finite non-negative"):
            model.set_member_weights(torch.tensor(weights, dtype=X.dtype))
