"""The small setting every drop-in scenario runs in: toy data, one model per family (the
family's first card, with the card's fast settings, which fit in well under a second),
and a short acquisition optimisation."""

from __future__ import annotations

import warnings
from typing import Any

import torch
from botorch.exceptions.warnings import InputDataWarning, OptimizationWarning
from botorch.fit import fit_gpytorch_mll
from botorch.models.model import Model
from botorch.models.transforms import Normalize, Standardize
from botorch.optim import optimize_acqf
from gpytorch.mlls import ExactMarginalLogLikelihood
from torch import Tensor

from botorch_nn_uq.models import ModelCard, NeuralSurrogateModel
from tests.cards import CARDS, representatives

DIM = 2
BOUNDS = torch.tensor([[0.0] * DIM, [1.0] * DIM], dtype=torch.float64)

#: Family key -> the card that stands for the family in the scenarios (its first card).
FAMILIES: dict[str, ModelCard] = representatives()
#: What a scenario may run on: a family (its first card) or, by its name, any card (a
#: family's first card has the family's key or its own name).
MODELS: dict[str, ModelCard] = {**CARDS, **FAMILIES}


def toy_data(num_outputs: int = 1, dtype: torch.dtype = torch.float64, n: int = 12):
    r"""``n x 2`` inputs in the unit square and ``n x num_outputs`` outcomes."""
    X = torch.rand(n, DIM, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    Y = torch.stack([torch.sin(5 * X).sum(-1), (X - 0.4).pow(2).sum(-1)], dim=-1)
    return X.to(dtype), Y[..., :num_outputs].to(dtype)


def model_class(family: str) -> type:
    r"""The class of the family's card, or of the card named ``family`` (a key of
    :data:`MODELS`; ``SingleTaskGP`` for ``"gp"``)."""
    return MODELS[family].model_class


def family_options(family: str, dtype: torch.dtype = torch.float64) -> dict[str, Any]:
    r"""The fast settings of the family's card, or of the card named ``family`` (and
    NOMU's input box); none for the GP."""
    return MODELS[family].fast_options(BOUNDS.to(dtype))


def constructor_arguments(family: str, train_Y: Tensor) -> dict[str, Any]:
    r"""``Normalize`` and ``Standardize``, as BoTorch's tutorials pass them, and the
    family's options."""
    transforms = {
        "input_transform": Normalize(DIM, bounds=BOUNDS.to(train_Y)),
        "outcome_transform": Standardize(train_Y.shape[-1]),
    }
    return {**transforms, **family_options(family, train_Y.dtype)}


def build(family: str, train_X: Tensor, train_Y: Tensor, **overrides: Any) -> Model:
    r"""An unfitted model of ``family`` (a GP, or the family's neural model)."""
    arguments = {**constructor_arguments(family, train_Y), **overrides}
    return model_class(family)(train_X, train_Y, **arguments)


def fit(family: str, model: Model) -> Model:
    r"""``model`` fitted as its family is: a neural model by ``fit(seed=0)``, the GP by
    its marginal likelihood."""
    if not isinstance(model, NeuralSurrogateModel):
        fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
        return model.eval()
    return model.fit(seed=0)


_FITTED: dict[tuple, Model] = {}


def fitted(family: str, num_outputs: int = 1, dtype: torch.dtype = torch.float64) -> Model:
    r"""The family's model fitted on the toy data, shared by the scenarios (which only
    read it)."""
    key = (family, num_outputs, dtype)
    if key not in _FITTED:
        with warnings.catch_warnings():
            # BoTorch's advice to use float64 with GPs; float32 is what is being checked.
            warnings.simplefilter("ignore", InputDataWarning)
            if dtype == torch.float32:
                # A single-precision marginal-likelihood fit may end its L-BFGS line
                # search "ABNORMAL" (platform-dependent rounding); BoTorch keeps the best
                # parameters and says so with this warning.
                warnings.simplefilter("ignore", OptimizationWarning)
            _FITTED[key] = fit(family, build(family, *toy_data(num_outputs, dtype)))
    return _FITTED[key]


def query_points(*batch: int, dtype: torch.dtype = torch.float64, seed: int = 1) -> Tensor:
    r"""Points in the unit square of shape ``batch x 2``."""
    generator = torch.Generator().manual_seed(seed)
    return torch.rand(*batch, DIM, generator=generator, dtype=torch.float64).to(dtype)


def optimize(acquisition, q: int = 1, **options: Any) -> Tensor:
    r"""A short ``optimize_acqf`` run; checks that it gives ``q`` finite candidates in the
    box and returns them."""
    bounds = BOUNDS.to(options.pop("dtype", torch.float64))
    with warnings.catch_warnings():
        # Ten L-BFGS-B iterations on a rough surface may stop early; the check is that
        # the acquisition runs and gives a finite value at a feasible candidate.
        warnings.simplefilter("ignore", RuntimeWarning)
        candidate, value = optimize_acqf(
            acquisition,
            bounds,
            q=q,
            num_restarts=options.pop("num_restarts", 2),
            raw_samples=options.pop("raw_samples", 16),
            options={"maxiter": 10, **options.pop("options", {})},
            **options,
        )
    assert candidate.shape == (q, DIM) and value.isfinite().all()
    assert ((candidate >= bounds[0]) & (candidate <= bounds[1])).all()
    return candidate
