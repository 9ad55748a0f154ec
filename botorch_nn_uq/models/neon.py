"""NEON (epistemic operator networks, Guilhoto & Perdikaris 2024) as a BoTorch model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from botorch.exceptions.errors import UnsupportedError
from botorch.models.transforms.input import InputTransform
from botorch.models.transforms.outcome import OutcomeTransform
from botorch.utils.types import DEFAULT, _DefaultType
from torch import Tensor

from botorch_nn_uq.checks import (
    NON_NEGATIVE,
    POSITIVE,
    check_choice,
    check_integer,
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
from botorch_nn_uq.nn.mlp import ACTIVATIONS
from botorch_nn_uq.nn.neon import EpiNet, EpistemicOperatorNetwork, OperatorBackbone
from botorch_nn_uq.posteriors.continuous import JOINT_SAMPLES, with_joint_samples
from botorch_nn_uq.posteriors.ensemble import FunctionEnsemblePosterior
from botorch_nn_uq.posteriors.mixture import MixtureOfGaussiansPosterior
from botorch_nn_uq.training.config import TrainedWithLoop, TrainingResult
from botorch_nn_uq.training.loop import train_network

LOSSES = ("mse", "relative_l2")

#: The authors' per-problem settings (neon.txt Table 1 and their code).
PRESETS: dict[str, dict[str, Any]] = {
    "pollutants": {
        "encoder_widths": (64, 64),
        "latent_dim": 64,
        "decoder_depth": 2,
        "decoder_width": 64,
        "fourier_scale": None,
        "epinet_widths": (32, 32),
        "prior_scale": 0.75,
        "learning_rate": 3e-4,
        "lr_decay_rate": 0.75,
    },
    "brusselator": {
        "encoder_widths": (64, 64),
        "latent_dim": 96,
        "decoder_depth": 3,
        "decoder_width": 64,
        "fourier_scale": 5.0,
        "epinet_widths": (32, 32),
        "prior_scale": 1.0,
        "learning_rate": 1e-3,
        "lr_decay_rate": 0.8,
    },
}


@dataclass(frozen=True)
class NEONHyperparameters(TrainedWithLoop):
    r"""Hyperparameters of :class:`NEON` (defaults: the authors' pollutants setting with
    a CPU-sized step budget; :meth:`NEONHyperparameters.preset` gives each problem's
    setting).

    Args:
        encoder_widths: Hidden widths of the encoder ``beta = MLP(u)``.
        latent_dim: ``d_beta``.
        decoder_depth: Hidden layers ``N`` of the split decoder (function-valued use;
            ignored without an output grid).
        decoder_width: Hidden width of the split decoder.
        fourier_scale: Scale of the trainable Fourier features of the query coordinates;
            ``None`` tiles the (standardised) coordinates instead.
        activation: Hidden activation of backbone and EpiNet.
        epinet_widths: Hidden widths of the EpiNet's learnable MLP.
        index_dim: ``d_z``.
        prior_widths: Hidden widths of each of the ``d_z`` frozen prior MLPs.
        prior_scale: ``alpha``.
        output_activation: ``OutAct`` (see ``botorch_nn_uq.nn.mlp.ACTIVATIONS``).
        num_epistemic_samples: Size of the FIXED bank of indices ``z`` that defines the
            posterior (functions per posterior), at least 2.
        num_training_indices: Fresh indices ``z`` per training step (every batch row
            under every index).
        loss: ``"mse"`` (on the transformed targets) or ``"relative_l2"`` (each
            function's squared error over its squared norm).
        epochs: Passes over the training rows (steps, when full-batch).
        max_steps: A training budget in optimizer steps (whichever of ``epochs`` and
            ``max_steps`` ends first); with ``batch_size`` it keeps the cost of a fit
            independent of the number of training points. ``None``: ``epochs`` only.
        learning_rate: Adam's initial learning rate.
        lr_decay_rate: Exponential decay factor of the learning rate per
            ``lr_decay_steps`` steps (``None``: constant).
        lr_decay_steps: Steps per decay.
        gradient_clip_norm: Global gradient-norm clipping (``None``: none).
        batch_size: Rows (``(u, y)`` pairs, or data points without a grid) per step;
            ``None`` trains full-batch.
        evaluation_chunk_rows: EpiNet rows (inputs x grid points x indices) evaluated
            at once in :meth:`NEON.posterior`. It bounds memory when ``optimize_acqf``
            scores many restarts and keeps each chunk's activations in the CPU cache:
            on a 64 x 64 grid with 128 indices, chunks of ``2**17`` rows evaluate about
            three times faster than whole inputs (see
            ``benchmarks/docs/protocol-3-neon-composite.md``, "NEON at PDE scale").
        noise_variance: Observation-noise variance (transformed units) for
            ``observation_noise=True``; ``None`` estimates it from the residuals (with
            known noise ``train_Yvar``, which replaces it, leave it ``None``).
        joint_samples: How MC samples are drawn (the mean and variance do not depend on
            it). ``"continuous"``: the Gaussian with the bank's mean and joint covariance
            (:class:`~botorch_nn_uq.posteriors.ContinuousFunctionPosterior`; with
            observation noise, plus independent noise), a new function per sample;
            ``"functions"``: one index of the bank per sample (``posterior.rsample``
            beyond the bank draws fresh indices), the posterior before this option.
    """

    encoder_widths: tuple[int, ...] = (64, 64)
    latent_dim: int = 64
    decoder_depth: int = 2
    decoder_width: int = 64
    fourier_scale: float | None = None
    activation: str = "gelu"
    epinet_widths: tuple[int, ...] = (32, 32)
    index_dim: int = 16
    prior_widths: tuple[int, ...] = (5, 5)
    prior_scale: float = 0.75
    output_activation: str = "identity"
    num_epistemic_samples: int = 128
    num_training_indices: int = 16
    loss: str = "mse"
    epochs: int = 2000
    max_steps: int | None = None
    learning_rate: float = 3e-4
    lr_decay_rate: float | None = 0.75
    lr_decay_steps: int = 1000
    gradient_clip_norm: float | None = 1.0
    batch_size: int | None = None
    evaluation_chunk_rows: int = 2**17
    noise_variance: float | None = None
    joint_samples: str = "continuous"

    def __post_init__(self) -> None:
        check_widths(self, "encoder_widths", "epinet_widths", "prior_widths")
        check_integer_fields(
            self,
            "latent_dim",
            "decoder_depth",
            "decoder_width",
            "index_dim",
            "num_training_indices",
            "evaluation_chunk_rows",
        )
        # A bank of one function has zero variance everywhere.
        check_integer_fields(self, "num_epistemic_samples", minimum=2)
        check_choice("activation", self.activation, ACTIVATIONS)
        check_choice("output_activation", self.output_activation, ACTIVATIONS)
        check_choice("loss", self.loss, LOSSES)
        check_choice("joint_samples", self.joint_samples, JOINT_SAMPLES)
        check_real_fields(self, "fourier_scale", "noise_variance", interval=POSITIVE, optional=True)
        check_real_fields(self, "prior_scale", interval=NON_NEGATIVE)
        self.training_config()

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> NEONHyperparameters:
        r"""The authors' setting for ``"pollutants"`` or ``"brusselator"``.

        Example:
            >>> NEONHyperparameters.preset("brusselator").latent_dim
            96
        """
        if name not in PRESETS:
            raise ValueError(f"Unknown NEON preset {name!r}; valid: {', '.join(PRESETS)}.")
        return cls(**{**PRESETS[name], **overrides})


class NEON(ResizableFunctionBank, NeuralSurrogateModel):
    r"""NEON: an operator-network backbone with an EpiNet (epistemic neural network).

    Two uses with one class:

    - **Scalar / multi-output surrogate** (``output_grid=None``): ``u -> m`` outputs; the
      backbone is an MLP.
    - **Function-valued surrogate** (``output_grid`` of ``m`` points, ``num_channels =
      d_s``): the outputs are the function on the grid, ``num_outputs = m * d_s``,
      flattened grid-point major (output ``j * d_s + c`` is channel ``c`` at grid point
      ``j``); training is point-wise on ``(u_i, y_j, s_i(y_j))`` rows.

    The posterior is a finite set of functions, one per index of a FIXED bank of
    ``num_epistemic_samples`` indices ``z`` drawn from the fit's seed
    (:class:`~botorch_nn_uq.posteriors.FunctionEnsemblePosterior`). By default
    (``joint_samples="continuous"``) an MC sample is the Gaussian with the bank's mean
    and joint covariance
    (:class:`~botorch_nn_uq.posteriors.ContinuousFunctionPosterior`), a new function per
    sample; with ``joint_samples="functions"`` it is one ``z``, and ``posterior.rsample``
    with more samples than indices adds fresh indices. Either way a sample is joint
    across the q points and the grid points, and ``optimize_acqf`` sees a smooth
    deterministic function under a sampler's seed. Inputs (and, on large grids, grid points) are
    evaluated in chunks of about ``evaluation_chunk_rows`` EpiNet rows. With a composite
    objective (see :meth:`botorch_nn_uq.problems.CompositeProblem.objective`) MC
    acquisitions apply the known functional ``g`` to every function sample.

    Args:
        train_X: An ``n x d`` tensor of inputs ``u``.
        train_Y: An ``n x (m * d_s)`` tensor of outputs (``n x m`` without a grid).
        train_Yvar: An optional tensor of ``train_Y``'s shape, the outputs' known
            observation-noise variances (as for ``SingleTaskGP``): the loss weighs every
            training row's squared errors by their precision (weighted least squares,
            see :mod:`botorch_nn_uq.models.known_noise`), and ``observation_noise=True``
            adds their mean.
        input_transform: An optional input transform, e.g. ``Normalize(d, bounds=bounds)``.
        outcome_transform: An optional outcome transform, e.g. ``Standardize(m * d_s)``.
        output_grid: An ``m x d_y`` tensor of query coordinates (standardised inside),
            or ``None`` for a scalar / multi-output surrogate.
        num_channels: ``d_s``, channels per grid point.
        preset: Start from :meth:`NEONHyperparameters.preset` ``(preset)``
            (``"pollutants"`` or ``"brusselator"``); ``hyperparameters`` override it.
        **hyperparameters: Fields of :class:`NEONHyperparameters`.

    Example:
        >>> train_X = torch.rand(10, 2, dtype=torch.float64)
        >>> grid = torch.linspace(0, 1, 5, dtype=torch.float64).unsqueeze(-1)
        >>> train_Y = torch.sin(train_X[:, :1] * 3 + grid.T)  # 10 functions on 5 points
        >>> model = NEON(train_X, train_Y, output_grid=grid, epochs=50).fit(seed=0)
        >>> model.posterior(torch.rand(3, 1, 2, dtype=torch.float64)).mean.shape
        torch.Size([3, 1, 5])
    """

    hyperparameter_class = NEONHyperparameters
    checkpoint_hyperparameters = (
        "encoder_widths",
        "latent_dim",
        "decoder_depth",
        "decoder_width",
        "fourier_scale",
        "activation",
        "epinet_widths",
        "index_dim",
        "prior_widths",
        "prior_scale",
        "output_activation",
    )
    min_function_bank_size = 2
    trains_input_transform = True
    fitted_buffer_names = ("epistemic_indices", "noise_variance")

    def __init__(
        self,
        train_X: Tensor,
        train_Y: Tensor,
        train_Yvar: Tensor | None = None,
        input_transform: InputTransform | None = None,
        outcome_transform: OutcomeTransform | _DefaultType | None = DEFAULT,
        *,
        output_grid: Tensor | None = None,
        num_channels: int = 1,
        preset: str | None = None,
        **hyperparameters: Any,
    ) -> None:
        if preset is not None:
            hyperparameters = {**vars(NEONHyperparameters.preset(preset)), **hyperparameters}
        check_integer("num_channels", num_channels)
        if output_grid is not None:
            if not isinstance(output_grid, Tensor) or not output_grid.is_floating_point():
                raise ValueError(
                    f"output_grid must be a floating-point tensor; got {output_grid!r}."
                )
            if output_grid.ndim != 2 or not output_grid.isfinite().all():
                raise ValueError(
                    "output_grid must be a finite `m x d_y` tensor; got shape "
                    f"{tuple(output_grid.shape)}."
                )
            if train_Y.shape[-1] != output_grid.shape[0] * num_channels:
                raise ValueError(
                    f"train_Y needs m * d_s = {output_grid.shape[0]} * {num_channels} columns "
                    f"(grid points times channels); got {train_Y.shape[-1]}."
                )
        elif num_channels != 1:
            raise ValueError("num_channels applies to function-valued use (an output_grid).")
        super().__init__(
            train_X,
            train_Y,
            train_Yvar,
            input_transform=input_transform,
            outcome_transform=outcome_transform,
            **hyperparameters,
        )
        self.num_channels = num_channels
        if output_grid is not None:
            grid = output_grid.to(train_X)
            scale = grid.std(0, keepdim=True) if grid.shape[0] > 1 else torch.ones_like(grid[:1])
            scale = torch.where(scale > 0, scale, torch.ones_like(scale))
            self.register_buffer("query_points", (grid - grid.mean(0, keepdim=True)) / scale)
        else:
            self.query_points = None

    @property
    def is_function_valued(self) -> bool:
        r"""Whether the model predicts functions on an output grid."""
        return self.query_points is not None

    def _build_network(
        self, input_dim: int, output_dim: int, generator: torch.Generator
    ) -> EpistemicOperatorNetwork:
        hp = self.hyperparameters
        function_valued = self.is_function_valued
        backbone = OperatorBackbone(
            input_dim,
            self.num_channels if function_valued else output_dim,
            encoder_widths=hp.encoder_widths,
            latent_dim=hp.latent_dim,
            decoder_depth=hp.decoder_depth if function_valued else 0,
            decoder_width=hp.decoder_width,
            query_dim=self.query_points.shape[-1] if function_valued else 0,
            fourier_scale=hp.fourier_scale,
            activation=hp.activation,
            generator=generator,
        )
        epinet = EpiNet(
            backbone.feature_dim,
            self.num_channels if function_valued else output_dim,
            index_dim=hp.index_dim,
            hidden_widths=hp.epinet_widths,
            prior_widths=hp.prior_widths,
            prior_scale=hp.prior_scale,
            activation=hp.activation,
            generator=generator,
        )
        return EpistemicOperatorNetwork(backbone, epinet, hp.output_activation)

    def _rows(self, train_X: Tensor, train_Y: Tensor) -> tuple[int, Tensor]:
        r"""The number of training rows and the ``n x m' x c`` targets (or any other
        ``n x m`` tensor of per-output values, such as known-noise weights)."""
        if self.is_function_valued:
            num_points = self.query_points.shape[0]
            targets = train_Y.unflatten(-1, (num_points, self.num_channels))
            return train_X.shape[0] * num_points, targets
        return train_X.shape[0], train_Y.unsqueeze(-2)

    def _evaluate_rows(self, train_X: Tensor, indices: Tensor, Z: Tensor) -> Tensor:
        r"""Samples ``rows x S x c`` at flattened training rows."""
        if not self.is_function_valued:
            return self.network(train_X[indices], None, Z)
        num_points = self.query_points.shape[0]
        return self.network(
            train_X[indices // num_points], self.query_points[indices % num_points], Z
        )

    def _fit(
        self, train_X: Tensor, train_Y: Tensor, generator: torch.Generator, progress: bool
    ) -> TrainingResult:
        hp = self.hyperparameters
        network = self.network
        num_rows, targets = self._rows(train_X, train_Y)
        flat_targets = targets.reshape(num_rows, -1)
        # Relative L2: each row's error is divided by its function's mean squared value.
        function_norms = targets.pow(2).mean(dim=(-2, -1)).clamp_min(1e-12)
        rows_per_function = num_rows // train_X.shape[0]
        row_norms = function_norms.repeat_interleave(rows_per_function)
        all_rows = torch.arange(num_rows, device=train_X.device)
        known_noise = self._training_known_noise()
        # With known noise, each row's squared errors weighted by their precision (weighted
        # least squares, see `KnownNoise`), laid out as the targets.
        row_weights = (
            None
            if known_noise is None
            else self._rows(train_X, known_noise.weights)[1].reshape(num_rows, -1)
        )

        def loss(indices: Tensor | None) -> Tensor:
            indices = all_rows if indices is None else indices.to(train_X.device)
            Z = torch.randn(hp.num_training_indices, hp.index_dim, generator=generator).to(train_X)
            samples = self._evaluate_rows(train_X, indices, Z)
            squared_errors = (samples - flat_targets[indices].unsqueeze(-2)).pow(2)
            if row_weights is not None:
                squared_errors = squared_errors * row_weights[indices].unsqueeze(-2)
            errors = squared_errors.mean(dim=(-2, -1))
            if hp.loss == "relative_l2":
                errors = errors / row_norms[indices]
            return errors.mean()

        result = train_network(
            network,
            loss,
            num_data=num_rows,
            config=self._loop_config(hp),
            progress=progress,
            description="NEON",
            generator=generator,
        )
        self._set_function_bank(hp.num_epistemic_samples, generator)
        self._set_noise_variance(train_X, train_Y, hp.noise_variance)
        return result

    def _set_function_bank(self, size: int, generator: torch.Generator) -> None:
        indices = torch.randn(size, self.hyperparameters.index_dim, generator=generator)
        indices = indices.to(self.train_X)
        self._register_fitted_buffer("epistemic_indices", indices)

    def _function_bank_buffers(self) -> tuple[str, ...]:
        # `epistemic_indices`: `S x index_dim`, one index z per function.
        return ("epistemic_indices",)

    def function_samples(
        self, X: Tensor, indices: Tensor | None = None, return_features: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        r"""The bank's function samples at transformed inputs.

        Args:
            X: A ``batch_shape x q x d`` tensor of transformed inputs.
            indices: An ``S x index_dim`` tensor of epistemic indices; the bank's
                ``epistemic_indices`` if ``None``.
            return_features: Also return the backbone's last-layer inputs, which every
                index shares.

        Returns:
            A ``batch_shape x S x q x num_outputs`` tensor in the transformed outcome
            space; with ``return_features``, a tuple of it and the ``batch_shape x q x R x
            width`` features (``R`` grid points, 1 without a grid).
        """
        Z = self.epistemic_indices if indices is None else indices
        points = X.reshape(-1, X.shape[-1])
        # Feature rows ((input, grid point) pairs) per chunk: each feature row becomes one
        # EpiNet row per index.
        chunk_rows = max(1, self.hyperparameters.evaluation_chunk_rows // Z.shape[0])
        if not self.is_function_valued:
            outputs = [
                self.network(chunk, None, Z, return_features=True)
                for chunk in points.split(chunk_rows)
            ]
            values = torch.cat([samples for samples, _ in outputs])
            features = torch.cat([chunk_features for _, chunk_features in outputs]).unsqueeze(-2)
        else:
            grid = self.query_points
            num_points = grid.shape[0]
            chunks, feature_chunks = [], []
            for chunk in points.split(max(1, chunk_rows // num_points)):
                # A large grid is split too, so one input never exceeds the chunk.
                outputs = [
                    self.network(chunk.unsqueeze(-2), grid_chunk, Z, return_features=True)
                    for grid_chunk in grid.split(chunk_rows)
                ]
                samples = torch.cat([samples for samples, _ in outputs], dim=-3)
                chunks.append(samples.movedim(-2, -3).flatten(-2))  # c x S x (m * d_s)
                grid_features = [chunk_features for _, chunk_features in outputs]
                feature_chunks.append(torch.cat(grid_features, dim=-2))
            values = torch.cat(chunks)
            features = torch.cat(feature_chunks)  # inputs x m x width
        values = values.reshape(*X.shape[:-1], Z.shape[0], self._num_outputs).movedim(-2, -3)
        if not return_features:
            return values
        return values, features.reshape(*X.shape[:-1], *features.shape[-2:])

    def _conditioning(
        self, X: Tensor, Y: Tensor, observed: Tensor | None, noise: Tensor | None = None
    ) -> Any:
        if self.hyperparameters.output_activation != "identity":
            raise UnsupportedError(
                "NEON with output_activation="
                f"{self.hyperparameters.output_activation!r} cannot be conditioned on "
                "observations: its outputs are not linear in the last layer. Use the default "
                "'identity' for fantasies (qKnowledgeGradient, qNegIntegratedPosteriorVariance)."
            )
        return super()._conditioning(X, Y, observed, noise)

    def _predict(
        self, X: Tensor, observation_noise: bool, return_features: bool = False
    ) -> FunctionEnsemblePosterior | MixtureOfGaussiansPosterior | PredictionWithFeatures:
        index_dim = self.hyperparameters.index_dim
        values, features = self.function_samples(X, return_features=True)
        posterior = FunctionEnsemblePosterior(
            values,
            draw_functions=lambda n: self.function_samples(X, torch.randn(n, index_dim).to(X)),
        )
        if observation_noise:
            posterior = posterior.add_observation_noise(self.noise_variance)
        posterior = with_joint_samples(posterior, self.hyperparameters.joint_samples)
        if not return_features:
            return posterior
        # The backbone's last layer, shared by every index: `batch x 1 x q x R x H`.
        return PredictionWithFeatures(posterior, append_bias(features).unsqueeze(-4))


#: NEON's column of the feature table.
NEON_FAMILY = Family(
    "neon",
    "NEON",
    {
        **NEURAL_MODEL_SUPPORT,
        **FUNCTION_BANK_SUPPORT,
        **resampled_bank_support("index", "indices"),
    },
)

#: NEON's catalogue entry (the registry's ``"neon"``).
NEON_CARD = ModelCard(
    name="neon",
    description="NEON epistemic neural network (MLP backbone + EpiNet, 128 fixed indices; "
    "2000 steps on batches of 256)",
    model_class=NEON,
    family=NEON_FAMILY,
    summary="NEON, an epistemic operator network (Guilhoto & Perdikaris 2024): a backbone (an "
    "MLP, or an operator network for function-valued outputs on an `output_grid`) with an "
    "EpiNet whose epistemic index `z` selects a function; presets for the paper's problems "
    "(`NEONHyperparameters.preset`); with `q-leaky-ei` for composite objectives",
    posterior="finite set of functions (`FunctionEnsemblePosterior`), one per index of a "
    "fixed bank (128 in the CLI), joint across q and grid points (one index per MC sample, "
    'as published: `joint_samples="functions"`, the class default being continuous '
    "samples); with "
    "`observation_noise=True`, a mixture of Gaussians",
    bo=BODefaults(
        constructor_options={"max_steps": 2000, **SCALABLE_BATCH, **FINITE_FUNCTION_SAMPLES},
        supports_warm_start=True,
    ),
    fast=FastSettings(
        {
            "encoder_widths": (32, 32),
            "latent_dim": 32,
            "epinet_widths": (16,),
            "epochs": 300,
            "learning_rate": 1e-2,
            "lr_decay_rate": None,
            "num_epistemic_samples": 32,
        }
    ),
)
