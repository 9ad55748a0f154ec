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


def member_indices_from_normals(weights: Tensor, normals: Tensor) -> Tensor:
    r"""Map standard-normal draws to member indices by the inverse CDF of ``weights``.

    A BoTorch normal sampler (``SobolQMCNormalSampler``, ``IIDNormalSampler``) hands a
    posterior standard-normal base samples. For a posterior over a weighted finite set
    of members, each draw ``z`` becomes the uniform ``u = Phi(z)`` and then the member
    whose cumulative weight interval holds ``u``. Member ``k`` is picked with
    probability ``w_k``; the sampler's seed fixes the picks; and Sobol draws, being
    stratified in each coordinate, use every member about ``N w_k`` times, as
    systematic resampling does.

    Args:
        weights: An ``s``-dim tensor of non-negative member weights (need not be
            normalised).
        normals: Standard-normal draws of any shape.

    Returns:
        A long tensor of ``normals``' shape with indices in ``[0, s)``.
    """
    probabilities = (weights / weights.sum()).detach().to(normals.device, torch.float64)
    uniforms = torch.special.ndtr(normals.detach().to(torch.float64))
    indices = torch.searchsorted(probabilities.cumsum(0), uniforms.contiguous(), right=True)
    return indices.clamp_max(probabilities.numel() - 1)


def select_members(values: Tensor, indices: Tensor, sample_shape: torch.Size) -> Tensor:
    r"""The members ``indices`` of ``values``, one per sample.

    Args:
        values: A ``batch_shape x s x q x m`` tensor, member ``k`` at index ``k`` of
            dimension ``-3``.
        indices: Member indices, either of shape ``sample_shape`` (the same member for
            every batch element) or ``sample_shape x batch_shape`` (one per element).
        sample_shape: The sample shape.

    Returns:
        A ``sample_shape x batch_shape x q x m`` tensor.
    """
    batch_shape = values.shape[:-3]
    event_shape = values.shape[-2:]
    output_shape = sample_shape + batch_shape + event_shape
    if indices.shape == sample_shape:
        selected = values.index_select(-3, indices.reshape(-1))
        return selected.movedim(len(batch_shape), 0).reshape(output_shape)
    num_batch = batch_shape.numel()
    flat_values = values.reshape(num_batch, *values.shape[-3:])
    flat_indices = indices.reshape(-1, num_batch)
    selected = flat_values[torch.arange(num_batch, device=values.device), flat_indices]
    return selected.reshape(output_shape)


def shared_member_indices(indices: Tensor, sample_shape: torch.Size) -> Tensor:
    r"""``indices`` (``sample_shape x batch_shape``) as one index per sample
    (``sample_shape``) when every batch element holds the same index, as the t-batch
    collapsed base samples of BoTorch's samplers do; otherwise ``indices`` unchanged."""
    flat = indices.reshape(sample_shape.numel(), -1)
    if flat.shape[-1] <= 1 or bool((flat == flat[:, :1]).all()):
        return flat[:, 0].reshape(sample_shape)
    return indices
