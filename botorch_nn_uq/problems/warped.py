r"""Non-stationary test functions: a stationary function seen through warped inputs.

:class:`WarpedHartmann` is Hartmann-6 composed with a per-dimension Kumaraswamy inverse
CDF, the problem of BoTorch's warped-GP tutorial: its lengthscales vary across the box,
which a GP with a stationary kernel models poorly unless it learns the warping (BoTorch's
``Warp`` input transform).
"""

from __future__ import annotations

import torch
from botorch.test_functions.synthetic import Hartmann, SyntheticTestFunction
from torch import Tensor
from torch.distributions import Kumaraswamy

#: The seed of BoTorch's warped-GP tutorial, which draws the concentrations.
TUTORIAL_WARPING_SEED = 1234567890


class WarpedHartmann(SyntheticTestFunction):
    r"""Hartmann-6 on warped inputs, ``f(x) = h(K^{-1}(x))`` on ``[0, 1]^6``, minimised.

    ``K`` is a product of Kumaraswamy CDFs ``K_i(x) = 1 - (1 - x^{a_i})^{b_i}``, with
    ``a_i`` (``concentration1``) and then ``b_i`` (``concentration0``) drawn uniformly
    from ``[0.1, 3.1]`` by a generator seeded with ``warping_seed``: with the default
    seed, the warping of BoTorch's warped-GP tutorial. Since ``K`` maps the cube onto
    itself one to one, ``f`` has Hartmann-6's optimal value ``-3.32237`` at
    ``K(x_h^*)``, where ``x_h^*`` is Hartmann-6's minimiser.

    Args:
        warping_seed: Seeds the draw of the concentrations.
        noise_std: Standard deviation of the observation noise.
        negate: If True, negate the function (the tutorial maximises ``-f``).
        dtype: The dtype of the bounds.

    Example:
        >>> f = WarpedHartmann()
        >>> f(torch.tensor(f.optimizers))  # the optimal value, -3.32237
    """

    dim = 6
    continuous_inds = list(range(6))
    _bounds = [(0.0, 1.0)] * 6

    def __init__(
        self,
        warping_seed: int = TUTORIAL_WARPING_SEED,
        noise_std: float | None = None,
        negate: bool = False,
        dtype: torch.dtype = torch.double,
    ) -> None:
        generator = torch.Generator().manual_seed(warping_seed)
        concentration1 = torch.rand(6, generator=generator, dtype=torch.float64) * 3 + 0.1
        concentration0 = torch.rand(6, generator=generator, dtype=torch.float64) * 3 + 0.1
        hartmann = Hartmann(dim=6, dtype=torch.float64)
        minimizer = torch.tensor(hartmann.optimizers[0].tolist(), dtype=torch.float64)
        warped_minimizer = 1 - (1 - minimizer.pow(concentration1)).pow(concentration0)
        self._optimizers = [tuple(warped_minimizer.tolist())]
        self._optimal_value = hartmann.optimal_value
        super().__init__(noise_std=noise_std, negate=negate, dtype=dtype)
        self.hartmann = hartmann
        self.register_buffer("concentration1", concentration1.to(dtype))
        self.register_buffer("concentration0", concentration0.to(dtype))

    def unwarp(self, X: Tensor) -> Tensor:
        r"""``K^{-1}(X)``: the points of Hartmann-6 that ``X`` (``batch_shape x 6``)
        stands for."""
        warping = Kumaraswamy(
            concentration1=self.concentration1.to(X), concentration0=self.concentration0.to(X)
        )
        return warping.icdf(X)

    def _evaluate_true(self, X: Tensor) -> Tensor:
        r"""Evaluate ``f`` on a ``batch_shape x 6`` tensor; returns ``batch_shape``."""
        return self.hartmann.evaluate_true(self.unwarp(X))
