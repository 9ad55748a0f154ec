"""Monte Carlo dropout (Gal & Ghahramani, 2016) as a BoTorch model."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
from torch import Tensor

from botorch_nn_uq.checks import (
    OPEN_UNIT_INTERVAL,
    POSITIVE,
    check_choice,
    check_integer_fields,
    check_real_fields,
    check_widths,
)
from botorch_nn_uq.models.base import NeuralSurrogateModel
from botorch_nn_uq.models.card import (
    FINITE_FUNCTION_SAMPLES,
    FUNCTION_BANK_SUPPORT,
    NEURAL_MODEL_SUPPORT,
    SCALABLE_BATCH,
    BODefaults,
    Family,
    FastSettings,
    ModelCard,
    resampled_bank_support,
)
from botorch_nn_uq.models.function_bank import ResizableFunctionBank
from botorch_nn_uq.models.last_layer import PredictionWithFeatures, append_bias
from botorch_nn_uq.nn.mlp import ACTIVATIONS, DropoutMLP
from botorch_nn_uq.posteriors.continuous import JOINT_SAMPLES, with_joint_samples
from botorch_nn_uq.posteriors.ensemble import FunctionEnsemblePosterior
from botorch_nn_uq.posteriors.mixture import MixtureOfGaussiansPosterior
from botorch_nn_uq.training.config import TrainedWithLoop, TrainingResult
from botorch_nn_uq.training.loop import train_network
from botorch_nn_uq.training.losses import mean_squared_error


@dataclass(frozen=True)
class MCDropoutHyperparameters(TrainedWithLoop):
    r"""Hyperparameters of :class:`MCDropout` (defaults: a fast CPU setting for BO).

    Args:
        hidden_widths: Widths of the hidden layers.
        activation: Hidden activation (see ``botorch_nn_uq.nn.mlp.ACTIVATIONS``). The
            default, ``"smelu"`` (:class:`~botorch_nn_uq.nn.mlp.SmeLU`), is a ReLU with
            its kink rounded off: on a ReLU network's piecewise-linear acquisition
            surface ``optimize_acqf`` spends three to four times the evaluations
            (``benchmarks/docs/protocol-6-scale.md``, "Small data"). The registry's
            ``"mc-dropout"`` keeps ReLU, as its published runs.
        dropout: Dropout rate ``p`` in ``(0, 1)``, used at training and test time.
        num_masks: Size ``s`` of the fixed bank of test-time dropout masks, i.e. the
            number of functions in the posterior.
        epochs: Training epochs.
        max_steps: A training budget in optimizer steps (whichever of ``epochs`` and
            ``max_steps`` ends first); with ``batch_size`` it keeps the cost of a fit
            independent of the number of training points. ``None``: ``epochs`` only.
        learning_rate: Adam's learning rate.
        batch_size: Mini-batch size; ``None`` trains full-batch.
        weight_decay: Adam's weight decay (an L2 penalty ``weight_decay/2 ||w||^2``;
            with dropout this is the variational prior of Gal & Ghahramani).
        early_stopping_patience: Early-stopping patience on the training loss; ``None`` disables it.
        noise_variance: Observation-noise variance in the transformed outcome space
            used for ``observation_noise=True``; ``None`` estimates it after training
            as the mean squared residual of the MC mean on the training data (with
            known noise ``train_Yvar``, which replaces it, leave it ``None``).
        joint_samples: How MC samples are drawn (the mean and variance do not depend on
            it). ``"continuous"``: the Gaussian with the masks' mean and joint covariance
            (:class:`~botorch_nn_uq.posteriors.ContinuousFunctionPosterior`; with
            observation noise, plus independent noise), a new function per sample;
            ``"functions"``: one mask of the bank per sample (``posterior.rsample``
            beyond the bank draws fresh masks), the posterior before this option.
    """

    hidden_widths: tuple[int, ...] = (64, 64)
    activation: str = "smelu"
    dropout: float = 0.1
    num_masks: int = 64
    epochs: int = 500
    max_steps: int | None = None
    learning_rate: float = 5e-3
    batch_size: int | None = None
    weight_decay: float = 1e-4
    early_stopping_patience: int | None = None
    noise_variance: float | None = None
    joint_samples: str = "continuous"

    def __post_init__(self) -> None:
        check_widths(self, "hidden_widths")
        check_choice("activation", self.activation, ACTIVATIONS)
        # Without dropout at test time, or with one mask, the posterior has no spread.
        check_real_fields(self, "dropout", interval=OPEN_UNIT_INTERVAL)
        check_integer_fields(self, "num_masks", minimum=2)
        check_real_fields(self, "noise_variance", interval=POSITIVE, optional=True)
        check_choice("joint_samples", self.joint_samples, JOINT_SAMPLES)
        self.training_config()


class MCDropout(ResizableFunctionBank, NeuralSurrogateModel):
    r"""Monte Carlo dropout surrogate.

    An MLP trained with dropout (MSE loss; with known observation noise ``train_Yvar``,
    weighted least squares, see :mod:`botorch_nn_uq.models.known_noise`); at test time
    dropout stays on, with a FIXED bank of ``num_masks`` dropout masks drawn from the
    fit's seed. The posterior is therefore a deterministic finite set of ``s`` functions,
    all evaluated in one batched forward pass. By default (``joint_samples="continuous"``)
    an MC sample is the Gaussian with the masks' mean and joint covariance
    (:class:`~botorch_nn_uq.posteriors.ContinuousFunctionPosterior`): joint across the
    q-batch, a new function per sample, and ``optimize_acqf`` sees a smooth
    deterministic acquisition under a sampler's seed. With ``joint_samples="functions"``
    a sample is one mask's function
    (:class:`~botorch_nn_uq.posteriors.FunctionEnsemblePosterior`), and
    ``posterior.rsample`` with more samples than masks adds fresh masks. With
    ``observation_noise=True`` the posterior is a mixture with one Gaussian per mask
    (homoscedastic noise, see ``noise_variance``).

    Args:
        train_X: An ``n x d`` tensor of training inputs.
        train_Y: An ``n x m`` tensor of training targets.
        train_Yvar: An optional ``n x m`` tensor of known observation-noise variances
            (as for ``SingleTaskGP``); ``observation_noise=True`` then adds their mean.
        input_transform: An optional input transform, e.g. ``Normalize(d, bounds=bounds)``.
        outcome_transform: An optional outcome transform, e.g. ``Standardize(m)``.
        **hyperparameters: Fields of :class:`MCDropoutHyperparameters`.

    Example:
        >>> from botorch.models.transforms import Normalize, Standardize
        >>> train_X = torch.rand(20, 2, dtype=torch.float64)
        >>> train_Y = train_X.sin().sum(-1, keepdim=True)
        >>> model = MCDropout(
        ...     train_X, train_Y, input_transform=Normalize(2), outcome_transform=Standardize(1)
        ... ).fit(seed=0)
        >>> model.posterior(torch.rand(4, 1, 2, dtype=torch.float64)).mean.shape
        torch.Size([4, 1, 1])
    """

    hyperparameter_class = MCDropoutHyperparameters
    checkpoint_hyperparameters = ("hidden_widths", "activation", "dropout")
    min_function_bank_size = 2
    trains_input_transform = True

    def _build_network(
        self, input_dim: int, output_dim: int, generator: torch.Generator
    ) -> DropoutMLP:
        hp = self.hyperparameters
        return DropoutMLP(
            input_dim,
            output_dim,
            hidden_widths=hp.hidden_widths,
            activation=hp.activation,
            dropout=hp.dropout,
            generator=generator,
        )

    def _fit(
        self, train_X: Tensor, train_Y: Tensor, generator: torch.Generator, progress: bool
    ) -> TrainingResult:
        hp = self.hyperparameters
        network = self.network

        known_noise = self._training_known_noise()

        def mse_loss(indices: Tensor | None) -> Tensor:
            X, Y = (train_X, train_Y) if indices is None else (train_X[indices], train_Y[indices])
            # With known noise: weighted least squares (see `KnownNoise`).
            weights = None if known_noise is None else known_noise.rows(indices).weights
            return mean_squared_error(network(X, generator=generator), Y, weights)

        result = train_network(
            network,
            mse_loss,
            num_data=train_X.shape[0],
            config=self._loop_config(hp),
            progress=progress,
            description="MC dropout",
            generator=generator,
        )
        self._set_function_bank(hp.num_masks, generator)
        self._set_noise_variance(train_X, train_Y, hp.noise_variance)
        return result

    def _set_function_bank(self, size: int, generator: torch.Generator) -> None:
        # Buffers (not a plain list) so that the bank follows the model in .to(...).
        masks = self.network.sample_masks(size, generator)
        for layer, mask in enumerate(masks):
            self._register_fitted_buffer(f"dropout_mask_{layer}", mask.detach())
        if all(bool((mask == mask[:1]).all()) for mask in masks):
            warnings.warn(
                f"All {size} dropout masks of {type(self).__name__} are equal (dropout "
                f"{self.hyperparameters.dropout}), so its posterior without observation noise "
                "has zero variance everywhere (no epistemic uncertainty). Raise dropout or "
                "num_masks.",
                UserWarning,
                stacklevel=2,
            )

    def _function_bank_buffers(self) -> tuple[str, ...]:
        # `dropout_mask_{layer}`: `num_masks x width_layer`, one mask row per function.
        return tuple(f"dropout_mask_{layer}" for layer in range(len(self.network.hidden_layers)))

    def is_fitted_buffer_name(self, name: str) -> bool:
        r"""The noise variance and one ``dropout_mask_{layer}`` per hidden layer."""
        layers = len(self.hyperparameters.hidden_widths)
        masks = {f"dropout_mask_{layer}" for layer in range(layers)}
        return name == "noise_variance" or name in masks

    @property
    def masks(self) -> list[Tensor]:
        r"""The fixed dropout masks, one ``num_masks x width_l`` tensor per hidden layer."""
        return [getattr(self, name) for name in self._function_bank_buffers()]

    def _predict(
        self, X: Tensor, observation_noise: bool, return_features: bool = False
    ) -> FunctionEnsemblePosterior | MixtureOfGaussiansPosterior | PredictionWithFeatures:
        network = self.network
        values, features = network(X, masks=self.masks, return_features=True)
        posterior = FunctionEnsemblePosterior(
            values,
            draw_functions=lambda num_masks: network(X, masks=network.sample_masks(num_masks)),
        )
        if observation_noise:
            posterior = posterior.add_observation_noise(self.noise_variance)
        posterior = with_joint_samples(posterior, self.hyperparameters.joint_samples)
        if not return_features:
            return posterior
        # Each mask's thinned last hidden layer: `batch x s x q x 1 x H`.
        return PredictionWithFeatures(posterior, append_bias(features).unsqueeze(-2))


#: MC dropout's column of the feature table.
MC_DROPOUT_FAMILY = Family(
    "mc-dropout",
    "MC dropout",
    {
        **NEURAL_MODEL_SUPPORT,
        **FUNCTION_BANK_SUPPORT,
        **resampled_bank_support("mask", "masks"),
    },
)

#: MC dropout's catalogue entry (the registry's ``"mc-dropout"``).
MC_DROPOUT_CARD = ModelCard(
    name="mc-dropout",
    description="MC dropout network with a fixed bank of masks (500 steps on batches of 256)",
    model_class=MCDropout,
    family=MC_DROPOUT_FAMILY,
    summary="Monte Carlo dropout with a fixed bank of dropout masks",
    posterior="finite set of functions (`FunctionEnsemblePosterior`; one mask per MC sample, "
    'as published: `joint_samples="functions"`, the class default being continuous '
    "samples); with "
    "`observation_noise=True`, a mixture of Gaussians",
    bo=BODefaults(
        # The published BO runs: ReLU units, one mask per MC sample.
        constructor_options={
            "activation": "relu",
            "max_steps": 500,
            **SCALABLE_BATCH,
            **FINITE_FUNCTION_SAMPLES,
        },
        supports_warm_start=True,
    ),
    fast=FastSettings({"hidden_widths": (32, 32), "epochs": 150, "num_masks": 16}),
)
