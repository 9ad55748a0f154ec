"""Tests of the TuRBO-style trust region of the BO loop."""

import math

import pytest
import torch

from botorch_nn_uq.bo.loop import run_bo
from botorch_nn_uq.bo.strategy import Strategy
from botorch_nn_uq.bo.trust_region import TrustRegion
from botorch_nn_uq.problems import get_bo_problem


def test_the_region_grows_on_successes_shrinks_on_failures_and_restarts():
    region = TrustRegion(dim=8, batch_size=4)
    assert region.failure_tolerance == 2
    region.update(torch.tensor([1.0, 0.5]))
    assert region.best_value == 1.0 and region.length == 0.8
    for value in (2.0, 3.0, 4.0):
        region.update(torch.tensor([value]))
    assert region.length == 1.6 and region.best_value == 4.0
    region.update(torch.tensor([4.001]))  # below TuRBO's 1e-3 relative improvement
    assert region.failures == 1 and region.length == 1.6
    region.update(torch.tensor([3.0]))
    assert region.length == 0.8 and region.failures == 0
    while region.restarts == 0:
        region.update(torch.tensor([0.0]))
    assert region.length == region.length_init and region.restarts == 1
    assert region.best_value == pytest.approx(4.001)


def test_the_box_is_centred_and_clipped_to_the_problem(tkwargs):
    bounds = torch.tensor([[0.0, -10.0], [1.0, 10.0]], **tkwargs)
    region = TrustRegion(dim=2, batch_size=1, length=0.5, length_init=0.5)
    box = region.box(torch.tensor([0.9, 0.0], **tkwargs), bounds)
    torch.testing.assert_close(box, torch.tensor([[0.65, -5.0], [1.0, 5.0]], **tkwargs))
    grown = region.box(torch.tensor([0.5, 0.0], **tkwargs), bounds, scale=1.5)
    torch.testing.assert_close(grown, torch.tensor([[0.125, -7.5], [0.875, 7.5]], **tkwargs))
    with pytest.raises(ValueError, match="length_min <= length_init <= length_max"):
        TrustRegion(dim=2, batch_size=1, length_init=2.0)


@pytest.mark.parametrize(
    "strategy",
    ["deep-ensemble:ts(num_candidates=256)+tr", "gp:qlogei(num_restarts=2,raw_samples=32)+tr+seq"],
)
def test_proposals_stay_inside_the_region_around_the_best_point(strategy):
    problem = get_bo_problem("levy", 3)
    result = run_bo(problem, strategy, iterations=3, n_initial=8, seed=1, batch_size=4)
    side = problem.bounds[1] - problem.bounds[0]
    for step, record in enumerate(result.records[1:]):
        start = 8 + 4 * step
        seen_X, seen = result.X[:start], result.values[:start]
        center = seen_X[seen.argmin()]
        batch = result.X[start : start + 4]
        assert ((batch - center).abs() <= 0.5 * record.trust_region_length * side + 1e-9).all()
    assert math.isnan(result.records[0].trust_region_length)
    with pytest.raises(ValueError, match="random search takes no options"):
        run_bo(problem, Strategy("random", acquisition="", trust_region=True), iterations=1)
    with pytest.raises(ValueError, match="local needs a trust region"):
        run_bo(problem, strategy.replace("+tr", "+local(4)"), iterations=1)
