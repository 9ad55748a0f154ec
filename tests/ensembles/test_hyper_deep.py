"""Hyper-deep ensemble search and the HyperDeepEnsemble model."""

import math

import pytest
import torch

from botorch_nn_uq.ensembles.hyper_deep import (
    HyperDeepSearchSpace,
    MemberArchitecture,
    search_hyper_deep_ensemble,
)
from botorch_nn_uq.models import HyperDeepEnsemble, MemberEnsemble
from botorch_nn_uq.posteriors import FunctionEnsemblePosterior, MixtureOfGaussiansPosterior
from botorch_nn_uq.training.config import TrainingConfig
from botorch_nn_uq.training.members import fit_members
from tests.testing import allow_single_member_warning

ARCHITECTURE = MemberArchitecture(
    input_dim=1, output_dim=1, hidden_widths=(16,), activation="tanh", gaussian_head=True,
    min_std=1e-3,
)  # fmt: skip
CONFIG = TrainingConfig(epochs=60, learning_rate=1e-2)


def _data(n: int = 24) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    X = torch.rand(n, 1, generator=generator, dtype=torch.float64)
    Y = (6 * X).sin() + 0.1 * torch.randn(n, 1, generator=generator, dtype=torch.float64)
    return X, (Y - Y.mean()) / Y.std()


def _search(seed: int = 0, **kwargs):
    X, Y = _data()
    return search_hyper_deep_ensemble(
        X,
        Y,
        ARCHITECTURE,
        CONFIG,
        generator=torch.Generator().manual_seed(seed),
        ensemble_size=3,
        num_candidates=6,
        num_folds=3,
        **kwargs,
    )


def test_search_space_samples_log_uniformly_within_the_ranges() -> None:
    space = HyperDeepSearchSpace(l2_regularization=(1e-8, 1e-4), dropout=(0.01, 0.5))
    samples = space.sample(20000, torch.Generator().manual_seed(0))
    for name, (low, high) in [
        ("l2_regularization", space.l2_regularization),
        ("dropout", space.dropout),
        ("learning_rate", space.learning_rate),
    ]:
        values = samples[name]
        assert values.shape == (20000,) and values.min() >= low and values.max() <= high
        # Log-uniform: the mean of the logarithm is the midpoint of the log range.
        midpoint = 0.5 * (math.log(low) + math.log(high))
        assert abs(values.log().mean().item() - midpoint) < 0.02 * (math.log(high / low))


def test_search_space_sampling_depends_on_the_generator_alone() -> None:
    space = HyperDeepSearchSpace()
    first = space.sample(5, torch.Generator().manual_seed(3))
    torch.rand(10)  # the global RNG plays no part
    again = space.sample(5, torch.Generator().manual_seed(3))
    other = space.sample(5, torch.Generator().manual_seed(4))
    assert all(torch.equal(first[name], again[name]) for name in first)
    assert not torch.equal(first["dropout"], other["dropout"])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dropout": (0.1, 1.0)}, "below 1"),
        ({"l2_regularization": (0.0, 1e-3)}, "0 < low <= high"),
        ({"learning_rate": (1e-2, 1e-3)}, "0 < low <= high"),
    ],
)
def test_invalid_search_space(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        HyperDeepSearchSpace(**kwargs)


def test_search_records_both_stages_and_stratifies_the_selected_configurations() -> None:
    search = _search()
    first = [record for record in search.candidates if record.stage == "search"]
    second = [record for record in search.candidates if record.stage == "stratified"]
    assert len(first) == 6
    selected = [record for record in first if record.selection_weight > 0]
    assert 1 <= len(selected) <= 3
    assert math.isclose(sum(r.selection_weight for r in first), 1.0)
    # Every selected configuration comes back with ensemble_size new seeds.
    assert len(second) == 3 * len(selected)
    configurations = {(r.l2_regularization, r.dropout, r.learning_rate) for r in selected}
    assert {(r.l2_regularization, r.dropout, r.learning_rate) for r in second} == configurations
    assert len({r.seed for r in second}) == len(second)
    assert all(math.isfinite(r.validation_nll) for r in search.candidates)
    # The final members are the stage-two selection, weighted by it.
    chosen = [record for record in second if record.selection_weight > 0]
    assert search.members.member_seeds == [r.seed for r in chosen] or sorted(
        search.members.member_seeds
    ) == sorted(r.seed for r in chosen)
    torch.testing.assert_close(
        search.weights.sort().values,
        torch.tensor(sorted(r.selection_weight for r in chosen), dtype=torch.float64),
    )
    assert math.isclose(float(search.weights.sum()), 1.0)


def test_final_members_are_refitted_on_all_rows_with_their_own_configuration() -> None:
    # Dropout masks come from the search's generator, far along its stream; a negligible
    # rate makes them all ones.
    search = _search(search_space=HyperDeepSearchSpace(dropout=(1e-12, 1e-12)))
    X, Y = _data()
    second = {r.seed: r for r in search.candidates if r.stage == "stratified"}
    records = [second[seed] for seed in search.members.member_seeds]
    refit = ARCHITECTURE.build(
        search.members.member_seeds,
        torch.tensor([r.dropout for r in records], dtype=torch.float64),
    ).double()
    fit_members(
        refit,
        X,
        Y,
        CONFIG,
        l2_regularization=torch.tensor([r.l2_regularization for r in records]).double(),
        learning_rates=torch.tensor([r.learning_rate for r in records]).double(),
    )
    for expected, actual in zip(refit.parameters(), search.members.parameters(), strict=True):
        torch.testing.assert_close(actual, expected)


def test_search_is_reproducible_from_the_seed() -> None:
    first, again, other = _search(0), _search(0), _search(1)
    assert [r.seed for r in first.candidates] == [r.seed for r in again.candidates]
    torch.testing.assert_close(first.weights, again.weights)
    assert [r.seed for r in first.candidates] != [r.seed for r in other.candidates]


def test_single_precision_training_serves_members_in_the_data_dtype() -> None:
    search = _search(training_dtype=torch.float32)
    assert all(p.dtype == torch.float64 for p in search.members.parameters())
    assert search.weights.dtype == torch.float64
    # The same seed draws the same candidates; only the arithmetic's precision differs.
    double = _search()
    assert [r.seed for r in search.candidates[:6]] == [r.seed for r in double.candidates[:6]]
    single_nll = torch.tensor([r.validation_nll for r in search.candidates[:6]])
    double_nll = torch.tensor([r.validation_nll for r in double.candidates[:6]])
    torch.testing.assert_close(single_nll, double_nll, rtol=0.05, atol=0.05)
    for invalid in (torch.int32, "float32"):
        with pytest.raises(ValueError, match="training_dtype"):
            _search(training_dtype=invalid)


def test_holdout_validation_scores_only_the_held_out_rows() -> None:
    search = _search(validation="holdout", validation_fraction=0.25)
    assert search.splits.num_splits == 1
    assert int(search.splits.validation_weights.sum()) == 6


def test_model_serves_the_search_through_the_member_ensemble_posterior() -> None:
    X, Y = _data()
    model = HyperDeepEnsemble(
        X, Y, hidden_widths=(16,), activation="tanh", epochs=60, num_candidates=5,
        ensemble_size=3, num_folds=3,
    ).fit(seed=0)  # fmt: skip
    assert isinstance(model, MemberEnsemble)
    assert model.network.num_members == model.member_weights.shape[0] <= 3
    assert math.isclose(float(model.member_weights.sum()), 1.0)
    assert len(model.search_summary()) == len(model.search_history) >= 5
    assert set(model.search_summary()[0]) >= {"stage", "seed", "validation_nll", "dropout"}
    test_X = torch.rand(4, 1, dtype=torch.float64)
    assert isinstance(model.posterior(test_X), FunctionEnsemblePosterior)
    single = HyperDeepEnsemble(
        X, Y, hidden_widths=(16,), activation="tanh", epochs=60, num_candidates=5,
        ensemble_size=3, num_folds=3, training_dtype=torch.float32,
    ).fit(seed=0)  # fmt: skip
    assert single.posterior(test_X).mean.dtype == torch.float64
    noisy = model.posterior(test_X, observation_noise=True)
    assert isinstance(noisy, MixtureOfGaussiansPosterior)
    torch.testing.assert_close(noisy.weights, model.member_weights)
    decomposition = model.uncertainty_decomposition(test_X)
    torch.testing.assert_close(decomposition.total_variance, noisy.variance)


def test_model_rejects_warm_start_and_bad_hyperparameters() -> None:
    X, Y = _data()
    model = HyperDeepEnsemble(X, Y, hidden_widths=(8,), epochs=5, num_candidates=2).fit(seed=0)
    with pytest.raises(ValueError, match="warm_start"):
        HyperDeepEnsemble(X, Y, hidden_widths=(8,)).fit(seed=0, warm_start=model)
    for kwargs, message in [
        ({"num_candidates": 0}, "num_candidates"),
        ({"validation": "loo"}, "Unknown validation"),
        ({"num_folds": 1}, "num_folds"),
        ({"validation_fraction": 0.0}, "validation_fraction"),
        ({"dropout_range": (0.1, 1.5)}, "dropout_range"),
        ({"max_selection_iterations": 0}, "max_selection_iterations"),
        ({"training_dtype": "float32"}, "training_dtype"),
        ({"training_dtype": torch.int64}, "training_dtype"),
    ]:
        with pytest.raises(ValueError, match=message):
            HyperDeepEnsemble(X, Y, **kwargs)
    # The search draws L2, dropout and learning rate, and scores the candidates on
    # held-out rows: the deep ensemble's fixed values and resampling are not fields.
    for name in ("l2_regularization", "dropout", "learning_rate", "bootstrap", "subset_fraction"):
        with pytest.raises(TypeError, match=f"Unknown hyperparameter.*{name}"):
            HyperDeepEnsemble(X, Y, **{name: 0.5})


@allow_single_member_warning
def test_a_step_budget_bounds_the_refit_whatever_the_data_size():
    for num_data in (100, 600):
        X = torch.rand(num_data, 3, dtype=torch.float64)
        model = HyperDeepEnsemble(
            X,
            X.sin().sum(-1, keepdim=True),
            num_candidates=3,
            ensemble_size=2,
            num_folds=2,
            epochs=100_000,
            batch_size=64,
            max_steps=20,
        ).fit(seed=0)
        assert model.training_result.steps_run == 20
