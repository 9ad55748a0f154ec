"""Smoke run of the drop-in cost benchmark (benchmarks/drop_in_cost.py): BoTorch's GP and
the package's deep ensemble, fitted and optimised the way a BoTorch user does."""

import json

import pytest
import torch
from botorch.models import SingleTaskGP
from botorch.models.transforms import Normalize, Standardize

from benchmarks import drop_in_cost
from botorch_nn_uq.models import (
    DeepEnsemble,
    DeepEnsembleHyperparameters,
    MCDropout,
    MCDropoutHyperparameters,
)


def test_smoke_run_times_both_models_side_by_side_with_their_first_calls(tmp_path) -> None:
    text = drop_in_cost.main(["--smoke", "--out", str(tmp_path)]).read_text()
    assert "epochs = 5" in text and "medians of 1 repeat × 1 seed" in text
    data = json.loads((tmp_path / "drop_in_cost.json").read_text())
    assert (data["dim"], data["seeds"], data["ensemble_options"]) == (2, [0], {"epochs": 5})
    (row,) = data["rows"]
    assert row["n"] == 20
    for model in ("gp", "ensemble"):
        for call in ("fit", "logei", "first_fit", "first_logei"):
            assert row[f"{model}_{call}"] > 0
        assert row["samples"][f"{model}_fit"] == [row[f"{model}_fit"]]
        # The raw samples take one call, every L-BFGS-B iteration at least one more.
        assert row[f"{model}_evaluations"] >= 2
        assert isinstance(row["samples"][f"{model}_evaluations"][0], int)
    assert row["fit_ratio"] == pytest.approx(row["ensemble_fit"] / row["gp_fit"])
    assert row["logei_ratio"] == pytest.approx(row["ensemble_logei"] / row["gp_logei"])

    # The first row of n = 20 is the steady-state table's; the first-call table follows.
    steady = next(line for line in text.splitlines() if line.startswith("| 20 | "))
    cells = [cell.strip() for cell in steady.strip("|").split("|")]
    assert cells[1:4] == [
        f"{row['gp_fit']:.2f}",
        f"{row['ensemble_fit']:.2f}",
        f"{row['fit_ratio']:.2f}",
    ]
    assert cells[7:9] == [f"{row['gp_evaluations']:g}", f"{row['ensemble_evaluations']:g}"]
    first = row["ensemble_first_fit"] + row["ensemble_first_logei"]
    assert cells[-1] == f"{first:.2f}"
    assert "| 20 | GP |" in text and "| 20 | ensemble |" in text
    header = (tmp_path / "drop_in_cost.csv").read_text().splitlines()[0].split(",")
    assert header[:3] == ["n", "gp_fit", "gp_logei"] and "samples" not in header


def test_the_models_are_those_a_botorch_user_builds() -> None:
    X, Y, bounds = drop_in_cost.problem_data(12, 3, seed=0)
    assert X.shape == (12, 3) and Y.shape == (12, 1)
    assert ((bounds[0] <= X) & (X <= bounds[1])).all()
    gp = drop_in_cost.fit("gp", X, Y, seed=0, ensemble_options={})
    ensemble = drop_in_cost.fit("ensemble", X, Y, seed=0, ensemble_options={"epochs": 2})
    assert isinstance(gp, SingleTaskGP) and isinstance(ensemble, DeepEnsemble)
    for model in (gp, ensemble):
        assert isinstance(model.input_transform, Normalize)
        assert isinstance(model.outcome_transform, Standardize)
    # Every hyperparameter but the epochs asked for is the default.
    assert ensemble.hyperparameters == DeepEnsembleHyperparameters(epochs=2)
    candidate, evaluations = drop_in_cost.propose_log_ei(ensemble, Y, bounds, seed=0)
    assert evaluations >= 2
    assert candidate.shape == (1, 3) and ((bounds[0] <= candidate) & (candidate <= bounds[1])).all()


def test_too_few_points_are_rejected(capsys) -> None:
    with pytest.raises(SystemExit):
        drop_in_cost.main(["--points", "1"])
    assert "must be at least 2" in capsys.readouterr().err


def test_the_options_change_the_ensembles_hyperparameters() -> None:
    args = drop_in_cost.parse_args(
        ["--ensemble-widths", "64", "64", "--ensemble-training-dtype", "float64"]
        + ["--ensemble-activation", "swish"]
    )
    assert drop_in_cost.ensemble_options(args) == {
        "hidden_widths": (64, 64),
        "training_dtype": torch.float64,
        "activation": "swish",
    }
    assert drop_in_cost.ensemble_options(drop_in_cost.parse_args([])) == {}


def test_an_unknown_activation_is_rejected(capsys) -> None:
    with pytest.raises(SystemExit):
        drop_in_cost.parse_args(["--ensemble-activation", "no-such-activation"])
    assert "Unknown activation 'no-such-activation'" in capsys.readouterr().err


def test_mc_dropout_takes_the_ensembles_place(tmp_path) -> None:
    args = drop_in_cost.parse_args(
        ["--neural-model", "mc-dropout", "--ensemble-activation", "smelu"]
    )
    options = drop_in_cost.ensemble_options(args)
    assert options == {"model": "mc-dropout", "activation": "smelu"}
    X, Y, _ = drop_in_cost.problem_data(12, 3, seed=0)
    model = drop_in_cost.fit("ensemble", X, Y, seed=0, ensemble_options={**options, "epochs": 2})
    assert isinstance(model, MCDropout)
    assert model.hyperparameters == MCDropoutHyperparameters(activation="smelu", epochs=2)
    text = drop_in_cost.main(
        ["--smoke", "--neural-model", "mc-dropout", "--out", str(tmp_path)]
    ).read_text()
    assert "MC dropout: `MCDropout` with the same transforms" in text
    assert "| n | GP fit s | MC dropout fit s | MC dropout / GP |" in text
    assert "| 20 | MC dropout |" in text


def test_a_hyperparameter_the_neural_model_does_not_take_is_rejected(capsys) -> None:
    with pytest.raises(SystemExit):
        drop_in_cost.parse_args(
            ["--neural-model", "mc-dropout", "--ensemble-training-dtype", "float64"]
        )
    assert "training_dtype" in capsys.readouterr().err
