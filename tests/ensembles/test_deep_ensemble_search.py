"""DeepEns (RS), the NES paper's deep-ensemble baseline, run with a fake trainer: the
architecture of the best network of a random pool (on the plain or a shifted validation
set), its members re-initialised and trained from scratch."""

import math

import pytest
import torch

from botorch_nn_uq.ensembles.architecture_space import ArchitectureSpace
from botorch_nn_uq.ensembles.deep_ensemble_search import (
    best_architecture,
    deep_ensemble_random_search,
    train_deep_ensemble,
)
from botorch_nn_uq.ensembles.history import stack_log_likelihoods
from botorch_nn_uq.ensembles.hyperparameter_space import TrainingHyperparameters
from botorch_nn_uq.ensembles.pool import CandidateSpec
from botorch_nn_uq.ensembles.selection import ensemble_nll
from tests.ensembles.fakes import FakeScorer, FakeTrainer, architecture_row, favouring

SPACE = ArchitectureSpace(num_nodes=3, units=(8, 16, 32), activations=("relu", "tanh"))
HYPERPARAMETERS = TrainingHyperparameters(
    learning_rate=1e-2,
    batch_size=16,
    optimizer="adam",
    lr_reduction_patience=5,
    early_stopping_patience=10,
)


def _run(trainer: FakeTrainer, seed: int = 0, **kwargs):
    options = {"pool_size": 8, "ensemble_size": 4}
    options.update(kwargs)
    return deep_ensemble_random_search(
        trainer, SPACE, HYPERPARAMETERS, generator=torch.Generator().manual_seed(seed), **options
    )


def test_the_members_are_fresh_networks_of_the_best_architecture() -> None:
    trainer = FakeTrainer(favouring(5))
    members, selection = _run(trainer)
    assert [len(call) for call in trainer.calls] == [8, 4]
    pool, trained = trainer.calls
    best = pool[5].architecture
    assert all(spec.architecture == best for spec in trained)
    assert [spec.candidate_id for spec in trained] == [8, 9, 10, 11]
    seeds = {spec.seed for spec in trained}
    assert len(seeds) == 4 and not seeds & {spec.seed for spec in pool}
    assert [member.spec for member in members] == trained
    assert torch.equal(selection.indices, torch.arange(4))
    assert torch.equal(selection.weights, torch.full((4,), 0.25, dtype=torch.float64))


def test_the_loss_history_is_that_of_the_growing_uniform_mixture() -> None:
    members, selection = _run(FakeTrainer(lambda spec: architecture_row(spec) + spec.seed % 3))
    scores = stack_log_likelihoods(members)
    expected = [ensemble_nll(scores[:size], torch.ones(size)).item() for size in range(1, 5)]
    assert selection.loss_history == pytest.approx(expected, rel=1e-12)
    assert selection.loss == selection.loss_history[-1]


def test_under_shift_the_architecture_is_the_best_on_the_shifted_set() -> None:
    plain_trainer, shifted_trainer = FakeTrainer(favouring(5)), FakeTrainer(favouring(5))
    _run(plain_trainer)
    scorer = FakeScorer(favouring(2))
    members, selection = _run(shifted_trainer, shifted_validation=scorer)
    pool = shifted_trainer.calls[0]
    assert pool == plain_trainer.calls[0]  # the same pool
    assert pool[2].architecture != pool[5].architecture
    assert all(spec.architecture == pool[5].architecture for spec in plain_trainer.calls[1])
    assert all(member.spec.architecture == pool[2].architecture for member in members)
    assert scorer.calls == [tuple(range(8)), tuple(range(8, 12))]
    expected = ensemble_nll(scorer(members), torch.ones(4)).item()
    assert selection.loss == pytest.approx(expected, rel=1e-12)


def test_with_the_plain_set_as_shifted_set_it_is_the_plain_search() -> None:
    plain_trainer, shifted_trainer = FakeTrainer(), FakeTrainer()
    _, plain = _run(plain_trainer, seed=3)
    _, shifted = _run(shifted_trainer, seed=3, shifted_validation=FakeScorer(architecture_row))
    assert shifted_trainer.calls == plain_trainer.calls
    assert shifted.loss_history == plain.loss_history


def test_best_architecture_skips_failed_candidates_and_breaks_ties_by_order() -> None:
    row = torch.full((6,), -1.0, dtype=torch.float64)
    trainer = FakeTrainer(lambda spec: None if spec.candidate_id == 0 else row)
    specs = [
        CandidateSpec(index, SPACE.sample(torch.Generator().manual_seed(index)), HYPERPARAMETERS, 0)
        for index in range(4)
    ]
    pool = trainer.train(specs)
    assert best_architecture(pool) == specs[1].architecture
    assert len(trainer.calls) == 1  # choosing trains nothing


def test_best_architecture_needs_a_finite_loss() -> None:
    trainer = FakeTrainer()
    pool = trainer.train([CandidateSpec(0, SPACE.sample(torch.Generator()), HYPERPARAMETERS, 0)])
    with pytest.raises(ValueError, match="finite loss"):
        best_architecture(pool, FakeScorer(lambda spec: torch.full((6,), -math.inf)))


def test_every_pool_network_failing_is_reported() -> None:
    with pytest.raises(RuntimeError, match="(?i)every candidate"):
        _run(FakeTrainer(lambda spec: None))


@pytest.mark.parametrize("ensemble_size", [0, -1, 2.0, True])
def test_train_deep_ensemble_refuses_an_invalid_size(ensemble_size: object) -> None:
    trainer = FakeTrainer()
    with pytest.raises(ValueError, match="ensemble_size must be a positive integer"):
        train_deep_ensemble(
            trainer,
            SPACE.sample(torch.Generator()),
            HYPERPARAMETERS,
            ensemble_size=ensemble_size,
            generator=torch.Generator(),
        )
    assert trainer.calls == []
