"""Stacking posteriors of the same family along new batch dimensions.

A batch of models (e.g. the fantasy models of
:class:`~botorch_nn_uq.models.fantasy.FantasyModel`) evaluates each model on its own
slice of the inputs; :func:`stack_posteriors` joins the per-model posteriors into one
posterior of the same family, so that samplers and acquisition functions see a single
batched posterior.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from botorch.posteriors import Posterior
from torch import Tensor

from botorch_nn_uq.posteriors.ensemble import FunctionEnsemblePosterior
from botorch_nn_uq.posteriors.gaussian import GaussianMarginalPosterior
from botorch_nn_uq.posteriors.mixture import MixtureOfGaussiansPosterior


def _stack(tensors: Sequence[Tensor], batch_shape: torch.Size, dim: int) -> Tensor:
    return torch.stack(list(tensors), dim=dim).unflatten(dim, batch_shape)


def _same_weights(weights: Sequence[Tensor]) -> bool:
    first = weights[0]
    return all(w.shape == first.shape and torch.equal(w, first) for w in weights[1:])


def stack_posteriors(
    posteriors: Sequence[Posterior], batch_shape: torch.Size, dim: int = 0
) -> Posterior:
    r"""Stack posteriors into one whose batch dimensions ``batch_shape`` are inserted at
    batch position ``dim``.

    Posteriors of one family with the same member weights stay in that family, exactly:
    :class:`FunctionEnsemblePosterior` (functions stacked; MC samples still pick the
    same function index for every batch element) and
    :class:`MixtureOfGaussiansPosterior` (members stacked) and
    :class:`GaussianMarginalPosterior`. Any other combination (different families or
    member weights, or a BoTorch posterior such as the ``TransformedPosterior`` of a
    non-linear outcome transform) becomes the :class:`GaussianMarginalPosterior` of the
    stacked means and variances: a moment-matched approximation whose MC samples are
    independent across points.

    Args:
        posteriors: ``batch_shape.numel()`` posteriors, each over ``b x q x m`` outputs
            with the same ``b`` (any number of batch dimensions), in row-major order of
            ``batch_shape``.
        batch_shape: The new batch dimensions.
        dim: Where the new dimensions go among the batch dimensions ``b`` (0: in front).

    Returns:
        A posterior over ``b[:dim] x batch_shape x b[dim:] x q x m`` outputs.

    Example:
        >>> parts = [GaussianMarginalPosterior(torch.zeros(3, 1), torch.ones(3, 1))] * 6
        >>> stack_posteriors(parts, torch.Size([2, 3])).mean.shape
        torch.Size([2, 3, 3, 1])
    """
    batch_shape = torch.Size(batch_shape)
    if len(posteriors) != batch_shape.numel() or not posteriors:
        raise ValueError(
            f"stack_posteriors needs batch_shape.numel() = {batch_shape.numel()} posteriors "
            f"(at least one); got {len(posteriors)}."
        )
    shapes = {tuple(posterior.mean.shape) for posterior in posteriors}
    if len(shapes) != 1:
        raise ValueError(f"The posteriors must have equal shapes; got {sorted(shapes)}.")
    num_batch_dims = posteriors[0].mean.ndim - 2
    if not 0 <= dim <= num_batch_dims:
        raise ValueError(f"dim must be in [0, {num_batch_dims}]; got {dim}.")
    family = type(posteriors[0])
    same_family = all(type(posterior) is family for posterior in posteriors)
    if same_family and family is FunctionEnsemblePosterior:
        weights = [posterior.weights for posterior in posteriors]
        if _same_weights(weights):
            values = _stack([posterior.values for posterior in posteriors], batch_shape, dim)
            return FunctionEnsemblePosterior(values, weights[0])
    if same_family and family is MixtureOfGaussiansPosterior:
        weights = [posterior.weights for posterior in posteriors]
        if _same_weights(weights):
            return MixtureOfGaussiansPosterior(
                _stack([p.component_means for p in posteriors], batch_shape, dim),
                _stack([p.component_variances for p in posteriors], batch_shape, dim),
                weights[0],
            )
    return GaussianMarginalPosterior(
        _stack([posterior.mean for posterior in posteriors], batch_shape, dim),
        _stack([posterior.variance for posterior in posteriors], batch_shape, dim),
    )
