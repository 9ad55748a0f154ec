r"""The settings and the outcome of the shared training loop
(:func:`~botorch_nn_uq.training.loop.train_network`)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import torch
from torch import Tensor

from botorch_nn_uq.checks import (
    NON_NEGATIVE,
    OPEN_UNIT_INTERVAL,
    POSITIVE,
    Interval,
    check_boolean_fields,
    check_choice,
    check_integer_fields,
    check_real_fields,
)

#: The optimizers a :class:`TrainingConfig` can name, by name.
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
    r"""Settings of :func:`~botorch_nn_uq.training.loop.train_network`.

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
            summed into the loss add it in their loss
            (:func:`~botorch_nn_uq.training.losses.l2_penalty`) instead.
        early_stopping_patience: Stop after this many epochs without a strict
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
        cuda_graphs: On a CUDA device, capture a training step as a CUDA graph and replay
            it, where the loss has static shapes (the members of
            :func:`~botorch_nn_uq.training.members.fit_members` on its common path), the
            optimizer is ``"adam"`` or ``"adamw"`` and the learning rate does not decay;
            ``False`` runs every step eagerly. The same weights either way, up to
            rounding; elsewhere it has no effect.
    """

    epochs: int = 1000
    max_steps: int | None = None
    learning_rate: float = 1e-3
    batch_size: int | None = None
    optimizer: str = "adam"
    weight_decay: float = 0.0
    early_stopping_patience: int | None = None
    min_delta: float = 0.0
    gradient_clip_norm: float | None = None
    lr_decay_rate: float | None = None
    lr_decay_steps: int = 1000
    lr_reduction_patience: int | None = None
    lr_reduction_factor: float = 0.1
    cuda_graphs: bool = True

    def __post_init__(self) -> None:
        check_integer_fields(self, "epochs", "lr_decay_steps")
        check_integer_fields(
            self,
            "max_steps",
            "batch_size",
            "early_stopping_patience",
            "lr_reduction_patience",
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
        check_boolean_fields(self, "cuda_graphs")


#: The names of :class:`TrainingConfig`'s settings.
_TRAINING_CONFIG_FIELDS = frozenset(item.name for item in fields(TrainingConfig))


class TrainedWithLoop:
    r"""Mixin for a model's hyperparameter dataclass whose fit runs the shared training loop.

    :meth:`training_config` builds the :class:`TrainingConfig` from the fields the
    dataclass shares with it by name (``epochs``, ``max_steps``, ``learning_rate``,
    ``batch_size``, ``optimizer``, ``weight_decay``, ``early_stopping_patience``,
    ``gradient_clip_norm``, ``lr_decay_rate``, ...), so a hyperparameter with the name
    of a loop setting must mean that setting; the loop's defaults fill the rest.

    Example:
        >>> @dataclass(frozen=True)
        ... class Settings(TrainedWithLoop):
        ...     epochs: int = 20
        ...     hidden_width: int = 8
        >>> Settings().training_config(learning_rate=0.1).epochs
        20
    """

    def training_config(self, **overrides: Any) -> TrainingConfig:
        r"""The settings of the shared training loop (validated there).

        Args:
            overrides: Loop settings the dataclass does not hold as fields, or holds
                with another value for this fit (e.g. a learning rate chosen by a
                search).
        """
        shared = {
            item.name: getattr(self, item.name)
            for item in fields(self)
            if item.name in _TRAINING_CONFIG_FIELDS
        }
        return TrainingConfig(**{**shared, **overrides})


@dataclass
class TrainingResult:
    r"""What :func:`~botorch_nn_uq.training.loop.train_network` did.

    In member mode (see :func:`~botorch_nn_uq.training.loop.train_network`)
    ``best_loss`` and ``best_epoch`` are ``K``-vectors and every ``loss_history`` entry
    is a ``K``-vector.

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
