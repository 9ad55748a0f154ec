"""Tests for the NEON composite problems: pollutants (environmental model) and Brusselator.

Reference values are computed independently here: scalar loops with ``math`` / numpy, an
explicit-Euler finite-difference solver, ``scipy`` ODE solutions and closed-form diffusion
of single Fourier / cosine modes.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from botorch.acquisition.objective import GenericMCObjective
from scipy.integrate import solve_ivp

from botorch_nn_uq.problems import Brusselator, CompositeProblem, Pollutants

# The composite problems are defined in float64 (bounds, grids, reference fields) and are
# checked against float64 reference solvers; only the layout test runs in both dtypes.
DTYPE = torch.float64


@pytest.fixture(autouse=True)
def single_thread():
    # The PDE steps are many small kernels: extra threads only add synchronisation.
    num_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(num_threads)


def pollutant_reference(M: float, D: float, L: float, tau: float, s: float, t: float) -> float:
    """The NEON paper's piecewise form of the environmental model at one ``(s, t)``."""
    value = M / (2.0 * math.sqrt(math.pi * D * t)) * math.exp(-(s**2) / (4.0 * D * t))
    if t > tau:
        value += (
            M
            / (2.0 * math.sqrt(math.pi * D * (t - tau)))
            * math.exp(-((s - L) ** 2) / (4.0 * D * (t - tau)))
        )
    return value


def random_points(problem: CompositeProblem, n: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    lower, upper = problem.bounds
    return lower + (upper - lower) * torch.rand(n, problem.dim, generator=generator, dtype=DTYPE)


# ----------------------------------------------------------------------------- pollutants


def test_pollutants_metadata() -> None:
    problem = Pollutants()
    expected_bounds = [[7.0, 0.02, 0.01, 30.01], [13.0, 0.12, 3.0, 30.295]]
    assert problem.bounds.dtype == DTYPE
    assert problem.bounds.tolist() == expected_bounds
    assert problem.dim == 4
    assert (problem.num_grid_points, problem.num_channels, problem.num_outputs) == (12, 1, 12)
    assert problem.best_value == 0.0
    # s-major grid of (s, t) coordinates.
    expected_grid = [[s, t] for s in (0.0, 1.0, 2.5) for t in (15.0, 30.0, 45.0, 60.0)]
    assert problem.grid.tolist() == expected_grid
    assert problem.u_true.tolist() == [10.0, 0.07, 1.505, 30.1525]


@pytest.mark.parametrize(
    "u",
    [
        (9.3, 0.05, 2.1, 30.2),
        (7.0, 0.02, 0.01, 30.01),
        (13.0, 0.12, 3.0, 30.295),
        (10.0, 0.07, 1.505, 30.1525),
    ],
)
def test_pollutants_h_matches_scalar_reference(u: tuple[float, ...]) -> None:
    problem = Pollutants()
    H = problem.h(torch.tensor([u], dtype=DTYPE))
    assert H.shape == (1, 12, 1)
    for j, (s, t) in enumerate(itertools.product((0.0, 1.0, 2.5), (15.0, 30.0, 45.0, 60.0))):
        expected = pollutant_reference(*u, s, t)
        assert H[0, j, 0].item() == pytest.approx(expected, rel=1e-12, abs=1e-300)
    # t = 15, 30 precede every tau in the box: only the first spill is seen there.
    M, D, _, _ = u
    s = 2.5
    first_only = M / math.sqrt(4 * math.pi * D * 30.0) * math.exp(-(s**2) / (4 * D * 30.0))
    assert H[0, 9, 0].item() == pytest.approx(first_only, rel=1e-12)


def test_pollutants_objective_zero_at_truth_positive_elsewhere() -> None:
    problem = Pollutants()
    assert problem.evaluate(problem.u_true.unsqueeze(0)).item() == 0.0
    values = problem.evaluate(random_points(problem, 64))
    assert values.shape == (64,)
    assert (values > 0).all()
    # Independent value: mean over the grid of the squared differences.
    u = random_points(problem, 1, seed=3)[0].tolist()
    grid = list(itertools.product((0.0, 1.0, 2.5), (15.0, 30.0, 45.0, 60.0)))
    truth = [10.0, 0.07, 1.505, 30.1525]
    expected = np.mean(
        [(pollutant_reference(*u, s, t) - pollutant_reference(*truth, s, t)) ** 2 for s, t in grid]
    )
    assert problem.evaluate(torch.tensor([u], dtype=DTYPE)).item() == pytest.approx(
        expected, rel=1e-10
    )


def test_pollutants_batch_shapes_and_validation() -> None:
    problem = Pollutants()
    U = random_points(problem, 24).reshape(2, 3, 4, 4)
    H = problem.h(U)
    assert H.shape == (2, 3, 4, 12, 1)
    assert problem.evaluate(U).shape == (2, 3, 4)
    torch.testing.assert_close(H[1, 2], problem.h(U[1, 2]))
    assert problem.h(U.float()).dtype == torch.float32
    with pytest.raises(ValueError, match="outside the bounds"):
        problem.h(torch.tensor([[10.0, 0.07, 1.5, 29.0]], dtype=DTYPE))
    with pytest.raises(ValueError, match="expected U"):
        problem.h(torch.ones(2, 3, dtype=DTYPE))
    with pytest.raises(ValueError, match="trailing shape"):
        problem.g(torch.ones(2, 12, dtype=DTYPE))


def test_pollutants_gradients_are_finite() -> None:
    problem = Pollutants()
    # d g / d H = 2 (H - h_true) / 12.
    H = problem.h(random_points(problem, 5)).requires_grad_(True)
    problem.g(H).sum().backward()
    torch.testing.assert_close(H.grad, 2.0 * (H - problem.h_true).detach() / 12.0)
    # Through h: the indicator branch (t <= tau) must not leak NaN gradients.
    U = random_points(problem, 5, seed=1).requires_grad_(True)
    problem.evaluate(U).sum().backward()
    assert torch.isfinite(U.grad).all()
    assert (U.grad.abs().sum(dim=0) > 0).all()


def test_pollutants_mc_objective() -> None:
    problem = Pollutants()
    objective = problem.objective()
    assert isinstance(objective, GenericMCObjective)
    samples = torch.randn(7, 3, 2, 12, dtype=DTYPE)  # sample x batch x q x m
    values = objective(samples)
    assert values.shape == (7, 3, 2)
    expected = -((samples - problem.h_true.squeeze(-1)) ** 2).mean(dim=-1)
    torch.testing.assert_close(values, expected)
    # At the truth the objective is maximal (zero).
    assert objective(problem.flatten(problem.h_true).expand(1, 1, 12)).item() == 0.0


# --------------------------------------------------------------------- flatten / unflatten


def test_flatten_layout_and_round_trip(dtype: torch.dtype) -> None:
    problem = Brusselator(grid_size=6, t_final=0.1, dt=0.01)
    m, d_s = problem.num_grid_points, problem.num_channels
    H = torch.randn(3, 2, m, d_s, dtype=dtype)
    Y = problem.flatten(H)
    assert Y.shape == (3, 2, m * d_s)
    for j, c in itertools.product(range(m), range(d_s)):
        assert Y[1, 0, j * d_s + c] == H[1, 0, j, c]
    torch.testing.assert_close(problem.unflatten(Y), H, rtol=0, atol=0)
    with pytest.raises(ValueError, match="trailing shape"):
        problem.unflatten(torch.ones(3, m * d_s + 1))
    with pytest.raises(ValueError, match="trailing shape"):
        problem.flatten(torch.ones(3, m, 3))


# ---------------------------------------------------------------------------- Brusselator


def brusselator_weights(n: int) -> np.ndarray:
    """0.1 everywhere, 1.0 within two cells of the boundary."""
    W = np.empty((n, n))
    for i, k in itertools.product(range(n), range(n)):
        W[i, k] = 1.0 if min(i, k, n - 1 - i, n - 1 - k) < 2 else 0.1
    return W


def explicit_euler_brusselator(
    params: tuple[float, ...], u0: np.ndarray, v0: np.ndarray, t_final: float, dt: float
) -> tuple[np.ndarray, np.ndarray]:
    """py-pde's scheme: explicit Euler, 5-point Laplacian, zero-flux (replicated) ghosts."""
    a, b, d0, d1 = params

    def laplace(f: np.ndarray) -> np.ndarray:
        p = np.pad(f, 1, mode="edge")
        return p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:] - 4.0 * f

    u, v = u0.copy(), v0.copy()
    for _ in range(round(t_final / dt)):
        uuv = u * u * v
        u, v = (
            u + dt * (d0 * laplace(u) + a - (1.0 + b) * u + uuv),
            v + dt * (d1 * laplace(v) + b * u - uuv),
        )
    return u, v


def test_brusselator_metadata_and_weights() -> None:
    problem = Brusselator()
    assert problem.bounds.tolist() == [[0.1, 0.1, 0.01, 0.01], [5.0, 5.0, 5.0, 5.0]]
    assert (problem.num_grid_points, problem.num_channels) == (4096, 2)
    assert problem.num_outputs == 8192
    assert problem.best_value is None
    assert (problem.num_steps, problem.dt, problem.t_final) == (4000, 0.005, 20.0)
    assert problem.grid.shape == (4096, 2)
    # Row-major grid in [0, 1]^2.
    assert problem.grid[64 * 3 + 5].tolist() == pytest.approx([3 / 63, 5 / 63])
    W = problem.weight_matrix()
    np.testing.assert_array_equal(W.numpy(), brusselator_weights(64))
    assert int((W == 1.0).sum()) == 64**2 - 60**2


def test_brusselator_g_is_weighted_population_variance() -> None:
    n = 7
    problem = Brusselator(grid_size=n, t_final=0.1, dt=0.01)
    H = torch.rand(4, 3, n * n, 2, dtype=DTYPE)  # e.g. sample x batch x m x d_s
    values = problem.g(H)
    assert values.shape == (4, 3)
    W = brusselator_weights(n)
    for idx in itertools.product(range(4), range(3)):
        fields = H[idx].numpy()
        entries = []
        for c in range(2):
            field = np.array([[fields[i * n + k, c] for k in range(n)] for i in range(n)])
            entries.extend((W * field).ravel())
        assert values[idx].item() == pytest.approx(np.var(entries), rel=1e-12)
    # Differentiable, and the objective maps flat samples to -g.
    H.requires_grad_(True)
    problem.g(H).sum().backward()
    assert torch.isfinite(H.grad).all()
    samples = problem.flatten(H.detach()).unsqueeze(-2)  # sample x batch x q=1 x m*d_s
    torch.testing.assert_close(problem.objective()(samples), -values.unsqueeze(-1))


def test_brusselator_matches_explicit_euler_reference() -> None:
    # Signs of the reaction terms, D0 acting on u and D1 on v, and zero-flux boundaries.
    n, t_final = 8, 0.5
    problem = Brusselator(grid_size=n, t_final=t_final, dt=0.0025, noise_std=0.5, seed=3)
    params = (1.0, 3.0, 1.0, 0.1)
    U = torch.tensor([params], dtype=DTYPE)
    u0, v0 = problem.initial_state(U)
    u, v = problem.solve(U, u0, v0)
    u_ref, v_ref = explicit_euler_brusselator(
        params, u0[0].numpy(), v0[0].numpy(), t_final, dt=1e-4
    )
    assert np.abs(v_ref - v0[0].numpy()).max() > 0.1  # a non-trivial evolution
    # Both schemes converge to the same solution (ours at second order, to ~1e-4 here).
    np.testing.assert_allclose(u[0].numpy(), u_ref, rtol=0, atol=3e-4)
    np.testing.assert_allclose(v[0].numpy(), v_ref, rtol=0, atol=3e-4)


def test_brusselator_reaction_is_second_order() -> None:
    # Spatially uniform fields feel no diffusion: compare with the ODE.
    a, b, t_final = 1.0, 1.5, 2.0
    exact = solve_ivp(
        lambda t, y: [a - (1 + b) * y[0] + y[0] ** 2 * y[1], b * y[0] - y[0] ** 2 * y[1]],
        (0.0, t_final),
        [0.5, 2.0],
        rtol=1e-12,
        atol=1e-12,
    ).y[:, -1]
    errors = []
    for dt in (0.01, 0.005):
        problem = Brusselator(grid_size=5, t_final=t_final, dt=dt)
        U = torch.tensor([[a, b, 0.3, 2.0]], dtype=DTYPE)
        u, v = problem.solve(
            U, torch.full((1, 5, 5), 0.5, dtype=DTYPE), torch.full((1, 5, 5), 2.0, dtype=DTYPE)
        )
        assert float(u.std()) < 1e-12 and float(v.std()) < 1e-12
        errors.append(max(abs(u[0, 0, 0].item() - exact[0]), abs(v[0, 0, 0].item() - exact[1])))
    assert errors[1] < 2e-4
    assert errors[0] / errors[1] == pytest.approx(4.0, rel=0.15)


@pytest.mark.parametrize(
    "params",
    [(2.0, 1.5, 1.0, 0.5), (0.5, 0.2, 5.0, 0.01), (1.0, 3.0, 1.0, 0.1)],
)
def test_brusselator_preserves_homogeneous_steady_state(params: tuple[float, ...]) -> None:
    # a - (1 + b) a + a^2 (b / a) = 0 and b a - a^2 (b / a) = 0. The last point is
    # Hopf-unstable (b > 1 + a^2), so only a short horizon keeps rounding errors small.
    a, b = params[:2]
    t_final = 5.0 if b < 1 + a**2 else 1.0
    problem = Brusselator(grid_size=8, t_final=t_final, dt=0.01, noise_std=0.0)
    U = torch.tensor([params], dtype=DTYPE)
    u, v = problem.solve(U, *problem.initial_state(U))
    torch.testing.assert_close(u, torch.full_like(u, a), rtol=1e-10, atol=0)
    torch.testing.assert_close(v, torch.full_like(v, b / a), rtol=1e-10, atol=0)


def test_diffusion_propagator_periodic_fourier_mode() -> None:
    n, spacing, D, num_steps = 32, 1.0, 2.0, 100
    problem = Brusselator(grid_size=n, t_final=num_steps * 0.05, dt=0.05, boundary="periodic")
    P = problem.diffusion_propagator(torch.tensor(D, dtype=DTYPE))
    x = torch.arange(n, dtype=DTYPE) * spacing
    kx, ky = 2 * math.pi / (n * spacing), 2 * 2 * math.pi / (n * spacing)
    F0 = torch.cos(kx * x).unsqueeze(-1) * torch.sin(ky * x).unsqueeze(0)
    F = F0
    for _ in range(num_steps):
        F = P @ F @ P
    t = num_steps * problem.dt
    # Exact for the 5-point Laplacian, eigenvalue -4 sin^2(k h / 2) / h^2 per direction...
    rate = sum(4 * math.sin(k * spacing / 2) ** 2 / spacing**2 for k in (kx, ky))
    torch.testing.assert_close(F, F0 * math.exp(-D * rate * t), rtol=0, atol=1e-12)
    # ...and close to the continuum decay exp(-D |k|^2 t): the rate is off by about
    # (kx^4 + ky^4) h^2 / 12 (the stencil's O(h^2) error), none of it from time stepping.
    decay = math.exp(-D * (kx**2 + ky**2) * t)
    relative_error = (F - F0 * decay).abs().max() / decay
    assert relative_error < 1.1 * D * t * (kx**4 + ky**4) * spacing**2 / 12
    assert F.abs().max() < 0.5  # it did decay


def test_diffusion_propagator_neumann_cosine_mode_and_mass() -> None:
    n, spacing, D, dt = 16, 0.5, 0.7, 0.02
    problem = Brusselator(grid_size=n, t_final=1.0, dt=dt, spacing=spacing)
    P = problem.diffusion_propagator(torch.tensor([D, 3 * D], dtype=DTYPE))
    assert P.shape == (2, n, n)
    i = torch.arange(n, dtype=DTYPE)
    mode = torch.cos(math.pi * 3 * (i + 0.5) / n)  # cell-centred Neumann eigenvector
    F0 = mode.unsqueeze(-1) * mode.unsqueeze(0)
    F = P[0] @ F0 @ P[0]
    rate = 2 * 4 * math.sin(math.pi * 3 / (2 * n)) ** 2 / spacing**2
    torch.testing.assert_close(F, F0 * math.exp(-D * rate * dt), rtol=0, atol=1e-13)
    # Zero flux: mass is conserved; constants are preserved.
    G0 = torch.rand(n, n, dtype=DTYPE)
    G = P[1] @ G0 @ P[1]
    assert G.sum().item() == pytest.approx(G0.sum().item(), rel=1e-13)
    torch.testing.assert_close(
        P[1] @ torch.ones(n, n, dtype=DTYPE) @ P[1], torch.ones(n, n, dtype=DTYPE)
    )


def test_brusselator_corners_stay_finite_reduced() -> None:
    # The stiff spikes (a = 0.1, b = 5) start around t = 2: run past them on a small grid.
    problem = Brusselator(grid_size=16, t_final=5.0)
    lower, upper = problem.bounds
    corners = torch.stack(
        [
            torch.where(torch.tensor(c, dtype=torch.bool), upper, lower)
            for c in itertools.product([0, 1], repeat=4)
        ]
    ).to(DTYPE)
    U = torch.cat([corners, random_points(problem, 4)])
    H = problem.h(U)
    assert H.shape == (20, 256, 2)
    assert torch.isfinite(H).all()
    assert (H > 0).all() and (H < 100).all()
    values = problem.evaluate(U[:3])
    assert values.shape == (3,) and torch.isfinite(values).all()


def test_brusselator_deterministic_and_batch_consistent() -> None:
    U = random_points(Brusselator(), 3, seed=5)
    H1 = Brusselator(grid_size=10, t_final=2.0).h(U)
    H2 = Brusselator(grid_size=10, t_final=2.0).h(U)
    torch.testing.assert_close(H1, H2, rtol=0, atol=0)
    torch.testing.assert_close(
        Brusselator(grid_size=10, t_final=2.0).h(U[1:2]), H1[1:2], rtol=1e-12, atol=1e-12
    )
    H3 = Brusselator(grid_size=10, t_final=2.0, seed=11).h(U)
    assert not torch.allclose(H1, H3)
    # Initial state: u = a, v = b / a + 0.1 z.
    problem = Brusselator(grid_size=10)
    u0, v0 = problem.initial_state(U)
    torch.testing.assert_close(u0, U[:, 0, None, None].expand(-1, 10, 10))
    torch.testing.assert_close(v0, (U[:, 1] / U[:, 0])[:, None, None] + 0.1 * problem.initial_noise)


def test_brusselator_default_protocol_hardest_corners() -> None:
    # The real default (64 x 64, t = 20, dt = 0.005) where py-pde's explicit Euler fails.
    problem = Brusselator()
    U = torch.tensor([[0.1, 5.0, 0.01, 5.0], [0.1, 5.0, 5.0, 0.01]], dtype=DTYPE)
    H = problem.h(U)
    assert H.shape == (2, 4096, 2)
    assert torch.isfinite(H).all() and (H > 0).all()
    values = problem.g(H)
    W = brusselator_weights(64)
    for i in range(2):
        fields = H[i].numpy().reshape(64, 64, 2)
        expected = np.var(np.concatenate([(W * fields[..., c]).ravel() for c in range(2)]))
        assert values[i].item() == pytest.approx(expected, rel=1e-12)
    assert (values > 0.1).all() and (values < 10).all()
