"""AutoDEUQ's search: aging evolution of architectures (checked with a fake trainer), the
GP-based hyperparameter sampler and the final Caruana selection."""

import math
from collections.abc import Callable

import pytest
import torch

from botorch_nn_uq.ensembles.architecture_space import Architecture, ArchitectureSpace
from botorch_nn_uq.ensembles.autodeuq import autodeuq_search, propose_hyperparameters
from botorch_nn_uq.ensembles.history import stack_log_likelihoods
from botorch_nn_uq.ensembles.hyperparameter_space import (
    HyperparameterSpace,
    TrainingHyperparameters,
)
from botorch_nn_uq.ensembles.pool import CandidateSpec, TrainedCandidate
from botorch_nn_uq.ensembles.selection import caruana_select
from tests.ensembles.fakes import FakeTrainer, architecture_row, favouring

#: A rich space: two random architectures are never one mutation apart in practice.
SPACE = ArchitectureSpace(num_nodes=3)
HP_SPACE = HyperparameterSpace(optimizers=("adam", "sgd"))


@pytest.fixture(autouse=True)
def _one_thread():
    r"""The GP fits are tiny: one thread is fastest on a busy machine."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def _search(trainer: FakeTrainer, seed: int = 0, **kwargs):
    options = {
        "num_candidates": 16,
        "ensemble_size": 3,
        "population_size": 5,
        "tournament_size": 2,
        "generation_size": 2,
        # Random hyperparameters throughout: these tests are about the architectures.
        "num_initial_random": 1000,
    }
    options.update(kwargs)
    return autodeuq_search(
        trainer, SPACE, HP_SPACE, generator=torch.Generator().manual_seed(seed), **options
    )


def _distance(a: Architecture, b: Architecture) -> int:
    before, after = SPACE.decision_variables(a), SPACE.decision_variables(b)
    return sum(before[key] != after[key] for key in before)


def _generations(trainer: FakeTrainer):
    r"""Yield ``(population before the generation, the generation's specs)`` with the
    population tracked as the last ``population_size`` candidates (set by the caller)."""
    created: list[TrainedCandidate] = []
    for call in trainer.calls:
        yield created, call
        created = created + trainer.candidates[call[0].candidate_id : call[-1].candidate_id + 1]


def _check_evolution(trainer: FakeTrainer, population_size: int) -> list[int]:
    r"""Check every generation; returns the ids of the mutated (non-random) candidates."""
    mutated = []
    for created, call in _generations(trainer):
        population = created[-population_size:]
        usable = [c for c in population if not c.failed]
        for spec in call:
            assert SPACE.contains(spec.architecture)
            if len(population) < population_size or not usable:
                # A random sample: not a near copy of any earlier architecture.
                assert all(_distance(spec.architecture, c.spec.architecture) > 1 for c in created)
            else:
                assert any(_distance(spec.architecture, c.spec.architecture) == 1 for c in usable)
                mutated.append(spec.candidate_id)
    return mutated


# ------------------------------------------------------------------------------------
# Aging evolution of the architectures
# ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("population_size", "generation_size", "first_mutated"),
    [(5, 2, 6), (4, 2, 4), (3, 1, 3), (6, 4, 8)],
)
def test_random_until_the_population_is_full_then_mutations_of_population_members(
    population_size: int, generation_size: int, first_mutated: int
) -> None:
    trainer = FakeTrainer()
    usable, _ = _search(trainer, population_size=population_size, generation_size=generation_size)
    assert len(trainer.candidates) == 16 == len(usable)
    assert all(len(call) <= generation_size for call in trainer.calls)
    mutated = _check_evolution(trainer, population_size)
    # A generation that starts with a full population mutates; earlier ones sample.
    assert mutated == list(range(first_mutated, 16))


def test_a_full_tournament_mutates_the_best_member_of_the_aging_population() -> None:
    # Candidate 3 is by far the best; with tournament_size >= population_size every
    # tournament holds the whole population, so the winner is its best member.
    trainer = FakeTrainer(favouring(3))
    _search(trainer, population_size=4, tournament_size=4, generation_size=2, num_candidates=14)
    _check_evolution(trainer, population_size=4)
    parents_seen = []
    for created, call in _generations(trainer):
        population = created[-4:]
        if len(population) < 4:
            continue
        best = min(population, key=lambda c: c.validation_nll)
        parents_seen.append(best.spec.candidate_id)
        assert all(_distance(spec.architecture, best.spec.architecture) == 1 for spec in call)
    # Candidate 3 wins while in the population ({0..3}, {2..5}, {4..7} no longer holds it),
    # then it has aged out and the population never exceeds four members.
    assert parents_seen[:2] == [3, 3] and 3 not in parents_seen[2:]


@pytest.mark.parametrize("tournament_size", [1, 2, 4])
def test_failed_candidates_never_become_parents(tournament_size: int) -> None:
    def score(spec: CandidateSpec) -> torch.Tensor | None:
        return None if spec.candidate_id % 2 == 1 else architecture_row(spec)

    trainer = FakeTrainer(score)
    usable, selection = _search(trainer, population_size=4, tournament_size=tournament_size)
    assert len(trainer.candidates) == 16  # failed candidates are recorded, not dropped
    assert [c.spec.candidate_id for c in usable] == list(range(0, 16, 2))
    _check_evolution(trainer, population_size=4)
    assert not any(usable[i].failed for i in selection.indices.tolist())


def test_an_entirely_failed_population_samples_at_random() -> None:
    # The first population (candidates 0-3) fails entirely: the next generation samples.
    def score(spec: CandidateSpec) -> torch.Tensor | None:
        return None if spec.candidate_id < 4 else architecture_row(spec)

    trainer = FakeTrainer(score)
    _search(trainer, population_size=4, generation_size=2, num_candidates=10)
    mutated = _check_evolution(trainer, population_size=4)
    assert mutated == [6, 7, 8, 9]


def test_every_candidate_failing_raises() -> None:
    with pytest.raises(RuntimeError, match="(?i)every candidate"):
        _search(FakeTrainer(lambda spec: None), num_candidates=4)


def test_the_search_is_determined_by_the_generator_seed() -> None:
    first, second, other = FakeTrainer(), FakeTrainer(), FakeTrainer()
    _search(first, seed=1)
    _search(second, seed=1)
    _search(other, seed=2)
    specs = [[s for call in t.calls for s in call] for t in (first, second, other)]
    assert specs[0] == specs[1] != specs[2]


@pytest.mark.parametrize(
    "kwargs",
    [{"population_size": 0}, {"tournament_size": 0}, {"generation_size": 0}],
)
def test_invalid_settings_raise(kwargs: dict) -> None:
    with pytest.raises(ValueError, match="must be positive"):
        _search(FakeTrainer(), **kwargs)


# ------------------------------------------------------------------------------------
# The final selection
# ------------------------------------------------------------------------------------


def test_the_final_selection_is_caruana_with_replacement_over_the_catalog() -> None:
    # Candidate 0 fits most points, candidate 1 the rest: Caruana repeats candidate 0.
    rows = {
        0: torch.tensor([0.0, 0.0, 0.0, 0.0, 0.0, -5.0], dtype=torch.float64),
        1: torch.tensor([-5.0, -5.0, -5.0, -5.0, -5.0, 0.0], dtype=torch.float64),
    }

    def score(spec: CandidateSpec) -> torch.Tensor | None:
        if spec.candidate_id == 2:
            return None
        return rows.get(spec.candidate_id, architecture_row(spec) - 5)

    trainer = FakeTrainer(score)
    usable, selection = _search(trainer, ensemble_size=3, num_candidates=12)
    assert len(usable) == 11
    expected = caruana_select(stack_log_likelihoods(usable), 3)
    assert torch.equal(selection.indices, expected.indices)
    assert torch.equal(selection.weights, expected.weights)
    ids = [usable[i].spec.candidate_id for i in selection.indices.tolist()]
    assert ids == [0, 1]
    # Weights are multiplicities over the number of additions: candidate 0 was added
    # more than once.
    additions = len(selection.loss_history)
    multiplicities = selection.weights * additions
    torch.testing.assert_close(multiplicities, multiplicities.round())
    assert multiplicities[0] > 1 and math.isclose(float(selection.weights.sum()), 1.0)


@pytest.mark.parametrize("ensemble_size", [1, 2, 4])
def test_the_final_selection_has_at_most_ensemble_size_distinct_members(
    ensemble_size: int,
) -> None:
    trainer = FakeTrainer()
    usable, selection = _search(trainer, ensemble_size=ensemble_size, max_selection_iterations=7)
    indices = selection.indices.tolist()
    assert 1 <= len(indices) == len(set(indices)) <= ensemble_size
    assert len(selection.loss_history) <= 7
    expected = caruana_select(stack_log_likelihoods(usable), ensemble_size, 7)
    assert torch.equal(selection.indices, expected.indices)
    assert torch.equal(selection.weights, expected.weights)


# ------------------------------------------------------------------------------------
# The hyperparameter sampler
# ------------------------------------------------------------------------------------


def _observations(
    count: int, seed: int = 0, objective: Callable[[TrainingHyperparameters], float] | None = None
) -> list[tuple[TrainingHyperparameters, float]]:
    generator = torch.Generator().manual_seed(seed)
    configurations = [HP_SPACE.sample(generator) for _ in range(count)]
    objective = objective or (lambda h: (math.log10(h.learning_rate) + 2) ** 2)
    return [(h, objective(h)) for h in configurations]


def test_proposals_are_random_before_enough_finite_observations() -> None:
    # Three finite observations (and failed ones, which do not count) out of four needed.
    observations = _observations(3) + [(h, math.inf) for h, _ in _observations(5, seed=1)]
    proposals = propose_hyperparameters(
        HP_SPACE, observations, 4, torch.Generator().manual_seed(7), num_initial_random=4
    )
    generator = torch.Generator().manual_seed(7)
    assert proposals == [HP_SPACE.sample(generator) for _ in range(4)]


def test_model_based_proposals_are_valid_distinct_and_ignore_failed_observations() -> None:
    observations = _observations(12, seed=2)
    failed = [(h, math.inf) for h, _ in _observations(4, seed=3)]
    mixed = observations[:5] + failed + observations[5:]
    options = {"num_initial_random": 10, "num_acquisition_candidates": 64}
    proposals = propose_hyperparameters(
        HP_SPACE, mixed, 3, torch.Generator().manual_seed(5), **options
    )
    assert len(proposals) == 3
    assert all(HP_SPACE.contains(h) for h in proposals)
    # The constant liar spreads one generation over distinct configurations.
    assert len(set(proposals)) == 3
    # Failed observations do not reach the model: the proposals are those without them.
    without = propose_hyperparameters(
        HP_SPACE, observations, 3, torch.Generator().manual_seed(5), **options
    )
    assert proposals == without
    # And they are not simply the random proposals of the same generator.
    generator = torch.Generator().manual_seed(5)
    assert proposals != [HP_SPACE.sample(generator) for _ in range(3)]


def test_model_based_proposals_concentrate_near_the_optimum() -> None:
    # Validation NLL (log10 lr + 2)^2: the best learning rate is 1e-2.
    distances = []
    for seed in range(3):
        proposals = propose_hyperparameters(
            HP_SPACE,
            _observations(15, seed=10 + seed),
            3,
            torch.Generator().manual_seed(seed),
            num_initial_random=10,
            num_acquisition_candidates=128,
        )
        distances += [abs(math.log10(h.learning_rate) + 2) for h in proposals]
    generator = torch.Generator().manual_seed(0)
    random = [abs(math.log10(HP_SPACE.sample(generator).learning_rate) + 2) for _ in range(2000)]
    random_mean = sum(random) / len(random)  # ~0.83 for log-uniform rates in [1e-4, 1e-1]
    assert sum(distances) / len(distances) < 0.5 * random_mean


def test_the_search_switches_to_the_model_after_num_initial_random_candidates() -> None:
    options = {"num_candidates": 6, "generation_size": 3, "num_acquisition_candidates": 32}
    with_model, random_only = FakeTrainer(), FakeTrainer()
    _search(with_model, num_initial_random=3, **options)
    _search(random_only, num_initial_random=1000, **options)
    # The first generation is random in both; the second generation draws the same
    # architectures (they come first), but its configurations come from the GP.
    assert with_model.calls[0] == random_only.calls[0]
    second, second_random = with_model.calls[1], random_only.calls[1]
    assert [s.architecture for s in second] == [s.architecture for s in second_random]
    assert [s.hyperparameters for s in second] != [s.hyperparameters for s in second_random]
    assert all(HP_SPACE.contains(s.hyperparameters) for s in second)
    assert len({s.hyperparameters for s in second}) == 3
