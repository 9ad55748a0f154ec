r"""What the training loop trains, in its two modes: one network (:class:`OneNetwork`), or
``K`` members stacked along the leading dimension of every parameter and buffer
(:class:`StackedMembers`), optionally with one module that all members share (a learnable
input transform). The epoch loop (:func:`~botorch_nn_uq.training.loop.train_network`)
keeps its records per member for both; what differs between the modes is here: the
mini-batch order, the backward pass, gradient clipping, how an update and a
learning-rate reduction are applied, and how the best weights are kept.

Parameters with a GPyTorch constraint that is not enforced by a reparametrisation (such
as the concentrations of BoTorch's ``Warp``, which must stay positive) are projected onto
their bounds after every optimizer step: BoTorch's own fits respect such bounds through
L-BFGS-B, and a first-order step has nothing else that keeps them."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any

import torch
from torch import Tensor, nn

from botorch_nn_uq.training.config import TrainingConfig, TrainingResult
from botorch_nn_uq.training.losses import BatchLoss
from botorch_nn_uq.training.optimizers import Stepper


class InputMappedNetwork(nn.Module):
    r"""A network behind a trainable map of its inputs, ``network(inputs(X), ...)``: what
    the loop trains when the inputs go through a learnable input transform, so that the
    optimizer sees the parameters of both.

    Attributes that this module does not have (``num_members``, ``hidden_layers``, ...)
    are the network's.

    Args:
        inputs: A module that maps the raw inputs to the network's inputs (for a model's
            input transform,
            :class:`~botorch_nn_uq.models.input_transforms.TrainingInputs`).
        network: The network.

    Example:
        >>> module = InputMappedNetwork(nn.Linear(2, 2), nn.Linear(2, 1))
        >>> sorted(name for name, _ in module.named_parameters())
        ['inputs.bias', 'inputs.weight', 'network.bias', 'network.weight']
    """

    def __init__(self, inputs: nn.Module, network: nn.Module) -> None:
        super().__init__()
        self.inputs = inputs
        self.network = network

    def forward(self, X: Tensor, *args: Any, **kwargs: Any) -> Any:
        r"""The network at the mapped ``X``; other arguments are the network's."""
        return self.network(self.inputs(X), *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["network"], name)


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
        self._bounded = _bounded_parameters(module)
        #: Whether the best weights are kept jointly: the members share trained parameters,
        #: so the loop keeps the epoch of the lowest mean monitored loss for all of them.
        self.joint_best = False

    def optimizer_groups(self) -> list[Tensor] | list[dict[str, object]]:
        r"""What the optimizer trains: the trained parameters, or parameter groups."""
        return self.parameters

    def project(self) -> None:
        r"""Clamp the parameters with unenforced GPyTorch constraints to their bounds
        (after an optimizer step)."""
        if not self._bounded:
            # Most fits have none: no per-step cost for them.
            return
        with torch.no_grad():
            for parameter, lower, upper in self._bounded:
                parameter.clamp_(min=lower, max=upper)

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
        self.project()

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

    A ``shared`` submodule (a learnable input transform that all members see) has no
    member dimension. Its parameters train on the sum of the members' losses (the
    gradient of every member that has not diverged), at the configured learning rate
    and without weight decay (a decay toward zero is a prior on weights; ``Warp``'s
    identity lies at concentrations of one), and gradient clipping clips their gradient
    as one group. Because every member's function depends on them, the best weights are
    kept jointly (``joint_best``): the step or epoch with the lowest mean monitored loss
    over the members restores the members and the shared module together, so the
    served members are the ones trained with the served transform.

    Args:
        module: The members; every parameter and buffer outside ``shared`` has a
            leading dimension ``K``.
        batch_loss: The training loss (a ``K``-vector per batch).
        config: The training settings.
        generators: One CPU generator per member, for its mini-batch order.
        learning_rates: Optional positive ``K``-vector of per-member learning rates.
        early_stopping_patience: Optional ``K``-vector of per-member early-stopping
            patience, replacing ``config.early_stopping_patience``.
        lr_reduction_patience: Optional ``K``-vector of per-member plateau patience,
            replacing ``config.lr_reduction_patience``.
        shared: Optional submodule of ``module`` whose parameters and buffers all
            members share.
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
        shared: nn.Module | None = None,
    ) -> None:
        num_members = len(generators)
        shared_ids = (
            set() if shared is None else {id(t) for t in shared.state_dict(keep_vars=True).values()}
        )
        for tensor in module.state_dict(keep_vars=True).values():
            if id(tensor) not in shared_ids:
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
        self._shared_parameters = [p for p in self.parameters if id(p) in shared_ids]
        self._member_parameters = [p for p in self.parameters if id(p) not in shared_ids]
        # The best-state entries by name that the shared module owns.
        self._shared_names = {
            name
            for name, tensor in module.state_dict(keep_vars=True).items()
            if id(tensor) in shared_ids
        }
        self.joint_best = bool(self._shared_names)

    def optimizer_groups(self) -> list[Tensor] | list[dict[str, object]]:
        if not self._shared_parameters:
            return self.parameters
        return [
            {"params": self._member_parameters},
            {"params": self._shared_parameters, "weight_decay": 0.0},
        ]

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
                self._member_parameters, self.num_members, self._config.gradient_clip_norm
            )
            if self._shared_parameters:
                nn.utils.clip_grad_norm_(self._shared_parameters, self._config.gradient_clip_norm)
        members = self._member_parameters
        before = [p.detach().clone() for p in members] if self._rescaled else None
        optimizer.step()
        if before is not None:
            # The shared parameters train at the configured rate: no member's rate is theirs.
            _rescale_member_updates(members, before, self._update_scale)
        self.project()

    def reduce_learning_rates(
        self, optimizer: Stepper, reduce: Tensor, reduce_on_host: Tensor
    ) -> None:
        self._update_scale = torch.where(
            reduce, self._update_scale * self._config.lr_reduction_factor, self._update_scale
        )

    def keep_best(self, improved: Tensor) -> None:
        if improved is not self._masks_of and self._shared_names:
            # Joint best weights improve for all members at once: member 0 speaks for all.
            self._masks = [
                improved[0] if name in self._shared_names else self._member_mask(improved, best)
                for name, best in self._best_state.items()
            ]
            self._masks_of = improved
        super().keep_best(improved)

    def _member_mask(self, improved: Tensor, tensor: Tensor) -> Tensor:
        return improved.view(-1, *([1] * (tensor.ndim - 1)))

    def result(self, per_member: TrainingResult) -> TrainingResult:
        return per_member


def _bounded_parameters(module: nn.Module) -> list[tuple[Tensor, Tensor, Tensor]]:
    r"""The trained parameters of ``module`` with a GPyTorch constraint that no
    reparametrisation enforces, with the constraint's lower and upper bounds (tensors
    that follow the module's dtype and device)."""
    bounded: dict[int, tuple[Tensor, Tensor, Tensor]] = {}
    for submodule in module.modules():
        if not hasattr(submodule, "named_parameters_and_constraints"):
            continue
        for _, parameter, constraint in submodule.named_parameters_and_constraints():
            if constraint is None or constraint.enforced or not parameter.requires_grad:
                continue
            bounded[id(parameter)] = (parameter, constraint.lower_bound, constraint.upper_bound)
    return list(bounded.values())


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
