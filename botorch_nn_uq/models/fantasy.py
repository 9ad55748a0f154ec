"""Conditioning the neural surrogates on new observations: ``condition_on_observations``
and ``fantasize``, which BoTorch's look-ahead acquisition functions
(``qKnowledgeGradient``, ``qMultiFidelityKnowledgeGradient``,
``qNegIntegratedPosteriorVariance``, ...) call.

How a model is conditioned
--------------------------
By an exact update of the Bayesian last layer of its networks, in closed form (see
:mod:`botorch_nn_uq.models.last_layer`): every function of a bank (ensemble member,
dropout mask, epistemic index) keeps its hidden layers and moves its last layer to the
posterior mean given the new observations; NOMU's Gaussian marginals are conditioned as
a Gaussian process whose correlations are those of its last layer's features. The
result is a :class:`FantasyModel`, which evaluates the fitted networks once and adds the
update, so a conditioning costs a few small matrix products and no training.

The update is differentiable in the conditioning inputs and observations: the value of
``qKnowledgeGradient`` and ``qNegIntegratedPosteriorVariance`` has a gradient with
respect to the candidate, and ``optimize_acqf`` moves it. It is exact for the last
layer given the hidden layers; the hidden layers themselves are not retrained, which a
refit on the augmented data would do (``benchmarks/conditioning.py`` compares the two).

The input and outcome transforms stay fixed: new inputs and observations are mapped
through them in ``eval`` mode, as BoTorch's GPs do; inside ``fantasize`` input
transforms with ``transform_on_fantasize=False`` (such as ``AppendFeatures``) are not
applied to the fantasy points, also as for BoTorch's GPs. Conditioning draws nothing
from any random generator: the same observations give the same model.

Observation noise of the new observations
-----------------------------------------
As for BoTorch's GPs: ``condition_on_observations(X, Y, noise=...)`` takes the new
observations' noise variances (in the transformed outcome space); without ``noise`` the
model's own noise applies (its estimate, or with known noise ``train_Yvar`` the mean
known variance). ``fantasize`` without ``observation_noise`` (``None``) draws and
conditions with the model's own noise, which for a model with known noise is what
BoTorch's fixed-noise GP uses, the mean of the training noise; with a tensor of noise
variances it draws with them, and a model with known noise also conditions with them, as
BoTorch's fixed-noise models do (a model that estimates its noise conditions with its
estimate, as it did before models took known noise).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch
from botorch.acquisition.objective import PosteriorTransform
from botorch.exceptions.errors import UnsupportedError
from botorch.models.model import Model
from botorch.models.utils.assorted import fantasize as fantasize_flag
from botorch.posteriors import Posterior
from botorch.sampling.base import MCSampler
from torch import Tensor

from botorch_nn_uq.models.tensor_outputs import flatten_outputs
from botorch_nn_uq.posteriors.tensor_outputs import TensorOutputPosterior

if TYPE_CHECKING:
    from botorch_nn_uq.models.base import NeuralSurrogateModel


#: What to do instead of conditioning a model trained on batched training data.
_BATCHED_REMEDY = (
    "fit one model per batch element on its `n x d` rows (e.g. `train_X[i]`, `train_Y[i]`) "
    "and condition those, or combine them in a ModelList."
)


class ConditioningMixin:
    r"""``condition_on_observations`` and ``fantasize`` for the package's models (mixed
    into :class:`~botorch_nn_uq.models.base.NeuralSurrogateModel`); see the module
    docstring for the method."""

    def condition_on_observations(
        self: NeuralSurrogateModel, X: Tensor, Y: Tensor, noise: Tensor | None = None, **kwargs: Any
    ) -> Model:
        r"""The model conditioned on new observations, by an exact update of its last
        layer (see the module docstring).

        Args:
            X: A ``batch_shape x n' x d`` tensor of new inputs (original input units, as
                for :meth:`posterior`).
            Y: A ``batch_shape' x n' x m`` tensor of new observations (original outcome
                units), ``batch_shape'`` broadcastable with ``batch_shape``.
            noise: The observations' noise variances in the transformed outcome space
                (as for BoTorch's GPs), broadcastable to ``broadcast(batch_shape,
                batch_shape') x n' x m``; ``None`` uses the model's own noise.

        Returns:
            A :class:`FantasyModel` of batch shape ``broadcast(batch_shape,
            batch_shape')``; with ``n' = 0``, the model itself (exact).
        """
        _check_no_extra_arguments(type(self).__name__, kwargs)
        if not self.is_fitted:
            raise RuntimeError(f"{type(self).__name__} is not fitted; call .fit() first.")
        self._refuse_batched_model("Conditioning (condition_on_observations)", _BATCHED_REMEDY)
        Y, noise = _flat_observations(self, Y, noise)
        _validate_observations(self, X, Y)
        noise = _validated_noise(X, Y, noise)
        if X.shape[-2] == 0:
            return self
        transformed_X, transformed_Y = _transformed_observations(self, X, Y)
        return FantasyModel(self, transformed_X, transformed_Y, noise)

    def fantasize(
        self: NeuralSurrogateModel,
        X: Tensor,
        sampler: MCSampler,
        observation_noise: bool | Tensor | None = None,
        **kwargs: Any,
    ) -> Model:
        r"""A fantasy model: the model conditioned on observations sampled at ``X``.

        The fantasies are drawn from ``posterior(X, observation_noise)`` with ``sampler``
        (any BoTorch sampler: normal samplers such as the Sobol sampler of
        ``qKnowledgeGradient`` draw whole functions and mixture members, see
        :mod:`botorch_nn_uq.posteriors`), with gradients, and the model is conditioned on
        them (:meth:`condition_on_observations`).

        Args:
            X: A ``batch_shape x n' x d`` tensor of inputs (original units).
            sampler: The sampler of the fantasies; its ``sample_shape`` is the number
                of fantasies ``num_fantasies``.
            observation_noise: ``None`` or ``True`` draws noisy observations with the
                model's observation noise, ``False`` noiseless function values (the
                conditioning uses the model's noise either way), and a tensor
                broadcastable to ``batch_shape x n' x m`` of noise variances (transformed
                outcome space) draws with these; a model with known noise (``train_Yvar``)
                also conditions with them, as BoTorch's fixed-noise models do.

        Returns:
            A :class:`FantasyModel` of batch shape ``num_fantasies x batch_shape`` whose
            posterior takes ``num_fantasies x batch_shape x q x d`` inputs (or inputs
            broadcastable to it).
        """
        self._refuse_batched_model("fantasize", _BATCHED_REMEDY)
        return _fantasize(self, X, sampler, observation_noise, kwargs)


class FantasyModel(Model):
    r"""A model of the package conditioned on observations: the result of
    :meth:`ConditioningMixin.condition_on_observations` and
    :meth:`ConditioningMixin.fantasize`.

    It holds the fitted model and the observations (mapped through the model's
    transforms); its posterior evaluates the fitted networks once, with their last-layer
    features, and applies the exact last-layer update of every batch element (see
    :mod:`botorch_nn_uq.models.last_layer`). The posterior is of the fitted model's own
    family (finite set of functions, mixture, Gaussian marginals) and follows the same
    ``output_indices``, ``observation_noise`` and ``posterior_transform`` rules.

    Conditioning it again (``condition_on_observations``, ``fantasize``, as multi-step
    look-ahead does) conditions the fitted model on all observations at once, which is
    the same as conditioning in turn. Refitting the underlying model afterwards makes
    this model refuse to predict: its update belongs to the earlier fit.

    Args:
        model: The fitted model.
        X: A ``batch_shape_X x n' x d'`` tensor of transformed conditioning inputs.
        Y: A ``batch_shape_Y x n' x m`` tensor of transformed observations of the
            model's served outputs.
        noise: An optional tensor of the observations' noise variances (transformed
            outcome space), broadcastable to ``broadcast(batch_shape_X, batch_shape_Y) x
            n' x m``, NaN where the model's own noise applies; ``None``: the model's own
            noise for all.

    Example:
        >>> from botorch.sampling import SobolQMCNormalSampler
        >>> from botorch_nn_uq.models import MCDropout
        >>> train_X = torch.rand(10, 2, dtype=torch.float64)
        >>> model = MCDropout(train_X, train_X.sum(-1, keepdim=True), epochs=50).fit(seed=0)
        >>> sampler = SobolQMCNormalSampler(torch.Size([3]), seed=0)
        >>> fantasy = model.fantasize(torch.rand(4, 1, 2, dtype=torch.float64), sampler)
        >>> test_X = torch.rand(3, 4, 5, 2, dtype=torch.float64)
        >>> fantasy.batch_shape, fantasy.posterior(test_X).mean.shape
        (torch.Size([3, 4]), torch.Size([3, 4, 5, 1]))
    """

    def __init__(
        self, model: NeuralSurrogateModel, X: Tensor, Y: Tensor, noise: Tensor | None = None
    ) -> None:
        super().__init__()
        try:
            batch_shape = torch.broadcast_shapes(X.shape[:-2], Y.shape[:-2])
        except RuntimeError as error:
            raise ValueError(
                f"The batch shapes of X {tuple(X.shape[:-2])} and Y {tuple(Y.shape[:-2])} do "
                "not broadcast."
            ) from error
        # Not a submodule: the fantasy model must not appear to own the fitted model's
        # parameters, and the model's fitted state is checked against `_fitted_state`.
        object.__setattr__(self, "_model", model)
        self._conditioning_X = X
        self._conditioning_Y = Y
        self._conditioning_noise = noise
        self._batch_shape = batch_shape
        full_Y, observed = _observed_outputs(model, Y)
        # The outputs a subset model does not serve are not observed: their noise is
        # the model's own (NaN).
        full_noise = None if noise is None else _on_network_outputs(model, noise, math.nan)
        self._conditioning = model._conditioning(X, full_Y, observed, full_noise)
        self._fitted_state = model._fitted_state_key()
        # Kept alive so that the key's storage cannot be reused by other tensors.
        self._fitted_tensors = (*model.parameters(), *model.buffers())

    @property
    def model(self) -> NeuralSurrogateModel:
        r"""The fitted model that was conditioned."""
        return self._model

    @property
    def num_outputs(self) -> int:
        r"""The number of outputs ``m``."""
        return self._model.num_outputs

    @property
    def batch_shape(self) -> torch.Size:
        r"""The batch shape: one conditioned model per element."""
        return self._batch_shape

    def posterior(
        self,
        X: Tensor,
        output_indices: list[int] | None = None,
        observation_noise: bool | Tensor = False,
        posterior_transform: PosteriorTransform | None = None,
        **kwargs: Any,
    ) -> Posterior:
        r"""The posterior of the conditioned models.

        Args:
            X: A ``batch_shape' x q x d`` tensor, ``batch_shape'`` broadcastable with the
                model's ``batch_shape`` (aligned on the right, as for a batched GP; e.g.
                ``num_fantasies x b x q x d``, or ``q x d`` for the same points in every
                conditioned model).
            output_indices: Outputs to return; all if ``None``.
            observation_noise: As for :meth:`NeuralSurrogateModel.posterior` (a tensor
                must broadcast to ``broadcast(batch_shape', batch_shape) x q x m``).
            posterior_transform: An optional BoTorch ``PosteriorTransform``.

        Returns:
            A posterior over ``broadcast(batch_shape', batch_shape) x q x m'`` outputs.
        """
        model = self._model
        if model._fitted_state_key() != self._fitted_state:
            raise RuntimeError(
                f"The {type(model).__name__} this model was conditioned on has been refitted "
                "or changed since; condition the model again."
            )
        if not isinstance(X, Tensor) or X.ndim < 2:
            described = f"shape {tuple(X.shape)}" if isinstance(X, Tensor) else type(X).__name__
            raise ValueError(
                "X must be a `batch_shape x q x d` tensor with at least two dimensions; got "
                f"{described}."
            )
        try:
            torch.broadcast_shapes(X.shape[:-2], self.batch_shape)
        except RuntimeError as error:
            raise ValueError(
                f"The batch shape {tuple(X.shape[:-2])} of X does not broadcast with the "
                f"model's batch shape {tuple(self.batch_shape)}."
            ) from error
        with model.serving_lock():
            return model._posterior(
                X,
                output_indices=output_indices,
                observation_noise=observation_noise,
                posterior_transform=posterior_transform,
                extra_arguments=kwargs,
                predict=self._conditioning.posterior,
            )

    def condition_on_observations(
        self, X: Tensor, Y: Tensor, noise: Tensor | None = None, **kwargs: Any
    ) -> FantasyModel:
        r"""The fitted model conditioned on this model's observations and ``(X, Y)``
        together (arguments as for :meth:`ConditioningMixin.condition_on_observations`;
        the batch shapes broadcast with this model's)."""
        model = self._model
        _check_no_extra_arguments(type(self).__name__, kwargs)
        Y, noise = _flat_observations(model, Y, noise)
        _validate_observations(model, X, Y)
        noise = _validated_noise(X, Y, noise)
        if X.shape[-2] == 0:
            return self
        transformed_X, transformed_Y = _transformed_observations(model, X, Y)
        all_noise = None
        if noise is not None or self._conditioning_noise is not None:
            # Observations conditioned on without noise keep the model's own (NaN).
            all_noise = _concatenate(
                _noise_or_model_noise(self._conditioning_noise, self._conditioning_Y),
                _noise_or_model_noise(noise, transformed_Y),
            )
        return FantasyModel(
            model,
            _concatenate(self._conditioning_X, transformed_X),
            _concatenate(self._conditioning_Y, transformed_Y),
            all_noise,
        )

    def fantasize(
        self,
        X: Tensor,
        sampler: MCSampler,
        observation_noise: bool | Tensor | None = None,
        **kwargs: Any,
    ) -> FantasyModel:
        r"""This model conditioned on fantasies at ``X`` as well (see
        :meth:`ConditioningMixin.fantasize`)."""
        return _fantasize(self, X, sampler, observation_noise, kwargs)


def _fantasize(
    model: Model,
    X: Tensor,
    sampler: MCSampler,
    observation_noise: bool | Tensor | None,
    kwargs: dict[str, Any],
) -> Model:
    r"""``model.condition_on_observations`` with observations drawn at ``X`` by
    ``sampler``, with BoTorch's fantasize flag set (so input transforms with
    ``transform_on_fantasize=False`` leave the fantasy points as they are)."""
    _check_no_extra_arguments(type(model).__name__, kwargs)
    if not isinstance(sampler, MCSampler):
        raise TypeError(f"sampler must be a BoTorch MCSampler; got {type(sampler).__name__}.")
    base = model.model if isinstance(model, FantasyModel) else model
    base._validate_inputs(X)
    # The noise the conditioning uses instead of the model's own: a tensor given to a model
    # with known noise, as BoTorch's fixed-noise models use it.
    noise = None
    if observation_noise is None:
        observation_noise = True
    elif isinstance(observation_noise, Tensor):
        outputs = (
            torch.Size([model.num_outputs]) if base.output_shape is None else base.output_shape
        )
        target = X.shape[:-1] + outputs
        try:
            observation_noise = observation_noise.expand(target)
        except RuntimeError as error:
            raise ValueError(
                f"observation_noise of shape {tuple(observation_noise.shape)} does not "
                f"broadcast to `batch_shape x n' x outputs` = {tuple(target)}."
            ) from error
        if base.has_known_noise:
            noise = observation_noise
    with fantasize_flag():
        if isinstance(model, FantasyModel):
            posterior = model.posterior(X, observation_noise=observation_noise)
        else:
            posterior = model._fantasy_posterior(X, observation_noise)
        Y = sampler(posterior)
        if base.output_shape is not None and not isinstance(posterior, TensorOutputPosterior):
            # A family's own fantasy distribution may be over the flattened outputs.
            Y = Y.unflatten(-1, base.output_shape)
        return model.condition_on_observations(X, Y, noise=noise)


def _check_no_extra_arguments(name: str, kwargs: dict[str, Any]) -> None:
    if kwargs:
        raise UnsupportedError(
            f"{name}.condition_on_observations does not support the argument(s) {sorted(kwargs)}."
        )


def _flat_observations(
    model: NeuralSurrogateModel, Y: Tensor, noise: Tensor | None
) -> tuple[Tensor, Tensor | None]:
    r"""Observations ``Y`` and their ``noise`` of a model of tensor-valued outputs
    (``batch_shape x n' x o1 x o2 x ...``) with the outputs flattened, as its networks
    take them; unchanged for ``n x m`` outputs."""
    if model.output_shape is None or not isinstance(Y, Tensor):
        return Y, noise
    Y = flatten_outputs(Y, model.output_shape, "Y")
    if isinstance(noise, Tensor):
        noise = flatten_outputs(noise, model.output_shape, "noise")
    return Y, noise


def _validate_observations(model: NeuralSurrogateModel, X: Tensor, Y: Tensor) -> None:
    r"""Check ``X`` (``batch_shape x n' x d``) and ``Y`` (``batch_shape' x n' x m``) for
    conditioning ``model``."""
    model._validate_inputs(X)
    num_outputs = model.num_outputs
    if not isinstance(Y, Tensor):
        raise TypeError(f"Y must be a torch.Tensor; got {type(Y).__name__}.")
    if Y.ndim < 2 or Y.shape[-1] != num_outputs or Y.shape[-2] != X.shape[-2]:
        raise ValueError(
            f"Y must be a `batch_shape x n' x m` tensor with n' = {X.shape[-2]} (the points "
            f"of X) and m = {num_outputs}; got shape {tuple(Y.shape)}."
        )
    if Y.dtype != X.dtype or Y.device != X.device:
        raise ValueError(
            f"Y ({Y.dtype}, {Y.device}) must have the dtype and device of X ({X.dtype}, "
            f"{X.device})."
        )
    if not Y.isfinite().all():
        raise ValueError("Y contains NaN or infinite values.")
    try:
        torch.broadcast_shapes(X.shape[:-2], Y.shape[:-2])
    except RuntimeError as error:
        raise ValueError(
            f"The batch shapes of X {tuple(X.shape[:-2])} and Y {tuple(Y.shape[:-2])} do "
            "not broadcast."
        ) from error


def _validated_noise(X: Tensor, Y: Tensor, noise: Tensor | None) -> Tensor | None:
    r"""``noise``, the variances of observations ``Y`` at ``X`` (checked before),
    checked and expanded to ``broadcast(batch_shape_X, batch_shape_Y) x n' x m``; ``None``
    stays ``None``."""
    if noise is None:
        return None
    if not isinstance(noise, Tensor):
        raise TypeError(
            f"noise must be a torch.Tensor of noise variances; got {type(noise).__name__}."
        )
    target = torch.broadcast_shapes(X.shape[:-2], Y.shape[:-2]) + Y.shape[-2:]
    try:
        noise = noise.expand(target)
    except RuntimeError as error:
        raise ValueError(
            f"noise of shape {tuple(noise.shape)} does not broadcast to the observations' "
            f"`batch_shape x n' x m` = {tuple(target)}."
        ) from error
    if noise.dtype != Y.dtype or noise.device != Y.device:
        raise ValueError(
            f"noise ({noise.dtype}, {noise.device}) must have the dtype and device of Y "
            f"({Y.dtype}, {Y.device})."
        )
    if not (noise.isfinite() & (noise >= 0)).all():
        raise ValueError("noise must hold finite, non-negative variances.")
    return noise


def _noise_or_model_noise(noise: Tensor | None, Y: Tensor) -> Tensor:
    r"""``noise`` of observations ``Y``, or NaN (the model's own noise) for each of them
    where none was given."""
    return torch.full_like(Y, math.nan) if noise is None else noise


def _transformed_observations(
    model: NeuralSurrogateModel, X: Tensor, Y: Tensor
) -> tuple[Tensor, Tensor]:
    r"""``X`` and ``Y`` mapped through the model's fixed transforms (``eval`` mode),
    keeping their graphs: the conditioning is differentiable in them."""
    model.eval()
    transformed_X = model._transformed_test_inputs(X)
    if transformed_X.shape[:-1] != X.shape[:-1]:
        raise UnsupportedError(
            f"{type(model).__name__} cannot condition on observations at inputs that its "
            f"input transform maps to a different number of points ({tuple(X.shape)} to "
            f"{tuple(transformed_X.shape)}); pass inputs that already hold the appended "
            "features, or use fantasize (which does not apply such transforms)."
        )
    outcome_transform = getattr(model, "outcome_transform", None)
    transformed_Y = Y if outcome_transform is None else outcome_transform(Y, X=transformed_X)[0]
    if not transformed_Y.isfinite().all():
        raise ValueError(
            f"The outcome transform {type(outcome_transform).__name__} maps Y to non-finite values."
        )
    return transformed_X, transformed_Y


def _observed_outputs(model: NeuralSurrogateModel, Y: Tensor) -> tuple[Tensor, Tensor | None]:
    r"""Observations of the served outputs as observations of all network outputs: a
    model serving a subset (``subset_output``) observes only those; the others get
    zeros and a mask that marks them unobserved."""
    selection = model._output_selection
    if selection is None:
        return Y, None
    observed = torch.zeros(model._num_outputs, dtype=torch.bool, device=Y.device)
    observed[selection] = True
    return _on_network_outputs(model, Y, 0.0), observed


def _on_network_outputs(model: NeuralSurrogateModel, values: Tensor, fill: float) -> Tensor:
    r"""``values`` of the served outputs (``... x m``) as values of all network outputs
    (``... x M``), ``fill`` at the outputs a subset model does not serve."""
    selection = model._output_selection
    if selection is None:
        return values
    full = values.new_full((*values.shape[:-1], model._num_outputs), fill)
    full[..., selection] = values
    return full


def _concatenate(old: Tensor, new: Tensor) -> Tensor:
    r"""``old`` and ``new`` (``batch x n x k``) joined along the points, their batch
    shapes broadcast."""
    batch_shape = torch.broadcast_shapes(old.shape[:-2], new.shape[:-2])
    return torch.cat(
        [old.expand(*batch_shape, *old.shape[-2:]), new.expand(*batch_shape, *new.shape[-2:])],
        dim=-2,
    )
