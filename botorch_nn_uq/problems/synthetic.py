r"""Synthetic test functions of the NOMU BO suite that BoTorch does not ship.

Both follow the conventions of :mod:`botorch.test_functions.synthetic`: they are
minimisation problems by default, take ``noise_std``, ``negate`` and ``dtype``
(the dtype of the ``bounds`` buffer), evaluate in the dtype/device of the input
and expose ``optimal_value`` and ``optimizers``. Definitions are those of the
Virtual Library of Simulation Experiments (Surjanovic & Bingham,
https://www.sfu.ca/~ssurjano/optimization.html).

Unlike most BoTorch functions they take no custom ``bounds``: the stated optimal
values are only valid on the standard domain.
"""

from __future__ import annotations

import torch
from botorch.test_functions.synthetic import SyntheticTestFunction
from torch import Tensor


def _set_cube_domain(function: SyntheticTestFunction, dim: int, low: float, high: float) -> None:
    r"""Give a ``d``-dimensional test function its dimension and the box ``[low, high]^d``,
    the attributes ``SyntheticTestFunction.__init__`` reads (so call it before that).

    Args:
        function: The test function being initialised.
        dim: The input dimension ``d >= 1``.
        low: The lower bound of every input.
        high: The upper bound of every input.

    Raises:
        ValueError: If ``dim < 1``.
    """
    if dim < 1:
        raise ValueError(f"{type(function).__name__} requires dim >= 1, got {dim}.")
    function.dim = dim
    function.continuous_inds = list(range(dim))
    function._bounds = [(low, high) for _ in range(dim)]


class GFunction(SyntheticTestFunction):
    r"""G-function (Sobol' g-function) on ``[0, 1]^d``.

    .. math::

        f(x) = \prod_{i=1}^d \frac{|4 x_i - 2| + a_i}{1 + a_i},
        \qquad a_i = \frac{i - 2}{2}.

    With these ``a_i`` the first factor ``(|4 x_1 - 2| - 1/2) / (1/2)`` ranges over
    ``[-1, 3]`` and is negative around ``x_1 = 1/2``, while every other factor
    ``g_i(t) = (t + a_i) / (1 + a_i)``, ``t = |4 x_i - 2| in [0, 2]``, is non-negative
    and maximal at ``t = 2`` (``x_i in {0, 1}``). Hence the global minimum is

    .. math::

        f^* = -\prod_{i=2}^d \frac{2 + a_i}{1 + a_i}
            = -2 \prod_{i=3}^d \frac{i + 2}{i} = -\frac{(d + 1)(d + 2)}{6},

    attained at ``x_1 = 1/2`` and any ``x_i in {0, 1}`` for ``i >= 2`` (``2^(d-1)``
    minimisers; ``optimizers`` lists the one with ``x_i = 0``). ``f >= f^*`` because
    ``f < 0`` requires the first factor to be negative, hence in ``[-1, 0)``.

    Example:
        >>> g = GFunction(dim=5)
        >>> g(torch.tensor([[0.5, 0.0, 0.0, 0.0, 0.0]]))  # == g.optimal_value
    """

    # The function has kinks (|.|) at its minimisers, so no zero gradient there.
    _check_grad_at_opt: bool = False

    def __init__(
        self,
        dim: int = 2,
        noise_std: float | None = None,
        negate: bool = False,
        dtype: torch.dtype = torch.double,
    ) -> None:
        r"""
        Args:
            dim: The input dimension ``d >= 1``.
            noise_std: Standard deviation of the observation noise.
            negate: If True, negate the function.
            dtype: The dtype that is used for the bounds of the function.
        """
        _set_cube_domain(self, dim, 0.0, 1.0)
        self._optimizers = [(0.5,) + tuple(0.0 for _ in range(dim - 1))]
        self._optimal_value = -(dim + 1) * (dim + 2) / 6
        super().__init__(noise_std=noise_std, negate=negate, dtype=dtype)

    def coefficients(self) -> list[float]:
        r"""The coefficients ``a_i = (i - 2) / 2`` for ``i = 1, ..., d`` (length ``d``)."""
        return [(i - 2) / 2 for i in range(1, self.dim + 1)]

    def _evaluate_true(self, X: Tensor) -> Tensor:
        r"""Evaluate ``f`` on a ``batch_shape x d`` tensor; returns ``batch_shape``."""
        a = torch.tensor(self.coefficients(), dtype=X.dtype, device=X.device)
        return ((4.0 * X - 2.0).abs().add(a) / (1.0 + a)).prod(dim=-1)


class Perm(SyntheticTestFunction):
    r"""Perm function ``d, beta`` on ``[-d, d]^d``.

    .. math::

        f(x) = \sum_{i=1}^d \Big( \sum_{j=1}^d (j^i + \beta)
               \big( (x_j / j)^i - 1 \big) \Big)^2.

    ``f >= 0`` with its global minimum ``f^* = 0`` at ``x_j = j``. This is the
    "Perm function d, beta" of the Surjanovic-Bingham library, not its
    "Perm function 0, d, beta" (which has ``(j + beta)(x_j^i - j^{-i})`` inside).

    The values grow like ``(d^{d+1})^2``: for ``d >= 16`` they overflow ``float32``.

    Example:
        >>> perm = Perm(dim=5)
        >>> perm(torch.arange(1.0, 6.0, dtype=torch.double))  # tensor(0.)
    """

    _optimal_value = 0.0

    def __init__(
        self,
        dim: int = 2,
        beta: float = 0.5,
        noise_std: float | None = None,
        negate: bool = False,
        dtype: torch.dtype = torch.double,
    ) -> None:
        r"""
        ``dim``, ``noise_std``, ``negate`` and ``dtype`` as in :class:`GFunction`.

        Args:
            beta: The non-negative constant ``beta``; the NOMU suite uses ``0.5``.
        """
        _set_cube_domain(self, dim, -float(dim), float(dim))
        if beta < 0:
            raise ValueError(f"Perm requires beta >= 0, got {beta}.")
        self.beta = beta
        self._optimizers = [tuple(float(j) for j in range(1, dim + 1))]
        super().__init__(noise_std=noise_std, negate=negate, dtype=dtype)

    def _evaluate_true(self, X: Tensor) -> Tensor:
        r"""Evaluate ``f`` on a ``batch_shape x d`` tensor; returns ``batch_shape``."""
        j = torch.arange(1, self.dim + 1, dtype=X.dtype, device=X.device)
        i = j.unsqueeze(-1)  # exponents along a new second-to-last axis
        # (x_j / j)^i and j^i + beta as `batch_shape x d(i) x d(j)` / `d(i) x d(j)`
        ratio_pow = (X / j).unsqueeze(-2).pow(i)
        coef = j.pow(i) + self.beta
        inner = (coef * (ratio_pow - 1.0)).sum(dim=-1)
        return inner.pow(2).sum(dim=-1)
