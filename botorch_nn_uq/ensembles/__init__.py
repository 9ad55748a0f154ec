"""How ensembles are built: selection, held-out data, search spaces, pool training
(in-process or on Ray) and the searches (hyper-deep ensembles, NES-RS, NES-RE, AutoDEUQ);
the serving model lives in :mod:`botorch_nn_uq.models`.

The public names are what a user of the searched ensembles passes in or reads back: the
search spaces and what they sample, the executors, the search histories, and the
selection and hold-out rules. The searches' engines (candidate pools, trainers, the
search loops) are reached through their modules.
"""

from botorch_nn_uq.ensembles.architecture_space import Architecture, ArchitectureSpace
from botorch_nn_uq.ensembles.history import EnsembleDiagnostics, SearchHistory
from botorch_nn_uq.ensembles.holdout import (
    ValidationSplits,
    holdout_size,
    make_validation_splits,
)
from botorch_nn_uq.ensembles.hyper_deep import CandidateRecord
from botorch_nn_uq.ensembles.hyperparameter_space import (
    HyperparameterSpace,
    TrainingHyperparameters,
)
from botorch_nn_uq.ensembles.pool import InProcessExecutor, RayExecutor
from botorch_nn_uq.ensembles.selection import (
    SelectionResult,
    caruana_select,
    ensemble_nll,
    forward_select,
)

__all__ = [
    "Architecture",
    "ArchitectureSpace",
    "CandidateRecord",
    "EnsembleDiagnostics",
    "HyperparameterSpace",
    "InProcessExecutor",
    "RayExecutor",
    "SearchHistory",
    "SelectionResult",
    "TrainingHyperparameters",
    "ValidationSplits",
    "caruana_select",
    "ensemble_nll",
    "forward_select",
    "holdout_size",
    "make_validation_splits",
]
