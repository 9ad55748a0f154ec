"""Candidate generation: batch Thompson sampling, and acquisition optimisation screened
with a cheaper acquisition."""

from botorch_nn_uq.generation.screening import optimize_acqf_screened
from botorch_nn_uq.generation.thompson import batch_thompson_sampling

__all__ = ["batch_thompson_sampling", "optimize_acqf_screened"]
