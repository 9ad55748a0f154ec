"""The one training loop shared by every neural surrogate of the package."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

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
        epochs: Number of passes over the training data.
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
    """

    epochs: int = 1000
    learning_rate: float = 1e-3
    batch_size: int | None = None
    optimizer: str = "adam"
    weight_decay: float = 0.0
    patience: int | None = None
    min_delta: float = 0.0
    gradient_clip_norm: float | None = None
    lr_decay_rate: float | None = None
    lr_decay_steps: int = 1000

    def __post_init__(self) -> None:
        if self.epochs < 1:
            raise ValueError(f"epochs must be a positive integer; got {self.epochs}.")
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be positive; got {self.learning_rate}.")
        if self.batch_size is not None and self.batch_size < 1:
            raise ValueError(f"batch_size must be positive or None; got {self.batch_size}.")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(
                f"Unknown optimizer {self.optimizer!r}; valid: {', '.join(sorted(OPTIMIZERS))}."
            )
        if not self.min_delta >= 0:
            raise ValueError(f"min_delta must be non-negative; got {self.min_delta}.")
        if not self.weight_decay >= 0:
            raise ValueError(f"weight_decay must be non-negative; got {self.weight_decay}.")
        if self.patience is not None and self.patience < 1:
            raise ValueError(f"patience must be positive or None; got {self.patience}.")
        if self.gradient_clip_norm is not None and not self.gradient_clip_norm > 0:
            raise ValueError("gradient_clip_norm must be positive or None.")
        if self.lr_decay_rate is not None and not 0 < self.lr_decay_rate <= 1:
            raise ValueError(f"lr_decay_rate must be in (0, 1]; got {self.lr_decay_rate}.")
        if self.lr_decay_steps < 1:
            raise ValueError(f"lr_decay_steps must be positive; got {self.lr_decay_steps}.")


@dataclass
class TrainingResult:
    r"""What :func:`train_network` did.

    Attributes:
        best_loss: The best monitored loss; the module holds the weights that reached it.
        best_epoch: The epoch (0-based) of the best monitored loss.
        epochs_run: The number of epochs actually run (fewer on early stopping).
        loss_history: The monitored loss of every epoch.
    """

    best_loss: float
    best_epoch: int
    epochs_run: int
    loss_history: list[float] = field(default_factory=list)


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

    Args:
        module: The network; all parameters with ``requires_grad`` are trained.
        loss_fn: Maps a 1-d tensor of training-row indices (a mini-batch), or ``None``
            for the full batch, to a scalar loss.
        num_data: The number of training rows.
        config: Optimiser, epochs, batching, early stopping and decay settings.
        validation_loss_fn: Optional callable returning a scalar validation loss,
            evaluated without gradients once per epoch.
        progress: Show a tqdm progress bar.
        description: The progress bar's label.

    Returns:
        A :class:`TrainingResult`.

    Raises:
        NonFiniteLossError: If a training loss is NaN or infinite.
    """
    parameters = [p for p in module.parameters() if p.requires_grad]
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
    full_batch = config.batch_size is None or config.batch_size >= num_data
    batch_size = num_data if full_batch else config.batch_size
    num_batches = math.ceil(num_data / batch_size)

    epochs = range(config.epochs)
    if progress:
        from tqdm.auto import tqdm

        epochs = tqdm(epochs, desc=description, leave=False)

    best_loss, best_epoch, best_state = math.inf, -1, None
    history: list[float] = []
    epochs_without_improvement = 0
    epoch = -1
    for epoch in epochs:
        module.train()
        order = None if full_batch else torch.randperm(num_data)
        epoch_loss = 0.0
        pre_step_state = None
        for batch in range(num_batches):
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
            epoch_loss += loss.item() * (num_data if indices is None else len(indices))
        if validation_loss_fn is not None:
            module.eval()
            with torch.no_grad():
                monitored = float(validation_loss_fn())
        elif full_batch:
            monitored = loss.item()
        else:
            monitored = epoch_loss / num_data
        history.append(monitored)
        if progress:
            epochs.set_postfix(loss=f"{monitored:.4g}")
        if monitored < best_loss - config.min_delta:
            best_loss, best_epoch = monitored, epoch
            best_state = pre_step_state or copy.deepcopy(module.state_dict())
            epochs_without_improvement = 0
        else:
            epochs_without_improvement += 1
            if config.patience is not None and epochs_without_improvement >= config.patience:
                break
    if best_state is not None:
        module.load_state_dict(best_state)
    module.eval()
    return TrainingResult(
        best_loss=best_loss, best_epoch=best_epoch, epochs_run=epoch + 1, loss_history=history
    )
