"""The package's models in Ax's modular BoTorch generator.

With this module imported (importing ``botorch_nn_uq`` imports it as soon as Ax's
modular BoTorch generator is imported), every model of the package works as
``ModelConfig(botorch_model_class=DeepEnsemble, model_options={"ensemble_size": 8})``:

- ``model_options`` are the model's constructor arguments (hyperparameters, and e.g.
  ``preset``), through :meth:`~botorch_nn_uq.models.NeuralSurrogateModel.construct_inputs`;
- Ax's input and outcome transforms are passed to the constructor like to a GP's;
- :func:`fit_neural_surrogate`, registered with Ax's ``fit_botorch_model`` dispatcher,
  trains the model on every trial with a seed drawn from torch's global RNG, which
  ``Client(random_seed=...)`` seeds, so seeded Ax runs are reproducible;
- Ax's cross-validation is honest: each fold's model is trained without the fold's
  held-out points, also with Ax's default ``refit_on_cv=False`` (see
  :func:`construct_neural_surrogate_inputs`);
- :class:`~botorch_nn_uq.models.NOMU` gets the search space's box as the box of its
  artificial inputs (unless ``model_options`` give ``bounds``);
- Ax's model selection (several ``model_configs``, chosen by leave-one-out
  cross-validation) scores the package's models on their posterior mean and variance,
  as it scores GPs and Gaussian mixtures (see :class:`GaussianMomentsModel`);
- with :mod:`botorch_nn_uq.integrations.ax_storage`, ``Client.save_to_json_file`` and
  ``Client.load_from_json_file`` save and restore an experiment whose generation strategy
  uses the models.

Example:
    >>> from ax.generators.torch.botorch_modular.surrogate import SurrogateSpec
    >>> from ax.generators.torch.botorch_modular.utils import ModelConfig
    >>> import botorch_nn_uq
    >>> from botorch_nn_uq.models import DeepEnsemble
    >>> spec = SurrogateSpec(
    ...     model_configs=[
    ...         ModelConfig(botorch_model_class=DeepEnsemble, model_options={"ensemble_size": 8})
    ...     ]
    ... )
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from ax.core.search_space import SearchSpaceDigest
from ax.generators.torch.botorch_modular.surrogate import Surrogate, submodel_input_constructor
from ax.generators.torch.botorch_modular.utils import ModelConfig, fit_botorch_model
from botorch.acquisition.objective import PosteriorTransform
from botorch.models.model import Model
from botorch.utils.datasets import SupervisedDataset
from gpytorch.mlls import MarginalLogLikelihood
from torch import Tensor

from botorch_nn_uq.models.base import NeuralSurrogateModel
from botorch_nn_uq.models.nomu import NOMU
from botorch_nn_uq.posteriors.gaussian import GaussianMarginalPosterior
from botorch_nn_uq.training.seeding import resolve_seed


@fit_botorch_model.register(NeuralSurrogateModel)
def fit_neural_surrogate(
    model: NeuralSurrogateModel,
    mll_class: type[MarginalLogLikelihood] | None = None,
    mll_options: dict[str, Any] | None = None,
) -> None:
    r"""Train ``model`` with its :meth:`~NeuralSurrogateModel.fit`: Ax's fitting routine
    for the package's models.

    Args:
        model: The model to train.
        mll_class: Ignored: the models are trained on their own losses, not on a
            marginal likelihood (Ax always passes one).
        mll_options: ``ModelConfig.mll_options``, here keyword arguments of ``fit``:
            ``seed`` (default: drawn from torch's global RNG), ``progress`` and
            hyperparameter overrides.
    """
    if model.refit_on_load and model.is_fitted:
        # Ax fits a model after loading a state_dict into it only when cross-validating
        # with `refit_on_cv=True, warm_start_refit=True`, and the load has already
        # trained it on its own data.
        return
    options = dict(mll_options or {})
    model.fit(seed=resolve_seed(options.pop("seed", None)), **options)


@submodel_input_constructor.register(NeuralSurrogateModel)
def construct_neural_surrogate_inputs(
    botorch_model_class: type[Model],
    model_config: ModelConfig,
    dataset: SupervisedDataset,
    search_space_digest: SearchSpaceDigest,
    surrogate: Surrogate,
) -> dict[str, Any]:
    r"""The constructor arguments of a model of the package in Ax: those of any BoTorch
    model (:meth:`~NeuralSurrogateModel.construct_inputs` and Ax's transforms), with
    defaults that ``model_options`` can override:

    - ``refit_on_load=True``: Ax's cross-validation (also run by
      ``Client.get_best_parameterization`` to decide whether to trust the model) loads
      the all-data model's ``state_dict`` into a model per fold and, by default
      (``refit_on_cv=False``), does not fit it; a network that has seen the held-out
      points would make the leave-one-out errors look far better than they are.
    - for :class:`~botorch_nn_uq.models.NOMU`, ``bounds``: the search space's box, the
      box the acquisition function searches, as the box of its artificial inputs.
    """
    inputs = submodel_input_constructor.dispatch(Model)(
        botorch_model_class=botorch_model_class,
        model_config=model_config,
        dataset=dataset,
        search_space_digest=search_space_digest,
        surrogate=surrogate,
    )
    inputs.setdefault("refit_on_load", True)
    if issubclass(botorch_model_class, NOMU) and inputs.get("bounds") is None:
        inputs["bounds"] = torch.tensor(
            search_space_digest.bounds, dtype=dataset.X.dtype, device=dataset.X.device
        ).T
    return inputs


class GaussianMomentsModel(Model):
    r"""A model whose posterior is the Gaussian with the mean and variance of ``model``'s
    posterior at each point and output (independent across points and outputs).

    Ax's model selection reads only a ``GPyTorchPosterior``'s mean and variance from
    each fold's model (for its own Gaussian mixtures, the mixture's mean and variance);
    the package's ensemble and mixture posteriors carry the same two moments. During
    Ax's selection, each fold's model of the package is served through this view.

    Args:
        model: The model whose moments are served.

    Example:
        >>> posterior = GaussianMomentsModel(ensemble).posterior(X)  # X: batch_shape x q x d
        >>> posterior.mean.shape == ensemble.posterior(X).mean.shape
        True
    """

    def __init__(self, model: Model) -> None:
        super().__init__()
        self.model = model

    @property
    def num_outputs(self) -> int:
        r"""The number of outputs of ``model``."""
        return self.model.num_outputs

    def posterior(
        self,
        X: Tensor,
        output_indices: list[int] | None = None,
        observation_noise: bool | Tensor = False,
        posterior_transform: PosteriorTransform | None = None,
    ) -> GaussianMarginalPosterior:
        r"""The Gaussian of ``model``'s posterior moments at the ``batch_shape x q x d``
        points ``X`` (arguments as in ``Model.posterior``); its mean and variance are
        ``batch_shape x q x m``."""
        posterior = self.model.posterior(
            X,
            output_indices=output_indices,
            observation_noise=observation_noise,
            posterior_transform=posterior_transform,
        )
        return GaussianMarginalPosterior(posterior.mean, posterior.variance)


def _select_on_gaussian_moments(
    cross_validate: Callable[..., float],
) -> Callable[..., float]:
    r"""Ax's ``Surrogate.cross_validate`` (the score of one model config in Ax's model
    selection), with each fold's model of the package served as a
    :class:`GaussianMomentsModel`; other models are scored by Ax as before."""

    def cross_validate_on_gaussian_moments(
        surrogate: Surrogate, *args: Any, **kwargs: Any
    ) -> float:
        construct_model = surrogate._construct_model

        def construct_fold_model(*model_args: Any, **model_kwargs: Any) -> Model:
            model = construct_model(*model_args, **model_kwargs)
            if isinstance(model, NeuralSurrogateModel):
                return GaussianMomentsModel(model)
            return model

        surrogate._construct_model = construct_fold_model
        try:
            return cross_validate(surrogate, *args, **kwargs)
        finally:
            del surrogate._construct_model

    cross_validate_on_gaussian_moments.wraps_ax_cross_validate = True
    return cross_validate_on_gaussian_moments


# Ax's selection asserts a `GPyTorchPosterior` on each fold's model and offers no
# dispatcher for it, so its scoring method is wrapped (once, however often this module
# is executed).
if not getattr(Surrogate.cross_validate, "wraps_ax_cross_validate", False):
    Surrogate.cross_validate = _select_on_gaussian_moments(Surrogate.cross_validate)
