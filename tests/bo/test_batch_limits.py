"""Batch sizes a proposer cannot hold are refused before any work: optimize_acqf's
q-acquisitions by the memory of the joint posterior over the batch, Thompson sampling by
its candidates, TuRBO by the batch it was set up for."""

import pytest
import torch

from botorch_nn_uq.bo import (
    AcquisitionProposer,
    BayesianOptimizer,
    FunctionProblem,
    RandomProposer,
    TrustRegionProposer,
    TurboProposer,
)
from botorch_nn_uq.bo.batch_limits import (
    ACQUISITION_MEMORY_BUDGET,
    largest_optimize_acqf_batch,
    optimize_acqf_memory,
)


class _Counted(FunctionProblem):
    r"""A sphere that counts its evaluations."""

    def __init__(self, dim: int = 2) -> None:
        super().__init__(
            lambda X: (X - 0.3).square().sum(-1), [[0.0] * dim, [1.0] * dim], vectorized=True
        )
        self.calls = 0

    def evaluate(self, X: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return super().evaluate(X)


def test_the_memory_estimate_grows_with_the_square_of_the_batch() -> None:
    small, large = optimize_acqf_memory(400, 512, 10), optimize_acqf_memory(800, 512, 10)
    assert large == 4 * small
    # 512 raw samples of 6 q^2 float64 numbers each.
    assert optimize_acqf_memory(400, 512, 10) == 512 * 6 * 400**2 * 8
    limit = largest_optimize_acqf_batch(512, 10)
    assert optimize_acqf_memory(limit, 512, 10) <= ACQUISITION_MEMORY_BUDGET
    assert optimize_acqf_memory(limit + 1, 512, 10) > ACQUISITION_MEMORY_BUDGET
    assert largest_optimize_acqf_batch(16, 10) > limit


def test_run_refuses_a_batch_the_acquisition_cannot_hold_before_evaluating() -> None:
    problem = _Counted()
    optimizer = BayesianOptimizer.for_problem(problem, surrogate="gp", proposer="qlogei")
    limit = largest_optimize_acqf_batch(512, 10)
    with pytest.raises(ValueError, match=f"at most q = {limit} with 512 raw samples") as error:
        optimizer.run(problem, steps=1, q=100_000)
    assert "ts (Thompson sampling)" in str(error.value) and "GiB" in str(error.value)
    assert problem.calls == 0 and optimizer.step == 0 and optimizer.pending is None


def test_ask_refuses_a_batch_the_acquisition_cannot_hold_before_fitting() -> None:
    problem = _Counted()
    proposer = AcquisitionProposer("qlogei", num_restarts=2, raw_samples=16, sequential=True)
    optimizer = BayesianOptimizer.for_problem(problem, surrogate="gp", proposer=proposer)
    optimizer.run(problem, steps=0)
    limit = largest_optimize_acqf_batch(16, 2)
    with pytest.raises(ValueError, match=f"at most q = {limit} with 16 raw samples"):
        optimizer.ask(limit + 1)
    assert optimizer.model is None and optimizer.pending is None


def test_thompson_sampling_refuses_more_points_than_candidates() -> None:
    problem = _Counted()
    proposer = AcquisitionProposer("ts", options={"num_candidates": 64})
    optimizer = BayesianOptimizer.for_problem(problem, surrogate="gp", proposer=proposer)
    with pytest.raises(ValueError, match="ts cannot propose q = 65 points from its 64 candidates"):
        optimizer.run(problem, steps=1, q=65)
    assert problem.calls == 0
    with pytest.raises(ValueError, match="from its 4096 candidates"):
        AcquisitionProposer("ts").check_batch_size(4097, 2)
    region = TrustRegionProposer(AcquisitionProposer("ts", options={"num_candidates": 64}))
    with pytest.raises(ValueError, match="from its 64 candidates"):
        region.check_batch_size(65, 2)
    region.check_batch_size(64, 2)


def test_turbo_refuses_other_batches_and_more_points_than_candidates() -> None:
    with pytest.raises(ValueError, match="q = 4 points from its 3 candidates"):
        TurboProposer(num_candidates=3).check_batch_size(4, 2)
    with pytest.raises(ValueError, match=r"q = 6000 points from its 5000 candidates"):
        TurboProposer().check_batch_size(6000, 50)
    TurboProposer(num_candidates=6000).check_batch_size(6000, 50)


def test_proposers_without_a_limit_and_a_moderate_batch_still_run() -> None:
    RandomProposer().check_batch_size(10**6, 2)
    problem = _Counted()
    proposer = AcquisitionProposer("qlogei", num_restarts=2, raw_samples=16)
    optimizer = BayesianOptimizer.for_problem(
        problem, surrogate="gp", proposer=proposer, n_initial=4
    )
    records = optimizer.run(problem, steps=1, q=4)
    assert len(records) == 2 and optimizer.X.shape == (8, 2) and problem.calls == 2
