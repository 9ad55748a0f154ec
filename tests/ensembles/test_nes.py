"""The Neural Ensemble Search loops (NES-RS and NES-RE), run with a fake trainer whose
validation log-likelihoods are crafted, so the search mechanics are checked exactly and
without training a network."""

from collections.abc import Callable

import pytest
import torch

from botorch_nn_uq.ensembles.architecture_space import Architecture, ArchitectureSpace
from botorch_nn_uq.ensembles.history import stack_log_likelihoods
from botorch_nn_uq.ensembles.hyperparameter_space import TrainingHyperparameters
from botorch_nn_uq.ensembles.nes import nes_random_search, nes_regularized_evolution
from botorch_nn_uq.ensembles.pool import CandidateSpec, TrainedCandidate
from botorch_nn_uq.ensembles.selection import SelectionResult, forward_select
from tests.ensembles.fakes import FakeScorer, FakeTrainer, architecture_row, favouring

SPACE = ArchitectureSpace(num_nodes=3, units=(8, 16, 32), activations=("relu", "tanh"))
HYPERPARAMETERS = TrainingHyperparameters(
    learning_rate=1e-2,
    batch_size=16,
    optimizer="adam",
    lr_reduction_patience=5,
    early_stopping_patience=10,
)


def _generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _is_one_mutation(child: Architecture, parent: Architecture) -> bool:
    before, after = SPACE.decision_variables(parent), SPACE.decision_variables(child)
    return sum(before[key] != after[key] for key in before) == 1


def _run_re(trainer: FakeTrainer, seed: int = 0, **kwargs):
    options = {
        "pool_size": 14,
        "ensemble_size": 3,
        "population_size": 5,
        "num_parents": 2,
        "children_per_generation": 2,
    }
    options.update(kwargs)
    return nes_regularized_evolution(
        trainer, SPACE, HYPERPARAMETERS, generator=_generator(seed), **options
    )


def _specs(trainer: FakeTrainer) -> list[CandidateSpec]:
    return [spec for call in trainer.calls for spec in call]


# ------------------------------------------------------------------------------------
# NES-RS
# ------------------------------------------------------------------------------------


def test_nes_rs_trains_pool_size_random_candidates_and_forward_selects() -> None:
    trainer = FakeTrainer()
    usable, selection = nes_random_search(
        trainer, SPACE, HYPERPARAMETERS, pool_size=9, ensemble_size=3, generator=_generator()
    )
    assert len(trainer.calls) == 1 and len(trainer.calls[0]) == 9
    specs = trainer.calls[0]
    assert [spec.candidate_id for spec in specs] == list(range(9))
    assert all(spec.hyperparameters == HYPERPARAMETERS for spec in specs)
    assert all(SPACE.contains(spec.architecture) for spec in specs)
    assert len({spec.seed for spec in specs}) == 9
    assert len({spec.architecture for spec in specs}) > 1
    assert usable == trainer.candidates
    expected = forward_select(stack_log_likelihoods(trainer.candidates), 3)
    assert torch.equal(selection.indices, expected.indices)
    assert torch.equal(selection.weights, expected.weights)
    assert selection.loss == expected.loss


def test_nes_rs_keeps_failed_candidates_out_of_the_selection() -> None:
    def score(spec: CandidateSpec) -> torch.Tensor | None:
        return None if spec.candidate_id % 3 == 0 else architecture_row(spec)

    trainer = FakeTrainer(score)
    usable, selection = nes_random_search(
        trainer, SPACE, HYPERPARAMETERS, pool_size=9, ensemble_size=3, generator=_generator()
    )
    assert len(trainer.candidates) == 9  # every candidate was proposed and recorded
    assert [c.spec.candidate_id for c in usable] == [1, 2, 4, 5, 7, 8]
    chosen = [usable[i] for i in selection.indices.tolist()]
    assert len(chosen) == 3 and not any(c.failed for c in chosen)


def test_nes_rs_raises_when_every_candidate_fails() -> None:
    trainer = FakeTrainer(lambda spec: None)
    with pytest.raises(RuntimeError, match="(?i)every candidate"):
        nes_random_search(
            trainer, SPACE, HYPERPARAMETERS, pool_size=3, ensemble_size=2, generator=_generator()
        )


# ------------------------------------------------------------------------------------
# NES-RE
# ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pool_size", "population_size", "children_per_generation", "sizes"),
    [
        (14, 5, 2, [5, 2, 2, 2, 2, 1]),
        (10, 3, 3, [3, 3, 3, 1]),
        (6, 6, 2, [6]),
        (7, 4, 1, [4, 1, 1, 1]),
    ],
)
def test_nes_re_trains_pool_size_candidates_in_generations(
    pool_size: int, population_size: int, children_per_generation: int, sizes: list[int]
) -> None:
    trainer = FakeTrainer()
    usable, _ = _run_re(
        trainer,
        pool_size=pool_size,
        population_size=population_size,
        children_per_generation=children_per_generation,
    )
    assert [len(call) for call in trainer.calls] == sizes
    assert len(trainer.candidates) == pool_size == len(usable)
    assert all(spec.hyperparameters == HYPERPARAMETERS for spec in _specs(trainer))


def _check_parents(
    trainer: FakeTrainer,
    population_size: int,
    num_parents: int,
    scores: list[Callable[[list[TrainedCandidate]], torch.Tensor]] | None = None,
) -> None:
    r"""Every child mutates one variable of a member of ForwardSelect(population, m),
    the population being the last ``population_size`` candidates before its generation
    and ForwardSelect scoring them with the generation's validation scorer (``scores``,
    one per generation; default: the plain validation set)."""
    created: list[TrainedCandidate] = list(trainer.candidates[: len(trainer.calls[0])])
    for generation, call in enumerate(trainer.calls[1:]):
        population = created[-population_size:]
        usable = [c for c in population if not c.failed]
        score = stack_log_likelihoods if scores is None else scores[generation]
        chosen = forward_select(score(usable), num_parents).indices.tolist()
        parents = [usable[i].spec.architecture for i in chosen]
        for spec in call:
            assert SPACE.contains(spec.architecture)
            assert any(_is_one_mutation(spec.architecture, parent) for parent in parents), (
                f"child {spec.candidate_id} is no one-variable mutation of a parent"
            )
        created += trainer.candidates[call[0].candidate_id : call[-1].candidate_id + 1]


@pytest.mark.parametrize(
    ("population_size", "num_parents", "children_per_generation"),
    [(5, 2, 2), (3, 1, 1), (4, 3, 3)],
)
def test_nes_re_children_mutate_forward_selected_members_of_the_aging_population(
    population_size: int, num_parents: int, children_per_generation: int
) -> None:
    trainer = FakeTrainer()
    _run_re(
        trainer,
        pool_size=16,
        population_size=population_size,
        num_parents=num_parents,
        children_per_generation=children_per_generation,
    )
    assert len(trainer.candidates) == 16
    _check_parents(trainer, population_size, num_parents)


def test_nes_re_ages_out_the_oldest_member_even_if_it_is_the_best() -> None:
    # Candidate 2, the youngest of the initial population, is by far the best network.
    trainer = FakeTrainer(favouring(2))
    _run_re(trainer, pool_size=12, population_size=3, num_parents=1, children_per_generation=1)
    _check_parents(trainer, population_size=3, num_parents=1)
    best = trainer.candidates[2].spec.architecture
    children = _specs(trainer)[3:]
    # With m = 1 it is the only parent while in the population: the generations that see
    # populations {0, 1, 2}, {1, 2, 3} and {2, 3, 4} ...
    assert all(_is_one_mutation(child.architecture, best) for child in children[:3])
    # ... and once the oldest-first removal has aged it out, it is no longer mutated.
    assert not all(_is_one_mutation(child.architecture, best) for child in children[3:])


def test_nes_re_skips_failed_population_members() -> None:
    def score(spec: CandidateSpec) -> torch.Tensor | None:
        return None if spec.candidate_id in (1, 4, 7) else architecture_row(spec)

    trainer = FakeTrainer(score)
    usable, selection = _run_re(trainer, pool_size=12, population_size=4, num_parents=2)
    _check_parents(trainer, population_size=4, num_parents=2)
    assert len(trainer.candidates) == 12
    assert [c.spec.candidate_id for c in usable] == [i for i in range(12) if i not in (1, 4, 7)]
    assert not any(usable[i].failed for i in selection.indices.tolist())


def test_nes_re_selects_over_the_whole_history() -> None:
    # Candidates 0 and 1 (initial population) are complementary and the best pair; the
    # children are all worse. After the population has turned over, 0 and 1 are gone
    # from it, but the final ForwardSelect is over every network trained.
    good = {
        0: torch.tensor([0.0, 0.0, 0.0, -6.0, -6.0, -6.0], dtype=torch.float64),
        1: torch.tensor([-6.0, -6.0, -6.0, 0.0, 0.0, 0.0], dtype=torch.float64),
    }

    def score(spec: CandidateSpec) -> torch.Tensor:
        return good.get(spec.candidate_id, architecture_row(spec) - 2)

    trainer = FakeTrainer(score)
    usable, selection = _run_re(
        trainer, pool_size=14, ensemble_size=2, population_size=3, children_per_generation=2
    )
    assert usable == trainer.candidates and len(usable) == 14
    final_population = {c.spec.candidate_id for c in trainer.candidates[-3:]}
    assert not final_population & {0, 1}
    chosen = sorted(usable[i].spec.candidate_id for i in selection.indices.tolist())
    assert chosen == [0, 1]
    expected = forward_select(stack_log_likelihoods(trainer.candidates), 2)
    assert torch.equal(selection.indices, expected.indices)


def test_nes_re_is_determined_by_the_generator_seed() -> None:
    first, second, other = FakeTrainer(), FakeTrainer(), FakeTrainer()
    selection_first = _run_re(first, seed=3)[1]
    selection_second = _run_re(second, seed=3)[1]
    _run_re(other, seed=4)
    assert _specs(first) == _specs(second)
    assert torch.equal(selection_first.indices, selection_second.indices)
    assert [s.architecture for s in _specs(first)] != [s.architecture for s in _specs(other)]


def test_nes_re_uses_only_its_generator() -> None:
    trainer, again = FakeTrainer(), FakeTrainer()
    torch.manual_seed(0)
    _run_re(trainer, seed=5)
    torch.manual_seed(1)
    _run_re(again, seed=5)
    assert _specs(trainer) == _specs(again)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"pool_size": 4, "population_size": 5}, "population_size must be in"),
        ({"population_size": 0}, "population_size must be in"),
        ({"num_parents": 0}, "num_parents and children_per_generation"),
        ({"children_per_generation": 0}, "num_parents and children_per_generation"),
    ],
)
def test_nes_re_rejects_invalid_settings(kwargs: dict, match: str) -> None:
    trainer = FakeTrainer()
    with pytest.raises(ValueError, match=match):
        _run_re(trainer, **kwargs)
    assert trainer.calls == []


# ------------------------------------------------------------------------------------
# Under dataset shift: selection on a shifted validation set
# ------------------------------------------------------------------------------------


def _same_selection(first: SelectionResult, second: SelectionResult) -> bool:
    return (
        torch.equal(first.indices, second.indices)
        and torch.equal(first.weights, second.weights)
        and first.loss_history == second.loss_history
    )


def test_nes_rs_selects_on_the_shifted_validation_set_from_the_same_pool() -> None:
    plain_trainer, shifted_trainer = FakeTrainer(), FakeTrainer()
    options = {"pool_size": 12, "ensemble_size": 3}
    _, plain = nes_random_search(
        plain_trainer, SPACE, HYPERPARAMETERS, generator=_generator(), **options
    )
    scorer = FakeScorer()
    usable, shifted = nes_random_search(
        shifted_trainer,
        SPACE,
        HYPERPARAMETERS,
        generator=_generator(),
        shifted_validation=scorer,
        **options,
    )
    assert _specs(shifted_trainer) == _specs(plain_trainer)
    assert scorer.calls == [tuple(range(12))]
    assert _same_selection(shifted, forward_select(scorer(usable), 3))
    assert not torch.equal(shifted.indices, plain.indices)


def test_nes_rs_with_the_plain_set_as_shifted_set_is_plain_nes_rs() -> None:
    plain_trainer, shifted_trainer = FakeTrainer(), FakeTrainer()
    options = {"pool_size": 9, "ensemble_size": 3}
    plain = nes_random_search(
        plain_trainer, SPACE, HYPERPARAMETERS, generator=_generator(), **options
    )
    shifted = nes_random_search(
        shifted_trainer,
        SPACE,
        HYPERPARAMETERS,
        generator=_generator(),
        shifted_validation=FakeScorer(architecture_row),
        **options,
    )
    assert _specs(shifted_trainer) == _specs(plain_trainer)
    assert _same_selection(shifted[1], plain[1])


@pytest.mark.parametrize("evolve_on_plain_validation", [False, True])
def test_nes_re_with_the_plain_set_as_shifted_set_is_plain_nes_re(
    evolve_on_plain_validation: bool,
) -> None:
    plain_trainer, shifted_trainer = FakeTrainer(), FakeTrainer()
    _, plain = _run_re(plain_trainer, seed=2, pool_size=20)
    _, shifted = _run_re(
        shifted_trainer,
        seed=2,
        pool_size=20,
        shifted_validation=FakeScorer(architecture_row),
        evolve_on_plain_validation=evolve_on_plain_validation,
    )
    assert _specs(shifted_trainer) == _specs(plain_trainer)
    assert _same_selection(shifted, plain)


def _generations_on_the_shifted_set(trainer: FakeTrainer, scorer: FakeScorer) -> list[bool]:
    r"""Whether each generation selected its parents on the shifted set: the scorer saw
    that generation's population (its newest member identifies it)."""
    newest_scored = {max(call) for call in scorer.calls}
    return [call[0].candidate_id - 1 in newest_scored for call in trainer.calls[1:]]


def test_nes_re_draws_the_plain_or_the_shifted_set_uniformly_per_generation() -> None:
    population_size, num_parents = 4, 2
    used = []
    for seed in range(6):
        trainer, scorer = FakeTrainer(), FakeScorer()
        usable, selection = _run_re(
            trainer,
            seed=seed,
            pool_size=84,
            population_size=population_size,
            num_parents=num_parents,
            children_per_generation=1,
            shifted_validation=scorer,
        )
        on_shift = _generations_on_the_shifted_set(trainer, scorer)
        # One scoring per generation on the shifted set, one for the final selection.
        assert len(scorer.calls) == sum(on_shift) + 1
        assert scorer.calls[-1] == tuple(range(84))
        assert _same_selection(selection, forward_select(scorer(usable), 3))
        _check_parents(
            trainer,
            population_size,
            num_parents,
            scores=[scorer if shift else stack_log_likelihoods for shift in on_shift],
        )
        used += on_shift
    # 480 fair draws: a share outside (0.4, 0.6) is four standard deviations off.
    assert len(used) == 480
    assert 0.4 < sum(used) / len(used) < 0.6


def test_nes_re_0_evolves_on_the_plain_set_and_selects_on_the_shifted_set() -> None:
    plain_trainer, trainer, scorer = FakeTrainer(), FakeTrainer(), FakeScorer()
    _run_re(plain_trainer, seed=1)
    usable, selection = _run_re(
        trainer, seed=1, shifted_validation=scorer, evolve_on_plain_validation=True
    )
    assert _specs(trainer) == _specs(plain_trainer)
    assert scorer.calls == [tuple(range(14))]
    assert _same_selection(selection, forward_select(scorer(usable), 3))


def test_nes_re_under_shift_is_determined_by_the_generator_seed() -> None:
    runs = [FakeTrainer() for _ in range(3)]
    results = [
        _run_re(trainer, seed=seed, shifted_validation=FakeScorer())[1]
        for trainer, seed in zip(runs, (3, 3, 4), strict=True)
    ]
    assert _specs(runs[0]) == _specs(runs[1]) and _same_selection(results[0], results[1])
    assert _specs(runs[0]) != _specs(runs[2])


def test_nes_re_refuses_a_non_boolean_evolution_flag() -> None:
    with pytest.raises(ValueError, match="evolve_on_plain_validation must be True or False"):
        _run_re(FakeTrainer(), shifted_validation=FakeScorer(), evolve_on_plain_validation=1)
