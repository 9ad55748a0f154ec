"""The shared training loop, its settings, losses and seeding utilities."""

from botorch_nn_uq.training.config import (
    OPTIMIZERS,
    NonFiniteLossError,
    TrainedWithLoop,
    TrainingConfig,
    TrainingResult,
)
from botorch_nn_uq.training.loop import l2_penalty, train_network
from botorch_nn_uq.training.seeding import draw_seed, resolve_seed, seeded

__all__ = [
    "OPTIMIZERS",
    "NonFiniteLossError",
    "TrainedWithLoop",
    "TrainingConfig",
    "TrainingResult",
    "draw_seed",
    "l2_penalty",
    "resolve_seed",
    "seeded",
    "train_network",
]
