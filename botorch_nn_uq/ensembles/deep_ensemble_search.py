r"""DeepEns (RS), the deep-ensemble baseline of Neural Ensemble Search (Zaidi et al.,
2021, Section 5 and Appendix C.3): a deep ensemble of the architecture that random
search finds best.

Random search trains ``pool_size`` architectures sampled uniformly (a pool like
NES-RS's) and keeps the architecture of the single network with the lowest validation
loss (:func:`best_architecture`); the ensemble is ``ensemble_size`` new members of that
architecture, re-initialised with fresh seeds and trained from scratch, with uniform
weights (:func:`train_deep_ensemble`). Unlike NES, the pool's networks are not members:
only their architecture is.

Under dataset shift the architecture is the one with the lowest loss on the shifted
validation set ``D_val^shift`` (the paper: "selected based on its loss over
``D_val^shift``"). Picking the architecture for another validation set (another
severity) trains nothing (:func:`best_architecture` on the same pool); its members, new
networks, must then be trained.
"""

from __future__ import annotations

import torch

from botorch_nn_uq.checks import check_integer
from botorch_nn_uq.ensembles.architecture_space import Architecture, ArchitectureSpace
from botorch_nn_uq.ensembles.history import (
    CandidateTrainer,
    stack_log_likelihoods,
    usable_candidates,
)
from botorch_nn_uq.ensembles.hyperparameter_space import TrainingHyperparameters
from botorch_nn_uq.ensembles.nes import random_candidate_specs
from botorch_nn_uq.ensembles.pool import CandidateSpec, TrainedCandidate
from botorch_nn_uq.ensembles.selection import SelectionResult
from botorch_nn_uq.ensembles.shift_adaptation import ValidationScorer
from botorch_nn_uq.training.seeding import draw_seed


def deep_ensemble_random_search(
    trainer: CandidateTrainer,
    architecture_space: ArchitectureSpace,
    hyperparameters: TrainingHyperparameters,
    *,
    pool_size: int,
    ensemble_size: int,
    generator: torch.Generator,
    shifted_validation: ValidationScorer | None = None,
) -> tuple[list[TrainedCandidate], SelectionResult]:
    r"""DeepEns (RS): random search for the best single architecture, then a deep
    ensemble of it.

    Args:
        trainer: Trains candidates and records the history (the pool, then the members).
        architecture_space: Where architectures are sampled.
        hyperparameters: The training hyperparameters of every network.
        pool_size: The number of architectures the random search trains.
        ensemble_size: ``M``, the number of members, each trained from scratch.
        generator: The source of every random decision.
        shifted_validation: The validation scorer of a shifted validation set
            ``D_val^shift`` on which the architecture is chosen, e.g.
            ``CandidateScorer(X_shift, Y_shift, trainer.settings)`` with ``X_shift``
            (``v' x d``) and ``Y_shift`` (``v' x m``) from
            :func:`~botorch_nn_uq.ensembles.shifts.shift_validation_set`; ``None``: the
            plain validation set.

    Returns:
        The usable members and their
        :class:`~botorch_nn_uq.ensembles.selection.SelectionResult` (every member,
        uniform weights, the losses on the validation set of the choice).
    """
    check_integer("pool_size", pool_size)
    pool = trainer.train(
        random_candidate_specs(trainer, architecture_space, hyperparameters, pool_size, generator)
    )
    validation = stack_log_likelihoods if shifted_validation is None else shifted_validation
    return train_deep_ensemble(
        trainer,
        best_architecture(pool, validation),
        hyperparameters,
        ensemble_size=ensemble_size,
        generator=generator,
        validation=validation,
    )


def best_architecture(
    pool: list[TrainedCandidate], validation: ValidationScorer = stack_log_likelihoods
) -> Architecture:
    r"""The architecture of the usable candidate with the lowest mean validation NLL
    (ties: the earliest candidate). Trains nothing.

    Args:
        pool: Trained candidates (failed ones included).
        validation: The validation scorer (default: the plain validation set; a
            :class:`~botorch_nn_uq.ensembles.shift_adaptation.CandidateScorer` for
            another set).

    Returns:
        The architecture.

    Raises:
        NonFiniteLossError: If every candidate failed.
        ValueError: If no candidate has a finite loss on the validation set.
    """
    usable = usable_candidates(pool)
    losses = -validation(usable).mean(dim=-1)
    # argmin returns the first of equal minima: ties go to the earliest candidate.
    best = int(torch.argmin(losses))
    if not torch.isfinite(losses[best]):
        raise ValueError("No candidate has a finite loss on the validation set.")
    return usable[best].spec.architecture


def train_deep_ensemble(
    trainer: CandidateTrainer,
    architecture: Architecture,
    hyperparameters: TrainingHyperparameters,
    *,
    ensemble_size: int,
    generator: torch.Generator,
    validation: ValidationScorer = stack_log_likelihoods,
) -> tuple[list[TrainedCandidate], SelectionResult]:
    r"""A deep ensemble: ``ensemble_size`` members of ``architecture``, each with a
    fresh seed drawn from ``generator`` (its own initialisation and data order), trained
    independently and weighted uniformly.

    Args:
        trainer: Trains the members and records them in the history.
        architecture: The members' architecture.
        hyperparameters: Their training hyperparameters.
        ensemble_size: ``M``, the number of members.
        generator: The source of the members' seeds.
        validation: The validation scorer of the reported losses.

    Returns:
        The usable members and their
        :class:`~botorch_nn_uq.ensembles.selection.SelectionResult`: every usable
        member, uniform weights, and as ``loss_history`` the validation NLL of the first
        ``t`` members' uniform mixture for ``t = 1, 2, ...``.

    Raises:
        NonFiniteLossError: If every member failed.
    """
    check_integer("ensemble_size", ensemble_size)
    specs = [
        CandidateSpec(
            candidate_id=trainer.next_id + index,
            architecture=architecture,
            hyperparameters=hyperparameters,
            seed=draw_seed(generator),
        )
        for index in range(ensemble_size)
    ]
    members = usable_candidates(trainer.train(specs))
    scores = validation(members)
    sizes = torch.arange(1, len(members) + 1, dtype=scores.dtype)
    # Row t of the cumulative log-sum is the first t + 1 members' mixture, unnormalised.
    prefix_mixtures = torch.logcumsumexp(scores, dim=0) - sizes.log().unsqueeze(-1)
    loss_history = (-prefix_mixtures.mean(dim=-1)).tolist()
    return members, SelectionResult(
        indices=torch.arange(len(members)),
        weights=torch.full((len(members),), 1 / len(members), dtype=scores.dtype),
        loss_history=loss_history,
        loss=loss_history[-1],
    )
