r"""The one training loop shared by every neural surrogate of the package.

:func:`train_network` trains one network, or ``K`` stacked members in member mode, with
one epoch loop: the batch schedule, the monitored loss, best-weights tracking, early
stopping, learning-rate reduction on plateaus, the step budget and divergence are kept
per member as ``K``-vectors (``K = 1`` for one network). What differs between the two
modes (the mini-batch order, the backward pass, gradient clipping, how an update and a
learning-rate reduction are applied, how best weights are stored) is the business of
:class:`_OneNetwork` and :class:`_StackedMembers`; what a batch's loss is, and how an
epoch's rows reach it, is the business of a :class:`BatchLoss`.

No host synchronisation inside a step: the per-member bookkeeping (losses, divergence,
best losses and best weights) lives on the networks' device and is updated there with
``torch.where``; the loop reads it back once per epoch (the history, early stopping and
the all-diverged error), and an epoch's row order is copied to the device once. On a GPU
a step then only queues kernels, and a :class:`BatchLoss` with static shapes
(``static_shapes``) has its whole step (forward, backward, optimizer, bookkeeping)
captured once as a CUDA graph and replayed (``TrainingConfig.cuda_graphs``).

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

import math
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn
from torch.optim.optimizer import _global_optimizer_post_hooks, _global_optimizer_pre_hooks

from botorch_nn_uq.training.config import (
    OPTIMIZERS,
    NonFiniteLossError,
    TrainingConfig,
    TrainingResult,
)

#: The optimizers whose step can be captured in a CUDA graph (their state kept on the
#: device, ``capturable=True``).
CAPTURABLE_OPTIMIZERS = ("adam", "adamw")

#: Eager steps before a step is captured as a CUDA graph: the optimizer creates its state
#: and the libraries their workspaces in these, outside the capture.
CUDA_GRAPH_WARMUP_STEPS = 3


def l2_penalty(module: nn.Module) -> Tensor:
    r"""Keras-style L2 penalty ``sum ||theta||^2`` over all trainable weights and biases
    of ``module`` (multiply by ``lambda`` in the loss)."""
    return sum((p**2).sum() for p in module.parameters() if p.requires_grad)


class BatchLoss(ABC):
    r"""The training loss of :func:`train_network` over an epoch's mini-batches.

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


def train_network(
    module: nn.Module,
    loss_fn: Callable[[Tensor | None], Tensor] | BatchLoss,
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
    fused_optimizer: bool = False,
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
    computed at the weights before the step, so those exact weights are kept; in
    mini-batch mode the epoch's mean batch loss is attributed to the weights at the end
    of the epoch. Best weights are copies kept on the device, restored at the end.

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
    :class:`NonFiniteLossError` is raised at the end of the epoch in which every member
    has failed; ``member_learning_rates`` gives each
    member its own learning rate by rescaling its update (exact for optimisers whose
    step is proportional to the learning rate, i.e. all of ``OPTIMIZERS`` without
    ``weight_decay``). Training stops when every member has run out of patience.

    Args:
        module: The network; all parameters with ``requires_grad`` are trained.
        loss_fn: Maps a tensor of training-row indices (a mini-batch: ``b`` indices, or
            ``K x b`` in member mode, on the device of ``module``'s parameters), or
            ``None`` for the full batch, to a scalar loss (a ``K``-vector in member
            mode); or a :class:`BatchLoss`, which prepares each epoch's rows itself.
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
        fused_optimizer: Use the optimizer's fused implementation where the device has
            one (``"adam"``, ``"adamw"`` and ``"sgd"``), else its multi-tensor one: the
            same update up to rounding, in a few kernels instead of several per
            parameter.

    Returns:
        A :class:`TrainingResult` (with per-member ``K``-vectors in member mode).

    Raises:
        NonFiniteLossError: If a training loss is NaN or infinite (in member mode: every
            member's).
    """
    member_options = {
        "member_learning_rates": member_learning_rates,
        "member_early_stopping_patience": member_early_stopping_patience,
        "member_lr_reduction_patience": member_lr_reduction_patience,
    }
    batch_loss = loss_fn if isinstance(loss_fn, BatchLoss) else IndexedLoss(loss_fn)
    if member_generators is None:
        given = [name for name, value in member_options.items() if value is not None]
        if given:
            raise ValueError(f"{', '.join(given)} need member mode (member_generators).")
        network = _OneNetwork(module, batch_loss, config, generator)
    else:
        if generator is not None:
            raise ValueError(
                "In member mode each member's mini-batch order comes from its own "
                "generator (member_generators); generator orders one network's."
            )
        network = _StackedMembers(
            module,
            batch_loss,
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
        fused_optimizer=fused_optimizer,
    )


class _TrainedNetworks(ABC):
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

    @abstractmethod
    def shuffle(self, num_data: int) -> Tensor:
        r"""An epoch's order of the training rows on the CPU: ``num_data`` indices (``K x
        num_data`` for stacked members)."""

    def losses(self) -> tuple[Tensor, Tensor]:
        r"""The selected batch's loss to minimise and its monitored ``K``-vector."""
        return self.batch_loss()

    @abstractmethod
    def update(self, optimizer: _Stepper, losses: Tensor, diverged: Tensor) -> None:
        r"""One optimizer step on ``losses``, leaving out the ``diverged`` members
        (boolean ``K``-vector on the device)."""

    @abstractmethod
    def reduce_learning_rates(
        self, optimizer: _Stepper, reduce: Tensor, reduce_on_host: Tensor
    ) -> None:
        r"""Multiply the learning rate of the members ``reduce`` (boolean ``K``-vector on
        the device; ``reduce_on_host`` is its copy on the CPU) by the plateau reduction
        factor."""

    def keep_best(self, improved: Tensor) -> None:
        r"""Record the current weights of the members ``improved`` (boolean ``K``-vector
        on the device) as their best."""
        for name, best in self._best_state.items():
            torch.where(self._member_mask(improved, best), self._state[name], best, out=best)

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


class _OneNetwork(_TrainedNetworks):
    r"""One plain network (``K = 1``): its mini-batch order comes from ``generator``
    (``None``: torch's global generator), and a non-finite loss ends training."""

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

    def update(self, optimizer: _Stepper, losses: Tensor, diverged: Tensor) -> None:
        # A non-finite loss ends the fit at the end of its epoch: no masking needed.
        losses.backward()
        if self._config.gradient_clip_norm is not None:
            nn.utils.clip_grad_norm_(self.parameters, self._config.gradient_clip_norm)
        optimizer.step()

    def reduce_learning_rates(
        self, optimizer: _Stepper, reduce: Tensor, reduce_on_host: Tensor
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


class _StackedMembers(_TrainedNetworks):
    r"""``K`` networks stacked along the leading dimension of every parameter and buffer
    (member mode of :func:`train_network`; the keyword arguments are its ``member_*``
    options)."""

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

    def update(self, optimizer: _Stepper, losses: Tensor, diverged: Tensor) -> None:
        # A diverged member only ever reaches its own parameters; excluding its loss
        # keeps the other members' training identical to training them alone.
        losses.masked_fill(diverged, 0.0).sum().backward()
        if self._config.gradient_clip_norm is not None:
            _clip_member_gradients(
                self.parameters, self.num_members, self._config.gradient_clip_norm
            )
        before = [p.detach().clone() for p in self.parameters] if self._rescaled else None
        optimizer.step()
        if before is not None:
            _rescale_member_updates(self.parameters, before, self._update_scale)

    def reduce_learning_rates(
        self, optimizer: _Stepper, reduce: Tensor, reduce_on_host: Tensor
    ) -> None:
        self._update_scale = torch.where(
            reduce, self._update_scale * self._config.lr_reduction_factor, self._update_scale
        )

    def _member_mask(self, improved: Tensor, tensor: Tensor) -> Tensor:
        return improved.view(-1, *([1] * (tensor.ndim - 1)))

    def result(self, per_member: TrainingResult) -> TrainingResult:
        return per_member


class _Bookkeeping:
    r"""The loop's per-member records, kept on the networks' device so that a step never
    waits for the host: divergence, the best monitored losses and their epochs, patience
    counters, and the running sum of the epoch's batch losses.

    Args:
        network: The trained networks.
        config: The training settings.
        monitors_pre_step_weights: Whether each step's loss is the monitored loss of the
            weights before the step (full-batch training without validation), whose
            best weights are then kept inside the step.
    """

    def __init__(
        self, network: _TrainedNetworks, config: TrainingConfig, monitors_pre_step_weights: bool
    ) -> None:
        num_members, device = network.num_members, network.device
        self._network = network
        self._min_delta = config.min_delta
        self._monitors_pre_step_weights = monitors_pre_step_weights
        vector = {"size": (num_members,), "device": device}
        self.best_loss = torch.full(fill_value=math.inf, dtype=torch.float64, **vector)
        self.best_epoch = torch.full(fill_value=-1, dtype=torch.long, **vector)
        self.active = torch.ones(dtype=torch.bool, **vector)
        self.diverged = torch.zeros(dtype=torch.bool, **vector)
        self.improved = torch.zeros(dtype=torch.bool, **vector)
        self.epoch_loss = torch.zeros(dtype=torch.float64, **vector)
        self.batch_rows = torch.zeros((), dtype=torch.float64, device=device)
        #: The value of ``batch_rows``, kept on the host to refill it only when it changes.
        self.batch_rows_value = 0
        self.last_loss = torch.zeros(dtype=torch.float64, **vector)
        self._epochs_without_improvement = torch.zeros(dtype=torch.long, **vector)
        self._epochs_on_plateau = torch.zeros(dtype=torch.float64, **vector)
        self._early_stopping_patience = network.early_stopping_patience.to(device)
        self._lr_reduction_patience = network.lr_reduction_patience.to(device)

    def step(self, optimizer: _Stepper) -> None:
        r"""One optimizer step on the selected batch, with its bookkeeping; device work
        only (it is what a CUDA graph captures)."""
        network = self._network
        losses, monitored = network.losses()
        # NaN exactly where a loss is not finite (0 * inf is NaN): two operations where
        # ~isfinite takes five.
        self.diverged |= torch.isnan(monitored * 0)
        if self._monitors_pre_step_weights:
            # The step's loss is that of the weights before the step: keep them now.
            improved = self.active & ~self.diverged & (monitored < self.best_loss - self._min_delta)
            network.keep_best(improved)
            torch.where(improved, monitored, self.best_loss, out=self.best_loss)
            self.improved.copy_(improved)
        else:
            self.epoch_loss.addcmul_(monitored, self.batch_rows)
        self.last_loss = monitored
        network.update(optimizer, losses, self.diverged)

    def end_epoch(
        self,
        epoch: int,
        optimizer: _Stepper,
        validation_loss_fn: Callable[[], Tensor] | None,
        epoch_rows: int,
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        r"""The epoch's end: the monitored loss, improvements, best weights, patience and
        plateau reductions, then ONE copy to the host.

        Returns:
            The monitored ``K``-vector, whether each member is still active, whether it
            diverged, and the last step's monitored loss, on the CPU.
        """
        network = self._network
        self.active &= ~self.diverged
        if validation_loss_fn is not None:
            network.module.eval()
            with torch.no_grad():
                monitored = _float64_vector(validation_loss_fn())
        elif self._monitors_pre_step_weights:
            monitored = self.last_loss
        else:
            monitored = self.epoch_loss / epoch_rows
        if self._monitors_pre_step_weights:
            improved = self.improved
        else:
            improved = self.active & (monitored < self.best_loss - self._min_delta)
            network.keep_best(improved)
            self.best_loss = torch.where(improved, monitored, self.best_loss)
        self.best_epoch = torch.where(improved, epoch, self.best_epoch)
        self._epochs_without_improvement = torch.where(
            improved, 0, self._epochs_without_improvement + 1
        )
        plateau = torch.where(improved, 0.0, self._epochs_on_plateau + 1)
        reduce = plateau >= self._lr_reduction_patience
        self._epochs_on_plateau = torch.where(reduce, 0.0, plateau)
        self.active &= self._epochs_without_improvement < self._early_stopping_patience
        # Events as flags that are zero while training goes on.
        record = torch.cat([monitored, self.last_loss, ~self.active, self.diverged, reduce]).cpu()
        monitored_on_host, last_loss, stopped, diverged, reduce_on_host = record.view(5, -1)
        network.reduce_learning_rates(optimizer, reduce, reduce_on_host.bool())
        return monitored_on_host.clone(), ~stopped.bool(), diverged.bool(), last_loss


class _DirectFusedAdam:
    r"""A fused ``torch.optim.Adam`` stepped through its kernel directly.

    ``Adam.step`` wraps the one fused kernel in per-call bookkeeping (hooks, profiling
    records, gradient-mode and compiler guards, regrouping the tensors by device and
    dtype), which costs about a tenth of a small network's whole training step on a CPU
    core. After the first step, which creates the optimizer's state, this calls the
    kernel itself on the same state: the same update. While optimizer step hooks are
    registered (``torch.optim.optimizer.register_optimizer_step_post_hook`` and the
    like), every step goes through ``Adam.step``, which runs them.

    Args:
        optimizer: A ``torch.optim.Adam`` with ``fused=True`` and one parameter group.
    """

    def __init__(self, optimizer: torch.optim.Adam) -> None:
        self.optimizer = optimizer
        self.param_groups = optimizer.param_groups
        (group,) = optimizer.param_groups
        self._parameters = list(group["params"])
        # Detached aliases: the kernel updates the weights in place, outside autograd.
        self._weights = [parameter.detach() for parameter in self._parameters]
        self._state: tuple[list[Tensor], list[Tensor], list[Tensor]] | None = None

    def zero_grad(self, set_to_none: bool = True) -> None:
        r"""Drop the gradients (the next backward pass creates them afresh)."""
        for parameter in self._parameters:
            parameter.grad = None

    def step(self) -> None:
        r"""One Adam update of every parameter."""
        if self._state is None or self._hooked():
            self.optimizer.step()
            states = [self.optimizer.state[parameter] for parameter in self._parameters]
            self._state = tuple(
                [state[key] for state in states] for key in ("exp_avg", "exp_avg_sq", "step")
            )
            return
        (group,) = self.param_groups
        exp_avgs, exp_avg_sqs, steps = self._state
        beta1, beta2 = group["betas"]
        torch._foreach_add_(steps, 1)
        torch._fused_adam_(
            self._weights,
            [parameter.grad for parameter in self._parameters],
            exp_avgs,
            exp_avg_sqs,
            [],
            steps,
            lr=group["lr"],
            beta1=beta1,
            beta2=beta2,
            weight_decay=group["weight_decay"],
            eps=group["eps"],
            amsgrad=False,
            maximize=False,
        )

    def _hooked(self) -> bool:
        r"""Whether step hooks are registered, globally or on the optimizer."""
        return bool(
            _global_optimizer_pre_hooks
            or _global_optimizer_post_hooks
            or self.optimizer._optimizer_step_pre_hooks
            or self.optimizer._optimizer_step_post_hooks
        )


#: What the loop steps: a torch optimizer, or a fused Adam stepped through its kernel.
_Stepper = torch.optim.Optimizer | _DirectFusedAdam


class _CapturedStep:
    r"""A training step captured once as a CUDA graph and replayed: the launch cost of
    every kernel of the step is paid once per step instead of once per kernel.

    Args:
        step: The step: device work only, on buffers that stay in place.
        optimizer: Its optimizer (capturable).
    """

    def __init__(self, step: Callable[[], None], optimizer: _Stepper) -> None:
        optimizer.zero_grad(set_to_none=True)
        self._graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self._graph):
            step()

    def __call__(self) -> None:
        self._graph.replay()


def _capture(step: Callable[[], None], optimizer: _Stepper) -> _CapturedStep | None:
    r"""``step`` captured as a CUDA graph, or ``None`` (with a warning) if the capture
    fails: training then goes on eagerly, as it would without a GPU. A capture records
    kernels without running them, so a failed one leaves the weights as they were."""
    try:
        return _CapturedStep(step, optimizer)
    except RuntimeError as error:
        warnings.warn(
            f"Capturing the training step as a CUDA graph failed ({error}); training "
            "continues eagerly. Set TrainingConfig(cuda_graphs=False) to skip the attempt.",
            RuntimeWarning,
            stacklevel=3,
        )
        return None


def _train(
    network: _TrainedNetworks,
    num_data: int,
    config: TrainingConfig,
    *,
    validation_loss_fn: Callable[[], Tensor] | None,
    progress: bool,
    description: str,
    fused_optimizer: bool,
) -> TrainingResult:
    r"""The epoch loop of :func:`train_network`, with its bookkeeping per member."""
    module = network.module
    batch_loss = network.batch_loss
    device = network.device
    full_batch = config.batch_size is None or config.batch_size >= num_data
    batch_size = num_data if full_batch else config.batch_size
    num_batches = math.ceil(num_data / batch_size)
    capture = (
        config.cuda_graphs
        and device.type == "cuda"
        and batch_loss.static_shapes
        and config.optimizer in CAPTURABLE_OPTIMIZERS
        and config.lr_decay_rate is None
    )
    torch_optimizer, scheduler = _make_optimizer(
        network.parameters, config, fused=fused_optimizer, capturable=capture
    )
    optimizer = (
        _DirectFusedAdam(torch_optimizer)
        if _is_plain_fused_adam(torch_optimizer)
        else torch_optimizer
    )
    records = _Bookkeeping(
        network, config, monitors_pre_step_weights=full_batch and validation_loss_fn is None
    )

    epochs = range(config.epochs)
    if progress:
        from tqdm.auto import tqdm

        epochs = tqdm(epochs, desc=description, leave=False)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        records.step(optimizer)

    captured: _CapturedStep | None = None
    side_stream = torch.cuda.Stream(device) if capture else None
    num_members = network.num_members
    history: list[Tensor] = []
    epoch = -1
    steps_run = 0
    active = torch.ones(num_members, dtype=torch.bool)
    diverged = torch.zeros(num_members, dtype=torch.bool)
    for epoch in epochs:
        module.train()
        order = None if full_batch else _to_device(network.shuffle(num_data), device)
        batch_loss.begin_epoch(order)
        records.epoch_loss.zero_()
        epoch_rows = 0
        for batch in range(_batches_this_epoch(num_batches, steps_run, config.max_steps)):
            rows = min(batch_size, num_data - batch * batch_size)
            if rows != records.batch_rows_value:
                records.batch_rows.fill_(rows)
                records.batch_rows_value = rows
            batch_loss.select_batch(batch, batch_size)
            if captured is not None:
                captured()
            elif side_stream is not None:
                # Warm-up steps run on a side stream, as CUDA graph capture requires; the
                # optimizer, built to be captured, would warn that they are not.
                side_stream.wait_stream(torch.cuda.current_stream(device))
                with torch.cuda.stream(side_stream), warnings.catch_warnings():
                    warnings.filterwarnings("ignore", message=".*capturable=True")
                    step()
                torch.cuda.current_stream(device).wait_stream(side_stream)
                if steps_run + 1 == CUDA_GRAPH_WARMUP_STEPS:
                    batch_loss.use_static_buffers()
                    captured = _capture(step, optimizer)
                    side_stream = None
            else:
                step()
            if scheduler is not None:
                scheduler.step()
            steps_run += 1
            epoch_rows += rows
        monitored, active, diverged, last_loss = records.end_epoch(
            epoch, optimizer, validation_loss_fn, epoch_rows
        )
        history.append(monitored)
        if progress:
            epochs.set_postfix(loss=f"{monitored.mean().item():.4g}")
        if diverged.all():
            raise _non_finite_loss_error(last_loss[diverged].sum(), epoch)
        budget_spent = config.max_steps is not None and steps_run >= config.max_steps
        if budget_spent or not active.any():
            break
    network.restore_best()
    module.eval()
    best_loss, best_epoch = (
        torch.cat([records.best_loss, records.best_epoch.to(torch.float64)]).cpu().view(2, -1)
    )
    return network.result(
        TrainingResult(
            best_loss=best_loss.clone(),
            best_epoch=best_epoch.to(torch.long),
            epochs_run=epoch + 1,
            loss_history=history,
            steps_run=steps_run,
            diverged=diverged,
        )
    )


def _is_plain_fused_adam(optimizer: torch.optim.Optimizer) -> bool:
    r"""Whether ``optimizer`` is a fused ``Adam`` with one parameter group and none of the
    options its kernel does not take directly (AMSGrad, maximisation, differentiable
    steps)."""
    if type(optimizer) is not torch.optim.Adam or len(optimizer.param_groups) != 1:
        return False
    (group,) = optimizer.param_groups
    return (
        bool(group["fused"])
        and not group["amsgrad"]
        and not group["maximize"]
        and not group["differentiable"]
        and not group.get("decoupled_weight_decay", False)
        and not isinstance(group["lr"], Tensor)
    )


def _to_device(order: Tensor, device: torch.device) -> Tensor:
    r"""An epoch's order, drawn on the CPU, on ``device``: through pinned memory to a GPU,
    so the copy does not wait for the device's queue."""
    if device.type == "cuda":
        return order.pin_memory().to(device, non_blocking=True)
    return order.to(device)


def _float64_vector(losses: Tensor) -> Tensor:
    r"""Losses (a scalar or a ``K``-vector) as a detached float64 vector."""
    return losses.detach().to(torch.float64).reshape(-1)


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
    parameters: list[Tensor], config: TrainingConfig, *, fused: bool, capturable: bool
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler | None]:
    optimizer_class = OPTIMIZERS[config.optimizer]
    options = {}
    if fused or capturable:
        options = _fast_optimizer_options(optimizer_class, parameters, capturable)
    optimizer = optimizer_class(
        parameters, lr=config.learning_rate, weight_decay=config.weight_decay, **options
    )
    scheduler = (
        torch.optim.lr_scheduler.StepLR(
            optimizer, step_size=config.lr_decay_steps, gamma=config.lr_decay_rate
        )
        if config.lr_decay_rate is not None
        else None
    )
    return optimizer, scheduler


#: The optimizers with a fused implementation (one kernel for every parameter).
_FUSED_OPTIMIZERS = (torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD)


def _fast_optimizer_options(
    optimizer_class: type[torch.optim.Optimizer], parameters: list[Tensor], capturable: bool
) -> dict[str, bool]:
    r"""The options of ``optimizer_class``'s fastest implementation for ``parameters``:
    fused where the optimizer and the device have one, else multi-tensor (``foreach``);
    ``capturable`` (state kept on the device) for a CUDA graph."""
    from torch.optim.optimizer import _get_fused_kernels_supported_devices

    options = {"capturable": True} if capturable else {}
    devices = {p.device.type for p in parameters}
    floating = all(torch.is_floating_point(p) for p in parameters)
    if (
        optimizer_class in _FUSED_OPTIMIZERS
        and floating
        and devices <= set(_get_fused_kernels_supported_devices())
    ):
        return {**options, "fused": True}
    return {**options, "foreach": True}


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
