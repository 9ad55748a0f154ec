"""Selection on another validation set from a trained pool: scoring trained candidates
by their weights reproduces the scores of training bit for bit, and reselection (per
shift severity) trains nothing and leaves the training data as they were."""

import dataclasses
import math
from pathlib import Path

import pytest
import torch

from botorch_nn_uq.ensembles import (
    MAX_SEVERITY,
    ArchitectureSpace,
    CandidateScorer,
    SearchHistory,
    TrainingHyperparameters,
    forward_select,
    select_from_pool,
    shift_adaptation,
    shift_test_set,
    shift_validation_set,
)
from botorch_nn_uq.ensembles import pool as pool_module
from botorch_nn_uq.ensembles.history import CandidateTrainer, stack_log_likelihoods
from botorch_nn_uq.ensembles.nes import nes_regularized_evolution, random_candidate_specs
from botorch_nn_uq.ensembles.pool import PoolData, PoolSettings, TrainedCandidate
from botorch_nn_uq.training import members as members_module
from tests.ensembles.fakes import FakeScorer, FakeTrainer, crafted_candidate

SPACE = ArchitectureSpace(num_nodes=2, units=(8, 16), activations=("tanh", "relu"))
HYPERPARAMETERS = TrainingHyperparameters(
    learning_rate=1e-2,
    batch_size=16,
    optimizer="adam",
    lr_reduction_patience=5,
    early_stopping_patience=10,
)


def _data(dtype: torch.dtype) -> PoolData:
    generator = torch.Generator().manual_seed(0)
    X = torch.rand(48, 2, generator=generator, dtype=dtype)
    Y = (3 * X).sin().sum(-1, keepdim=True)
    return PoolData(train_X=X[:36], train_Y=Y[:36], validation_X=X[36:], validation_Y=Y[36:])


@dataclasses.dataclass
class Search:
    r"""A small NES-RE search on real networks, with its inputs kept for comparison."""

    data: PoolData
    settings: PoolSettings
    trainer: CandidateTrainer
    pool: list[TrainedCandidate]
    selection: object


def _search(dtype: torch.dtype, gaussian_head: bool, shifted=None) -> Search:
    data = _data(dtype)
    settings = PoolSettings(epochs=15, gaussian_head=gaussian_head)
    trainer = CandidateTrainer("nes-re", data, settings)
    if shifted is not None:
        shifted = shifted(data, settings)
    pool, selection = nes_regularized_evolution(
        trainer,
        SPACE,
        HYPERPARAMETERS,
        pool_size=7,
        ensemble_size=3,
        population_size=4,
        num_parents=2,
        children_per_generation=1,
        generator=torch.Generator().manual_seed(1),
        shifted_validation=shifted,
    )
    return Search(data, settings, trainer, pool, selection)


@pytest.fixture(
    scope="module",
    params=[(torch.float64, True), (torch.float32, False)],
    ids=["float64-gaussian", "float32-mean-only"],
)
def search(request: pytest.FixtureRequest) -> Search:
    return _search(*request.param)


def _severity_scorer(search: Search, severity: int) -> CandidateScorer:
    data = search.data
    X_shift, Y_shift = shift_validation_set(
        data.validation_X,
        data.validation_Y,
        severity,
        torch.Generator().manual_seed(2),
        reference=data.train_X,
    )
    return CandidateScorer(X_shift, Y_shift, search.settings)


def _forbid_training(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("a network was trained during reselection")

    monkeypatch.setattr(pool_module, "train_candidate_group", refuse)
    monkeypatch.setattr(pool_module, "fit_members", refuse)
    monkeypatch.setattr(members_module, "fit_members", refuse)


def test_scoring_the_plain_validation_set_reproduces_the_training_scores(search: Search) -> None:
    scorer = CandidateScorer(search.data.validation_X, search.data.validation_Y, search.settings)
    scores = scorer(search.pool)
    assert scores.dtype == torch.float64 and scores.shape == (7, 12)
    assert torch.equal(scores, stack_log_likelihoods(search.pool))


def test_selection_on_a_shifted_set_equal_to_the_plain_one_is_the_plain_selection(
    search: Search,
) -> None:
    usable, selection = select_from_pool(
        search.pool,
        3,
        CandidateScorer(search.data.validation_X, search.data.validation_Y, search.settings),
    )
    assert usable == search.pool
    assert torch.equal(selection.indices, search.selection.indices)
    assert torch.equal(selection.weights, search.selection.weights)
    assert selection.loss_history == search.selection.loss_history


def test_a_search_whose_shifted_set_is_the_plain_one_is_the_plain_search() -> None:
    plain = _search(torch.float64, True)
    shifted = _search(
        torch.float64,
        True,
        shifted=lambda data, settings: CandidateScorer(
            data.validation_X, data.validation_Y, settings
        ),
    )
    assert [c.spec for c in shifted.pool] == [c.spec for c in plain.pool]
    assert torch.equal(shifted.selection.indices, plain.selection.indices)
    assert shifted.selection.loss == plain.selection.loss


def test_reselection_per_severity_trains_nothing(
    search: Search, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    history = search.trainer.finish(search.pool, search.selection)
    history.save(tmp_path / "history.pt")
    saved = SearchHistory.load(tmp_path / "history.pt")
    _forbid_training(monkeypatch)
    # The guard holds: training a network now fails.
    trainer = CandidateTrainer("nes-re", search.data, search.settings)
    with pytest.raises(AssertionError, match="trained during reselection"):
        trainer.train([dataclasses.replace(search.pool[0].spec, candidate_id=0)])
    selections = {}
    for severity in range(MAX_SEVERITY + 1):
        scorer = _severity_scorer(search, severity)
        usable, selection = select_from_pool(search.pool, 3, scorer)
        from_history = select_from_pool(saved, 3, _severity_scorer(search, severity))[1]
        assert torch.equal(from_history.indices, selection.indices)
        assert from_history.loss == selection.loss
        assert len(selection.indices) == 3
        selections[severity] = selection
    assert torch.equal(selections[0].indices, search.selection.indices)
    assert selections[0].loss == search.selection.loss


def test_the_training_data_are_never_shifted() -> None:
    kept = {}

    def shifted(data: PoolData, settings: PoolSettings) -> CandidateScorer:
        kept.update(train_X=data.train_X.clone(), train_Y=data.train_Y.clone())
        X_shift, Y_shift = shift_validation_set(
            data.validation_X,
            data.validation_Y,
            5,
            torch.Generator().manual_seed(3),
            reference=data.train_X,
        )
        return CandidateScorer(X_shift, Y_shift, settings)

    search = _search(torch.float64, True, shifted=shifted)
    data = search.data
    for severity in range(MAX_SEVERITY + 1):
        select_from_pool(search.pool, 3, _severity_scorer(search, severity))
        X_test, Y_test = shift_test_set(
            data.validation_X,
            data.validation_Y,
            severity,
            torch.Generator().manual_seed(4),
            reference=data.train_X,
        )
        CandidateScorer(X_test, Y_test, search.settings)(search.pool)
    assert torch.equal(data.train_X, kept["train_X"])
    assert torch.equal(data.train_Y, kept["train_Y"])
    assert torch.equal(search.trainer.data.train_X, kept["train_X"])


def test_a_scorer_evaluates_each_candidate_once(
    search: Search, monkeypatch: pytest.MonkeyPatch
) -> None:
    evaluated = []
    compute = shift_adaptation.candidate_log_likelihoods

    def counting(candidates, *args):
        evaluated.extend(c.spec.candidate_id for c in candidates)
        return compute(candidates, *args)

    monkeypatch.setattr(shift_adaptation, "candidate_log_likelihoods", counting)
    scorer = _severity_scorer(search, 3)
    first = scorer(search.pool[:4])
    everything = scorer(search.pool)
    again = scorer(search.pool[::-1])
    assert sorted(evaluated) == list(range(7))
    assert torch.equal(everything[:4], first)
    assert torch.equal(again, everything.flip(0))


def test_failed_candidates_score_minus_infinity_and_are_never_selected(search: Search) -> None:
    failed = crafted_candidate(dataclasses.replace(search.pool[0].spec, candidate_id=7), None)
    pool = [*search.pool, failed]
    scorer = _severity_scorer(search, 5)
    scores = scorer(pool)
    assert (scores[-1] == -math.inf).all() and scores[:-1].isfinite().all()
    usable, selection = select_from_pool(pool, 3, scorer)
    assert usable == search.pool
    expected = forward_select(scorer(search.pool), 3)
    assert torch.equal(selection.indices, expected.indices)


def _crafted_pool(size: int) -> list[TrainedCandidate]:
    trainer = FakeTrainer()
    generator = torch.Generator().manual_seed(0)
    return trainer.train(random_candidate_specs(trainer, SPACE, HYPERPARAMETERS, size, generator))


def test_select_from_pool_runs_forward_select_on_the_scorer() -> None:
    pool = _crafted_pool(6)
    scorer = FakeScorer()
    usable, selection = select_from_pool(pool, 2, scorer)
    assert usable == pool and scorer.calls == [tuple(range(6))]
    expected = forward_select(scorer(pool), 2)
    assert torch.equal(selection.indices, expected.indices)
    plain = select_from_pool(pool, 2)[1]
    assert torch.equal(plain.indices, forward_select(stack_log_likelihoods(pool), 2).indices)


def test_a_scorer_must_return_a_row_per_candidate() -> None:
    with pytest.raises(ValueError, match="one row per candidate"):
        select_from_pool(_crafted_pool(1), 1, lambda candidates: torch.zeros(2, 6))


@pytest.mark.parametrize(
    ("X", "Y", "settings", "error", "match"),
    [
        (torch.rand(4), torch.rand(4, 1), PoolSettings(), ValueError, "2-dim tensors"),
        (torch.rand(4, 2), torch.rand(3, 1), PoolSettings(), ValueError, "same positive number"),
        (torch.rand(0, 2), torch.rand(0, 1), PoolSettings(), ValueError, "same positive number"),
        (torch.rand(4, 2), torch.rand(4, 1), None, TypeError, "PoolSettings"),
    ],
)
def test_candidate_scorer_checks_its_arguments(X, Y, settings, error, match) -> None:
    with pytest.raises(error, match=match):
        CandidateScorer(X, Y, settings)
