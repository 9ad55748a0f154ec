r"""AutoDEUQ (Egele et al., 2022): a joint search over architectures and training
hyperparameters, then Caruana selection with replacement from the catalog of every
trained model.

- Architectures evolve by aging evolution (DeepHyper's regularised evolution): until
  the population holds ``population_size`` models, architectures are sampled at random;
  afterwards each new architecture mutates (one decision variable) the winner of a
  tournament of ``tournament_size`` population members drawn at random, and the oldest
  member leaves the population when a new one joins.
- Training hyperparameters come from a model-based sampler: after
  ``num_initial_random`` random configurations, a BoTorch ``SingleTaskGP`` on the
  unit-cube encoding of the hyperparameters models the validation NLL, and each new
  configuration minimises the lower confidence bound ``mean - kappa * std`` over
  ``num_acquisition_candidates`` random configurations. A generation of
  ``generation_size`` configurations is proposed with the constant liar: after each pick, the
  GP is conditioned on the best NLL observed so far at the picked point.
- Every model is checkpointed at its minimum validation loss; the ensemble is
  ``caruana_select`` (with replacement, ``ensemble_size`` distinct members at most) over
  the whole catalog, and its members predict means and variances, so the posterior
  splits aleatoric and epistemic uncertainty.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence

import torch
from botorch.fit import fit_gpytorch_mll
from botorch.models import SingleTaskGP
from botorch.models.transforms import Standardize
from gpytorch.mlls import ExactMarginalLogLikelihood

from botorch_nn_uq.ensembles.architecture_space import ArchitectureSpace
from botorch_nn_uq.ensembles.history import (
    CandidateTrainer,
    stack_log_likelihoods,
    usable_candidates,
)
from botorch_nn_uq.ensembles.hyperparameter_space import (
    HyperparameterSpace,
    TrainingHyperparameters,
)
from botorch_nn_uq.ensembles.pool import CandidateSpec, TrainedCandidate
from botorch_nn_uq.ensembles.selection import SelectionResult, caruana_select
from botorch_nn_uq.training.seeding import draw_seed, seeded


def propose_hyperparameters(
    space: HyperparameterSpace,
    observations: Sequence[tuple[TrainingHyperparameters, float]],
    num_proposals: int,
    generator: torch.Generator,
    *,
    num_initial_random: int = 10,
    kappa: float = 1.96,
    num_acquisition_candidates: int = 512,
) -> list[TrainingHyperparameters]:
    r"""Propose ``num_proposals`` training configurations (constant-liar batch).

    Args:
        space: The hyperparameter space.
        observations: Earlier configurations with their validation NLL (non-finite
            values, from failed trainings, are ignored by the model).
        num_proposals: How many configurations to propose.
        generator: The source of every random decision.
        num_initial_random: Below this many finite observations, propose at random.
        kappa: The exploration weight of the lower confidence bound.
        num_acquisition_candidates: Random configurations scored per proposal.

    Returns:
        The proposed configurations.
    """
    finite = [(h, y) for h, y in observations if math.isfinite(y)]
    if len(finite) < num_initial_random:
        return [space.sample(generator) for _ in range(num_proposals)]
    train_X = torch.stack([space.encode(h) for h, _ in finite]).to(torch.float64)
    train_Y = torch.tensor([[y] for _, y in finite], dtype=torch.float64)
    lie = train_Y.min()
    # BoTorch's GP fit draws from torch's global generator (on a failed attempt it
    # resamples the hyperparameters from their priors) and takes no generator: seeded()
    # fixes the global stream from this search's generator and restores it afterwards.
    with seeded(draw_seed(generator)):
        model = SingleTaskGP(train_X, train_Y, outcome_transform=Standardize(1))
        fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
    proposals = []
    for _ in range(num_proposals):
        candidates = [space.sample(generator) for _ in range(num_acquisition_candidates)]
        encoded = torch.stack([space.encode(h) for h in candidates]).to(torch.float64)
        with torch.no_grad():
            posterior = model.posterior(encoded.unsqueeze(-2))
            bound = posterior.mean.view(-1) - kappa * posterior.variance.view(-1).sqrt()
        best = int(bound.argmin())
        proposals.append(candidates[best])
        # Constant liar: pretend the pick scored the best NLL so far, so the next pick
        # of this generation goes elsewhere.
        model = model.condition_on_observations(encoded[best : best + 1], lie.view(1, 1))
    return proposals


def _tournament_winner(
    population: Sequence[TrainedCandidate], tournament_size: int, generator: torch.Generator
) -> TrainedCandidate:
    usable = [candidate for candidate in population if not candidate.failed]
    size = min(tournament_size, len(usable))
    entrants = torch.randperm(len(usable), generator=generator)[:size].tolist()
    return min((usable[i] for i in entrants), key=lambda candidate: candidate.validation_nll)


def autodeuq_search(
    trainer: CandidateTrainer,
    architecture_space: ArchitectureSpace,
    hyperparameter_space: HyperparameterSpace,
    *,
    num_candidates: int,
    ensemble_size: int,
    population_size: int,
    tournament_size: int,
    generation_size: int,
    generator: torch.Generator,
    num_initial_random: int = 10,
    kappa: float = 1.96,
    num_acquisition_candidates: int = 512,
    max_selection_iterations: int | None = None,
) -> tuple[list[TrainedCandidate], SelectionResult]:
    r"""Run AutoDEUQ's joint search and select the ensemble (see the module docstring).

    Args:
        trainer: Trains candidates and records the history.
        architecture_space: The architecture space.
        hyperparameter_space: The training-hyperparameter space.
        num_candidates: The catalog size (models trained in total; the paper: 500).
        ensemble_size: ``K``, the most distinct members (the paper: 5).
        population_size: The aging population's size (DeepHyper's default: 100).
        tournament_size: Population members per tournament (DeepHyper's default: 10).
        generation_size: Models proposed per generation (trained together or in parallel).
        generator: The source of every random decision.
        num_initial_random: Random hyperparameter configurations before the model-based
            sampler starts.
        kappa: The lower confidence bound's exploration weight.
        num_acquisition_candidates: Random configurations scored per proposal.
        max_selection_iterations: Cap on the additions of the Caruana selection.

    Returns:
        The usable candidates of the catalog and the Caruana selection (indices into
        them).
    """
    if population_size < 1 or tournament_size < 1 or generation_size < 1:
        raise ValueError("population_size, tournament_size and generation_size must be positive.")
    catalog: list[TrainedCandidate] = []
    population: deque[TrainedCandidate] = deque(maxlen=population_size)
    while len(catalog) < num_candidates:
        size = min(generation_size, num_candidates - len(catalog))
        architectures = []
        for _ in range(size):
            if len(population) < population_size or all(c.failed for c in population):
                architectures.append(architecture_space.sample(generator))
            else:
                winner = _tournament_winner(population, tournament_size, generator)
                architectures.append(architecture_space.mutate(winner.spec.architecture, generator))
        hyperparameters = propose_hyperparameters(
            hyperparameter_space,
            [(c.spec.hyperparameters, c.validation_nll) for c in catalog],
            size,
            generator,
            num_initial_random=num_initial_random,
            kappa=kappa,
            num_acquisition_candidates=num_acquisition_candidates,
        )
        specs = [
            CandidateSpec(
                candidate_id=trainer.next_id + index,
                architecture=architecture,
                hyperparameters=configuration,
                seed=draw_seed(generator),
            )
            for index, (architecture, configuration) in enumerate(
                zip(architectures, hyperparameters, strict=True)
            )
        ]
        trained = trainer.train(specs)
        catalog.extend(trained)
        population.extend(trained)
    usable = usable_candidates(catalog)
    selection = caruana_select(
        stack_log_likelihoods(usable), ensemble_size, max_selection_iterations
    )
    return usable, selection
