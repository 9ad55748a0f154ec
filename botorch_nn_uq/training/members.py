"""Training the members of an ensemble: one batched computation per architecture."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from botorch_nn_uq.nn.batched_mlp import DATA_ORDER_STREAM, BatchedMLP
from botorch_nn_uq.training.config import TrainingConfig, TrainingResult
from botorch_nn_uq.training.loop import train_network


def member_row_losses(
    network: BatchedMLP,
    X: Tensor,
    Y: Tensor,
    per_member: bool,
    generator: torch.Generator | None = None,
) -> Tensor:
    r"""Per-member, per-row losses: squared error (mean-only members, averaged over
    outputs) or the Gaussian negative log-likelihood ``0.5 log(2 pi sigma^2) + (y -
    mu)^2 / (2 sigma^2)`` (Gaussian heads, summed over outputs).

    Args:
        network: The members.
        X: ``n x d`` inputs shared by all members, or ``K x n x d`` with ``per_member``.
        Y: ``n x m`` targets, or ``K x n x m`` with ``per_member``.
        per_member: Whether ``X`` and ``Y`` hold one row set per member.
        generator: The source of the training-time dropout masks; ``None`` draws from
            torch's global generator.

    Returns:
        A ``K x n`` tensor of losses.
    """
    output = network(X, per_member=per_member, generator=generator)
    residuals = output.mean - Y
    if output.std is None:
        return residuals.pow(2).mean(-1)
    variance = output.std.pow(2)
    nll = 0.5 * (torch.log(2 * math.pi * variance) + residuals.pow(2) / variance)
    return nll.sum(-1)


def fit_members(
    network: BatchedMLP,
    train_X: Tensor,
    train_Y: Tensor,
    config: TrainingConfig,
    *,
    l2_regularization: float | Tensor = 0.0,
    row_weights: Tensor | None = None,
    validation_row_weights: Tensor | None = None,
    learning_rates: Tensor | None = None,
    early_stopping_patience: Tensor | None = None,
    lr_reduction_patience: Tensor | None = None,
    dropout_generator: torch.Generator | None = None,
    progress: bool = False,
    description: str = "ensemble members",
) -> TrainingResult:
    r"""Train the ``K`` members of ``network`` independently, as one computation.

    Member ``k`` minimises the weighted mean of its row losses (see
    :func:`member_row_losses`) plus ``lambda_k ||theta_k||^2`` (Keras semantics, weights
    and biases). Its mini-batch order comes from its own generator
    (:meth:`BatchedMLP.member_generators`), so the result equals training each member
    alone with the same seed (up to floating-point summation order), except for
    training-time dropout masks, which come from ``dropout_generator`` in one draw for
    all members.

    Per-member data (bootstraps, cross-validation folds, hold-out sets) are expressed as
    row weights over the same ``n`` rows: a weight is a row's multiplicity in that
    member's training set (0: not used). Full-batch training then equals training on the
    resampled rows exactly; with mini-batches every batch's loss is the weighted mean
    over its rows (equal in expectation, not step by step).

    Args:
        network: The members (``K``).
        train_X: ``n x d`` (transformed) training inputs.
        train_Y: ``n x m`` (transformed) training targets.
        config: Epochs, learning rate, batch size, optimizer, patience, ... (the
            optimizer's own ``weight_decay`` must be 0 when ``learning_rates`` is given).
        l2_regularization: ``lambda`` for all members, or a ``K``-vector.
        row_weights: ``K x n`` non-negative training multiplicities; all ones if omitted.
        validation_row_weights: Optional ``K x n`` weights of each member's validation
            rows; the monitored loss (best weights, early stopping) is then each member's
            weighted validation loss instead of its training loss.
        learning_rates: Optional ``K``-vector of per-member learning rates.
        early_stopping_patience: Optional ``K``-vector of per-member early-stopping
            patience.
        lr_reduction_patience: Optional ``K``-vector of per-member plateau patience of
            the learning-rate reduction (factor ``config.lr_reduction_factor``).
        dropout_generator: The source of the training-time dropout masks (members with
            positive dropout rates); ``None`` draws from torch's global generator.
        progress: Show a progress bar.
        description: The progress bar's label.

    Returns:
        The per-member :class:`~botorch_nn_uq.training.config.TrainingResult`; ``network``
        holds each member's best weights.
    """
    num_members, num_data = network.num_members, train_X.shape[0]
    reference = train_Y
    row_weights = (
        torch.ones(num_members, num_data, dtype=reference.dtype, device=reference.device)
        if row_weights is None
        else row_weights.to(reference)
    )
    for name, weights in (
        ("row_weights", row_weights),
        ("validation_row_weights", validation_row_weights),
    ):
        if weights is None:
            continue
        if weights.shape != (num_members, num_data) or (weights < 0).any():
            raise ValueError(
                f"{name} must be a non-negative `K x n` = ({num_members}, {num_data}) tensor; "
                f"got shape {tuple(weights.shape)}."
            )
        if (weights.sum(-1) <= 0).any():
            raise ValueError(f"Every member needs at least one row with positive {name}.")
    l2 = torch.as_tensor(l2_regularization, dtype=reference.dtype, device=reference.device)
    l2 = l2.expand(num_members)

    def loss(indices: Tensor | None) -> Tensor:
        if indices is None:
            row_losses = member_row_losses(
                network, train_X, train_Y, per_member=False, generator=dropout_generator
            )
            weights = row_weights
        else:
            row_losses = member_row_losses(
                network,
                train_X[indices],
                train_Y[indices],
                per_member=True,
                generator=dropout_generator,
            )
            weights = row_weights.gather(1, indices)
        data_loss = _weighted_sum(row_losses, weights) / weights.sum(-1).clamp_min(1e-12)
        return data_loss + l2 * network.squared_norms()

    validation_loss = None
    if validation_row_weights is not None:
        validation_weights = validation_row_weights.to(reference)

        def validation_loss() -> Tensor:
            row_losses = member_row_losses(network, train_X, train_Y, per_member=False)
            return _weighted_sum(row_losses, validation_weights) / validation_weights.sum(-1)

    return train_network(
        network,
        loss,
        num_data=num_data,
        config=config,
        validation_loss_fn=validation_loss,
        progress=progress,
        description=description,
        member_generators=network.member_generators(DATA_ORDER_STREAM),
        member_learning_rates=learning_rates,
        member_early_stopping_patience=early_stopping_patience,
        member_lr_reduction_patience=lr_reduction_patience,
    )


def _weighted_sum(row_losses: Tensor, weights: Tensor) -> Tensor:
    # Rows a member does not use must not reach it even when their loss is not finite.
    used = weights > 0
    return torch.where(used, weights * row_losses, torch.zeros_like(row_losses)).sum(-1)
