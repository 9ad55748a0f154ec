"""Candidate generation: batch Thompson sampling, and acquisition optimisation screened
with a cheaper acquisition."""

from botorch_nn_uq.generation.screening import optimize_acqf_screened
from botorch_nn_uq.generation.thompson import (
    batch_thompson_sampling,
    function_bank_scores,
    slot_functions,
    thompson_candidates,
)

__all__ = [
    "batch_thompson_sampling",
    "function_bank_scores",
    "optimize_acqf_screened",
    "slot_functions",
    "thompson_candidates",
]
