"""The GP peers of protocol 7 (design note ``peers.md``), as surrogates of the package's
BO registry, so the runners drive them through the same BO core, seeds and initial
designs as every other method. Importing this module registers:

- ``gp-turbo``: the GP of TuRBO-1 (Eriksson et al. 2019; BoTorch's ``turbo_1``
  tutorial): ``SingleTaskGP`` with ``ScaleKernel(MaternKernel(nu=2.5, ard_num_dims=d))``,
  lengthscales constrained to ``[0.005, 4]``, the likelihood's noise to ``[1e-8, 1e-3]``
  (noise-free problems), inputs scaled to the unit cube and standardised outcomes,
  fitted by its marginal likelihood with exact Cholesky factorisations at every size
  (the tutorial's ``max_cholesky_size(inf)``; GPyTorch switches to conjugate gradients
  above 4,096 points otherwise). With the ``+turbo`` option of a runner (TuRBO-1's
  proposer, ``TurboProposer``) it is fitted on the current restart's data only;
- ``gp-warp``: ``SingleTaskGP`` with BoTorch's ``Warp`` input transform (Kumaraswamy CDFs
  learned with the kernel, LogNormal(0, 0.75) priors on their concentrations, median 1:
  the identity), as in BoTorch's warped-GP tutorial; the GP answer to non-stationarity.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import gpytorch
from botorch.models import SingleTaskGP
from botorch.models.model import Model
from botorch.models.transforms import Standardize
from botorch.models.transforms.input import Normalize, Warp
from gpytorch.constraints import Interval
from gpytorch.kernels import MaternKernel, ScaleKernel
from gpytorch.likelihoods import GaussianLikelihood
from gpytorch.priors import LogNormalPrior
from torch import Tensor

from botorch_nn_uq.bo import SURROGATES, SurrogateSpec, register_surrogate

#: TuRBO-1's lengthscale and noise constraints.
TURBO_LENGTHSCALE_BOUNDS = (0.005, 4.0)
TURBO_NOISE_BOUNDS = (1e-8, 1e-3)


def turbo_gp(train_X: Tensor, train_Y: Tensor, bounds: Tensor) -> SingleTaskGP:
    r"""TuRBO-1's GP on ``train_X`` (``n x d``, problem units) and ``train_Y`` (``n x 1``,
    to maximise), unfitted."""
    dim = train_X.shape[-1]
    kernel = ScaleKernel(
        MaternKernel(
            nu=2.5, ard_num_dims=dim, lengthscale_constraint=Interval(*TURBO_LENGTHSCALE_BOUNDS)
        )
    )
    return SingleTaskGP(
        train_X,
        train_Y,
        covar_module=kernel,
        likelihood=GaussianLikelihood(noise_constraint=Interval(*TURBO_NOISE_BOUNDS)),
        input_transform=Normalize(dim, bounds=bounds),
        outcome_transform=Standardize(1),
    )


def warped_gp(train_X: Tensor, train_Y: Tensor, bounds: Tensor) -> SingleTaskGP:
    r"""``SingleTaskGP`` with BoTorch's ``Warp`` input transform on ``train_X`` (``n x d``,
    problem units; ``Warp`` scales them to the unit cube with ``bounds``), unfitted."""
    dim = train_X.shape[-1]
    prior_scale = math.sqrt(0.75)
    warp = Warp(
        d=dim,
        indices=list(range(dim)),
        concentration1_prior=LogNormalPrior(0.0, prior_scale),
        concentration0_prior=LogNormalPrior(0.0, prior_scale),
        bounds=bounds,
    )
    return SingleTaskGP(train_X, train_Y, input_transform=warp, outcome_transform=Standardize(1))


def with_exact_cholesky(spec: SurrogateSpec) -> SurrogateSpec:
    r"""``spec`` whose fits use exact Cholesky factorisations at every data size."""

    def build(*args: Any, **kwargs: Any) -> Model:
        with gpytorch.settings.max_cholesky_size(math.inf):
            return spec.build(*args, **kwargs)

    return dataclasses.replace(spec, build=build)


def register() -> None:
    r"""Register ``gp-turbo`` and ``gp-warp`` (once per process)."""
    if "gp-turbo" not in SURROGATES:
        spec = SurrogateSpec.from_constructor(
            "gp-turbo",
            "TuRBO-1's GP: Matern-5/2 ARD, lengthscales in [0.005, 4], noise in [1e-8, 1e-3]",
            turbo_gp,
        )
        register_surrogate(with_exact_cholesky(spec))
    if "gp-warp" not in SURROGATES:
        register_surrogate(
            SurrogateSpec.from_constructor(
                "gp-warp",
                "SingleTaskGP with BoTorch's Warp input transform (Kumaraswamy CDFs)",
                warped_gp,
            )
        )


register()
