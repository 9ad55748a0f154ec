"""The warped Hartmann-6: BoTorch's warped-GP tutorial's warping, Hartmann-6's optimum at
the warped minimiser, determinism under the seed."""

from __future__ import annotations

import itertools

import pytest
import torch
from botorch.test_functions import Hartmann

from botorch_nn_uq.problems import WarpedHartmann, get_bo_problem


def test_the_default_warping_is_the_tutorials() -> None:
    # The tutorial: torch.manual_seed(1234567890), then c1 and c0 from torch.rand(6) * 3 + 0.1.
    generator = torch.Generator().manual_seed(1234567890)
    concentration1 = torch.rand(6, generator=generator, dtype=torch.float64) * 3 + 0.1
    concentration0 = torch.rand(6, generator=generator, dtype=torch.float64) * 3 + 0.1
    f = WarpedHartmann()
    assert torch.equal(f.concentration1, concentration1)
    assert torch.equal(f.concentration0, concentration0)
    assert ((f.concentration1 >= 0.1) & (f.concentration1 <= 3.1)).all()


def test_values_are_hartmann_at_the_unwarped_points_and_the_optimum_is_kept() -> None:
    f = WarpedHartmann()
    hartmann = Hartmann(dim=6)
    a, b = f.concentration1, f.concentration0
    X = torch.rand(32, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    # K^{-1}(u) = (1 - (1 - u)^{1/b})^{1/a}, written out by hand.
    unwarped = (1 - (1 - X).pow(1 / b)).pow(1 / a)
    torch.testing.assert_close(f(X), hartmann(unwarped))
    # K(x*) maps to Hartmann-6's minimiser, where f takes its optimal value.
    optimizer = torch.tensor(f.optimizers[0].tolist(), dtype=torch.float64)
    torch.testing.assert_close(f.unwarp(optimizer), hartmann.optimizers[0])
    assert f(optimizer.unsqueeze(0)).item() == pytest.approx(-3.32237, abs=1e-5)
    assert f(X).min() > f.optimal_value
    assert f(X).dtype == torch.float64 and f(X.float()).dtype == torch.float32


def test_the_warping_seed_decides_the_warping() -> None:
    X = torch.rand(8, 6, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    assert torch.equal(WarpedHartmann(warping_seed=3)(X), WarpedHartmann(warping_seed=3)(X))
    assert not torch.equal(WarpedHartmann(warping_seed=3)(X), WarpedHartmann()(X))


def test_the_registry_builds_it_in_six_dimensions_with_its_extrema() -> None:
    problem = get_bo_problem("warped-hartmann", 6)
    assert problem.min_value == pytest.approx(-3.32237) and problem.optimum_known
    assert problem.max_value == pytest.approx(-2.8124505e-8, rel=1e-6)
    # The largest value over the box is at a vertex: no vertex and no random point is larger.
    vertices = torch.tensor(list(itertools.product([0.0, 1.0], repeat=6)), dtype=torch.float64)
    X = torch.rand(20_000, 6, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    assert problem.evaluate(torch.cat([vertices, X])).max().item() == problem.max_value
    assert problem.normalized_regret(problem.min_value) == 0.0
    with pytest.raises(ValueError, match="'warped-hartmann' is 6-dimensional"):
        get_bo_problem("warped-hartmann", 5)
