"""botorch-nn-uq: neural-network surrogates with uncertainty for BoTorch.

Importing the package registers its posterior samplers with BoTorch, so every MC
acquisition function works with its models, and registers the models with Ax's modular
BoTorch generator once that is imported (see :mod:`botorch_nn_uq.integrations`).
"""

from botorch_nn_uq.fit import fit_model
from botorch_nn_uq.generation import batch_thompson_sampling
from botorch_nn_uq.integrations import register_integrations
from botorch_nn_uq.models import (
    NOMU,
    DeepEnsemble,
    HyperDeepEnsemble,
    MCDropout,
    NeuralSurrogateModel,
    NOMUHyperparameters,
)
from botorch_nn_uq.posteriors import (
    FunctionEnsemblePosterior,
    GaussianMarginalPosterior,
    MixtureOfGaussiansPosterior,
)

register_integrations()

# The one place of the version: pyproject.toml reads it (a literal, read without importing).
__version__ = "0.1.0"

__all__ = [
    "DeepEnsemble",
    "FunctionEnsemblePosterior",
    "GaussianMarginalPosterior",
    "HyperDeepEnsemble",
    "MCDropout",
    "MixtureOfGaussiansPosterior",
    "NOMU",
    "NOMUHyperparameters",
    "NeuralSurrogateModel",
    "batch_thompson_sampling",
    "fit_model",
]
