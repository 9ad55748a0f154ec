"""Tests for the large-scale BO problems: nn-draw, Ackley and Rastrigin."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from botorch.test_functions.synthetic import Ackley, Rastrigin
from scipy.optimize import minimize
from torch import nn

from botorch_nn_uq.problems import (
    BO_PROBLEM_NAMES,
    NOMU_SUITE_NAMES,
    SCALE_PROBLEM_NAMES,
    BOProblem,
    RandomTanhNetwork,
    get_bo_problem,
)

ACKLEY_MAX = 22.320334848401277  # g(x*) of the Ackley proof, dimension-free
RASTRIGIN_MAX_PER_COORDINATE = 40.35329019383895


@pytest.fixture(scope="module")
def nn_draw() -> BOProblem:
    return get_bo_problem("nn-draw", 200)


def _uniform(problem: BOProblem, n: int, seed: int) -> torch.Tensor:
    lower, upper = problem.bounds
    gen = torch.Generator().manual_seed(seed)
    return lower + (upper - lower) * torch.rand(n, problem.dim, generator=gen, dtype=lower.dtype)


def _local_optimum(problem: BOProblem, x0: np.ndarray, sign: float) -> float:
    """L-BFGS-B on ``sign * f`` from ``x0`` in the box (sign -1: ascent); returns ``f``."""

    def objective(x: np.ndarray) -> tuple[float, np.ndarray]:
        X = torch.tensor(x, dtype=torch.float64, requires_grad=True)
        value = sign * problem.evaluate(X)
        value.backward()
        return value.item(), X.grad.numpy()

    bounds = problem.bounds.T.tolist()
    result = minimize(objective, x0, jac=True, method="L-BFGS-B", bounds=bounds)
    return sign * result.fun


def _assert_max_not_exceeded(problem: BOProblem, seed: int) -> None:
    """Random search, ascent from the best random points and from near the maximiser."""
    assert problem.evaluate(problem.maximizer).item() == problem.max_value
    X = _uniform(problem, 20_000, seed)
    values = problem.evaluate(X)
    starts = list(X[values.topk(5).indices].numpy())
    gen = torch.Generator().manual_seed(seed + 1)
    lower, upper = problem.bounds
    for _ in range(3):
        jitter = 1e-3 * (upper - lower) * torch.randn(problem.dim, generator=gen, dtype=lower.dtype)
        starts.append(torch.clamp(problem.maximizer + jitter, lower, upper).numpy())
    best_local = max(_local_optimum(problem, x0, -1.0) for x0 in starts)
    tolerance = 1e-9 * (problem.max_value - problem.min_value)
    assert values.max().item() <= problem.max_value + tolerance
    assert best_local <= problem.max_value + tolerance
    # The ascents from near the maximiser do reach it (the search is not toothless).
    assert best_local >= problem.max_value - 1e-6 * (problem.max_value - problem.min_value)


# The problems' reference values and extrema are float64 (their default dtype) and are
# checked at tolerances float32 cannot meet; test_evaluate_dtype_and_batch_shape covers
# float32.


def test_names() -> None:
    assert NOMU_SUITE_NAMES == ("levy", "rosenbrock", "g-function", "perm")
    assert SCALE_PROBLEM_NAMES == ("nn-draw", "ackley", "rastrigin")
    assert BO_PROBLEM_NAMES == NOMU_SUITE_NAMES + SCALE_PROBLEM_NAMES + (
        "warped-hartmann",
        "lunar-lander",
        "rover",
    )


@pytest.mark.parametrize(
    ("name", "dim", "cls", "lower", "upper"),
    [
        ("nn-draw", 7, RandomTanhNetwork, 0.0, 1.0),
        ("ackley", 20, Ackley, -32.768, 32.768),
        ("rastrigin", 10, Rastrigin, -5.12, 5.12),
    ],
)
def test_problem_definition(name: str, dim: int, cls: type, lower: float, upper: float) -> None:
    problem = get_bo_problem(name, dim)
    assert problem.name == name and problem.dim == dim
    assert type(problem.test_function) is cls
    assert not problem.test_function.negate
    assert problem.optimum_known == (name != "nn-draw")
    expected_bounds = torch.tensor([[lower] * dim, [upper] * dim], dtype=torch.float64)
    torch.testing.assert_close(problem.bounds, expected_bounds)
    assert problem.maximizer.shape == (dim,)
    at_min = problem.evaluate(problem.test_function.optimizers)
    torch.testing.assert_close(at_min, torch.tensor([problem.min_value], dtype=torch.float64))


def test_ackley_values_at_known_points() -> None:
    problem = get_bo_problem("ackley", 20)
    assert problem.min_value == 0.0
    assert problem.evaluate(torch.zeros(20, dtype=torch.float64)).item() == pytest.approx(
        0.0, abs=1e-12
    )
    # At x = (1, ..., 1): sqrt(mean x^2) = 1 and mean cos(2 pi x) = 1.
    expected = 20.0 * (1.0 - math.exp(-0.2))
    assert problem.evaluate(torch.ones(20, dtype=torch.float64)).item() == pytest.approx(expected)


def test_ackley_max_value() -> None:
    a, b = 20.0, 0.2
    for dim in (2, 5, 20):
        problem = get_bo_problem("ackley", dim)
        assert problem.max_value == pytest.approx(ACKLEY_MAX, rel=1e-13)
        expected = torch.full((dim,), 32.50041406988013, dtype=torch.float64)
        torch.testing.assert_close(problem.maximizer, expected, rtol=0, atol=1e-9)
    gap = a + math.e - math.exp(-1.0) - a * math.exp(-b * 32.768) - ACKLEY_MAX
    assert 1.5e-3 < gap < 1.6e-3


def test_ackley_proof_on_dense_grids() -> None:
    """Both 1-D claims of the Ackley proof: ``g`` and the supporting ``L`` peak at ``x*``."""
    a, b = 20.0, 0.2
    x_star = get_bo_problem("ackley", 2).maximizer[0].item()
    x = np.linspace(0.0, 32.768, 4_000_001)
    g = -a * np.exp(-b * x) - np.exp(np.cos(2 * np.pi * x)) + a + np.e
    assert g.max() <= ACKLEY_MAX + 1e-12
    assert abs(x[g.argmax()] - x_star) < 1e-5
    s_star, c_star = x_star**2, math.cos(2 * math.pi * x_star)
    alpha = a * b * math.exp(-b * math.sqrt(s_star)) / (2 * math.sqrt(s_star))
    beta = -math.exp(c_star)
    L = alpha * x**2 + beta * np.cos(2 * np.pi * x)
    L_star = alpha * s_star + beta * c_star
    assert L.max() <= L_star + 1e-15
    # The margin of the |x| <= 32.5 case is positive (it is a second-order effect).
    assert alpha * 32.5**2 - beta < L_star


def test_ackley_max_is_not_exceeded() -> None:
    _assert_max_not_exceeded(get_bo_problem("ackley", 20), seed=20)


def test_rastrigin_values_and_max() -> None:
    problem = get_bo_problem("rastrigin", 10)
    assert problem.min_value == 0.0
    assert problem.evaluate(torch.zeros(10, dtype=torch.float64)).item() == 0.0
    # Integers are local minima with value x^2 per coordinate.
    x = torch.tensor([1.0, -2.0] + [0.0] * 8, dtype=torch.float64)
    assert problem.evaluate(x).item() == pytest.approx(5.0, abs=1e-12)
    assert problem.maximizer[0].item() == pytest.approx(4.5229937, abs=1e-6)
    assert problem.max_value == pytest.approx(10 * RASTRIGIN_MAX_PER_COORDINATE, rel=1e-13)
    assert problem.max_value / 10 == pytest.approx(40.35329, abs=1e-5)
    grid = np.linspace(-5.12, 5.12, 4_000_001)
    per_coordinate = grid**2 - 10 * np.cos(2 * np.pi * grid) + 10
    assert per_coordinate.max() <= RASTRIGIN_MAX_PER_COORDINATE + 1e-12
    assert abs(abs(grid[per_coordinate.argmax()]) - problem.maximizer[0].item()) < 1e-5


def test_rastrigin_max_is_not_exceeded() -> None:
    _assert_max_not_exceeded(get_bo_problem("rastrigin", 10), seed=10)


def test_nn_draw_is_minus_pytorch_default_network(nn_draw: BOProblem) -> None:
    with torch.random.fork_rng():
        torch.manual_seed(0)
        network = nn.Sequential(
            nn.Linear(200, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 1)
        ).double()
    X = _uniform(nn_draw, 16, seed=3)
    with torch.no_grad():
        expected = -network(X).squeeze(-1)
    torch.testing.assert_close(nn_draw.evaluate(X), expected, rtol=1e-12, atol=1e-12)


def test_nn_draw_estimates_beat_random_search(nn_draw: BOProblem) -> None:
    assert not nn_draw.optimum_known
    assert nn_draw.evaluate(nn_draw.maximizer).item() == nn_draw.max_value
    minimizer = nn_draw.test_function.optimizers[0]
    assert nn_draw.evaluate(minimizer).item() == nn_draw.min_value
    X = _uniform(nn_draw, 10_000, seed=4)
    values = nn_draw.evaluate(X)
    assert nn_draw.max_value >= values.max().item()
    assert nn_draw.min_value <= values.min().item()
    # L-BFGS-B from the best random points gets no (meaningfully) better than the search.
    tolerance = 1e-7 * (nn_draw.max_value - nn_draw.min_value)
    ascent = _local_optimum(nn_draw, X[values.argmax()].numpy(), -1.0)
    descent = _local_optimum(nn_draw, X[values.argmin()].numpy(), 1.0)
    assert ascent <= nn_draw.max_value + tolerance
    assert descent >= nn_draw.min_value - tolerance


def test_nn_draw_is_deterministic_and_seeded(nn_draw: BOProblem) -> None:
    X = _uniform(nn_draw, 32, seed=5)
    state = torch.get_rng_state()
    again = get_bo_problem("nn-draw", 200, problem_seed=0)
    other = get_bo_problem("nn-draw", 200, problem_seed=1)
    values = again.evaluate(X)
    assert torch.equal(state, torch.get_rng_state())
    assert torch.equal(values, nn_draw.evaluate(X))
    assert (again.min_value, again.max_value) == (nn_draw.min_value, nn_draw.max_value)
    assert torch.equal(again.maximizer, nn_draw.maximizer)
    assert not torch.allclose(other.evaluate(X), values)
    assert other.min_value != nn_draw.min_value and other.max_value != nn_draw.max_value


def test_nn_draw_regret_is_not_clamped(nn_draw: BOProblem) -> None:
    spread = nn_draw.max_value - nn_draw.min_value
    assert nn_draw.normalized_regret(nn_draw.min_value - 0.5 * spread) == pytest.approx(-1.0)
    assert nn_draw.normalized_regret(nn_draw.max_value) == pytest.approx(2.0, rel=1e-12)


def test_nn_draw_builds_under_no_grad() -> None:
    with torch.no_grad():
        problem = get_bo_problem("nn-draw", 3, problem_seed=2)
    assert problem.max_value > problem.min_value


@pytest.mark.parametrize(("name", "dim"), [("nn-draw", 4), ("ackley", 3), ("rastrigin", 3)])
def test_evaluate_dtype_and_batch_shape(name: str, dim: int, dtype: torch.dtype) -> None:
    problem = get_bo_problem(name, dim, dtype=dtype)
    assert problem.bounds.dtype == dtype and problem.maximizer.dtype == dtype
    X = _uniform(problem, 12, seed=6).reshape(4, 3, dim)
    values = problem.evaluate(X)
    assert values.shape == (4, 3) and values.dtype == dtype
    reference = problem.evaluate(X.double())
    torch.testing.assert_close(values, reference.to(dtype), rtol=1e-5, atol=1e-5)
    assert problem.evaluate(X[0, 0]).shape == ()


def test_nn_draw_float32_build_has_float64_extrema() -> None:
    single = get_bo_problem("nn-draw", 6, dtype=torch.float32)
    double = get_bo_problem("nn-draw", 6)
    assert (single.min_value, single.max_value) == (double.min_value, double.max_value)
    X = _uniform(double, 8, seed=7)
    # Evaluated in float64 internally: float32 inputs only lose their own rounding.
    torch.testing.assert_close(
        single.evaluate(X.float()), double.evaluate(X.float().double()).float(), rtol=0, atol=0
    )


@pytest.mark.parametrize("name", SCALE_PROBLEM_NAMES)
def test_bad_inputs(name: str) -> None:
    problem = get_bo_problem(name, 3)
    with pytest.raises(ValueError, match=rf"{name}: expected X of shape batch_shape x 3"):
        problem.evaluate(torch.zeros(2, 4, dtype=torch.float64))
    outside = problem.bounds[1] + 0.1
    with pytest.raises(ValueError, match=f"{name}: X lies outside the bounds"):
        problem.evaluate(outside)
    with pytest.raises(ValueError, match=f"'{name}' requires an integer dim >= 2"):
        get_bo_problem(name, 1)


def test_problem_seed_errors() -> None:
    with pytest.raises(ValueError, match="Only 'nn-draw' takes a problem_seed"):
        get_bo_problem("ackley", 5, problem_seed=0)
    for seed in (-1, 1.5, True):
        with pytest.raises(ValueError, match="problem_seed must be a non-negative int"):
            get_bo_problem("nn-draw", 5, problem_seed=seed)
    with pytest.raises(ValueError, match="requires an integer dim >= 2"):
        RandomTanhNetwork(dim=1)
    with pytest.raises(ValueError, match="hidden_widths must be a non-empty sequence"):
        RandomTanhNetwork(dim=2, hidden_widths=(8, 0))


def test_hidden_widths() -> None:
    function = RandomTanhNetwork(dim=3, problem_seed=4, hidden_widths=(5,))
    assert function.hidden_widths == (5,)
    assert function.weight_0.shape == (5, 3) and function.weight_1.shape == (1, 5)
    X = torch.rand(10, 3, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    assert (function(X) <= function.max_value).all()
    assert (function(X) >= function.optimal_value).all()
