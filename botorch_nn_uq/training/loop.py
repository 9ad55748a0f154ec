r"""The one training loop shared by every neural surrogate of the package.

:func:`train_network` trains one network, or ``K`` stacked members in member mode, with
one epoch loop: the batch schedule, the monitored loss, best-weights tracking, early
stopping, learning-rate reduction on plateaus, the step budget and divergence are kept
per member as ``K``-vectors (``K = 1`` for one network). What differs between the two
modes (the mini-batch order, the backward pass, gradient clipping, how an update and a
learning-rate reduction are applied, how best weights are stored) is the business of
:class:`~botorch_nn_uq.training.trained_networks.OneNetwork` and
:class:`~botorch_nn_uq.training.trained_networks.StackedMembers`; what a batch's loss is,
and how an epoch's rows reach it, is the business of a
:class:`~botorch_nn_uq.training.losses.BatchLoss`.

No host synchronisation inside a step: the per-member bookkeeping (losses, divergence,
best losses and best weights) lives on the networks' device and is updated there with
``torch.where``; the loop reads it back once per epoch (the history, early stopping and
the all-diverged error), and an epoch's row order is copied to the device once. Where
an epoch is one full-batch step and nothing decides on the host between epochs (no
early stopping, no plateau reductions, no validation, no progress bar), the history
stays on the device and is read every ``HOST_READ_EPOCHS`` epochs. On a GPU
a step then only queues kernels, and a :class:`BatchLoss` with static shapes
(``static_shapes``) has its whole step (forward, backward, optimizer, bookkeeping)
captured once as a CUDA graph and replayed (``TrainingConfig.cuda_graphs``).

Threads: training runs on the caller's torch threads. No function of the package
changes process-wide thread state (``torch.set_num_threads`` acts on the whole process
and is not thread-safe); how many threads to use is the caller's decision
(``OMP_NUM_THREADS``, ``torch.set_num_threads`` in the calling program, the command
line's ``--threads``). The surrogates' networks are small: one thread trains them
fastest, and more threads than free cores slow training down by an order of magnitude
on a busy machine (``docs/guide/installation.md``, "Threads", has the measurement). The
worker processes of
:class:`~botorch_nn_uq.ensembles.pool.RayExecutor` are separate processes, which it
starts with its own thread count.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from botorch_nn_uq.training.config import NonFiniteLossError, TrainingConfig, TrainingResult
from botorch_nn_uq.training.losses import BatchLoss, IndexedLoss
from botorch_nn_uq.training.optimizers import (
    DirectFusedAdam,
    Stepper,
    is_plain_fused_adam,
    make_optimizer,
)
from botorch_nn_uq.training.trained_networks import OneNetwork, StackedMembers, TrainedNetworks

#: The optimizers whose step can be captured in a CUDA graph (their state kept on the
#: device, ``capturable=True``).
CAPTURABLE_OPTIMIZERS = ("adam", "adamw")

#: Eager steps before a step is captured as a CUDA graph: the optimizer creates its state
#: and the libraries their workspaces in these, outside the capture.
CUDA_GRAPH_WARMUP_STEPS = 3


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
    member_shared: nn.Module | None = None,
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

    **Shared module** (``member_shared``, member mode only): a submodule of ``module``
    without a member dimension that every member's loss depends on (a learnable input
    transform). It trains on the sum of the members' losses, and the members are no
    longer independent, so the best weights are kept jointly: the step (full batch) or
    epoch with the lowest mean monitored loss over the members is restored for all of
    them and the shared module at once, and early stopping follows that mean (see
    :class:`~botorch_nn_uq.training.trained_networks.StackedMembers`). The reported
    ``best_loss`` is each member's loss at that step, and ``best_epoch`` the same for
    every member.

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
        member_shared: Optional submodule of ``module`` whose parameters all members
            share (member mode only).
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
        "member_shared": member_shared,
    }
    batch_loss = loss_fn if isinstance(loss_fn, BatchLoss) else IndexedLoss(loss_fn)
    if member_generators is None:
        given = [name for name, value in member_options.items() if value is not None]
        if given:
            raise ValueError(f"{', '.join(given)} need member mode (member_generators).")
        network = OneNetwork(module, batch_loss, config, generator)
    else:
        if generator is not None:
            raise ValueError(
                "In member mode each member's mini-batch order comes from its own "
                "generator (member_generators); generator orders one network's."
            )
        network = StackedMembers(
            module,
            batch_loss,
            config,
            generators=list(member_generators),
            learning_rates=member_learning_rates,
            early_stopping_patience=member_early_stopping_patience,
            lr_reduction_patience=member_lr_reduction_patience,
            shared=member_shared,
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


#: How many epochs' records a loop that decides nothing on the host between epochs keeps
#: on the device before one read: the longest it trains on once every member diverged.
HOST_READ_EPOCHS = 64


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
        self, network: TrainedNetworks, config: TrainingConfig, monitors_pre_step_weights: bool
    ) -> None:
        num_members, device = network.num_members, network.device
        self._network = network
        self._min_delta = config.min_delta
        self.monitors_pre_step_weights = monitors_pre_step_weights
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
        #: With jointly kept best weights, the best mean monitored loss over the members.
        self.joint_best = network.joint_best
        self.best_mean_loss = torch.full((), math.inf, dtype=torch.float64, device=device)
        self._epochs_without_improvement = torch.zeros(dtype=torch.long, **vector)
        self._epochs_on_plateau = torch.zeros(dtype=torch.float64, **vector)
        self._early_stopping_patience = network.early_stopping_patience.to(device)
        self._lr_reduction_patience = network.lr_reduction_patience.to(device)
        # Read from the host's copies: without patience, an epoch's end skips the counters.
        self._stops_early = bool(torch.isfinite(network.early_stopping_patience).any())
        self._reduces_learning_rates = bool(torch.isfinite(network.lr_reduction_patience).any())
        self._never = torch.zeros(dtype=torch.bool, **vector)
        #: Whether the host has nothing to decide between epochs, so that
        #: :meth:`record_epoch` and :meth:`read_records` replace :meth:`end_epoch`.
        self.defers_host_reads = (
            monitors_pre_step_weights and not self._stops_early and not self._reduces_learning_rates
        )
        if self.defers_host_reads:
            max_epochs = (
                config.epochs if config.max_steps is None else min(config.epochs, config.max_steps)
            )
            self._monitored_history = torch.empty(
                (max_epochs, num_members), dtype=torch.float64, device=device
            )
            self._epochs_read = 0
            self._diverged_on_host = torch.zeros(num_members, dtype=torch.bool)

    def step(self, optimizer: Stepper) -> None:
        r"""One optimizer step on the selected batch, with its bookkeeping; device work
        only (it is what a CUDA graph captures)."""
        network = self._network
        losses, monitored = network.losses()
        # NaN exactly where a loss is not finite (0 * inf is NaN): two operations where
        # ~isfinite takes five.
        self.diverged |= torch.isnan(monitored * 0)
        if self.monitors_pre_step_weights:
            # The step's loss is that of the weights before the step: keep them now.
            # In place: the networks shape this one buffer to their members only once.
            improved = self._improvement(monitored, out=self.improved)
            improved &= ~self.diverged
            if self._stops_early:
                improved &= self.active
            network.keep_best(improved)
            self._record_best(improved, monitored)
        else:
            self.epoch_loss.addcmul_(monitored, self.batch_rows)
        self.last_loss = monitored
        network.update(optimizer, losses, self.diverged)

    def _improvement(self, monitored: Tensor, out: Tensor | None = None) -> Tensor:
        r"""Whether each member's monitored loss improved on its best by more than
        ``min_delta``; with joint best weights, whether the members' mean loss improved
        on its best (the same answer for every member; NaN once a member has
        diverged, which never improves)."""
        if self.joint_best:
            value, best = monitored.mean().expand_as(monitored), self.best_mean_loss
        else:
            value, best = monitored, self.best_loss
        threshold = best - self._min_delta if self._min_delta else best
        return torch.lt(value, threshold, out=out)

    def _record_best(self, improved: Tensor, monitored: Tensor) -> None:
        r"""Record ``monitored`` as the best loss of the members ``improved``."""
        torch.where(improved, monitored, self.best_loss, out=self.best_loss)
        if self.joint_best:
            torch.where(improved[0], monitored.mean(), self.best_mean_loss, out=self.best_mean_loss)

    def end_epoch(
        self,
        epoch: int,
        optimizer: Stepper,
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
            network.module.train()
        elif self.monitors_pre_step_weights:
            monitored = self.last_loss
        else:
            monitored = self.epoch_loss / epoch_rows
        if self.monitors_pre_step_weights:
            improved = self.improved
        else:
            improved = self.active & self._improvement(monitored)
            network.keep_best(improved)
            self._record_best(improved, monitored)
        self.best_epoch = torch.where(improved, epoch, self.best_epoch)
        if self._stops_early:
            self._epochs_without_improvement = torch.where(
                improved, 0, self._epochs_without_improvement + 1
            )
            self.active &= self._epochs_without_improvement < self._early_stopping_patience
        reduce = self._never
        if self._reduces_learning_rates:
            plateau = torch.where(improved, 0.0, self._epochs_on_plateau + 1)
            reduce = plateau >= self._lr_reduction_patience
            self._epochs_on_plateau = torch.where(reduce, 0.0, plateau)
        # Events as flags that are zero while training goes on.
        record = torch.cat([monitored, self.last_loss, ~self.active, self.diverged, reduce]).cpu()
        monitored_on_host, last_loss, stopped, diverged, reduce_on_host = record.view(5, -1)
        if self._reduces_learning_rates:
            network.reduce_learning_rates(optimizer, reduce, reduce_on_host.bool())
        return monitored_on_host.clone(), ~stopped.bool(), diverged.bool(), last_loss

    def record_epoch(self, epoch: int) -> None:
        r"""The epoch's end where it is one full-batch step and the host decides nothing
        (``defers_host_reads``): the improvement's epoch and the monitored loss are
        recorded on the device, to be read by :meth:`read_records`."""
        self.best_epoch = torch.where(self.improved, epoch, self.best_epoch)
        self._monitored_history[epoch].copy_(self.last_loss)

    def read_records(self, epoch: int) -> tuple[list[Tensor], Tensor, int | None]:
        r"""ONE copy to the host of the monitored losses recorded since the last read, up
        to ``epoch``.

        Returns:
            Each epoch's monitored ``K``-vector, whether each member has diverged by
            ``epoch``, and the first epoch by which every member had diverged (``None``
            if there is none), on the CPU.
        """
        rows = self._monitored_history[self._epochs_read : epoch + 1].cpu()
        # A member diverges at its first non-finite loss and stays diverged, as in step.
        diverged = (torch.isnan(rows * 0).cumsum(0) > 0) | self._diverged_on_host
        all_diverged = diverged.all(-1).nonzero()
        first_all_diverged = None
        if len(all_diverged):
            first_all_diverged = self._epochs_read + int(all_diverged[0])
        self._epochs_read = epoch + 1
        self._diverged_on_host = diverged[-1]
        return list(rows.unbind(0)), diverged[-1].clone(), first_all_diverged


class _CapturedStep:
    r"""A training step captured once as a CUDA graph and replayed: the launch cost of
    every kernel of the step is paid once per step instead of once per kernel.

    Args:
        step: The step: device work only, on buffers that stay in place.
        optimizer: Its optimizer (capturable).
    """

    def __init__(self, step: Callable[[], None], optimizer: Stepper) -> None:
        optimizer.zero_grad(set_to_none=True)
        self._graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self._graph):
            step()

    def __call__(self) -> None:
        self._graph.replay()


def _capture(step: Callable[[], None], optimizer: Stepper) -> _CapturedStep | None:
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
    network: TrainedNetworks,
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
    torch_optimizer, scheduler = make_optimizer(
        network.optimizer_groups(), config, fused=fused_optimizer, capturable=capture
    )
    optimizer = (
        DirectFusedAdam(torch_optimizer)
        if is_plain_fused_adam(torch_optimizer)
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
    # Set once, not per epoch: switching a module's mode walks all its submodules.
    module.train()
    defers_host_reads = records.defers_host_reads and not progress
    for epoch in epochs:
        order = None if full_batch else _to_device(network.shuffle(num_data), device)
        batch_loss.begin_epoch(order)
        if not records.monitors_pre_step_weights:
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
        budget_spent = config.max_steps is not None and steps_run >= config.max_steps
        if defers_host_reads:
            records.record_epoch(epoch)
            last_epoch = budget_spent or epoch + 1 == config.epochs
            if last_epoch or (epoch + 1) % HOST_READ_EPOCHS == 0:
                monitored_rows, diverged, all_diverged = records.read_records(epoch)
                history.extend(monitored_rows)
                if all_diverged is not None:
                    loss = history[all_diverged].sum()
                    raise _non_finite_loss_error(loss, all_diverged)
            if budget_spent:
                break
            continue
        monitored, active, diverged, last_loss = records.end_epoch(
            epoch, optimizer, validation_loss_fn, epoch_rows
        )
        history.append(monitored)
        if progress:
            epochs.set_postfix(loss=f"{monitored.mean().item():.4g}")
        if diverged.all():
            raise _non_finite_loss_error(last_loss[diverged].sum(), epoch)
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
