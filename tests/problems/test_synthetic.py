"""Tests for the G-function and Perm test functions."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from botorch.test_functions.synthetic import SyntheticTestFunction

from botorch_nn_uq.problems.synthetic import GFunction, Perm
from tests.testing import tolerances


def g_function_reference(x: np.ndarray) -> float:
    """Loop implementation of the G-function at one point ``x`` of shape ``(d,)``."""
    value = 1.0
    for i, xi in enumerate(x, start=1):
        a = (i - 2) / 2
        value *= (abs(4 * xi - 2) + a) / (1 + a)
    return value


def perm_reference(x: np.ndarray, beta: float = 0.5) -> float:
    """Loop implementation of the Perm function ``d, beta`` at one point ``x``."""
    d = len(x)
    total = 0.0
    for i in range(1, d + 1):
        inner = 0.0
        for j in range(1, d + 1):
            inner += (j**i + beta) * ((x[j - 1] / j) ** i - 1)
        total += inner**2
    return total


# The hand-computed values and the loop references below are checked in float64 at
# tolerances (1e-10 and tighter) that float32 cannot meet; the problems' default dtype is
# float64, and test_dtype_and_batch_shape covers float32.


def test_g_function_hand_computed_values() -> None:
    g = GFunction(dim=3)
    # Factors: (1 - 1/2)/(1/2) = 1, 1/1 = 1, (1.6 + 1/2)/(3/2) = 1.4.
    x = torch.tensor([0.25, 0.75, 0.1], dtype=torch.float64)
    assert g(x).item() == pytest.approx(1.4, rel=1e-12)
    # Every factor at |4x - 2| = 2: 3 * 2 * (2.5 / 1.5) = 10.
    assert g(torch.ones(3, dtype=torch.float64)).item() == pytest.approx(10.0, rel=1e-12)
    # The first factor is -1 at x_1 = 1/2; the second is 0 at x_2 = 1/2.
    assert g(torch.tensor([0.5, 1.0, 0.0])).item() == pytest.approx(-10.0 / 3, rel=1e-6)
    assert g(torch.tensor([0.0, 0.5, 0.0])).item() == 0.0


def test_perm_hand_computed_values() -> None:
    perm = Perm(dim=2)
    # S_1 = 1.5 * (-1) + 2.5 * (-1) = -4, S_2 = 1.5 * (-1) + 4.5 * (-1) = -6.
    assert perm(torch.zeros(2, dtype=torch.float64)).item() == pytest.approx(52.0, rel=1e-12)
    # S_1 = 1.5 * (-3) + 2.5 * (-2) = -9.5, S_2 = 1.5 * 3 + 4.5 * 0 = 4.5.
    x = torch.tensor([-2.0, -2.0], dtype=torch.float64)
    assert perm(x).item() == pytest.approx(110.5, rel=1e-12)


@pytest.mark.parametrize("dim", [1, 2, 3, 5, 10])
def test_values_match_loop_reference(dim: int) -> None:
    gen = torch.Generator().manual_seed(dim)
    for fn, reference in (
        (GFunction(dim=dim), g_function_reference),
        (Perm(dim=dim), perm_reference),
    ):
        lower, upper = fn.bounds
        X = lower + (upper - lower) * torch.rand(7, dim, generator=gen, dtype=torch.float64)
        expected = [reference(x) for x in X.numpy()]
        np.testing.assert_allclose(fn(X).numpy(), expected, rtol=1e-10, atol=1e-10)


def test_perm_beta_is_used() -> None:
    x = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64)
    value = Perm(dim=3, beta=2.0)(x).item()
    assert value == pytest.approx(perm_reference(x.numpy(), beta=2.0), rel=1e-12)
    assert value != pytest.approx(Perm(dim=3)(x).item())


@pytest.mark.parametrize("dim", [2, 5, 10])
def test_optimal_value_at_optimizers(dim: int, dtype: torch.dtype) -> None:
    for fn in (GFunction(dim=dim, dtype=dtype), Perm(dim=dim, dtype=dtype)):
        assert isinstance(fn, SyntheticTestFunction)
        assert fn.optimizers.shape == (1, dim)
        values = fn.evaluate_true(fn.optimizers)
        expected = torch.full((1,), fn.optimal_value, dtype=dtype)
        torch.testing.assert_close(values, expected, **tolerances(dtype))


def test_g_function_optimal_value_is_product_formula() -> None:
    for dim in range(1, 21):
        a = [(i - 2) / 2 for i in range(1, dim + 1)]
        expected = -np.prod([(2 + ai) / (1 + ai) for ai in a[1:]])
        assert GFunction(dim=dim).optimal_value == pytest.approx(expected, rel=1e-12)


def test_g_function_all_minimizers_attain_optimal_value(dtype: torch.dtype) -> None:
    dim = 4
    g = GFunction(dim=dim, dtype=dtype)
    vertices = torch.tensor(list(itertools.product([0.0, 1.0], repeat=dim - 1)), dtype=dtype)
    X = torch.cat([torch.full((len(vertices), 1), 0.5, dtype=dtype), vertices], dim=-1)
    torch.testing.assert_close(g(X), torch.full((len(X),), g.optimal_value, dtype=dtype))


def test_perm_gradient_vanishes_at_optimum(dtype: torch.dtype) -> None:
    perm = Perm(dim=5, dtype=dtype)
    x = perm.optimizers[0].clone().requires_grad_(True)
    perm(x).backward()
    torch.testing.assert_close(x.grad, torch.zeros(5, dtype=dtype))


@pytest.mark.parametrize("dim", [2, 5])
def test_bounds(dim: int) -> None:
    torch.testing.assert_close(
        GFunction(dim=dim).bounds, torch.stack([torch.zeros(dim), torch.ones(dim)]).double()
    )
    torch.testing.assert_close(
        Perm(dim=dim).bounds, torch.tensor([[-dim] * dim, [dim] * dim], dtype=torch.float64)
    )


@pytest.mark.parametrize("cls", [GFunction, Perm])
def test_dtype_and_batch_shape(cls: type[SyntheticTestFunction], dtype: torch.dtype) -> None:
    fn = cls(dim=5, dtype=dtype)
    assert fn.bounds.dtype == dtype
    lower, upper = fn.bounds
    X = lower + (upper - lower) * torch.rand(2, 3, 5, dtype=dtype)
    values = fn(X)
    assert values.shape == (2, 3)
    assert values.dtype == dtype
    torch.testing.assert_close(values, cls(dim=5)(X.double()).to(dtype), rtol=1e-4, atol=1e-4)
    assert fn(X[0, 0]).shape == ()


def test_negate_and_noise() -> None:
    x = torch.tensor([0.2, 0.9, 0.4], dtype=torch.float64)
    value = GFunction(dim=3)(x)
    assert GFunction(dim=3, negate=True)(x) == -value
    assert GFunction(dim=3, negate=True).optimal_value == -GFunction(dim=3).optimal_value
    torch.manual_seed(0)
    noisy = Perm(dim=3, noise_std=0.1)
    x = torch.zeros(100, 3, dtype=torch.float64)
    assert noisy(x).std() > 0
    assert (noisy(x, noise=False) == Perm(dim=3)(x)).all()


def test_invalid_arguments() -> None:
    with pytest.raises(ValueError, match="GFunction requires dim >= 1"):
        GFunction(dim=0)
    with pytest.raises(ValueError, match="Perm requires dim >= 1"):
        Perm(dim=0)
    with pytest.raises(ValueError, match="beta >= 0"):
        Perm(dim=2, beta=-0.1)
    with pytest.raises(ValueError, match="within the bounds"):
        GFunction(dim=2)(torch.tensor([1.5, 0.0]))
    with pytest.raises(ValueError, match="within the bounds"):
        Perm(dim=2)(torch.tensor([-2.5, 0.0]))
