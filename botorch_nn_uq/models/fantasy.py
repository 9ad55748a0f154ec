"""Conditioning the neural surrogates on new observations: ``condition_on_observations``
and ``fantasize``, which BoTorch's look-ahead acquisition functions
(``qKnowledgeGradient``, ``qNegIntegratedPosteriorVariance``, ...) call.

How a model is conditioned
--------------------------
A GP conditions on new observations exactly (a low-rank update of its posterior). No
network of the package has such an update (their posteriors are not conjugate to the
data), so a model conditions on ``(X, Y)`` by a **warm-started short refit** on the
augmented data: a copy starts from the fitted weights and trains for ``max_steps``
full-batch optimizer steps (default :attr:`ConditioningMixin.conditioning_steps`) on the
old rows plus the new ones. The input and outcome transforms stay fixed (the new points
are mapped through them in ``eval`` mode, as BoTorch's GPs do), so the warm-started
networks keep their coordinates. Each family keeps its own training:

- Ensembles (every :class:`~botorch_nn_uq.models.member_ensemble.MemberEnsemble`:
  deep and hyper-deep ensembles, NES-RS, NES-RE, AutoDEUQ): the serving members continue
  training, one batched computation per architecture, on their data loss (Gaussian NLL
  or squared error) with Adam, each member keeping its best-loss weights. Member weights
  and the noise estimate are kept; the searches and selections are not rerun (they
  would cost a full fit), nor are the resampling and L2 penalties of the original fit
  applied. This is also why the searched ensembles, which cannot ``warm_start`` a fit,
  can be conditioned.
- :class:`~botorch_nn_uq.models.MCDropout`, :class:`~botorch_nn_uq.models.NEON`,
  :class:`~botorch_nn_uq.models.NOMU`: the model's own training (dropout, random
  epistemic indices, NOMU's loss with artificial points in the fitted input box),
  warm-started from the fitted network with a budget of ``max_steps`` steps; afterwards
  the function bank (dropout masks, epistemic indices) is redrawn and the noise
  re-estimated, as after a fit. NOMU keeps its calibration constant.

Conditioning on no points is exact: the model itself. Refits draw their randomness from
a generator seeded with ``seed`` (by default the model's ``fit_seed``), so conditioning is
reproducible and draws nothing from torch's global generator.

Learning rate and steps
-----------------------
A fresh Adam moves every weight by about the learning rate in its first steps. At the
fits' own rates (5e-3 for the ensembles and MC dropout) this pushes a converged network
off its fit, and tens of steps do not recover: a short refit at that rate can end further
from the full refit than the model it started from. The default rate is therefore the
model's own, at most ``1e-3``, and the default budget 100 steps.

Accuracy
--------
``benchmarks/conditioning.py`` compares a conditioned model with a full refit on the
augmented data. With the defaults the conditioned model is about as close to the full
refit as a full refit with another seed is. Where the data are sparse it takes in only
part of a surprising observation; more steps or a larger ``learning_rate`` take in more.
A conditioning costs a fraction of a full fit. The measurements behind this section and
the default learning rate are in ``benchmarks/README.md``, section "Conditioning on
observations".

Gradients
---------
The refits train on detached data: a fantasy model's posterior is differentiable in its
test inputs but not in the inputs it was conditioned on (a zero derivative, see
:class:`FantasyModel`). In ``qKnowledgeGradient`` the fantasy points (the value
function's inputs) move under a gradient-based optimizer while the candidate keeps its
initial condition, the best of ``optimize_acqf``'s raw samples by value;
``qNegIntegratedPosteriorVariance`` likewise ranks its raw samples by value.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from botorch.acquisition.objective import PosteriorTransform
from botorch.exceptions.errors import UnsupportedError
from botorch.models.model import Model
from botorch.posteriors import Posterior
from botorch.sampling.base import MCSampler
from botorch.sampling.get_sampler import get_sampler
from botorch.sampling.normal import NormalMCSampler
from torch import Tensor, nn

from botorch_nn_uq.checks import POSITIVE, check_integer, check_real_number, check_seed
from botorch_nn_uq.models.validation import validate_test_inputs
from botorch_nn_uq.nn.batched_mlp import DATA_ORDER_STREAM, BatchedMLP, EnsembleNetwork
from botorch_nn_uq.posteriors.stacking import stack_posteriors
from botorch_nn_uq.training.config import TrainingConfig, TrainingResult
from botorch_nn_uq.training.loop import train_network
from botorch_nn_uq.training.members import member_row_losses

if TYPE_CHECKING:
    from botorch_nn_uq.models.base import NeuralSurrogateModel

#: The default step budget of a conditioning refit (see the module docstring).
DEFAULT_CONDITIONING_STEPS = 100
#: The largest default learning rate of a conditioning refit (see the module docstring).
DEFAULT_CONDITIONING_LEARNING_RATE = 1e-3
#: Members times rows of one batched conditioning of ensembles: bounds the activations
#: (``members x rows x width`` per layer, 128 MiB at width 64 in float64).
MEMBER_ROW_BUDGET = 2**18


class ConditioningMixin:
    r"""``condition_on_observations`` and ``fantasize`` for the package's models (mixed
    into :class:`~botorch_nn_uq.models.base.NeuralSurrogateModel`); see the module
    docstring for the method."""

    #: Optimizer steps of a conditioning refit; set it on a model
    #: (``model.conditioning_steps = 200``) or pass ``max_steps``.
    conditioning_steps: int = DEFAULT_CONDITIONING_STEPS

    def condition_on_observations(
        self: NeuralSurrogateModel,
        X: Tensor,
        Y: Tensor,
        max_steps: int | None = None,
        learning_rate: float | None = None,
        seed: int | None = None,
        **kwargs: Any,
    ) -> Model:
        r"""Condition the model on new observations by a warm-started short refit.

        Args:
            X: A ``batch_shape x n' x d`` tensor of new inputs (original input units, as
                for :meth:`posterior`).
            Y: A ``batch_shape' x n' x m`` tensor of new observations (original outcome
                units), ``batch_shape'`` broadcastable with ``batch_shape``.
            max_steps: Optimizer steps of each refit; default ``conditioning_steps``.
            learning_rate: The refit's learning rate; default the model's
                ``learning_rate`` hyperparameter, at most ``1e-3``.
            seed: The refits' seed (dropout, data order); default the model's
                ``fit_seed``. Every batch element uses it.

        Returns:
            With no batch dimensions, a model of the same class fitted on the training
            data plus ``(X, Y)``. Otherwise a :class:`FantasyModel` of batch shape
            ``broadcast(batch_shape, batch_shape')`` holding one such model per batch
            element. With ``n' = 0`` the model itself (exact).
        """
        if kwargs:
            if "noise" in kwargs:
                raise UnsupportedError(
                    f"{type(self).__name__} cannot condition on observations with known "
                    "noise variances (`noise`): its networks weight all observations alike."
                )
            raise UnsupportedError(
                f"{type(self).__name__}.condition_on_observations does not support the "
                f"argument(s) {sorted(kwargs)}."
            )
        if not self.is_fitted:
            raise RuntimeError(f"{type(self).__name__} is not fitted; call .fit() first.")
        batch_shape = _validate_observations(X, Y, self.train_X, self.num_outputs)
        steps = self.conditioning_steps if max_steps is None else max_steps
        check_integer("max_steps", steps)
        if learning_rate is None:
            learning_rate = min(
                getattr(self.hyperparameters, "learning_rate", math.inf),
                DEFAULT_CONDITIONING_LEARNING_RATE,
            )
        check_real_number("learning_rate", learning_rate, interval=POSITIVE)
        seed = self.fit_seed if seed is None else seed
        check_seed("seed", seed)
        num_models = batch_shape.numel()
        if X.shape[-2] == 0:
            return self if not batch_shape else FantasyModel([self] * num_models, batch_shape)
        original_X = X
        X = X.expand(batch_shape + X.shape[-2:]).reshape(num_models, *X.shape[-2:])
        Y = Y.expand(batch_shape + Y.shape[-2:]).reshape(num_models, *Y.shape[-2:])
        old_X, transformed_X, transformed_Y = self._transformed_observations(X, Y)
        models = [self._augmented_copy(X[i], transformed_Y[i]) for i in range(num_models)]
        train_X = torch.cat([old_X.expand(num_models, *old_X.shape), transformed_X], dim=-2)
        train_Y = torch.stack([model.transformed_train_Y for model in models])
        # Acquisition functions are often evaluated under `torch.no_grad()` (e.g. the
        # raw samples of `optimize_acqf`); the refits need gradients all the same.
        if isinstance(self.network, EnsembleNetwork):
            with torch.enable_grad():
                results = _continue_members(
                    [model.network for model in models],
                    train_X,
                    train_Y,
                    steps,
                    learning_rate,
                    torch.Generator().manual_seed(seed),
                )
            for model, result in zip(models, results, strict=True):
                model.training_result = result
        else:
            for model, X_i, Y_i in zip(models, train_X, train_Y, strict=True):
                # A generator per model: a batch element is conditioned as it would be alone.
                with torch.enable_grad():
                    _refit(
                        model, X_i, Y_i, steps, learning_rate, torch.Generator().manual_seed(seed)
                    )
        for model in models:
            model.fit_seed = seed
            model.eval()
        if not batch_shape:
            return models[0]
        return FantasyModel(models, batch_shape, conditioning_inputs=original_X)

    def fantasize(
        self: NeuralSurrogateModel,
        X: Tensor,
        sampler: MCSampler,
        observation_noise: bool | Tensor | None = None,
        **kwargs: Any,
    ) -> Model:
        r"""A fantasy model: the model conditioned on observations sampled at ``X``.

        The fantasies are drawn from ``posterior(X, observation_noise)`` with
        ``sampler``, and the model is conditioned on each (see
        :meth:`condition_on_observations`: a warm-started short refit per fantasy and
        batch element). A sampler that is not the posterior family's own (such as the
        Sobol normal sampler of ``qKnowledgeGradient``, which would see an ensemble's
        mixture only through its moment-matched Gaussian) is replaced by the family's
        sampler (``get_sampler``) with the same sample shape and seed, so the fantasies
        follow the model's posterior and stay fixed across calls.

        Args:
            X: A ``batch_shape x n' x d`` tensor of inputs (original units).
            sampler: The sampler of the fantasies; its ``sample_shape`` is the number
                of fantasies ``num_fantasies``.
            observation_noise: ``None`` or ``True`` draws noisy observations with the
                model's observation noise, ``False`` noiseless function values, and a
                tensor broadcastable to ``batch_shape x n' x m`` adds these noise
                variances (transformed outcome space) instead.
            **kwargs: ``max_steps``, ``learning_rate``, ``seed`` of
                :meth:`condition_on_observations`.

        Returns:
            A :class:`FantasyModel` of batch shape ``num_fantasies x batch_shape`` whose
            posterior takes ``num_fantasies x batch_shape x q x d`` inputs (or inputs
            broadcastable to it).
        """
        validate_test_inputs(X, self.train_X)
        if observation_noise is None:
            observation_noise = True
        elif isinstance(observation_noise, Tensor):
            target = X.shape[:-1] + torch.Size([self.num_outputs])
            try:
                observation_noise = observation_noise.expand(target)
            except RuntimeError as error:
                raise ValueError(
                    f"observation_noise of shape {tuple(observation_noise.shape)} does not "
                    f"broadcast to `batch_shape x n' x m` = {tuple(target)}."
                ) from error
        with torch.no_grad():
            posterior = self.posterior(X, observation_noise=observation_noise)
            Y = _sampler_for(posterior, sampler)(posterior)
        return self.condition_on_observations(X, Y, **kwargs)

    def _transformed_observations(
        self: NeuralSurrogateModel, X: Tensor, Y: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        r"""The transformed training inputs (``n x d'``, as a fit sees them) and the new
        inputs and observations (``P x n' x d'`` and ``P x n' x m``) mapped through the
        fixed transforms in ``eval`` mode.

        A model serving a subset of its networks' outputs (``subset_output``) observes
        only those; the networks' other outputs are given their own predicted mean at
        ``X`` as targets, so that the refit carries no information about them."""
        was_training = self.training
        old_X, _ = self.transformed_training_data()
        self.eval()
        with torch.no_grad():
            transformed_X = self.transform_inputs(X)
            outcome_transform = getattr(self, "outcome_transform", None)
            transformed_Y = Y if outcome_transform is None else outcome_transform(Y)[0]
            selection = getattr(self, "_output_selection", None)
            if selection is not None:
                targets = self._predict(transformed_X, observation_noise=False).mean
                targets[..., selection] = transformed_Y
                transformed_Y = targets
        self.train(was_training)
        if not transformed_Y.isfinite().all():
            raise ValueError(
                f"The outcome transform {type(outcome_transform).__name__} maps Y to "
                "non-finite values."
            )
        return old_X, transformed_X, transformed_Y.detach()

    def _augmented_copy(
        self: NeuralSurrogateModel, X: Tensor, transformed_Y: Tensor
    ) -> NeuralSurrogateModel:
        r"""A copy of the model whose training data include the ``n'`` new points
        (``X``: ``n' x d`` original inputs; ``transformed_Y``: ``n' x m`` transformed
        observations), still with the model's weights."""
        model = _copy_for_conditioning(self)
        model.train_X = torch.cat([self.train_X, X.detach()])
        model.transformed_train_Y = torch.cat([self.transformed_train_Y, transformed_Y])
        return model


def _validate_observations(X: Tensor, Y: Tensor, train_X: Tensor, num_outputs: int) -> torch.Size:
    r"""Check ``X`` (``batch_shape x n' x d``) and ``Y`` (``batch_shape' x n' x m``) and
    return their broadcast batch shape."""
    validate_test_inputs(X, train_X)
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
        return torch.broadcast_shapes(X.shape[:-2], Y.shape[:-2])
    except RuntimeError as error:
        raise ValueError(
            f"The batch shapes of X {tuple(X.shape[:-2])} and Y {tuple(Y.shape[:-2])} do "
            "not broadcast."
        ) from error


def _sampler_for(posterior: Posterior, sampler: MCSampler) -> MCSampler:
    r"""``sampler`` if it can draw from ``posterior``'s family, else the family's
    registered sampler with the same sample shape and seed."""
    if not isinstance(sampler, MCSampler):
        raise TypeError(f"sampler must be a BoTorch MCSampler; got {type(sampler).__name__}.")
    family = get_sampler(posterior, sampler.sample_shape, seed=sampler.seed)
    if isinstance(sampler, type(family)) or (
        isinstance(sampler, NormalMCSampler) and isinstance(family, NormalMCSampler)
    ):
        return sampler
    return family


def _copy_for_conditioning(model: NeuralSurrogateModel) -> NeuralSurrogateModel:
    r"""A deep copy of ``model`` (network, transforms, buffers) that shares its plain
    attributes (immutable hyperparameters, search histories) and its training data,
    which the conditioned copy replaces."""
    memo = {
        id(value): value
        for name, value in vars(model).items()
        if not name.startswith("_") and not isinstance(value, (nn.Module, Tensor))
    }
    for data in (model.train_X, model.transformed_train_Y):
        memo[id(data)] = data
    return copy.deepcopy(model, memo)


def _refit(
    model: NeuralSurrogateModel,
    train_X: Tensor,
    train_Y: Tensor,
    steps: int,
    learning_rate: float,
    generator: torch.Generator,
) -> None:
    r"""Train ``model``'s network further with the model's own training (``_fit``) on
    ``n x d'`` / ``n x m`` transformed data, for ``steps`` steps at ``learning_rate``,
    drawing its randomness from ``generator``."""
    hyperparameters = model.hyperparameters
    # `_fit` reads the budget from the hyperparameters: the refit's budget applies to the
    # refit only, so that a later `fit` of the conditioned model trains as configured.
    model.hyperparameters = dataclasses.replace(
        hyperparameters, epochs=steps, max_steps=steps, learning_rate=learning_rate
    )
    try:
        model.training_result = model._fit(train_X, train_Y, generator, progress=False)
    finally:
        model.hyperparameters = hyperparameters


def _continue_members(
    networks: Sequence[EnsembleNetwork],
    train_X: Tensor,
    train_Y: Tensor,
    steps: int,
    learning_rate: float,
    dropout_generator: torch.Generator,
) -> list[TrainingResult | None]:
    r"""Continue training the members of ``P`` copies of one ensemble, copy ``i`` on its
    own data, full-batch with Adam for ``steps`` steps.

    The members of all copies that share an architecture train as ONE batched
    computation (a :class:`BatchedMLP` of ``P K`` members, in chunks that bound the
    activations' memory), each on its own ``n x d'`` rows; this equals training each
    copy alone, up to floating-point summation order and the draw of training-time
    dropout masks (one draw for all members of a chunk, from ``dropout_generator``).

    Args:
        networks: ``P`` copies of the same fitted ensemble network (overwritten).
        train_X: ``P x n x d'`` transformed inputs.
        train_Y: ``P x n x m`` transformed targets.
        steps: Optimizer steps.
        learning_rate: Adam's learning rate.
        dropout_generator: The source of the training-time dropout masks.

    Returns:
        Each copy's training result (``None`` for several member groups, whose results
        do not combine).
    """
    config = TrainingConfig(epochs=steps, learning_rate=learning_rate)
    num_copies, num_rows = train_X.shape[:2]
    results: list[list[TrainingResult]] = [[] for _ in networks]
    for index, group in enumerate(networks[0].groups):
        num_members = group.num_members
        chunk = max(1, MEMBER_ROW_BUDGET // (num_members * num_rows))
        for start in range(0, num_copies, chunk):
            copies = range(start, min(num_copies, start + chunk))
            stacked = _repeat_members(group, len(copies))
            X = train_X[copies.start : copies.stop].repeat_interleave(num_members, dim=0)
            Y = train_Y[copies.start : copies.stop].repeat_interleave(num_members, dim=0)

            def loss(indices: Tensor | None, stacked=stacked, X=X, Y=Y) -> Tensor:
                return member_row_losses(
                    stacked, X, Y, per_member=True, generator=dropout_generator
                ).mean(-1)

            result = train_network(
                stacked,
                loss,
                num_data=num_rows,
                config=config,
                description="conditioning",
                member_generators=stacked.member_generators(DATA_ORDER_STREAM),
            )
            state = stacked.state_dict()
            for position, copy_index in enumerate(copies):
                members = slice(position * num_members, (position + 1) * num_members)
                networks[copy_index].groups[index].load_state_dict(
                    {name: tensor[members] for name, tensor in state.items()}
                )
                results[copy_index].append(_member_result(result, members))
    return [result[0] if len(result) == 1 else None for result in results]


def _repeat_members(group: BatchedMLP, times: int) -> BatchedMLP:
    r"""A :class:`BatchedMLP` holding ``times`` copies of ``group``'s members (copy
    ``i``'s member ``k`` at position ``i K + k``)."""
    stacked = copy.deepcopy(group)
    for parameters in (stacked.weights, stacked.biases, stacked.projections):
        for position, parameter in enumerate(parameters):
            parameters[position] = nn.Parameter(
                parameter.detach().repeat(times, *([1] * (parameter.ndim - 1)))
            )
    stacked.member_seeds = group.member_seeds * times
    stacked.dropout_rates = group.dropout_rates.repeat(times)
    return stacked


def _member_result(result: TrainingResult, members: slice) -> TrainingResult:
    r"""The per-member training result of the members ``members``."""
    return TrainingResult(
        best_loss=result.best_loss[members],
        best_epoch=result.best_epoch[members],
        epochs_run=result.epochs_run,
        loss_history=[losses[members] for losses in result.loss_history],
        steps_run=result.steps_run,
        diverged=result.diverged[members],
    )


class FantasyModel(Model):
    r"""A batch of models, each conditioned on its own observations: the result of
    :meth:`ConditioningMixin.fantasize` and of a batched
    :meth:`ConditioningMixin.condition_on_observations`.

    The posterior evaluates each model on its slice of the inputs and stacks the
    results into one posterior of the models' family
    (:func:`~botorch_nn_uq.posteriors.stacking.stack_posteriors`; a moment-matched
    :class:`~botorch_nn_uq.posteriors.GaussianMarginalPosterior` where the families or
    member weights differ), so MC acquisitions sample all fantasies in one call.

    The models' weights do not depend on the inputs they were conditioned on in a way
    autograd can follow (the refits train on detached data). So that gradient-based
    optimizers of look-ahead acquisitions run (``optimize_acqf`` differentiates the
    acquisition value with respect to the candidate), the posterior depends on
    ``conditioning_inputs`` with a zero derivative: an optimizer then keeps the
    candidate at its initial condition, the best of ``optimize_acqf``'s raw samples by
    value. ``options={"with_grad": False}`` asks ``optimize_acqf`` for a
    finite-difference search instead (the refits are seeded, so the value is a
    deterministic function of the candidate).

    Args:
        models: ``batch_shape.numel()`` fitted models with the same number of outputs,
            in row-major order of ``batch_shape``.
        batch_shape: The batch shape, e.g. ``num_fantasies x b``.
        conditioning_inputs: The inputs the models were conditioned on (any shape).

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
        self,
        models: Sequence[Model],
        batch_shape: torch.Size,
        conditioning_inputs: Tensor | None = None,
    ) -> None:
        super().__init__()
        batch_shape = torch.Size(batch_shape)
        if len(models) != batch_shape.numel() or not models:
            raise ValueError(
                f"A FantasyModel of batch shape {tuple(batch_shape)} needs "
                f"{batch_shape.numel()} models (at least one); got {len(models)}."
            )
        num_outputs = {model.num_outputs for model in models}
        if len(num_outputs) != 1:
            raise ValueError(f"The models must have the same num_outputs; got {num_outputs}.")
        self.models = nn.ModuleList(models)
        self._batch_shape = batch_shape
        self._num_outputs = num_outputs.pop()
        self._conditioning_inputs = conditioning_inputs

    @property
    def num_outputs(self) -> int:
        r"""The number of outputs ``m``."""
        return self._num_outputs

    @property
    def batch_shape(self) -> torch.Size:
        r"""The batch shape, one model per element."""
        return self._batch_shape

    def posterior(
        self,
        X: Tensor,
        output_indices: list[int] | None = None,
        observation_noise: bool | Tensor = False,
        posterior_transform: PosteriorTransform | None = None,
        **kwargs: Any,
    ) -> Posterior:
        r"""The stacked posterior of the models.

        Args:
            X: A ``batch_shape' x q x d`` tensor, ``batch_shape'`` broadcastable with the
                model's ``batch_shape`` (aligned on the right, as for a batched GP; e.g.
                ``num_fantasies x b x q x d``, or ``q x d`` for the same points in every
                model).
            output_indices: Outputs to return; all if ``None``.
            observation_noise: As for :meth:`NeuralSurrogateModel.posterior` (a tensor
                must broadcast to ``broadcast(batch_shape', batch_shape) x q x m``).
            posterior_transform: An optional BoTorch ``PosteriorTransform``.

        Returns:
            A posterior over ``broadcast(batch_shape', batch_shape) x q x m'`` outputs.
        """
        if kwargs:
            raise UnsupportedError(
                f"FantasyModel.posterior does not support the argument(s) {sorted(kwargs)}."
            )
        if not isinstance(X, Tensor) or X.ndim < 2:
            described = f"shape {tuple(X.shape)}" if isinstance(X, Tensor) else type(X).__name__
            raise ValueError(
                "X must be a `batch_shape x q x d` tensor with at least two dimensions; got "
                f"{described}."
            )
        try:
            batch_shape = torch.broadcast_shapes(X.shape[:-2], self.batch_shape)
        except RuntimeError as error:
            raise ValueError(
                f"The batch shape {tuple(X.shape[:-2])} of X does not broadcast with the "
                f"model's batch shape {tuple(self.batch_shape)}."
            ) from error
        leading = len(batch_shape) - len(self.batch_shape)
        num_models = len(self.models)

        def per_model(tensor: Tensor) -> Tensor:
            # `leading x P x q x k`: model i's slice is `[..., i, :, :]`.
            tensor = tensor.expand(batch_shape + tensor.shape[-2:])
            return tensor.reshape(batch_shape[:leading] + (num_models,) + tensor.shape[-2:])

        if self._conditioning_inputs is not None and self._conditioning_inputs.requires_grad:
            # The zero-derivative link to the conditioning inputs (see the class docstring).
            X = X + 0.0 * self._conditioning_inputs.sum()
        X = per_model(X)
        noise = observation_noise
        if isinstance(observation_noise, Tensor):
            noise = per_model(observation_noise)
        posteriors = [
            model.posterior(
                X[..., i, :, :],
                output_indices=output_indices,
                observation_noise=noise[..., i, :, :] if isinstance(noise, Tensor) else noise,
                posterior_transform=posterior_transform,
            )
            for i, model in enumerate(self.models)
        ]
        return stack_posteriors(posteriors, self.batch_shape, dim=leading)
