"""One function that fits any model of the package (and BoTorch GPs next to them)."""

from __future__ import annotations

from typing import Any

from botorch.fit import fit_gpytorch_mll
from botorch.models.approximate_gp import ApproximateGPyTorchModel
from botorch.models.fully_bayesian import AbstractFullyBayesianSingleTaskGP
from botorch.models.fully_bayesian_multitask import SaasFullyBayesianMultiTaskGP
from botorch.models.gpytorch import GPyTorchModel
from botorch.models.model import Model, ModelList
from botorch.models.pairwise_gp import PairwiseGP, PairwiseLaplaceMarginalLogLikelihood
from gpytorch.mlls import ExactMarginalLogLikelihood, MarginalLogLikelihood, VariationalELBO
from gpytorch.models import ExactGP
from torch import Tensor, nn

from botorch_nn_uq.models.base import NeuralSurrogateModel
from botorch_nn_uq.training.seeding import resolve_seed, seeded

__all__ = ["NetworkLoss", "fit_model"]


class NetworkLoss(nn.Module):
    r"""The ``mll_cls`` of the package's models, for BoTorch code that fits a model by
    ``fit_gpytorch_mll`` on ``mll_cls(model.likelihood, model)``.

    BoTorch's ``fit_gpytorch_mll`` then trains the model with its own loss and loop
    (:meth:`~botorch_nn_uq.models.base.NeuralSurrogateModel.custom_fit`, ``fit_args``
    going to :meth:`~botorch_nn_uq.models.base.NeuralSurrogateModel.fit`).

    This is how ``botorch.cross_validation.batch_cross_validation`` runs on a
    :class:`~botorch_nn_uq.models.ensemble.DeepEnsemble`, which takes its batched folds.

    Example:
        >>> from botorch.cross_validation import batch_cross_validation, gen_loo_cv_folds
        >>> train_X = torch.rand(10, 2, dtype=torch.float64)
        >>> folds = gen_loo_cv_folds(train_X, train_X.sin().sum(-1, keepdim=True))
        >>> results = batch_cross_validation(
        ...     DeepEnsemble, NetworkLoss, folds, fit_args={"seed": 0}
        ... )
        >>> results.posterior.mean.shape  # each fold's held-out point
        torch.Size([10, 1, 1])

    Args:
        likelihood: The model's ``likelihood`` (``None`` for the package's models).
        model: The model to fit.
    """

    def __init__(self, likelihood: None, model: NeuralSurrogateModel) -> None:
        if not isinstance(model, NeuralSurrogateModel):
            raise TypeError(
                "NetworkLoss fits the package's neural models; got a "
                f"{type(model).__name__}. Fit a GP with its marginal log likelihood, e.g. "
                "ExactMarginalLogLikelihood."
            )
        super().__init__()
        self.likelihood = likelihood
        self.model = model

    def forward(self, *args: Tensor) -> Tensor:
        r"""Not served: the model's loss lives in its training loop, which
        ``fit_gpytorch_mll`` runs."""
        raise NotImplementedError(
            "NetworkLoss is not evaluated; fit_gpytorch_mll(NetworkLoss(...)) trains the model."
        )


def fit_model(
    model: Model, seed: int | None = None, progress: bool = False, **overrides: Any
) -> Model:
    r"""Fit ``model`` and return it.

    - A :class:`~botorch_nn_uq.models.NeuralSurrogateModel`: ``model.fit(seed, progress,
      **overrides)``.
    - A ``ModelList`` (or ``ModelListGP``): every member is fitted, member ``i`` with
      seed ``seed + i``.
    - A BoTorch GP: the objective BoTorch and Ax fit it by (see
      :func:`marginal_log_likelihood`) is maximised with ``fit_gpytorch_mll`` under the
      seed (``overrides`` are passed to it).

    Args:
        model: The model to fit.
        seed: Seed of the fit; ``None`` draws one from torch's global RNG.
        progress: Show progress bars for neural models.
        **overrides: Hyperparameter overrides (neural models) or ``fit_gpytorch_mll``
            keyword arguments (GPs).

    Returns:
        The fitted model.

    Raises:
        TypeError: If ``model`` is none of the above, or a GP that
            :func:`marginal_log_likelihood` has no objective for.

    Example:
        >>> model = fit_model(MCDropout(train_X, train_Y), seed=0)
    """
    seed = resolve_seed(seed)
    if isinstance(model, NeuralSurrogateModel):
        return model.fit(seed=seed, progress=progress, **overrides)
    if isinstance(model, ModelList):
        for index, member in enumerate(model.models):
            fit_model(member, seed=seed + index, progress=progress, **overrides)
        return model
    if isinstance(model, (GPyTorchModel, PairwiseGP)):
        mll = marginal_log_likelihood(model)
        # fit_gpytorch_mll draws from torch's global generator (on a failed attempt it
        # resamples the hyperparameters from their priors) and takes no generator.
        with seeded(seed):
            fit_gpytorch_mll(mll, **overrides)
        return model
    raise TypeError(f"fit_model does not know how to fit a {type(model).__name__}.")


def marginal_log_likelihood(model: GPyTorchModel | PairwiseGP) -> MarginalLogLikelihood:
    r"""The objective a BoTorch GP is fitted by, as BoTorch and Ax choose it.

    - An ``ApproximateGPyTorchModel`` (e.g. ``SingleTaskVariationalGP``): the
      ``VariationalELBO`` of its approximate GP ``model.model``, with ``num_data`` the
      number of its training points.
    - A ``PairwiseGP``: its Laplace-approximated ``PairwiseLaplaceMarginalLogLikelihood``.
    - Any other exact GP (``SingleTaskGP``, ``MultiTaskGP``, ...): the
      ``ExactMarginalLogLikelihood``.

    Args:
        model: The GP.

    Returns:
        The marginal log likelihood (or its bound) of ``model``, ready for
        ``fit_gpytorch_mll``.

    Raises:
        TypeError: For fully Bayesian GPs (sampled by NUTS, not fitted to a likelihood),
            variational GPs without training data, and GPyTorch models that are neither
            exact nor BoTorch-wrapped variational GPs.
    """
    name = type(model).__name__
    if isinstance(model, (AbstractFullyBayesianSingleTaskGP, SaasFullyBayesianMultiTaskGP)):
        raise TypeError(
            f"A {name} is fully Bayesian: its hyperparameters are sampled, not fitted to a "
            "likelihood. Use botorch.fit.fit_fully_bayesian_model_nuts."
        )
    if isinstance(model, ApproximateGPyTorchModel):
        approximate_gp = model.model
        if getattr(approximate_gp, "train_targets", None) is None:
            raise TypeError(
                f"This {name} holds no training data (its `model.model.train_targets`), so "
                "its variational ELBO has no data to fit. Build one with "
                "gpytorch.mlls.VariationalELBO(model.likelihood, model.model, num_data=...) "
                "and fit it with botorch.fit.fit_gpytorch_mll."
            )
        num_data = approximate_gp.train_inputs[0].shape[-2]
        return VariationalELBO(model.likelihood, approximate_gp, num_data=num_data)
    if isinstance(model, PairwiseGP):
        return PairwiseLaplaceMarginalLogLikelihood(model.likelihood, model)
    if isinstance(model, ExactGP):
        return ExactMarginalLogLikelihood(model.likelihood, model)
    raise TypeError(
        f"fit_model fits exact GPs, pairwise GPs and BoTorch's variational GPs; a {name} is "
        "none of them. Build its marginal log likelihood and fit it with "
        "botorch.fit.fit_gpytorch_mll."
    )
