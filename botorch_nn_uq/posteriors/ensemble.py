"""Finite-set-of-functions posterior family and its deterministic index sampler.

A surrogate in this family predicts a finite, weighted set of functions (ensemble
member means, a fixed bank of dropout masks, a fixed bank of epistemic indices). One
MC sample is one function evaluated at all ``q`` points, so samples are joint across
the q-batch, which is what q-batch acquisitions such as ``qLogEI`` need.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from botorch.posteriors.ensemble import EnsemblePosterior
from botorch.sampling.base import MCSampler
from botorch.sampling.get_sampler import GetSampler
from torch import Tensor

if TYPE_CHECKING:
    from botorch.models.transforms.outcome import OutcomeTransform

    from botorch_nn_uq.posteriors.mixture import MixtureOfGaussiansPosterior


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


class FunctionEnsemblePosterior(EnsemblePosterior):
    r"""Posterior given by a weighted finite set of functions.

    A subclass of BoTorch's ``EnsemblePosterior`` (so everything that accepts one
    accepts this), with two differences:

    - ``variance`` is the variance of the weighted mixture, ``sum_k w_k (f_k - mean)^2``
      with weights summing to one (BoTorch's parent class reports the unbiased
      reliability-weights estimate instead).
    - MC samples drawn with the registered :class:`EnsembleIndexSampler` use the
      **same member indices for every batch element**, so an MC acquisition value at a
      point does not depend on which other points share its batch; ``optimize_acqf``
      sees one deterministic function.

    Args:
        values: A ``batch_shape x s x q x m`` tensor: function ``k`` evaluated at the
            ``q`` points.
        weights: An optional ``s``-dim tensor of member weights (normalised here);
            uniform if omitted.

    Example:
        >>> posterior = FunctionEnsemblePosterior(torch.randn(5, 16, 3, 1))
        >>> EnsembleIndexSampler(torch.Size([32]), seed=0)(posterior).shape
        torch.Size([32, 5, 3, 1])
    """

    def __init__(self, values: Tensor, weights: Tensor | None = None) -> None:
        if weights is not None:
            if weights.ndim != 1 or weights.shape[0] != values.shape[-3]:
                raise ValueError(
                    f"weights must be a 1-d tensor with one entry per function "
                    f"(s = {values.shape[-3]}); got shape {tuple(weights.shape)}."
                )
            if (weights < 0).any() or weights.sum() <= 0:
                raise ValueError("weights must be non-negative with a positive sum.")
        super().__init__(values=values, weights=weights)

    @property
    def variance(self) -> Tensor:
        r"""The ``batch_shape x q x m`` variance of the weighted mixture of functions."""
        weights = self.weights[..., None, None]
        return (weights * (self.values - self.mean.unsqueeze(-3)) ** 2).sum(dim=-3)

    def rsample(self, sample_shape: torch.Size | None = None) -> Tensor:
        r"""Draw ``sample_shape x batch_shape x q x m`` samples (with gradients), with
        member indices shared across the batch and drawn from the global RNG."""
        sample_shape = torch.Size([1]) if not sample_shape else torch.Size(sample_shape)
        indices = systematic_member_indices(self.weights, sample_shape)
        return self.rsample_from_base_samples(sample_shape, indices)

    def rsample_from_base_samples(self, sample_shape: torch.Size, base_samples: Tensor) -> Tensor:
        r"""Select functions by index.

        Args:
            sample_shape: The sample shape.
            base_samples: Member indices, either of shape ``sample_shape`` (shared
                across the batch, as drawn by :class:`EnsembleIndexSampler`) or of shape
                ``sample_shape x batch_shape`` (BoTorch's ``IndexSampler``).

        Returns:
            A ``sample_shape x batch_shape x q x m`` tensor of samples.
        """
        if base_samples.shape != sample_shape:
            return super().rsample_from_base_samples(sample_shape, base_samples)
        selected = self.values.index_select(-3, base_samples.reshape(-1))
        batch_ndim = len(self.batch_shape)
        return selected.movedim(batch_ndim, 0).reshape(self._extended_shape(sample_shape))

    def subset_outputs(self, output_indices: list[int]) -> FunctionEnsemblePosterior:
        r"""The posterior over the outputs ``output_indices`` only."""
        return FunctionEnsemblePosterior(self.values[..., output_indices], self._weights)

    def add_observation_noise(self, noise_variance: Tensor) -> MixtureOfGaussiansPosterior:
        r"""The predictive posterior of noisy observations: a mixture with one Gaussian
        per function, all with variance ``noise_variance`` (broadcastable to
        ``batch_shape x q x m``)."""
        from botorch_nn_uq.posteriors.mixture import MixtureOfGaussiansPosterior

        marginal_shape = self.values.shape[:-3] + self.values.shape[-2:]
        noise_variance = noise_variance.expand(marginal_shape).unsqueeze(-3)
        return MixtureOfGaussiansPosterior(
            component_means=self.values,
            component_variances=noise_variance.expand_as(self.values),
            weights=self._weights,
        )

    def untransform_outcomes(
        self, outcome_transform: OutcomeTransform, X: Tensor | None = None
    ) -> FunctionEnsemblePosterior:
        r"""Map every function to original outcome units with
        ``outcome_transform.untransform`` (valid for any pointwise transform, including
        non-linear ones such as ``Log``)."""
        values, _ = outcome_transform.untransform(self.values, X=X)
        return FunctionEnsemblePosterior(values, self._weights)

    def scalarize(self, weights: Tensor, offset: float = 0.0) -> FunctionEnsemblePosterior:
        r"""The posterior of ``offset + Y @ weights`` for an ``m``-dim ``weights``."""
        return FunctionEnsemblePosterior(
            offset + self.values @ weights.unsqueeze(-1), self._weights
        )


class EnsembleIndexSampler(MCSampler):
    r"""Deterministic sampler for :class:`FunctionEnsemblePosterior`.

    Base samples are member indices of shape ``sample_shape``, drawn once from
    ``seed`` by systematic resampling of the posterior weights and shared across all
    batch elements; they are redrawn only when the sample shape or the weights change.
    With uniform weights and ``sample_shape.numel()`` a multiple of the ensemble size,
    the MC estimate is the exact expectation over the ensemble.

    Args:
        sample_shape: The ``sample_shape`` of the samples to generate.
        seed: The seed of the index draw; ``None`` picks one at random once.
    """

    def forward(self, posterior: FunctionEnsemblePosterior) -> Tensor:
        r"""Draw ``sample_shape x batch_shape x q x m`` samples from ``posterior``."""
        self._construct_base_samples(posterior)
        return posterior.rsample_from_base_samples(self.sample_shape, self.base_samples)

    def _construct_base_samples(self, posterior: FunctionEnsemblePosterior) -> None:
        weights = posterior.weights.detach()
        if base_samples_are_stale(self, self.sample_shape, weights):
            indices = systematic_member_indices(weights, self.sample_shape, self.seed)
            self.register_buffer("base_samples", indices)
            self.register_buffer("_base_weights", weights.clone())
        if self.base_samples.device != posterior.device:
            self.to(device=posterior.device)

    def _update_base_samples(
        self, posterior: FunctionEnsemblePosterior, base_sampler: MCSampler
    ) -> None:
        r"""No-op, for compatibility with ``CachedCholeskyMCSamplerMixin``: the indices do
        not depend on the number of points."""


@GetSampler.register(FunctionEnsemblePosterior)
def _get_sampler_function_ensemble(
    posterior: FunctionEnsemblePosterior,
    sample_shape: torch.Size,
    *,
    seed: int | None = None,
) -> EnsembleIndexSampler:
    return EnsembleIndexSampler(sample_shape=sample_shape, seed=seed)
