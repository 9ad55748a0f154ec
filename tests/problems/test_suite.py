"""Tests for the NOMU BO suite: problems, known extrema and the regret metric."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import torch
from botorch.test_functions.synthetic import Levy, Rosenbrock
from scipy.optimize import minimize

from botorch_nn_uq.problems import (
    BO_PROBLEM_NAMES,
    NOMU_SUITE_NAMES,
    BOProblem,
    GFunction,
    Perm,
    get_bo_problem,
)

DIMS = (2, 5, 10)


def perm_max_exact(dim: int, beta: Fraction = Fraction(1, 2)) -> Fraction:
    """Exact Perm value at ``(-d, ..., -d)`` in rational arithmetic."""
    return sum(
        sum((j**i + beta) * (Fraction(-dim, j) ** i - 1) for j in range(1, dim + 1)) ** 2
        for i in range(1, dim + 1)
    )


def levy_max_closed_form(dim: int) -> float:
    """Levy at ``x = -10`` (``w = -1.75``): ``sin^2(-1.75 pi) = 1/2``, ``sin^2(-3.5 pi) = 1``."""
    middle = 2.75**2 * (1 + 10 * math.sin(1 - 1.75 * math.pi) ** 2)
    return 0.5 + (dim - 1) * middle + 2 * 2.75**2


EXPECTED = {
    # name: (test function class, lower bound, upper bound, min value, max value) as f(d)
    "levy": lambda d: (Levy, -10.0, 10.0, 0.0, levy_max_closed_form(d)),
    "rosenbrock": lambda d: (Rosenbrock, -5.0, 10.0, 0.0, 810081.0 * (d - 2) + 1102581.0),
    "g-function": lambda d: (GFunction, 0.0, 1.0, -(d + 1) * (d + 2) / 6, (d + 1) * (d + 2) / 2),
    "perm": lambda d: (Perm, -float(d), float(d), 0.0, float(perm_max_exact(d))),
}


# The problems' reference values and extrema are float64 (their default dtype) and are
# checked at tolerances float32 cannot meet; test_evaluate_dtype_and_batch_shape covers
# float32.


def test_names() -> None:
    assert NOMU_SUITE_NAMES == ("levy", "rosenbrock", "g-function", "perm")
    assert BO_PROBLEM_NAMES[: len(NOMU_SUITE_NAMES)] == NOMU_SUITE_NAMES


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("name", NOMU_SUITE_NAMES)
def test_problem_definition(name: str, dim: int) -> None:
    problem = get_bo_problem(name, dim)
    cls, lower, upper, min_value, max_value = EXPECTED[name](dim)
    assert isinstance(problem, BOProblem)
    assert problem.name == name
    assert problem.dim == dim
    assert type(problem.test_function) is cls
    assert not problem.test_function.negate
    expected_bounds = torch.tensor([[lower] * dim, [upper] * dim], dtype=torch.float64)
    torch.testing.assert_close(problem.bounds, expected_bounds)
    assert problem.min_value == pytest.approx(min_value, rel=1e-12, abs=1e-12)
    assert problem.max_value == pytest.approx(max_value, rel=1e-12)
    assert problem.maximizer.shape == (dim,)
    # The minimum is attained at the test function's optimiser.
    at_min = problem.evaluate(problem.test_function.optimizers)
    torch.testing.assert_close(at_min, torch.tensor([min_value], dtype=torch.float64))


def _local_max(problem: BOProblem, x0: np.ndarray) -> float:
    """L-BFGS-B ascent of ``f`` from ``x0`` within the box; returns the best value."""
    scale = problem.max_value - problem.min_value

    def negative_f(x: np.ndarray) -> tuple[float, np.ndarray]:
        X = torch.tensor(x, dtype=torch.float64, requires_grad=True)
        value = -problem.evaluate(X) / scale
        value.backward()
        return value.item(), X.grad.numpy()

    bounds = problem.bounds.T.tolist()
    result = minimize(negative_f, x0, jac=True, method="L-BFGS-B", bounds=bounds)
    return -result.fun * scale


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("name", NOMU_SUITE_NAMES)
def test_max_value_is_not_exceeded_and_is_attained(name: str, dim: int) -> None:
    problem = get_bo_problem(name, dim)
    assert problem.evaluate(problem.maximizer).item() == problem.max_value
    lower, upper = problem.bounds
    gen = torch.Generator().manual_seed(1234 + dim)
    X = lower + (upper - lower) * torch.rand(20_000, dim, generator=gen, dtype=torch.float64)
    values = problem.evaluate(X)
    best_random = values.max().item()
    # Local ascent from the best few random points (the best one included).
    starts = X[values.topk(5).indices].numpy()
    best_local = max(_local_max(problem, x0) for x0 in starts)
    tolerance = 1e-9 * (problem.max_value - problem.min_value)
    assert best_random <= problem.max_value + tolerance
    assert best_random <= best_local <= problem.max_value + tolerance


def test_perm_lemma_for_small_dims() -> None:
    """The even-``i`` lemma ``P_i >= N_i`` of the Perm max proof holds for 3 <= d <= 20."""
    beta = Fraction(1, 2)
    for dim in range(2, 21):
        for i in range(2, dim + 1, 2):
            js = range(1, dim + 1)
            positive = sum((j**i + beta) * (Fraction(dim, j) ** i - 1) for j in js)
            negative = sum(j**i + beta for j in js)
            # d = 2 is the documented exception handled by a separate argument.
            assert (positive >= negative) == (dim >= 3)


def test_levy_univariate_terms_peak_at_lower_bound() -> None:
    """Dense 1-D check of the separable Levy terms used in the max proof."""
    x = torch.linspace(-10.0, 10.0, 200_001, dtype=torch.float64)
    one = torch.ones_like(x)
    levy_2, levy_3 = Levy(dim=2), Levy(dim=3)
    # The other coordinates at 1 contribute (numerically) nothing.
    for values in (
        levy_2(torch.stack([x, one], dim=-1)),
        levy_3(torch.stack([one, x, one], dim=-1)),
        levy_2(torch.stack([one, x], dim=-1)),
    ):
        assert values.argmax() == 0


@pytest.mark.parametrize("name", NOMU_SUITE_NAMES)
def test_normalized_regret(name: str) -> None:
    problem = get_bo_problem(name, 5)
    assert problem.normalized_regret(problem.min_value) == 0.0
    assert problem.normalized_regret(problem.max_value) == pytest.approx(2.0, rel=1e-12)
    assert isinstance(problem.normalized_regret(problem.max_value), float)
    middle = (problem.min_value + problem.max_value) / 2
    best = torch.tensor([[problem.min_value, middle], [problem.max_value, middle]])
    regret = problem.normalized_regret(best.double())
    assert isinstance(regret, torch.Tensor)
    torch.testing.assert_close(regret, torch.tensor([[0.0, 1.0], [2.0, 1.0]], dtype=torch.float64))
    at_minimizer = problem.evaluate(problem.test_function.optimizers[0])
    assert problem.normalized_regret(at_minimizer).item() == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("name", NOMU_SUITE_NAMES)
def test_evaluate_dtype_and_batch_shape(name: str, dtype: torch.dtype) -> None:
    problem = get_bo_problem(name, 5, dtype=dtype)
    assert problem.bounds.dtype == dtype
    assert problem.maximizer.dtype == dtype
    lower, upper = problem.bounds
    X = lower + (upper - lower) * torch.rand(4, 3, 5, dtype=dtype)
    values = problem.evaluate(X)
    assert values.shape == (4, 3)
    assert values.dtype == dtype
    expected = problem.test_function(X.double(), noise=False).to(dtype)
    torch.testing.assert_close(values, expected, rtol=1e-4, atol=1e-4)
    assert problem.evaluate(X[0, 0]).shape == ()
    assert problem.evaluate(problem.maximizer).item() == pytest.approx(problem.max_value, rel=1e-5)


def test_float32_and_float64_extrema_agree() -> None:
    for name in NOMU_SUITE_NAMES:
        single, double = get_bo_problem(name, 5, dtype=torch.float32), get_bo_problem(name, 5)
        assert (single.min_value, single.max_value) == (double.min_value, double.max_value)


def test_evaluate_rejects_bad_inputs() -> None:
    problem = get_bo_problem("rosenbrock", 3)
    with pytest.raises(ValueError, match=r"rosenbrock: expected X of shape batch_shape x 3"):
        problem.evaluate(torch.zeros(2, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match="rosenbrock: X lies outside the bounds"):
        problem.evaluate(torch.tensor([0.0, 10.5, 0.0], dtype=torch.float64))


def test_get_bo_problem_errors() -> None:
    with pytest.raises(ValueError, match=r"Unknown BO problem 'nope'.*'levy'.*'rastrigin'"):
        get_bo_problem("nope", 5)
    for name in NOMU_SUITE_NAMES:
        with pytest.raises(ValueError, match=f"'{name}' requires an integer dim >= 2"):
            get_bo_problem(name, 1)
    with pytest.raises(ValueError, match="requires an integer dim >= 2, got 2.5"):
        get_bo_problem("levy", 2.5)
    assert get_bo_problem("levy", np.int64(3)).dim == 3


def test_bo_problem_validation() -> None:
    maximizer = torch.zeros(2, dtype=torch.float64)
    with pytest.raises(ValueError, match="negate=False"):
        BOProblem("x", Perm(dim=2, negate=True), 0.0, 1.0, maximizer)
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        BOProblem("x", Perm(dim=2), 0.0, 1.0, torch.zeros(3))
    with pytest.raises(ValueError, match="max_value > min_value"):
        BOProblem("x", Perm(dim=2), 1.0, 1.0, maximizer)


def test_repr() -> None:
    text = repr(get_bo_problem("g-function", 5))
    assert text == "BOProblem(name='g-function', dim=5, min_value=-7, max_value=21)"
