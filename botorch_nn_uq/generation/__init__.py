"""Candidate generation without an acquisition function: batch Thompson sampling."""

from botorch_nn_uq.generation.thompson import (
    batch_thompson_sampling,
    function_bank_scores,
    slot_functions,
    thompson_candidates,
)

__all__ = [
    "batch_thompson_sampling",
    "function_bank_scores",
    "slot_functions",
    "thompson_candidates",
]
