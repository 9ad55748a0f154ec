r"""BO test problems with their minimum and maximum over the box, and the problem registry.

Minimisation problems in any dimension ``d >= 2``: the four of the NOMU BO suite
(``NOMU_SUITE_NAMES``; the NOMU paper uses ``d = 5`` and ``d = 10``) and the three
large-scale problems of :mod:`botorch_nn_uq.problems.scale` (``SCALE_PROBLEM_NAMES``,
"protocol 6"), the non-stationary warped Hartmann-6 of
:mod:`botorch_nn_uq.problems.warped` (``NON_STATIONARY_PROBLEM_NAMES``, ``d = 6`` only),
and two control problems of TuRBO's paper (``CONTROL_PROBLEM_NAMES``): the lunar
lander's 12 controller constants (:mod:`botorch_nn_uq.problems.lunar`, ``d = 12``; needs
the ``lunar`` extra) and the rover's 60-D trajectory (:mod:`botorch_nn_uq.problems.rover`).
``BO_PROBLEM_NAMES`` lists all ten.

============  =========================  ===========================================
name          domain                     maximiser
============  =========================  ===========================================
levy          ``[-10, 10]^d``            ``(-10, ..., -10)``
rosenbrock    ``[-5, 10]^d``             ``(10, ..., 10, -5)``
g-function    ``[0, 1]^d``               ``(1, ..., 1)`` (any vertex)
perm          ``[-d, d]^d``              ``(-d, ..., -d)``
nn-draw       ``[0, 1]^d``               estimated by multi-start search
ackley        ``[-32.768, 32.768]^d``    ``(32.500414..., ...)``, 1-D Brent search
rastrigin     ``[-5.12, 5.12]^d``        ``(4.52299366..., ...)``, 1-D Brent search
warped-       ``[0, 1]^6``               ``(1, 1, 0, 1, 1, 1)``, the best vertex
hartmann
lunar-lander  ``[0, 2]^12``              the worst of 64 Sobol points (a reference)
rover         ``[0, 1]^60``              the worst of 256 Sobol points (a reference)
============  =========================  ===========================================

The NOMU-suite maxima are proven analytically (proofs in the ``_*_maximizer``
docs), so they are exact for every ``d``. The Ackley and Rastrigin maxima are proven
up to a one-dimensional bounded optimisation on an interval where it is unimodal
(:func:`~botorch_nn_uq.problems.scale.ackley_maximizer`,
:func:`~botorch_nn_uq.problems.scale.rastrigin_maximizer`). ``nn-draw``, a random tanh
network, has unknown extrema: both are estimates (``BOProblem.optimum_known`` is
False). The warped Hartmann-6 keeps Hartmann-6's minimum (at the warped minimiser) and
its largest value over the box, ``-2.81e-8`` at a vertex, which the warping leaves in
place: the best of the 64 vertices, which a multi-start local search from 200,000
random points did not beat (the maximum is not proven, but it sets the regret's scale
to within ``1e-8`` relative). The control problems' extrema are references, not
optima (``optimum_known`` is False): the lunar lander's ``min_value`` is the value of
gymnasium's own heuristic controller (a negative regret beats it), the rover's is ``-5``,
a bound on its reward that no trajectory attains; their ``max_value`` is the worst of a
fixed scrambled Sobol sample (seed 0). The tests cross-check every maximum with random
search plus local optimisation. The regret metric is the normalised regret
``2 (f(x_best) - f_min) / (f_max - f_min)``, which is ``0`` at the minimum and
``2`` at the maximum.

Example:
    >>> problem = get_bo_problem("levy", 5)
    >>> lower, upper = problem.bounds
    >>> X = lower + (upper - lower) * torch.rand(8, 5, dtype=torch.double)
    >>> y = problem.evaluate(X)  # shape (8,)
    >>> problem.normalized_regret(y.min())
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from botorch.test_functions.synthetic import (
    Ackley,
    Levy,
    Rastrigin,
    Rosenbrock,
    SyntheticTestFunction,
)
from torch import Tensor
from torch.quasirandom import SobolEngine

from botorch_nn_uq.checks import check_points_in_box, is_integer
from botorch_nn_uq.compat import evaluate_true_unchecked
from botorch_nn_uq.problems.lunar import DEFAULT_HEURISTIC_WEIGHTS, LunarLander
from botorch_nn_uq.problems.rover import REWARD_OFFSET, RoverTrajectory
from botorch_nn_uq.problems.scale import (
    RandomTanhNetwork,
    ackley_maximizer,
    rastrigin_maximizer,
)
from botorch_nn_uq.problems.synthetic import GFunction, Perm
from botorch_nn_uq.problems.warped import WarpedHartmann

NOMU_SUITE_NAMES: tuple[str, ...] = ("levy", "rosenbrock", "g-function", "perm")
SCALE_PROBLEM_NAMES: tuple[str, ...] = ("nn-draw", "ackley", "rastrigin")
NON_STATIONARY_PROBLEM_NAMES: tuple[str, ...] = ("warped-hartmann",)
CONTROL_PROBLEM_NAMES: tuple[str, ...] = ("lunar-lander", "rover")
BO_PROBLEM_NAMES: tuple[str, ...] = (
    NOMU_SUITE_NAMES + SCALE_PROBLEM_NAMES + NON_STATIONARY_PROBLEM_NAMES + CONTROL_PROBLEM_NAMES
)
#: The fixed dimension of the problems that have one.
FIXED_DIMENSIONS = {"warped-hartmann": 6, "lunar-lander": 12, "rover": 60}
#: Size of the scrambled Sobol sample whose worst point sets a control problem's max_value.
_REFERENCE_SAMPLE_SIZES = {"lunar-lander": 64, "rover": 256}
#: The vertex where Hartmann-6, warped or not, takes its largest value over the box.
_HARTMANN_MAXIMIZER = [1.0, 1.0, 0.0, 1.0, 1.0, 1.0]


class BOProblem:
    r"""A minimisation problem with the minimum and maximum of ``f`` over its box.

    Args:
        name: Name of the problem (one of ``BO_PROBLEM_NAMES`` for the registry).
        test_function: The BoTorch test function ``f`` to minimise (``negate=False``).
        min_value: ``min f`` over the box.
        max_value: ``max f`` over the box.
        maximizer: A ``d``-tensor with ``f(maximizer) == max_value``.
        optimum_known: False if ``min_value`` and ``max_value`` are only the best values
            a numerical search found (``nn-draw``); the normalised regret is then
            relative to that search and can leave ``[0, 2]``.

    Example:
        >>> problem = get_bo_problem("rosenbrock", 5)
        >>> problem.evaluate(problem.maximizer) == problem.max_value
        tensor(True)
    """

    def __init__(
        self,
        name: str,
        test_function: SyntheticTestFunction,
        min_value: float,
        max_value: float,
        maximizer: Tensor,
        optimum_known: bool = True,
    ) -> None:
        if test_function.negate:
            raise ValueError("BOProblem expects a test function with negate=False.")
        if maximizer.shape != (test_function.dim,):
            raise ValueError(
                f"maximizer must have shape ({test_function.dim},), got {tuple(maximizer.shape)}."
            )
        if not max_value > min_value:
            raise ValueError(f"Need max_value > min_value, got {max_value} <= {min_value}.")
        self.name = name
        self.dim: int = test_function.dim
        self.test_function = test_function
        self._min_value = float(min_value)
        self._max_value = float(max_value)
        self._maximizer = maximizer
        self.optimum_known = optimum_known

    @property
    def bounds(self) -> Tensor:
        r"""The ``2 x d`` tensor of lower (row 0) and upper (row 1) bounds."""
        return self.test_function.bounds

    @property
    def min_value(self) -> float:
        r"""The minimum of ``f`` over the box (an estimate unless ``optimum_known``)."""
        return self._min_value

    @property
    def max_value(self) -> float:
        r"""The maximum of ``f`` over the box (an estimate unless ``optimum_known``)."""
        return self._max_value

    @property
    def maximizer(self) -> Tensor:
        r"""A ``d``-tensor at which ``f`` attains ``max_value``."""
        return self._maximizer

    def evaluate(self, X: Tensor) -> Tensor:
        r"""Evaluate the noiseless objective ``f`` (to be minimised).

        Args:
            X: A ``batch_shape x d`` tensor of points inside ``bounds``.

        Returns:
            A ``batch_shape`` tensor of ``f(X)`` in the dtype and on the device of ``X``.

        Raises:
            ValueError: If the last dimension of ``X`` is not ``d`` or a point lies
                outside the box.
        """
        check_points_in_box(self.name, "X", X, self.bounds)
        # BoTorch's public `evaluate_true` checks X against its CPU bounds buffer,
        # which fails for X on another device; the bounds were checked above.
        return evaluate_true_unchecked(self.test_function, X)

    def normalized_regret(self, best_value: float | Tensor) -> float | Tensor:
        r"""Normalised regret ``2 (best_value - min_value) / (max_value - min_value)``.

        Args:
            best_value: The best (smallest) observed value ``f(x_best)``, a float or
                a tensor of any shape (applied elementwise).

        Returns:
            A float for a float input, else a tensor of the shape of ``best_value``;
            ``0`` at the minimum and ``2`` at the maximum. If ``optimum_known`` is False
            the extrema are estimates: a value below the estimated minimum gives a
            negative regret, which is kept (not clamped) as evidence of beating the search.
        """
        return 2.0 * (best_value - self.min_value) / (self.max_value - self.min_value)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.name!r}, dim={self.dim}, "
            f"min_value={self.min_value:.6g}, max_value={self.max_value:.6g})"
        )


def _levy_maximizer(dim: int) -> list[float]:
    r"""Maximiser ``(-10, ..., -10)`` of Levy on ``[-10, 10]^d``.

    Proof. With ``w = 1 + (x - 1) / 4 in [-1.75, 3.25]`` Levy is separable,
    ``f = g_1(w_1) + sum_{i=2}^{d-1} g(w_i) + g_d(w_d)`` with
    ``g(w) = (w - 1)^2 (1 + 10 sin^2(pi w + 1))``, ``g_1 = g + sin^2(pi w)`` and
    ``g_d(w) = (w - 1)^2 (1 + sin^2(2 pi w))``, so each term is maximised alone:

    * ``g_d <= 2 (w - 1)^2 <= 2 * 2.75^2``, with equality at ``w = -1.75``
      (``sin^2(-3.5 pi) = 1``).
    * ``g <= 11 (w - 1)^2``, which is below ``g(-1.75) = 79.7578...`` unless
      ``|w - 1| >= 2.6927``, i.e. unless ``w in [-1.75, -1.6927]``. There
      ``pi w + 1`` lies in ``(pi/2, pi)`` modulo ``2 pi``, so ``sin^2(pi w + 1)``
      and ``(w - 1)^2`` are positive and decreasing in ``w``: ``g`` peaks at ``-1.75``.
    * ``g_1 <= 11 (w - 1)^2 + 1`` is below ``g_1(-1.75)`` unless
      ``w in [-1.75, -1.6843]``. There ``g' = 2 (w - 1) s + 10 pi (w - 1)^2
      sin(2 pi w + 2)`` with ``s >= 1`` and ``sin(2 pi w + 2) < 0`` (the argument is
      in ``(pi, 3 pi / 2)`` modulo ``2 pi``), so ``g' < -5.3 < -pi <= -d/dw sin^2(pi w)``
      and ``g_1`` is decreasing: it peaks at ``-1.75`` too.

    ``w = -1.75`` is ``x = -10``.
    """
    return [-10.0] * dim


def _rosenbrock_maximizer(dim: int) -> list[float]:
    r"""Maximiser ``(10, ..., 10, -5)`` of Rosenbrock on ``[-5, 10]^d``.

    With ``T(x, y) = 100 (y - x^2)^2 + (x - 1)^2``, ``f = sum_{i<d} T(x_i, x_{i+1})``
    is a chain; let ``V_k(z)`` be the max of the first ``k - 1`` terms over
    ``x_1..x_{k-1}`` with ``x_k = z``. Claim: ``V_k(z) = c_k + 100 (100 - z)^2`` with
    the maximum at ``x_1 = ... = x_{k-1} = 10`` and ``c_k = 81 + 810081 (k - 2)``.

    * ``k = 2``: ``|z - x^2| <= 100 - z`` for ``x^2 in [0, 100]``, ``z <= 10`` and
      ``(x - 1)^2 <= 81``, both with equality at ``x = 10``.
    * ``k -> k + 1``: ``V_{k+1}(z) = c_k + max_y phi(y, z)`` with
      ``phi(y, z) = 100 (100 - y)^2 + (y - 1)^2 + 100 (z - y^2)^2``, and
      ``phi(10, z) - phi(y, z) = [81 - (y - 1)^2]
      + 100 (10 - y) [(10 + y)(100 + y^2 - 2z) - (190 - y)]``. The first bracket is
      ``>= 0`` on ``[-5, 10]``; in the second ``100 + y^2 - 2z >= 80 + y^2`` and
      ``h(y) = (10 + y)(80 + y^2) + y - 190`` has ``h' = 3y^2 + 20y + 81 > 0`` and
      ``h(-5) = 330 > 0``. So ``y = 10`` maximises ``phi``, and
      ``phi(10, z) = 810081 + 100 (100 - z)^2``.

    Finally ``max_z V_d(z)`` is at ``z = -5``:
    ``f_max = 810081 (d - 2) + 1102581``.
    """
    return [10.0] * (dim - 1) + [-5.0]


def _g_function_maximizer(dim: int) -> list[float]:
    r"""Maximiser ``(1, ..., 1)`` of the G-function on ``[0, 1]^d``.

    Each factor ``(|4 x_i - 2| + a_i) / (1 + a_i)`` is maximal, and positive, at
    ``|4 x_i - 2| = 2`` (``x_i in {0, 1}``); the first factor has ``|.| <= 3`` with
    ``3`` its maximum. So ``|f| <= prod_i (2 + a_i) / (1 + a_i)``, attained at every
    vertex: ``f_max = 3 * 2 * prod_{i=3}^d (i + 2) / i = (d + 1)(d + 2) / 2 = -3 f_min``.
    """
    return [1.0] * dim


def _perm_maximizer(dim: int) -> list[float]:
    r"""Maximiser ``(-d, ..., -d)`` of the Perm function (``beta = 1/2``) on ``[-d, d]^d``.

    Write ``f = sum_i S_i^2`` with ``S_i = sum_j (j^i + beta)(u_{ij} - 1)`` and
    ``u_{ij} = (x_j / j)^i``, ``|u_{ij}| <= (d / j)^i``. We bound each ``|S_i|`` and
    show all bounds are attained at ``x = (-d, ..., -d)``:

    * odd ``i``: ``|S_i| <= sum_j (j^i + beta)((d / j)^i + 1)``, with equality when
      every ``u_{ij} = -(d / j)^i``, i.e. ``x_j = -d``.
    * even ``i``: ``u_{ij} in [0, (d / j)^i]``, so ``-N_i <= S_i <= P_i`` with
      ``N_i = sum_j (j^i + beta)`` and ``P_i = sum_j (j^i + beta)((d / j)^i - 1)``
      (attained at ``x_j = +-d``). For ``d >= 3``, ``P_i >= N_i``: for ``d >= 7``
      since ``sum_j j^i <= d^i + d^{i+1} / (i + 1)`` gives
      ``P_i - N_i >= d^i (d / 3 - 2) - beta d > 0``, and for ``3 <= d <= 6`` by exact
      evaluation (checked in the tests).

    For ``d = 2`` (``P_2 = 4.5 < N_2 = 6``) argue directly:
    ``S_1 = 1.5 x_1 + 1.25 x_2 - 4``, ``S_2 = 1.5 x_1^2 + 1.125 x_2^2 - 6``. If
    ``S_2 >= 0``, ``f <= 9.5^2 + 4.5^2 = 110.5 = f(-2, -2)``. If ``S_2 < 0``, ``x``
    lies in the ellipse ``1.5 x_1^2 + 1.125 x_2^2 < 6``, where Cauchy-Schwarz gives
    ``|1.5 x_1 + 1.25 x_2| < (6 (1.5 + 1.25^2 / 1.125))^{1/2} < 4.17``, so
    ``f < 8.17^2 + 6^2 < 103``.
    """
    return [-float(dim)] * dim


# name -> (test function constructor, maximiser for a given d); nn-draw, whose
# maximiser comes from a search on the built function, is handled separately.
_PROBLEMS: dict[str, tuple[Callable[..., SyntheticTestFunction], Callable[[int], list[float]]]] = {
    "levy": (Levy, _levy_maximizer),
    "rosenbrock": (Rosenbrock, _rosenbrock_maximizer),
    "g-function": (GFunction, _g_function_maximizer),
    "perm": (Perm, _perm_maximizer),
    "ackley": (Ackley, ackley_maximizer),
    "rastrigin": (Rastrigin, rastrigin_maximizer),
}


def get_bo_problem(
    name: str,
    dim: int,
    *,
    dtype: torch.dtype = torch.float64,
    problem_seed: int | None = None,
) -> BOProblem:
    r"""Build a registered BO problem.

    ``min_value`` is the function's optimal value, ``max_value`` is ``f`` at the
    maximiser (see the module docstring), evaluated in ``float64``. For ``nn-draw``
    both are estimates of a seeded multi-start search and ``optimum_known`` is False.

    Args:
        name: One of ``BO_PROBLEM_NAMES``: ``"levy"``, ``"rosenbrock"``,
            ``"g-function"``, ``"perm"``, ``"nn-draw"``, ``"ackley"``, ``"rastrigin"``,
            ``"warped-hartmann"``, ``"lunar-lander"``, ``"rover"``.
        dim: The input dimension ``d >= 2`` (6 for ``"warped-hartmann"``, 12 for
            ``"lunar-lander"``, 60 for ``"rover"``).
        dtype: dtype of ``bounds`` and ``maximizer``.
        problem_seed: Seed of the random network of ``nn-draw`` (default ``0``); only
            ``nn-draw`` accepts it.

    Returns:
        The ``BOProblem`` with a minimisation test function (``negate=False``).

    Raises:
        ValueError: For an unknown ``name``, ``dim < 2`` (or not the fixed dimension of
            the warped Hartmann-6, the lunar lander or the rover), or a ``problem_seed``
            for a problem other than ``nn-draw``.
        ImportError: For ``"lunar-lander"`` without gymnasium (the ``lunar`` extra).

    Example:
        >>> problem = get_bo_problem("perm", 5)
        >>> problem.min_value, problem.max_value
        >>> network = get_bo_problem("nn-draw", 200, problem_seed=1)
    """
    if name not in BO_PROBLEM_NAMES:
        raise ValueError(f"Unknown BO problem {name!r}; valid names are {BO_PROBLEM_NAMES}.")
    if not is_integer(dim, minimum=2):
        raise ValueError(f"BO problem {name!r} requires an integer dim >= 2, got {dim!r}.")
    dim = int(dim)
    if name == "nn-draw":
        test_function = RandomTanhNetwork(
            dim=dim, problem_seed=0 if problem_seed is None else problem_seed, dtype=dtype
        )
        maximizer = test_function.maximizer
    elif problem_seed is not None:
        raise ValueError(f"Only 'nn-draw' takes a problem_seed; {name!r} is deterministic.")
    elif name in FIXED_DIMENSIONS and dim != FIXED_DIMENSIONS[name]:
        raise ValueError(f"{name!r} is {FIXED_DIMENSIONS[name]}-dimensional; got dim={dim}.")
    elif name in CONTROL_PROBLEM_NAMES:
        return _control_problem(name, dtype)
    elif name == "warped-hartmann":
        test_function = WarpedHartmann(dtype=dtype)
        maximizer = torch.tensor(_HARTMANN_MAXIMIZER, dtype=torch.float64)
    else:
        make_function, maximizer_of = _PROBLEMS[name]
        test_function = make_function(dim=dim, dtype=dtype)
        maximizer = torch.tensor(maximizer_of(dim), dtype=torch.float64)
    max_value = test_function.evaluate_true(maximizer).item()
    return BOProblem(
        name=name,
        test_function=test_function,
        min_value=test_function.optimal_value,
        max_value=max_value,
        maximizer=maximizer.to(dtype),
        optimum_known=name != "nn-draw",
    )


def _control_problem(name: str, dtype: torch.dtype) -> BOProblem:
    r"""The lunar lander or the rover with the reference extrema of the module docstring."""
    if name == "lunar-lander":
        test_function: SyntheticTestFunction = LunarLander(dtype=dtype)
        heuristic = torch.tensor(DEFAULT_HEURISTIC_WEIGHTS, dtype=torch.float64)
        min_value = test_function.evaluate_true(heuristic).item()
    else:
        test_function = RoverTrajectory(dtype=dtype)
        min_value = -REWARD_OFFSET
    lower, upper = test_function.bounds.double()
    sobol = SobolEngine(test_function.dim, scramble=True, seed=0)
    unit = sobol.draw(_REFERENCE_SAMPLE_SIZES[name], dtype=torch.float64)
    sample = lower + (upper - lower) * unit
    values = test_function.evaluate_true(sample)
    worst = int(values.argmax())
    return BOProblem(
        name=name,
        test_function=test_function,
        min_value=min_value,
        max_value=values[worst].item(),
        maximizer=sample[worst].to(dtype),
        optimum_known=False,
    )
