r"""Hyper-deep ensembles (Wenzel et al., 2020, as used in NOMU's App. B.1).

For one fixed architecture:

1. random search: ``num_candidates`` configurations with L2 ``lambda`` and dropout drawn
   log-uniformly (defaults ``(1e-11, 1e-5)`` and ``(0.001, 0.9)``, the design values)
   and a log-uniform learning rate, each scored on validation data;
2. greedy selection with replacement (:func:`~botorch_nn_uq.ensembles.caruana_select`)
   of ``K`` members on the validation negative log-likelihood;
3. stratification: every selected configuration is trained again with ``K`` new seeds;
4. greedy selection again, to ``K`` members, over the stratified candidates;
5. the selected members are refitted on ALL rows with their own seeds and configurations
   and served with the selection weights.

Validation: BO data sets are small, so by default (``"auto"``) candidates are scored
out of fold (5-fold cross-validation) for at most 200 rows and on a random 20 % hold-out
otherwise; every fold copy of every candidate trains in one batched computation.
Selecting on out-of-fold predictions and then refitting on all rows uses every point
for the final members, at the price of serving networks that were not themselves
validated (their configurations and seeds were).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

from botorch_nn_uq.ensembles.holdout import (
    ValidationSplits,
    make_validation_splits,
    validation_log_likelihoods,
)
from botorch_nn_uq.ensembles.selection import SelectionResult, caruana_select
from botorch_nn_uq.nn.batched_mlp import BatchedMLP
from botorch_nn_uq.training.config import TrainingConfig, TrainingResult
from botorch_nn_uq.training.losses import KnownNoise
from botorch_nn_uq.training.members import fit_members


@dataclass(frozen=True)
class MemberArchitecture:
    r"""The fixed architecture of every member of a hyper-deep ensemble.

    Attributes:
        input_dim: Inputs ``d``.
        output_dim: Outputs ``m``.
        hidden_widths: Hidden widths.
        activation: Hidden activation.
        gaussian_head: Whether members predict a standard deviation.
        min_std: Floor of the predicted standard deviation.
    """

    input_dim: int
    output_dim: int
    hidden_widths: tuple[int, ...]
    activation: str
    gaussian_head: bool
    min_std: float

    def build(self, member_seeds: list[int], dropout: Tensor) -> BatchedMLP:
        r"""Members with the given seeds and per-member dropout rates."""
        return BatchedMLP(
            self.input_dim,
            self.output_dim,
            hidden_widths=self.hidden_widths,
            member_seeds=member_seeds,
            activation=self.activation,
            gaussian_head=self.gaussian_head,
            dropout=dropout,
            min_std=self.min_std,
        )


@dataclass(frozen=True)
class HyperDeepSearchSpace:
    r"""The space of the hyper-deep ensemble's random search: log-uniform ranges of its
    configurations (each ``(low, high)``, ``0 < low <= high``).

    Attributes:
        l2_regularization: Keras-style L2 ``lambda``.
        dropout: Training-time dropout rate (``high < 1``).
        learning_rate: The optimizer's learning rate.
    """

    l2_regularization: tuple[float, float] = (1e-11, 1e-5)
    dropout: tuple[float, float] = (1e-3, 0.9)
    learning_rate: tuple[float, float] = (1e-3, 3e-2)

    def __post_init__(self) -> None:
        for name in ("l2_regularization", "dropout", "learning_rate"):
            low, high = getattr(self, name)
            if not 0 < low <= high:
                raise ValueError(f"The {name} range needs 0 < low <= high; got {(low, high)}.")
        if not self.dropout[1] < 1:
            raise ValueError(f"Dropout rates must stay below 1; got {self.dropout}.")

    def sample(self, num_samples: int, generator: torch.Generator) -> dict[str, Tensor]:
        r"""``num_samples`` configurations, each value drawn log-uniformly from its range
        (all L2 values, then all dropout rates, then all learning rates).

        Args:
            num_samples: The number of configurations ``k``.
            generator: The source of all randomness.

        Returns:
            A dict mapping ``"l2_regularization"``, ``"dropout"`` and
            ``"learning_rate"`` to float64 tensors of shape ``(k,)``.
        """
        return {
            name: torch.exp(
                math.log(low)
                + (math.log(high) - math.log(low))
                * torch.rand(num_samples, dtype=torch.float64, generator=generator)
            )
            for name, (low, high) in (
                ("l2_regularization", self.l2_regularization),
                ("dropout", self.dropout),
                ("learning_rate", self.learning_rate),
            )
        }


@dataclass
class CandidateRecord:
    r"""One candidate of the search.

    Attributes:
        stage: ``"search"`` (random search) or ``"stratified"`` (a selected configuration
            with a new seed).
        l2_regularization: Its L2 ``lambda``.
        dropout: Its dropout rate.
        learning_rate: Its learning rate.
        seed: Its member seed.
        validation_nll: Its mean validation negative log-likelihood (transformed units).
        selection_weight: Its weight in the stage's greedy selection (0: not selected).
    """

    stage: str
    l2_regularization: float
    dropout: float
    learning_rate: float
    seed: int
    validation_nll: float
    selection_weight: float = 0.0


@dataclass
class HyperDeepEnsembleSearch:
    r"""The outcome of :func:`search_hyper_deep_ensemble`.

    Attributes:
        members: The selected members, refitted on all rows.
        weights: Their mixture weights (summing to one).
        candidates: Every candidate of both stages, with its validation NLL.
        ensemble_validation_nll: The final selection's validation NLL (of the
            validation copies).
        training_result: The refit's per-member training result.
        splits: The validation splits used.
    """

    members: BatchedMLP
    weights: Tensor
    candidates: list[CandidateRecord] = field(default_factory=list)
    ensemble_validation_nll: float = math.nan
    training_result: TrainingResult | None = None
    splits: ValidationSplits | None = None


def search_hyper_deep_ensemble(
    train_X: Tensor,
    train_Y: Tensor,
    architecture: MemberArchitecture,
    config: TrainingConfig,
    *,
    generator: torch.Generator,
    ensemble_size: int = 5,
    num_candidates: int = 20,
    search_space: HyperDeepSearchSpace | None = None,
    validation: str = "auto",
    num_folds: int = 5,
    validation_fraction: float = 0.2,
    max_selection_iterations: int | None = None,
    training_dtype: torch.dtype | None = None,
    known_noise: KnownNoise | None = None,
    progress: bool = False,
) -> HyperDeepEnsembleSearch:
    r"""Build a hyper-deep ensemble (see the module docstring). All randomness comes
    from ``generator``.

    Args:
        train_X: ``n x d`` (transformed) training inputs.
        train_Y: ``n x m`` (transformed) training targets.
        architecture: The members' fixed architecture.
        config: Training settings shared by every candidate (its learning rate is
            replaced by each candidate's own).
        generator: The source of every random choice, drawn in this order: the
            validation splits, the configurations, the candidates' seeds, the seeds of
            their validation copies and their training-time dropout masks, then the same
            for the stratified candidates, then the refit's dropout masks.
        ensemble_size: ``K``, the most distinct members of each selection.
        num_candidates: ``kappa``, configurations of the random search.
        search_space: The ranges of the random search.
        validation: ``"auto"``, ``"cross-validation"`` or ``"holdout"`` (see
            :func:`~botorch_nn_uq.ensembles.holdout.make_validation_splits`).
        num_folds: Folds of cross-validation.
        validation_fraction: The hold-out fraction.
        max_selection_iterations: Cap on the additions of each greedy selection.
        training_dtype: Floating dtype in which every candidate and the refit train
            (e.g. ``torch.float32``, faster on CPUs than float64 for these stacked
            networks, see ``benchmarks/docs/hyper-deep-search-cost.md``); the returned
            members are cast back to ``train_X``'s dtype. ``None`` trains in ``train_X``'s dtype.
        known_noise: The known observation noise of the ``n`` rows (``n x m``, a model's
            transformed ``train_Yvar``), or ``None``: every validation copy and the refit
            train on it, and the out-of-fold scores use the held-out rows' known
            variances (see :func:`~botorch_nn_uq.ensembles.holdout.validation_log_likelihoods`).
        progress: Show progress bars.

    Returns:
        A :class:`HyperDeepEnsembleSearch`.
    """
    if num_candidates < 1:
        raise ValueError(f"num_candidates must be positive; got {num_candidates}.")
    if training_dtype is not None and not (
        isinstance(training_dtype, torch.dtype) and training_dtype.is_floating_point
    ):
        raise ValueError(f"training_dtype must be a floating torch.dtype; got {training_dtype!r}.")
    data_dtype = train_X.dtype
    if training_dtype is not None:
        train_X, train_Y = train_X.to(training_dtype), train_Y.to(training_dtype)
        if known_noise is not None:
            known_noise = known_noise.to(training_dtype, train_X.device)
    search_space = search_space or HyperDeepSearchSpace()
    splits = make_validation_splits(
        train_X.shape[0],
        validation,
        num_folds=num_folds,
        validation_fraction=validation_fraction,
        generator=generator,
    )

    def score_and_select(stage: str, configurations: dict[str, Tensor], seeds: list[int]) -> _Stage:
        # Both stages score their candidates on the same splits and select alike.
        return _score_and_select(
            stage,
            configurations,
            seeds,
            train_X,
            train_Y,
            architecture,
            config,
            splits,
            ensemble_size,
            max_selection_iterations,
            generator,
            known_noise,
            progress,
        )

    configurations = search_space.sample(num_candidates, generator)
    seeds = _draw_seeds(num_candidates, generator)
    first = score_and_select("search", configurations, seeds)
    stratified_configurations = {
        name: values[first.selection.indices].repeat_interleave(ensemble_size)
        for name, values in configurations.items()
    }
    stratified_seeds = _draw_seeds(first.selection.indices.shape[0] * ensemble_size, generator)
    second = score_and_select("stratified", stratified_configurations, stratified_seeds)
    chosen = second.selection.indices
    chosen_configurations = {name: v[chosen] for name, v in stratified_configurations.items()}
    members = architecture.build(
        [stratified_seeds[i] for i in chosen.tolist()], chosen_configurations["dropout"]
    ).to(train_X)
    training_result = fit_members(
        members,
        train_X,
        train_Y,
        config,
        l2_regularization=chosen_configurations["l2_regularization"].to(train_X),
        learning_rates=chosen_configurations["learning_rate"].to(train_X),
        dropout_generator=generator,
        known_noise=known_noise,
        progress=progress,
        description="hyper-deep ensemble refit",
    )
    return HyperDeepEnsembleSearch(
        members=members.to(dtype=data_dtype),
        weights=second.selection.weights.to(dtype=data_dtype, device=train_X.device),
        candidates=first.records + second.records,
        ensemble_validation_nll=second.selection.loss,
        training_result=training_result,
        splits=splits,
    )


@dataclass
class _Stage:
    selection: SelectionResult
    records: list[CandidateRecord]


def _draw_seeds(count: int, generator: torch.Generator) -> list[int]:
    return torch.randint(0, 2**31 - 1, (count,), generator=generator).tolist()


def _score_and_select(
    stage: str,
    configurations: dict[str, Tensor],
    seeds: list[int],
    train_X: Tensor,
    train_Y: Tensor,
    architecture: MemberArchitecture,
    config: TrainingConfig,
    splits: ValidationSplits,
    ensemble_size: int,
    max_selection_iterations: int | None,
    generator: torch.Generator,
    known_noise: KnownNoise | None,
    progress: bool,
) -> _Stage:
    num_splits = splits.num_splits
    # Fold copies get their own seeds; the refit uses the candidate's seed.
    copy_seeds = _draw_seeds(len(seeds) * num_splits, generator)

    def make_network(num_members: int) -> BatchedMLP:
        dropout = configurations["dropout"].repeat_interleave(num_splits)
        return architecture.build(copy_seeds[:num_members], dropout)

    # Scores move to the CPU: the selection's indices pick the configurations, which
    # live there (the served weights move back to the data's device).
    log_likelihoods = validation_log_likelihoods(
        make_network,
        train_X,
        train_Y,
        splits,
        config,
        l2_regularization=configurations["l2_regularization"].to(train_X),
        learning_rates=configurations["learning_rate"].to(train_X),
        dropout_generator=generator,
        known_noise=known_noise,
        progress=progress,
    ).to(device="cpu", dtype=torch.float64)
    selection = caruana_select(log_likelihoods, ensemble_size, max_selection_iterations)
    weights = torch.zeros(len(seeds), dtype=torch.float64)
    weights[selection.indices] = selection.weights.to(torch.float64)
    validation_nll = -log_likelihoods.mean(-1)
    records = [
        CandidateRecord(
            stage=stage,
            l2_regularization=float(configurations["l2_regularization"][index]),
            dropout=float(configurations["dropout"][index]),
            learning_rate=float(configurations["learning_rate"][index]),
            seed=seeds[index],
            validation_nll=float(validation_nll[index]),
            selection_weight=float(weights[index]),
        )
        for index in range(len(seeds))
    ]
    return _Stage(selection, records)
