"""Small BoTorch models shared by the acquisition tests (no fitting, deterministic)."""

from __future__ import annotations

import gpytorch
import pytest
import torch
from botorch.models import SingleTaskGP
from botorch.models.ensemble import EnsembleModel
from botorch.sampling.index_sampler import IndexSampler
from torch import Tensor

# The GP the acquisition tests share is float64: BoTorch's GPs expect double precision
# (they warn on float32 data), and its acquisition values are compared with scipy and
# closed forms at float64 tolerances. The ensemble models below take any dtype.
DTYPE = torch.float64


class LinearEnsembleModel(EnsembleModel):
    r"""An ensemble of ``s`` affine functions ``f_k(x) = w_kᵀx + b_k`` (one output)."""

    def __init__(self, weights: Tensor, biases: Tensor) -> None:
        super().__init__()
        self.member_weights = weights  # s x d
        self.member_biases = biases  # s
        self._num_outputs = 1

    def forward(self, X: Tensor) -> Tensor:
        values = X @ self.member_weights.transpose(-1, -2) + self.member_biases
        return values.transpose(-1, -2).unsqueeze(-1)  # batch_shape x s x q x 1


class CoordinateEnsembleModel(EnsembleModel):
    r"""Member ``k`` returns the ``k``-th input coordinate: samples are crafted through ``X``."""

    def __init__(self) -> None:
        super().__init__()
        self._num_outputs = 1

    def forward(self, X: Tensor) -> Tensor:
        return X.transpose(-1, -2).unsqueeze(-1)  # batch_shape x d x q x 1


class AllMembersSampler(IndexSampler):
    r"""Deterministic sampler enumerating every ensemble member once (exact ensemble mean)."""

    def _construct_base_samples(self, posterior) -> None:
        members = torch.arange(posterior.ensemble_size, device=posterior.device)
        base_samples = members.reshape(-1, *([1] * len(posterior.batch_shape)))
        self.register_buffer(
            "base_samples", base_samples.expand(self.sample_shape + posterior.batch_shape)
        )


def all_members_sampler(ensemble_size: int) -> AllMembersSampler:
    return AllMembersSampler(sample_shape=torch.Size([ensemble_size]))


def training_points(num_outputs: int = 1) -> tuple[Tensor, Tensor]:
    r"""8 inputs in the unit square (``8 x 2``) and smooth outcomes (``8 x num_outputs``)."""
    generator = torch.Generator().manual_seed(0)
    train_X = torch.rand(8, 2, generator=generator, dtype=DTYPE)
    columns = [torch.sin(3 * train_X).sum(-1), torch.cos(2 * train_X).prod(-1)]
    return train_X, torch.stack(columns[:num_outputs], dim=-1)


def make_gp(num_outputs: int = 1, noise: float = 1e-6) -> SingleTaskGP:
    r"""A 2-d GP on :func:`training_points` with fixed hyperparameters."""
    train_X, train_Y = training_points(num_outputs)
    with gpytorch.settings.min_fixed_noise(double_value=noise / 100):
        model = SingleTaskGP(train_X, train_Y, train_Yvar=torch.full_like(train_Y, noise))
    model.covar_module.lengthscale = 0.4
    model.eval()
    return model


@pytest.fixture
def gp() -> SingleTaskGP:
    return make_gp()


@pytest.fixture
def bounds() -> Tensor:
    return torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=DTYPE)
