"""Bayesian optimisation with the package's strategies: the registries of surrogates and
acquisitions, and the BO loop."""

from botorch_nn_uq.bo.continual import ContinualTraining
from botorch_nn_uq.bo.loop import BOIterationRecord, BOResult, initial_design, run_bo
from botorch_nn_uq.bo.registry import (
    ACQUISITIONS,
    AcquisitionContext,
    AcquisitionSpec,
    get_acquisition,
    register_acquisition,
)
from botorch_nn_uq.bo.surrogates import (
    RANDOM_SEARCH,
    SURROGATES,
    SurrogateSpec,
    get_surrogate,
    register_surrogate,
)
from botorch_nn_uq.bo.trust_region import TrustRegion

__all__ = [
    "ACQUISITIONS",
    "AcquisitionContext",
    "AcquisitionSpec",
    "BOIterationRecord",
    "BOResult",
    "ContinualTraining",
    "RANDOM_SEARCH",
    "SURROGATES",
    "SurrogateSpec",
    "TrustRegion",
    "get_acquisition",
    "get_surrogate",
    "initial_design",
    "register_acquisition",
    "register_surrogate",
    "run_bo",
]
