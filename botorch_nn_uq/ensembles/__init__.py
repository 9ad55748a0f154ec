"""How ensembles are built: selection, held-out data, search spaces, pool training
(in-process or on Ray) and the searches (hyper-deep ensembles, NES-RS, NES-RE, AutoDEUQ);
the serving model lives in :mod:`botorch_nn_uq.models`."""

from botorch_nn_uq.ensembles.architecture_space import (
    Architecture,
    ArchitectureSpace,
    NetworkSpec,
    Node,
)
from botorch_nn_uq.ensembles.autodeuq import autodeuq_search, propose_hyperparameters
from botorch_nn_uq.ensembles.history import (
    CandidateTrainer,
    EnsembleDiagnostics,
    SearchHistory,
    ensemble_diagnostics,
)
from botorch_nn_uq.ensembles.holdout import (
    ValidationSplits,
    holdout_size,
    make_validation_splits,
    member_log_likelihoods,
    validation_log_likelihoods,
)
from botorch_nn_uq.ensembles.hyper_deep import (
    CandidateRecord,
    HyperDeepEnsembleSearch,
    HyperDeepSearchSpace,
    MemberArchitecture,
    search_hyper_deep_ensemble,
)
from botorch_nn_uq.ensembles.hyperparameter_space import (
    HyperparameterSpace,
    TrainingHyperparameters,
)
from botorch_nn_uq.ensembles.nes import nes_random_search, nes_regularized_evolution
from botorch_nn_uq.ensembles.pool import (
    CandidateSpec,
    InProcessExecutor,
    PoolData,
    PoolSettings,
    RayExecutor,
    TrainedCandidate,
    assemble_ensemble,
    train_candidate_group,
    train_pool,
)
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
    "CandidateSpec",
    "CandidateTrainer",
    "EnsembleDiagnostics",
    "HyperparameterSpace",
    "InProcessExecutor",
    "NetworkSpec",
    "Node",
    "PoolData",
    "PoolSettings",
    "RayExecutor",
    "SearchHistory",
    "TrainedCandidate",
    "TrainingHyperparameters",
    "assemble_ensemble",
    "autodeuq_search",
    "ensemble_diagnostics",
    "nes_random_search",
    "nes_regularized_evolution",
    "propose_hyperparameters",
    "train_candidate_group",
    "train_pool",
    "HyperDeepEnsembleSearch",
    "MemberArchitecture",
    "HyperDeepSearchSpace",
    "SelectionResult",
    "ValidationSplits",
    "caruana_select",
    "ensemble_nll",
    "forward_select",
    "holdout_size",
    "make_validation_splits",
    "member_log_likelihoods",
    "search_hyper_deep_ensemble",
    "validation_log_likelihoods",
]
