r"""What the training loop minimises: :class:`BatchLoss`, through which
:func:`~botorch_nn_uq.training.loop.train_network` hands an epoch's mini-batches to a loss;
:class:`IndexedLoss`, a loss from a function of the batch's row indices; the L2 penalty
that the models add to their losses; and :class:`KnownNoise`, the known observation noise
of the training rows that a model's loss weighs its errors with."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor, nn


def l2_penalty(module: nn.Module) -> Tensor:
    r"""Keras-style L2 penalty ``sum ||theta||^2`` over all trainable weights and biases
    of ``module`` (multiply by ``lambda`` in the loss)."""
    return sum((p**2).sum() for p in module.parameters() if p.requires_grad)


class KnownNoise(NamedTuple):
    r"""The known observation-noise variances of the training rows (a model's
    ``train_Yvar``, in the units the network trains on), as the losses read them.

    A network with a Gaussian head is trained on the Gaussian negative log-likelihood with
    ``variance`` in place of the head's own variance; a network that predicts a mean only
    is trained on weighted least squares with ``weights``: the Gaussian log-likelihood with
    these variances up to a constant factor and offset, at the scale of the unweighted
    mean squared error, so that learning rates, L2 penalties and the balance with other
    loss terms (NOMU's) keep the meaning they have without known noise.

    Attributes:
        variance: ``n x m`` positive, finite noise variances (one per training row and
            output).
        weights: ``n x m`` precision weights ``1 / variance`` normalised to mean one over
            all entries (constant variances give weights of one); for batched training
            data (``batch_shape x n x m``), over each batch element's entries.
            Normalised weights are bounded by the number of entries however small a
            variance is, so one nearly noiseless row cannot blow up the loss's scale,
            only dominate it.
    """

    variance: Tensor
    weights: Tensor

    @classmethod
    def from_variance(cls, variance: Tensor) -> KnownNoise:
        r"""The known noise of variances ``variance`` (``n x m``, or ``batch_shape x n x
        m``), with their weights.

        Raises:
            ValueError: If a variance is not positive and finite (a model floors zeros
                before, see :mod:`botorch_nn_uq.models.known_noise`).
        """
        if not (variance.isfinite() & (variance > 0)).all():
            raise ValueError(
                "Known noise variances must be positive and finite to weight a loss; floor "
                "zero variances first."
            )
        precision = variance.reciprocal()
        # Per batch element, so that an element's weights are those of its data alone.
        return cls(variance, precision / precision.mean(dim=(-2, -1), keepdim=True))

    def rows(self, indices: Tensor | None) -> KnownNoise:
        r"""The known noise of the training rows ``indices`` (any shape of row indices,
        e.g. ``b`` or ``K x b``); all rows for ``None`` (a full batch)."""
        if indices is None:
            return self
        return KnownNoise(self.variance[indices], self.weights[indices])

    def map(self, function: Callable[[Tensor], Tensor]) -> KnownNoise:
        r"""The known noise with ``function`` applied to the variances and the weights
        (a reshape or a selection of rows)."""
        return KnownNoise(function(self.variance), function(self.weights))

    def to(self, dtype: torch.dtype, device: torch.device | str | None = None) -> KnownNoise:
        r"""The known noise in ``dtype`` on ``device``."""
        return KnownNoise(
            self.variance.to(dtype=dtype, device=device),
            self.weights.to(dtype=dtype, device=device),
        )


def mean_squared_error(prediction: Tensor, target: Tensor, weights: Tensor | None = None) -> Tensor:
    r"""The mean squared error of ``prediction`` against ``target`` (same shapes), each
    squared error multiplied by its weight if ``weights`` are given (weighted least
    squares, e.g. with :attr:`KnownNoise.weights`; broadcastable to the errors)."""
    squared_errors = (prediction - target).pow(2)
    if weights is None:
        return squared_errors.mean()
    return (weights * squared_errors).mean()


class BatchLoss(ABC):
    r"""The training loss of :func:`~botorch_nn_uq.training.loop.train_network` over an
    epoch's mini-batches.

    Per epoch the loop calls :meth:`begin_epoch` with the epoch's row order, then for
    each batch :meth:`select_batch` and :meth:`__call__`, which returns the loss to
    minimise and the value to monitor.

    A loss with ``static_shapes`` gives every batch of every epoch the same shapes (a
    short last batch is padded with rows of weight zero) and reads its batch from
    buffers that stay in place after :meth:`use_static_buffers`; a step on it can then
    be captured once as a CUDA graph and replayed.
    """

    #: Whether a step on this loss can be captured as a CUDA graph (see the class).
    static_shapes: bool = False

    @abstractmethod
    def begin_epoch(self, order: Tensor | None) -> None:
        r"""Prepare an epoch whose rows come in ``order`` (``num_data`` indices, ``K x
        num_data`` in member mode, on the networks' device), or ``None`` in full-batch
        training."""

    @abstractmethod
    def select_batch(self, batch: int, batch_size: int) -> None:
        r"""Make rows ``batch * batch_size`` to ``(batch + 1) * batch_size`` of the
        epoch's order the batch of the next call."""

    @abstractmethod
    def __call__(self) -> tuple[Tensor, Tensor]:
        r"""The selected batch's loss: a pair of the loss to minimise (a scalar, a
        ``K``-vector in member mode) and the detached float64 ``K``-vector to monitor
        (``K = 1`` for one network), which may hold terms whose gradient the optimizer
        adds itself (an L2 penalty applied as weight decay)."""

    def use_static_buffers(self) -> None:
        r"""From now on, read every batch from buffers that stay in place (only needed,
        and only called, for a loss with ``static_shapes``)."""
        raise NotImplementedError(f"{type(self).__name__} has no static buffers.")

    def backward(self, losses: Tensor, diverged: Tensor) -> None:
        r"""Set the gradients of the trained parameters from the member-mode losses
        ``losses`` (the ``K``-vector :meth:`__call__` returned), leaving out the
        ``diverged`` members (a boolean ``K``-vector on the device): autograd's backward
        pass of their sum, unless a loss computes its gradients itself."""
        losses.masked_fill(diverged, 0.0).sum().backward()


class IndexedLoss(BatchLoss):
    r"""A :class:`BatchLoss` from a function of the batch's row indices.

    Args:
        loss_fn: Maps a tensor of training-row indices (a mini-batch: ``b`` indices, or
            ``K x b`` in member mode, on the networks' device), or ``None`` for the full
            batch, to the loss (a scalar, a ``K``-vector in member mode).
    """

    def __init__(self, loss_fn: Callable[[Tensor | None], Tensor]) -> None:
        self._loss_fn = loss_fn
        self._order: Tensor | None = None
        self._indices: Tensor | None = None

    def begin_epoch(self, order: Tensor | None) -> None:
        self._order = order

    def select_batch(self, batch: int, batch_size: int) -> None:
        if self._order is not None:
            self._indices = self._order[..., batch * batch_size : (batch + 1) * batch_size]

    def __call__(self) -> tuple[Tensor, Tensor]:
        losses = self._loss_fn(self._indices)
        return losses, losses.detach().to(torch.float64).reshape(-1)
