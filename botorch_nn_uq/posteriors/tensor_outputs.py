"""Posteriors over tensor-valued outputs, shaped as BoTorch's ``HigherOrderGP`` serves them.

A model of outputs ``o1 x o2 x ...`` per point (``train_Y`` of shape ``n x o1 x o2 x
...``) trains its networks on the ``m = o1 o2 ...`` flattened outputs and serves any of
this package's posteriors over them; :class:`TensorOutputPosterior` gives that posterior
the outputs' shape back: means, variances and samples of shape ``batch_shape x q x o1 x
o2 x ...``, and samples drawn by any sampler, explicit (BoTorch's normal samplers) or
the one ``get_sampler`` picks (:class:`TensorOutputSampler`).
"""

from __future__ import annotations

import torch
from botorch.posteriors.posterior import Posterior
from botorch.sampling.base import MCSampler
from botorch.sampling.get_sampler import GetSampler, get_sampler
from gpytorch.distributions import MultivariateNormal
from torch import Tensor


class TensorOutputPosterior(Posterior):
    r"""A posterior over flattened outputs, served in the outputs' tensor shape.

    Every draw and moment is the flat posterior's, reshaped: the ``m`` outputs of the
    last dimension become ``output_shape``. Base samples are the flat posterior's
    (:attr:`base_sample_shape`, :attr:`batch_range`), so a sampler draws exactly what it
    draws from the flat posterior.

    Args:
        posterior: A posterior over ``batch_shape x q x m`` outputs.
        output_shape: The outputs' shape, whose elements number ``m``.

    Example:
        >>> flat = GaussianMarginalPosterior(torch.zeros(4, 1, 6), torch.ones(4, 1, 6))
        >>> TensorOutputPosterior(flat, torch.Size([2, 3])).mean.shape
        torch.Size([4, 1, 2, 3])
    """

    def __init__(self, posterior: Posterior, output_shape: torch.Size) -> None:
        output_shape = torch.Size(output_shape)
        if output_shape.numel() != posterior._extended_shape()[-1]:
            raise ValueError(
                f"output_shape {tuple(output_shape)} has {output_shape.numel()} elements; "
                f"the posterior has {posterior._extended_shape()[-1]} outputs."
            )
        self.flat_posterior = posterior
        self.output_shape = output_shape

    def unflatten_outputs(self, values: Tensor) -> Tensor:
        r"""Values of the flat posterior's outputs in the outputs' shape: ``... x m``
        becomes ``... x o1 x o2 x ...``."""
        return values.unflatten(-1, self.output_shape)

    @property
    def device(self) -> torch.device:
        return self.flat_posterior.device

    @property
    def dtype(self) -> torch.dtype:
        return self.flat_posterior.dtype

    @property
    def mean(self) -> Tensor:
        r"""The ``batch_shape x q x o1 x o2 x ...`` posterior mean."""
        return self.unflatten_outputs(self.flat_posterior.mean)

    @property
    def variance(self) -> Tensor:
        r"""The ``batch_shape x q x o1 x o2 x ...`` posterior variance."""
        return self.unflatten_outputs(self.flat_posterior.variance)

    @property
    def distribution(self) -> MultivariateNormal:
        r"""The flat posterior's Gaussian over the flattened outputs (for the flat
        posteriors that have one: the package's moment-matched Gaussians)."""
        return self.flat_posterior.distribution

    @property
    def mvn(self) -> MultivariateNormal:
        r"""Alias of :attr:`distribution`, as ``GPyTorchPosterior`` has."""
        return self.distribution

    @property
    def base_sample_shape(self) -> torch.Size:
        r"""The flat posterior's base sample shape."""
        return self.flat_posterior.base_sample_shape

    @property
    def batch_range(self) -> tuple[int, int]:
        r"""The flat posterior's t-batch range of :attr:`base_sample_shape`."""
        return self.flat_posterior.batch_range

    def _extended_shape(self, sample_shape: torch.Size | None = None) -> torch.Size:
        flat_shape = self.flat_posterior._extended_shape(torch.Size(sample_shape or ()))
        return flat_shape[:-1] + self.output_shape

    def rsample(self, sample_shape: torch.Size | None = None) -> Tensor:
        r"""Draw ``sample_shape x batch_shape x q x o1 x o2 x ...`` samples."""
        return self.unflatten_outputs(self.flat_posterior.rsample(sample_shape))

    def rsample_from_base_samples(self, sample_shape: torch.Size, base_samples: Tensor) -> Tensor:
        r"""The flat posterior's samples from ``base_samples`` (of its base sample
        shape), as ``sample_shape x batch_shape x q x o1 x o2 x ...``."""
        return self.unflatten_outputs(
            self.flat_posterior.rsample_from_base_samples(sample_shape, base_samples)
        )


class TensorOutputSampler(MCSampler):
    r"""The sampler ``get_sampler`` gives a :class:`TensorOutputPosterior`: the one it
    gives the flat posterior (made at the first draw and kept, with its base samples),
    its draws reshaped.

    Args:
        sample_shape: The ``sample_shape`` of the samples to generate.
        seed: The seed of the flat posterior's sampler.
    """

    def forward(self, posterior: TensorOutputPosterior) -> Tensor:
        r"""Draw ``sample_shape x batch_shape x q x o1 x o2 x ...`` samples."""
        if not hasattr(self, "flat_sampler"):
            self.flat_sampler = get_sampler(
                posterior.flat_posterior, self.sample_shape, seed=self.seed
            )
        return posterior.unflatten_outputs(self.flat_sampler(posterior.flat_posterior))


@GetSampler.register(TensorOutputPosterior)
def _get_sampler_tensor_output(
    posterior: TensorOutputPosterior, sample_shape: torch.Size, *, seed: int | None = None
) -> TensorOutputSampler:
    return TensorOutputSampler(sample_shape=sample_shape, seed=seed)
