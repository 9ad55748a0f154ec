"""BoTorch ``Model`` subclasses that serve predictions from trained neural networks, and
their catalogue: :data:`MODEL_CARDS`, one :class:`ModelCard` per model, defined next to its
class (the registry of surrogates, the user guide's tables and the test suite's lists of
models are derived from it)."""

from botorch_nn_uq.models.base import NeuralSurrogateModel
from botorch_nn_uq.models.card import ModelCard, catalogue
from botorch_nn_uq.models.ensemble import (
    DEEP_ENSEMBLE_CARD,
    DeepEnsemble,
    DeepEnsembleHyperparameters,
)
from botorch_nn_uq.models.fantasy import FantasyModel
from botorch_nn_uq.models.gp_baseline import GP_CARD
from botorch_nn_uq.models.hyper_deep_ensemble import (
    HYPER_DEEP_ENSEMBLE_CARD,
    HyperDeepEnsemble,
    HyperDeepEnsembleHyperparameters,
)
from botorch_nn_uq.models.mc_dropout import MC_DROPOUT_CARD, MCDropout, MCDropoutHyperparameters
from botorch_nn_uq.models.member_ensemble import (
    MemberEnsemble,
    MemberEnsembleHyperparameters,
    UncertaintyDecomposition,
)
from botorch_nn_uq.models.neon import NEON, NEON_CARD, NEONHyperparameters
from botorch_nn_uq.models.nomu import NOMU, NOMU_CARD, NOMUHyperparameters
from botorch_nn_uq.models.searched_ensembles import (
    AUTODEUQ_CARD,
    NES_RE_CARD,
    NES_RS_CARD,
    AutoDEUQ,
    AutoDEUQHyperparameters,
    NESHyperparameters,
    NESRandomSearch,
    NESRegularizedEvolution,
    NeuralEnsembleSearch,
    SearchedEnsembleHyperparameters,
)

#: The catalogue: every model's card, in the registry's order. A new model's card is added
#: here with the model's export (its module defines the card).
MODEL_CARDS: tuple[ModelCard, ...] = catalogue(
    GP_CARD,
    MC_DROPOUT_CARD,
    DEEP_ENSEMBLE_CARD,
    HYPER_DEEP_ENSEMBLE_CARD,
    NES_RS_CARD,
    NES_RE_CARD,
    AUTODEUQ_CARD,
    NEON_CARD,
    NOMU_CARD,
)

__all__ = [
    "AutoDEUQ",
    "AutoDEUQHyperparameters",
    "DeepEnsemble",
    "DeepEnsembleHyperparameters",
    "FantasyModel",
    "HyperDeepEnsemble",
    "HyperDeepEnsembleHyperparameters",
    "MODEL_CARDS",
    "MCDropout",
    "MCDropoutHyperparameters",
    "MemberEnsemble",
    "MemberEnsembleHyperparameters",
    "ModelCard",
    "NEON",
    "NEONHyperparameters",
    "NESHyperparameters",
    "NESRandomSearch",
    "NeuralEnsembleSearch",
    "NESRegularizedEvolution",
    "NOMU",
    "NOMUHyperparameters",
    "NeuralSurrogateModel",
    "SearchedEnsembleHyperparameters",
    "UncertaintyDecomposition",
]
