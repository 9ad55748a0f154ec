r"""Neural Ensemble Search (Zaidi et al., 2021): ensembles whose members differ in
architecture.

- :func:`nes_random_search` (NES-RS): sample ``pool_size`` architectures, train them,
  ForwardSelect ``ensemble_size`` members (without replacement).
- :func:`nes_regularized_evolution` (NES-RE): a population of trained networks evolves
  by mutation; each parent is drawn uniformly from ForwardSelect(population, m), the
  child is trained from scratch and joins the population and the pool, and the OLDEST
  population member leaves. The final ensemble is ForwardSelect over the whole pool
  (every network ever trained), not over the final population.

Under dataset shift (Section 4.3 of the paper; see
:mod:`~botorch_nn_uq.ensembles.shift_adaptation`), both take ``shifted_validation``, the
validation scorer of a shifted validation set ``D_val^shift``: the final ForwardSelect
runs on it instead of on the plain validation set, and NES-RE draws, for each
generation, whether its parents are selected on the plain or on the shifted set (each
with probability 1/2), unless ``evolve_on_plain_validation`` (the paper's NES-RE-0).

All candidates share one set of training hyperparameters (NES searches architectures
only). Every random decision comes from ``generator``, and a generation's children are
proposed before any of them is trained, so the search is identical whichever executor
trains the candidates. NES-RE's choices of validation set come from a stream of their
own, seeded from ``generator`` without advancing it: a search whose shifted set equals
the plain one retraces the search without a shifted set exactly.
"""

from __future__ import annotations

from collections import deque

import torch

from botorch_nn_uq.checks import check_boolean
from botorch_nn_uq.ensembles.architecture_space import ArchitectureSpace
from botorch_nn_uq.ensembles.history import (
    CandidateTrainer,
    stack_log_likelihoods,
    usable_candidates,
)
from botorch_nn_uq.ensembles.hyperparameter_space import TrainingHyperparameters
from botorch_nn_uq.ensembles.pool import CandidateSpec, TrainedCandidate
from botorch_nn_uq.ensembles.selection import SelectionResult, forward_select
from botorch_nn_uq.ensembles.shift_adaptation import ValidationScorer, select_from_pool
from botorch_nn_uq.training.seeding import draw_seed


def random_candidate_specs(
    trainer: CandidateTrainer,
    architecture_space: ArchitectureSpace,
    hyperparameters: TrainingHyperparameters,
    count: int,
    generator: torch.Generator,
) -> list[CandidateSpec]:
    r"""``count`` candidates with architectures sampled uniformly from
    ``architecture_space`` and fresh seeds, numbered from ``trainer.next_id``."""
    return [
        CandidateSpec(
            candidate_id=trainer.next_id + index,
            architecture=architecture_space.sample(generator),
            hyperparameters=hyperparameters,
            seed=draw_seed(generator),
        )
        for index in range(count)
    ]


def nes_random_search(
    trainer: CandidateTrainer,
    architecture_space: ArchitectureSpace,
    hyperparameters: TrainingHyperparameters,
    *,
    pool_size: int,
    ensemble_size: int,
    generator: torch.Generator,
    shifted_validation: ValidationScorer | None = None,
) -> tuple[list[TrainedCandidate], SelectionResult]:
    r"""NES-RS.

    Args:
        trainer: Trains candidates and records the history.
        architecture_space: Where architectures are sampled.
        hyperparameters: The training hyperparameters of every candidate.
        pool_size: ``K_pool``, the number of architectures trained.
        ensemble_size: ``M``, the number of members selected.
        generator: The source of every random decision.
        shifted_validation: The validation scorer of a shifted validation set
            ``D_val^shift`` that ForwardSelect uses instead of the plain one, e.g.
            ``CandidateScorer(X_shift, Y_shift, trainer.settings)`` with ``X_shift``
            (``v' x d``) and ``Y_shift`` (``v' x m``) from
            :func:`~botorch_nn_uq.ensembles.shifts.shift_validation_set` of the plain
            validation rows; ``None``: the plain validation set.

    Returns:
        The usable candidates and the ForwardSelect result (indices into them) on the
        shifted validation set if one is given. Other validation sets (other
        severities) select from the same candidates with
        :func:`~botorch_nn_uq.ensembles.shift_adaptation.select_from_pool`.
    """
    specs = random_candidate_specs(
        trainer, architecture_space, hyperparameters, pool_size, generator
    )
    return select_from_pool(
        trainer.train(specs), ensemble_size, _final_validation(shifted_validation)
    )


def nes_regularized_evolution(
    trainer: CandidateTrainer,
    architecture_space: ArchitectureSpace,
    hyperparameters: TrainingHyperparameters,
    *,
    pool_size: int,
    ensemble_size: int,
    population_size: int,
    num_parents: int,
    children_per_generation: int,
    generator: torch.Generator,
    shifted_validation: ValidationScorer | None = None,
    evolve_on_plain_validation: bool = False,
) -> tuple[list[TrainedCandidate], SelectionResult]:
    r"""NES-RE.

    Args:
        trainer: Trains candidates and records the history.
        architecture_space: Where architectures are sampled and mutated.
        hyperparameters: The training hyperparameters of every candidate.
        pool_size: ``K_pool``, the total number of networks trained (population
            included).
        ensemble_size: ``M``, the number of members selected at the end.
        population_size: ``P``, the population size (the paper: 50).
        num_parents: ``m``, the size of the ForwardSelect parent set (the paper: 10).
        children_per_generation: Children proposed (and trained, e.g. in parallel)
            from one population state; 1 is the sequential algorithm.
        generator: The source of every random decision.
        shifted_validation: The validation scorer of a shifted validation set
            ``D_val^shift`` (the paper: severity 5), e.g. ``CandidateScorer(X_shift,
            Y_shift, trainer.settings)`` with ``X_shift`` (``v' x d``) and ``Y_shift``
            (``v' x m``) from :func:`~botorch_nn_uq.ensembles.shifts.shift_validation_set`
            of the plain validation rows. Each generation selects its parents on the
            plain or on this set, drawn uniformly (from a stream seeded from
            ``generator`` without advancing it), and the final ForwardSelect runs on
            it; ``None``: the plain validation set throughout.
        evolve_on_plain_validation: NES-RE-0: every generation selects its parents on
            the plain validation set, and ``shifted_validation`` serves only the final
            selection.

    Returns:
        The usable candidates of the whole pool and the ForwardSelect result (on the
        shifted validation set if one is given). Other validation sets (other
        severities) select from the same pool with
        :func:`~botorch_nn_uq.ensembles.shift_adaptation.select_from_pool`.
    """
    if not 1 <= population_size <= pool_size:
        raise ValueError(
            f"population_size must be in [1, pool_size = {pool_size}]; got {population_size}."
        )
    if num_parents < 1 or children_per_generation < 1:
        raise ValueError("num_parents and children_per_generation must be positive.")
    check_boolean("evolve_on_plain_validation", evolve_on_plain_validation)
    shift_draws = None
    if shifted_validation is not None and not evolve_on_plain_validation:
        shift_draws = _independent_stream(generator)
    pool = trainer.train(
        random_candidate_specs(
            trainer, architecture_space, hyperparameters, population_size, generator
        )
    )
    population = deque(pool)
    while len(pool) < pool_size:
        usable = usable_candidates(list(population))
        validation = stack_log_likelihoods
        if shift_draws is not None and bool(torch.randint(2, (1,), generator=shift_draws)):
            validation = shifted_validation
        parents = forward_select(validation(usable), num_parents).indices.tolist()
        children = []
        for index in range(min(children_per_generation, pool_size - len(pool))):
            pick = int(torch.randint(len(parents), (1,), generator=generator))
            parent = usable[parents[pick]]
            children.append(
                CandidateSpec(
                    candidate_id=trainer.next_id + index,
                    architecture=architecture_space.mutate(parent.spec.architecture, generator),
                    hyperparameters=hyperparameters,
                    seed=draw_seed(generator),
                )
            )
        for child in trainer.train(children):
            pool.append(child)
            population.append(child)
            population.popleft()
    return select_from_pool(pool, ensemble_size, _final_validation(shifted_validation))


def _final_validation(shifted_validation: ValidationScorer | None) -> ValidationScorer:
    r"""The scorer of the final selection: the shifted set's if there is one."""
    return stack_log_likelihoods if shifted_validation is None else shifted_validation


def _independent_stream(generator: torch.Generator) -> torch.Generator:
    r"""A generator seeded from a copy of ``generator``'s state, which is left as it is:
    draws from it do not change the search's own stream. Its seed has 63 bits, so it
    does not coincide with a member seed (31 bits) drawn from the same state."""
    copy = torch.Generator(device=generator.device)
    copy.set_state(generator.get_state())
    seed = torch.randint(2**63 - 1, (1,), generator=copy, device=copy.device)
    return torch.Generator().manual_seed(int(seed))
