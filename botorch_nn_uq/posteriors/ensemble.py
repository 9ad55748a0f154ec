"""Finite-set-of-functions posterior family and its deterministic index sampler.

A surrogate in this family predicts a finite, weighted set of functions (ensemble
member means, a fixed bank of dropout masks, a fixed bank of epistemic indices). One
MC sample is one function evaluated at all ``q`` points, so samples are joint across
the q-batch, which is what q-batch acquisitions such as ``qLogEI`` need.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from botorch.posteriors.ensemble import EnsemblePosterior
from botorch.posteriors.gpytorch import GPyTorchPosterior
from botorch.sampling.base import MCSampler
from botorch.sampling.get_sampler import GetSampler
from torch import Tensor

from botorch_nn_uq.compat import ensemble_weights
from botorch_nn_uq.posteriors.member_indices import (
    base_samples_are_stale,
    member_indices_from_normals,
    select_members,
    shared_member_indices,
    systematic_member_indices,
)
from botorch_nn_uq.posteriors.mixture import (
    MixtureOfGaussiansPosterior,
    MomentMatchedGaussianMixin,
    moment_matched_gaussian,
    output_batched_gaussian,
)

if TYPE_CHECKING:
    from botorch.models.transforms.outcome import OutcomeTransform
    from gpytorch.distributions import MultivariateNormal


class FunctionEnsemblePosterior(MomentMatchedGaussianMixin, EnsemblePosterior):
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
    - BoTorch's normal samplers (``SobolQMCNormalSampler``, ``IIDNormalSampler``, as
      passed to an acquisition's ``sampler=``) work too: each sample's standard-normal
      base sample at the first point picks a function by the inverse CDF of the weights
      (see
      :func:`~botorch_nn_uq.posteriors.member_indices.member_indices_from_normals`),
      shared across the batch, so the sampler keeps its number of samples and its seed,
      and the samples are still whole functions.
    - ``distribution`` (and ``mvn``) is the moment-matched Gaussian of the functions,
      joint across the points and outputs, for code that reads a Gaussian.

    :meth:`rsample` (which BoTorch's ``MaxPosteriorSampling`` and ``qMaxValueEntropy``'s
    max-value draws call) gives distinct functions while the bank has enough. A bank
    drawn from a distribution over functions (dropout masks, epistemic indices) comes
    with ``draw_functions``, and larger requests then take fresh functions of that
    distribution instead of repeating the bank. An ensemble of ``K`` trained members has
    no such distribution, so ``K`` functions is all it can give.

    Args:
        values: A ``batch_shape x s x q x m`` tensor: function ``k`` evaluated at the
            ``q`` points.
        weights: An optional ``s``-dim tensor of member weights (normalised here);
            uniform if omitted.
        draw_functions: For an equally weighted bank drawn from a distribution over
            functions: a callable that draws ``n`` new functions of that distribution
            from torch's global RNG and returns them at the same points, as a
            ``batch_shape x n x q x m`` tensor.
        check_weights: Whether to check that ``weights`` are non-negative with a positive
            sum, which reads them back from their device; ``False`` for weights checked
            before (a fitted model's, a derived posterior's), so that a posterior call
            never waits for the device.

    Example:
        >>> posterior = FunctionEnsemblePosterior(torch.randn(5, 16, 3, 1))
        >>> EnsembleIndexSampler(torch.Size([32]), seed=0)(posterior).shape
        torch.Size([32, 5, 3, 1])
    """

    def __init__(
        self,
        values: Tensor,
        weights: Tensor | None = None,
        draw_functions: Callable[[int], Tensor] | None = None,
        *,
        check_weights: bool = True,
    ) -> None:
        if draw_functions is not None and weights is not None:
            raise ValueError("draw_functions needs an equally weighted bank (weights=None).")
        if weights is not None:
            if weights.ndim != 1 or weights.shape[0] != values.shape[-3]:
                raise ValueError(
                    f"weights must be a 1-d tensor with one entry per function "
                    f"(s = {values.shape[-3]}); got shape {tuple(weights.shape)}."
                )
            if check_weights and ((weights < 0).any() or weights.sum() <= 0):
                raise ValueError("weights must be non-negative with a positive sum.")
        super().__init__(values=values, weights=weights)
        self._draw_functions = draw_functions

    @property
    def variance(self) -> Tensor:
        r"""The ``batch_shape x q x m`` variance of the weighted mixture of functions."""
        weights = self.weights[..., None, None]
        return (weights * (self.values - self.mean.unsqueeze(-3)) ** 2).sum(dim=-3)

    @property
    def mixture_variance(self) -> Tensor:
        r"""The same as :attr:`variance`. Ax reads ``mixture_variance`` of ensemble
        posteriors for its predictions and cross-validation, which then agree with
        ``variance``; the parent's unbiased estimate would not, and is undefined
        (``0 / 0``) when one member carries all the weight, as a greedy ensemble
        selection can choose."""
        return self.variance

    @property
    def base_sample_shape(self) -> torch.Size:
        r"""``batch_shape x q x 1``: a standard normal per sample and point, of which the
        first point's picks the function (see :meth:`rsample_from_base_samples`). One
        per point, not one per sample, so that BoTorch's samplers, which keep the base
        samples of earlier points when points are added (``qLogNoisyExpectedImprovement``
        and the hypervolume acquisitions with cached baselines), keep the function
        too. An empty batch of points takes one (a Sobol engine needs a dimension)."""
        return self.batch_shape + torch.Size([max(self.values.shape[-2], 1), 1])

    @property
    def batch_range(self) -> tuple[int, int]:
        r"""The t-batch dimensions of :attr:`base_sample_shape`: all but the last two, so
        that normal samplers use one function per sample for the whole batch."""
        return (0, -2)

    def moment_matched_posterior(self) -> GPyTorchPosterior:
        r"""The Gaussian with the functions' weighted mean and covariance, joint over
        the ``q`` points and ``m`` outputs (see
        :func:`~botorch_nn_uq.posteriors.mixture.moment_matched_gaussian`)."""
        return moment_matched_gaussian(self.values, self.weights)

    def output_batched_distribution(self) -> MultivariateNormal:
        r"""The moment-matched Gaussian with the outputs as a batch dimension, as a GP's
        ``model(X)`` returns it (see
        :func:`~botorch_nn_uq.posteriors.mixture.output_batched_gaussian`)."""
        return output_batched_gaussian(self.values, self.weights)

    def rsample(self, sample_shape: torch.Size | None = None) -> Tensor:
        r"""Draw ``sample_shape x batch_shape x q x m`` samples (with gradients), with
        member indices shared across the batch and drawn from the global RNG.

        Up to ``s`` samples (uniform weights) are distinct functions of the bank. With
        ``draw_functions``, ``N > s`` samples are the ``s`` bank functions and ``N - s``
        fresh ones in random order, all distinct; without it the bank repeats.
        """
        sample_shape = torch.Size([1]) if not sample_shape else torch.Size(sample_shape)
        num_samples = sample_shape.numel()
        if self._draw_functions is None or num_samples <= self.ensemble_size:
            indices = systematic_member_indices(self.weights, sample_shape)
            return self.rsample_from_base_samples(sample_shape, indices)
        # A repeated function repeats its maximiser: Thompson sampling by
        # MaxPosteriorSampling would return fewer distinct points than asked for.
        fresh = self._draw_functions(num_samples - self.ensemble_size)
        values = torch.cat([self.values, fresh], dim=-3)
        # Drawn on the CPU and moved: a seed gives the same order on every device.
        order = torch.randperm(num_samples).to(self.device)
        selected = values.index_select(-3, order).movedim(len(self.batch_shape), 0)
        return selected.reshape(self._extended_shape(sample_shape))

    def rsample_from_base_samples(self, sample_shape: torch.Size, base_samples: Tensor) -> Tensor:
        r"""Select functions by index.

        Args:
            sample_shape: The sample shape.
            base_samples: Either member indices (an integer tensor) of shape
                ``sample_shape`` (shared across the batch, as drawn by
                :class:`EnsembleIndexSampler`) or ``sample_shape x batch_shape``
                (BoTorch's ``IndexSampler``); or standard-normal base samples of shape
                ``sample_shape x batch_shape x q x 1`` (BoTorch's normal samplers, see
                :attr:`base_sample_shape`), the first point's mapped to an index by the
                inverse CDF of the weights.

        Returns:
            A ``sample_shape x batch_shape x q x m`` tensor of samples.
        """
        if base_samples.is_floating_point():
            base_samples = self._indices_from_normals(sample_shape, base_samples)
        elif base_samples.shape not in (sample_shape, sample_shape + self.batch_shape):
            raise ValueError(
                f"Member indices must have shape sample_shape {tuple(sample_shape)} or "
                f"sample_shape x batch_shape {tuple(sample_shape + self.batch_shape)}; got "
                f"{tuple(base_samples.shape)}."
            )
        return select_members(self.values, base_samples, sample_shape)

    def _indices_from_normals(self, sample_shape: torch.Size, normals: Tensor) -> Tensor:
        r"""Function indices from ``sample_shape x batch_shape x q x ...`` normal base
        samples: the first point's first entry picks the function."""
        indices = member_indices_from_normals(self.weights, normals[..., 0, 0])
        return shared_member_indices(indices, sample_shape)

    def _map_functions(self, function_map: Callable[[Tensor], Tensor]) -> FunctionEnsemblePosterior:
        r"""The posterior of ``function_map`` applied to every function (a map of
        ``batch_shape x s x q x m`` values), fresh draws included."""
        draw = self._draw_functions
        return FunctionEnsemblePosterior(
            function_map(self.values),
            ensemble_weights(self),
            draw_functions=None if draw is None else lambda n: function_map(draw(n)),
            check_weights=False,
        )

    def subset_outputs(self, output_indices: list[int]) -> FunctionEnsemblePosterior:
        r"""The posterior over the outputs ``output_indices`` only."""
        return self._map_functions(lambda values: values[..., output_indices])

    def add_observation_noise(self, noise_variance: Tensor) -> MixtureOfGaussiansPosterior:
        r"""The predictive posterior of noisy observations: a mixture with one Gaussian
        per function, all with variance ``noise_variance`` (broadcastable to
        ``batch_shape x q x m``)."""
        marginal_shape = self.values.shape[:-3] + self.values.shape[-2:]
        noise_variance = noise_variance.expand(marginal_shape).unsqueeze(-3)
        return MixtureOfGaussiansPosterior(
            component_means=self.values,
            component_variances=noise_variance.expand_as(self.values),
            weights=ensemble_weights(self),
            check_weights=False,
        )

    def untransform_outcomes(
        self, outcome_transform: OutcomeTransform, X: Tensor | None = None
    ) -> FunctionEnsemblePosterior:
        r"""Map every function to original outcome units with
        ``outcome_transform.untransform`` (valid for any pointwise transform, including
        non-linear ones such as ``Log``)."""
        return self._map_functions(lambda values: outcome_transform.untransform(values, X=X)[0])

    def scalarize(self, weights: Tensor, offset: float = 0.0) -> FunctionEnsemblePosterior:
        r"""The posterior of ``offset + Y @ weights`` for an ``m``-dim ``weights``."""
        return self._map_functions(lambda values: offset + values @ weights.unsqueeze(-1))

    def shift_functions(self, shift: Tensor) -> FunctionEnsemblePosterior:
        r"""The posterior of the functions moved by ``shift`` (broadcastable to
        ``batch_shape x s x q x m``; the batch may grow). It serves the bank only: fresh
        draws of the distribution over functions are not moved, so ``rsample`` repeats
        the bank beyond its size."""
        return FunctionEnsemblePosterior(
            self.values + shift, ensemble_weights(self), check_weights=False
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
