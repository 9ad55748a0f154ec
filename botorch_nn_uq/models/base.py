"""The shared base of every neural surrogate: data checks, transforms, fit(), checkpoints
(its posterior() is :mod:`botorch_nn_uq.models.posterior_serving`'s)."""

from __future__ import annotations

import copy
import dataclasses
import threading
import weakref
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from botorch.exceptions.errors import UnsupportedError
from botorch.models.model import Model
from botorch.models.transforms.input import InputTransform
from botorch.models.transforms.outcome import OutcomeTransform, Standardize
from botorch.models.utils.assorted import validate_input_scaling
from botorch.posteriors import Posterior
from botorch.utils.datasets import SupervisedDataset
from botorch.utils.types import DEFAULT, _DefaultType
from torch import Tensor, nn
from typing_extensions import Self

from botorch_nn_uq.checks import Interval, check_boolean, check_real_number
from botorch_nn_uq.models import checkpoint
from botorch_nn_uq.models.fantasy import ConditioningMixin
from botorch_nn_uq.models.input_transforms import (
    InputCoordinatesError,
    TransformedInputNetwork,
    affine_rebase,
    learnable_parameter_names,
    learnable_state,
    load_learnable_state,
)
from botorch_nn_uq.models.known_noise import transformed_noise_variance, validate_train_Yvar
from botorch_nn_uq.models.last_layer import GaussianConditioning, PredictionWithFeatures, state_key
from botorch_nn_uq.models.posterior_serving import PosteriorServingMixin
from botorch_nn_uq.models.tensor_outputs import (
    flat_outcome_transform,
    scaling_check_targets,
    tensor_output_shape,
)
from botorch_nn_uq.models.validation import validate_output_indices, validate_training_data
from botorch_nn_uq.training.config import TrainedWithLoop, TrainingConfig, TrainingResult
from botorch_nn_uq.training.losses import KnownNoise
from botorch_nn_uq.training.seeding import resolve_seed


def build_hyperparameters(hyperparameter_class: type, values: dict[str, Any], base: Any = None):
    r"""Instantiate ``hyperparameter_class`` (a dataclass) from ``values``, on top of the
    instance ``base`` if given, with an error that lists the valid names on a typo."""
    valid = [field.name for field in dataclasses.fields(hyperparameter_class)]
    unknown = sorted(set(values) - set(valid))
    if unknown:
        raise TypeError(
            f"Unknown hyperparameter(s) {unknown} for {hyperparameter_class.__name__}; "
            f"valid: {', '.join(valid)}."
        )
    if base is None:
        return hyperparameter_class(**values)
    return dataclasses.replace(base, **values)


#: The default ``warm_start_learning_rate_factor`` of :meth:`NeuralSurrogateModel.fit`:
#: Adam's first steps move every weight by about the learning rate whatever the
#: gradient's size, which at the full rate throws converged networks far off their
#: minimum (measured: a deep ensemble's loss rose from -0.28 to 139 in one step, and a warm
#: refit on 1,100 Ackley-20 points ended at twice the previous fit's test error); a
#: tenth of it continues from the minimum and beats a cold refit.
WARM_START_LEARNING_RATE_FACTOR = 0.1

#: One lock per model (see :meth:`NeuralSurrogateModel.serving_lock`), kept outside the
#: model so that models stay copyable and picklable.
_SERVING_LOCKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class NeuralSurrogateModel(ConditioningMixin, PosteriorServingMixin, Model, ABC):
    r"""Base class of the package's neural surrogates (a BoTorch ``Model``).

    It implements, once for every model:

    - validation of ``train_X`` (``n x d``), ``train_Y`` (``n x m``) and the known
      observation noise ``train_Yvar`` (``n x m``) with clear errors; batched training
      data (``batch_shape x n x d``, as BoTorch's batched GPs take them) for the models
      that take them (:attr:`batched_data_limit` ``None``, see
      :mod:`botorch_nn_uq.models.batched_data`), refused by the others with the remedy;
    - known observation noise taken as ``SingleTaskGP`` takes it (see
      :mod:`botorch_nn_uq.models.known_noise`): transformed with the outcomes, it
      replaces the model's own noise model in training, in the posterior and in
      fantasies;
    - ``input_transform`` / ``outcome_transform`` handled like ``SingleTaskGP``: the
      outcome transform is fitted to ``train_Y`` at construction (``Standardize(m)``
      unless one is given; ``outcome_transform=None`` trains on the raw targets), the
      network is trained on transformed inputs and outcomes, inputs are transformed in
      :meth:`posterior` (in ``eval`` mode) and the posterior is mapped back to original
      outcome units; training data that are not scaled as BoTorch recommends (inputs in
      the unit cube, standardised outcomes, after the transforms) get BoTorch's
      ``InputDataWarning``, as for ``SingleTaskGP``;
    - :meth:`fit`, reproducible from a seed and drawing nothing from torch's global
      generator;
    - :meth:`posterior` honouring ``output_indices``, ``observation_noise`` (bool or a
      ``batch_shape x q x m`` tensor of noise variances in the transformed outcome space,
      as for BoTorch's GPs) and ``posterior_transform``.
    - :meth:`condition_on_observations` and :meth:`fantasize` by an exact update of the
      networks' Bayesian last layer (see :mod:`botorch_nn_uq.models.fantasy`);
    - ``model(X)`` (:meth:`forward`), as a GP's: the latent posterior as a
      ``MultivariateNormal``, which BoTorch code such as GIBBON reads.
    - checkpoints: a fitted model's ``state_dict`` (network, fitted buffers and
      transforms, not the training data) loads into a freshly constructed model of the
      same class and configuration, on any training data, which then serves the same
      posterior (see :mod:`botorch_nn_uq.models.checkpoint`), or, with
      ``refit_on_load``, retrains on its own data.

    Subclasses declare ``hyperparameter_class`` (a frozen dataclass validating its
    fields) and implement :meth:`_build_network`, :meth:`_fit` and :meth:`_predict`,
    drawing every random choice from the generator they are given.

    Args:
        train_X: An ``n x d`` tensor of training inputs (``batch_shape x n x d`` for a
            model that takes batched training data).
        train_Y: An ``n x m`` tensor of training targets (``batch_shape x n x m``).
        train_Yvar: An optional ``n x m`` tensor of the observations' known noise
            variances (in ``train_Y``'s units), the third argument as for
            ``SingleTaskGP``; ``None`` lets the model estimate the noise (see
            :mod:`botorch_nn_uq.models.known_noise`).
        input_transform: An optional BoTorch ``InputTransform`` (e.g. ``Normalize(d)``).
        outcome_transform: A BoTorch ``OutcomeTransform``; by default ``Standardize(m)``
            (``Standardize(m, batch_shape=batch_shape)`` on batched training data), as for
            ``SingleTaskGP``; ``None`` trains on the raw targets.
        refit_on_load: Make ``load_state_dict`` retrain the model on its own training
            data, with the checkpoint's configuration and fit seed, instead of serving
            the checkpoint's network: a checkpoint then acts like hyperparameters loaded
            into a GP on other data, which the GP is conditioned on. Ax's
            cross-validation loads the all-data model's checkpoint into a model per fold;
            :mod:`botorch_nn_uq.integrations.ax` sets this so that no fold's model has
            seen its held-out points.
        **hyperparameters: Values for fields of ``hyperparameter_class``.
    """

    hyperparameter_class: ClassVar[type]
    #: The fewest training points a model accepts.
    min_training_points: ClassVar[int] = 2
    #: The hyperparameters that shape the fitted network and its posterior: a checkpoint
    #: loads only into a model with the same values.
    checkpoint_hyperparameters: ClassVar[tuple[str, ...]] = ()
    #: Attributes a fit sets, besides ``training_result``, that record how it went and
    #: that the posterior does not need; a checkpoint does not hold them.
    fit_records: ClassVar[tuple[str, ...]] = ()
    #: The buffers a fit may register (see :meth:`_register_fitted_buffer`); a checkpoint
    #: may carry these and no others.
    fitted_buffer_names: ClassVar[tuple[str, ...]] = ("noise_variance",)
    #: The network outputs the posterior serves, set by :meth:`subset_output`; ``None``
    #: serves all of them.
    _output_selection: list[int] | None = None
    #: Whether a fit trains the learnable parameters of the input transform (e.g.
    #: ``Warp``'s) with the network; models that cannot refuse such transforms, with
    #: :attr:`input_transform_limit` as the reason.
    trains_input_transform: ClassVar[bool] = False
    input_transform_limit: ClassVar[str] = ""
    #: No GPyTorch likelihood (the networks model the noise): BoTorch code that builds
    #: ``mll_cls(model.likelihood, model)``, such as ``batch_cross_validation``, reads
    #: it, and :class:`~botorch_nn_uq.fit.NetworkLoss` ignores it.
    likelihood: ClassVar[None] = None
    #: ``None`` for a model that takes batched training data (``batch_shape x n x d``,
    #: as BoTorch's batched GPs), else why it takes none: its refusal names the remedy
    #: after this reason.
    batched_data_limit: ClassVar[str | None] = "it trains a single network on one data set."

    def __init__(
        self,
        train_X: Tensor,
        train_Y: Tensor,
        # Third, as in SingleTaskGP(train_X, train_Y, train_Yvar).
        train_Yvar: Tensor | None = None,
        # Positional-or-keyword as in BoTorch's GPs: Ax looks for the transforms among
        # these arguments (not keyword-only ones) before it passes them.
        input_transform: InputTransform | None = None,
        outcome_transform: OutcomeTransform | _DefaultType | None = DEFAULT,
        *,
        refit_on_load: bool = False,
        **hyperparameters: Any,
    ) -> None:
        super().__init__()
        #: The shape ``o1 x o2 x ...`` of each point's outputs when the training targets
        #: are tensor-valued (``n x o1 x o2 x ...``, as ``HigherOrderGP`` takes them): the
        #: networks train on the flattened outputs and posteriors serve them in this
        #: shape (:mod:`botorch_nn_uq.models.tensor_outputs`). ``None`` for ``n x m``.
        self.output_shape = tensor_output_shape(train_X, train_Y)
        if self.output_shape is not None:
            if isinstance(train_Yvar, Tensor) and train_Yvar.shape == train_Y.shape:
                train_Yvar = train_Yvar.flatten(1)
            train_Y = train_Y.flatten(1)
            if outcome_transform is not DEFAULT and outcome_transform is not None:
                outcome_transform = flat_outcome_transform(outcome_transform, self.output_shape)
        validate_training_data(
            train_X,
            train_Y,
            min_points=self.min_training_points,
            model_name=type(self).__name__,
            batched_data_limit=self.batched_data_limit,
        )
        if train_Yvar is not None:
            validate_train_Yvar(train_Yvar, train_Y)
        #: The batch shape of the training data (empty for ``n x d`` data).
        self._batch_shape = train_X.shape[:-2]
        if outcome_transform is DEFAULT:
            # Per batch element, as SingleTaskGP standardises batched outcomes.
            outcome_transform = Standardize(m=train_Y.shape[-1], batch_shape=self._batch_shape)
        learnable = learnable_parameter_names(input_transform)
        if learnable and not self.trains_input_transform:
            raise UnsupportedError(
                f"{type(self).__name__} cannot learn the parameters {learnable} of its input "
                f"transform {type(input_transform).__name__}: {self.input_transform_limit} "
                "Fix them (e.g. `transform.requires_grad_(False)`), use a transform without "
                "learnable parameters such as Normalize, or use DeepEnsemble, MCDropout, "
                "NEON or NOMU, which train them with the network."
            )
        if learnable and self._batch_shape:
            # One transform's parameters would be shared by every batch element, which
            # would then no longer be independent models.
            raise UnsupportedError(
                f"{type(self).__name__} cannot learn the parameters {learnable} of its input "
                "transform on batched training data: they would be shared by every batch "
                "element. Fix them (e.g. `transform.requires_grad_(False)`), or fit one model "
                "per batch element on its `n x d` rows."
            )
        check_boolean("refit_on_load", refit_on_load)
        self.refit_on_load = refit_on_load
        self.register_load_state_dict_post_hook(_refit_after_load)
        self.hyperparameters = build_hyperparameters(self.hyperparameter_class, hyperparameters)
        with torch.no_grad():
            transformed_X = self.transform_inputs(train_X, input_transform=input_transform)
        transformed_Y, transformed_Yvar = train_Y, train_Yvar
        if outcome_transform is not None:
            # A transform that cannot map variances (Bilog, Power) raises, as for a GP.
            transformed_Y, transformed_Yvar = outcome_transform(
                train_Y, Yvar=train_Yvar, X=transformed_X
            )
            if not transformed_Y.isfinite().all():
                raise ValueError(
                    f"The outcome transform {type(outcome_transform).__name__} produced "
                    "non-finite training targets."
                )
            self.outcome_transform = outcome_transform
        if train_Yvar is not None:
            transformed_Yvar = transformed_noise_variance(transformed_Yvar, outcome_transform)
        validate_input_scaling(
            train_X=transformed_X,
            **scaling_check_targets(transformed_Y, transformed_Yvar, outcome_transform),
        )
        if input_transform is not None:
            self.input_transform = input_transform
        # What every fit starts a learnable transform from (see _fit_from_seed).
        self._initial_transform_state = learnable_state(input_transform)
        # Not persistent: a checkpoint is the trained function and loads into a model
        # constructed on any data (as BoTorch's GPs keep train_inputs out of state_dict).
        self.register_buffer("train_X", train_X, persistent=False)
        self._network_input_dim = transformed_X.shape[-1]
        self.register_buffer("transformed_train_Y", transformed_Y.detach(), persistent=False)
        # The known noise in original units (a checkpoint's outcome transform maps it
        # again) and as the networks train on it, floored; None without known noise.
        self.register_buffer("train_Yvar", train_Yvar, persistent=False)
        self.register_buffer("transformed_train_Yvar", transformed_Yvar, persistent=False)
        self._check_noise_options(self.hyperparameters)
        self._fitted_buffers: set[str] = set()
        # The networks' outputs (train_Y's columns); num_outputs counts the served ones.
        self._num_outputs = train_Y.shape[-1]
        self.network: nn.Module | None = None
        self.training_result: TrainingResult | None = None
        self.fit_seed: int | None = None
        #: Whether the last fit started from another model's weights (``warm_start``).
        self.warm_started = False
        self._warm_start_learning_rate_factor = WARM_START_LEARNING_RATE_FACTOR
        self.to(train_X)

    @classmethod
    def construct_inputs(
        cls, training_data: SupervisedDataset, **model_options: Any
    ) -> dict[str, Any]:
        r"""The constructor's keyword arguments for ``training_data``, with
        ``model_options`` (hyperparameters and other constructor arguments) passed
        through; Ax builds models this way, from ``ModelConfig.model_options``.

        Observed noise variances (``training_data.Yvar``) are passed as ``train_Yvar``,
        as for BoTorch's GPs.

        Args:
            training_data: A ``SupervisedDataset`` with ``n x d`` inputs and ``n x m``
                outcomes, and optionally ``n x m`` noise variances.
            **model_options: Keyword arguments of the constructor other than the
                training data, e.g. ``ensemble_size=8``.

        Returns:
            A dict of keyword arguments with ``train_X``, ``train_Y`` and, with observed
            noise, ``train_Yvar``.
        """
        if not isinstance(training_data, SupervisedDataset):
            raise TypeError(
                "Expected `training_data` to be a `SupervisedDataset`; got "
                f"{type(training_data).__name__}."
            )
        reserved = sorted({"train_X", "train_Y", "train_Yvar"} & set(model_options))
        if reserved:
            raise TypeError(
                f"{cls.__name__}.construct_inputs takes the training data from "
                f"training_data; got {reserved} in the model options too."
            )
        data = {"train_X": training_data.X, "train_Y": training_data.Y}
        if training_data.Yvar is not None:
            data["train_Yvar"] = training_data.Yvar
        return {**data, **model_options}

    @property
    def has_known_noise(self) -> bool:
        r"""Whether the model was given known observation noise (``train_Yvar``)."""
        return self.transformed_train_Yvar is not None

    def _training_known_noise(self) -> KnownNoise | None:
        r"""The known noise of the training rows as the losses read it (transformed
        outcome space, ``n x m``), or ``None`` without known noise."""
        if self.transformed_train_Yvar is None:
            return None
        return KnownNoise.from_variance(self.transformed_train_Yvar)

    def _check_noise_options(self, hyperparameters: Any) -> None:
        r"""Refuse hyperparameters that set the noise another way than known noise does
        (at construction and for a fit's overrides).

        Args:
            hyperparameters: The hyperparameters to check (an instance of
                :attr:`hyperparameter_class`).
        """
        if self.has_known_noise and getattr(hyperparameters, "noise_variance", None) is not None:
            raise ValueError(
                f"{type(self).__name__} got both train_Yvar (the known noise of every "
                "observation) and noise_variance (one assumed noise variance); give one."
            )

    @property
    def num_outputs(self) -> int:
        r"""The number of outputs ``m`` (after :meth:`subset_output`, the selected ones)."""
        if self._output_selection is None:
            return self._num_outputs
        return len(self._output_selection)

    def subset_output(self, idcs: list[int]) -> Self:
        r"""A copy of the model that serves only the outputs ``idcs``.

        The copy evaluates the same networks and selects their outputs before anything
        else, so its posterior equals ``self.posterior(X, output_indices=idcs)`` bit for
        bit, for every ``observation_noise`` (a noise tensor then has one column per
        selected output) and ``posterior_transform``. Its outcome transform is
        ``outcome_transform.subset_output(idcs)``. Networks and training data keep all
        outputs: a refit of the copy trains on all of them and serves the selected ones.

        Args:
            idcs: Distinct output indices, each in ``[-m, m)``, in the order to serve.

        Returns:
            The copy (fitted if this model is), sharing no state with this model.
        """
        self._refuse_output_selection_of_tensor_outputs("subset_output")
        indices = validate_output_indices(idcs, self.num_outputs, name="idcs")
        indices = [i % self.num_outputs for i in indices]
        if len(set(indices)) != len(indices):
            raise ValueError(f"subset_output needs distinct output indices; got {idcs}.")
        if self._output_selection is not None:
            indices_in_network = [self._output_selection[i] for i in indices]
        else:
            indices_in_network = indices
        subset = self._independent_copy()
        subset._output_selection = indices_in_network
        outcome_transform = getattr(self, "outcome_transform", None)
        if outcome_transform is not None:
            subset.outcome_transform = outcome_transform.subset_output(indices)
        return subset

    def _refuse_output_selection_of_tensor_outputs(self, what: str) -> None:
        r"""Raise if the model serves tensor-valued outputs, which ``what`` (output
        indices into the flattened outputs) would serve as a flat selection."""
        if self.output_shape is not None:
            raise UnsupportedError(
                f"{what} selects among the flattened outputs; this model serves "
                f"tensor-valued outputs of shape {tuple(self.output_shape)}. Select from "
                "the posterior instead, e.g. `model.posterior(X).mean[..., i, j]`, or in "
                "the MC objective from the samples."
            )

    def _independent_copy(self) -> Self:
        r"""A deep copy of the model that shares no tensor or module with it."""
        # Hyperparameters are frozen and may hold executors that cannot be copied.
        return copy.deepcopy(self, memo={id(self.hyperparameters): self.hyperparameters})

    @property
    def batch_shape(self) -> torch.Size:
        r"""The model's batch shape: the training data's, as for BoTorch's batched GPs
        (``batch_shape`` of ``batch_shape x n x d`` data; empty for ``n x d``). A
        posterior at ``batch_shape' x q x d`` inputs has the batch shape
        ``broadcast(batch_shape', batch_shape)``."""
        return self._batch_shape

    def _refuse_batched_model(self, what: str, remedy: str) -> None:
        r"""Raise an ``UnsupportedError`` naming ``remedy`` if the model was trained on
        batched training data, which ``what`` does not support."""
        if self._batch_shape:
            raise UnsupportedError(
                f"{what} is not supported for a {type(self).__name__} trained on batched "
                f"training data (batch shape {tuple(self._batch_shape)}); {remedy}"
            )

    @property
    def is_fitted(self) -> bool:
        r"""Whether :meth:`fit` has completed."""
        return self.network is not None

    def _set_transformed_inputs(self) -> None:
        r"""No-op: training inputs are transformed explicitly in :meth:`fit`, so the
        GP-specific swapping of stored training inputs does not apply."""

    def _revert_to_original_inputs(self) -> None:
        r"""No-op (see :meth:`_set_transformed_inputs`)."""

    def transformed_training_data(self) -> tuple[Tensor, Tensor]:
        r"""The ``batch_shape x n x d'`` transformed training inputs (input transform
        applied in ``train`` mode, as ``SingleTaskGP`` does) and the ``batch_shape x n x
        m`` transformed targets (``n x d'`` and ``n x m`` for unbatched data)."""
        self.train()
        with torch.no_grad():
            transformed_X = self.transform_inputs(self.train_X)
        return transformed_X, self.transformed_train_Y

    def fit(
        self,
        seed: int | None = None,
        progress: bool = False,
        warm_start: NeuralSurrogateModel | None = None,
        warm_start_learning_rate_factor: float = WARM_START_LEARNING_RATE_FACTOR,
        **overrides: Any,
    ) -> Self:
        r"""Train the model.

        Args:
            seed: The seed of every random choice of the fit (initialisation, data
                order, dropout, validation splits, member seeds, searches, artificial
                points, epistemic indices): the fit draws them all from a
                ``torch.Generator`` seeded with it, and nothing from torch's global
                generator, so the same seed gives the same model whatever the global
                state. ``None`` draws the seed from torch's global generator (one
                draw), so that ``torch.manual_seed`` before ``fit()`` makes it
                reproducible.
            progress: Show a tqdm progress bar.
            warm_start: A fitted model of the same class and architecture whose network
                weights initialise this fit (instead of a fresh initialisation), e.g. the
                previous iteration's model in a BO loop. If the two models normalise
                their inputs to different boxes (affine input transforms, e.g. a
                region-local fit whose neighbourhood moved), the network's first layer
                absorbs the change, so the fit starts from the warm start's function
                (networks with a ``rebase_inputs`` method: the deep ensemble's and MC
                dropout's; others raise an
                :class:`~botorch_nn_uq.models.input_transforms.InputCoordinatesError`).
            warm_start_learning_rate_factor: A warm-started fit trains at this factor
                times the hyperparameters' learning rate (the weights start at a
                minimum, which the full rate would leave; see
                :data:`WARM_START_LEARNING_RATE_FACTOR`); in ``(0, 1]``, unused without
                ``warm_start``.
            **overrides: Hyperparameters to change for this and later fits.

        Returns:
            The model itself, fitted (in ``eval`` mode).

        The fit is transactional: it trains a private copy of the model and puts the
        result in place only when it has succeeded. If it raises (a diverging loss, bad
        overrides, ``KeyboardInterrupt``), the model is left exactly as it was before
        the call, still serving its previous fit, or unfitted if it had none; while it
        runs, other threads' predictions are served by the previous fit (see
        :meth:`serving_lock`).
        """
        check_real_number(
            "warm_start_learning_rate_factor",
            warm_start_learning_rate_factor,
            interval=Interval(0.0, 1.0, lower_closed=False),
        )
        candidate = self._private_copy()
        candidate._warm_start_learning_rate_factor = warm_start_learning_rate_factor
        candidate._fit_from_seed(seed, progress, warm_start, overrides)
        self._adopt(candidate)
        return self

    def custom_fit(
        self,
        mll: nn.Module,
        closure: Any = None,
        closure_kwargs: dict[str, Any] | None = None,
        optimizer_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> nn.Module:
        r"""How BoTorch's ``fit_gpytorch_mll(mll, **kwargs)`` fits the model of ``mll``
        (BoTorch calls a model's ``custom_fit`` instead of optimising the objective):
        :meth:`fit` with ``kwargs`` (``seed``, ``progress``, hyperparameter overrides),
        so that ``batch_cross_validation(DeepEnsemble, NetworkLoss, folds,
        fit_args={"seed": 0})`` runs (see :class:`~botorch_nn_uq.fit.NetworkLoss`).

        Args:
            mll: The objective whose ``model`` is this model.
            closure, closure_kwargs, optimizer_kwargs: BoTorch's; a model trained by its
                own loop takes none of them.
            **kwargs: :meth:`fit`'s arguments (``optimizer``, a GP optimiser, refused).

        Returns:
            ``mll``, in ``eval`` mode.
        """
        given = [
            name
            for name, value in (
                ("closure", closure),
                ("closure_kwargs", closure_kwargs),
                ("optimizer_kwargs", optimizer_kwargs),
                ("optimizer", kwargs.get("optimizer")),
            )
            if value is not None
        ]
        if given:
            raise UnsupportedError(
                f"{type(self).__name__} trains with its own training loop; fit_gpytorch_mll "
                f"takes no {given} for it. Pass fit()'s arguments instead, e.g. "
                "`fit_args={'seed': 0}` (training hyperparameters such as `epochs` too)."
            )
        self.fit(**kwargs)
        return mll.eval()

    def _private_copy(self, share_transforms: bool = True) -> Self:
        r"""A copy of the model to fit or load into while this one keeps serving: it has
        its own network, buffers and fit records, and shares what a fit does not change
        (the training data, the hyperparameters and, unless ``share_transforms`` is
        false, the transforms, which a load replaces)."""
        shared = [
            self.hyperparameters,
            self.train_X,
            self.transformed_train_Y,
            self.train_Yvar,
            self.transformed_train_Yvar,
        ]
        if share_transforms:
            shared += [
                getattr(self, name, None) for name in ("input_transform", "outcome_transform")
            ]
        memo = {id(value): value for value in shared if value is not None}
        return copy.deepcopy(self, memo)

    def _adopt(self, candidate: NeuralSurrogateModel) -> None:
        r"""Take over the state of ``candidate`` (a fitted or loaded private copy) at once:
        a prediction running in another thread sees either the old state or the new one
        (see :meth:`serving_lock`)."""
        with self.serving_lock():
            stale = self.__dict__.keys() - candidate.__dict__.keys()
            self.__dict__.update(candidate.__dict__)
            for name in stale:
                del self.__dict__[name]

    def serving_lock(self) -> threading.RLock:
        r"""The lock that a prediction (:meth:`posterior`, ``model(X)``) holds while it
        reads the fitted state, and that a fit or a load holds while it puts the new
        state in place.

        Thread safety: a fit or a ``load_state_dict`` trains or loads a private copy of
        the model and swaps its state in when it has succeeded, so predictions from other
        threads keep being served by the previous fit while it runs and never see a
        half-trained or half-loaded network. Two fits of the same model at once are not
        supported (the later swap wins), nor is changing the model's attributes by hand
        while another thread uses it.
        """
        lock = _SERVING_LOCKS.get(self)
        if lock is None:
            lock = _SERVING_LOCKS.setdefault(self, threading.RLock())
        return lock

    def _fit_from_seed(
        self,
        seed: int | None,
        progress: bool,
        warm_start: NeuralSurrogateModel | None,
        overrides: dict[str, Any],
    ) -> Self:
        check_boolean("progress", progress)
        if overrides:
            hyperparameters = build_hyperparameters(
                self.hyperparameter_class, overrides, base=self.hyperparameters
            )
            self._check_noise_options(hyperparameters)
            self.hyperparameters = hyperparameters
        if warm_start is not None and (
            type(warm_start) is not type(self) or not warm_start.is_fitted
        ):
            raise ValueError(
                f"warm_start must be a fitted {type(self).__name__}; got "
                f"{type(warm_start).__name__} (fitted: {getattr(warm_start, 'is_fitted', False)})."
            )
        self.fit_seed = resolve_seed(seed)
        train_X, train_Y = self.transformed_training_data()
        generator = torch.Generator().manual_seed(self.fit_seed)
        network = self._build_network(train_X.shape[-1], train_Y.shape[-1], generator)
        # A copy trains, and replaces the model's transform only once the fit succeeds:
        # a failed fit leaves the model exactly as it was.
        learned_transform = None
        if learnable_parameter_names(getattr(self, "input_transform", None)):
            learned_transform = copy.deepcopy(self.input_transform)
            # A refit starts from the constructed parameters (same seed, same model); a
            # warm start from its own learned ones, which its network was trained with.
            start = learnable_state(getattr(warm_start, "input_transform", None))
            load_learnable_state(learned_transform, start or self._initial_transform_state)
            train_X = self.train_X
        if network is None and warm_start is not None:
            raise ValueError(
                f"{type(self).__name__} does not support warm_start: its fit chooses the networks."
            )
        if network is not None:
            network = network.to(train_X)
        if warm_start is not None:
            try:
                network.load_state_dict(warm_start.network.state_dict())
            except RuntimeError as error:
                raise ValueError(
                    "warm_start has a different architecture than this fit's network; "
                    f"warm-start only from a model with the same hyperparameters ({error})."
                ) from error
            rebase = affine_rebase(
                getattr(warm_start, "input_transform", None),
                getattr(self, "input_transform", None),
            )
            if rebase is not None:
                if not hasattr(network, "rebase_inputs"):
                    raise InputCoordinatesError(
                        f"warm_start normalised its inputs to another box, and a "
                        f"{type(self).__name__}'s network cannot be re-expressed in this "
                        "fit's input coordinates; warm-start from a model with the same "
                        "input transform."
                    )
                try:
                    network.rebase_inputs(*rebase)
                except ValueError as error:
                    raise InputCoordinatesError(str(error)) from error
        if learned_transform is not None:
            network = TransformedInputNetwork(learned_transform, network)
        self.warm_started = warm_start is not None
        self.network = network
        self.training_result = self._fit(train_X, train_Y, generator, progress=progress)
        if learned_transform is not None:
            self.network = network.network
            self.input_transform = learned_transform
        self.eval()
        return self

    def _set_noise_variance(self, train_X: Tensor, train_Y: Tensor, fixed: float | None) -> None:
        r"""Register the homoscedastic ``noise_variance`` buffer (an ``m``-vector in the
        transformed outcome space, ``batch_shape x m`` for batched training data) that
        ``observation_noise=True`` adds: with known noise, the mean of the known
        variances of each output (what BoTorch's fixed-noise GP adds at new points);
        else ``fixed`` if given, else the mean squared residual of the latent posterior
        mean at the training inputs, floored at ``1e-6`` (each over the rows of a batch
        element)."""
        if self.has_known_noise:
            noise_variance = self.transformed_train_Yvar.mean(dim=-2)
        elif fixed is not None:
            noise_variance = torch.full_like(train_Y[..., 0, :], fixed)
        else:
            with torch.no_grad():
                residuals = self._latent_training_mean(train_X) - train_Y
            noise_variance = residuals.pow(2).mean(dim=-2).clamp_min(1e-6)
        self._register_fitted_buffer("noise_variance", noise_variance)

    def _latent_training_mean(self, train_X: Tensor) -> Tensor:
        r"""The latent posterior mean at the ``n x d'`` transformed training inputs, an
        ``n x m`` tensor in the transformed outcome space, for the noise estimate."""
        # In chunks of rows: a bank of functions at all n points at once holds
        # `functions x n x width` activations (over a gigabyte at n = 10,000).
        means = [
            self._predict(rows.unsqueeze(-2), observation_noise=False).mean.squeeze(-2)
            for rows in train_X.split(1024)
        ]
        return torch.cat(means)

    def is_fitted_buffer_name(self, name: str) -> bool:
        r"""Whether a fit of this model may register a buffer called ``name`` (one of
        :attr:`fitted_buffer_names`); a checkpoint naming any other is refused."""
        return name in self.fitted_buffer_names

    def _register_fitted_buffer(self, name: str, tensor: Tensor) -> None:
        r"""Register a buffer that a fit computes and the posterior reads, so that a
        checkpoint carries it and loading recreates it (a fresh model lacks it)."""
        self.register_buffer(name, tensor)
        self._fitted_buffers.add(name)

    def get_extra_state(self) -> Tensor:
        r"""The checkpoint header stored under ``"_extra_state"`` in ``state_dict``
        (see :mod:`botorch_nn_uq.models.checkpoint`), a ``uint8`` tensor."""
        return checkpoint.encode_header(checkpoint.model_header(self))

    def set_extra_state(self, state: Tensor) -> None:
        r"""Restore the fit's non-tensor attributes from a checkpoint header."""
        checkpoint.restore_fit_attributes(self, state)

    def load_state_dict(
        self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False
    ) -> Any:
        r"""Load a checkpoint (see :mod:`botorch_nn_uq.models.checkpoint`), all or nothing.

        The checkpoint is checked (its header against this model's class and
        configuration and against the shapes of its tensors; every tensor real and
        finite; only the buffers the class declares) and loaded into a private copy of
        the model, whose predictions are then checked too; the copy's state is put in
        place only if everything succeeded (with ``refit_on_load``, after the refit). On
        any error the model is left exactly as it was.

        Args:
            state_dict: A ``state_dict`` of a model of this class and configuration.
            strict: As for ``torch.nn.Module.load_state_dict``.
            assign: As for ``torch.nn.Module.load_state_dict``.

        Returns:
            PyTorch's missing and unexpected keys (empty when ``strict``).
        """
        candidate = self._private_copy(share_transforms=False)
        result = nn.Module.load_state_dict(candidate, state_dict, strict=strict, assign=assign)
        if candidate.is_fitted:
            checkpoint.check_loaded_predictions(candidate)
        self._adopt(candidate)
        return result

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
        # Before PyTorch copies the tensors: a fresh model has neither the network nor
        # the fitted buffers that a checkpoint fills.
        checkpoint.prepare_to_load(self, state_dict, prefix)
        super()._load_from_state_dict(state_dict, prefix, *args)

    @abstractmethod
    def _build_network(
        self, input_dim: int, output_dim: int, generator: torch.Generator
    ) -> nn.Module | None:
        r"""A freshly initialised network for ``input_dim`` (transformed) inputs and
        ``output_dim`` outputs, its initial weights drawn from ``generator``, or ``None``
        when :meth:`_fit` chooses the network itself (searched ensembles; such models do
        not support ``warm_start``)."""

    def _loop_config(self, hyperparameters: TrainedWithLoop) -> TrainingConfig:
        r"""The shared training loop's settings for this fit: the hyperparameters', with
        the learning rate scaled by ``warm_start_learning_rate_factor`` when the fit is
        warm-started."""
        config = hyperparameters.training_config()
        if not self.warm_started:
            return config
        return dataclasses.replace(
            config, learning_rate=config.learning_rate * self._warm_start_learning_rate_factor
        )

    @abstractmethod
    def _fit(
        self, train_X: Tensor, train_Y: Tensor, generator: torch.Generator, progress: bool
    ) -> TrainingResult | None:
        r"""Train ``self.network`` (or build and train it, if :meth:`_build_network`
        returned ``None``) on transformed data (``n x d'`` and ``n x m``), drawing every
        random choice from ``generator`` (the one that built the network, continued),
        and compute any state the posterior needs. Returns the training result, or
        ``None`` when the fit trains many networks that keep their own record (searched
        ensembles: ``search_history``)."""

    @abstractmethod
    def _predict(
        self, X: Tensor, observation_noise: bool, return_features: bool = False
    ) -> Posterior | PredictionWithFeatures:
        r"""The posterior over all outputs in the transformed outcome space.

        Args:
            X: A ``batch_shape x q x d'`` tensor of transformed inputs.
            observation_noise: Whether to include the model's observation noise.
            return_features: Also return the networks' last-layer features, for
                conditioning (see :mod:`botorch_nn_uq.models.last_layer`).

        Returns:
            One of the package's posterior families (with ``subset_outputs``,
            ``add_observation_noise``, ``untransform_outcomes`` and ``scalarize``), or
            with ``return_features`` a
            :class:`~botorch_nn_uq.models.last_layer.PredictionWithFeatures` holding it.
        """

    def _conditioning(
        self, X: Tensor, Y: Tensor, observed: Tensor | None, noise: Tensor | None = None
    ) -> GaussianConditioning:
        r"""The model conditioned on transformed observations, with their noise variances
        ``noise`` where given (see :mod:`botorch_nn_uq.models.last_layer`)."""
        return GaussianConditioning(self, X, Y, observed, noise)

    def _fantasy_posterior(self, X: Tensor, observation_noise: bool | Tensor) -> Posterior:
        r"""The distribution that :meth:`fantasize` draws observations at ``X`` from: the
        posterior (a model whose posterior has independent marginals overrides it with
        one correlated as its conditioning is)."""
        return self.posterior(X, observation_noise=observation_noise)

    def _fitted_state_key(self) -> tuple[tuple[int, int, int], ...]:
        r"""A key that changes whenever a parameter or buffer of the model changes (see
        :func:`~botorch_nn_uq.models.last_layer.state_key`)."""
        return state_key(self)


def _refit_after_load(model: NeuralSurrogateModel, incompatible_keys: Any) -> None:
    r"""The ``load_state_dict`` post-hook of :class:`NeuralSurrogateModel`: retrain a
    model with ``refit_on_load`` on its own data once the checkpoint is loaded."""
    if model.refit_on_load and model.is_fitted:
        # Loading may happen under `torch.no_grad()` (as in prediction code); training
        # needs gradients.
        with torch.enable_grad():
            model.fit(seed=model.fit_seed)
