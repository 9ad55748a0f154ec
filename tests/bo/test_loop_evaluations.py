"""The BO loop's ``on_evaluations`` hook: every evaluated batch, as it happens."""

import pytest
import torch

from botorch_nn_uq.bo import initial_design, run_bo
from botorch_nn_uq.problems import get_bo_problem


@pytest.mark.parametrize("strategy", ["random", "gp:qlogei(num_restarts=2,raw_samples=16)"])
def test_on_evaluations_sees_every_batch_before_the_callback(strategy: str):
    problem = get_bo_problem("levy", 2)
    events = []
    result = run_bo(
        problem,
        strategy,
        iterations=2,
        n_initial=4,
        seed=1,
        batch_size=3,
        on_evaluations=lambda X, values, record: events.append(("batch", X, values, record)),
        callback=lambda record: events.append(("record", record)),
    )
    batches = [event for event in events if event[0] == "batch"]
    # Each batch is reported, then its record.
    assert [event[0] for event in events] == ["batch", "record"] * 3
    assert [event[1] for event in events[1::2]] == [batch[3] for batch in batches]
    assert [batch[3] for batch in batches] == result.records
    assert [batch[1].shape for batch in batches] == [(4, 2), (3, 2), (3, 2)]
    assert torch.equal(batches[0][1], initial_design(problem.bounds, 4, seed=1))
    assert torch.equal(torch.cat([batch[1] for batch in batches]), result.X)
    assert torch.equal(torch.cat([batch[2] for batch in batches]), result.values)
