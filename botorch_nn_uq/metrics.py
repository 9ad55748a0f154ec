"""Test metrics of predictive distributions: negative log-likelihood and RMSE.

All metrics are averages over points (and outputs) of per-point, marginal quantities, as
in the UCI regression protocol of Hernández-Lobato & Adams (2015): correlations between
test points are ignored. The NLL includes the constant ``0.5 log(2 pi)`` and is in the
units of ``y``; for a model with an outcome transform such as ``Standardize`` the
posterior is already in original units, so the NLL is too.

- :func:`gaussian_nll`: the NLL of independent Gaussians ``N(mean, variance)``.
- :func:`mixture_nll`: the NLL of a weighted mixture of Gaussians (exact density, not
  moment matched).
- :func:`predictive_nll`: the NLL of a posterior of one of the package's families.
- :func:`rmse`: the root mean squared error of a point prediction.
- :func:`batch_diversity`: how spread out a batch of BO proposals is.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from botorch.posteriors import Posterior
from botorch.posteriors.ensemble import EnsemblePosterior
from torch import Tensor

from botorch_nn_uq.posteriors.mixture import MixtureOfGaussiansPosterior

__all__ = [
    "BatchDiversity",
    "batch_diversity",
    "gaussian_nll",
    "mixture_nll",
    "predictive_nll",
    "rmse",
]

#: Variances are floored here so that a zero variance gives a large finite NLL
#: instead of ``inf`` or ``nan``.
VARIANCE_FLOOR = 1e-12


def _check_same_shape(names: tuple[str, str], first: Tensor, second: Tensor) -> None:
    if first.shape != second.shape or first.ndim not in (1, 2) or first.numel() == 0:
        raise ValueError(
            f"{names[0]} and {names[1]} must be non-empty `n` or `n x m` tensors of the same "
            f"shape; got {tuple(first.shape)} and {tuple(second.shape)}."
        )


def _floored_variance(variance: Tensor, name: str) -> Tensor:
    if (variance < 0).any():
        raise ValueError(f"{name} must be non-negative; got a minimum of {variance.min().item()}.")
    return variance.clamp_min(VARIANCE_FLOOR)


def _gaussian_log_density(mean: Tensor, variance: Tensor, y: Tensor) -> Tensor:
    return -0.5 * (math.log(2 * math.pi) + variance.log() + (y - mean) ** 2 / variance)


def gaussian_nll(mean: Tensor, variance: Tensor, y: Tensor) -> Tensor:
    r"""The average negative log-likelihood of ``y`` under independent Gaussians.

    ``mean_i 0.5 log(2 pi var_i) + (y_i - mean_i)^2 / (2 var_i)`` over all points and
    outputs.

    Args:
        mean: An ``n x m`` (or ``n``) tensor of predictive means.
        variance: An ``n x m`` (or ``n``) tensor of non-negative predictive variances,
            floored at :data:`VARIANCE_FLOOR`.
        y: An ``n x m`` (or ``n``) tensor of observations.

    Returns:
        A scalar tensor.

    Example:
        >>> gaussian_nll(torch.zeros(3, 1), torch.ones(3, 1), torch.zeros(3, 1))
        tensor(0.9189)
    """
    _check_same_shape(("mean", "y"), mean, y)
    _check_same_shape(("mean", "variance"), mean, variance)
    variance = _floored_variance(variance, "variance")
    return -_gaussian_log_density(mean, variance, y).mean()


def mixture_nll(
    component_means: Tensor, component_variances: Tensor, weights: Tensor, y: Tensor
) -> Tensor:
    r"""The average negative log-likelihood of ``y`` under a mixture of Gaussians.

    ``-log sum_k w_k N(y_i; mu_ki, var_ki)`` per point and output (via ``logsumexp``),
    averaged over all points and outputs. This is the exact mixture density, which is
    generally lower than the NLL of the moment-matched Gaussian.

    Args:
        component_means: An ``s x n x m`` (or ``s x n``) tensor of component means.
        component_variances: An ``s x n x m`` (or ``s x n``) tensor of non-negative
            component variances, floored at :data:`VARIANCE_FLOOR`.
        weights: An ``s``-dim tensor of non-negative component weights with a positive
            sum (normalised here).
        y: An ``n x m`` (or ``n``) tensor of observations.

    Returns:
        A scalar tensor.
    """
    if component_means.shape != component_variances.shape or component_means.ndim < 2:
        raise ValueError(
            "component_means and component_variances must be `s x n x m` (or `s x n`) tensors "
            f"of the same shape; got {tuple(component_means.shape)} and "
            f"{tuple(component_variances.shape)}."
        )
    _check_same_shape(("a component's means", "y"), component_means[0], y)
    num_components = component_means.shape[0]
    if weights.shape != (num_components,):
        raise ValueError(
            f"weights must be a 1-d tensor with one entry per component (s = {num_components}); "
            f"got shape {tuple(weights.shape)}."
        )
    if (weights < 0).any() or not weights.sum() > 0:
        raise ValueError("weights must be non-negative with a positive sum.")
    variances = _floored_variance(component_variances, "component_variances")
    log_weights = (weights / weights.sum()).log().to(component_means)
    log_weights = log_weights.reshape(-1, *([1] * y.ndim))
    log_density = _gaussian_log_density(component_means, variances, y.unsqueeze(0))
    return -torch.logsumexp(log_weights + log_density, dim=0).mean()


def predictive_nll(posterior: Posterior, y: Tensor) -> Tensor:
    r"""The average negative log-likelihood of ``y`` under a predictive posterior.

    Dispatches on the posterior family:

    - :class:`~botorch_nn_uq.posteriors.MixtureOfGaussiansPosterior` (deep ensembles with a
      Gaussian head, MC dropout with ``observation_noise=True``): :func:`mixture_nll` of
      the exact mixture.
    - BoTorch ``EnsemblePosterior`` (including
      :class:`~botorch_nn_uq.posteriors.FunctionEnsemblePosterior`): a finite set of
      functions has no density, so this raises; ask the model for
      ``posterior(X, observation_noise=True)``.
    - Any other posterior with ``mean`` and ``variance``
      (:class:`~botorch_nn_uq.posteriors.GaussianMarginalPosterior`, BoTorch's GP
      posteriors): :func:`gaussian_nll` of the marginals.

    Args:
        posterior: A posterior over ``n`` points (``q = n``, no batch dimensions) and
            ``m`` outputs, i.e. with ``n x m`` marginals (mixture components ``s x n x m``).
            It must include the observation noise to be a predictive distribution of ``y``.
        y: An ``n x m`` tensor of observations.

    Returns:
        A scalar tensor.

    Example:
        >>> posterior = model.posterior(test_X, observation_noise=True)
        >>> predictive_nll(posterior, test_Y)
    """
    if isinstance(posterior, EnsemblePosterior):
        raise ValueError(
            f"A {type(posterior).__name__} is a finite set of noise-free functions and has no "
            "density; call model.posterior(X, observation_noise=True) to get the predictive "
            "mixture of Gaussians."
        )
    if isinstance(posterior, MixtureOfGaussiansPosterior):
        if posterior.component_means.ndim != 3:
            raise ValueError(
                "predictive_nll expects a mixture over `n x m` marginals (components "
                f"`s x n x m`); got components of shape {tuple(posterior.component_means.shape)}."
            )
        return mixture_nll(
            posterior.component_means, posterior.component_variances, posterior.weights, y
        )
    try:
        mean, variance = posterior.mean, posterior.variance
    except NotImplementedError as error:
        raise TypeError(
            f"predictive_nll needs a posterior with a mean and a variance or a "
            f"MixtureOfGaussiansPosterior; got {type(posterior).__name__}."
        ) from error
    if mean.ndim != 2:
        raise ValueError(
            f"predictive_nll expects `n x m` marginals (no batch dimensions); got a mean of "
            f"shape {tuple(mean.shape)}."
        )
    return gaussian_nll(mean, variance, y)


def rmse(mean: Tensor, y: Tensor) -> Tensor:
    r"""The root mean squared error ``sqrt(mean_i (mean_i - y_i)^2)`` over all points and
    outputs.

    Args:
        mean: An ``n x m`` (or ``n``) tensor of point predictions.
        y: An ``n x m`` (or ``n``) tensor of observations.

    Returns:
        A scalar tensor.
    """
    _check_same_shape(("mean", "y"), mean, y)
    return (mean - y).pow(2).mean().sqrt()


class BatchDiversity(NamedTuple):
    r"""How spread out a batch of proposals is.

    Attributes:
        min_distance: The smallest Euclidean distance between two points of the batch,
            in the unit cube of the bounds (``inf`` for a batch of one point).
        duplicates: The number of points that lie within ``tolerance`` of an earlier
            point of the batch (0: all distinct).
    """

    min_distance: float
    duplicates: int


#: Distances :func:`batch_diversity` computes at once.
DIVERSITY_CHUNK_ENTRIES = 2**22


def batch_diversity(X: Tensor, bounds: Tensor, tolerance: float = 1e-6) -> BatchDiversity:
    r"""The smallest pairwise distance and the number of duplicates of a batch.

    Args:
        X: A ``q x d`` tensor of proposals.
        bounds: A ``2 x d`` tensor of bounds; distances are measured after mapping the
            box to the unit cube, so every coordinate counts alike.
        tolerance: Two points closer than this (in the unit cube) are duplicates.

    Returns:
        A :class:`BatchDiversity`.

    Example:
        >>> bounds = torch.tensor([[0.0, 0.0], [2.0, 2.0]])
        >>> batch_diversity(torch.tensor([[0.0, 0.0], [0.0, 0.0], [2.0, 0.0]]), bounds)
        BatchDiversity(min_distance=0.0, duplicates=1)
    """
    if X.ndim != 2 or bounds.shape != (2, X.shape[-1]):
        raise ValueError(
            f"X must be q x d and bounds 2 x d; got {tuple(X.shape)} and {tuple(bounds.shape)}."
        )
    if X.shape[0] < 2:
        return BatchDiversity(math.inf, 0)
    unit = (X - bounds[0]) / (bounds[1] - bounds[0])
    num_points = unit.shape[0]
    # Rows in chunks, each against the points before it: memory stays at about
    # DIVERSITY_CHUNK_ENTRIES distances whatever q (a full q x q matrix at q = 16,000
    # takes 2 GB).
    chunk = max(1, DIVERSITY_CHUNK_ENTRIES // num_points)
    min_distance, duplicates = math.inf, 0
    for start in range(1, num_points, chunk):
        stop = min(num_points, start + chunk)
        # Exact differences, not the matrix-product shortcut, which puts a duplicate
        # about 1e-8 away from itself.
        distances = torch.cdist(
            unit[start:stop], unit[:stop], compute_mode="donot_use_mm_for_euclid_dist"
        )
        earlier = torch.arange(stop, device=unit.device) < torch.arange(
            start, stop, device=unit.device
        ).unsqueeze(-1)
        distances = distances.masked_fill(~earlier, math.inf)
        nearest = distances.min(dim=-1).values
        min_distance = min(min_distance, float(nearest.min()))
        duplicates += int((nearest <= tolerance).sum())
    return BatchDiversity(min_distance, duplicates)
