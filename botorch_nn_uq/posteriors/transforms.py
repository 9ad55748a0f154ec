"""Applying BoTorch posterior transforms to this package's posterior families."""

from __future__ import annotations

from botorch.acquisition.objective import PosteriorTransform, ScalarizedPosteriorTransform
from botorch.posteriors.posterior import Posterior
from torch import Tensor


def apply_posterior_transform(
    posterior: Posterior, posterior_transform: PosteriorTransform, X: Tensor | None = None
) -> Posterior:
    r"""Apply ``posterior_transform`` to ``posterior``.

    BoTorch's ``ScalarizedPosteriorTransform`` only understands posteriors with a
    ``distribution`` (or ``PosteriorList``); for this package's finite-set and mixture
    posteriors the affine scalarisation is applied to the functions / members directly,
    which is exact. Every other transform is called as BoTorch would call it.

    Args:
        posterior: A posterior over ``batch_shape x q x m``.
        posterior_transform: The transform to apply.
        X: The ``batch_shape x q x d`` (transformed) inputs, for input-dependent transforms.

    Returns:
        The transformed posterior.
    """
    if isinstance(posterior_transform, ScalarizedPosteriorTransform) and hasattr(
        posterior, "scalarize"
    ):
        weights = posterior_transform.weights.to(posterior.mean)
        if weights.shape[-1] != posterior.mean.shape[-1]:
            raise ValueError(
                f"ScalarizedPosteriorTransform has {weights.shape[-1]} weights but the "
                f"posterior has {posterior.mean.shape[-1]} outputs."
            )
        return posterior.scalarize(weights, posterior_transform.offset)
    return posterior_transform(posterior, X=X)
