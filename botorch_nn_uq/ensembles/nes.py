r"""Neural Ensemble Search (Zaidi et al., 2021): ensembles whose members differ in
architecture.

- :func:`nes_random_search` (NES-RS): sample ``pool_size`` architectures, train them,
  ForwardSelect ``ensemble_size`` members (without replacement).
- :func:`nes_regularized_evolution` (NES-RE): a population of trained networks evolves
  by mutation; each parent is drawn uniformly from ForwardSelect(population, m), the
  child is trained from scratch and joins the population and the pool, and the OLDEST
  population member leaves. The final ensemble is ForwardSelect over the whole pool
  (every network ever trained), not over the final population.

All candidates share one set of training hyperparameters (NES searches architectures
only). Every random decision comes from ``generator``, and a generation's children are
proposed before any of them is trained, so the search is identical whichever executor
trains the candidates.
"""

from __future__ import annotations

from collections import deque

import torch

from botorch_nn_uq.ensembles.architecture_space import ArchitectureSpace
from botorch_nn_uq.ensembles.history import (
    CandidateTrainer,
    stack_log_likelihoods,
    usable_candidates,
)
from botorch_nn_uq.ensembles.hyperparameter_space import TrainingHyperparameters
from botorch_nn_uq.ensembles.pool import CandidateSpec, TrainedCandidate
from botorch_nn_uq.ensembles.selection import SelectionResult, forward_select
from botorch_nn_uq.training.seeding import draw_seed


def select_final(
    candidates: list[TrainedCandidate], ensemble_size: int
) -> tuple[list[TrainedCandidate], SelectionResult]:
    r"""ForwardSelect ``ensemble_size`` members from the usable ``candidates``; returns
    the usable candidates and the selection (indices into them)."""
    usable = usable_candidates(candidates)
    return usable, forward_select(stack_log_likelihoods(usable), ensemble_size)


def _random_specs(
    trainer: CandidateTrainer,
    architecture_space: ArchitectureSpace,
    hyperparameters: TrainingHyperparameters,
    count: int,
    generator: torch.Generator,
) -> list[CandidateSpec]:
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
) -> tuple[list[TrainedCandidate], SelectionResult]:
    r"""NES-RS.

    Args:
        trainer: Trains candidates and records the history.
        architecture_space: Where architectures are sampled.
        hyperparameters: The training hyperparameters of every candidate.
        pool_size: ``K_pool``, the number of architectures trained.
        ensemble_size: ``M``, the number of members selected.
        generator: The source of every random decision.

    Returns:
        The usable candidates and the ForwardSelect result (indices into them).
    """
    specs = _random_specs(trainer, architecture_space, hyperparameters, pool_size, generator)
    return select_final(trainer.train(specs), ensemble_size)


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

    Returns:
        The usable candidates of the whole pool and the ForwardSelect result.
    """
    if not 1 <= population_size <= pool_size:
        raise ValueError(
            f"population_size must be in [1, pool_size = {pool_size}]; got {population_size}."
        )
    if num_parents < 1 or children_per_generation < 1:
        raise ValueError("num_parents and children_per_generation must be positive.")
    pool = trainer.train(
        _random_specs(trainer, architecture_space, hyperparameters, population_size, generator)
    )
    population = deque(pool)
    while len(pool) < pool_size:
        usable = usable_candidates(list(population))
        parents = forward_select(stack_log_likelihoods(usable), num_parents).indices.tolist()
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
    return select_final(pool, ensemble_size)
