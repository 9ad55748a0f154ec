"""Hyper-deep ensembles as BoTorch models: the search of
:mod:`botorch_nn_uq.ensembles.hyper_deep`, served by
:class:`~botorch_nn_uq.models.member_ensemble.MemberEnsemble`'s posterior."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from botorch_nn_uq.checks import (
    OPEN_UNIT_INTERVAL,
    POSITIVE,
    check_choice,
    check_integer_fields,
    check_range,
    check_real_fields,
)
from botorch_nn_uq.ensembles.holdout import VALIDATION_SCHEMES
from botorch_nn_uq.ensembles.hyper_deep import (
    CandidateRecord,
    HyperDeepSearchSpace,
    MemberArchitecture,
    search_hyper_deep_ensemble,
)
from botorch_nn_uq.models.card import (
    FINITE_FUNCTION_SAMPLES,
    SCALABLE_BATCH,
    BODefaults,
    FastSettings,
    ModelCard,
)
from botorch_nn_uq.models.ensemble import FixedArchitectureHyperparameters
from botorch_nn_uq.models.member_ensemble import ENSEMBLE_FAMILY, MemberEnsemble
from botorch_nn_uq.models.validation import SUPPORTED_DTYPES
from botorch_nn_uq.nn.batched_mlp import EnsembleNetwork
from botorch_nn_uq.training.config import TrainingResult

#: The optimizer's base learning rate of a hyper-deep fit. Every member's update is
#: rescaled from it to the member's searched rate, so it matters only through rounding.
BASE_LEARNING_RATE = 5e-3


@dataclass(frozen=True)
class HyperDeepEnsembleHyperparameters(FixedArchitectureHyperparameters):
    r"""Hyperparameters of :class:`HyperDeepEnsemble`: those of
    :class:`~botorch_nn_uq.models.ensemble.FixedArchitectureHyperparameters` (the fixed
    architecture and training settings; ``ensemble_size`` is ``K`` of both selections)
    plus the search's (each candidate's L2 ``lambda``, dropout rate and learning rate
    are drawn from the ranges):

    Args:
        num_candidates: ``kappa``, configurations of the random search (the design's
            value for BO: 20; 50 for regression benchmarks).
        l2_range: Log-uniform range of the L2 ``lambda``.
        dropout_range: Log-uniform range of the dropout rate.
        learning_rate_range: Log-uniform range of the learning rate (the design note
            fixes only the L2 and dropout ranges; this one brackets the Adam defaults
            that train the default network in its epoch budget).
        validation: How candidates are scored: ``"auto"`` (5-fold out-of-fold scores for
            at most 200 rows, else a hold-out), ``"cross-validation"`` or ``"holdout"``.
        num_folds: Folds of cross-validation.
        validation_fraction: The fraction of the rows held out for validation by a
            hold-out (:func:`~botorch_nn_uq.ensembles.holdout.holdout_size` rows); the
            candidates train on the rest and are scored on them, the selected members
            are then refitted on all rows. Cross-validation does not use it.
        max_selection_iterations: Cap on the additions of each greedy selection, at
            least 2 (``None``: 10 per member).
        training_dtype: Floating dtype in which the candidates and the refit train,
            e.g. ``torch.float32`` (about twice as fast on CPUs for these stacked
            networks); the fitted members serve in the training data's dtype. ``None``
            trains in the data's dtype.
    """

    num_candidates: int = 20
    l2_range: tuple[float, float] = (1e-11, 1e-5)
    dropout_range: tuple[float, float] = (1e-3, 0.9)
    learning_rate_range: tuple[float, float] = (1e-3, 3e-2)
    validation: str = "auto"
    num_folds: int = 5
    validation_fraction: float = 0.2
    max_selection_iterations: int | None = None
    training_dtype: torch.dtype | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_integer_fields(self, "num_candidates")
        check_integer_fields(self, "num_folds", minimum=2)
        # One addition selects one member: a posterior without epistemic spread.
        check_integer_fields(self, "max_selection_iterations", minimum=2, optional=True)
        check_choice("validation", self.validation, VALIDATION_SCHEMES)
        check_real_fields(self, "validation_fraction", interval=OPEN_UNIT_INTERVAL)
        check_range("l2_range", self.l2_range, interval=POSITIVE)
        check_range("dropout_range", self.dropout_range, interval=OPEN_UNIT_INTERVAL)
        check_range("learning_rate_range", self.learning_rate_range, interval=POSITIVE)
        if self.training_dtype is not None and self.training_dtype not in SUPPORTED_DTYPES:
            raise ValueError(
                f"training_dtype must be torch.float32, torch.float64 or None; got "
                f"{self.training_dtype!r}."
            )
        self.training_config(learning_rate=BASE_LEARNING_RATE)
        self.search_space()

    def search_space(self) -> HyperDeepSearchSpace:
        r"""The random search's ranges (validated there)."""
        return HyperDeepSearchSpace(
            l2_regularization=tuple(self.l2_range),
            dropout=tuple(self.dropout_range),
            learning_rate=tuple(self.learning_rate_range),
        )


class HyperDeepEnsemble(MemberEnsemble):
    r"""A hyper-deep ensemble: random search over L2, dropout and learning rate for a
    fixed architecture, greedy selection on validation NLL, stratification over seeds,
    greedy selection again, refit on all data (see
    :mod:`botorch_nn_uq.ensembles.hyper_deep` for the procedure and the out-of-fold
    validation used for small data sets).

    The fitted members carry the selection weights (with replacement: weights are
    multiplicities over the number of additions) and serve the posterior of every
    :class:`~botorch_nn_uq.models.member_ensemble.MemberEnsemble`. ``search_history``
    lists every candidate with its configuration, seed, validation NLL and selection
    weight.

    With known observation noise ``train_Yvar``, every candidate's validation copies and
    the refit train on it as a :class:`~botorch_nn_uq.models.ensemble.DeepEnsemble`'s
    members do, and the out-of-fold NLL scores the held-out rows with their known
    variances (the likelihood the model serves), see
    :mod:`botorch_nn_uq.models.known_noise`.

    Args:
        train_X, train_Y, train_Yvar, input_transform, outcome_transform: As for every
            :class:`~botorch_nn_uq.models.member_ensemble.MemberEnsemble`.
        **hyperparameters: Fields of :class:`HyperDeepEnsembleHyperparameters`.

    Example:
        >>> train_X = torch.rand(30, 2, dtype=torch.float64)
        >>> train_Y = train_X.sin().sum(-1, keepdim=True)
        >>> model = HyperDeepEnsemble(train_X, train_Y, num_candidates=8, epochs=200)
        >>> model = model.fit(seed=0)
        >>> len(model.search_history), float(model.member_weights.sum())
        (..., 1.0)
    """

    hyperparameter_class = HyperDeepEnsembleHyperparameters
    # The selection (with replacement) chooses the number of distinct members.
    checkpoint_hyperparameters = (
        "hidden_widths",
        "activation",
        *MemberEnsemble.checkpoint_hyperparameters,
    )
    fit_records = ("search_history", "ensemble_validation_nll")

    def _build_network(self, input_dim: int, output_dim: int, generator: torch.Generator) -> None:
        r"""None: the search chooses the members (so ``warm_start`` is not supported)."""
        return None

    def _fit(
        self, train_X: Tensor, train_Y: Tensor, generator: torch.Generator, progress: bool
    ) -> TrainingResult:
        hp = self.hyperparameters
        search = search_hyper_deep_ensemble(
            train_X,
            train_Y,
            MemberArchitecture(
                input_dim=train_X.shape[-1],
                output_dim=train_Y.shape[-1],
                hidden_widths=hp.hidden_widths,
                activation=hp.activation,
                gaussian_head=hp.likelihood == "gaussian",
                min_std=hp.min_std,
            ),
            hp.training_config(learning_rate=BASE_LEARNING_RATE),
            generator=generator,
            ensemble_size=hp.ensemble_size,
            num_candidates=hp.num_candidates,
            search_space=hp.search_space(),
            validation=hp.validation,
            num_folds=hp.num_folds,
            validation_fraction=hp.validation_fraction,
            max_selection_iterations=hp.max_selection_iterations,
            training_dtype=hp.training_dtype,
            known_noise=self._training_known_noise(),
            progress=progress,
        )
        self.search_history: list[CandidateRecord] = search.candidates
        self.ensemble_validation_nll = search.ensemble_validation_nll
        self._serve_members(EnsembleNetwork([search.members]), search.weights, train_X, train_Y)
        return search.training_result

    def search_summary(self) -> list[dict[str, Any]]:
        r"""``search_history`` as plain dicts (e.g. for ``pandas.DataFrame``)."""
        return [dataclasses.asdict(record) for record in self.search_history]


#: The hyper-deep ensemble's catalogue entry (the registry's ``"hyper-deep-ensemble"``).
HYPER_DEEP_ENSEMBLE_CARD = ModelCard(
    name="hyper-deep-ensemble",
    description="hyper-deep ensemble (20 random L2/dropout/learning-rate configurations, 3-fold "
    "out-of-fold greedy selection, stratification, 300 steps on batches of 256, "
    "single-precision training)",
    model_class=HyperDeepEnsemble,
    family=ENSEMBLE_FAMILY,
    summary="random search over L2, dropout and learning rate, greedy selection (Caruana, with "
    "replacement) on out-of-fold validation NLL, stratification over seeds, selection again, "
    "refit on all data; `search_history` records every candidate",
    posterior="as `DeepEnsemble`, with the selection weights",
    # A search at every BO step: 3 folds, 300 epochs and float32 training keep a step to
    # seconds (benchmarks/docs/hyper-deep-search-cost.md).
    bo=BODefaults(
        constructor_options={
            "num_folds": 3,
            "epochs": 300,
            "max_steps": 300,
            "training_dtype": torch.float32,
            **SCALABLE_BATCH,
            **FINITE_FUNCTION_SAMPLES,
        }
    ),
    fast=FastSettings(
        {
            "hidden_widths": (32, 32),
            "epochs": 150,
            "num_candidates": 4,
            "ensemble_size": 3,
            "num_folds": 3,
            # Keeps the searched learning rates where 150 epochs fit the toy data.
            "learning_rate_range": (5e-3, 2e-2),
            "dropout_range": (1e-3, 0.1),
        }
    ),
)
