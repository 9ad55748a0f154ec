"""Bayesian optimisation with the package's strategies, for any objective.

The core is :class:`BayesianOptimizer` (ask, tell, best, save/load, run); its parts are
the objectives and problems (:mod:`~botorch_nn_uq.bo.objectives`), the surrogates
(:mod:`~botorch_nn_uq.bo.surrogates`), the fit policies (:mod:`~botorch_nn_uq.bo.fitting`),
the proposers (:mod:`~botorch_nn_uq.bo.proposers`) and the run state with its seeding
rule (:mod:`~botorch_nn_uq.bo.state`). :func:`run_bo` runs the core on a registered test
problem, configured by keyword arguments, on the device :func:`check_device` accepts.
"""

from botorch_nn_uq.bo.acquisitions import (
    ACQUISITIONS,
    AcquisitionContext,
    AcquisitionSpec,
    get_acquisition,
    register_acquisition,
)
from botorch_nn_uq.bo.continual import ContinualTraining
from botorch_nn_uq.bo.designs import initial_design
from botorch_nn_uq.bo.fitting import ColdFit, ContinualFit, FitPolicy, StreamingFit
from botorch_nn_uq.bo.loop import BOResult, run_bo, write_rows_csv
from botorch_nn_uq.bo.objectives import (
    Composite,
    FunctionProblem,
    HitTarget,
    Maximize,
    Minimize,
    Objective,
    Problem,
    composite_problem,
    registered_problem,
)
from botorch_nn_uq.bo.optimizer import (
    BayesianOptimizer,
    BestPoint,
    EvaluationsNotToldError,
)
from botorch_nn_uq.bo.pending import NotPendingError, Trials
from botorch_nn_uq.bo.proposers import (
    AcquisitionProposer,
    CandidateSetProposer,
    DynamicCalibrationProposer,
    Proposal,
    Proposer,
    RandomProposer,
    ScreenedProposer,
    TrustRegionProposer,
)
from botorch_nn_uq.bo.state import (
    FailedPoints,
    PendingPoints,
    StateFileError,
    StepCost,
    StepRecord,
    step_seed,
)
from botorch_nn_uq.bo.strategy import RECOMMENDED_STRATEGIES, Strategy
from botorch_nn_uq.bo.surrogates import (
    RANDOM_SEARCH,
    SURROGATES,
    SurrogateSpec,
    get_surrogate,
    register_surrogate,
    surrogate_from_card,
)
from botorch_nn_uq.bo.trust_region import TrustRegion
from botorch_nn_uq.bo.turbo import TurboProposer
from botorch_nn_uq.checks import check_device

__all__ = [
    "ACQUISITIONS",
    "AcquisitionContext",
    "AcquisitionProposer",
    "AcquisitionSpec",
    "BOResult",
    "BayesianOptimizer",
    "BestPoint",
    "EvaluationsNotToldError",
    "FailedPoints",
    "CandidateSetProposer",
    "ColdFit",
    "Composite",
    "ContinualFit",
    "ContinualTraining",
    "DynamicCalibrationProposer",
    "FitPolicy",
    "FunctionProblem",
    "HitTarget",
    "Maximize",
    "Minimize",
    "NotPendingError",
    "Objective",
    "PendingPoints",
    "Problem",
    "Proposal",
    "Proposer",
    "RANDOM_SEARCH",
    "RandomProposer",
    "SURROGATES",
    "ScreenedProposer",
    "StateFileError",
    "Strategy",
    "RECOMMENDED_STRATEGIES",
    "StepCost",
    "StepRecord",
    "StreamingFit",
    "SurrogateSpec",
    "Trials",
    "TrustRegion",
    "TrustRegionProposer",
    "TurboProposer",
    "check_device",
    "composite_problem",
    "get_acquisition",
    "get_surrogate",
    "initial_design",
    "register_acquisition",
    "register_surrogate",
    "registered_problem",
    "run_bo",
    "step_seed",
    "surrogate_from_card",
    "write_rows_csv",
]
