"""Mixture-of-Gaussians posterior family with the aleatoric / epistemic split.

Each ensemble member ``k`` (weight ``w_k``, weights summing to one) predicts a Gaussian
``N(mu_k, sigma_k^2)``. By the law of total variance the mixture has

``mean = sum_k w_k mu_k``,
``variance = sum_k w_k sigma_k^2 (aleatoric) + sum_k w_k (mu_k - mean)^2 (epistemic)``,

with divisor one (weights summing to one), i.e. the moments of the mixture itself.

Acquisitions that need a Gaussian (``qMaxValueEntropy``'s noisy observations read
``posterior.distribution``) see the MOMENT-MATCHED Gaussian of the mixture
(:meth:`MixtureOfGaussiansPosterior.moment_matched_posterior`).
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

import torch
from botorch.exceptions.errors import UnsupportedError
from botorch.posteriors.gpytorch import GPyTorchPosterior
from botorch.posteriors.posterior import Posterior
from botorch.sampling.base import MCSampler
from botorch.sampling.get_sampler import GetSampler
from gpytorch.distributions import MultitaskMultivariateNormal, MultivariateNormal
from torch import Tensor

from botorch_nn_uq.compat import is_linear
from botorch_nn_uq.posteriors.gaussian import min_variance
from botorch_nn_uq.posteriors.member_indices import (
    base_samples_are_stale,
    systematic_member_indices,
)

if TYPE_CHECKING:
    from botorch.models.transforms.outcome import OutcomeTransform


class MixtureOfGaussiansPosterior(Posterior):
    r"""A weighted mixture of Gaussians, one per ensemble member, over ``q`` points.

    A sample picks one member (the same for all ``q`` points and outputs: samples are
    joint across the q-batch through the member) and adds that member's Gaussian noise,
    independently per point and output.

    BoTorch's normal samplers (``SobolQMCNormalSampler``, ``IIDNormalSampler``) and
    ``distribution`` see the moment-matched Gaussian (:meth:`moment_matched_posterior`),
    an approximation of the mixture; ``get_sampler`` returns the exact
    :class:`MixtureSampler`.

    Args:
        component_means: A ``batch_shape x s x q x m`` tensor of member means.
        component_variances: A ``batch_shape x s x q x m`` tensor of non-negative member
            (aleatoric) variances.
        weights: An optional ``s``-dim tensor of member weights, normalised here;
            uniform if omitted.

    Example:
        >>> posterior = MixtureOfGaussiansPosterior(torch.randn(5, 3, 1), torch.ones(5, 3, 1))
        >>> posterior.variance.shape, posterior.epistemic_variance.shape
        (torch.Size([3, 1]), torch.Size([3, 1]))
    """

    def __init__(
        self,
        component_means: Tensor,
        component_variances: Tensor,
        weights: Tensor | None = None,
    ) -> None:
        if component_means.ndim < 3 or component_means.shape != component_variances.shape:
            raise ValueError(
                "component_means and component_variances must be `batch_shape x s x q x m` "
                f"tensors of the same shape; got {tuple(component_means.shape)} and "
                f"{tuple(component_variances.shape)}."
            )
        num_members = component_means.shape[-3]
        if weights is None:
            weights = torch.ones(
                num_members, dtype=component_means.dtype, device=component_means.device
            )
        if weights.ndim != 1 or weights.shape[0] != num_members:
            raise ValueError(
                f"weights must be a 1-d tensor with one entry per member (s = {num_members}); "
                f"got shape {tuple(weights.shape)}."
            )
        if (weights < 0).any() or weights.sum() <= 0:
            raise ValueError("weights must be non-negative with a positive sum.")
        self.component_means = component_means
        self.component_variances = component_variances.clamp_min(0.0)
        self.weights = (weights / weights.sum()).to(component_means)

    @property
    def ensemble_size(self) -> int:
        r"""The number of mixture components ``s``."""
        return self.component_means.shape[-3]

    @property
    def batch_shape(self) -> torch.Size:
        r"""The batch shape of the posterior (without the member dimension)."""
        return self.component_means.shape[:-3]

    @property
    def device(self) -> torch.device:
        return self.component_means.device

    @property
    def dtype(self) -> torch.dtype:
        return self.component_means.dtype

    def _weighted_sum(self, values: Tensor) -> Tensor:
        return (self.weights[:, None, None] * values).sum(dim=-3)

    @property
    def mean(self) -> Tensor:
        r"""The ``batch_shape x q x m`` mixture mean ``sum_k w_k mu_k``."""
        return self._weighted_sum(self.component_means)

    @property
    def aleatoric_variance(self) -> Tensor:
        r"""The ``batch_shape x q x m`` expected member variance ``sum_k w_k sigma_k^2``."""
        return self._weighted_sum(self.component_variances)

    @property
    def epistemic_variance(self) -> Tensor:
        r"""The ``batch_shape x q x m`` spread of member means ``sum_k w_k (mu_k - mean)^2``."""
        return self._weighted_sum((self.component_means - self.mean.unsqueeze(-3)) ** 2)

    @property
    def variance(self) -> Tensor:
        r"""The ``batch_shape x q x m`` total variance (aleatoric + epistemic)."""
        return self.aleatoric_variance + self.epistemic_variance

    def _extended_shape(self, sample_shape: torch.Size = torch.Size()) -> torch.Size:  # noqa: B008
        return sample_shape + self.batch_shape + self.component_means.shape[-2:]

    def moment_matched_posterior(self) -> GPyTorchPosterior:
        r"""The Gaussian with the mixture's mean and covariance, joint over the ``q``
        points and ``m`` outputs.

        The covariance is the mixture's own: ``sum_k w_k (mu_k - mean)(mu_k - mean)^T``
        over the flattened ``q x m`` values (a member is shared by all points and
        outputs, so they are correlated) plus the diagonal of expected member variances,
        floored at :func:`~botorch_nn_uq.posteriors.min_variance` to stay positive
        definite. Only the shape is approximate: a mixture of few members far apart is
        multi-modal, the Gaussian is not.

        Returns:
            A ``GPyTorchPosterior`` over ``batch_shape x q x m``, with a
            ``MultivariateNormal`` for one output and an interleaved
            ``MultitaskMultivariateNormal`` for several (as BoTorch's GPs).
        """
        return self._moment_matched_posterior

    @cached_property
    def _moment_matched_posterior(self) -> GPyTorchPosterior:
        # Cached: qMaxValueEntropy reads the covariance, log-density and entropy in turn.
        mean = self.mean
        deviations = (self.component_means - mean.unsqueeze(-3)).flatten(-2)
        covariance = (deviations * self.weights[:, None]).transpose(-2, -1) @ deviations
        diagonal = self.aleatoric_variance.flatten(-2).clamp_min(min_variance(self.dtype))
        covariance = covariance + torch.diag_embed(diagonal)
        if mean.shape[-1] == 1:
            return GPyTorchPosterior(MultivariateNormal(mean.squeeze(-1), covariance))
        return GPyTorchPosterior(MultitaskMultivariateNormal(mean, covariance, interleaved=True))

    @property
    def distribution(self) -> MultivariateNormal:
        r"""The moment-matched Gaussian (see :meth:`moment_matched_posterior`)."""
        return self.moment_matched_posterior().distribution

    @property
    def mvn(self) -> MultivariateNormal:
        r"""Alias of :attr:`distribution`, as ``GPyTorchPosterior`` has."""
        return self.distribution

    @property
    def base_sample_shape(self) -> torch.Size:
        r"""The shape of a normal base sample of the moment-matched Gaussian."""
        return self.moment_matched_posterior().base_sample_shape

    @property
    def batch_range(self) -> tuple[int, int]:
        r"""The t-batch range of the moment-matched Gaussian's base samples."""
        return self.moment_matched_posterior().batch_range

    def rsample(self, sample_shape: torch.Size | None = None) -> Tensor:
        r"""Draw ``sample_shape x batch_shape x q x m`` samples from the global RNG."""
        sample_shape = torch.Size([1]) if not sample_shape else torch.Size(sample_shape)
        indices = systematic_member_indices(self.weights, sample_shape)
        normal_shape = sample_shape + torch.Size([1] * len(self.batch_shape))
        noise = torch.randn(
            normal_shape + self.component_means.shape[-2:], dtype=self.dtype, device=self.device
        )
        return self.rsample_from_base_samples(sample_shape, noise, indices)

    def rsample_from_base_samples(
        self, sample_shape: torch.Size, base_samples: Tensor, base_indices: Tensor | None = None
    ) -> Tensor:
        r"""Reparameterised samples ``mu_k + sigma_k * eps`` for given base samples.

        Args:
            sample_shape: The sample shape.
            base_samples: Standard-normal ``eps`` of shape ``sample_shape x
                batch_shape' x q x m`` with ``batch_shape'`` broadcastable to the batch
                shape (BoTorch's samplers use ones there so that all batch elements share
                the base samples).
            base_indices: Member indices of shape ``sample_shape`` (shared across the
                batch). ``None`` (BoTorch's normal samplers, which draw no member
                indices): ``base_samples`` are those of :attr:`base_sample_shape` and the
                samples come from the moment-matched Gaussian.

        Returns:
            A ``sample_shape x batch_shape x q x m`` tensor of samples.
        """
        if base_indices is None:
            return self.moment_matched_posterior().rsample_from_base_samples(
                sample_shape, base_samples
            )
        flat_indices = base_indices.reshape(-1)
        batch_ndim = len(self.batch_shape)
        shape = self._extended_shape(sample_shape)
        means = self.component_means.index_select(-3, flat_indices).movedim(batch_ndim, 0)
        stds = self.component_variances.index_select(-3, flat_indices).movedim(batch_ndim, 0)
        return means.reshape(shape) + stds.sqrt().reshape(shape) * base_samples

    def subset_outputs(self, output_indices: list[int]) -> MixtureOfGaussiansPosterior:
        r"""The posterior over the outputs ``output_indices`` only."""
        return MixtureOfGaussiansPosterior(
            self.component_means[..., output_indices],
            self.component_variances[..., output_indices],
            self.weights,
        )

    def add_observation_noise(self, noise_variance: Tensor) -> MixtureOfGaussiansPosterior:
        r"""Add ``noise_variance`` (broadcastable to ``batch_shape x q x m``) to every
        member's variance."""
        marginal_shape = self.batch_shape + self.component_means.shape[-2:]
        return MixtureOfGaussiansPosterior(
            self.component_means,
            self.component_variances + noise_variance.expand(marginal_shape).unsqueeze(-3),
            self.weights,
        )

    def untransform_outcomes(
        self, outcome_transform: OutcomeTransform, X: Tensor | None = None
    ) -> MixtureOfGaussiansPosterior:
        r"""Map the members to original units. Only linear (affine) outcome transforms such
        as ``Standardize`` keep a mixture of Gaussians a mixture of Gaussians."""
        if not is_linear(outcome_transform):
            raise UnsupportedError(
                "A mixture-of-Gaussians posterior requires a linear outcome transform such as "
                f"Standardize; got {type(outcome_transform).__name__}."
            )
        means, variances = outcome_transform.untransform(
            self.component_means, self.component_variances, X=X
        )
        return MixtureOfGaussiansPosterior(means, variances, self.weights)

    def scalarize(self, weights: Tensor, offset: float = 0.0) -> MixtureOfGaussiansPosterior:
        r"""The posterior of ``offset + Y @ weights`` (member outputs are independent)."""
        return MixtureOfGaussiansPosterior(
            offset + self.component_means @ weights.unsqueeze(-1),
            self.component_variances @ (weights**2).unsqueeze(-1),
            self.weights,
        )


class MixtureSampler(MCSampler):
    r"""Deterministic sampler for :class:`MixtureOfGaussiansPosterior`.

    Base samples are member indices of shape ``sample_shape`` (systematic resampling of
    the weights, shared across the batch) and standard normals of shape
    ``sample_shape x 1 x ... x 1 x q x m`` (shared across the batch), both drawn once
    from ``seed`` and redrawn only when the shapes or weights change.

    Args:
        sample_shape: The ``sample_shape`` of the samples to generate.
        seed: The seed of the base samples; ``None`` picks one at random once.
    """

    def forward(self, posterior: MixtureOfGaussiansPosterior) -> Tensor:
        r"""Draw ``sample_shape x batch_shape x q x m`` samples from ``posterior``."""
        self._construct_base_samples(posterior)
        return posterior.rsample_from_base_samples(
            self.sample_shape, self.base_samples, self.base_indices
        )

    def _construct_base_samples(self, posterior: MixtureOfGaussiansPosterior) -> None:
        normal_shape = (
            self.sample_shape
            + torch.Size([1] * len(posterior.batch_shape))
            + posterior.component_means.shape[-2:]
        )
        weights = posterior.weights.detach()
        if base_samples_are_stale(self, normal_shape, weights):
            generator = torch.Generator()
            generator.manual_seed(self.seed)
            noise = torch.randn(normal_shape, generator=generator, dtype=posterior.dtype)
            indices = systematic_member_indices(weights, self.sample_shape, self.seed)
            self.register_buffer("base_samples", noise.to(posterior.device))
            self.register_buffer("base_indices", indices)
            self.register_buffer("_base_weights", weights.clone())
        if (
            self.base_samples.device != posterior.device
            or self.base_samples.dtype != posterior.dtype
        ):
            self.to(device=posterior.device, dtype=posterior.dtype)


@GetSampler.register(MixtureOfGaussiansPosterior)
def _get_sampler_mixture(
    posterior: MixtureOfGaussiansPosterior,
    sample_shape: torch.Size,
    *,
    seed: int | None = None,
) -> MixtureSampler:
    return MixtureSampler(sample_shape=sample_shape, seed=seed)
