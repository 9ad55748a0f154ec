"""Continuous joint samples of a finite set of functions: the Gaussian of their moments.

A function bank (ensemble members, dropout masks) has weights ``w_k`` (summing to one),
functions ``f_k`` and mean ``mean = sum_k w_k f_k``. A sample of
:class:`ContinuousFunctionPosterior` is

``f = mean + sum_k sqrt(w_k) z_k (f_k - mean)``,  ``z ~ N(0, I_s)``,

one ``z`` per sample, shared by all ``q`` points and ``m`` outputs (the samples are joint
across the q-batch). ``f`` is the Gaussian process whose mean and covariance are the
bank's: ``E[f] = mean`` and ``Cov[f(x), f(x')] = sum_k w_k (f_k(x) - mean(x))
(f_k(x') - mean(x'))``, so the marginal variance is the bank's, the analytic
acquisitions (which read ``mean`` and ``variance``) see exactly what they saw with the
finite set, and ``distribution`` (the moment-matched Gaussian, unchanged) is now the
distribution the samples are drawn from. The covariance has rank at most ``s - 1``.

Why: a sample of the finite set is one of its ``s`` functions. An MC acquisition is then
flat wherever no function improves, and a batch repeats points where the few functions
that favour a region agree (in BoTorch's GIBBON tutorial, MC dropout's and NEON's joint
``qLogNoisyExpectedImprovement`` put a batch of 3 on one corner). Here every sample is a
new function, continuous in the inputs (a combination of the bank's) and in the base
samples (linear in ``z``).

With Gaussian heads or observation noise (:class:`ContinuousMixturePosterior`), the
sample adds independent Gaussian noise per point and output whose variance is the
mixture's expected member variance ``sum_k w_k sigma_k^2``: the samples are the
mixture's moment-matched Gaussian, with the mixture's mean and total variance.

Both posteriors keep the bank (``values``, ``component_means``), so whatever reads the
functions themselves (batch Thompson sampling, last-layer conditioning of fantasies,
``shift_functions``) sees the same functions as with the finite set. BoTorch's normal
samplers (``SobolQMCNormalSampler``, ``IIDNormalSampler``) draw the base samples, and
``get_sampler`` returns the Sobol one (the IID one when its dimension would exceed the
Sobol engine's).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from botorch.sampling.get_sampler import GetSampler
from botorch.sampling.normal import IIDNormalSampler, NormalMCSampler, SobolQMCNormalSampler
from torch import Tensor
from torch.quasirandom import SobolEngine

from botorch_nn_uq.compat import ensemble_weights
from botorch_nn_uq.posteriors.ensemble import FunctionEnsemblePosterior
from botorch_nn_uq.posteriors.mixture import MixtureOfGaussiansPosterior

if TYPE_CHECKING:
    from botorch.posteriors import Posterior

#: How a function bank's posterior may draw joint samples: ``"continuous"`` the Gaussian
#: of the bank's moments (this module), ``"functions"`` one function of the bank per sample.
JOINT_SAMPLES: tuple[str, ...] = ("continuous", "functions")


def combine_functions(values: Tensor, weights: Tensor, normals: Tensor) -> Tensor:
    r"""The samples ``mean + sum_k sqrt(w_k) z_k (f_k - mean)`` of a function bank.

    Args:
        values: A ``batch_shape x s x q x m`` tensor: function ``k`` at the ``q`` points.
        weights: The ``s`` function weights, summing to one.
        normals: Standard normals ``z``, ``sample_shape x batch_shape x s`` (an expanded
            view where the batch shares them).

    Returns:
        A ``sample_shape x batch_shape x q x m`` tensor of samples.
    """
    batch_shape = values.shape[:-3]
    num_functions, q, m = values.shape[-3:]
    if normals.shape[-1] != num_functions or normals.shape[-1 - len(batch_shape) : -1] != (
        batch_shape
    ):
        raise ValueError(
            f"The normals must have shape sample_shape x {tuple(batch_shape)} x "
            f"{num_functions} (sample_shape x batch_shape x s); got {tuple(normals.shape)}."
        )
    sample_shape = normals.shape[: normals.ndim - 1 - len(batch_shape)]
    if values.numel() == 0:
        # An empty batch or no points: nothing to combine (and no sample count to infer).
        return values.new_zeros(sample_shape + batch_shape + torch.Size([q, m]))
    mean = (weights[:, None, None] * values).sum(dim=-3)
    scaled = (values - mean.unsqueeze(-3)) * weights.sqrt()[:, None, None]
    output_shape = sample_shape + batch_shape + torch.Size([q, m])
    batch_dims = range(len(sample_shape), len(sample_shape) + len(batch_shape))
    if all(normals.stride(dim) == 0 or normals.shape[dim] == 1 for dim in batch_dims):
        # The batch shares z (BoTorch's samplers expand one draw over the batch): one
        # product `samples x s` by `s x (batch q m)`, without copying z per batch element.
        shared = normals[(..., *([0] * len(batch_shape)), slice(None))]
        combined = shared.reshape(-1, num_functions) @ scaled.movedim(-3, 0).reshape(
            num_functions, -1
        )
    else:
        # One product per batch element.
        num_batch = batch_shape.numel()
        flat_normals = normals.reshape(-1, num_batch, num_functions).transpose(0, 1)
        combined = flat_normals @ scaled.reshape(num_batch, num_functions, q * m)
        combined = combined.transpose(0, 1)
    return mean + combined.reshape(output_shape)


def _check_normals(base_samples: Tensor, expected: torch.Size) -> None:
    r"""Refuse base samples that are not a floating-point tensor of shape ``expected``
    (``sample_shape x base_sample_shape``)."""
    if not base_samples.is_floating_point() or base_samples.shape != expected:
        raise ValueError(
            f"base_samples must be standard normals of shape {tuple(expected)} "
            f"(sample_shape x base_sample_shape); got a {base_samples.dtype} tensor of "
            f"shape {tuple(base_samples.shape)}."
        )


def _first_point_normals(base_samples: Tensor, num_functions: int) -> Tensor:
    r"""The combination's ``z`` from normal base samples ``sample_shape x batch_shape x
    q x k``: the first point's first ``num_functions`` entries (one ``z`` per sample,
    kept by BoTorch's samplers when points are appended)."""
    return base_samples[..., 0, :num_functions]


class ContinuousFunctionPosterior(FunctionEnsemblePosterior):
    r"""A weighted finite set of functions sampled continuously: each sample is the
    Gaussian combination ``mean + sum_k sqrt(w_k) z_k (f_k - mean)`` (see the module
    docstring), with the bank's mean and joint covariance.

    Everything but the samples is
    :class:`~botorch_nn_uq.posteriors.FunctionEnsemblePosterior`'s: ``mean``,
    ``variance``, ``distribution`` (the moment-matched Gaussian, which the samples now
    follow exactly), ``values`` and the maps (outcome untransforms, output subsets,
    scalarisation, shifts of the functions), which return this class. A non-linear
    outcome untransform (``Log``) maps every function, and the samples are the Gaussian
    of the mapped functions' moments.

    Args:
        values: A ``batch_shape x s x q x m`` tensor: function ``k`` evaluated at the
            ``q`` points.
        weights: An optional ``s``-dim tensor of function weights (normalised here);
            uniform if omitted.
        check_weights: Whether to check that ``weights`` are non-negative with a positive
            sum (a read from their device); ``False`` for weights checked before.

    Example:
        >>> posterior = ContinuousFunctionPosterior(torch.randn(5, 16, 3, 1))
        >>> SobolQMCNormalSampler(torch.Size([32]), seed=0)(posterior).shape
        torch.Size([32, 5, 3, 1])
    """

    def __init__(
        self, values: Tensor, weights: Tensor | None = None, *, check_weights: bool = True
    ) -> None:
        super().__init__(values, weights, check_weights=check_weights)

    @property
    def base_sample_shape(self) -> torch.Size:
        r"""``batch_shape x q x s``: per sample, the first point's ``s`` standard normals
        are ``z`` (the other points' are not used). One row per point, so that BoTorch's
        samplers, which keep the base samples of earlier points when points are added
        (``qLogNoisyExpectedImprovement``'s baseline), keep ``z`` too. An empty batch of
        points takes one row (a Sobol engine needs a dimension)."""
        return self.batch_shape + torch.Size([max(self.values.shape[-2], 1), self.ensemble_size])

    def rsample(self, sample_shape: torch.Size | None = None) -> Tensor:
        r"""Draw ``sample_shape x batch_shape x q x m`` samples (with gradients), one ``z``
        per sample from the global RNG, shared by the batch."""
        sample_shape = torch.Size([1]) if not sample_shape else torch.Size(sample_shape)
        # Drawn on the CPU and moved: a seed gives the same samples on every device.
        shape = sample_shape + torch.Size([1] * len(self.batch_shape) + [self.ensemble_size])
        normals = torch.randn(shape, dtype=self.dtype).to(self.device)
        expanded = normals.expand(sample_shape + self.batch_shape + normals.shape[-1:])
        return combine_functions(self.values, self.weights, expanded)

    def rsample_from_base_samples(self, sample_shape: torch.Size, base_samples: Tensor) -> Tensor:
        r"""Samples from normal base samples.

        Args:
            sample_shape: The sample shape.
            base_samples: Standard normals of shape ``sample_shape x batch_shape x q x s``
                (:attr:`base_sample_shape`, as BoTorch's normal samplers draw them; the
                first point's are ``z``). Member indices (an integer tensor, as an
                explicit :class:`~botorch_nn_uq.posteriors.EnsembleIndexSampler` draws
                them) select whole functions instead, as for
                :class:`~botorch_nn_uq.posteriors.FunctionEnsemblePosterior`: such a
                sampler averages over the bank exactly (``optimize_acqf_screened``
                ranks candidates that way).

        Returns:
            A ``sample_shape x batch_shape x q x m`` tensor of samples.
        """
        if not base_samples.is_floating_point():
            return super().rsample_from_base_samples(sample_shape, base_samples)
        _check_normals(base_samples, sample_shape + self.base_sample_shape)
        normals = _first_point_normals(base_samples, self.ensemble_size)
        return combine_functions(self.values, self.weights, normals)

    def _map_functions(
        self, function_map: Callable[[Tensor], Tensor]
    ) -> ContinuousFunctionPosterior:
        r"""The posterior of ``function_map`` applied to every function."""
        return ContinuousFunctionPosterior(
            function_map(self.values), ensemble_weights(self), check_weights=False
        )

    def shift_functions(self, shift: Tensor) -> ContinuousFunctionPosterior:
        r"""The posterior of the functions moved by ``shift`` (broadcastable to
        ``batch_shape x s x q x m``; the batch may grow)."""
        return self._map_functions(lambda values: values + shift)

    def add_observation_noise(self, noise_variance: Tensor) -> ContinuousMixturePosterior:
        r"""The predictive posterior of noisy observations: the functions' Gaussian plus
        independent noise of variance ``noise_variance`` (broadcastable to
        ``batch_shape x q x m``)."""
        marginal_shape = self.values.shape[:-3] + self.values.shape[-2:]
        noise_variance = noise_variance.expand(marginal_shape).unsqueeze(-3)
        return ContinuousMixturePosterior(
            self.values,
            noise_variance.expand_as(self.values),
            ensemble_weights(self),
            check_weights=False,
        )


class ContinuousMixturePosterior(MixtureOfGaussiansPosterior):
    r"""A weighted mixture of Gaussians sampled continuously: its moment-matched Gaussian.

    A sample is ``mean + sum_k sqrt(w_k) z_k (mu_k - mean) + sqrt(sum_k w_k sigma_k^2)
    eps``: the Gaussian combination of the member means (see the module docstring), one
    ``z`` per sample shared by the q-batch, plus independent noise ``eps`` per point and
    output with the mixture's expected member (aleatoric) variance. Its mean and
    covariance are the mixture's, which ``distribution`` already reports. Everything but
    the samples is :class:`~botorch_nn_uq.posteriors.MixtureOfGaussiansPosterior`'s,
    and its maps return this class.

    Args:
        component_means: A ``batch_shape x s x q x m`` tensor of member means.
        component_variances: A ``batch_shape x s x q x m`` tensor of non-negative member
            (aleatoric) variances.
        weights: An optional ``s``-dim tensor of member weights, normalised here;
            uniform if omitted.
        check_weights: Whether to check that ``weights`` are non-negative with a positive
            sum; ``False`` for weights checked before.

    Example:
        >>> posterior = ContinuousMixturePosterior(torch.randn(5, 3, 1), torch.ones(5, 3, 1))
        >>> posterior.rsample(torch.Size([4])).shape
        torch.Size([4, 3, 1])
    """

    @property
    def base_sample_shape(self) -> torch.Size:
        r"""``batch_shape x q x (s + m)``: per sample and point, ``s`` normals (the first
        point's are ``z``) and ``m`` normals of the noise. Point-major, so that BoTorch's
        samplers, which keep the base samples of earlier points when points are added,
        keep ``z`` too."""
        q, m = self.component_means.shape[-2:]
        return self.batch_shape + torch.Size([max(q, 1), self.ensemble_size + m])

    def rsample(self, sample_shape: torch.Size | None = None) -> Tensor:
        r"""Draw ``sample_shape x batch_shape x q x m`` samples from the global RNG, ``z``
        and the noise shared by the batch."""
        sample_shape = torch.Size([1]) if not sample_shape else torch.Size(sample_shape)
        shape = sample_shape + torch.Size([1] * len(self.batch_shape)) + self.base_sample_shape[-2:]
        # Drawn on the CPU and moved: a seed gives the same samples on every device.
        normals = torch.randn(shape, dtype=self.dtype).to(self.device)
        return self.rsample_from_base_samples(
            sample_shape, normals.expand(sample_shape + self.base_sample_shape)
        )

    def rsample_from_base_samples(
        self, sample_shape: torch.Size, base_samples: Tensor, base_indices: Tensor | None = None
    ) -> Tensor:
        r"""Samples from normal base samples.

        Args:
            sample_shape: The sample shape.
            base_samples: Standard normals of shape ``sample_shape x batch_shape x q x
                (s + m)`` (:attr:`base_sample_shape`): the first point's first ``s``
                entries are ``z``, every point's last ``m`` the noise.
            base_indices: ``None``; member indices (as an explicit
                :class:`~botorch_nn_uq.posteriors.MixtureSampler` draws them, with
                ``base_samples`` its noise) draw exact mixture samples instead, as for
                :class:`~botorch_nn_uq.posteriors.MixtureOfGaussiansPosterior`.

        Returns:
            A ``sample_shape x batch_shape x q x m`` tensor of samples.
        """
        if base_indices is not None:
            return super().rsample_from_base_samples(sample_shape, base_samples, base_indices)
        _check_normals(base_samples, sample_shape + self.base_sample_shape)
        normals = _first_point_normals(base_samples, self.ensemble_size)
        functions = combine_functions(self.component_means, self.weights, normals)
        noise = base_samples[..., self.ensemble_size :]
        return functions + self.aleatoric_variance.sqrt() * noise


def _normal_sampler(
    posterior: Posterior, sample_shape: torch.Size, *, seed: int | None = None
) -> NormalMCSampler:
    r"""BoTorch's Sobol normal sampler for a continuous posterior, or its IID one when
    the Sobol engine has too few dimensions for one sample's base samples (as BoTorch
    chooses for a Gaussian)."""
    if posterior.base_sample_shape[-2:].numel() > SobolEngine.MAXDIM:
        return IIDNormalSampler(sample_shape=sample_shape, seed=seed)
    return SobolQMCNormalSampler(sample_shape=sample_shape, seed=seed)


GetSampler.register(ContinuousFunctionPosterior)(_normal_sampler)
GetSampler.register(ContinuousMixturePosterior)(_normal_sampler)


def with_joint_samples(posterior: Posterior, joint_samples: str) -> Posterior:
    r"""``posterior`` (a model's prediction) with the joint samples a model asks for.

    Args:
        posterior: A :class:`~botorch_nn_uq.posteriors.FunctionEnsemblePosterior` or
            :class:`~botorch_nn_uq.posteriors.MixtureOfGaussiansPosterior` (returned
            unchanged for ``"functions"``).
        joint_samples: One of :data:`JOINT_SAMPLES`: ``"continuous"`` for the Gaussian
            of the bank's moments, ``"functions"`` for one function of the bank per
            sample.

    Returns:
        The posterior with the same bank, as a :class:`ContinuousFunctionPosterior` or
        :class:`ContinuousMixturePosterior` for ``"continuous"``.
    """
    if joint_samples == "functions":
        return posterior
    if isinstance(posterior, MixtureOfGaussiansPosterior):
        return ContinuousMixturePosterior(
            posterior.component_means,
            posterior.component_variances,
            posterior.weights,
            check_weights=False,
        )
    return ContinuousFunctionPosterior(
        posterior.values, ensemble_weights(posterior), check_weights=False
    )
