r"""Composite problems ``f = g o h`` of the NEON paper: function-valued ``h``, known ``g``.

Each problem has inputs ``u`` in a box, an expensive map ``h(u)`` with values on a fixed
grid of ``m`` points with ``d_s`` channels, and a cheap, known, differentiable functional
``g`` of that output. The objective ``f(u) = g(h(u))`` is MINIMISED.

A surrogate models ``h`` with ``num_outputs = m * d_s`` flat outputs. The flat layout is
grid-point major: the output for grid point ``j`` and channel ``c`` sits at index
``j * d_s + c`` (``flatten`` / ``unflatten`` convert). ``objective()`` turns model samples
into ``-g`` for BoTorch's (maximising) Monte Carlo acquisition functions.

Problems (NEON paper, appendix 6.1 and 6.2, with its typos corrected):

* :class:`Pollutants` (environmental model): ``u = (M, D, L, tau)``, ``m = 12``, ``d_s = 1``,
  ``g`` = mean squared error to the output at the true parameters (optimum ``0``).
* :class:`Brusselator`: ``u = (a, b, D0, D1)``, a reaction-diffusion PDE solved to ``t = 20``
  on a ``64 x 64`` grid, ``m = 4096``, ``d_s = 2``, ``g`` = variance of the boundary-weighted
  fields (optimum unknown).

Example:
    >>> problem = Pollutants()
    >>> lower, upper = problem.bounds
    >>> U = lower + (upper - lower) * torch.rand(5, 4, dtype=torch.float64)
    >>> Y = problem.flatten(problem.h(U))  # 5 x 12 training targets for a surrogate
    >>> problem.evaluate(U)  # shape (5,), g(h(U))
    >>> objective = problem.objective()  # samples ... x 12 -> -g, for qEI and friends
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Literal

import torch
from botorch.acquisition.objective import GenericMCObjective
from torch import Tensor

from botorch_nn_uq.checks import check_points_in_box


class CompositeProblem(ABC):
    r"""A minimisation problem ``f(u) = g(h(u))`` with function-valued ``h`` on a grid.

    Subclasses implement ``_h`` (on a ``n x dim`` batch) and ``g``.

    Args:
        name: Name of the problem.
        bounds: A ``2 x dim`` tensor of lower (row 0) and upper (row 1) bounds of ``u``.
        grid: A ``m x d_y`` tensor of the coordinates of the output grid points.
        num_channels: The number ``d_s`` of output channels per grid point.
        best_value: The known minimum of ``g(h(u))`` over the box, or ``None``.
    """

    def __init__(
        self,
        name: str,
        bounds: Tensor,
        grid: Tensor,
        num_channels: int,
        best_value: float | None = None,
    ) -> None:
        if bounds.dim() != 2 or bounds.shape[0] != 2:
            raise ValueError(f"bounds must have shape 2 x dim, got {tuple(bounds.shape)}.")
        if not (bounds[0] < bounds[1]).all():
            raise ValueError("Every lower bound must be below its upper bound.")
        if grid.dim() != 2:
            raise ValueError(f"grid must have shape m x d_y, got {tuple(grid.shape)}.")
        if num_channels < 1:
            raise ValueError(f"num_channels must be positive, got {num_channels}.")
        self.name = name
        self.bounds: Tensor = bounds.to(torch.float64)
        self.grid: Tensor = grid.to(torch.float64)
        self.num_channels = int(num_channels)
        self.best_value = best_value

    @property
    def dim(self) -> int:
        r"""The input dimension."""
        return self.bounds.shape[-1]

    @property
    def num_grid_points(self) -> int:
        r"""The number ``m`` of output grid points."""
        return self.grid.shape[0]

    @property
    def num_outputs(self) -> int:
        r"""The number ``m * d_s`` of flat outputs a surrogate of ``h`` predicts."""
        return self.num_grid_points * self.num_channels

    def h(self, U: Tensor) -> Tensor:
        r"""Evaluate the expensive function-valued map ``h``.

        Args:
            U: A ``batch_shape x dim`` tensor of points inside ``bounds``.

        Returns:
            A ``batch_shape x m x d_s`` tensor in the dtype and on the device of ``U``.

        Raises:
            ValueError: If the last dimension of ``U`` is not ``dim`` or a point lies
                outside the box.
        """
        check_points_in_box(self.name, "U", U, self.bounds)
        batch_shape = U.shape[:-1]
        H = self._h(U.reshape(-1, self.dim))
        return H.reshape(*batch_shape, self.num_grid_points, self.num_channels)

    @abstractmethod
    def _h(self, U: Tensor) -> Tensor:
        r"""Evaluate ``h`` on a ``n x dim`` tensor of valid points; returns ``n x m x d_s``."""

    @abstractmethod
    def g(self, H: Tensor) -> Tensor:
        r"""Apply the known functional ``g`` (differentiable, to be minimised).

        Args:
            H: A ``... x m x d_s`` tensor of outputs of ``h`` (or model samples of them),
                with any leading batch shape, e.g. ``sample x batch x q x m x d_s``.

        Returns:
            A ``...`` tensor of ``g`` values.
        """

    def evaluate(self, U: Tensor) -> Tensor:
        r"""Evaluate the objective ``f(U) = g(h(U))`` (to be minimised).

        Args:
            U: A ``batch_shape x dim`` tensor of points inside ``bounds``.

        Returns:
            A ``batch_shape`` tensor of objective values.
        """
        return self.g(self.h(U))

    def flatten(self, H: Tensor) -> Tensor:
        r"""Flatten outputs ``... x m x d_s`` to the ``... x (m * d_s)`` model layout.

        The layout is grid-point major: ``flat[..., j * d_s + c] == H[..., j, c]``.
        """
        self._check_trailing(H.shape[-2:], (self.num_grid_points, self.num_channels), "H")
        return H.reshape(*H.shape[:-2], self.num_outputs)

    def unflatten(self, Y: Tensor) -> Tensor:
        r"""Inverse of ``flatten``: ``... x (m * d_s)`` to ``... x m x d_s``."""
        self._check_trailing(Y.shape[-1:], (self.num_outputs,), "Y")
        return Y.reshape(*Y.shape[:-1], self.num_grid_points, self.num_channels)

    def objective(self) -> GenericMCObjective:
        r"""The BoTorch objective mapping flat model samples to ``-g`` (BoTorch maximises).

        Returns:
            A ``GenericMCObjective`` that maps ``sample_shape x batch_shape x q x (m * d_s)``
            samples (in the original units of ``h``) to ``sample_shape x batch_shape x q``
            values of ``-g``.
        """

        def negative_g(samples: Tensor, X: Tensor | None = None) -> Tensor:
            return -self.g(self.unflatten(samples))

        return GenericMCObjective(negative_g)

    def _check_trailing(self, shape: torch.Size, expected: tuple[int, ...], what: str) -> None:
        if tuple(shape) != expected:
            raise ValueError(
                f"{self.name}: expected {what} with trailing shape {expected}, got {tuple(shape)}."
            )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.name!r}, dim={self.dim}, "
            f"num_grid_points={self.num_grid_points}, num_channels={self.num_channels})"
        )


class Pollutants(CompositeProblem):
    r"""The environmental model: two pollutant spills in a long, narrow river.

    The concentration at position ``s`` and time ``t`` for ``u = (M, D, L, tau)`` is

    .. math::

        h(u)(s, t) = \frac{M}{\sqrt{4 \pi D t}} e^{-s^2 / (4 D t)}
            + 1[t > \tau] \frac{M}{\sqrt{4 \pi D (t - \tau)}} e^{-(s - L)^2 / (4 D (t - \tau))},

    with ``u`` in ``[7, 13] x [0.02, 0.12] x [0.01, 3] x [30.01, 30.295]``, observed at
    ``s in {0, 1, 2.5}``, ``t in {15, 30, 45, 60}`` (``m = 12``, ``d_s = 1``). The objective is
    the mean over the grid of ``(h(u) - h(u_true))^2`` with
    ``u_true = (10, 0.07, 1.505, 30.1525)`` (the NEON paper's ``L = 15.05`` is a typo), so
    ``best_value = 0`` at ``u_true``. BoTorch's composite BO tutorial uses the same ``h``
    (its ``env_cfun``) with a sum instead of a mean.

    Grid points are ordered ``s``-major: ``j = 4 * i_s + i_t``; ``grid[j] = (s, t)``.

    Example:
        >>> problem = Pollutants()
        >>> problem.evaluate(problem.u_true.unsqueeze(0))  # tensor([0.])
    """

    positions: tuple[float, ...] = (0.0, 1.0, 2.5)
    times: tuple[float, ...] = (15.0, 30.0, 45.0, 60.0)

    def __init__(self) -> None:
        bounds = torch.tensor(
            [[7.0, 0.02, 0.01, 30.01], [13.0, 0.12, 3.0, 30.295]], dtype=torch.float64
        )
        s, t = torch.meshgrid(
            torch.tensor(self.positions, dtype=torch.float64),
            torch.tensor(self.times, dtype=torch.float64),
            indexing="ij",
        )
        grid = torch.stack([s.reshape(-1), t.reshape(-1)], dim=-1)
        super().__init__(
            name="pollutants", bounds=bounds, grid=grid, num_channels=1, best_value=0.0
        )
        self.u_true: Tensor = torch.tensor([10.0, 0.07, 1.505, 30.1525], dtype=torch.float64)
        self.h_true: Tensor = self._h(self.u_true.unsqueeze(0)).squeeze(0)  # m x 1

    def _h(self, U: Tensor) -> Tensor:
        r"""Concentrations for a ``n x 4`` tensor ``U``; returns ``n x 12 x 1``."""
        s, t = self.grid.to(U).unbind(dim=-1)  # each of shape m
        M, D, L, tau = (U[:, i : i + 1] for i in range(4))  # each n x 1
        first = M / torch.sqrt(4.0 * math.pi * D * t) * torch.exp(-(s**2) / (4.0 * D * t))
        # The second spill only contributes after it happened; a safe elapsed time keeps
        # the unused branch (and its gradient) finite where t <= tau.
        after = t > tau
        elapsed = torch.where(after, t - tau, torch.ones_like(first))
        second = (
            M
            / torch.sqrt(4.0 * math.pi * D * elapsed)
            * torch.exp(-((s - L) ** 2) / (4.0 * D * elapsed))
        )
        return (first + torch.where(after, second, torch.zeros_like(second))).unsqueeze(-1)

    def g(self, H: Tensor) -> Tensor:
        r"""Mean squared difference to ``h(u_true)`` over the 12 grid points.

        Args:
            H: A ``... x 12 x 1`` tensor.

        Returns:
            A ``...`` tensor.
        """
        self._check_trailing(H.shape[-2:], (self.num_grid_points, self.num_channels), "H")
        return (H - self.h_true.to(H)).pow(2).mean(dim=(-2, -1))


class Brusselator(CompositeProblem):
    r"""The Brusselator reaction-diffusion PDE with a boundary-weighted variance objective.

    For ``u = (a, b, D0, D1) in [0.1, 5]^2 x [0.01, 5]^2`` solve, for ``t in [0, t_final]``,

    .. math::

        \partial_t u = D_0 \nabla^2 u + a - (1 + b) u + u^2 v, \qquad
        \partial_t v = D_1 \nabla^2 v + b u - u^2 v

    (the NEON paper's ``(1 - b)`` is a typo; the py-pde example it uses has ``(1 + b)``), from
    ``u = a``, ``v = b / a + noise_std * z`` with ``z ~ N(0, 1)`` i.i.d. per cell, drawn ONCE
    from ``seed`` (the same ``z`` for every ``u``, so ``h`` is deterministic). ``h(u)`` is
    both fields at ``t_final``: ``m = grid_size^2`` grid points, ``d_s = 2`` channels
    (``c = 0``: ``u``, ``c = 1``: ``v``). The objective is the (population) variance over all
    ``2 * grid_size^2`` entries of ``W * field``, with weights ``W = 0.1`` except ``1.0`` on
    the two outermost rows and columns (``weight_matrix``).

    Discretisation (as the py-pde example behind the paper: ``UnitGrid([64, 64])``, i.e.
    cells of side ``spacing = 1`` on ``[0, 64]^2``, and py-pde's default zero-flux Neumann
    boundaries): the 5-point finite-difference Laplacian on a cell-centred grid, Neumann by
    reflecting ghost cells (``boundary="neumann"``) or periodic (``boundary="periodic"``).
    Time stepping is our own: py-pde's explicit Euler with ``dt = 1e-3`` overflows to NaN in
    part of the box (e.g. ``a = 0.1, b = 5, D0 != D1``, where ``u`` spikes and ``u^2 v`` is
    stiff; the NEON / RPN code replaced such NaNs by ``1e5 * N(0, 1)`` noise). Each step of
    size ``dt`` is a Strang splitting ``diffuse(dt / 2) react(dt) diffuse(dt / 2)`` of

    * the diffusion, solved exactly: ``F <- P F P`` with ``P = exp(dt D L_1)``, where ``L_1`` is
      the 1-D Laplacian matrix (``laplacian_1d``; the 2-D 5-point Laplacian is
      ``L_1 (x) I + I (x) L_1``, so its exponential factorises). ``P`` (``diffusion_propagator``)
      is built once per call by ``eigh``; it is non-negative, conserves mass and is stable for
      every ``dt``, so the stiff diffusion (``D`` up to ``5``) sets no step size limit;
    * the reaction, pointwise, by a linearly implicit Euler step (backward Euler with the rate
      ``r = u_n^2`` frozen): ``u' (1 + h (1 + b)) - h r v' = u_n + h a`` and
      ``-h b u' + v' (1 + h r) = v_n``, a 2 x 2 M-matrix system per cell solved in closed form.
      It keeps ``u, v >= 0`` from non-negative data, preserves the homogeneous steady state
      ``(a, b / a)`` exactly and integrates the budget ``(u + v)' = a - u`` by backward Euler,
      so spikes cannot blow it up. Richardson extrapolation, ``2 E(h/2) E(h/2) - E(h)`` with
      ``h = dt``, makes it second order. (The extrapolation, and initial ``v < 0`` in cells
      where ``b / a`` is below the noise, void the strict positivity guarantee; in practice
      the fields at ``t_final`` are finite and positive over the box, checked at its 16
      corners and at random points, with values below about 20.)

    The scheme is second order in ``dt``. With the default ``dt = 0.005`` (4,000 steps), ``g``
    is within about 1% of its ``dt -> 0`` limit in the pattern-forming part of the box (e.g.
    ``u = (5, 5, 0.01, 5)``) and within ``1e-3`` relative elsewhere; with ``dt = 1e-3`` it
    agrees with py-pde's explicit Euler (``dt = 1e-3``, where that stays finite) to about 0.5%
    in ``g``. Individual pattern-forming fields are sensitive to ``dt``; ``g`` much less so.
    The solution is vectorised over a batch of ``u``, so a batch costs less than its
    evaluations one by one. Each step is a handful of small kernels, so on a busy machine
    ``torch.set_num_threads(1)`` can be much faster than more threads.

    Grid points are ordered row major: ``j = grid_size * i + k`` for cell ``(i, k)``, with
    coordinates ``grid[j] = (i, k) / (grid_size - 1)`` in ``[0, 1]^2`` (the surrogate's
    normalised inputs, as in the NEON / RPN code).

    Args:
        grid_size: Cells per side (``64``); smaller values only for quick tests.
        t_final: Final time (``20``).
        dt: Time step (``0.005``).
        spacing: Cell side length (``1``, py-pde's ``UnitGrid``).
        boundary: ``"neumann"`` (zero flux, py-pde's default) or ``"periodic"``.
        noise_std: Standard deviation of the initial perturbation of ``v`` (``0.1``).
        seed: Seed of the initial perturbation (``10``, as in the RPN / NEON code; the
            values themselves come from torch's CPU generator, not py-pde's), stored as the
            ``grid_size x grid_size`` float64 tensor ``initial_noise``.

    Example:
        >>> problem = Brusselator()
        >>> U = torch.tensor([[1.0, 3.0, 1.0, 0.1]], dtype=torch.float64)
        >>> H = problem.h(U)  # 1 x 4096 x 2
        >>> problem.g(H)  # shape (1,)
    """

    def __init__(
        self,
        grid_size: int = 64,
        t_final: float = 20.0,
        dt: float = 0.005,
        spacing: float = 1.0,
        boundary: Literal["neumann", "periodic"] = "neumann",
        noise_std: float = 0.1,
        seed: int = 10,
    ) -> None:
        if grid_size < 5:
            # g weights the two outermost rows and columns on each side.
            raise ValueError(f"grid_size must be at least 5, got {grid_size}.")
        if not (t_final > 0 and dt > 0 and spacing > 0):
            raise ValueError("t_final, dt and spacing must be positive.")
        if boundary not in ("neumann", "periodic"):
            raise ValueError(f"boundary must be 'neumann' or 'periodic', got {boundary!r}.")
        bounds = torch.tensor([[0.1, 0.1, 0.01, 0.01], [5.0, 5.0, 5.0, 5.0]], dtype=torch.float64)
        coords = torch.linspace(0.0, 1.0, grid_size, dtype=torch.float64)
        rows, cols = torch.meshgrid(coords, coords, indexing="ij")
        grid = torch.stack([rows.reshape(-1), cols.reshape(-1)], dim=-1)
        super().__init__(name="brusselator", bounds=bounds, grid=grid, num_channels=2)
        self.grid_size = grid_size
        self.t_final = float(t_final)
        self.num_steps = max(1, round(self.t_final / dt))
        self.dt = self.t_final / self.num_steps  # lands exactly on t_final
        self.spacing = float(spacing)
        self.boundary = boundary
        self.noise_std = float(noise_std)
        self.seed = seed
        generator = torch.Generator().manual_seed(seed)
        self.initial_noise: Tensor = torch.randn(
            grid_size, grid_size, generator=generator, dtype=torch.float64
        )

    def weight_matrix(self) -> Tensor:
        r"""The ``grid_size x grid_size`` weights ``W`` of ``g`` (float64)."""
        W = torch.full((self.grid_size, self.grid_size), 0.1, dtype=torch.float64)
        edge = [0, 1, self.grid_size - 2, self.grid_size - 1]
        W[edge, :] = 1.0
        W[:, edge] = 1.0
        return W

    def laplacian_1d(
        self, dtype: torch.dtype = torch.float64, device: torch.device | str | None = None
    ) -> Tensor:
        r"""The ``grid_size x grid_size`` 1-D second-difference matrix divided by ``spacing^2``.

        Neumann: a ghost cell equal to the boundary cell (zero flux through the boundary
        face), so the corner diagonal entries are ``-1``. Periodic: wrap-around entries.
        """
        n = self.grid_size
        L = -2.0 * torch.eye(n, dtype=dtype, device=device)
        off = torch.ones(n - 1, dtype=dtype, device=device)
        L = L + torch.diag(off, 1) + torch.diag(off, -1)
        if self.boundary == "neumann":
            L[0, 0] = L[-1, -1] = -1.0
        else:
            L[0, -1] = L[-1, 0] = 1.0
        return L / self.spacing**2

    def diffusion_propagator(self, diffusivity: Tensor, dt: float | None = None) -> Tensor:
        r"""The exact 1-D diffusion propagators ``exp(dt D L_1)``.

        Args:
            diffusivity: A ``batch_shape`` tensor of diffusion coefficients ``D``.
            dt: The time step (default ``self.dt``).

        Returns:
            A symmetric ``batch_shape x grid_size x grid_size`` tensor ``P``; one diffusion
            step of a field ``F`` is ``P @ F @ P``.
        """
        dt = self.dt if dt is None else dt
        L = self.laplacian_1d(dtype=torch.float64, device=diffusivity.device)
        eigenvalues, Q = torch.linalg.eigh(L)  # eigenvalues <= 0
        decay = torch.exp(dt * diffusivity.to(torch.float64).unsqueeze(-1) * eigenvalues)
        P = (Q * decay.unsqueeze(-2)) @ Q.transpose(-1, -2)
        return P.to(diffusivity.dtype)

    def initial_state(self, U: Tensor) -> tuple[Tensor, Tensor]:
        r"""Initial fields ``u = a``, ``v = b / a + noise_std * z`` for a ``n x 4`` tensor ``U``.

        Returns:
            Two ``n x grid_size x grid_size`` tensors.
        """
        a, b = U[:, 0, None, None], U[:, 1, None, None]
        u0 = a.expand(-1, self.grid_size, self.grid_size).clone()
        v0 = b / a + self.noise_std * self.initial_noise.to(U)
        return u0, v0

    def solve(
        self, U: Tensor, u0: Tensor, v0: Tensor, num_steps: int | None = None
    ) -> tuple[Tensor, Tensor]:
        r"""Integrate the PDE over ``num_steps`` steps of size ``dt`` (no bounds check).

        Args:
            U: A ``n x 4`` tensor of parameters ``(a, b, D0, D1)``.
            u0: A ``n x grid_size x grid_size`` tensor of initial ``u``.
            v0: A ``n x grid_size x grid_size`` tensor of initial ``v``.
            num_steps: Number of steps (default ``self.num_steps``, i.e. up to ``t_final``).

        Returns:
            The fields ``u, v`` at time ``num_steps * dt``, each ``n x grid_size x grid_size``
            (no autograd graph: ``h`` is a black box).
        """
        num_steps = self.num_steps if num_steps is None else num_steps
        with torch.no_grad():
            a, b = U[:, 0, None, None], U[:, 1, None, None]
            # n x 2 x grid_size x grid_size propagators: channel 0 diffuses u (D0), 1 v (D1).
            P_full = self.diffusion_propagator(U[:, 2:4])
            P_half = self.diffusion_propagator(U[:, 2:4], dt=self.dt / 2)
            F = torch.stack([u0, v0], dim=1)
            # Strang splitting with the half diffusion steps of neighbouring steps merged.
            F = P_half @ F @ P_half
            for step in range(num_steps):
                F = self._react(F, a, b, self.dt)
                P = P_full if step < num_steps - 1 else P_half
                F = P @ F @ P
        return F[:, 0], F[:, 1]

    @staticmethod
    def _react_euler(u: Tensor, v: Tensor, a: Tensor, b: Tensor, h: float) -> tuple[Tensor, Tensor]:
        r"""One linearly implicit Euler reaction step of size ``h`` (see the class docstring).

        Cramer's rule for the 2 x 2 system, with ``h r = h u^2``, ``d = 1 + h (1 + b)`` and
        ``w = u + h a``: ``det = d + (1 + h) h r``, ``u' = (w + h r (w + v)) / det`` and
        ``v' = (d v + h b w) / det``. Written with few elementwise kernels: the step is
        overhead-bound on a single ``64 x 64`` grid.
        """
        h_r = torch.mul(u, u).mul_(h)
        w = u + h * a
        d = 1.0 + h * (1.0 + b)  # n x 1 x 1
        det = torch.add(d, h_r, alpha=1.0 + h)
        u_new = torch.addcmul(w, h_r, w + v).div_(det)
        v_new = torch.addcmul(d * v, h * b, w).div_(det)
        return u_new, v_new

    def _react(self, F: Tensor, a: Tensor, b: Tensor, h: float) -> Tensor:
        r"""Second-order reaction step: Richardson extrapolation of ``_react_euler``.

        Args:
            F: A ``n x 2 x grid_size x grid_size`` tensor of the fields ``u, v``.
            a: A ``n x 1 x 1`` tensor.
            b: A ``n x 1 x 1`` tensor.
            h: The step size.

        Returns:
            The fields after the step, shaped like ``F``.
        """
        u, v = F[:, 0], F[:, 1]
        u_full, v_full = self._react_euler(u, v, a, b, h)
        u_half, v_half = self._react_euler(*self._react_euler(u, v, a, b, h / 2), a, b, h / 2)
        out = torch.empty_like(F)
        torch.mul(u_half, 2.0, out=out[:, 0]).sub_(u_full)
        torch.mul(v_half, 2.0, out=out[:, 1]).sub_(v_full)
        return out

    def _h(self, U: Tensor) -> Tensor:
        r"""Both fields at ``t_final`` for a ``n x 4`` tensor ``U``; returns ``n x m x 2``."""
        u, v = self.solve(U, *self.initial_state(U))
        return torch.stack([u, v], dim=-1).reshape(U.shape[0], self.num_grid_points, 2)

    def g(self, H: Tensor) -> Tensor:
        r"""Population variance over all ``2 m`` entries of ``W * field``.

        The NEON / RPN-BO code (``jax.numpy.var``) does the same; torch-based versions of the
        problem (``PDEVar`` built on BoTorch) use ``Tensor.var``, which divides by ``2 m - 1``
        instead (a relative difference of ``1 / 8191`` on the default grid).

        Args:
            H: A ``... x m x 2`` tensor (grid points row major).

        Returns:
            A ``...`` tensor.
        """
        self._check_trailing(H.shape[-2:], (self.num_grid_points, self.num_channels), "H")
        W = self.weight_matrix().to(H).reshape(self.num_grid_points, 1)
        return (W * H).var(dim=(-2, -1), correction=0)
