"""Member indices for posteriors over a weighted finite set of members.

Both the finite-set-of-functions and the mixture-of-Gaussians posteriors draw a sample
by picking one member for all ``q`` points; these helpers draw those picks by systematic
resampling and tell a sampler when the picks it holds no longer fit the posterior.
"""

from __future__ import annotations

import torch
from botorch.sampling.base import MCSampler
from torch import Tensor


def systematic_member_indices(
    weights: Tensor, sample_shape: torch.Size, seed: int | None = None
) -> Tensor:
    r"""Draw member indices by systematic (low-variance) resampling of ``weights``.

    With ``N = sample_shape.numel()`` draws, member ``k`` appears ``N w_k`` times up to
    rounding, so with uniform weights and ``N`` a multiple of the ensemble size every
    member appears equally often and the MC average is the exact expectation. The
    single uniform offset and the order of the draws come from ``seed``.

    Args:
        weights: An ``s``-dim tensor of non-negative member weights (need not be
            normalised).
        sample_shape: The shape of the index tensor.
        seed: The seed of the offset and the permutation; ``None`` uses the global RNG.

    Returns:
        A ``sample_shape`` long tensor of indices in ``[0, s)``.
    """
    generator = torch.Generator()
    generator.manual_seed(int(torch.randint(2**62, (1,)).item()) if seed is None else int(seed))
    num_draws = sample_shape.numel()
    probabilities = (weights / weights.sum()).detach().to(device="cpu", dtype=torch.float64)
    offset = torch.rand(1, generator=generator, dtype=torch.float64)
    positions = (offset + torch.arange(num_draws, dtype=torch.float64)) / num_draws
    indices = torch.searchsorted(probabilities.cumsum(0), positions).clamp_max(
        probabilities.numel() - 1
    )
    order = torch.randperm(num_draws, generator=generator)
    return indices[order].reshape(sample_shape).to(weights.device)


def base_samples_are_stale(sampler: MCSampler, shape: torch.Size, weights: Tensor) -> bool:
    r"""Whether ``sampler`` must redraw its base samples: none yet, ``shape`` differs from
    its ``base_samples``' shape, or the posterior's member ``weights`` differ from those
    the indices were drawn for (kept in its ``_base_weights`` buffer)."""
    if sampler.base_samples is None or sampler.base_samples.shape != shape:
        return True
    stored = sampler._base_weights
    return stored.shape != weights.shape or not torch.equal(stored, weights.to(stored))
