"""BoTorch ``Model`` subclasses that serve predictions from trained neural networks."""

from botorch_nn_uq.models.base import NeuralSurrogateModel
from botorch_nn_uq.models.ensemble import (
    DeepEnsemble,
    DeepEnsembleHyperparameters,
    UncertaintyDecomposition,
)
from botorch_nn_uq.models.hyper_deep_ensemble import (
    HyperDeepEnsemble,
    HyperDeepEnsembleHyperparameters,
)
from botorch_nn_uq.models.mc_dropout import MCDropout, MCDropoutHyperparameters
from botorch_nn_uq.models.nomu import NOMU, NOMUHyperparameters

__all__ = [
    "DeepEnsemble",
    "DeepEnsembleHyperparameters",
    "HyperDeepEnsemble",
    "HyperDeepEnsembleHyperparameters",
    "MCDropout",
    "MCDropoutHyperparameters",
    "NOMU",
    "NOMUHyperparameters",
    "NeuralSurrogateModel",
    "UncertaintyDecomposition",
]
