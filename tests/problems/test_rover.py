"""The rover trajectory problem: values derived by hand (a straight trajectory through the
forest, one parked outside the square), values of the published code at random points,
determinism under the noise seed, and the registry's reference extrema."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from botorch_nn_uq.problems import RoverTrajectory, get_bo_problem
from botorch_nn_uq.problems.rover import (
    GOAL,
    NUM_TRAJECTORY_POINTS,
    START,
    TREE_CENTRES,
    TREE_HALF_SIDE,
)


def unit_cube(raw: np.ndarray) -> torch.Tensor:
    r"""The unit-cube input of control points ``raw`` (``30 x 2``, in ``[-0.1, 1.1]^2``)."""
    scaled = torch.tensor((raw.reshape(-1) + 0.1) / 1.2, dtype=torch.float64)
    return scaled.clamp(0.0, 1.0).unsqueeze(0)  # rounding can put 1.1 just past 1


def union_length(intervals: list[tuple[float, float]]) -> float:
    total, reached = 0.0, -math.inf
    for low, high in sorted(intervals):
        if high > max(low, reached):
            total += high - max(low, reached)
            reached = high
    return total


def test_a_straight_trajectory_costs_its_length_and_the_trees_it_crosses() -> None:
    # Control points evenly spaced from start to goal: the fitted curve is that segment,
    # t -> (t, t) for t in [0.05, 0.95]. It is inside the tree centred at (a, b) for
    # max(a, b) - 0.025 < t < min(a, b) + 0.025; trees overlap, so their union counts.
    diagonal = np.linspace(START[0], GOAL[0], 30)
    rover = RoverTrajectory()
    crossings = [
        (max(max(a, b) - TREE_HALF_SIDE, START[0]), min(min(a, b) + TREE_HALF_SIDE, GOAL[0]))
        for a, b in TREE_CENTRES
    ]
    crossings = [(low, high) for low, high in crossings if high > low]
    assert len(crossings) == 12
    length = math.sqrt(2) * (GOAL[0] - START[0])
    cost = 0.05 * length + 20.0 * math.sqrt(2) * union_length(crossings)
    # The trapezoidal rule misses at most half a step of the rate 20 at each tree edge.
    step = length / (NUM_TRAJECTORY_POINTS - 1)
    tolerance = 2 * len(crossings) * 20.0 * step / 2
    value = rover(unit_cube(np.stack([diagonal, diagonal], -1))).item()
    assert value == pytest.approx(cost - 5.0, abs=tolerance)
    assert abs(value - (cost - 5.0)) > 1e-6  # the rule does not hit the integral exactly
    assert value > 0.05 * length - 5.0


def test_a_trajectory_parked_outside_the_square_pays_the_misses() -> None:
    # All control points at (1.1, -0.1) (noise apart): the trajectory has no length, and
    # misses the start by 1.05 + 0.15 and the goal by 0.15 + 1.05 in L1.
    corner = np.tile([1.1, -0.1], (30, 1))
    value = RoverTrajectory()(unit_cube(corner)).item()
    assert value == pytest.approx(10 * 1.2 + 10 * 1.2 - 5.0, abs=0.02)


def test_it_agrees_with_the_published_code() -> None:
    # Values of Wang et al.'s rover code (create_large_domain with the 10 * L1 miss
    # costs, plus 5) at these points, with its input noise replaced by this draw.
    rover = RoverTrajectory(jitter_seed=3)
    X = torch.tensor(np.random.default_rng(1).random((5, 60)))
    published = [15.00429502671495, 15.983843925634996, 17.651777907742797,
                 20.348992627447917, 17.141754920277947]  # fmt: skip
    torch.testing.assert_close(rover(X), torch.tensor(published, dtype=torch.float64))


def test_the_noise_seed_decides_the_value_and_batches_keep_their_shape() -> None:
    X = torch.rand(2, 3, 60, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    values = RoverTrajectory()(X)
    assert values.shape == (2, 3)
    assert torch.equal(values, RoverTrajectory()(X))
    other = RoverTrajectory(jitter_seed=1)(X)
    assert not torch.equal(values, other)
    torch.testing.assert_close(values, other, atol=0.05, rtol=0)
    assert RoverTrajectory()(X.float()).dtype == torch.float32


def test_the_registry_builds_it_with_reference_extrema() -> None:
    problem = get_bo_problem("rover", 60)
    assert problem.dim == 60 and not problem.optimum_known
    assert problem.min_value == -5.0
    assert problem.evaluate(problem.maximizer.unsqueeze(0)).item() == problem.max_value
    X = torch.rand(64, 60, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    assert (problem.evaluate(X) > problem.min_value).all()
    with pytest.raises(ValueError, match="'rover' is 60-dimensional"):
        get_bo_problem("rover", 10)
