r"""The one training loop shared by every neural surrogate of the package.

:func:`train_network` trains one network, or ``K`` stacked members in member mode, with
one epoch loop: the batch schedule, the monitored loss, best-weights tracking, early
stopping, learning-rate reduction on plateaus, the step budget and divergence are kept
per member as ``K``-vectors (``K = 1`` for one network). What differs between the two
modes (the mini-batch order, the backward pass, gradient clipping, how an update and a
learning-rate reduction are applied, how best weights are stored) is the business of
:class:`_OneNetwork` and :class:`_StackedMembers`.

Threads: training runs on the caller's torch threads. No function of the package
changes process-wide thread state (``torch.set_num_threads`` acts on the whole process
and is not thread-safe); how many threads to use is the caller's decision
(``OMP_NUM_THREADS``, ``torch.set_num_threads`` in the calling program, the command
line's ``--threads``). The surrogates' networks are small: one thread trains them
fastest, and more threads than free cores slow training down by an order of magnitude
on a busy machine (the README's "Set-up and the two commands" has the measurement). The
worker processes of
:class:`~botorch_nn_uq.ensembles.pool.RayExecutor` are separate processes, which it
starts with its own thread count.
"""

from __future__ import annotations

import copy
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from botorch_nn_uq.training.config import (
    OPTIMIZERS,
    NonFiniteLossError,
    TrainingConfig,
    TrainingResult,
)


def l2_penalty(module: nn.Module) -> Tensor:
    r"""Keras-style L2 penalty ``sum ||theta||^2`` over all trainable weights and biases
    of ``module`` (multiply by ``lambda`` in the loss)."""
    return sum((p**2).sum() for p in module.parameters() if p.requires_grad)


def train_network(
    module: nn.Module,
    loss_fn: Callable[[Tensor | None], Tensor],
    num_data: int,
    config: TrainingConfig,
    *,
    validation_loss_fn: Callable[[], Tensor] | None = None,
    progress: bool = False,
    description: str = "training",
    generator: torch.Generator | None = None,
    member_generators: Sequence[torch.Generator] | None = None,
    member_learning_rates: Tensor | None = None,
    member_early_stopping_patience: Tensor | None = None,
    member_lr_reduction_patience: Tensor | None = None,
) -> TrainingResult:
    r"""Train ``module`` by minimising ``loss_fn`` and keep the best weights.

    Every model of the package trains through this function; models differ only in
    the loss they pass. The loop's own randomness is the mini-batch order, drawn from
    ``generator`` (one network) or ``member_generators`` (member mode); any other
    randomness of a step (dropout masks, artificial inputs) is the loss's, which draws
    it from the generator it was given. Training runs on the caller's torch threads (see
    the module's description).

    Best weights: the monitored loss is the validation loss if ``validation_loss_fn``
    is given, else the training loss. In full-batch mode the loss of each step is
    computed at the weights before the step, so those exact weights are snapshotted; in
    mini-batch mode the epoch's mean batch loss is attributed to the weights at the end
    of the epoch. Snapshots are deep copies of the state dict (a bare ``state_dict()``
    would keep live references), restored at the end.

    **Member mode** (``member_generators`` given) trains ``K`` stacked networks (e.g. a
    :class:`~botorch_nn_uq.nn.batched_mlp.BatchedMLP`: every parameter and buffer has a
    leading member dimension ``K``) as one computation that is mathematically identical
    to ``K`` independent trainings: ``loss_fn`` returns a ``K``-vector of per-member
    losses and the optimiser minimises their sum (so member ``k`` only sees the gradient
    of its own loss; the optimisers are element-wise); each member draws its own
    mini-batch order from its generator (indices ``K x b``); best weights, early
    stopping and gradient clipping are per member; a member whose loss becomes
    non-finite stops improving (it keeps its best weights, or reports a ``best_loss`` of
    ``inf`` if it never had a finite loss) while the others train on, and
    :class:`NonFiniteLossError` is raised only when every member has failed;
    ``member_learning_rates`` gives each
    member its own learning rate by rescaling its update (exact for optimisers whose
    step is proportional to the learning rate, i.e. all of ``OPTIMIZERS`` without
    ``weight_decay``). Training stops when every member has run out of patience.

    Args:
        module: The network; all parameters with ``requires_grad`` are trained.
        loss_fn: Maps a tensor of training-row indices (a mini-batch: ``b`` indices, or
            ``K x b`` in member mode, on the device of ``module``'s parameters), or
            ``None`` for the full batch, to a scalar loss (a ``K``-vector in member mode).
        num_data: The number of training rows.
        config: Optimiser, epochs, batching, early stopping and decay settings.
        validation_loss_fn: Optional callable returning a scalar validation loss (a
            ``K``-vector in member mode), evaluated without gradients once per epoch.
        progress: Show a tqdm progress bar.
        description: The progress bar's label.
        generator: The source of one network's mini-batch order, a CPU generator;
            ``None`` draws from torch's global CPU generator. Member mode takes
            ``member_generators`` instead.
        member_generators: One CPU ``torch.Generator`` per member for its mini-batch
            order; switches on member mode.
        member_learning_rates: Optional ``K``-vector of per-member learning rates (member
            mode only); ``config.learning_rate`` is then only the decay schedule's base.
        member_early_stopping_patience: Optional ``K``-vector of per-member
            early-stopping patience (member mode only), replacing
            ``config.early_stopping_patience``.
        member_lr_reduction_patience: Optional ``K``-vector of per-member plateau
            patience of the learning-rate reduction (member mode only), replacing
            ``config.lr_reduction_patience``.

    Returns:
        A :class:`TrainingResult` (with per-member ``K``-vectors in member mode).

    Raises:
        NonFiniteLossError: If a training loss is NaN or infinite.
    """
    member_options = {
        "member_learning_rates": member_learning_rates,
        "member_early_stopping_patience": member_early_stopping_patience,
        "member_lr_reduction_patience": member_lr_reduction_patience,
    }
    if member_generators is None:
        given = [name for name, value in member_options.items() if value is not None]
        if given:
            raise ValueError(f"{', '.join(given)} need member mode (member_generators).")
        network = _OneNetwork(module, loss_fn, config, generator)
    else:
        if generator is not None:
            raise ValueError(
                "In member mode each member's mini-batch order comes from its own "
                "generator (member_generators); generator orders one network's."
            )
        network = _StackedMembers(
            module,
            loss_fn,
            config,
            generators=list(member_generators),
            learning_rates=member_learning_rates,
            early_stopping_patience=member_early_stopping_patience,
            lr_reduction_patience=member_lr_reduction_patience,
        )
    return _train(
        network,
        num_data,
        config,
        validation_loss_fn=validation_loss_fn,
        progress=progress,
        description=description,
    )


class _TrainedNetworks(ABC):
    r"""What the epoch loop trains: ``K`` networks whose training it tracks per member.

    Args:
        module: The trained module; all parameters with ``requires_grad`` are trained.
        loss_fn: The training loss, as in :func:`train_network`.
        config: The training settings.
        early_stopping_patience: Float ``K``-vector of early-stopping patience (``inf``:
            never).
        lr_reduction_patience: Float ``K``-vector of plateau patience of the
            learning-rate reduction (``inf``: never).
    """

    def __init__(
        self,
        module: nn.Module,
        loss_fn: Callable[[Tensor | None], Tensor],
        config: TrainingConfig,
        early_stopping_patience: Tensor,
        lr_reduction_patience: Tensor,
    ) -> None:
        self.module = module
        self.parameters = [p for p in module.parameters() if p.requires_grad]
        self.num_members = early_stopping_patience.shape[0]
        self.early_stopping_patience = early_stopping_patience
        self.lr_reduction_patience = lr_reduction_patience
        self._loss_fn = loss_fn
        self._config = config

    @abstractmethod
    def shuffle(self, num_data: int) -> Tensor:
        r"""An epoch's order of the training rows: ``num_data`` indices (``K x num_data``
        for stacked members)."""

    def losses(self, indices: Tensor | None) -> Tensor:
        r"""The training loss of the rows ``indices`` (``None``: all rows)."""
        return self._loss_fn(indices)

    @abstractmethod
    def update(self, optimizer: torch.optim.Optimizer, losses: Tensor, diverged: Tensor) -> None:
        r"""One optimizer step on ``losses``, leaving out the ``diverged`` members
        (boolean ``K``-vector)."""

    @abstractmethod
    def reduce_learning_rates(self, optimizer: torch.optim.Optimizer, reduce: Tensor) -> None:
        r"""Multiply the learning rate of the members ``reduce`` (boolean ``K``-vector)
        by the plateau reduction factor."""

    @abstractmethod
    def snapshot(self) -> dict[str, Tensor]:
        r"""A copy of the current weights."""

    @abstractmethod
    def keep_best(self, improved: Tensor, snapshot: dict[str, Tensor] | None) -> None:
        r"""Record the weights of the members ``improved`` (boolean ``K``-vector) as their
        best: those of ``snapshot``, or the current weights if it is ``None``."""

    @abstractmethod
    def restore_best(self) -> None:
        r"""Load the recorded best weights into the module."""

    @abstractmethod
    def result(self, per_member: TrainingResult) -> TrainingResult:
        r"""The :class:`TrainingResult` to report, from the loop's per-member one."""


class _OneNetwork(_TrainedNetworks):
    r"""One plain network (``K = 1``): its mini-batch order comes from ``generator``
    (``None``: torch's global generator), and a non-finite loss ends training."""

    def __init__(
        self,
        module: nn.Module,
        loss_fn: Callable[[Tensor | None], Tensor],
        config: TrainingConfig,
        generator: torch.Generator | None,
    ) -> None:
        super().__init__(
            module,
            loss_fn,
            config,
            early_stopping_patience=_counts(config.early_stopping_patience, 1),
            lr_reduction_patience=_counts(config.lr_reduction_patience, 1),
        )
        self._best_state: dict[str, Tensor] | None = None
        self._generator = generator

    def shuffle(self, num_data: int) -> Tensor:
        return torch.randperm(num_data, generator=self._generator)

    def update(self, optimizer: torch.optim.Optimizer, losses: Tensor, diverged: Tensor) -> None:
        losses.backward()
        if self._config.gradient_clip_norm is not None:
            nn.utils.clip_grad_norm_(self.parameters, self._config.gradient_clip_norm)
        optimizer.step()

    def reduce_learning_rates(self, optimizer: torch.optim.Optimizer, reduce: Tensor) -> None:
        if bool(reduce.item()):
            for group in optimizer.param_groups:
                group["lr"] *= self._config.lr_reduction_factor

    def snapshot(self) -> dict[str, Tensor]:
        return copy.deepcopy(self.module.state_dict())

    def keep_best(self, improved: Tensor, snapshot: dict[str, Tensor] | None) -> None:
        self._best_state = snapshot if snapshot is not None else self.snapshot()

    def restore_best(self) -> None:
        if self._best_state is not None:
            self.module.load_state_dict(self._best_state)

    def result(self, per_member: TrainingResult) -> TrainingResult:
        # One network reports plain numbers; divergence has raised before.
        return TrainingResult(
            best_loss=per_member.best_loss.item(),
            best_epoch=int(per_member.best_epoch.item()),
            epochs_run=per_member.epochs_run,
            loss_history=[monitored.item() for monitored in per_member.loss_history],
            steps_run=per_member.steps_run,
        )


class _StackedMembers(_TrainedNetworks):
    r"""``K`` networks stacked along the leading dimension of every parameter and buffer
    (member mode of :func:`train_network`; the keyword arguments are its ``member_*``
    options)."""

    def __init__(
        self,
        module: nn.Module,
        loss_fn: Callable[[Tensor | None], Tensor],
        config: TrainingConfig,
        *,
        generators: list[torch.Generator],
        learning_rates: Tensor | None,
        early_stopping_patience: Tensor | None,
        lr_reduction_patience: Tensor | None,
    ) -> None:
        num_members = len(generators)
        state = module.state_dict()
        for tensor in state.values():
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
            loss_fn,
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
        self._update_scale = (
            torch.ones(num_members, dtype=torch.float64)
            if learning_rates is None
            else learning_rates.detach().to(torch.float64).cpu() / config.learning_rate
        )
        self._generators = generators
        self._state = state
        self._best_state = {name: tensor.detach().clone() for name, tensor in state.items()}

    def shuffle(self, num_data: int) -> Tensor:
        return torch.stack([torch.randperm(num_data, generator=g) for g in self._generators])

    def losses(self, indices: Tensor | None) -> Tensor:
        losses = self._loss_fn(indices)
        if losses.shape != (self.num_members,):
            raise ValueError(
                f"In member mode loss_fn must return a {self.num_members}-vector; got shape "
                f"{tuple(losses.shape)}."
            )
        return losses

    def update(self, optimizer: torch.optim.Optimizer, losses: Tensor, diverged: Tensor) -> None:
        # A diverged member only ever reaches its own parameters; excluding its loss
        # keeps the other members' training identical to training them alone.
        finite = (~diverged).to(losses.device)
        torch.where(finite, losses, torch.zeros_like(losses)).sum().backward()
        if self._config.gradient_clip_norm is not None:
            _clip_member_gradients(
                self.parameters, self.num_members, self._config.gradient_clip_norm
            )
        before = [p.detach().clone() for p in self.parameters] if self._rescaled else None
        optimizer.step()
        if before is not None:
            _rescale_member_updates(self.parameters, before, self._update_scale)

    def reduce_learning_rates(self, optimizer: torch.optim.Optimizer, reduce: Tensor) -> None:
        self._update_scale = torch.where(
            reduce, self._update_scale * self._config.lr_reduction_factor, self._update_scale
        )

    def snapshot(self) -> dict[str, Tensor]:
        return {name: tensor.detach().clone() for name, tensor in self._state.items()}

    def keep_best(self, improved: Tensor, snapshot: dict[str, Tensor] | None) -> None:
        source = snapshot if snapshot is not None else self._state
        for name, tensor in self._best_state.items():
            members = improved.to(tensor.device)
            tensor[members] = source[name].detach()[members]

    def restore_best(self) -> None:
        self.module.load_state_dict(self._best_state)

    def result(self, per_member: TrainingResult) -> TrainingResult:
        return per_member


def _train(
    network: _TrainedNetworks,
    num_data: int,
    config: TrainingConfig,
    *,
    validation_loss_fn: Callable[[], Tensor] | None,
    progress: bool,
    description: str,
) -> TrainingResult:
    r"""The epoch loop of :func:`train_network`, with its bookkeeping per member."""
    module = network.module
    optimizer, scheduler = _make_optimizer(network.parameters, config)
    full_batch = config.batch_size is None or config.batch_size >= num_data
    batch_size = num_data if full_batch else config.batch_size
    num_batches = math.ceil(num_data / batch_size)
    # Full-batch training loss is that of the weights before the step: keep them.
    monitors_pre_step_weights = full_batch and validation_loss_fn is None

    epochs = range(config.epochs)
    if progress:
        from tqdm.auto import tqdm

        epochs = tqdm(epochs, desc=description, leave=False)

    # Orders are drawn on the CPU (a seed gives the same order on every device) and
    # index the training data on the network's device.
    device = network.parameters[0].device if network.parameters else torch.device("cpu")
    num_members = network.num_members
    best_loss = torch.full((num_members,), math.inf, dtype=torch.float64)
    best_epoch = torch.full((num_members,), -1, dtype=torch.long)
    active = torch.ones(num_members, dtype=torch.bool)
    diverged = torch.zeros(num_members, dtype=torch.bool)
    epochs_without_improvement = torch.zeros(num_members, dtype=torch.long)
    epochs_on_plateau = torch.zeros(num_members)
    history: list[Tensor] = []
    epoch = -1
    steps_run = 0
    for epoch in epochs:
        module.train()
        order = None if full_batch else network.shuffle(num_data).to(device)
        epoch_loss = torch.zeros(num_members, dtype=torch.float64)
        epoch_rows = 0
        pre_step_state = None
        for batch in range(_batches_this_epoch(num_batches, steps_run, config.max_steps)):
            indices = (
                None if full_batch else order[..., batch * batch_size : (batch + 1) * batch_size]
            )
            optimizer.zero_grad(set_to_none=True)
            losses = network.losses(indices)
            detached = _float64_vector(losses)
            finite = torch.isfinite(detached)
            if not finite.all():
                diverged |= ~finite
                if diverged.all():
                    raise _non_finite_loss_error(losses.sum(), epoch)
                active &= ~diverged
            if (
                monitors_pre_step_weights
                and (active & (detached < best_loss - config.min_delta)).any()
            ):
                pre_step_state = network.snapshot()
            network.update(optimizer, losses, diverged)
            if scheduler is not None:
                scheduler.step()
            steps_run += 1
            if not full_batch:
                epoch_loss += detached * indices.shape[-1]
                epoch_rows += indices.shape[-1]
        if validation_loss_fn is not None:
            module.eval()
            with torch.no_grad():
                monitored = _float64_vector(validation_loss_fn())
        elif full_batch:
            monitored = detached
        else:
            monitored = epoch_loss / epoch_rows
        history.append(monitored)
        if progress:
            epochs.set_postfix(loss=f"{monitored.mean().item():.4g}")
        improved = active & (monitored < best_loss - config.min_delta)
        if improved.any():
            best_loss = torch.where(improved, monitored, best_loss)
            best_epoch[improved] = epoch
            network.keep_best(improved, pre_step_state)
        epochs_without_improvement = torch.where(
            improved, torch.zeros_like(epochs_without_improvement), epochs_without_improvement + 1
        )
        epochs_on_plateau = torch.where(improved, 0.0, epochs_on_plateau + 1)
        reduce = epochs_on_plateau >= network.lr_reduction_patience
        network.reduce_learning_rates(optimizer, reduce)
        epochs_on_plateau = torch.where(reduce, 0.0, epochs_on_plateau)
        active &= epochs_without_improvement < network.early_stopping_patience
        budget_spent = config.max_steps is not None and steps_run >= config.max_steps
        if budget_spent or not active.any():
            break
    network.restore_best()
    module.eval()
    return network.result(
        TrainingResult(
            best_loss=best_loss,
            best_epoch=best_epoch,
            epochs_run=epoch + 1,
            loss_history=history,
            steps_run=steps_run,
            diverged=diverged,
        )
    )


def _float64_vector(losses: Tensor) -> Tensor:
    r"""Losses (a scalar or a ``K``-vector) as a detached float64 CPU vector."""
    return losses.detach().to(torch.float64).cpu().reshape(-1)


def _non_finite_loss_error(loss: Tensor, epoch: int) -> NonFiniteLossError:
    return NonFiniteLossError(
        f"The training loss became {loss.item()} at epoch {epoch}. Lower the learning "
        "rate, check the data scaling (use Normalize/Standardize transforms), or "
        "enable gradient clipping."
    )


def _batches_this_epoch(num_batches: int, steps_run: int, max_steps: int | None) -> int:
    r"""The number of mini-batches of the next epoch under the step budget."""
    if max_steps is None:
        return num_batches
    return min(num_batches, max_steps - steps_run)


def _make_optimizer(
    parameters: list[Tensor], config: TrainingConfig
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler | None]:
    optimizer = OPTIMIZERS[config.optimizer](
        parameters, lr=config.learning_rate, weight_decay=config.weight_decay
    )
    scheduler = (
        torch.optim.lr_scheduler.StepLR(
            optimizer, step_size=config.lr_decay_steps, gamma=config.lr_decay_rate
        )
        if config.lr_decay_rate is not None
        else None
    )
    return optimizer, scheduler


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
            factor = scale.to(dtype=parameter.dtype, device=parameter.device)
            factor = factor.view(-1, *([1] * (parameter.ndim - 1)))
            parameter.copy_(old + factor * (parameter - old))
