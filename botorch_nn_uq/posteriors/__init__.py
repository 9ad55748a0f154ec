"""Posterior families of the neural surrogates and their registered samplers.

1. :class:`GaussianMarginalPosterior`: independent Gaussians per point and output.
2. :class:`FunctionEnsemblePosterior`: a weighted finite set of functions, sampled by
   deterministic member index (:class:`EnsembleIndexSampler`), joint across the q-batch.
3. :class:`MixtureOfGaussiansPosterior`: a weighted mixture of per-member Gaussians with
   the aleatoric / epistemic split (:class:`MixtureSampler`).
4. :class:`ContinuousFunctionPosterior` and :class:`ContinuousMixturePosterior`: the same
   banks sampled continuously, by the Gaussian of their moments (BoTorch's normal
   samplers), joint across the q-batch.
5. :class:`TensorOutputPosterior`: any of them over flattened tensor-valued outputs,
   served in the outputs' shape (:class:`TensorOutputSampler`).

Importing this package registers the samplers with BoTorch's ``get_sampler`` and gives
BoTorch's ``PosteriorList`` the normal base samples that explicit normal samplers need
(:mod:`botorch_nn_uq.posteriors.posterior_list`).
"""

from botorch_nn_uq.posteriors.continuous import (
    ContinuousFunctionPosterior,
    ContinuousMixturePosterior,
)
from botorch_nn_uq.posteriors.ensemble import EnsembleIndexSampler, FunctionEnsemblePosterior
from botorch_nn_uq.posteriors.gaussian import GaussianMarginalPosterior
from botorch_nn_uq.posteriors.mixture import MixtureOfGaussiansPosterior, MixtureSampler
from botorch_nn_uq.posteriors.posterior_list import install_posterior_list_base_samples
from botorch_nn_uq.posteriors.tensor_outputs import TensorOutputPosterior, TensorOutputSampler

install_posterior_list_base_samples()

__all__ = [
    "ContinuousFunctionPosterior",
    "ContinuousMixturePosterior",
    "EnsembleIndexSampler",
    "FunctionEnsemblePosterior",
    "GaussianMarginalPosterior",
    "MixtureOfGaussiansPosterior",
    "MixtureSampler",
    "TensorOutputPosterior",
    "TensorOutputSampler",
]
