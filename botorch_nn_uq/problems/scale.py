r"""Large-scale BO problems ("protocol 6"): a random network, Ackley and Rastrigin.

=========  =========================  ================  ==================================
name       domain                     design dimension  maximum of ``f`` over the box
=========  =========================  ================  ==================================
nn-draw    ``[0, 1]^d``               ``d = 200``       estimated by multi-start search
ackley     ``[-32.768, 32.768]^d``    ``d = 20``        ``22.3203348484...`` for every ``d``
rastrigin  ``[-5.12, 5.12]^d``        ``d = 10``        ``40.3532901938... * d``
=========  =========================  ================  ==================================

All three are minimisation problems. Ackley and Rastrigin are BoTorch's functions
with their minimum ``0`` at the origin; their maxima are proven in
:func:`ackley_maximizer` and :func:`rastrigin_maximizer` (each reduces to a
one-dimensional bounded optimisation that is concave where the maximum lies).
``nn-draw`` is :class:`RandomTanhNetwork`, whose extrema are unknown and estimated.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from botorch.test_functions.synthetic import SyntheticTestFunction
from scipy.optimize import minimize_scalar
from torch import Tensor
from torch.nn import functional, init
from torch.quasirandom import SobolEngine

from botorch_nn_uq.checks import is_integer

# Multi-start search for the extrema of `RandomTanhNetwork`: projected Adam on the unit
# box from scrambled Sobol starts, screening all starts briefly and refining the best.
# For the 200-d design (seeds 0-2), 300-step runs from all 256 starts end within 1e-11 of
# one another and of this two-stage search, which costs about an eighth as much.
_SEARCH_STARTS = 256
_SCREEN_STEPS = 30
_REFINED_STARTS = 8
_REFINE_STEPS = 300
_SEARCH_LEARNING_RATE = 0.1

Layers = list[tuple[Tensor, Tensor]]


def _draw_tanh_mlp(dim: int, hidden_widths: Sequence[int], seed: int) -> Layers:
    r"""Draw the ``(weight, bias)`` pairs of a ``dim -> hidden_widths -> 1`` MLP.

    Uses the initialisation of ``torch.nn.Linear`` (``kaiming_uniform_`` with
    ``a = sqrt(5)``, i.e. weights and biases ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``), in
    float32 and in the same order, from a local generator: the result equals the
    parameters of ``torch.manual_seed(seed)`` followed by the ``nn.Sequential`` of
    ``nn.Linear`` layers, without touching the global RNG. Returned in float64.
    """
    generator = torch.Generator().manual_seed(seed)
    widths = [dim, *hidden_widths, 1]
    layers = []
    for fan_in, fan_out in zip(widths[:-1], widths[1:], strict=True):
        weight = torch.empty(fan_out, fan_in, dtype=torch.float32)
        init.kaiming_uniform_(weight, a=math.sqrt(5), generator=generator)
        bias = torch.empty(fan_out, dtype=torch.float32)
        bound = 1.0 / math.sqrt(fan_in)
        init.uniform_(bias, -bound, bound, generator=generator)
        layers.append((weight.double(), bias.double()))
    return layers


def _negated_network(layers: Layers, X: Tensor) -> Tensor:
    r"""``-net(X)`` for a float64 ``batch_shape x d`` tensor ``X``; returns ``batch_shape``."""
    hidden = X
    for weight, bias in layers[:-1]:
        hidden = torch.tanh(functional.linear(hidden, weight, bias))
    weight, bias = layers[-1]
    return -functional.linear(hidden, weight, bias).squeeze(-1)


def _projected_adam(layers: Layers, X: Tensor, direction: Tensor, steps: int) -> Tensor:
    r"""Minimise ``direction * f`` from every start by Adam projected onto ``[0, 1]^d``.

    Args:
        layers: The float64 network layers.
        X: A ``2 x n x d`` float64 tensor of starts (row 0 descends, row 1 ascends).
        direction: A ``2 x 1`` tensor ``[[1], [-1]]``.
        steps: Number of Adam steps; the learning rate decays to 0 on a cosine schedule
            so that interior coordinates settle instead of oscillating.

    Returns:
        The ``2 x n x d`` end points.
    """
    X = X.clone().requires_grad_(True)
    optimizer = torch.optim.Adam([X], lr=_SEARCH_LEARNING_RATE)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)
    for _ in range(steps):
        optimizer.zero_grad()
        (direction * _negated_network(layers, X)).sum().backward()
        optimizer.step()
        schedule.step()
        with torch.no_grad():
            X.clamp_(0.0, 1.0)
    return X.detach()


def _search_extrema(layers: Layers, dim: int, seed: int) -> tuple[Tensor, Tensor]:
    r"""Deterministic multi-start estimates of ``argmin f`` and ``argmax f`` on ``[0, 1]^d``.

    ``_SEARCH_STARTS`` scrambled Sobol points (seeded with ``seed``; the scrambling uses
    a local generator) are improved for ``_SCREEN_STEPS`` projected Adam steps in each
    direction, and the ``_REFINED_STARTS`` best end points of each direction for
    ``_REFINE_STEPS`` more.

    Returns:
        The float64 ``d``-tensors ``(minimizer, maximizer)`` of the best points found.
    """
    starts = SobolEngine(dim, scramble=True, seed=seed).draw(_SEARCH_STARTS, dtype=torch.float64)
    direction = torch.tensor([[1.0], [-1.0]], dtype=torch.float64)
    # Adam needs gradients even if the caller builds the problem under torch.no_grad().
    with torch.enable_grad():
        screened = _projected_adam(layers, starts.expand(2, -1, -1), direction, _SCREEN_STEPS)
        with torch.no_grad():
            scores = direction * _negated_network(layers, screened)
        best = scores.topk(_REFINED_STARTS, dim=-1, largest=False).indices
        refined = _projected_adam(
            layers,
            screened.gather(1, best.unsqueeze(-1).expand(-1, -1, dim)),
            direction,
            _REFINE_STEPS,
        )
    with torch.no_grad():
        scores = direction * _negated_network(layers, refined)
    winners = scores.argmin(dim=-1)
    return refined[0, winners[0]], refined[1, winners[1]]


class RandomTanhNetwork(SyntheticTestFunction):
    r"""``nn-draw``: minus a fixed random tanh MLP on ``[0, 1]^d``.

    ``f(x) = -net(x)``, where ``net`` is a tanh MLP ``R^d -> R`` with hidden widths
    ``hidden_widths`` (default ``(256, 256)``) and a linear scalar output whose weights
    and biases follow PyTorch's default ``nn.Linear`` initialisation
    ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``. For the default widths they are exactly
    those of ``torch.manual_seed(problem_seed)`` followed by
    ``nn.Sequential(nn.Linear(d, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(),
    nn.Linear(256, 1))`` (drawn in float32, evaluated in float64), but are drawn from a
    local generator so that building the function leaves the global RNG untouched.
    BoTorch maximises the network; this package minimises ``f``, which is the same.

    The extrema are unknown. Building the function estimates them by a deterministic
    multi-start search (256 scrambled Sobol starts seeded with ``problem_seed``,
    projected Adam in both directions):
    ``optimal_value`` and ``optimizers`` are the smallest value found and its point,
    ``max_value`` and ``maximizer`` the largest. A regret normalised with these
    estimates is relative to the search and can be negative if an optimiser beats it;
    it is deliberately not clamped.

    ``f`` is evaluated in float64 whatever the dtype of ``X`` (the result is returned in
    the dtype of ``X``), so values do not depend on the dtype of the caller's inputs
    beyond their rounding.

    Args:
        dim: The input dimension ``d >= 2``.
        problem_seed: Seed of the weights and of the extrema search (a non-negative int).
        hidden_widths: Widths of the hidden tanh layers.
        noise_std: Standard deviation of the observation noise.
        negate: If True, negate the function.
        dtype: The dtype of the ``bounds`` and ``optimizers`` buffers.

    Attributes:
        maximizer: The float64 ``d``-tensor of the largest value found.
        max_value: ``f(maximizer)``, the estimate of ``max f``.

    Example:
        >>> function = RandomTanhNetwork(dim=200)
        >>> function.optimal_value <= function(torch.rand(4, 200, dtype=torch.double)).min()
    """

    # The extrema lie on the boundary of the box, where the gradient does not vanish.
    _check_grad_at_opt: bool = False

    def __init__(
        self,
        dim: int,
        problem_seed: int = 0,
        hidden_widths: Sequence[int] = (256, 256),
        noise_std: float | None = None,
        negate: bool = False,
        dtype: torch.dtype = torch.double,
    ) -> None:
        if not is_integer(dim, minimum=2):
            raise ValueError(f"RandomTanhNetwork requires an integer dim >= 2, got {dim!r}.")
        if not is_integer(problem_seed, minimum=0):
            raise ValueError(f"problem_seed must be a non-negative int, got {problem_seed!r}.")
        hidden_widths = tuple(hidden_widths)
        if not hidden_widths or not all(is_integer(width, minimum=1) for width in hidden_widths):
            raise ValueError(
                f"hidden_widths must be a non-empty sequence of positive ints, got {hidden_widths}."
            )
        self.dim = int(dim)
        self.problem_seed = int(problem_seed)
        self.hidden_widths = tuple(int(width) for width in hidden_widths)
        self.continuous_inds = list(range(self.dim))
        self._bounds = [(0.0, 1.0)] * self.dim
        layers = _draw_tanh_mlp(self.dim, self.hidden_widths, self.problem_seed)
        minimizer, maximizer = _search_extrema(layers, self.dim, self.problem_seed)
        self._optimizers = [tuple(minimizer.tolist())]
        super().__init__(noise_std=noise_std, negate=negate, dtype=dtype)
        for index, (weight, bias) in enumerate(layers):
            self.register_buffer(f"weight_{index}", weight)
            self.register_buffer(f"bias_{index}", bias)
        self._num_layers = len(layers)
        # Evaluated on the d-tensors themselves, as BOProblem does, so that
        # f(maximizer) == max_value holds bit for bit.
        self._optimal_value = self._evaluate_true(minimizer).item()
        self.maximizer = maximizer
        self.max_value = self._evaluate_true(maximizer).item()

    def _layers(self, device: torch.device) -> Layers:
        r"""The float64 ``(weight, bias)`` pairs on ``device``."""
        return [
            (
                getattr(self, f"weight_{index}").to(device=device, dtype=torch.float64),
                getattr(self, f"bias_{index}").to(device=device, dtype=torch.float64),
            )
            for index in range(self._num_layers)
        ]

    def _evaluate_true(self, X: Tensor) -> Tensor:
        r"""``f(X) = -net(X)`` for a ``batch_shape x d`` tensor; returns ``batch_shape``."""
        values = _negated_network(self._layers(X.device), X.to(torch.float64))
        return values.to(X.dtype)


def ackley_maximizer(dim: int) -> list[float]:
    r"""Maximiser ``(x*, ..., x*)``, ``x* = 32.500414...``, of Ackley on its box.

    With ``s = mean_i x_i^2`` and ``c = mean_i cos(2 pi x_i)``, Ackley is
    ``f = F(s, c) = h(s) + k(c) + a + e`` with ``a = 20``, ``b = 0.2``,
    ``h(s) = -a exp(-b sqrt(s))`` (increasing and concave) and ``k(c) = -exp(c)``
    (decreasing and concave), so ``F`` is concave and its maximum does not depend on ``d``.

    *All coordinates equal.* ``g(x) = F(x^2, cos 2 pi x)`` is even and at most
    ``a + e - exp(-1) - a exp(-b x) < g(32.5)`` for ``|x| <= 32`` and at most
    ``a + e - 1 < g(32.5)`` where ``cos 2 pi x >= 0`` (``|x| in [32, 32.25]`` or
    ``[32.75, 32.768]``); on ``[32.25, 32.5]`` both parts of ``g'`` are positive. On
    ``[32.5, 32.75]``, with ``2 pi x = 65 pi + u``,
    ``g' = a b exp(-b x) - 2 pi exp(-cos u) sin u``, where the first term decreases and
    the second increases in ``u in [0, pi/2]``: ``g`` is unimodal there and Brent's
    bounded search finds ``x*`` (to ``1e-10``).

    *Any point.* Let ``p = (s, c)`` and ``p* = (x*^2, cos 2 pi x*)``. By concavity
    ``F(p) <= F(p*) + alpha (s - s*) + beta (c - c*) = F(p*) + mean_i L(x_i) - L(x*)``
    with ``alpha = h'(s*) > 0``, ``beta = k'(c*) < 0`` and
    ``L(x) = alpha x^2 + beta cos 2 pi x``. ``L'(x*) = g'(x*) = 0``, and ``L`` is
    maximal at ``x*``: ``L <= alpha 32.5^2 - beta < L(x*)`` for ``|x| <= 32.5``,
    ``L <= alpha 32.768^2 < L(x*)`` where ``cos 2 pi x >= 0``, and on ``[32.5, 32.75]``
    ``L`` is concave up to ``u = 1.5`` and decreasing beyond (``L' <= 2 alpha 32.75
    + 2 pi beta sin 1.5 < 0``). Hence ``f <= F(p*) = g(x*)`` everywhere, with equality at
    ``(x*, ..., x*)``; ``tests/problems/test_scale.py`` checks ``g`` and ``L`` on dense grids.

    ``max f = 22.3203348484...``, ``1.57e-3`` below the cruder bound
    ``a + e - exp(-1) - a exp(-b 32.768)``.

    Args:
        dim: The input dimension ``d``.

    Returns:
        The ``d`` coordinates of the maximiser.
    """
    a, b = 20.0, 0.2

    def negative_g(x: float) -> float:
        return a * math.exp(-b * x) + math.exp(math.cos(2 * math.pi * x)) - a - math.e

    result = minimize_scalar(
        negative_g, bounds=(32.5, 32.75), method="bounded", options={"xatol": 1e-10}
    )
    return [float(result.x)] * dim


def rastrigin_maximizer(dim: int) -> list[float]:
    r"""Maximiser ``(x*, ..., x*)``, ``x* = 4.52299366...``, of Rastrigin on its box.

    Rastrigin is separable, ``f = sum_i r(x_i)`` with ``r(x) = x^2 - 10 cos(2 pi x) + 10``
    even, so ``max f = d max r``. ``r(x) <= x^2 + 20 <= 39.36 < r(4.5) = 40.25`` for
    ``|x| <= 4.4``, and ``r(x) <= 5.12^2 - 10 cos(2 pi 0.74) + 10 < 36.9`` for
    ``|x| in [4.74, 5.12]`` (there ``cos 2 pi x >= cos(2 pi 0.74)``). On ``[4.4, 4.74]``
    ``r'' = 2 + 40 pi^2 cos 2 pi x < 0`` (``cos 2 pi x <= cos(2 pi 0.74) < -2 / (40 pi^2)``),
    so ``r`` is strictly concave and Brent's bounded search finds its unique maximiser
    ``x*`` (to ``1e-10``): ``max r = 40.3532901938...``.

    Args:
        dim: The input dimension ``d``.

    Returns:
        The ``d`` coordinates of the maximiser.
    """

    def negative_r(x: float) -> float:
        return -(x * x - 10.0 * math.cos(2 * math.pi * x) + 10.0)

    result = minimize_scalar(
        negative_r, bounds=(4.4, 4.74), method="bounded", options={"xatol": 1e-10}
    )
    return [float(result.x)] * dim
