"""One function that fits any model of the package (and BoTorch GPs next to them)."""

from __future__ import annotations

from typing import Any

from botorch.fit import fit_gpytorch_mll
from botorch.models.gpytorch import GPyTorchModel
from botorch.models.model import Model, ModelList
from gpytorch.mlls import ExactMarginalLogLikelihood

from botorch_nn_uq.models.base import NeuralSurrogateModel
from botorch_nn_uq.training.seeding import resolve_seed, seeded


def fit_model(
    model: Model, seed: int | None = None, progress: bool = False, **overrides: Any
) -> Model:
    r"""Fit ``model`` and return it.

    - A :class:`~botorch_nn_uq.models.NeuralSurrogateModel`: ``model.fit(seed, progress,
      **overrides)``.
    - A ``ModelList`` (or ``ModelListGP``): every member is fitted, member ``i`` with
      seed ``seed + i``.
    - A BoTorch GP: its exact marginal likelihood is maximised with
      ``fit_gpytorch_mll`` under the seed (``overrides`` are passed to it).

    Args:
        model: The model to fit.
        seed: Seed of the fit; ``None`` draws one from torch's global RNG.
        progress: Show progress bars for neural models.
        **overrides: Hyperparameter overrides (neural models) or ``fit_gpytorch_mll``
            keyword arguments (GPs).

    Returns:
        The fitted model.

    Example:
        >>> model = fit_model(MCDropout(train_X, train_Y), seed=0)
    """
    seed = resolve_seed(seed)
    if isinstance(model, NeuralSurrogateModel):
        return model.fit(seed=seed, progress=progress, **overrides)
    if isinstance(model, ModelList):
        for index, member in enumerate(model.models):
            fit_model(member, seed=seed + index, progress=progress, **overrides)
        return model
    if isinstance(model, GPyTorchModel):
        with seeded(seed):
            fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model), **overrides)
        return model
    raise TypeError(f"fit_model does not know how to fit a {type(model).__name__}.")
