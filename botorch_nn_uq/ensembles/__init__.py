"""How ensembles are built: selection, validation and search; the serving model lives in
:mod:`botorch_nn_uq.models`."""

from botorch_nn_uq.ensembles.hyper_deep import (
    CandidateRecord,
    HyperDeepEnsembleSearch,
    MemberArchitecture,
    SearchSpace,
    search_hyper_deep_ensemble,
)
from botorch_nn_uq.ensembles.selection import (
    SelectionResult,
    caruana_select,
    ensemble_nll,
    forward_select,
)
from botorch_nn_uq.ensembles.validation import (
    ValidationSplits,
    make_validation_splits,
    member_log_likelihoods,
    validation_log_likelihoods,
)

__all__ = [
    "CandidateRecord",
    "HyperDeepEnsembleSearch",
    "MemberArchitecture",
    "SearchSpace",
    "SelectionResult",
    "ValidationSplits",
    "caruana_select",
    "ensemble_nll",
    "forward_select",
    "make_validation_splits",
    "member_log_likelihoods",
    "search_hyper_deep_ensemble",
    "validation_log_likelihoods",
]
