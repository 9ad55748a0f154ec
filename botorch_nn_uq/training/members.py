"""Training the members of an ensemble: one batched computation per architecture."""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import Tensor, nn

from botorch_nn_uq.nn.batched_mlp import DATA_ORDER_STREAM, BatchedMLP
from botorch_nn_uq.nn.hand_backward import HandDifferentiatedMembers, supports_backward_by_hand
from botorch_nn_uq.training.config import TrainingConfig, TrainingResult
from botorch_nn_uq.training.loop import train_network
from botorch_nn_uq.training.losses import BatchLoss, KnownNoise
from botorch_nn_uq.training.trained_networks import InputMappedNetwork

#: The Gaussian negative log-likelihood's constant per output, ``0.5 log(2 pi)``.
HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)

_aten = torch.ops.aten


def member_row_losses(
    network: BatchedMLP,
    X: Tensor,
    Y: Tensor,
    per_member: bool,
    generator: torch.Generator | None = None,
    known_noise: KnownNoise | None = None,
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
        known_noise: The rows' known observation noise (``n x m``, or ``K x n x m`` with
            ``per_member``): a Gaussian head's likelihood takes its variances instead
            of the head's own, and a mean-only member's squared errors are multiplied
            by its weights (weighted least squares).

    Returns:
        A ``K x n`` tensor of losses.
    """
    output = network(X, per_member=per_member, generator=generator)
    residuals = output.mean - Y
    if output.std is None:
        squared_errors = residuals.pow(2)
        if known_noise is not None:
            squared_errors = known_noise.weights * squared_errors
        return squared_errors.mean(-1)
    variance = output.std.pow(2) if known_noise is None else known_noise.variance
    nll = 0.5 * (torch.log(2 * math.pi * variance) + residuals.pow(2) / variance)
    return nll.sum(-1)


def _row_losses_less_constant(
    network: BatchedMLP, X: Tensor, Y: Tensor, noise: tuple[Tensor, Tensor] | None = None
) -> Tensor:
    r""":func:`member_row_losses` of per-member rows without the Gaussian likelihood's
    ``log(2 pi) / 2`` per output, in fewer operations: ``log sigma + z^2 / 2`` with ``z =
    (y - mu) / sigma`` (equal up to rounding). With known noise ``noise = (precision,
    offset)`` (see :func:`_known_noise_terms`), a Gaussian head's row loss is ``offset +
    sum(precision * r^2) / 2`` and a mean-only member's ``mean(precision * r^2)``."""
    output = network(X, per_member=True)
    residuals = output.mean - Y
    if noise is not None:
        precision, offset = noise
        weighted = precision * residuals.square()
        if output.std is None:
            return weighted.mean(-1)
        return torch.add(offset, weighted.sum(-1), alpha=0.5)
    if output.std is None:
        return residuals.pow(2).mean(-1)
    standardised = residuals / output.std
    return torch.addcmul(output.std.log(), standardised, standardised, value=0.5).sum(-1)


def _known_noise_terms(known_noise: KnownNoise, gaussian_head: bool) -> tuple[Tensor, Tensor]:
    r"""The rows' known noise as :class:`CommonPathLoss` reads it: an ``n x m`` precision
    (``1 / variance`` for Gaussian heads, the least-squares weights for mean-only
    members; ``B x n x m`` for element rows) and an ``n``-vector offset (``sum(log
    variance) / 2`` for Gaussian heads, zero otherwise), so that a row's loss is
    :func:`member_row_losses`' less the likelihood's ``log(2 pi) / 2`` per output."""
    if not gaussian_head:
        weights = known_noise.weights
        return weights, weights.new_zeros(weights.shape[:-1])
    variance = known_noise.variance
    return variance.reciprocal(), 0.5 * variance.log().sum(-1)


class ElementRows:
    r"""How the ``K`` members of :func:`fit_members` read their training rows: all from
    the same ``n`` rows, or, with element rows (batched training data), each block of
    ``K / B`` consecutive members from its own batch element's ``n`` rows (``B`` of them).

    Args:
        num_members: ``K``.
        num_elements: ``B``; ``None`` for rows shared by all members.
        num_data: ``n``.
        device: Where the row offsets live (the data's device).
    """

    def __init__(
        self, num_members: int, num_elements: int | None, num_data: int, device: torch.device
    ) -> None:
        self.shared = num_elements is None
        self.per_element = num_members if num_elements is None else num_members // num_elements
        #: Each member's first row in the elements' rows flattened to ``(B n) x c``.
        self.offsets = (
            torch.arange(num_members, device=device) // self.per_element * num_data
        ).unsqueeze(-1)

    def members(self, data: Tensor) -> Tensor:
        r"""Every member's rows of ``data`` (``n x c`` shared, ``B x n x c`` element
        rows) as ``K x n x c`` (a view for shared rows)."""
        if self.shared:
            return data.expand(self.offsets.shape[0], *data.shape)
        return data.repeat_interleave(self.per_element, dim=0)

    def flat(self, data: Tensor) -> Tensor:
        r"""``data`` as one ``(B n) x c`` table of rows, which :meth:`indices` index."""
        return data if self.shared else data.reshape(-1, data.shape[-1])

    def indices(self, indices: Tensor) -> Tensor:
        r"""Each member's row ``indices`` (``K x b``, into its own ``n`` rows) as indices
        into :meth:`flat`'s table."""
        return indices if self.shared else indices + self.offsets

    def gather(self, data: Tensor, indices: Tensor) -> Tensor:
        r"""The rows ``indices`` (``K x b``) of every member, ``K x b x c``."""
        return self.flat(data)[self.indices(indices)]


class CommonPathLoss(BatchLoss):
    r"""The members' loss on the common path of :func:`fit_members`: every row counts
    once for every member, one L2 coefficient for all, no dropout.

    Built for speed, with the same losses and gradients as the general path up to
    rounding: an epoch's rows are gathered once, in each member's order, into one ``K x
    n' x d`` buffer (``n'`` the rows rounded up to whole batches; the short last batch
    is padded with rows of weight zero, so every batch has the same shapes) whose
    batches are views; a batch's loss is one weighted sum per member; the L2 penalty's
    gradient is left to the optimizer's ``weight_decay`` (``2 lambda``, exact for Adam,
    which adds ``weight_decay * theta`` to the gradient), and its value is added to the
    monitored loss without a backward pass. A step reads and writes only the device.

    Where the members allow it
    (:func:`~botorch_nn_uq.nn.hand_backward.supports_backward_by_hand`), the loss
    computes its gradients itself: the forward pass runs outside autograd, the loss's
    gradient with respect to the network's output is written out, and
    :meth:`backward` runs the network's backward pass by hand
    (:mod:`botorch_nn_uq.nn.hand_backward`), which spares autograd's graph and its walk
    (about a third of a step at a hundred rows on a CPU core).

    Args:
        network: The ``K`` members.
        train_X: ``n x d`` training inputs, or ``B x n x d`` element rows (see
            :func:`fit_members`).
        train_Y: ``n x m`` training targets (``B x n x m``).
        batch_size: The mini-batch size; ``None`` (or at least ``n``) trains full-batch.
        l2_regularization: ``lambda``, the same for every member.
        hand_gradients: Compute the gradients by hand; ``None`` does so wherever the
            members allow it (``False`` takes autograd's, for comparison).
        known_noise: The ``n`` rows' known observation noise (``n x m``, or ``B x n x m``);
            the losses are then :func:`member_row_losses`' with it.
        input_transform: A module with trainable parameters that maps every batch's
            (untransformed) rows to the members' inputs, shared by the members (see
            :func:`fit_members`), applied under autograd; by hand, the members' backward
            pass ends with the gradient at its outputs, from which autograd takes it into
            the module's parameters.
    """

    static_shapes = True

    def __init__(
        self,
        network: BatchedMLP,
        train_X: Tensor,
        train_Y: Tensor,
        batch_size: int | None,
        l2_regularization: float,
        hand_gradients: bool | None = None,
        known_noise: KnownNoise | None = None,
        input_transform: nn.Module | None = None,
    ) -> None:
        if hand_gradients is None:
            hand_gradients = supports_backward_by_hand(network)
        num_members, num_data = network.num_members, train_X.shape[-2]
        self._rows = ElementRows(
            num_members, train_X.shape[0] if train_X.ndim == 3 else None, num_data, train_X.device
        )
        outputs = train_Y.shape[-1]
        rows_per_batch = num_data if batch_size is None else min(batch_size, num_data)
        num_batches = math.ceil(num_data / rows_per_batch)
        padded = num_batches * rows_per_batch
        self._network = network
        self._train_X, self._train_Y = train_X, train_Y
        self._padding = padded - num_data
        self._l2 = l2_regularization
        self._constant = HALF_LOG_2PI * outputs if network.gaussian_head else 0.0
        position = torch.arange(padded, dtype=torch.float64)
        rows = (num_data - (position // rows_per_batch) * rows_per_batch).clamp(max=rows_per_batch)
        weights = torch.where(position < num_data, 1.0 / rows, 0.0).to(train_Y)
        # What an epoch gathers in each member's order: the inputs, the targets and, with
        # known noise, each row's precision and offset.
        self._row_data = [train_X, train_Y]
        if known_noise is not None:
            precision, offset = _known_noise_terms(known_noise, network.gaussian_head)
            self._row_data += [precision, offset.unsqueeze(-1)]
        if num_batches == 1:
            # Full batch: the rows in their own order, the same for every member.
            self._epoch_data = [self._rows.members(data) for data in self._row_data]
        else:
            self._epoch_data = [
                data.new_empty(num_members, padded, data.shape[-1]) for data in self._row_data
            ]
        self._batches = list(
            zip(
                *(data.split(rows_per_batch, dim=1) for data in self._epoch_data),
                weights.split(rows_per_batch),
                strict=True,
            )
        )
        self._selected = self._batches[0]
        self._static: tuple[Tensor, ...] | None = None
        # Member-major aliases, made once: the penalty's squared norms are then one
        # concatenation and one reduction.
        self._member_parameters = [
            parameter.detach().view(num_members, -1) for parameter in network.parameters()
        ]
        self._by_hand = HandDifferentiatedMembers(network) if hand_gradients else None
        self._grad_output: Tensor | None = None
        self._input_transform = input_transform
        self._transformed_X: Tensor | None = None

    def begin_epoch(self, order: Tensor | None) -> None:
        if order is None:
            return
        num_members, padded = self._epoch_data[0].shape[:2]
        if self._padding:
            order = nn.functional.pad(order, (0, self._padding))
        rows = self._rows.indices(order).reshape(-1)
        for data, epoch in zip(self._row_data, self._epoch_data, strict=True):
            torch.index_select(
                self._rows.flat(data), 0, rows, out=epoch.view(num_members * padded, -1)
            )

    def select_batch(self, batch: int, batch_size: int) -> None:
        if self._static is None:
            self._selected = self._batches[batch]
        elif len(self._batches) > 1:
            for buffer, values in zip(self._static, self._batches[batch], strict=True):
                buffer.copy_(values)

    def use_static_buffers(self) -> None:
        self._static = tuple(values.clone() for values in self._selected)
        self._selected = self._static

    def __call__(self) -> tuple[Tensor, Tensor]:
        X, Y, *noise_terms, weights = self._selected
        # The offsets are gathered as one column per row, like the other row data.
        noise = (noise_terms[0], noise_terms[1].squeeze(-1)) if noise_terms else None
        if self._input_transform is not None:
            X = self._transformed_X = self._input_transform(X)
        if self._by_hand is None:
            losses = torch.mv(_row_losses_less_constant(self._network, X, Y, noise), weights)
        else:
            output = self._by_hand.forward(X.detach())
            losses, self._grad_output = self._losses_and_output_gradient(output, Y, weights, noise)
        monitored = losses.detach() + self._constant
        if self._l2 > 0:
            flat = torch.cat(self._member_parameters, dim=1)
            squared_norms = torch.linalg.vecdot(flat, flat)
            monitored = torch.add(monitored, squared_norms, alpha=self._l2)
        return losses, monitored.to(torch.float64)

    def _losses_and_output_gradient(
        self, output: Tensor, Y: Tensor, weights: Tensor, noise: tuple[Tensor, Tensor] | None
    ) -> tuple[Tensor, Tensor]:
        r"""The ``K``-vector of the batch's losses (``_row_losses_less_constant``
        weighted by ``weights``) and their gradient with respect to the output layer's
        ``K x b x o`` values ``output``."""
        if noise is not None:
            return self._known_noise_losses_and_gradient(output, Y, weights, noise)
        network = self._network
        row_weights = weights.unsqueeze(-1)
        if not network.gaussian_head:
            residuals = output - Y
            outputs = residuals.shape[-1]
            losses = torch.mv(residuals.square().mean(-1), weights)
            return losses, residuals.mul_(row_weights * (2.0 / outputs))
        mean, raw_std = output.split(network.output_dim, dim=-1)
        std = nn.functional.softplus(raw_std).add_(network.min_std)
        standardised = (mean - Y).div_(std)
        row_losses = torch.addcmul(std.log(), standardised, standardised, value=0.5).sum(-1)
        # d/d mean = z / sigma and d/d sigma = (1 - z^2) / sigma, each row weighted.
        scale = row_weights / std
        grad_mean = standardised * scale
        grad_std = torch.addcmul(scale, grad_mean, standardised, value=-1.0)
        grad_raw_std = _aten.softplus_backward(grad_std, raw_std, 1.0, 20.0)
        return torch.mv(row_losses, weights), torch.cat([grad_mean, grad_raw_std], dim=-1)

    def _known_noise_losses_and_gradient(
        self, output: Tensor, Y: Tensor, weights: Tensor, noise: tuple[Tensor, Tensor]
    ) -> tuple[Tensor, Tensor]:
        r""":meth:`_losses_and_output_gradient` with known noise: the means' errors
        weighted by the rows' precisions; a Gaussian head's standard deviations take no
        part (zero gradient)."""
        network = self._network
        precision, offset = noise
        mean = output[..., : network.output_dim]
        residuals = mean - Y
        weighted = precision * residuals
        outputs = residuals.shape[-1]
        row_weights = weights.unsqueeze(-1)
        if not network.gaussian_head:
            losses = torch.mv((weighted * residuals).mean(-1), weights)
            return losses, weighted.mul_(row_weights * (2.0 / outputs))
        row_losses = torch.add(offset, (weighted * residuals).sum(-1), alpha=0.5)
        grad_mean = weighted.mul_(row_weights)
        grad_output = torch.cat([grad_mean, torch.zeros_like(grad_mean)], dim=-1)
        return torch.mv(row_losses, weights), grad_output

    def backward(self, losses: Tensor, diverged: Tensor) -> None:
        if self._by_hand is None:
            super().backward(losses, diverged)
            return
        # A diverged member's gradient is zero, as autograd's of its masked loss is.
        grad_output = torch.where(diverged.view(-1, 1, 1), 0.0, self._grad_output)
        transformed = self._input_transform is not None
        grad_input = self._by_hand.backward(grad_output, input_gradient=transformed)
        if transformed:
            self._transformed_X.backward(grad_input)
        self._grad_output = self._transformed_X = None


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
    training_dtype: torch.dtype | None = None,
    known_noise: KnownNoise | None = None,
    input_transform: nn.Module | None = None,
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

    With ``known_noise`` (a model's ``train_Yvar``) every row's loss uses its known noise
    (see :func:`member_row_losses`): Gaussian heads are trained on the likelihood of the
    known variances, mean-only members on weighted least squares.

    Element rows (batched training data, see :mod:`botorch_nn_uq.models.batched_data`):
    ``train_X`` of ``B x n x d`` (and ``train_Y``, ``known_noise`` of ``B x n x m``)
    with ``B`` dividing ``K``: members ``b K / B`` to ``(b + 1) K / B - 1`` train on
    element ``b``'s rows only, each exactly as it would on those rows alone (its row
    weights index its element's ``n`` rows).

    The common case (no row weights, no validation rows, one ``lambda``, no dropout, no
    per-member learning rates or plateau reductions, no gradient clipping, Adam; known
    noise or not) trains
    on a fast path (:class:`CommonPathLoss`, a fused optimizer, a CUDA graph on a GPU)
    that gives the same weights as the general one up to rounding.

    Args:
        network: The members (``K``).
        train_X: ``n x d`` (transformed) training inputs, or ``B x n x d`` element rows.
        train_Y: ``n x m`` (transformed) training targets (``B x n x m``).
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
        training_dtype: The floating-point type to train in (e.g. ``torch.float32``,
            faster on a CPU core); ``None`` trains in the dtype of ``train_Y``. The
            network is returned in the dtype it came in.
        known_noise: The known observation noise of the ``n`` training rows (``n x m``,
            ``B x n x m`` for element rows); ``None`` trains on the members' own noise
            model (Gaussian heads) or the unweighted squared error.
        input_transform: A module with trainable parameters that maps the inputs to the
            members' inputs (a model's learnable input transform, e.g. BoTorch's
            ``Warp``, as
            :class:`~botorch_nn_uq.models.input_transforms.TrainingInputs`), shared by
            all members and trained with them (``train_X`` are then the untransformed
            inputs): it is applied at every step, trains on the sum of the members'
            losses, and the best weights are kept jointly (see
            :func:`~botorch_nn_uq.training.loop.train_network`'s ``member_shared``).
            Returned in the dtype it came in, its buffers unchanged.
        progress: Show a progress bar.
        description: The progress bar's label.

    Returns:
        The per-member :class:`~botorch_nn_uq.training.config.TrainingResult`; ``network``
        holds each member's best weights.
    """
    num_members, num_data = network.num_members, train_X.shape[-2]
    if train_X.ndim not in (2, 3) or train_X.shape[:-1] != train_Y.shape[:-1]:
        raise ValueError(
            "train_X and train_Y must be `n x d` and `n x m` (or `B x n x d` and `B x n x m` "
            f"element rows); got shapes {tuple(train_X.shape)} and {tuple(train_Y.shape)}."
        )
    if train_X.ndim == 3 and num_members % train_X.shape[0]:
        raise ValueError(
            f"Element rows of {train_X.shape[0]} batch elements need a multiple of "
            f"{train_X.shape[0]} members; got {num_members}."
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
    if known_noise is not None and known_noise.variance.shape != train_Y.shape:
        raise ValueError(
            f"known_noise must have the shape of train_Y {tuple(train_Y.shape)}; got "
            f"{tuple(known_noise.variance.shape)}."
        )
    served_dtype = next(network.parameters()).dtype
    dtype = train_Y.dtype if training_dtype is None else training_dtype
    if not dtype.is_floating_point:
        raise ValueError(f"training_dtype must be a floating-point dtype; got {dtype}.")
    # A single coefficient is read once here, not on the device at every step.
    single_l2 = None
    if not isinstance(l2_regularization, Tensor) or l2_regularization.ndim == 0:
        single_l2 = float(l2_regularization)
    network.to(dtype)
    if input_transform is not None:
        # Its constants (the bounds it normalises to, its constraints' bounds) come back
        # as they were, not rounded through the training dtype.
        constants = {name: buffer.clone() for name, buffer in input_transform.named_buffers()}
        input_transform.to(dtype)
    on_device = {"dtype": dtype, "device": train_Y.device}
    try:
        return _fit_members(
            network,
            train_X.to(dtype),
            train_Y.to(dtype),
            config,
            l2_regularization=(
                single_l2 if single_l2 is not None else l2_regularization.to(**on_device)
            ),
            row_weights=None if row_weights is None else row_weights.to(**on_device),
            validation_row_weights=(
                None if validation_row_weights is None else validation_row_weights.to(**on_device)
            ),
            learning_rates=learning_rates,
            early_stopping_patience=early_stopping_patience,
            lr_reduction_patience=lr_reduction_patience,
            dropout_generator=dropout_generator,
            known_noise=None if known_noise is None else known_noise.to(**on_device),
            input_transform=input_transform,
            progress=progress,
            description=description,
        )
    finally:
        network.to(served_dtype)
        if input_transform is not None:
            input_transform.to(served_dtype)
            for name, buffer in input_transform.named_buffers():
                buffer.copy_(constants[name])


def _fit_members(
    network: BatchedMLP,
    train_X: Tensor,
    train_Y: Tensor,
    config: TrainingConfig,
    *,
    l2_regularization: float | Tensor,
    row_weights: Tensor | None,
    validation_row_weights: Tensor | None,
    learning_rates: Tensor | None,
    early_stopping_patience: Tensor | None,
    lr_reduction_patience: Tensor | None,
    dropout_generator: torch.Generator | None,
    known_noise: KnownNoise | None,
    input_transform: nn.Module | None,
    progress: bool,
    description: str,
) -> TrainingResult:
    r""":func:`fit_members` on data of the training dtype (checked there)."""
    # With a learnable input transform the loop trains it with the members.
    module = network if input_transform is None else InputMappedNetwork(input_transform, network)
    num_members, num_data = network.num_members, train_X.shape[-2]
    rows = ElementRows(
        num_members, train_X.shape[0] if train_X.ndim == 3 else None, num_data, train_X.device
    )
    common_path = (
        row_weights is None
        and validation_row_weights is None
        and isinstance(l2_regularization, float)
        and not network.has_dropout
        and learning_rates is None
        and lr_reduction_patience is None
        and config.lr_reduction_patience is None
        and config.gradient_clip_norm is None
        and config.optimizer == "adam"
    )
    training = {
        "num_data": num_data,
        "progress": progress,
        "description": description,
        "member_generators": network.member_generators(DATA_ORDER_STREAM),
        "member_early_stopping_patience": early_stopping_patience,
        "member_shared": input_transform,
    }
    if common_path:
        l2 = l2_regularization
        return train_network(
            module,
            CommonPathLoss(
                network,
                train_X,
                train_Y,
                config.batch_size,
                l2,
                known_noise=known_noise,
                input_transform=input_transform,
            ),
            config=dataclasses.replace(config, weight_decay=config.weight_decay + 2 * l2),
            fused_optimizer=True,
            **training,
        )
    row_weights = (
        torch.ones(num_members, num_data, dtype=train_Y.dtype, device=train_Y.device)
        if row_weights is None
        else row_weights
    )
    l2 = torch.as_tensor(l2_regularization, dtype=train_Y.dtype, device=train_Y.device)
    l2 = l2.expand(num_members)

    # Every member's rows, for full-batch losses: shared rows are evaluated once for all
    # members, element rows as each member's own.
    if rows.shared:
        full_X, full_Y, full_noise = train_X, train_Y, known_noise
    else:
        full_X, full_Y = rows.members(train_X), rows.members(train_Y)
        full_noise = None if known_noise is None else known_noise.map(rows.members)

    def loss(indices: Tensor | None) -> Tensor:
        if indices is None:
            row_losses = member_row_losses(
                module,
                full_X,
                full_Y,
                per_member=not rows.shared,
                generator=dropout_generator,
                known_noise=full_noise,
            )
            weights = row_weights
        else:
            row_losses = member_row_losses(
                module,
                rows.gather(train_X, indices),
                rows.gather(train_Y, indices),
                per_member=True,
                generator=dropout_generator,
                known_noise=(
                    None
                    if known_noise is None
                    else known_noise.map(rows.flat).rows(rows.indices(indices))
                ),
            )
            weights = row_weights.gather(1, indices)
        data_loss = _weighted_sum(row_losses, weights) / weights.sum(-1).clamp_min(1e-12)
        return data_loss + l2 * network.squared_norms()

    validation_loss = None
    if validation_row_weights is not None:

        def validation_loss() -> Tensor:
            row_losses = member_row_losses(
                module, full_X, full_Y, per_member=not rows.shared, known_noise=full_noise
            )
            weights = validation_row_weights
            return _weighted_sum(row_losses, weights) / weights.sum(-1)

    return train_network(
        module,
        loss,
        config=config,
        validation_loss_fn=validation_loss,
        member_learning_rates=learning_rates,
        member_lr_reduction_patience=lr_reduction_patience,
        **training,
    )


def _weighted_sum(row_losses: Tensor, weights: Tensor) -> Tensor:
    # Rows a member does not use must not reach it even when their loss is not finite.
    used = weights > 0
    return torch.where(used, weights * row_losses, torch.zeros_like(row_losses)).sum(-1)
