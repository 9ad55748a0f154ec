"""How ensembles are built: selection, held-out data, search spaces, pool training
(in-process or on Ray) and the searches (hyper-deep ensembles, NES-RS, NES-RE, the
DeepEns (RS) baseline, AutoDEUQ), with their adaptation to dataset shift (tabular shifts,
selection on a shifted validation set); the serving model lives in
:mod:`botorch_nn_uq.models`.

The public names are what a user of the searched ensembles passes in or reads back: the
search spaces and what they sample, the executors, the search histories, the selection
and hold-out rules, the dataset shifts, and the scoring and reselection of a trained
pool on another validation set; and, to run a search on a pool of one's own (as the
shift benchmark does), the pool's data, settings and trainer, the NES searches, the
DeepEns (RS) baseline and the assembly of selected candidates into one network.
"""

from botorch_nn_uq.ensembles.architecture_space import Architecture, ArchitectureSpace
from botorch_nn_uq.ensembles.deep_ensemble_search import (
    best_architecture,
    deep_ensemble_random_search,
    train_deep_ensemble,
)
from botorch_nn_uq.ensembles.history import CandidateTrainer, EnsembleDiagnostics, SearchHistory
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
from botorch_nn_uq.ensembles.nes import nes_random_search, nes_regularized_evolution
from botorch_nn_uq.ensembles.pool import (
    InProcessExecutor,
    PoolData,
    PoolSettings,
    RayExecutor,
    TrainedCandidate,
    assemble_ensemble,
)
from botorch_nn_uq.ensembles.selection import (
    SelectionResult,
    caruana_select,
    ensemble_nll,
    forward_select,
)
from botorch_nn_uq.ensembles.shift_adaptation import (
    CandidateScorer,
    ValidationScorer,
    select_from_pool,
)
from botorch_nn_uq.ensembles.shifts import (
    MAX_SEVERITY,
    TEST_SHIFTS,
    VALIDATION_SHIFTS,
    shift_test_set,
    shift_validation_set,
)

__all__ = [
    "MAX_SEVERITY",
    "TEST_SHIFTS",
    "VALIDATION_SHIFTS",
    "Architecture",
    "ArchitectureSpace",
    "CandidateRecord",
    "CandidateScorer",
    "CandidateTrainer",
    "EnsembleDiagnostics",
    "HyperparameterSpace",
    "InProcessExecutor",
    "PoolData",
    "PoolSettings",
    "RayExecutor",
    "SearchHistory",
    "SelectionResult",
    "TrainedCandidate",
    "TrainingHyperparameters",
    "ValidationScorer",
    "ValidationSplits",
    "assemble_ensemble",
    "best_architecture",
    "caruana_select",
    "deep_ensemble_random_search",
    "ensemble_nll",
    "forward_select",
    "holdout_size",
    "make_validation_splits",
    "nes_random_search",
    "nes_regularized_evolution",
    "select_from_pool",
    "shift_test_set",
    "shift_validation_set",
    "train_deep_ensemble",
]
