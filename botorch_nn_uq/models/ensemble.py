"""Deep ensembles (Lakshminarayanan et al., 2017): ``K`` networks of one architecture,
each trained from its own initialisation (and optionally on its own resample or subset of
the rows, and early-stopped on its own held-out rows), served with equal weights by
:class:`~botorch_nn_uq.models.member_ensemble.MemberEnsemble` (see that module for how
acquisition functions see an ensemble).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from botorch_nn_uq.checks import (
    NON_NEGATIVE,
    OPEN_UNIT_INTERVAL,
    Interval,
    check_boolean_fields,
    check_choice,
    check_real_fields,
    check_widths,
)
from botorch_nn_uq.ensembles.holdout import holdout_size
from botorch_nn_uq.models.batched_data import element_rows
from botorch_nn_uq.models.card import (
    FINITE_FUNCTION_SAMPLES,
    SCALABLE_BATCH,
    BODefaults,
    FastSettings,
    ModelCard,
)
from botorch_nn_uq.models.input_transforms import TransformedInputNetwork
from botorch_nn_uq.models.member_ensemble import (
    ENSEMBLE_FAMILY,
    MemberEnsemble,
    MemberEnsembleHyperparameters,
)
from botorch_nn_uq.models.validation import SUPPORTED_DTYPES
from botorch_nn_uq.nn.batched_mlp import (
    RESAMPLING_STREAM,
    VALIDATION_STREAM,
    BatchedMLP,
    EnsembleNetwork,
)
from botorch_nn_uq.nn.mlp import ACTIVATIONS
from botorch_nn_uq.training.config import NonFiniteLossError, TrainedWithLoop, TrainingResult
from botorch_nn_uq.training.members import fit_members

#: How far above its starting loss a warm-started member may end, relative to that loss,
#: and still count as converged rather than diverged when it never improved.
WARM_START_TOLERANCE = 0.1


@dataclass(frozen=True)
class FixedArchitectureHyperparameters(MemberEnsembleHyperparameters, TrainedWithLoop):
    r"""Hyperparameters of the ensembles whose members share one MLP architecture and
    train with the package's training loop (:class:`DeepEnsemble` and
    :class:`~botorch_nn_uq.models.hyper_deep_ensemble.HyperDeepEnsemble`): those of
    :class:`~botorch_nn_uq.models.member_ensemble.MemberEnsembleHyperparameters` plus:

    Args:
        hidden_widths: Widths of each member's hidden layers.
        activation: Hidden activation (see ``botorch_nn_uq.nn.mlp.ACTIVATIONS``).
        epochs: Training epochs.
        max_steps: A training budget in optimizer steps (whichever of ``epochs`` and
            ``max_steps`` ends first); with ``batch_size`` it keeps the cost of a fit
            independent of the number of training points. ``None``: ``epochs`` only.
        batch_size: Mini-batch size; ``None`` trains full-batch.
        optimizer: One of ``botorch_nn_uq.training.OPTIMIZERS``.
        early_stopping_patience: Early-stopping patience on each member's monitored loss (its
            validation loss where it has validation rows, else its training loss);
            ``None`` trains all epochs (the best-loss weights are kept either way).
        gradient_clip_norm: Per-member gradient-norm clipping; ``None`` does not clip.
    """

    hidden_widths: tuple[int, ...] = (64, 64)
    activation: str = "relu"
    epochs: int = 500
    max_steps: int | None = None
    batch_size: int | None = None
    optimizer: str = "adam"
    early_stopping_patience: int | None = None
    gradient_clip_norm: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_widths(self, "hidden_widths")
        check_choice("activation", self.activation, ACTIVATIONS)


@dataclass(frozen=True)
class DeepEnsembleHyperparameters(FixedArchitectureHyperparameters):
    r"""Hyperparameters of :class:`DeepEnsemble`: those of
    :class:`FixedArchitectureHyperparameters` (members of two hidden layers of 32 units
    with SmeLU activations here) plus the ones below.

    The defaults are a fast CPU setting for BO on up to a few hundred points, the drop-in
    replacement of a ``SingleTaskGP``: at n = 100 a fit costs under twice the GP's, and
    ``optimize_acqf`` of analytic LogEI under the GP's, and protocol 1's BO results stay
    level with ReLU members of 2 x 64 units trained in double precision
    (``benchmarks/docs/protocol-6-scale.md``, "Small data"). For thousands of points the
    registry's ``"deep-ensemble"`` (2 x 64 ReLU units on mini-batches of 256) is the
    measured setting.

    Args:
        hidden_widths: Widths of each member's hidden layers.
        activation: Hidden activation (see ``botorch_nn_uq.nn.mlp.ACTIVATIONS``). The
            default, ``"smelu"`` (:class:`~botorch_nn_uq.nn.mlp.SmeLU`), is a ReLU with
            its kink rounded off: a ReLU network's acquisition surface is piecewise
            linear, and L-BFGS-B spends three to four times the evaluations on it.
        learning_rate: The optimizer's learning rate.
        l2_regularization: Keras-style penalty ``lambda ||theta||^2`` on each member's
            weights and biases.
        dropout: Training-time dropout rate (0: none).
        bootstrap: Train each member on its own bootstrap resample of the data.
        subset_fraction: Train each member on its own random subset of this fraction of
            the rows (without replacement); ``None`` uses all rows.
        validation_fraction: The fraction of the rows held out for validation
            (:func:`~botorch_nn_uq.ensembles.holdout.holdout_size` rows), each member's
            own random rows, so members also differ in their data. Each member keeps
            the weights with the lowest loss on them (early stopping with
            ``early_stopping_patience``). ``None`` trains on all rows and keeps the
            lowest training loss.
        training_dtype: The precision the members train in, ``torch.float32`` (the
            default) or ``torch.float64``; ``None`` trains in the data's dtype. The fitted
            model serves in the data's dtype either way (single-precision weights
            widened). Single precision trains about 1.4 times faster on a CPU core,
            measured against double precision on the same seeds
            (``benchmarks/docs/protocol-6-scale.md``, "Training precision" and "Small
            data").
    """

    hidden_widths: tuple[int, ...] = (32, 32)
    activation: str = "smelu"
    learning_rate: float = 5e-3
    l2_regularization: float = 1e-6
    dropout: float = 0.0
    bootstrap: bool = False
    subset_fraction: float | None = None
    validation_fraction: float | None = None
    training_dtype: torch.dtype | None = torch.float32

    def __post_init__(self) -> None:
        super().__post_init__()
        check_real_fields(self, "l2_regularization", interval=NON_NEGATIVE)
        check_real_fields(self, "dropout", interval=Interval(0.0, 1.0, upper_closed=False))
        check_real_fields(
            self, "subset_fraction", interval=Interval(0.0, 1.0, lower_closed=False), optional=True
        )
        check_real_fields(self, "validation_fraction", interval=OPEN_UNIT_INTERVAL, optional=True)
        check_boolean_fields(self, "bootstrap")
        if self.training_dtype is not None and self.training_dtype not in SUPPORTED_DTYPES:
            raise ValueError(
                f"training_dtype must be torch.float32, torch.float64 or None; got "
                f"{self.training_dtype!r}."
            )
        if self.bootstrap and self.subset_fraction is not None:
            raise ValueError("Choose either bootstrap or subset_fraction, not both.")
        self.training_config()


def resampling_row_weights(
    network: BatchedMLP,
    num_data: int,
    bootstrap: bool,
    subset_fraction: float | None,
    dtype: torch.dtype,
    device: torch.device | str | None = None,
) -> Tensor | None:
    r"""Per-member training multiplicities for bootstraps or random subsets, each drawn
    from the member's own resampling stream.

    Args:
        network: The ``K`` members, whose seeds give the streams.
        num_data: The number ``n`` of training rows.
        bootstrap: Draw bootstrap resamples (multiplicities ``0, 1, 2, ...``).
        subset_fraction: Otherwise, the fraction of the rows in each member's subset.
        dtype: The weights' dtype.
        device: The weights' device (the CPU if ``None``); they are drawn on the CPU and
            moved, so a seed gives the same rows on every device.

    Returns:
        A ``K x n`` tensor of multiplicities, or ``None`` (all rows) without bootstrap
        and subsets.
    """
    if not bootstrap and subset_fraction is None:
        return None
    rows = []
    for generator in network.member_generators(RESAMPLING_STREAM):
        if bootstrap:
            draws = torch.randint(num_data, (num_data,), generator=generator)
            rows.append(torch.bincount(draws, minlength=num_data))
        else:
            size = max(1, round(subset_fraction * num_data))
            chosen = torch.randperm(num_data, generator=generator)[:size]
            rows.append(torch.zeros(num_data, dtype=torch.long).index_fill(0, chosen, 1))
    return torch.stack(rows).to(dtype=dtype, device=device)


def member_validation_masks(
    network: BatchedMLP,
    num_data: int,
    validation_fraction: float,
    dtype: torch.dtype,
    device: torch.device | str | None = None,
) -> Tensor:
    r"""Each member's held-out rows
    (:func:`~botorch_nn_uq.ensembles.holdout.holdout_size` rows), drawn from the
    member's validation stream.

    Args:
        network: The ``K`` members, whose seeds give the streams.
        num_data: The number ``n`` of training rows.
        validation_fraction: The held-out fraction in ``(0, 1)``.
        dtype: The masks' dtype.
        device: The masks' device (the CPU if ``None``); they are drawn on the CPU and
            moved, so a seed gives the same rows on every device.

    Returns:
        A ``K x n`` tensor of 0/1 masks (1: held out).
    """
    size = holdout_size(num_data, validation_fraction)
    masks = torch.zeros(network.num_members, num_data, dtype=dtype)
    for member, generator in enumerate(network.member_generators(VALIDATION_STREAM)):
        masks[member, torch.randperm(num_data, generator=generator)[:size]] = 1.0
    return masks.to(device)


class DeepEnsemble(MemberEnsemble):
    r"""An ensemble of independently trained networks, served with equal weights.

    All ``K`` members share one architecture and train as ONE batched computation
    (:class:`~botorch_nn_uq.nn.batched_mlp.BatchedMLP`), each with its own
    initialisation, data order and (optionally) bootstrap resample, so the result equals
    ``K`` separate trainings with the same member seeds. The posterior and
    :meth:`uncertainty_decomposition` are those of every
    :class:`~botorch_nn_uq.models.member_ensemble.MemberEnsemble`. With known
    observation noise ``train_Yvar``, Gaussian heads are trained on the likelihood of the
    known variances and mean-only members on weighted least squares (see
    :mod:`botorch_nn_uq.models.known_noise`).

    A learnable input transform (BoTorch's ``Warp``, say) is one module shared by all
    members and trained with them: it maps the training inputs at every step, its
    parameters follow the sum of the members' losses, and the members and the transform
    are restored together at the step with the lowest mean member loss (a member's own
    best step was taken with another transform). The model serves with the trained
    transform (``model.input_transform``, in eval mode). The hand-written backward pass
    of the members' common path stays in use and hands the gradient at the transformed
    inputs to autograd for the transform (see
    :func:`~botorch_nn_uq.training.members.fit_members`).

    Batched training data (``batch_shape x n x d``, ``batch_shape x n x m``, as BoTorch's
    batched GPs take them, e.g. from ``batch_cross_validation``): each batch element gets
    its own ``K`` members, all ``B * K`` of them trained as one batched computation, and
    element ``b`` equals a fit on element ``b`` alone with the same seed (see
    :mod:`botorch_nn_uq.models.batched_data`).

    Args:
        train_X: An ``n x d`` or ``batch_shape x n x d`` tensor of training inputs.
        train_Y: An ``n x m`` or ``batch_shape x n x m`` tensor of training targets.
        train_Yvar, input_transform, outcome_transform: As for every
            :class:`~botorch_nn_uq.models.member_ensemble.MemberEnsemble` (with
            ``train_Y``'s shape; transforms with ``batch_shape`` for batched data, and the
            default ``Standardize(m, batch_shape=batch_shape)``).
        **hyperparameters: Fields of :class:`DeepEnsembleHyperparameters`.

    Example:
        >>> from botorch.models.transforms import Normalize, Standardize
        >>> train_X = torch.rand(20, 2, dtype=torch.float64)
        >>> train_Y = train_X.sin().sum(-1, keepdim=True)
        >>> model = DeepEnsemble(
        ...     train_X, train_Y, input_transform=Normalize(2), outcome_transform=Standardize(1)
        ... ).fit(seed=0)
        >>> model.uncertainty_decomposition(torch.rand(4, 2, dtype=torch.float64)).mean.shape
        torch.Size([4, 1])
    """

    hyperparameter_class = DeepEnsembleHyperparameters
    batched_data_limit = None
    trains_input_transform = True
    checkpoint_hyperparameters = (
        "ensemble_size",
        "hidden_widths",
        "activation",
        *MemberEnsemble.checkpoint_hyperparameters,
    )

    def _build_network(
        self, input_dim: int, output_dim: int, generator: torch.Generator
    ) -> EnsembleNetwork:
        hp = self.hyperparameters
        # Every batch element draws its members' seeds as an unbatched fit does: element b
        # of a batched fit is then the fit of element b alone with the same seed.
        member_seeds = (
            torch.randint(0, 2**31 - 1, (hp.ensemble_size,), generator=generator).tolist()
            * self.batch_shape.numel()
        )
        return EnsembleNetwork(
            [
                BatchedMLP(
                    input_dim,
                    output_dim,
                    hidden_widths=hp.hidden_widths,
                    member_seeds=member_seeds,
                    activation=hp.activation,
                    gaussian_head=hp.likelihood == "gaussian",
                    dropout=hp.dropout,
                    min_std=hp.min_std,
                )
            ]
        )

    def _fit(
        self, train_X: Tensor, train_Y: Tensor, generator: torch.Generator, progress: bool
    ) -> TrainingResult:
        hp = self.hyperparameters
        (members,) = self.network.groups
        num_data = train_X.shape[-2]
        known_noise = self._training_known_noise()
        rows_X, rows_Y = train_X, train_Y
        if self.batch_shape:
            # Element rows: member block b trains on batch element b's rows.
            rows_X, rows_Y = (element_rows(t, self.batch_shape) for t in (train_X, train_Y))
            if known_noise is not None:
                known_noise = known_noise.map(lambda t: element_rows(t, self.batch_shape))
        row_weights = resampling_row_weights(
            members, num_data, hp.bootstrap, hp.subset_fraction, train_X.dtype, train_X.device
        )
        validation_masks = None
        if hp.validation_fraction is not None:
            validation_masks = member_validation_masks(
                members, num_data, hp.validation_fraction, train_X.dtype, train_X.device
            )
            row_weights = (1.0 if row_weights is None else row_weights) * (1 - validation_masks)
            if (row_weights.sum(-1) == 0).any():
                raise ValueError(
                    "A member's resample lies entirely in its validation rows; use more "
                    "data or a smaller validation_fraction."
                )
        result = fit_members(
            members,
            rows_X,
            rows_Y,
            self._loop_config(hp),
            l2_regularization=hp.l2_regularization,
            row_weights=row_weights,
            validation_row_weights=validation_masks,
            dropout_generator=generator,
            training_dtype=hp.training_dtype,
            known_noise=known_noise,
            # A learnable input transform (Warp), shared by the members: the fit wrapped
            # the network in it and passes the untransformed inputs.
            input_transform=(
                self.network.inputs if isinstance(self.network, TransformedInputNetwork) else None
            ),
            progress=progress,
            description="deep ensemble",
        )
        # A diverged member would be served at the weights of its best loss before it
        # diverged, often its initialisation: an untrained network presented as trained.
        # Without validation rows the first epoch's loss is that of the initial weights.
        # From a random initialisation a member whose best loss stayed there over several
        # epochs never trained; from a warm start it may simply have started at its
        # optimum, and it failed only if it ended clearly above its starting loss.
        failed = result.diverged.clone()
        if validation_masks is None and result.epochs_run > 1:
            never_improved = result.best_epoch == 0
            if self.warm_started:
                first, last = result.loss_history[0], result.loss_history[-1]
                never_improved &= last > first + WARM_START_TOLERANCE * first.abs()
            failed |= never_improved
        if failed.any():
            raise NonFiniteLossError(
                f"The training of ensemble member(s) {failed.nonzero().squeeze(-1).tolist()} "
                "diverged (non-finite loss, or a loss that never fell below its initial "
                "value; from a warm start, one that ended clearly above it). Lower the "
                "learning rate, check the data scaling, or enable gradient clipping."
            )
        self._serve_members(self.network, torch.ones(self.members_per_element), train_X, train_Y)
        return result


#: The deep ensemble's catalogue entry (the registry's ``"deep-ensemble"``).
DEEP_ENSEMBLE_CARD = ModelCard(
    name="deep-ensemble",
    description="deep ensemble of 5 Gaussian-head networks trained in float32 as one batched "
    "computation (500 steps on batches of 256)",
    model_class=DeepEnsemble,
    family=ENSEMBLE_FAMILY,
    summary='`K` networks (Gaussian heads by default, or mean-only with `likelihood="mse"`) '
    "trained as ONE batched computation, each with its own initialisation, data order and "
    "optional bootstrap / subset / validation hold-out; `uncertainty_decomposition(X)` "
    "returns mean, aleatoric and epistemic variance",
    posterior="member means (`FunctionEnsemblePosterior`, joint across q; one member per MC "
    'sample, `joint_samples="functions"`, the default; `"continuous"`: the Gaussian of the '
    "members' moments); with "
    "`observation_noise=True`, the members' mixture of Gaussians",
    bo=BODefaults(
        constructor_options={
            "hidden_widths": (64, 64),
            "activation": "relu",
            "max_steps": 500,
            **SCALABLE_BATCH,
            "training_dtype": torch.float32,
            **FINITE_FUNCTION_SAMPLES,
        },
        supports_warm_start=True,
    ),
    fast=FastSettings({"hidden_widths": (32, 32), "epochs": 150}),
)
