"""BoTorch ``Model`` subclasses that serve predictions from trained neural networks."""

from botorch_nn_uq.models.base import NeuralSurrogateModel
from botorch_nn_uq.models.ensemble import DeepEnsemble, DeepEnsembleHyperparameters
from botorch_nn_uq.models.fantasy import FantasyModel
from botorch_nn_uq.models.hyper_deep_ensemble import (
    HyperDeepEnsemble,
    HyperDeepEnsembleHyperparameters,
)
from botorch_nn_uq.models.mc_dropout import MCDropout, MCDropoutHyperparameters
from botorch_nn_uq.models.member_ensemble import (
    MemberEnsemble,
    MemberEnsembleHyperparameters,
    UncertaintyDecomposition,
)
from botorch_nn_uq.models.neon import NEON, NEONHyperparameters
from botorch_nn_uq.models.nomu import NOMU, NOMUHyperparameters
from botorch_nn_uq.models.searched_ensembles import (
    AutoDEUQ,
    AutoDEUQHyperparameters,
    NESHyperparameters,
    NESRandomSearch,
    NESRegularizedEvolution,
    SearchedEnsembleHyperparameters,
)

__all__ = [
    "AutoDEUQ",
    "AutoDEUQHyperparameters",
    "DeepEnsemble",
    "DeepEnsembleHyperparameters",
    "FantasyModel",
    "HyperDeepEnsemble",
    "HyperDeepEnsembleHyperparameters",
    "MCDropout",
    "MCDropoutHyperparameters",
    "MemberEnsemble",
    "MemberEnsembleHyperparameters",
    "NEON",
    "NEONHyperparameters",
    "NESHyperparameters",
    "NESRandomSearch",
    "NESRegularizedEvolution",
    "NOMU",
    "NOMUHyperparameters",
    "NeuralSurrogateModel",
    "SearchedEnsembleHyperparameters",
    "UncertaintyDecomposition",
]
