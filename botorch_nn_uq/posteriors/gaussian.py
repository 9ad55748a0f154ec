"""Gaussian-marginal posterior family: independent Gaussians at every point and output."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from botorch.posteriors.gpytorch import GPyTorchPosterior
from gpytorch import settings
from gpytorch.distributions import MultitaskMultivariateNormal, MultivariateNormal
from linear_operator.operators import DiagLinearOperator
from torch import Tensor

from botorch_nn_uq.compat import is_linear

if TYPE_CHECKING:
    from botorch.models.transforms.outcome import OutcomeTransform
    from botorch.posteriors import Posterior


def min_variance(dtype: torch.dtype) -> float:
    r"""The variance floor for ``dtype``: GPyTorch's own minimum (1e-10 in float64,
    1e-6 in float32), so the diagonal covariance stays positive definite and GPyTorch
    reports the same variance as the posterior."""
    return settings.min_variance.value(dtype)


class GaussianMarginalPosterior(GPyTorchPosterior):
    r"""A ``GPyTorchPosterior`` with a diagonal covariance.

    Used by surrogates whose readout is a mean and a variance per point and output
    (NOMU, moment-matched ensembles). Analytic acquisitions (LogEI, UCB, PI) work
    directly. BoTorch's registered normal samplers draw MC samples, which are
    **independent across the q points** (and across outputs): the model states no
    correlation between points.

    Args:
        mean: A ``batch_shape x q x m`` tensor of means.
        variance: A ``batch_shape x q x m`` tensor of non-negative variances
            (clamped below at :func:`min_variance`).

    Example:
        >>> posterior = GaussianMarginalPosterior(torch.zeros(4, 3, 1), torch.ones(4, 3, 1))
        >>> posterior.rsample(torch.Size([8])).shape
        torch.Size([8, 4, 3, 1])
    """

    def __init__(self, mean: Tensor, variance: Tensor) -> None:
        if mean.shape != variance.shape or mean.ndim < 2:
            raise ValueError(
                "mean and variance must both be `batch_shape x q x m` tensors of the same "
                f"shape; got {tuple(mean.shape)} and {tuple(variance.shape)}."
            )
        self._marginal_mean = mean
        self._marginal_variance = variance.clamp_min(min_variance(variance.dtype))
        if mean.shape[-1] == 1 or mean.numel() == 0:
            # GPyTorch's multitask normal cannot reshape an empty batch of points; the
            # shapes of an empty posterior come from `mean` and its samples are empty.
            distribution = MultivariateNormal(
                mean.flatten(-2), DiagLinearOperator(self._marginal_variance.flatten(-2))
            )
        else:
            # Interleaved ordering is (point, output) with the output index fastest,
            # i.e. exactly the row-major flattening of the last two dimensions.
            distribution = MultitaskMultivariateNormal(
                mean,
                DiagLinearOperator(self._marginal_variance.flatten(-2)),
                interleaved=True,
            )
        super().__init__(distribution=distribution)

    @property
    def mean(self) -> Tensor:
        r"""The ``batch_shape x q x m`` posterior mean."""
        return self._marginal_mean

    @property
    def variance(self) -> Tensor:
        r"""The ``batch_shape x q x m`` posterior variance."""
        return self._marginal_variance

    @property
    def base_sample_shape(self) -> torch.Size:
        r"""The shape of a base sample; an empty batch of points takes one base value
        per sample (a Sobol engine needs a dimension) and has empty samples."""
        if self.mean.numel() == 0:
            return torch.Size([1])
        return super().base_sample_shape

    def _extended_shape(self, sample_shape: torch.Size | None = None) -> torch.Size:
        r"""The shape of samples: ``sample_shape x batch_shape x q x m``."""
        return torch.Size(sample_shape or []) + self.mean.shape

    def rsample_from_base_samples(self, sample_shape: torch.Size, base_samples: Tensor) -> Tensor:
        r"""Samples from base samples (see ``GPyTorchPosterior``); an empty batch of
        points, which GPyTorch cannot reshape, has empty samples."""
        if self.mean.numel() == 0:
            return self.mean.new_zeros(self._extended_shape(sample_shape))
        return super().rsample_from_base_samples(sample_shape, base_samples)

    def rsample(self, sample_shape: torch.Size | None = None) -> Tensor:
        r"""Samples with gradients (see ``GPyTorchPosterior``); an empty batch of points
        has empty samples."""
        if self.mean.numel() == 0:
            return self.mean.new_zeros(self._extended_shape(sample_shape))
        return super().rsample(sample_shape)

    def output_batched_distribution(self) -> MultivariateNormal:
        r"""The Gaussian with the outputs as a batch dimension, as a GP's ``model(X)``
        returns it: batch shape ``batch_shape`` for one output, ``batch_shape x m`` for
        several, with a diagonal covariance over the ``q`` points."""
        mean = self.mean.transpose(-2, -1)
        variance = self.variance.transpose(-2, -1)
        if mean.shape[-2] == 1:
            mean, variance = mean.squeeze(-2), variance.squeeze(-2)
        return MultivariateNormal(mean, DiagLinearOperator(variance))

    def subset_outputs(self, output_indices: list[int]) -> GaussianMarginalPosterior:
        r"""The posterior over the outputs ``output_indices`` only."""
        return GaussianMarginalPosterior(
            self.mean[..., output_indices], self.variance[..., output_indices]
        )

    def add_observation_noise(self, noise_variance: Tensor) -> GaussianMarginalPosterior:
        r"""The predictive posterior with ``noise_variance`` (broadcastable to
        ``batch_shape x q x m``) added to the variance."""
        return GaussianMarginalPosterior(self.mean, self.variance + noise_variance)

    def untransform_outcomes(
        self, outcome_transform: OutcomeTransform, X: Tensor | None = None
    ) -> Posterior:
        r"""Map the posterior to original outcome units.

        A linear (affine) transform such as ``Standardize`` maps a Gaussian to a
        Gaussian: means and variances are mapped exactly and the result stays a
        :class:`GaussianMarginalPosterior` (so ``ScalarizedPosteriorTransform`` and the
        analytic acquisitions keep working). Non-linear transforms go through
        ``outcome_transform.untransform_posterior`` as for ``SingleTaskGP``.
        """
        if is_linear(outcome_transform):
            mean, variance = outcome_transform.untransform(self.mean, self.variance, X=X)
            return GaussianMarginalPosterior(mean, variance)
        return outcome_transform.untransform_posterior(self, X=X)

    def scalarize(self, weights: Tensor, offset: float = 0.0) -> GaussianMarginalPosterior:
        r"""The posterior of ``offset + Y @ weights`` (outputs are independent).

        Args:
            weights: An ``m``-dim tensor of weights.
            offset: A constant added to the scalarised output.
        """
        mean = offset + self.mean @ weights.unsqueeze(-1)
        variance = self.variance @ (weights**2).unsqueeze(-1)
        return GaussianMarginalPosterior(mean, variance)
