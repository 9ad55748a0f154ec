"""Searched ensembles as BoTorch models: Neural Ensemble Search (NES-RS, NES-RE) and
AutoDEUQ, built by :mod:`botorch_nn_uq.ensembles` and served by
:class:`~botorch_nn_uq.models.member_ensemble.MemberEnsemble`'s posterior.

Every fit holds out a random ``validation_fraction`` of the rows
(:func:`~botorch_nn_uq.ensembles.holdout.holdout_size` rows), trains the candidates on
the rest (each checkpointed at its minimum validation loss), selects on the held-out
rows and serves the selected networks as they are (no refit), as both papers do. The
fitted model serves the posterior, aleatoric / epistemic decomposition and API of every
:class:`~botorch_nn_uq.models.member_ensemble.MemberEnsemble`, with members that may
differ in architecture; ``search_history`` records every candidate (architecture,
hyperparameters, seed, validation NLL, selection weight) and the final ensemble's
ensemble / average-member / oracle validation NLL.

Pool training runs in-process unless ``executor`` is given (e.g.
:class:`~botorch_nn_uq.ensembles.pool.RayExecutor`), and ``resume_from`` continues an
interrupted search from its saved :class:`~botorch_nn_uq.ensembles.history.SearchHistory`.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from abc import abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor

from botorch_nn_uq.checks import (
    NON_NEGATIVE,
    OPEN_UNIT_INTERVAL,
    check_boolean_fields,
    check_integer_fields,
    check_real_fields,
)
from botorch_nn_uq.ensembles.architecture_space import ArchitectureSpace
from botorch_nn_uq.ensembles.autodeuq import autodeuq_search
from botorch_nn_uq.ensembles.history import (
    CandidateTrainer,
    SearchHistory,
    ensemble_diagnostics,
    stack_log_likelihoods,
)
from botorch_nn_uq.ensembles.holdout import holdout_size
from botorch_nn_uq.ensembles.hyperparameter_space import (
    HyperparameterSpace,
    TrainingHyperparameters,
)
from botorch_nn_uq.ensembles.nes import nes_random_search, nes_regularized_evolution
from botorch_nn_uq.ensembles.pool import (
    PoolData,
    PoolExecutor,
    PoolSettings,
    TrainedCandidate,
    assemble_ensemble,
)
from botorch_nn_uq.ensembles.selection import SelectionResult
from botorch_nn_uq.ensembles.shift_adaptation import CandidateScorer, select_from_pool
from botorch_nn_uq.ensembles.shifts import check_severity, shift_validation_set
from botorch_nn_uq.models.card import (
    FINITE_FUNCTION_SAMPLES,
    BODefaults,
    FastSettings,
    ModelCard,
)
from botorch_nn_uq.models.member_ensemble import (
    ENSEMBLE_FAMILY,
    MemberEnsemble,
    MemberEnsembleHyperparameters,
)
from botorch_nn_uq.training.seeding import draw_seed


def _default_architecture_space() -> ArchitectureSpace:
    return ArchitectureSpace(num_nodes=3)


@dataclass(frozen=True)
class SearchedEnsembleHyperparameters(MemberEnsembleHyperparameters):
    r"""Settings shared by the searched ensembles: those of
    :class:`~botorch_nn_uq.models.member_ensemble.MemberEnsembleHyperparameters`
    (``ensemble_size`` is the most distinct members of the final ensemble; with
    ``likelihood="mse"`` the selection scores each candidate with its own validation
    residual variance) plus:

    Args:
        pool_size: Candidates trained in total.
        epochs: The most epochs per candidate (early stopping may end sooner).
        max_steps: A budget in optimizer steps per candidate (whichever of ``epochs``
            and ``max_steps`` ends first), so a search costs the same whatever the
            number of training points; ``None``: ``epochs`` only.
        validation_fraction: The fraction of the rows held out for validation
            (:func:`~botorch_nn_uq.ensembles.holdout.holdout_size` rows): every
            candidate trains on the rest, is checkpointed at its lowest loss on them,
            and the selection scores the candidates on them.
        l2_regularization: Keras-style L2 ``lambda`` of every candidate.
        lr_reduction_factor: The plateau reduction factor of the learning rate.
        architecture_space: The architectures searched (default: AutoDEUQ's MLP space
            with 3 variable nodes, the paper's setting for small problems; UCI used 5).
        executor: Where candidate groups train (``None``: in-process).
        resume_from: A saved history of the same search (seed, data, settings) to
            continue.
        checkpoint_path: Save the search history to this file after every trained
            group of candidates (resume an interrupted fit with
            ``resume_from=SearchHistory.load(checkpoint_path)``).
    """

    pool_size: int = 20
    epochs: int = 300
    max_steps: int | None = None
    validation_fraction: float = 0.2
    l2_regularization: float = 0.0
    lr_reduction_factor: float = 0.1
    architecture_space: ArchitectureSpace = field(default_factory=_default_architecture_space)
    executor: PoolExecutor | None = None
    resume_from: SearchHistory | None = None
    checkpoint_path: str | Path | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_integer_fields(self, "pool_size", "epochs")
        check_integer_fields(self, "max_steps", optional=True)
        check_real_fields(
            self, "validation_fraction", "lr_reduction_factor", interval=OPEN_UNIT_INTERVAL
        )
        check_real_fields(self, "l2_regularization", interval=NON_NEGATIVE)
        if not isinstance(self.architecture_space, ArchitectureSpace):
            raise TypeError("architecture_space must be an ArchitectureSpace.")
        if self.executor is not None and not callable(getattr(self.executor, "map", None)):
            raise TypeError(
                "executor must be a PoolExecutor (an object with a map method) or None; got "
                f"{self.executor!r}."
            )
        if self.resume_from is not None and not isinstance(self.resume_from, SearchHistory):
            raise TypeError("resume_from must be a SearchHistory (SearchHistory.load(path)).")
        if self.checkpoint_path is not None and not isinstance(
            self.checkpoint_path, (str, os.PathLike)
        ):
            raise TypeError(
                f"checkpoint_path must be a str, a path or None; got {self.checkpoint_path!r}."
            )

    def pool_settings(self) -> PoolSettings:
        r"""The settings every candidate trains with."""
        return PoolSettings(
            epochs=self.epochs,
            max_steps=self.max_steps,
            gaussian_head=self.likelihood == "gaussian",
            min_std=self.min_std,
            l2_regularization=self.l2_regularization,
            lr_reduction_factor=self.lr_reduction_factor,
        )


@dataclass(frozen=True)
class NESHyperparameters(SearchedEnsembleHyperparameters):
    r"""Hyperparameters of the NES models: those of
    :class:`SearchedEnsembleHyperparameters` plus the one training configuration
    shared by every candidate (NES searches architectures only).

    Args:
        learning_rate: Adam's (initial) learning rate.
        batch_size: Mini-batch size.
        optimizer: One of ``botorch_nn_uq.training.OPTIMIZERS``.
        lr_reduction_patience: Epochs on a plateau before the learning rate drops.
        early_stopping_patience: Epochs without improvement before training stops.
        population_size: NES-RE's population ``P`` (the paper: 50).
        num_parents: NES-RE's parent set size ``m`` (the paper: 10).
        children_per_generation: NES-RE's children proposed per population state.
        validation_shift_severity: Adapt the ensemble to a dataset shift expected at
            prediction time (Zaidi et al., 2021, Section 4.3): ``1``-``5`` builds the
            shifted validation set ``D_val^shift`` of that severity from the held-out
            rows (:func:`~botorch_nn_uq.ensembles.shifts.shift_validation_set`: feature
            noise and quantisation, scaled by the training rows' spread, drawn from a
            stream seeded by the fit's seed); the final ForwardSelect runs on it, and
            NES-RE picks each generation's parents on ``D_val`` or on it, drawn
            uniformly (the paper uses severity 5). ``0``: no shift, the plain
            selection. :meth:`NeuralEnsembleSearch.reselect` selects again for another
            severity from the same trained pool.
        evolve_on_plain_validation: NES-RE only (NES-RE-0 in the paper): every
            generation picks its parents on ``D_val``, so ``D_val^shift`` serves the
            final selection alone.
    """

    learning_rate: float = 1e-2
    batch_size: int = 32
    optimizer: str = "adam"
    lr_reduction_patience: int = 20
    early_stopping_patience: int = 40
    population_size: int = 10
    num_parents: int = 5
    children_per_generation: int = 2
    validation_shift_severity: int = 0
    evolve_on_plain_validation: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        self.training_hyperparameters()
        check_integer_fields(self, "population_size", "num_parents", "children_per_generation")
        check_severity(self.validation_shift_severity, "validation_shift_severity")
        check_boolean_fields(self, "evolve_on_plain_validation")

    def training_hyperparameters(self) -> TrainingHyperparameters:
        r"""The shared training configuration (validated there)."""
        return TrainingHyperparameters(
            learning_rate=self.learning_rate,
            batch_size=self.batch_size,
            optimizer=self.optimizer,
            lr_reduction_patience=self.lr_reduction_patience,
            early_stopping_patience=self.early_stopping_patience,
        )


@dataclass(frozen=True)
class AutoDEUQHyperparameters(SearchedEnsembleHyperparameters):
    r"""Hyperparameters of :class:`AutoDEUQ`: those of
    :class:`SearchedEnsembleHyperparameters` plus:

    Args:
        hyperparameter_space: The training hyperparameters searched (default:
            AutoDEUQ's space with batch sizes 16-256, which keeps epochs affordable on a
            CPU; the paper's range starts at 1).
        population_size: The aging population (DeepHyper: 100).
        tournament_size: Members per tournament (DeepHyper: 10).
        generation_size: Candidates proposed per generation (trained together, or in
            parallel on an executor).
        num_initial_random: Random configurations before the GP sampler starts.
        kappa: The sampler's lower-confidence-bound weight.
        num_acquisition_candidates: Configurations scored per proposal.
        max_selection_iterations: Cap on the Caruana additions, at least 2 (``None``: 10
            per member).
    """

    hyperparameter_space: HyperparameterSpace = field(
        default_factory=lambda: HyperparameterSpace(batch_size=(16, 256))
    )
    population_size: int = 10
    tournament_size: int = 3
    generation_size: int = 4
    num_initial_random: int = 8
    kappa: float = 1.96
    num_acquisition_candidates: int = 256
    max_selection_iterations: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.hyperparameter_space, HyperparameterSpace):
            raise TypeError("hyperparameter_space must be a HyperparameterSpace.")
        check_integer_fields(
            self,
            "population_size",
            "tournament_size",
            "generation_size",
            "num_initial_random",
            "num_acquisition_candidates",
        )
        check_real_fields(self, "kappa", interval=NON_NEGATIVE)
        # Checked here, not when the selection runs after the whole search has trained;
        # one addition would select one member, a posterior without epistemic spread.
        check_integer_fields(self, "max_selection_iterations", minimum=2, optional=True)


class SearchedEnsemble(MemberEnsemble):
    r"""Base of the searched ensembles: split, search, assemble (see the module
    docstring). Subclasses name the ``method`` and implement :meth:`_search`.

    With known observation noise ``train_Yvar``, the variances follow their rows into the
    training and validation splits: every candidate trains on them as a
    :class:`~botorch_nn_uq.models.ensemble.DeepEnsemble`'s members do, and the
    validation log-likelihoods that select the members use the validation rows' known
    variances (the likelihood the model serves), see
    :mod:`botorch_nn_uq.models.known_noise`."""

    method: ClassVar[str]
    # Two held-out and two training rows (see `holdout_size`).
    min_training_points = 4
    # The search chooses the architectures (the checkpoint describes them), so only the
    # hyperparameters of every ensemble shape the served network.
    fit_records = ("search_history", "pool_data")

    def _build_network(self, input_dim: int, output_dim: int, generator: torch.Generator) -> None:
        r"""None: the search chooses the members (``warm_start`` is not supported)."""
        return None

    def _fit(
        self, train_X: Tensor, train_Y: Tensor, generator: torch.Generator, progress: bool
    ) -> None:
        hp = self.hyperparameters
        num_data = train_X.shape[0]
        num_validation = holdout_size(num_data, hp.validation_fraction)
        order = torch.randperm(num_data, generator=generator)
        validation, training = order[:num_validation], order[num_validation:]
        Yvar = self.transformed_train_Yvar
        data = PoolData(
            train_X=train_X[training],
            train_Y=train_Y[training],
            validation_X=train_X[validation],
            validation_Y=train_Y[validation],
            train_Yvar=None if Yvar is None else Yvar[training],
            validation_Yvar=None if Yvar is None else Yvar[validation],
        )
        self.pool_data = data
        settings = hp.pool_settings()
        trainer = CandidateTrainer(
            self.method,
            data,
            settings,
            executor=hp.executor,
            resume_from=hp.resume_from,
            progress_total=hp.pool_size if progress else None,
            checkpoint_path=hp.checkpoint_path,
        )
        # The search has a generator of its own, seeded from the fit's: its decisions
        # (and the member seeds it hands to the executors as integers) form one stream.
        search_generator = torch.Generator().manual_seed(draw_seed(generator))
        candidates, selection = self._search(trainer, search_generator)
        self.search_history = trainer.finish(candidates, selection)
        chosen = [candidates[i] for i in selection.indices.tolist()]
        network, weights = assemble_ensemble(
            chosen, selection.weights, train_X.shape[-1], train_Y.shape[-1], settings
        )
        self._serve_members(network, weights, train_X, train_Y)

    @abstractmethod
    def _search(
        self, trainer: CandidateTrainer, generator: torch.Generator
    ) -> tuple[list[TrainedCandidate], SelectionResult]:
        r"""Run the search; returns the usable candidates and the final selection."""

    def search_summary(self) -> list[dict[str, Any]]:
        r"""One plain dict per candidate of the search (e.g. for ``pandas.DataFrame``)."""
        return self.search_history.records()


class NeuralEnsembleSearch(SearchedEnsemble):
    r"""Base of the Neural Ensemble Search models (NES-RS and NES-RE): ForwardSelect on
    the held-out rows, or on a shifted copy of them ``D_val^shift`` for an expected
    dataset shift (``validation_shift_severity``), and :meth:`reselect` for another
    severity from the same trained pool.

    After a fit, ``pool_data`` holds the fit's split (the rows the candidates trained
    on and the held-out rows, in the transformed coordinates of the networks) and
    ``search_history`` the trained pool; both live in this process only (a checkpoint
    keeps the served members).
    """

    hyperparameter_class = NESHyperparameters

    def shifted_validation(self, severity: int) -> CandidateScorer | None:
        r"""The validation scorer of ``D_val^shift`` of ``severity`` built from this fit's
        held-out rows (``None`` for severity 0, the plain ``D_val``).

        The shift is drawn from a stream seeded by the fit's seed, the same for every
        severity, so the shifts of one fit are nested (the same noise, scaled up), and
        scaled by the spread of the rows the candidates trained on.

        Args:
            severity: ``0`` to :data:`~botorch_nn_uq.ensembles.shifts.MAX_SEVERITY`.
        """
        check_severity(severity, "validation_shift_severity")
        data = self._fitted_pool_data()
        if severity == 0:
            return None
        generator = torch.Generator().manual_seed(self.fit_seed)
        X_shift, Y_shift = shift_validation_set(
            data.validation_X, data.validation_Y, severity, generator, reference=data.train_X
        )
        return CandidateScorer(
            X_shift, Y_shift, self.hyperparameters.pool_settings(), Yvar=data.validation_Yvar
        )

    def reselect(self, validation_shift_severity: int) -> NeuralEnsembleSearch:
        r"""A copy of this fitted model that serves the ensemble ForwardSelect picks from
        the same trained pool on ``D_val^shift`` of another severity
        (:meth:`shifted_validation`; ``0``: the plain ``D_val``), without training: the
        paper's separate selection per severity. The copy's ``search_history`` records
        the new selection; this model is left as it is.

        Args:
            validation_shift_severity: ``0`` to
                :data:`~botorch_nn_uq.ensembles.shifts.MAX_SEVERITY`.

        Returns:
            The reselected model, with ``hyperparameters.validation_shift_severity`` set
            to the new severity.

        Example:
            >>> model = NESRegularizedEvolution(train_X, train_Y, validation_shift_severity=5)
            >>> model.fit(seed=0)
            >>> by_severity = {s: model.reselect(s) for s in range(6)}  # one pool
        """
        scorer = self.shifted_validation(validation_shift_severity)
        data = self._fitted_pool_data()
        if "search_history" not in self.__dict__:
            raise RuntimeError(f"{type(self).__name__}'s fit has not finished its search.")
        usable, selection = select_from_pool(
            self.search_history,
            self.hyperparameters.ensemble_size,
            stack_log_likelihoods if scorer is None else scorer,
        )
        chosen = [usable[index] for index in selection.indices.tolist()]
        # The copy shares the trained pool and its data, which it only reads.
        shared = {id(self.search_history): self.search_history, id(data): data}
        model = copy.deepcopy(self, memo=shared)
        model.hyperparameters = dataclasses.replace(
            self.hyperparameters, validation_shift_severity=validation_shift_severity
        )
        model.search_history = dataclasses.replace(
            self.search_history,
            selected_ids=[candidate.spec.candidate_id for candidate in chosen],
            selected_weights=selection.weights.tolist(),
            diagnostics=ensemble_diagnostics(
                stack_log_likelihoods(chosen), selection.weights.to(torch.float64)
            ),
        )
        settings = self.hyperparameters.pool_settings()
        train_X, train_Y = model.transformed_training_data()
        network, weights = assemble_ensemble(
            chosen, selection.weights, train_X.shape[-1], train_Y.shape[-1], settings
        )
        model._serve_members(network, weights, train_X, train_Y)
        return model.eval()

    def _fitted_pool_data(self) -> PoolData:
        r"""The fit's data split (set when a fit starts, before its search)."""
        data = self.__dict__.get("pool_data")
        if data is None:
            raise RuntimeError(
                f"{type(self).__name__} has no trained pool in this process: fit it first "
                "(a checkpoint keeps the served members, not the pool)."
            )
        return data


class NESRandomSearch(NeuralEnsembleSearch):
    r"""NES-RS: ``pool_size`` random architectures, ForwardSelect ``ensemble_size``.

    Args:
        train_X, train_Y, train_Yvar, input_transform, outcome_transform: As for every
            :class:`~botorch_nn_uq.models.member_ensemble.MemberEnsemble`.
        **hyperparameters: Fields of :class:`NESHyperparameters`.

    Example:
        >>> train_X = torch.rand(40, 2, dtype=torch.float64)
        >>> train_Y = train_X.sin().sum(-1, keepdim=True)
        >>> model = NESRandomSearch(train_X, train_Y, pool_size=6, epochs=50).fit(seed=0)
        >>> model.search_history.diagnostics.ensemble_nll  # validation NLL of the ensemble
    """

    method = "nes-rs"

    def _search(
        self, trainer: CandidateTrainer, generator: torch.Generator
    ) -> tuple[list[TrainedCandidate], SelectionResult]:
        hp = self.hyperparameters
        if hp.evolve_on_plain_validation:
            raise ValueError(
                "evolve_on_plain_validation is NES-RE's (NES-RE-0); NESRandomSearch does not "
                "evolve. Use NESRegularizedEvolution, or leave it False."
            )
        return nes_random_search(
            trainer,
            hp.architecture_space,
            hp.training_hyperparameters(),
            pool_size=hp.pool_size,
            ensemble_size=hp.ensemble_size,
            generator=generator,
            shifted_validation=self.shifted_validation(hp.validation_shift_severity),
        )


class NESRegularizedEvolution(NeuralEnsembleSearch):
    r"""NES-RE: regularised evolution of architectures (parents drawn uniformly from
    ForwardSelect(population, ``num_parents``), aging removal of the oldest), then
    ForwardSelect ``ensemble_size`` over every network trained.

    Args:
        train_X, train_Y, train_Yvar, input_transform, outcome_transform: As for every
            :class:`~botorch_nn_uq.models.member_ensemble.MemberEnsemble`.
        **hyperparameters: Fields of :class:`NESHyperparameters`.
    """

    method = "nes-re"

    def _search(
        self, trainer: CandidateTrainer, generator: torch.Generator
    ) -> tuple[list[TrainedCandidate], SelectionResult]:
        hp = self.hyperparameters
        return nes_regularized_evolution(
            trainer,
            hp.architecture_space,
            hp.training_hyperparameters(),
            pool_size=hp.pool_size,
            ensemble_size=hp.ensemble_size,
            population_size=min(hp.population_size, hp.pool_size),
            num_parents=hp.num_parents,
            children_per_generation=hp.children_per_generation,
            generator=generator,
            shifted_validation=self.shifted_validation(hp.validation_shift_severity),
            evolve_on_plain_validation=hp.evolve_on_plain_validation,
        )


class AutoDEUQ(SearchedEnsemble):
    r"""AutoDEUQ: aging evolution over architectures with a GP-based sampler over
    training hyperparameters, Caruana selection with replacement from the catalog.

    Caruana selection stops as soon as no addition strictly lowers the validation NLL,
    so on few validation points it can keep a single member, whose posterior then has
    no epistemic spread (the fit warns); check ``network.num_members`` (or
    ``search_history``) and use
    more data for validation, a larger pool, or :class:`NESRandomSearch` (ForwardSelect
    always keeps ``ensemble_size`` members) when that matters, e.g. in BO.

    Args:
        train_X, train_Y, train_Yvar, input_transform, outcome_transform: As for every
            :class:`~botorch_nn_uq.models.member_ensemble.MemberEnsemble`.
        **hyperparameters: Fields of :class:`AutoDEUQHyperparameters`.
    """

    hyperparameter_class = AutoDEUQHyperparameters
    method = "autodeuq"

    def _search(
        self, trainer: CandidateTrainer, generator: torch.Generator
    ) -> tuple[list[TrainedCandidate], SelectionResult]:
        hp = self.hyperparameters
        return autodeuq_search(
            trainer,
            hp.architecture_space,
            hp.hyperparameter_space,
            num_candidates=hp.pool_size,
            ensemble_size=hp.ensemble_size,
            population_size=hp.population_size,
            tournament_size=hp.tournament_size,
            generation_size=hp.generation_size,
            generator=generator,
            num_initial_random=hp.num_initial_random,
            kappa=hp.kappa,
            num_acquisition_candidates=hp.num_acquisition_candidates,
            max_selection_iterations=hp.max_selection_iterations,
        )


def _small_search() -> dict[str, Any]:
    r"""Fast settings of every searched ensemble: small searches over two-layer networks
    that fit toy data in a few epochs."""
    return {
        "epochs": 100,
        "architecture_space": ArchitectureSpace(
            num_nodes=2, units=(16, 32), activations=("tanh", "swish"), allow_empty_nodes=False
        ),
    }


# Patience as long as training: toy data hold out only a handful of validation points.
_FAST_NES = {"learning_rate": 3e-2, "early_stopping_patience": 100, "lr_reduction_patience": 100}

_NES_SUMMARY = (
    "Neural Ensemble Search over MLP architectures (widths, activations, empty nodes, skip "
    "connections) by {}, ForwardSelect on held-out data"
)
_SEARCHED_POSTERIOR = "as `DeepEnsemble`; members may differ in architecture"

# The searched ensembles keep their own mini-batches (NES: 32 rows; AutoDEUQ searches 16 to
# 256) and get step budgets that equal 300 epochs up to 80 points (two batches of 32, or
# four of 16, per epoch), so small-data searches are unchanged.

#: NES-RS's catalogue entry (the registry's ``"nes-rs"``).
NES_RS_CARD = ModelCard(
    name="nes-rs",
    description="Neural Ensemble Search, random search over 20 architectures (at most 600 steps)",
    model_class=NESRandomSearch,
    family=ENSEMBLE_FAMILY,
    summary=_NES_SUMMARY.format("random search"),
    posterior=_SEARCHED_POSTERIOR,
    bo=BODefaults(constructor_options={"max_steps": 600, **FINITE_FUNCTION_SAMPLES}),
    fast=FastSettings({**_small_search(), **_FAST_NES, "pool_size": 4, "ensemble_size": 3}),
)

#: NES-RE's catalogue entry (the registry's ``"nes-re"``).
NES_RE_CARD = ModelCard(
    name="nes-re",
    description="Neural Ensemble Search, regularised evolution (at most 600 steps)",
    model_class=NESRegularizedEvolution,
    family=ENSEMBLE_FAMILY,
    summary=_NES_SUMMARY.format("regularised evolution"),
    posterior=_SEARCHED_POSTERIOR,
    bo=BODefaults(constructor_options={"max_steps": 600, **FINITE_FUNCTION_SAMPLES}),
    fast=FastSettings(
        {
            **_small_search(),
            **_FAST_NES,
            "pool_size": 5,
            "ensemble_size": 3,
            "population_size": 3,
            "num_parents": 2,
        }
    ),
)

#: AutoDEUQ's catalogue entry (the registry's ``"autodeuq"``).
AUTODEUQ_CARD = ModelCard(
    name="autodeuq",
    description="AutoDEUQ: joint architecture and hyperparameter search (at most 1200 steps)",
    model_class=AutoDEUQ,
    family=ENSEMBLE_FAMILY,
    summary="aging evolution over architectures plus a GP-based sampler over training "
    "hyperparameters (constant-liar batches), Caruana selection with replacement from the "
    "whole catalog",
    posterior="as `DeepEnsemble`, with the selection weights",
    bo=BODefaults(constructor_options={"max_steps": 1200, **FINITE_FUNCTION_SAMPLES}),
    fast=FastSettings(
        {
            **_small_search(),
            "pool_size": 8,
            "ensemble_size": 3,
            "population_size": 3,
            "num_initial_random": 3,
            "num_acquisition_candidates": 32,
            "hyperparameter_space": HyperparameterSpace(
                learning_rate=(3e-2, 6e-2),
                batch_size=(16, 32),
                optimizers=("adam", "nadam"),
                lr_reduction_patience=(100, 150),
                early_stopping_patience=(100, 150),
            ),
        }
    ),
)
