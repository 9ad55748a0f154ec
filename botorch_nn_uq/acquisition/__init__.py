"""Acquisition functions (BoTorch ``AcquisitionFunction`` subclasses).

Leaky EI and q-Leaky EI (NEON) keep gradients alive for sample-based posteriors; the
robust target-value family (Hoffer, Ranftl & Geiger) minimises the expected squared
error to a target under a known aleatoric variance. Importing this package registers
BoTorch input constructors for every class.
"""

# Imported for its side effect: registering the BoTorch input constructors.
from botorch_nn_uq.acquisition import input_constructors  # noqa: F401
from botorch_nn_uq.acquisition.leaky_ei import LeakyExpectedImprovement, qLeakyExpectedImprovement
from botorch_nn_uq.acquisition.robust_target import (
    AleatoricVariance,
    LogRobustTargetProbabilityOfImprovement,
    RobustTargetExpectedImprovement,
    RobustTargetLowerConfidenceBound,
    RobustTargetProbabilityOfImprovement,
    compute_e_min,
    first_order_input_noise_variance,
    qRobustTargetExpectedImprovement,
)

__all__ = [
    "AleatoricVariance",
    "LeakyExpectedImprovement",
    "LogRobustTargetProbabilityOfImprovement",
    "RobustTargetExpectedImprovement",
    "RobustTargetLowerConfidenceBound",
    "RobustTargetProbabilityOfImprovement",
    "compute_e_min",
    "first_order_input_noise_variance",
    "qLeakyExpectedImprovement",
    "qRobustTargetExpectedImprovement",
]
