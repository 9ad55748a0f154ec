"""How a fitted neural surrogate answers queries: :meth:`~PosteriorServingMixin.posterior`
and ``model(X)`` (:meth:`~PosteriorServingMixin.forward`), with the checks of the test
inputs, the input transform, the selection of outputs, observation noise, the outcome
transform and posterior transforms, in that order."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from botorch.acquisition.objective import PosteriorTransform
from botorch.exceptions.errors import BotorchTensorDimensionError, UnsupportedError
from botorch.posteriors import Posterior
from gpytorch.distributions import MultivariateNormal
from torch import Tensor

from botorch_nn_uq.models.batched_data import MembersFirstOutcomeTransform
from botorch_nn_uq.models.scaling import inputs_outside_bounds, warn_inputs_outside_bounds
from botorch_nn_uq.models.tensor_outputs import flatten_outputs
from botorch_nn_uq.models.validation import (
    NON_FINITE_INPUTS,
    validate_observation_noise,
    validate_output_indices,
    validate_test_inputs,
)
from botorch_nn_uq.posteriors.tensor_outputs import TensorOutputPosterior
from botorch_nn_uq.posteriors.transforms import apply_posterior_transform

if TYPE_CHECKING:
    from botorch_nn_uq.models.base import NeuralSurrogateModel

#: How far (in box widths) test inputs may lie outside declared ``Normalize`` bounds before
#: a warning: mild extrapolation is common (optimisers step just outside a box, plots
#: extend past it); half a box width away is a likely mistake.
TEST_BOUNDS_TOLERANCE = 0.5


class PosteriorServingMixin:
    r"""``posterior`` and ``model(X)`` for the package's models (mixed into
    :class:`~botorch_nn_uq.models.base.NeuralSurrogateModel`, which provides the fitted
    state and the transformed-space prediction ``_predict``); see the module docstring."""

    def forward(self: NeuralSurrogateModel, X: Tensor) -> MultivariateNormal:
        r"""The latent posterior at ``X`` in the form a BoTorch GP's ``model(X)`` gives
        it (BoTorch code such as ``qLowerBoundMaxValueEntropy`` and cost models call the
        model this way).

        Args:
            X: A ``batch_shape x q x d`` tensor of inputs (original units, as for
                :meth:`posterior`).

        Returns:
            A ``MultivariateNormal`` over the ``q`` points of the latent function in the
            TRANSFORMED outcome space (as a GP's), with batch shape ``batch_shape`` for
            one output and ``batch_shape x m`` for several. Its covariance is the
            model's joint covariance across the points: for a finite set of functions
            (ensemble members, dropout masks, epistemic indices) their weighted
            covariance, moment-matched; for NOMU, whose marginals are independent,
            diagonal.
        """
        with self.serving_lock():
            self._check_posterior_inputs(X)
            transformed_X = self._transformed_test_inputs(X)
            posterior = self._predict(transformed_X, observation_noise=False)
            if self._output_selection is not None:
                posterior = posterior.subset_outputs(self._output_selection)
            return posterior.output_batched_distribution()

    def _check_posterior_inputs(
        self: NeuralSurrogateModel, X: Tensor, check_values: bool = True
    ) -> None:
        r"""Refuse an unfitted model and malformed ``X`` (with ``check_values``, also
        non-finite entries; float32 ``X`` of a float64 model is accepted and promoted by
        :meth:`_transformed_test_inputs`); put the model in ``eval`` mode."""
        if not self.is_fitted:
            raise RuntimeError(f"{type(self).__name__} is not fitted; call .fit() first.")
        self._validate_inputs(X, check_values=check_values, promote=True)
        # Switching modes walks every submodule (a fifth of a small posterior call inside
        # an acquisition's optimisation); a model already in eval mode is left as it is.
        if any(module.training for module in self.modules()):
            self.eval()

    def _validate_inputs(
        self: NeuralSurrogateModel, X: Tensor, check_values: bool = True, promote: bool = False
    ) -> None:
        r"""Check test inputs ``X`` (``batch_shape x q x d``): type, shape, dtype (with
        ``promote``, float32 inputs of a float64 model pass), device, finiteness (with
        ``check_values``), and ``d`` where no input transform may change it."""
        validate_test_inputs(
            X,
            self.train_X,
            check_dimension=getattr(self, "input_transform", None) is None,
            check_values=check_values,
            promote=promote,
        )

    def _check_input_values(self: NeuralSurrogateModel, X: Tensor, transformed_X: Tensor) -> None:
        r"""Refuse non-finite entries of ``X`` and warn about inputs far outside the
        declared bounds (``transformed_X``, after the input transform), with ONE read
        from the device for both: a posterior call inside an acquisition optimisation
        then waits for the device once."""
        input_transform = getattr(self, "input_transform", None)
        outside = inputs_outside_bounds(transformed_X, input_transform, TEST_BOUNDS_TOLERANCE)
        flags = [X.isfinite().all().logical_not()]
        if outside is not None:
            flags.append(outside.any())
        non_finite, *outside_flag = torch.stack(flags).tolist()
        if non_finite:
            raise ValueError(NON_FINITE_INPUTS)
        if outside_flag and outside_flag[0]:
            warn_inputs_outside_bounds(transformed_X, outside, input_transform, "test inputs")

    def _transformed_test_inputs(self: NeuralSurrogateModel, X: Tensor) -> Tensor:
        r"""``X``, promoted to the model's dtype, through the input transform (in the
        model's current mode), checked against the networks' input dimension."""
        X = X.to(self.train_X.dtype)
        try:
            transformed_X = self.transform_inputs(X)
        except (RuntimeError, ValueError, BotorchTensorDimensionError) as error:
            if X.shape[-1] == self.train_X.shape[-1]:
                raise
            raise ValueError(
                f"X has {X.shape[-1]} input dimensions but the model was trained on "
                f"{self.train_X.shape[-1]}, and its input transform "
                f"{type(self.input_transform).__name__} cannot map them ({error})."
            ) from error
        if transformed_X.shape[-1] != self._network_input_dim:
            raise ValueError(
                f"X has {X.shape[-1]} input dimensions, which the input transform maps to "
                f"{transformed_X.shape[-1]}; the model's networks take "
                f"{self._network_input_dim} (it was trained on {self.train_X.shape[-1]})."
            )
        return transformed_X

    def posterior(
        self: NeuralSurrogateModel,
        X: Tensor,
        output_indices: list[int] | None = None,
        observation_noise: bool | Tensor = False,
        posterior_transform: PosteriorTransform | None = None,
        **kwargs: Any,
    ) -> Posterior:
        r"""The posterior at ``X`` in original outcome units.

        Args:
            X: A ``batch_shape x q x d`` tensor of inputs (``q x d`` is fine); for a model
                trained on batched data, ``batch_shape`` broadcasts with the model's
                ``batch_shape`` (as for a batched GP: ``q x d``, ``batch_shape x q x
                d``, ``b x batch_shape x q x d`` or ``b x 1 x q x d``).
            output_indices: Outputs to return; all if ``None``. Not for tensor-valued
                outputs.
            observation_noise: ``False`` for the latent function; ``True`` to include
                the model's observation noise; a ``batch_shape x q x m`` tensor of noise
                variances (transformed outcome space; ``batch_shape x q x o1 x o2 x
                ...`` for tensor-valued outputs) to add instead.
            posterior_transform: An optional BoTorch ``PosteriorTransform`` (of the
                flattened outputs, for tensor-valued ones).

        Returns:
            A posterior over ``batch_shape x q x m'`` outputs (``batch_shape`` broadcast
            with the model's batch shape; ``m'`` the number of
            selected outputs; 1 after a scalarising transform), or, for tensor-valued
            outputs without a posterior transform, a
            :class:`~botorch_nn_uq.posteriors.TensorOutputPosterior` over
            ``batch_shape x q x o1 x o2 x ...``.
        """
        with self.serving_lock():
            return self._posterior(
                X, output_indices, observation_noise, posterior_transform, kwargs, self._predict
            )

    def _posterior(
        self: NeuralSurrogateModel,
        X: Tensor,
        output_indices: list[int] | None,
        observation_noise: bool | Tensor,
        posterior_transform: PosteriorTransform | None,
        extra_arguments: dict[str, Any],
        predict: Callable[[Tensor, bool], Posterior],
    ) -> Posterior:
        r""":meth:`posterior` with the transformed-space prediction ``predict``
        (``transformed_X, observation_noise -> posterior``): this model's
        :meth:`_predict`, or a conditioned model's."""
        if extra_arguments:
            raise UnsupportedError(
                f"{type(self).__name__}.posterior does not support the argument(s) "
                f"{sorted(extra_arguments)}."
            )
        self._check_posterior_inputs(X, check_values=False)
        if not isinstance(observation_noise, (bool, Tensor)):
            raise ValueError(
                "observation_noise must be True, False or a tensor of noise variances; "
                f"got {observation_noise!r}."
            )
        if output_indices is not None:
            self._refuse_output_selection_of_tensor_outputs("output_indices")
            output_indices = validate_output_indices(output_indices, self.num_outputs)
        transformed_X = self._transformed_test_inputs(X)
        self._check_input_values(X, transformed_X)
        if isinstance(observation_noise, Tensor) and self.output_shape is not None:
            observation_noise = flatten_outputs(
                observation_noise, self.output_shape, "observation_noise"
            )
        if isinstance(observation_noise, Tensor):
            validate_observation_noise(
                observation_noise, transformed_X.shape[:-1] + torch.Size([self.num_outputs])
            )
        posterior = predict(transformed_X, observation_noise is True)
        if self._output_selection is not None:
            posterior = posterior.subset_outputs(self._output_selection)
        if isinstance(observation_noise, Tensor):
            posterior = posterior.add_observation_noise(observation_noise.to(transformed_X))
        outcome_transform = getattr(self, "outcome_transform", None)
        if output_indices is not None:
            posterior = posterior.subset_outputs(output_indices)
            if outcome_transform is not None:
                outcome_transform = outcome_transform.subset_output(
                    [i % self.num_outputs for i in output_indices]
                )
        if outcome_transform is not None and self.batch_shape:
            # A batched model's posterior holds its functions at dimension -3, between the
            # batch dimensions that the transform's batch_shape must meet and the points.
            outcome_transform = MembersFirstOutcomeTransform(outcome_transform)
        if outcome_transform is not None:
            posterior = posterior.untransform_outcomes(outcome_transform, X=transformed_X)
        if posterior_transform is not None:
            return apply_posterior_transform(posterior, posterior_transform, X=transformed_X)
        if self.output_shape is not None:
            return TensorOutputPosterior(posterior, self.output_shape)
        return posterior
