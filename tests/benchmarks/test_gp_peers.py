"""The GP peers of protocol 7: TuRBO-1's GP with the tutorial's kernel, constraints and
exact Cholesky fits; the GP with BoTorch's Warp input transform."""

from __future__ import annotations

import math

import gpytorch
import torch
from botorch.models.transforms.input import Warp
from gpytorch.kernels import MaternKernel

from benchmarks.gp_peers import with_exact_cholesky
from botorch_nn_uq.bo import SURROGATES, SurrogateSpec


def test_turbo_gp_has_the_tutorials_kernel_and_constraints() -> None:
    X = torch.rand(12, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    Y = (X - 0.5).pow(2).sum(-1, keepdim=True)
    bounds = torch.tensor([[0.0] * 3, [1.0] * 3], dtype=torch.float64)
    model = SURROGATES["gp-turbo"].build(X, Y, bounds, seed=0)
    matern = model.covar_module.base_kernel
    assert isinstance(matern, MaternKernel) and matern.nu == 2.5
    assert matern.lengthscale.shape == (1, 3)
    assert (matern.lengthscale >= 0.005).all() and (matern.lengthscale <= 4.0).all()
    assert 1e-8 <= model.likelihood.noise.item() <= 1e-3
    warped = SURROGATES["gp-warp"].build(X, Y, bounds, seed=0)
    assert isinstance(warped.input_transform, Warp)


def test_exact_cholesky_holds_during_the_fit_only() -> None:
    sizes, default = [], gpytorch.settings.max_cholesky_size.value()

    def build(*args, **kwargs):
        sizes.append(gpytorch.settings.max_cholesky_size.value())

    with_exact_cholesky(SurrogateSpec("probe", "records the setting", build)).build()
    assert sizes == [math.inf]
    assert gpytorch.settings.max_cholesky_size.value() == default < math.inf
