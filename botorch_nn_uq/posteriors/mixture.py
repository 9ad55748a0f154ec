"""Mixture-of-Gaussians posterior family with the aleatoric / epistemic split.

Each ensemble member ``k`` (weight ``w_k``, weights summing to one) predicts a Gaussian
``N(mu_k, sigma_k^2)``. By the law of total variance the mixture has

``mean = sum_k w_k mu_k``,
``variance = sum_k w_k sigma_k^2 (aleatoric) + sum_k w_k (mu_k - mean)^2 (epistemic)``,

with divisor one (weights summing to one), i.e. the moments of the mixture itself.

Acquisitions that need a Gaussian (``qMaxValueEntropy``'s noisy observations read
``posterior.distribution``) see the MOMENT-MATCHED Gaussian of the mixture
(:meth:`MixtureOfGaussiansPosterior.moment_matched_posterior`). MC samples, from the
registered :class:`MixtureSampler` or from BoTorch's normal samplers, are exact draws of
the mixture.
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
    member_indices_from_normals,
    select_members,
    shared_member_indices,
    systematic_member_indices,
)

if TYPE_CHECKING:
    from botorch.models.transforms.outcome import OutcomeTransform


def moment_matched_gaussian(
    component_means: Tensor, weights: Tensor, component_variances: Tensor | None = None
) -> GPyTorchPosterior:
    r"""The Gaussian with the mean and covariance of a weighted mixture of members,
    joint over the ``q`` points and ``m`` outputs.

    The covariance is ``sum_k w_k (mu_k - mean)(mu_k - mean)^T`` over the flattened
    ``q x m`` values (a member is shared by all points and outputs, so they are
    correlated) plus the diagonal of expected member variances, floored at
    :func:`~botorch_nn_uq.posteriors.gaussian.min_variance` to stay positive definite.

    Args:
        component_means: A ``batch_shape x s x q x m`` tensor of member means.
        weights: An ``s``-dim tensor of member weights summing to one.
        component_variances: An optional ``batch_shape x s x q x m`` tensor of member
            variances; ``None`` for members without one (functions).

    Returns:
        A ``GPyTorchPosterior`` over ``batch_shape x q x m``, with a ``MultivariateNormal``
        for one output and an interleaved ``MultitaskMultivariateNormal`` for several (as
        BoTorch's GPs).
    """
    mean = (weights[:, None, None] * component_means).sum(dim=-3)
    deviations = (component_means - mean.unsqueeze(-3)).flatten(-2)
    covariance = (deviations * weights[:, None]).transpose(-2, -1) @ deviations
    if component_variances is None:
        diagonal = torch.zeros_like(mean).flatten(-2)
    else:
        diagonal = (weights[:, None, None] * component_variances).sum(dim=-3).flatten(-2)
    covariance = covariance + torch.diag_embed(diagonal.clamp_min(min_variance(mean.dtype)))
    if mean.shape[-1] == 1:
        return GPyTorchPosterior(MultivariateNormal(mean.squeeze(-1), covariance))
    return GPyTorchPosterior(MultitaskMultivariateNormal(mean, covariance, interleaved=True))


def output_batched_gaussian(component_means: Tensor, weights: Tensor) -> MultivariateNormal:
    r"""The moment-matched Gaussian of a weighted set of functions with the outputs as
    a batch dimension, the form a BoTorch GP's ``model(X)`` returns.

    Args:
        component_means: A ``batch_shape x s x q x m`` tensor of function values.
        weights: An ``s``-dim tensor of weights summing to one.

    Returns:
        A ``MultivariateNormal`` over the ``q`` points with batch shape ``batch_shape``
        for one output and ``batch_shape x m`` for several, with the functions' joint
        covariance across the points (diagonal floored at
        :func:`~botorch_nn_uq.posteriors.gaussian.min_variance`).
    """
    values = component_means.movedim(-1, -3)  # batch x m x s x q
    mean = (weights[:, None] * values).sum(dim=-2)
    deviations = values - mean.unsqueeze(-2)
    covariance = (deviations * weights[:, None]).transpose(-2, -1) @ deviations
    jitter = torch.full_like(mean, min_variance(mean.dtype))
    covariance = covariance + torch.diag_embed(jitter)
    if component_means.shape[-1] == 1:
        mean, covariance = mean.squeeze(-2), covariance.squeeze(-3)
    return MultivariateNormal(mean, covariance)


class MomentMatchedGaussianMixin:
    r"""``distribution`` and ``mvn`` of a posterior through its moment-matched Gaussian
    (``moment_matched_posterior()``), for code that reads a Gaussian from any posterior
    (qMaxValueEntropy's noisy observations, custom acquisitions)."""

    def moment_matched_posterior(self) -> GPyTorchPosterior:
        r"""The Gaussian with the posterior's mean and covariance."""
        raise NotImplementedError

    @property
    def distribution(self) -> MultivariateNormal:
        r"""The moment-matched Gaussian (see :meth:`moment_matched_posterior`)."""
        return self.moment_matched_posterior().distribution

    @property
    def mvn(self) -> MultivariateNormal:
        r"""Alias of :attr:`distribution`, as ``GPyTorchPosterior`` has."""
        return self.distribution


class MixtureOfGaussiansPosterior(MomentMatchedGaussianMixin, Posterior):
    r"""A weighted mixture of Gaussians, one per ensemble member, over ``q`` points.

    A sample picks one member (the same for all ``q`` points and outputs: samples are
    joint across the q-batch through the member) and adds that member's Gaussian noise,
    independently per point and output.

    Samples are exact draws of the mixture, from the registered :class:`MixtureSampler`
    (what ``get_sampler`` returns) and from BoTorch's normal samplers
    (``SobolQMCNormalSampler``, ``IIDNormalSampler``) alike: a normal base sample holds
    one draw that picks the member (see
    :func:`~botorch_nn_uq.posteriors.member_indices.member_indices_from_normals`) and
    ``q x m`` draws of its noise (see :attr:`base_sample_shape`), so a sampler keeps its
    number of samples and its seed.
    ``distribution`` (and ``mvn``) is the moment-matched Gaussian
    (:meth:`moment_matched_posterior`), an approximation of the mixture.
    The maps (output subsets, outcome untransforms, noise, shifts) return the class of the
    posterior they map, so that a subclass that samples differently
    (:class:`~botorch_nn_uq.posteriors.ContinuousMixturePosterior`) keeps its samples.

    Args:
        component_means: A ``batch_shape x s x q x m`` tensor of member means.
        component_variances: A ``batch_shape x s x q x m`` tensor of non-negative member
            (aleatoric) variances.
        weights: An optional ``s``-dim tensor of member weights, normalised here;
            uniform if omitted.
        check_weights: Whether to check that ``weights`` are non-negative with a positive
            sum, which reads them back from their device; ``False`` for weights checked
            before (a fitted model's, a derived posterior's).

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
        *,
        check_weights: bool = True,
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
        if check_weights and ((weights < 0).any() or weights.sum() <= 0):
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
        floored at :func:`~botorch_nn_uq.posteriors.gaussian.min_variance` to stay positive
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
        return moment_matched_gaussian(self.component_means, self.weights, self.component_variances)

    @property
    def base_sample_shape(self) -> torch.Size:
        r"""``batch_shape x q x (1 + m)``: per sample and point, a normal (the first
        point's picks the member) and ``m`` normals of the member's noise. Point-major,
        so that BoTorch's samplers, which keep the base samples of earlier points when
        points are added, keep the member too."""
        q, m = self.component_means.shape[-2:]
        # An empty batch of points takes one (a Sobol engine needs a dimension).
        return self.batch_shape + torch.Size([max(q, 1), 1 + m])

    @property
    def batch_range(self) -> tuple[int, int]:
        r"""The t-batch dimensions of :attr:`base_sample_shape`: all but the last two,
        so that normal samplers share base samples across the batch."""
        return (0, -2)

    def rsample(self, sample_shape: torch.Size | None = None) -> Tensor:
        r"""Draw ``sample_shape x batch_shape x q x m`` samples from the global RNG."""
        sample_shape = torch.Size([1]) if not sample_shape else torch.Size(sample_shape)
        indices = systematic_member_indices(self.weights, sample_shape)
        normal_shape = sample_shape + torch.Size([1] * len(self.batch_shape))
        # Drawn on the CPU and moved: a seed gives the same samples on every device.
        noise = torch.randn(normal_shape + self.component_means.shape[-2:], dtype=self.dtype)
        return self.rsample_from_base_samples(sample_shape, noise.to(self.device), indices)

    def rsample_from_base_samples(
        self, sample_shape: torch.Size, base_samples: Tensor, base_indices: Tensor | None = None
    ) -> Tensor:
        r"""Reparameterised samples ``mu_k + sigma_k * eps`` for given base samples.

        Args:
            sample_shape: The sample shape.
            base_samples: With ``base_indices``: standard-normal ``eps`` of shape
                ``sample_shape x batch_shape' x q x m`` with ``batch_shape'``
                broadcastable to the batch shape (:class:`MixtureSampler` uses ones
                there so that all batch elements share the base samples). Without:
                the normal base samples of BoTorch's normal samplers, of shape
                ``sample_shape x batch_shape x q x (1 + m)`` (:attr:`base_sample_shape`):
                the first point's first entry picks the member, the last ``m`` entries
                of every point are ``eps``.
            base_indices: Member indices of shape ``sample_shape`` (shared across the
                batch), or ``None``.

        Returns:
            A ``sample_shape x batch_shape x q x m`` tensor of samples.
        """
        if self.component_means.shape[-2] == 0:
            return self.component_means.new_zeros(self._extended_shape(sample_shape))
        if base_indices is None:
            indices = member_indices_from_normals(self.weights, base_samples[..., 0, 0])
            base_indices = shared_member_indices(indices, sample_shape)
            base_samples = base_samples[..., 1:]
        means = select_members(self.component_means, base_indices, sample_shape)
        variances = select_members(self.component_variances, base_indices, sample_shape)
        return means + variances.sqrt() * base_samples

    def subset_outputs(self, output_indices: list[int]) -> MixtureOfGaussiansPosterior:
        r"""The posterior over the outputs ``output_indices`` only."""
        return type(self)(
            self.component_means[..., output_indices],
            self.component_variances[..., output_indices],
            self.weights,
            check_weights=False,
        )

    def add_observation_noise(self, noise_variance: Tensor) -> MixtureOfGaussiansPosterior:
        r"""Add ``noise_variance`` (broadcastable to ``batch_shape x q x m``) to every
        member's variance."""
        marginal_shape = self.batch_shape + self.component_means.shape[-2:]
        return type(self)(
            self.component_means,
            self.component_variances + noise_variance.expand(marginal_shape).unsqueeze(-3),
            self.weights,
            check_weights=False,
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
        return type(self)(means, variances, self.weights, check_weights=False)

    def scalarize(self, weights: Tensor, offset: float = 0.0) -> MixtureOfGaussiansPosterior:
        r"""The posterior of ``offset + Y @ weights`` (member outputs are independent)."""
        return type(self)(
            offset + self.component_means @ weights.unsqueeze(-1),
            self.component_variances @ (weights**2).unsqueeze(-1),
            self.weights,
            check_weights=False,
        )

    def shift_functions(self, shift: Tensor) -> MixtureOfGaussiansPosterior:
        r"""The mixture with every member's mean moved by ``shift`` (broadcastable to
        ``batch_shape x s x q x m``; the batch may grow), variances unchanged."""
        means = self.component_means + shift
        return type(self)(
            means, self.component_variances.expand_as(means), self.weights, check_weights=False
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
