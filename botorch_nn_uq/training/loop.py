"""The one training loop shared by every neural surrogate of the package."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from botorch_nn_uq.checks import (
    NON_NEGATIVE,
    OPEN_UNIT_INTERVAL,
    POSITIVE,
    Interval,
    check_choice,
    check_integer_fields,
    check_real_fields,
)

OPTIMIZERS: dict[str, type[torch.optim.Optimizer]] = {
    "adam": torch.optim.Adam,
    "adamw": torch.optim.AdamW,
    "sgd": torch.optim.SGD,
    "rmsprop": torch.optim.RMSprop,
    "adagrad": torch.optim.Adagrad,
    "adadelta": torch.optim.Adadelta,
    "adamax": torch.optim.Adamax,
    "nadam": torch.optim.NAdam,
}


class NonFiniteLossError(RuntimeError):
    r"""Raised when the training loss becomes NaN or infinite."""


@dataclass(frozen=True)
class TrainingConfig:
    r"""Settings of :func:`train_network`.

    Args:
        epochs: Number of passes over the training data (an upper bound when
            ``max_steps`` is given).
        max_steps: A training budget in optimizer steps: training stops after this many
            steps even in the middle of an epoch, whichever of ``epochs`` and
            ``max_steps`` comes first. With mini-batches this makes the cost of a fit
            independent of the number of training rows (``epochs`` then only caps
            small data sets); ``None`` trains all ``epochs``.
        learning_rate: The optimizer's learning rate.
        batch_size: Mini-batch size; ``None`` trains full-batch.
        optimizer: One of ``OPTIMIZERS`` (``"adam"``, ``"adamw"``, ``"sgd"``, ...).
        weight_decay: The optimizer's ``weight_decay`` with ``torch.optim`` semantics:
            for ``"adam"``/``"sgd"`` it adds ``weight_decay * w`` to the gradient (an L2
            penalty ``weight_decay / 2 * ||w||^2`` in the loss); for ``"adamw"`` it is
            decoupled. Models that need a Keras-style penalty ``lambda * ||w||^2``
            summed into the loss add it in their loss (:func:`l2_penalty`) instead.
        patience: Early stopping: stop after this many epochs without a strict
            improvement of the monitored loss by more than ``min_delta``; ``None``
            never stops early.
        min_delta: Minimum improvement that counts for early stopping and best-weights
            tracking.
        gradient_clip_norm: Clip the global gradient norm to this value; ``None`` does
            not clip.
        lr_decay_rate: Multiply the learning rate by this factor every
            ``lr_decay_steps`` optimizer steps (exponential decay); ``None`` keeps it
            constant.
        lr_decay_steps: The step interval of the learning-rate decay.
        lr_reduction_patience: Reduce the learning rate on a plateau (Keras'
            ``ReduceLROnPlateau``): multiply it by ``lr_reduction_factor`` after this
            many epochs without an improvement of the monitored loss since the last
            improvement or reduction; ``None`` never reduces.
        lr_reduction_factor: The plateau reduction factor in ``(0, 1)``.
        num_threads: Torch intra-op threads while training (the caller's setting is
            restored afterwards); ``None`` keeps the caller's setting. The surrogates'
            networks are small: one thread trains them fastest, and more threads than
            free cores slow training down by an order of magnitude on a busy machine
            (measured: a 5-member deep ensemble fit took 2.4 s on one thread and 66 s on
            two while another process kept both cores busy).
    """

    epochs: int = 1000
    max_steps: int | None = None
    learning_rate: float = 1e-3
    batch_size: int | None = None
    optimizer: str = "adam"
    weight_decay: float = 0.0
    patience: int | None = None
    min_delta: float = 0.0
    gradient_clip_norm: float | None = None
    lr_decay_rate: float | None = None
    lr_decay_steps: int = 1000
    lr_reduction_patience: int | None = None
    lr_reduction_factor: float = 0.1
    num_threads: int | None = 1

    def __post_init__(self) -> None:
        check_integer_fields(self, "epochs", "lr_decay_steps")
        check_integer_fields(
            self,
            "max_steps",
            "batch_size",
            "patience",
            "lr_reduction_patience",
            "num_threads",
            optional=True,
        )
        check_real_fields(self, "learning_rate", interval=POSITIVE)
        check_choice("optimizer", self.optimizer, OPTIMIZERS)
        check_real_fields(self, "weight_decay", "min_delta", interval=NON_NEGATIVE)
        check_real_fields(self, "gradient_clip_norm", interval=POSITIVE, optional=True)
        check_real_fields(
            self, "lr_decay_rate", interval=Interval(0.0, 1.0, lower_closed=False), optional=True
        )
        check_real_fields(self, "lr_reduction_factor", interval=OPEN_UNIT_INTERVAL)


@dataclass
class TrainingResult:
    r"""What :func:`train_network` did.

    In member mode (see :func:`train_network`) ``best_loss`` and ``best_epoch`` are
    ``K``-vectors and every ``loss_history`` entry is a ``K``-vector.

    Attributes:
        best_loss: The best monitored loss; the module holds the weights that reached it.
        best_epoch: The epoch (0-based) of the best monitored loss.
        epochs_run: The number of epochs actually run (fewer on early stopping; the last
            one may be partial when the step budget ends inside it).
        loss_history: The monitored loss of every epoch.
        steps_run: The number of optimizer steps taken.
        diverged: In member mode, a boolean ``K``-vector of the members whose training
            loss became non-finite (they stopped training and hold the weights of their
            best loss before that); ``None`` in single-network mode, which raises
            :class:`NonFiniteLossError` instead.
    """

    best_loss: float | Tensor
    best_epoch: int | Tensor
    epochs_run: int
    loss_history: list[float] | list[Tensor] = field(default_factory=list)
    steps_run: int = 0
    diverged: Tensor | None = None


def l2_penalty(module: nn.Module) -> Tensor:
    r"""Keras-style L2 penalty ``sum ||theta||^2`` over all trainable weights and biases
    of ``module`` (multiply by ``lambda`` in the loss)."""
    return sum((p**2).sum() for p in module.parameters() if p.requires_grad)


def _check_finite(loss: Tensor, epoch: int) -> None:
    if not torch.isfinite(loss):
        raise NonFiniteLossError(
            f"The training loss became {loss.item()} at epoch {epoch}. Lower the learning "
            "rate, check the data scaling (use Normalize/Standardize transforms), or "
            "enable gradient clipping."
        )


def train_network(
    module: nn.Module,
    loss_fn: Callable[[Tensor | None], Tensor],
    num_data: int,
    config: TrainingConfig,
    *,
    validation_loss_fn: Callable[[], Tensor] | None = None,
    progress: bool = False,
    description: str = "training",
    member_generators: Sequence[torch.Generator] | None = None,
    member_learning_rates: Tensor | None = None,
    member_patience: Tensor | None = None,
    member_lr_reduction_patience: Tensor | None = None,
) -> TrainingResult:
    r"""Train ``module`` by minimising ``loss_fn`` and keep the best weights.

    Every model of the package trains through this function; models differ only in
    the loss they pass. Randomness (mini-batch order, dropout) comes from torch's
    global RNG, which :meth:`NeuralSurrogateModel.fit` seeds.

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
            ``K x b`` in member mode), or ``None`` for the full batch, to a scalar loss
            (a ``K``-vector in member mode).
        num_data: The number of training rows.
        config: Optimiser, epochs, batching, early stopping and decay settings.
        validation_loss_fn: Optional callable returning a scalar validation loss (a
            ``K``-vector in member mode), evaluated without gradients once per epoch.
        progress: Show a tqdm progress bar.
        description: The progress bar's label.
        member_generators: One ``torch.Generator`` per member for its mini-batch order;
            switches on member mode.
        member_learning_rates: Optional ``K``-vector of per-member learning rates (member
            mode only); ``config.learning_rate`` is then only the decay schedule's base.
        member_patience: Optional ``K``-vector of per-member early-stopping patience
            (member mode only), replacing ``config.patience``.
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
        "member_patience": member_patience,
        "member_lr_reduction_patience": member_lr_reduction_patience,
    }
    if member_generators is None:
        given = [name for name, value in member_options.items() if value is not None]
        if given:
            raise ValueError(f"{', '.join(given)} need member mode (member_generators).")
    with _intra_op_threads(config.num_threads):
        if member_generators is not None:
            return _train_members(
                module,
                loss_fn,
                num_data,
                config,
                validation_loss_fn=validation_loss_fn,
                progress=progress,
                description=description,
                generators=list(member_generators),
                learning_rates=member_learning_rates,
                patience=member_patience,
                lr_reduction_patience=member_lr_reduction_patience,
            )
        return _train_single(
            module,
            loss_fn,
            num_data,
            config,
            validation_loss_fn=validation_loss_fn,
            progress=progress,
            description=description,
        )


@contextmanager
def _intra_op_threads(num_threads: int | None) -> Iterator[None]:
    previous = torch.get_num_threads()
    if num_threads is not None:
        torch.set_num_threads(num_threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _train_single(
    module: nn.Module,
    loss_fn: Callable[[Tensor | None], Tensor],
    num_data: int,
    config: TrainingConfig,
    *,
    validation_loss_fn: Callable[[], Tensor] | None,
    progress: bool,
    description: str,
) -> TrainingResult:
    parameters = [p for p in module.parameters() if p.requires_grad]
    optimizer, scheduler = _make_optimizer(parameters, config)
    full_batch = config.batch_size is None or config.batch_size >= num_data
    batch_size = num_data if full_batch else config.batch_size
    num_batches = math.ceil(num_data / batch_size)

    epochs = range(config.epochs)
    if progress:
        from tqdm.auto import tqdm

        epochs = tqdm(epochs, desc=description, leave=False)

    best_loss, best_epoch, best_state = math.inf, -1, None
    history: list[float] = []
    epochs_without_improvement = epochs_on_plateau = 0
    epoch = -1
    steps_run = 0
    for epoch in epochs:
        module.train()
        order = None if full_batch else torch.randperm(num_data)
        epoch_loss = 0.0
        epoch_rows = 0
        pre_step_state = None
        for batch in range(_batches_this_epoch(num_batches, steps_run, config.max_steps)):
            indices = None if full_batch else order[batch * batch_size : (batch + 1) * batch_size]
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(indices)
            _check_finite(loss, epoch)
            if (
                full_batch
                and validation_loss_fn is None
                and loss.item() < best_loss - config.min_delta
            ):
                pre_step_state = copy.deepcopy(module.state_dict())
            loss.backward()
            if config.gradient_clip_norm is not None:
                nn.utils.clip_grad_norm_(parameters, config.gradient_clip_norm)
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            steps_run += 1
            rows = num_data if indices is None else len(indices)
            epoch_loss += loss.item() * rows
            epoch_rows += rows
        if validation_loss_fn is not None:
            module.eval()
            with torch.no_grad():
                monitored = float(validation_loss_fn())
        elif full_batch:
            monitored = loss.item()
        else:
            monitored = epoch_loss / epoch_rows
        history.append(monitored)
        if progress:
            epochs.set_postfix(loss=f"{monitored:.4g}")
        if monitored < best_loss - config.min_delta:
            best_loss, best_epoch = monitored, epoch
            best_state = pre_step_state or copy.deepcopy(module.state_dict())
            epochs_without_improvement = 0
            epochs_on_plateau = 0
        else:
            epochs_without_improvement += 1
            epochs_on_plateau += 1
            if config.patience is not None and epochs_without_improvement >= config.patience:
                break
            if (
                config.lr_reduction_patience is not None
                and epochs_on_plateau >= config.lr_reduction_patience
            ):
                for group in optimizer.param_groups:
                    group["lr"] *= config.lr_reduction_factor
                epochs_on_plateau = 0
        if config.max_steps is not None and steps_run >= config.max_steps:
            break
    if best_state is not None:
        module.load_state_dict(best_state)
    module.eval()
    return TrainingResult(
        best_loss=best_loss,
        best_epoch=best_epoch,
        epochs_run=epoch + 1,
        loss_history=history,
        steps_run=steps_run,
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


def _train_members(
    module: nn.Module,
    loss_fn: Callable[[Tensor | None], Tensor],
    num_data: int,
    config: TrainingConfig,
    *,
    validation_loss_fn: Callable[[], Tensor] | None,
    progress: bool,
    description: str,
    generators: list[torch.Generator],
    learning_rates: Tensor | None,
    patience: Tensor | None,
    lr_reduction_patience: Tensor | None,
) -> TrainingResult:
    num_members = len(generators)
    parameters = [p for p in module.parameters() if p.requires_grad]
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
    patience = _member_counts(patience, config.patience, num_members, "member_patience")
    lr_reduction_patience = _member_counts(
        lr_reduction_patience,
        config.lr_reduction_patience,
        num_members,
        "member_lr_reduction_patience",
    )
    rescaled = learning_rates is not None or bool(torch.isfinite(lr_reduction_patience).any())
    if rescaled and config.weight_decay > 0:
        raise ValueError(
            "Per-member learning rates (given, or reduced on plateaus) rescale each member's "
            "update, which is exact only without the optimizer's weight_decay; add an L2 "
            "penalty to the loss."
        )
    optimizer, scheduler = _make_optimizer(parameters, config)
    update_scale = (
        torch.ones(num_members, dtype=torch.float64)
        if learning_rates is None
        else learning_rates.detach().to(torch.float64).cpu() / config.learning_rate
    )
    epochs_on_plateau = torch.zeros(num_members)
    full_batch = config.batch_size is None or config.batch_size >= num_data
    batch_size = num_data if full_batch else config.batch_size
    num_batches = math.ceil(num_data / batch_size)

    epochs = range(config.epochs)
    if progress:
        from tqdm.auto import tqdm

        epochs = tqdm(epochs, desc=description, leave=False)

    best_loss = torch.full((num_members,), math.inf, dtype=torch.float64)
    best_epoch = torch.full((num_members,), -1, dtype=torch.long)
    best_state = {name: tensor.detach().clone() for name, tensor in state.items()}
    active = torch.ones(num_members, dtype=torch.bool)
    failed = torch.zeros(num_members, dtype=torch.bool)
    epochs_without_improvement = torch.zeros(num_members, dtype=torch.long)
    history: list[Tensor] = []
    epoch = -1
    steps_run = 0
    for epoch in epochs:
        module.train()
        order = (
            None
            if full_batch
            else torch.stack([torch.randperm(num_data, generator=g) for g in generators])
        )
        epoch_loss = torch.zeros(num_members, dtype=torch.float64)
        epoch_rows = 0
        pre_step_state = None
        for batch in range(_batches_this_epoch(num_batches, steps_run, config.max_steps)):
            indices = (
                None if full_batch else order[:, batch * batch_size : (batch + 1) * batch_size]
            )
            optimizer.zero_grad(set_to_none=True)
            losses = loss_fn(indices)
            if losses.shape != (num_members,):
                raise ValueError(
                    f"In member mode loss_fn must return a {num_members}-vector; got shape "
                    f"{tuple(losses.shape)}."
                )
            detached = losses.detach().to(torch.float64).cpu()
            failed |= ~torch.isfinite(detached)
            if failed.all():
                _check_finite(losses.sum(), epoch)
            active &= ~failed
            if full_batch and validation_loss_fn is None:
                pre_step_state = {name: t.detach().clone() for name, t in state.items()}
            # A diverged member only ever reaches its own parameters; excluding its loss
            # keeps the other members' training identical to training them alone.
            finite = (~failed).to(losses.device)
            torch.where(finite, losses, torch.zeros_like(losses)).sum().backward()
            if config.gradient_clip_norm is not None:
                _clip_member_gradients(parameters, num_members, config.gradient_clip_norm)
            before = [p.detach().clone() for p in parameters] if rescaled else None
            optimizer.step()
            if before is not None:
                _rescale_member_updates(parameters, before, update_scale)
            if scheduler is not None:
                scheduler.step()
            steps_run += 1
            rows = num_data if indices is None else indices.shape[-1]
            epoch_loss += detached * rows
            epoch_rows += rows
        if validation_loss_fn is not None:
            module.eval()
            with torch.no_grad():
                monitored = validation_loss_fn().detach().to(torch.float64).cpu()
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
            source = pre_step_state if pre_step_state is not None else state
            for name, tensor in best_state.items():
                tensor[improved.to(tensor.device)] = source[name].detach()[
                    improved.to(tensor.device)
                ]
        epochs_without_improvement = torch.where(
            improved, torch.zeros_like(epochs_without_improvement), epochs_without_improvement + 1
        )
        epochs_on_plateau = torch.where(improved, 0.0, epochs_on_plateau + 1)
        reduce = epochs_on_plateau >= lr_reduction_patience
        update_scale = torch.where(reduce, update_scale * config.lr_reduction_factor, update_scale)
        epochs_on_plateau = torch.where(reduce, 0.0, epochs_on_plateau)
        active &= epochs_without_improvement < patience
        budget_spent = config.max_steps is not None and steps_run >= config.max_steps
        if budget_spent or not active.any():
            break
    module.load_state_dict(best_state)
    module.eval()
    return TrainingResult(
        best_loss=best_loss,
        best_epoch=best_epoch,
        epochs_run=epoch + 1,
        loss_history=history,
        steps_run=steps_run,
        diverged=failed,
    )


def _clip_member_gradients(parameters: list[Tensor], num_members: int, max_norm: float) -> None:
    grads = [p.grad for p in parameters if p.grad is not None]
    squared = sum(_member_view(g, num_members).pow(2).sum(-1) for g in grads)
    scale = (max_norm / (squared.sqrt() + 1e-6)).clamp(max=1.0)
    for grad in grads:
        grad.mul_(scale.view(-1, *([1] * (grad.ndim - 1))))


def _member_counts(
    values: Tensor | None, default: int | None, num_members: int, name: str
) -> Tensor:
    r"""Per-member counts as a float ``K``-vector (``inf``: never)."""
    if values is None:
        return torch.full((num_members,), math.inf if default is None else float(default))
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
