"""The shared training loop, its settings, losses and seeding utilities: one network
(:func:`train_network`) or the ``K`` members of a :class:`~botorch_nn_uq.nn.BatchedMLP` as
one computation (:func:`fit_members`)."""

from botorch_nn_uq.training.config import (
    OPTIMIZERS,
    NonFiniteLossError,
    TrainedWithLoop,
    TrainingConfig,
    TrainingResult,
)
from botorch_nn_uq.training.loop import train_network
from botorch_nn_uq.training.losses import (
    BatchLoss,
    IndexedLoss,
    KnownNoise,
    l2_penalty,
    mean_squared_error,
)
from botorch_nn_uq.training.members import CommonPathLoss, fit_members
from botorch_nn_uq.training.seeding import draw_seed, resolve_seed, seeded

__all__ = [
    "OPTIMIZERS",
    "BatchLoss",
    "CommonPathLoss",
    "IndexedLoss",
    "KnownNoise",
    "NonFiniteLossError",
    "TrainedWithLoop",
    "TrainingConfig",
    "TrainingResult",
    "draw_seed",
    "fit_members",
    "l2_penalty",
    "mean_squared_error",
    "resolve_seed",
    "seeded",
    "train_network",
]
