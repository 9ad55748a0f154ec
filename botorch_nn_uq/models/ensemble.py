"""Deep ensembles (Lakshminarayanan et al., 2017): the model that serves every ensemble.

Every ensemble builder of the package (hyper-deep ensembles, searched ensembles) hands
its trained members and weights to :class:`DeepEnsemble`'s posterior; how the members
were found is not this module's concern.

How acquisition functions see an ensemble
------------------------------------------
Without observation noise the posterior is the finite set of member means
(:class:`~botorch_nn_uq.posteriors.FunctionEnsemblePosterior`, weights summing to one).

- MC acquisitions (qLogEI, qUCB, q-leaky EI, ...) sample whole members by
  deterministic index: a sample is one member at all q points, so their value is the
  acquisition AVERAGED OVER MEMBERS. Members are drawn by systematic resampling of the
  weights, so the average is exact when the number of MC samples times each weight is
  an integer (e.g. 128 samples over 4 or 8 equally weighted members) and within one
  sample's share otherwise (128 samples over 5 members use each 25 or 26 times).
- Analytic acquisitions (LogEI, UCB, PI) read ``posterior.mean`` and
  ``posterior.variance``: they see the MOMENT-MATCHED Gaussian with the ensemble mean
  and the mixture variance (law of total variance, divisor one).

The model does not set BoTorch's ``_is_ensemble`` flag, which would give the posterior
an extra member batch dimension and change its shape for every consumer; averaging
over members is what the MC acquisitions already do.

Which to use in BO: the member average. On protocol 1 of ``benchmarks/README.md``
(Levy, Rosenbrock, G-function and Perm in 5-D, 10 seeds each, 8 + 64 evaluations), the
registered deep ensemble with qLogEI ended with a lower regret than with LogEI in 30 of
40 paired runs. Its mean regret was 3.2 times lower on Levy and level on Rosenbrock.
Prefer MC acquisitions (``qLogExpectedImprovement``, q-leaky EI) for ensembles; the
analytic ones remain available and see the moment-matched Gaussian.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from botorch_nn_uq.checks import (
    NON_NEGATIVE,
    OPEN_UNIT_INTERVAL,
    POSITIVE,
    Interval,
    check_boolean_fields,
    check_choice,
    check_integer_fields,
    check_real_fields,
    check_widths,
)
from botorch_nn_uq.models.base import NeuralSurrogateModel
from botorch_nn_uq.nn.batched_mlp import (
    RESAMPLING_STREAM,
    VALIDATION_STREAM,
    BatchedMLP,
    EnsembleNetwork,
)
from botorch_nn_uq.nn.mlp import ACTIVATIONS
from botorch_nn_uq.posteriors.ensemble import FunctionEnsemblePosterior
from botorch_nn_uq.posteriors.mixture import MixtureOfGaussiansPosterior
from botorch_nn_uq.training.config import NonFiniteLossError, TrainingConfig, TrainingResult
from botorch_nn_uq.training.members import fit_members

LIKELIHOODS = ("gaussian", "mse")


@dataclass(frozen=True)
class DeepEnsembleHyperparameters:
    r"""Hyperparameters of :class:`DeepEnsemble` (defaults: a fast CPU setting for BO).

    Args:
        ensemble_size: The number of members ``K``, at least 2 (their disagreement is
            the epistemic uncertainty).
        hidden_widths: Widths of each member's hidden layers.
        activation: Hidden activation (see ``botorch_nn_uq.nn.mlp.ACTIVATIONS``).
        likelihood: ``"gaussian"``: members predict a mean and a standard deviation and
            are trained on the Gaussian negative log-likelihood (the aleatoric /
            epistemic split); ``"mse"``: members predict a mean only (noiseless BO).
        min_std: Floor of a Gaussian member's standard deviation (transformed units).
        epochs: Training epochs.
        max_steps: A training budget in optimizer steps (whichever of ``epochs`` and
            ``max_steps`` ends first); with ``batch_size`` it keeps the cost of a fit
            independent of the number of training points. ``None``: ``epochs`` only.
        learning_rate: The optimizer's learning rate.
        batch_size: Mini-batch size; ``None`` trains full-batch.
        optimizer: One of ``botorch_nn_uq.training.OPTIMIZERS``.
        l2_regularization: Keras-style penalty ``lambda ||theta||^2`` on each member's
            weights and biases.
        dropout: Training-time dropout rate (0: none).
        patience: Early-stopping patience on each member's monitored loss (its
            validation loss with ``validation_fraction``, else its training loss);
            ``None`` trains all epochs (the best-loss weights are kept either way).
        gradient_clip_norm: Per-member gradient-norm clipping; ``None`` does not clip.
        bootstrap: Train each member on its own bootstrap resample of the data.
        subset_fraction: Train each member on its own random subset of this fraction of
            the rows (without replacement); ``None`` uses all rows.
        validation_fraction: Hold out this fraction of the rows for each member (its own
            random rows, so members also differ in their data) and keep the weights
            with the lowest loss on them (early stopping with ``patience``); ``None``
            trains on all rows and keeps the lowest training loss.
        noise_variance: For ``"mse"`` members, the observation-noise variance
            (transformed units) used with ``observation_noise=True``; ``None`` estimates
            it as the ensemble mean's mean squared training residual.
    """

    ensemble_size: int = 5
    hidden_widths: tuple[int, ...] = (64, 64)
    activation: str = "relu"
    likelihood: str = "gaussian"
    min_std: float = 1e-3
    epochs: int = 500
    max_steps: int | None = None
    learning_rate: float = 5e-3
    batch_size: int | None = None
    optimizer: str = "adam"
    l2_regularization: float = 1e-6
    dropout: float = 0.0
    patience: int | None = None
    gradient_clip_norm: float | None = None
    bootstrap: bool = False
    subset_fraction: float | None = None
    validation_fraction: float | None = None
    noise_variance: float | None = None

    def __post_init__(self) -> None:
        # One member has no epistemic spread: the latent posterior's variance is zero.
        check_integer_fields(self, "ensemble_size", minimum=2)
        check_widths(self, "hidden_widths")
        check_choice("activation", self.activation, ACTIVATIONS)
        check_choice("likelihood", self.likelihood, LIKELIHOODS)
        check_real_fields(self, "min_std", interval=POSITIVE)
        check_real_fields(self, "l2_regularization", interval=NON_NEGATIVE)
        check_real_fields(self, "dropout", interval=Interval(0.0, 1.0, upper_closed=False))
        check_real_fields(
            self, "subset_fraction", interval=Interval(0.0, 1.0, lower_closed=False), optional=True
        )
        check_real_fields(self, "validation_fraction", interval=OPEN_UNIT_INTERVAL, optional=True)
        check_real_fields(self, "noise_variance", interval=POSITIVE, optional=True)
        check_boolean_fields(self, "bootstrap")
        if self.bootstrap and self.subset_fraction is not None:
            raise ValueError("Choose either bootstrap or subset_fraction, not both.")
        self.training_config()

    def training_config(self) -> TrainingConfig:
        r"""The settings of the shared training loop (validated there)."""
        return TrainingConfig(
            epochs=self.epochs,
            max_steps=self.max_steps,
            learning_rate=self.learning_rate,
            batch_size=self.batch_size,
            optimizer=self.optimizer,
            early_stopping_patience=self.patience,
            gradient_clip_norm=self.gradient_clip_norm,
        )


class UncertaintyDecomposition(NamedTuple):
    r"""Predictive mean and variance split by the law of total variance, in original
    outcome units; each a ``batch_shape x q x m`` tensor.

    Attributes:
        mean: The ensemble mean ``sum_k w_k mu_k``.
        aleatoric_variance: ``sum_k w_k sigma_k^2`` (data noise the members predict).
        epistemic_variance: ``sum_k w_k (mu_k - mean)^2`` (disagreement of the members).
    """

    mean: Tensor
    aleatoric_variance: Tensor
    epistemic_variance: Tensor

    @property
    def total_variance(self) -> Tensor:
        r"""The predictive variance, aleatoric plus epistemic."""
        return self.aleatoric_variance + self.epistemic_variance


def resampling_row_weights(
    network: BatchedMLP,
    num_data: int,
    bootstrap: bool,
    subset_fraction: float | None,
    dtype: torch.dtype,
) -> Tensor | None:
    r"""Per-member training multiplicities (``K x n``) for bootstraps or random subsets,
    each drawn from the member's own resampling stream; ``None`` for all rows."""
    if not bootstrap and subset_fraction is None:
        return None
    rows = []
    for generator in network.member_generators(RESAMPLING_STREAM):
        if bootstrap:
            draws = torch.randint(num_data, (num_data,), generator=generator)
            rows.append(torch.bincount(draws, minlength=num_data))
        else:
            size = max(1, round(subset_fraction * num_data))
            chosen = torch.randperm(num_data, generator=generator)[:size]
            rows.append(torch.zeros(num_data, dtype=torch.long).index_fill(0, chosen, 1))
    return torch.stack(rows).to(dtype)


def member_validation_masks(
    network: BatchedMLP, num_data: int, validation_fraction: float, dtype: torch.dtype
) -> Tensor:
    r"""``K x n`` 0/1 masks of each member's held-out rows (``ceil(fraction n)`` rows,
    at least one row left for training), drawn from the member's validation stream."""
    size = min(num_data - 1, max(1, math.ceil(validation_fraction * num_data)))
    masks = torch.zeros(network.num_members, num_data, dtype=dtype)
    for member, generator in enumerate(network.member_generators(VALIDATION_STREAM)):
        masks[member, torch.randperm(num_data, generator=generator)[:size]] = 1.0
    return masks


class DeepEnsemble(NeuralSurrogateModel):
    r"""An ensemble of independently trained networks.

    All ``K`` members share one architecture and train as ONE batched computation
    (:class:`~botorch_nn_uq.nn.batched_mlp.BatchedMLP`), each with its own
    initialisation, data order and (optionally) bootstrap resample, so the result equals
    ``K`` separate trainings with the same member seeds.

    Posterior (see the module docstring for how acquisitions use it):

    - ``observation_noise=False``: the epistemic distribution, the weighted finite set
      of member means (:class:`~botorch_nn_uq.posteriors.FunctionEnsemblePosterior`);
      MC samples are joint across the q-batch, drawn by deterministic member index.
    - ``observation_noise=True``: with Gaussian heads, the mixture of the members'
      Gaussians (:class:`~botorch_nn_uq.posteriors.MixtureOfGaussiansPosterior`:
      aleatoric plus epistemic variance); with mean-only members, the member means plus
      homoscedastic noise (``noise_variance``).

    :meth:`uncertainty_decomposition` returns mean, aleatoric and epistemic variance.

    Args:
        train_X: An ``n x d`` tensor of training inputs.
        train_Y: An ``n x m`` tensor of training targets.
        input_transform: An optional input transform, e.g. ``Normalize(d, bounds=bounds)``.
        outcome_transform: An optional outcome transform, e.g. ``Standardize(m)``.
        **hyperparameters: Fields of :class:`DeepEnsembleHyperparameters`.

    Example:
        >>> from botorch.models.transforms import Normalize, Standardize
        >>> train_X = torch.rand(20, 2, dtype=torch.float64)
        >>> train_Y = train_X.sin().sum(-1, keepdim=True)
        >>> model = DeepEnsemble(
        ...     train_X, train_Y, input_transform=Normalize(2), outcome_transform=Standardize(1)
        ... ).fit(seed=0)
        >>> model.uncertainty_decomposition(torch.rand(4, 2, dtype=torch.float64)).mean.shape
        torch.Size([4, 1])
    """

    hyperparameter_class = DeepEnsembleHyperparameters
    checkpoint_hyperparameters = (
        "ensemble_size",
        "hidden_widths",
        "activation",
        "likelihood",
        "min_std",
    )

    def _build_network(self, input_dim: int, output_dim: int) -> EnsembleNetwork:
        hp = self.hyperparameters
        member_seeds = torch.randint(0, 2**31 - 1, (hp.ensemble_size,)).tolist()
        return EnsembleNetwork(
            [
                BatchedMLP(
                    input_dim,
                    output_dim,
                    hidden_widths=hp.hidden_widths,
                    member_seeds=member_seeds,
                    activation=hp.activation,
                    gaussian_head=hp.likelihood == "gaussian",
                    dropout=hp.dropout,
                    min_std=hp.min_std,
                )
            ]
        )

    def _fit(self, train_X: Tensor, train_Y: Tensor, progress: bool) -> TrainingResult:
        hp = self.hyperparameters
        (members,) = self.network.groups
        num_data = train_X.shape[0]
        row_weights = resampling_row_weights(
            members, num_data, hp.bootstrap, hp.subset_fraction, train_X.dtype
        )
        validation_masks = None
        if hp.validation_fraction is not None:
            validation_masks = member_validation_masks(
                members, num_data, hp.validation_fraction, train_X.dtype
            ).to(train_X)
            row_weights = (1.0 if row_weights is None else row_weights) * (1 - validation_masks)
            if (row_weights.sum(-1) == 0).any():
                raise ValueError(
                    "A member's resample lies entirely in its validation rows; use more "
                    "data or a smaller validation_fraction."
                )
        result = fit_members(
            members,
            train_X,
            train_Y,
            hp.training_config(),
            l2_regularization=hp.l2_regularization,
            row_weights=row_weights,
            validation_row_weights=validation_masks,
            progress=progress,
            description="deep ensemble",
        )
        # A diverged member would be served at the weights of its best loss before it
        # diverged, often its initialisation: an untrained network presented as trained.
        # Without validation rows the first epoch's loss is that of the initial weights,
        # so a member whose best loss stayed there over several epochs never trained.
        failed = result.diverged.clone()
        if validation_masks is None and result.epochs_run > 1:
            failed |= result.best_epoch == 0
        if failed.any():
            raise NonFiniteLossError(
                f"The training of ensemble member(s) {failed.nonzero().squeeze(-1).tolist()} "
                "diverged (non-finite loss, or a loss that never fell below its initial "
                "value). Lower the learning rate, check the data scaling, or enable gradient "
                "clipping."
            )
        self.set_member_weights(torch.ones(members.num_members).to(train_X))
        self._set_noise_variance(train_X, train_Y, hp.noise_variance)
        return result

    def set_member_weights(self, weights: Tensor) -> None:
        r"""Set the members' mixture weights (a ``K``-vector, normalised to sum to one)."""
        if self.network is None:
            raise RuntimeError(f"{type(self).__name__} is not fitted; call .fit() first.")
        if (
            weights.shape != (self.network.num_members,)
            or not (weights.isfinite() & (weights >= 0)).all()
        ):
            raise ValueError(
                f"member weights must be a finite non-negative {self.network.num_members}-"
                f"vector; got {weights}."
            )
        if not weights.sum() > 0:
            raise ValueError("member weights must have a positive sum.")
        self._register_fitted_buffer("member_weights", (weights / weights.sum()).detach())

    def _warn_if_single_member(self) -> None:
        r"""Warn when a fit's member selection kept one member: without observation
        noise the posterior then has zero variance everywhere, which acquisitions read
        as certainty."""
        if int((self.member_weights > 0).sum()) == 1:
            warnings.warn(
                f"The member selection of {type(self).__name__} kept a single member, so "
                "its posterior without observation noise has zero variance (no epistemic "
                "uncertainty). Use more training points, a larger search or a DeepEnsemble.",
                UserWarning,
                stacklevel=2,
            )

    def _predict(
        self, X: Tensor, observation_noise: bool
    ) -> FunctionEnsemblePosterior | MixtureOfGaussiansPosterior:
        output = self.network(X)
        if not observation_noise:
            return FunctionEnsemblePosterior(output.mean, self.member_weights)
        if output.std is not None:
            return MixtureOfGaussiansPosterior(output.mean, output.std.pow(2), self.member_weights)
        return FunctionEnsemblePosterior(output.mean, self.member_weights).add_observation_noise(
            self.noise_variance
        )

    def uncertainty_decomposition(self, X: Tensor) -> UncertaintyDecomposition:
        r"""The predictive mean with its aleatoric and epistemic variance.

        Args:
            X: A ``batch_shape x q x d`` (or ``q x d``) tensor of inputs.

        Returns:
            An :class:`UncertaintyDecomposition` of ``batch_shape x q x m`` tensors in
            original outcome units (members with mean-only heads report the
            homoscedastic ``noise_variance`` as aleatoric variance).
        """
        with torch.no_grad():
            posterior = self.posterior(X, observation_noise=True)
        return UncertaintyDecomposition(
            posterior.mean, posterior.aleatoric_variance, posterior.epistemic_variance
        )
