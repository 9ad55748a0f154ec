r"""What the training loop trains, in its two modes: one network (:class:`OneNetwork`), or
``K`` members stacked along the leading dimension of every parameter and buffer
(:class:`StackedMembers`). The epoch loop
(:func:`~botorch_nn_uq.training.loop.train_network`) keeps its records per member for
both; what differs between the modes is here: the mini-batch order, the backward pass,
gradient clipping, how an update and a learning-rate reduction are applied, and how the
best weights are kept."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import torch
from torch import Tensor, nn

from botorch_nn_uq.training.config import TrainingConfig, TrainingResult
from botorch_nn_uq.training.losses import BatchLoss
from botorch_nn_uq.training.optimizers import Stepper


class TrainedNetworks(ABC):
    r"""What the epoch loop trains: ``K`` networks whose training it tracks per member.

    Args:
        module: The trained module; all parameters with ``requires_grad`` are trained.
        batch_loss: The training loss.
        config: The training settings.
        early_stopping_patience: Float ``K``-vector of early-stopping patience (``inf``:
            never).
        lr_reduction_patience: Float ``K``-vector of plateau patience of the
            learning-rate reduction (``inf``: never).
    """

    def __init__(
        self,
        module: nn.Module,
        batch_loss: BatchLoss,
        config: TrainingConfig,
        early_stopping_patience: Tensor,
        lr_reduction_patience: Tensor,
    ) -> None:
        self.module = module
        self.parameters = [p for p in module.parameters() if p.requires_grad]
        self.device = self.parameters[0].device if self.parameters else torch.device("cpu")
        self.num_members = early_stopping_patience.shape[0]
        self.early_stopping_patience = early_stopping_patience
        self.lr_reduction_patience = lr_reduction_patience
        self.batch_loss = batch_loss
        self._config = config
        # Detached aliases, made once: they follow the in-place updates of the weights.
        self._state = {
            name: tensor.detach()
            for name, tensor in module.state_dict(keep_vars=True).items()
            if isinstance(tensor, Tensor)
        }
        self._best_state = {name: tensor.clone() for name, tensor in self._state.items()}
        self._masks_of: Tensor | None = None
        self._masks: list[Tensor] = []

    @abstractmethod
    def shuffle(self, num_data: int) -> Tensor:
        r"""An epoch's order of the training rows on the CPU: ``num_data`` indices (``K x
        num_data`` for stacked members)."""

    def losses(self) -> tuple[Tensor, Tensor]:
        r"""The selected batch's loss to minimise and its monitored ``K``-vector."""
        return self.batch_loss()

    @abstractmethod
    def update(self, optimizer: Stepper, losses: Tensor, diverged: Tensor) -> None:
        r"""One optimizer step on ``losses``, leaving out the ``diverged`` members
        (boolean ``K``-vector on the device)."""

    @abstractmethod
    def reduce_learning_rates(
        self, optimizer: Stepper, reduce: Tensor, reduce_on_host: Tensor
    ) -> None:
        r"""Multiply the learning rate of the members ``reduce`` (boolean ``K``-vector on
        the device; ``reduce_on_host`` is its copy on the CPU) by the plateau reduction
        factor."""

    def keep_best(self, improved: Tensor) -> None:
        r"""Record the current weights of the members ``improved`` (boolean ``K``-vector
        on the device) as their best."""
        if improved is not self._masks_of:
            # The full-batch loop passes one buffer, updated in place, at every step.
            self._masks = [self._member_mask(improved, best) for best in self._best_state.values()]
            self._masks_of = improved
        for (name, best), mask in zip(self._best_state.items(), self._masks, strict=True):
            torch.where(mask, self._state[name], best, out=best)

    @abstractmethod
    def _member_mask(self, improved: Tensor, tensor: Tensor) -> Tensor:
        r"""``improved`` shaped to select the members of ``tensor``."""

    def restore_best(self) -> None:
        r"""Load the recorded best weights into the module."""
        with torch.no_grad():
            for name, best in self._best_state.items():
                self._state[name].copy_(best)

    @abstractmethod
    def result(self, per_member: TrainingResult) -> TrainingResult:
        r"""The :class:`TrainingResult` to report, from the loop's per-member one."""


class OneNetwork(TrainedNetworks):
    r"""One plain network (``K = 1``): its mini-batch order comes from ``generator``
    (``None``: torch's global generator), and a non-finite loss ends training.

    Args:
        module: The network; all parameters with ``requires_grad`` are trained.
        batch_loss: The training loss (a scalar per batch).
        config: The training settings.
        generator: The CPU generator of the mini-batch order.
    """

    def __init__(
        self,
        module: nn.Module,
        batch_loss: BatchLoss,
        config: TrainingConfig,
        generator: torch.Generator | None,
    ) -> None:
        super().__init__(
            module,
            batch_loss,
            config,
            early_stopping_patience=_counts(config.early_stopping_patience, 1),
            lr_reduction_patience=_counts(config.lr_reduction_patience, 1),
        )
        self._generator = generator

    def shuffle(self, num_data: int) -> Tensor:
        return torch.randperm(num_data, generator=self._generator)

    def update(self, optimizer: Stepper, losses: Tensor, diverged: Tensor) -> None:
        # A non-finite loss ends the fit at the end of its epoch: no masking needed.
        losses.backward()
        if self._config.gradient_clip_norm is not None:
            nn.utils.clip_grad_norm_(self.parameters, self._config.gradient_clip_norm)
        optimizer.step()

    def reduce_learning_rates(
        self, optimizer: Stepper, reduce: Tensor, reduce_on_host: Tensor
    ) -> None:
        if bool(reduce_on_host[0]):
            for group in optimizer.param_groups:
                group["lr"] *= self._config.lr_reduction_factor

    def _member_mask(self, improved: Tensor, tensor: Tensor) -> Tensor:
        return improved.reshape(())

    def result(self, per_member: TrainingResult) -> TrainingResult:
        # One network reports plain numbers; divergence has raised before.
        return TrainingResult(
            best_loss=per_member.best_loss.item(),
            best_epoch=int(per_member.best_epoch.item()),
            epochs_run=per_member.epochs_run,
            loss_history=[monitored.item() for monitored in per_member.loss_history],
            steps_run=per_member.steps_run,
        )


class StackedMembers(TrainedNetworks):
    r"""``K`` networks stacked along the leading dimension of every parameter and buffer
    (member mode of :func:`~botorch_nn_uq.training.loop.train_network`; the keyword
    arguments are its ``member_*`` options).

    Args:
        module: The members; every parameter and buffer has a leading dimension ``K``.
        batch_loss: The training loss (a ``K``-vector per batch).
        config: The training settings.
        generators: One CPU generator per member, for its mini-batch order.
        learning_rates: Optional positive ``K``-vector of per-member learning rates.
        early_stopping_patience: Optional ``K``-vector of per-member early-stopping
            patience, replacing ``config.early_stopping_patience``.
        lr_reduction_patience: Optional ``K``-vector of per-member plateau patience,
            replacing ``config.lr_reduction_patience``.
    """

    def __init__(
        self,
        module: nn.Module,
        batch_loss: BatchLoss,
        config: TrainingConfig,
        *,
        generators: list[torch.Generator],
        learning_rates: Tensor | None,
        early_stopping_patience: Tensor | None,
        lr_reduction_patience: Tensor | None,
    ) -> None:
        num_members = len(generators)
        for tensor in module.state_dict().values():
            _member_view(tensor, num_members)
        if learning_rates is not None and (
            learning_rates.shape != (num_members,) or not (learning_rates > 0).all()
        ):
            raise ValueError(
                f"member_learning_rates must be a positive {num_members}-vector; got "
                f"{learning_rates.tolist()}."
            )
        super().__init__(
            module,
            batch_loss,
            config,
            early_stopping_patience=_member_counts(
                early_stopping_patience,
                config.early_stopping_patience,
                num_members,
                "member_early_stopping_patience",
            ),
            lr_reduction_patience=_member_counts(
                lr_reduction_patience,
                config.lr_reduction_patience,
                num_members,
                "member_lr_reduction_patience",
            ),
        )
        self._rescaled = learning_rates is not None or bool(
            torch.isfinite(self.lr_reduction_patience).any()
        )
        if self._rescaled and config.weight_decay > 0:
            raise ValueError(
                "Per-member learning rates (given, or reduced on plateaus) rescale each "
                "member's update, which is exact only without the optimizer's weight_decay; "
                "add an L2 penalty to the loss."
            )
        scale = (
            torch.ones(num_members, dtype=torch.float64)
            if learning_rates is None
            else learning_rates.detach().to(torch.float64).cpu() / config.learning_rate
        )
        self._update_scale = scale.to(self.device)
        self._generators = generators

    def shuffle(self, num_data: int) -> Tensor:
        return torch.stack([torch.randperm(num_data, generator=g) for g in self._generators])

    def losses(self) -> tuple[Tensor, Tensor]:
        losses, monitored = self.batch_loss()
        if losses.shape != (self.num_members,):
            raise ValueError(
                f"In member mode loss_fn must return a {self.num_members}-vector; got shape "
                f"{tuple(losses.shape)}."
            )
        return losses, monitored

    def update(self, optimizer: Stepper, losses: Tensor, diverged: Tensor) -> None:
        # A diverged member only ever reaches its own parameters; excluding its loss
        # keeps the other members' training identical to training them alone.
        self.batch_loss.backward(losses, diverged)
        if self._config.gradient_clip_norm is not None:
            _clip_member_gradients(
                self.parameters, self.num_members, self._config.gradient_clip_norm
            )
        before = [p.detach().clone() for p in self.parameters] if self._rescaled else None
        optimizer.step()
        if before is not None:
            _rescale_member_updates(self.parameters, before, self._update_scale)

    def reduce_learning_rates(
        self, optimizer: Stepper, reduce: Tensor, reduce_on_host: Tensor
    ) -> None:
        self._update_scale = torch.where(
            reduce, self._update_scale * self._config.lr_reduction_factor, self._update_scale
        )

    def _member_mask(self, improved: Tensor, tensor: Tensor) -> Tensor:
        return improved.view(-1, *([1] * (tensor.ndim - 1)))

    def result(self, per_member: TrainingResult) -> TrainingResult:
        return per_member


def _member_view(tensor: Tensor, num_members: int) -> Tensor:
    if tensor.ndim == 0 or tensor.shape[0] != num_members:
        raise ValueError(
            "Member mode needs a leading member dimension of size "
            f"{num_members} on every parameter and buffer; got shape {tuple(tensor.shape)}."
        )
    return tensor.reshape(num_members, -1)


def _clip_member_gradients(parameters: list[Tensor], num_members: int, max_norm: float) -> None:
    grads = [p.grad for p in parameters if p.grad is not None]
    squared = sum(_member_view(g, num_members).pow(2).sum(-1) for g in grads)
    scale = (max_norm / (squared.sqrt() + 1e-6)).clamp(max=1.0)
    for grad in grads:
        grad.mul_(scale.view(-1, *([1] * (grad.ndim - 1))))


def _counts(count: int | None, num_members: int) -> Tensor:
    r"""``count`` for each of ``num_members`` as a float vector (``inf`` for ``None``:
    never)."""
    return torch.full((num_members,), math.inf if count is None else float(count))


def _member_counts(
    values: Tensor | None, default: int | None, num_members: int, name: str
) -> Tensor:
    r"""Per-member counts ``values`` (``default`` for all if ``None``) as a float
    ``K``-vector (``inf``: never)."""
    if values is None:
        return _counts(default, num_members)
    values = torch.as_tensor(values).detach().cpu().to(torch.float64)
    if values.shape != (num_members,) or not (values >= 1).all():
        raise ValueError(f"{name} must be a {num_members}-vector of counts >= 1; got {values}.")
    return values


def _rescale_member_updates(parameters: list[Tensor], before: list[Tensor], scale: Tensor) -> None:
    with torch.no_grad():
        for parameter, old in zip(parameters, before, strict=True):
            factor = scale.to(dtype=parameter.dtype).view(-1, *([1] * (parameter.ndim - 1)))
            parameter.copy_(old + factor * (parameter - old))
