"""The serving base of the package's ensembles: weighted member networks and their posterior.

Deep ensembles train their members, hyper-deep ensembles and the searched ensembles
(NES-RS, NES-RE, AutoDEUQ) search for them; all of them hand the trained members and
their mixture weights to :class:`MemberEnsemble`, which serves the posterior. How the
members were found is not this module's concern.

How acquisition functions see an ensemble
------------------------------------------
Without observation noise the posterior is the finite set of member means
(:class:`~botorch_nn_uq.posteriors.FunctionEnsemblePosterior`, weights summing to one).

- MC acquisitions (qLogEI, qUCB, q-leaky EI, ...) by default
  (``joint_samples="functions"``) sample whole members by deterministic index: a
  sample is one member at all q points, so their value is the acquisition AVERAGED OVER
  MEMBERS. With ``joint_samples="continuous"`` they sample the Gaussian with the
  members' mean and joint covariance
  (:class:`~botorch_nn_uq.posteriors.ContinuousFunctionPosterior`): a sample is a random
  combination of the members at all q points, so an acquisition is not flat where no
  member improves. Members are drawn by systematic resampling of the weights, so the average is
  exact when the number of MC samples times each weight is an integer (e.g. 128 samples
  over 4 or 8 equally weighted members) and within one sample's share otherwise (128
  samples over 5 members use each 25 or 26 times).
- Analytic acquisitions (LogEI, UCB, PI) read ``posterior.mean`` and
  ``posterior.variance``: they see the MOMENT-MATCHED Gaussian with the ensemble mean
  and the mixture variance (law of total variance, divisor one).

The models do not set BoTorch's ``_is_ensemble`` flag, which would give the posterior
an extra member batch dimension and change its shape for every consumer; averaging
over members is what the MC acquisitions already do.

Which to use in BO: the member average. On protocol 1 the registered deep ensemble with
qLogEI ended with lower regret than with LogEI in most paired runs
(``benchmarks/docs/protocol-1-nomu-bo-suite.md``, "Deep ensembles: moment-matched LogEI
against the member average"). Prefer MC acquisitions
(``qLogExpectedImprovement``, q-leaky EI) for ensembles; the analytic ones remain available
and see the moment-matched Gaussian.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import torch
from torch import Tensor

from botorch_nn_uq.checks import POSITIVE, check_choice, check_integer_fields, check_real_fields
from botorch_nn_uq.models.base import NeuralSurrogateModel
from botorch_nn_uq.models.batched_data import element_member_outputs
from botorch_nn_uq.models.card import (
    FUNCTION_BANK_SUPPORT,
    NEURAL_MODEL_SUPPORT,
    Family,
    Status,
    Support,
)
from botorch_nn_uq.models.last_layer import PredictionWithFeatures, append_bias
from botorch_nn_uq.nn.batched_mlp import EnsembleNetwork, MemberOutput
from botorch_nn_uq.posteriors.continuous import JOINT_SAMPLES, with_joint_samples
from botorch_nn_uq.posteriors.ensemble import FunctionEnsemblePosterior
from botorch_nn_uq.posteriors.mixture import MixtureOfGaussiansPosterior
from botorch_nn_uq.posteriors.tensor_outputs import TensorOutputPosterior

#: The most training rows of one forward pass of the noise estimate.
NOISE_ESTIMATE_ROWS = 2**14

#: What the members predict: ``"gaussian"`` a mean and a standard deviation, ``"mse"`` a
#: mean only.
LIKELIHOODS = ("gaussian", "mse")


@dataclass(frozen=True)
class MemberEnsembleHyperparameters:
    r"""The hyperparameters of every ensemble: its size and what its members predict.

    Args:
        ensemble_size: The number of members ``K``, at least 2 (their disagreement is
            the epistemic uncertainty); for an ensemble built by a selection, the most
            distinct members it keeps.
        likelihood: ``"gaussian"``: members predict a mean and a standard deviation and
            are trained on the Gaussian negative log-likelihood (the aleatoric /
            epistemic split); ``"mse"``: members predict a mean only (noiseless BO).
        min_std: Floor of a Gaussian member's standard deviation (transformed units).
        noise_variance: For ``"mse"`` members, the observation-noise variance
            (transformed units) used with ``observation_noise=True``; ``None`` estimates
            it as the ensemble mean's mean squared training residual (with known noise
            ``train_Yvar``, which replaces it, leave it ``None``).
        joint_samples: How MC samples are drawn (the mean and variance do not depend on
            it). ``"functions"``: one member per sample (a finite set of ``K``
            functions); ``"continuous"``: the Gaussian with the members' mean and joint
            covariance (:class:`~botorch_nn_uq.posteriors.ContinuousFunctionPosterior`;
            with Gaussian heads or noise, plus independent noise of the expected member
            variance), a new function per sample. The finite set is the default: with
            qLogEI it ended lower in most paired runs of protocols 1 and 7
            (``benchmarks/docs/protocol-1-nomu-bo-suite.md``, "Continuous joint
            samples").
    """

    ensemble_size: int = 5
    likelihood: str = "gaussian"
    min_std: float = 1e-3
    noise_variance: float | None = None
    joint_samples: str = "functions"

    def __post_init__(self) -> None:
        # One member has no epistemic spread: the latent posterior's variance is zero.
        check_integer_fields(self, "ensemble_size", minimum=2)
        check_choice("likelihood", self.likelihood, LIKELIHOODS)
        check_real_fields(self, "min_std", interval=POSITIVE)
        check_real_fields(self, "noise_variance", interval=POSITIVE, optional=True)
        check_choice("joint_samples", self.joint_samples, JOINT_SAMPLES)


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


class MemberEnsemble(NeuralSurrogateModel):
    r"""Base class of the ensembles: ``K`` trained member networks with mixture weights.

    A subclass trains or searches the members in :meth:`_fit` and ends it with
    :meth:`_serve_members`; the posterior is this class's:

    - ``observation_noise=False``: the epistemic distribution, the weighted finite set
      of member means (:class:`~botorch_nn_uq.posteriors.FunctionEnsemblePosterior`);
      MC samples are joint across the q-batch: one member by deterministic index
      (``joint_samples="functions"``, the default) or the Gaussian of the members'
      moments (``"continuous"``; see the module docstring for how acquisitions use
      them).
    - ``observation_noise=True``: with Gaussian heads, the mixture of the members'
      Gaussians (:class:`~botorch_nn_uq.posteriors.MixtureOfGaussiansPosterior`:
      aleatoric plus epistemic variance); with mean-only members, the member means plus
      homoscedastic noise (``noise_variance``); with known noise (``train_Yvar``), the
      member means plus the mean known variance, whatever the members predict (see
      :mod:`botorch_nn_uq.models.known_noise`).

    :meth:`uncertainty_decomposition` returns mean, aleatoric and epistemic variance.
    Conditioning on new observations (``condition_on_observations``, ``fantasize``)
    updates every member's Bayesian last layer exactly and keeps the member weights and
    the noise estimate (see :mod:`botorch_nn_uq.models.fantasy`).

    Subclasses declare a ``hyperparameter_class`` derived from
    :class:`MemberEnsembleHyperparameters`.

    Args:
        train_X: An ``n x d`` tensor of training inputs.
        train_Y: An ``n x m`` tensor of training targets.
        train_Yvar: An optional ``n x m`` tensor of known observation-noise variances (as
            for ``SingleTaskGP``).
        input_transform: An optional input transform, e.g. ``Normalize(d, bounds=bounds)``.
        outcome_transform: An optional outcome transform, e.g. ``Standardize(m)``.
        **hyperparameters: Fields of the subclass's ``hyperparameter_class``.
    """

    hyperparameter_class: ClassVar[type[MemberEnsembleHyperparameters]]
    #: What every ensemble's checkpoint must agree on; subclasses add the hyperparameters
    #: that fix their architecture.
    checkpoint_hyperparameters = ("likelihood", "min_std")
    fitted_buffer_names = ("member_weights", "noise_variance")
    input_transform_limit = (
        "its members are chosen from candidates trained with different hyperparameters or "
        "architectures, and a transform trained with all candidates would be served with "
        "the few kept."
    )
    batched_data_limit = (
        "its members are searched for and selected on one data set, and each batch element "
        "would need its own search."
    )

    def _serve_members(
        self, network: EnsembleNetwork, weights: Tensor, train_X: Tensor, train_Y: Tensor
    ) -> None:
        r"""Serve ``network``'s members with mixture ``weights``: the last step of a fit.

        Registers the normalised weights, warns when a selection kept a single member
        (without observation noise the posterior then has zero variance everywhere,
        which acquisitions read as certainty) and, for mean-only members, estimates the
        observation noise (with known noise, for any members, takes its mean).

        Args:
            network: The ``K`` trained members (``B * K`` for batched training data of
                ``B`` elements, see :mod:`botorch_nn_uq.models.batched_data`).
            weights: Their mixture weights, a non-negative ``K``-vector (the same for
                every batch element).
            train_X: The ``batch_shape x n x d'`` transformed training inputs.
            train_Y: The ``batch_shape x n x m`` transformed training targets.
        """
        self.network = network.to(train_X)
        self.set_member_weights(weights.to(train_X))
        if int((self.member_weights > 0).sum()) == 1:
            warnings.warn(
                f"The member selection of {type(self).__name__} kept a single member, so "
                "its posterior without observation noise has zero variance (no epistemic "
                "uncertainty). Use more training points, a larger search or a DeepEnsemble.",
                UserWarning,
                stacklevel=2,
            )
        # Gaussian members predict their own noise, which observation_noise=True serves;
        # the homoscedastic estimate (a forward pass over all n rows) is mean-only
        # members', and known noise replaces both.
        if not network.gaussian_head or self.has_known_noise:
            self._set_noise_variance(train_X, train_Y, self.hyperparameters.noise_variance)

    @property
    def members_per_element(self) -> int:
        r"""The number of members ``K`` of each batch element (of the whole ensemble for
        unbatched training data)."""
        return self.network.num_members // self.batch_shape.numel()

    def set_member_weights(self, weights: Tensor) -> None:
        r"""Set the members' mixture weights (a ``K``-vector, normalised to sum to one;
        for batched training data, the weights of each batch element's ``K`` members)."""
        if self.network is None:
            raise RuntimeError(f"{type(self).__name__} is not fitted; call .fit() first.")
        size = self.members_per_element
        if weights.shape != (size,) or not (weights.isfinite() & (weights >= 0)).all():
            raise ValueError(
                f"member weights must be a finite non-negative {size}-vector; got {weights}."
            )
        if not weights.sum() > 0:
            raise ValueError("member weights must have a positive sum.")
        self._register_fitted_buffer("member_weights", (weights / weights.sum()).detach())

    def _member_outputs(self, X: Tensor, return_features: bool = False) -> MemberOutput:
        r"""The members at ``batch_shape' x q x d'`` transformed inputs, ``batch_shape'' x
        K x q x m`` (for batched training data, each batch element's members at that
        element's inputs, ``batch_shape''`` the broadcast batch shape)."""
        if not self.batch_shape:
            return self.network(X, return_features=return_features)
        (members,) = self.network.groups
        return element_member_outputs(members, X, self.batch_shape, return_features)

    def _predict(
        self, X: Tensor, observation_noise: bool, return_features: bool = False
    ) -> FunctionEnsemblePosterior | MixtureOfGaussiansPosterior | PredictionWithFeatures:
        output = self._member_outputs(X, return_features=return_features)
        # The member weights were checked when they were set.
        weights = {"weights": self.member_weights, "check_weights": False}
        if not observation_noise:
            posterior = FunctionEnsemblePosterior(output.mean, **weights)
        elif output.std is not None and not self.has_known_noise:
            posterior = MixtureOfGaussiansPosterior(output.mean, output.std.pow(2), **weights)
        else:
            # Batched training data: one noise variance per batch element, `batch_shape x
            # 1 x m` against the points' `batch_shape x q x m`.
            noise = self.noise_variance.unsqueeze(-2) if self.batch_shape else self.noise_variance
            posterior = FunctionEnsemblePosterior(output.mean, **weights).add_observation_noise(
                noise
            )
        posterior = with_joint_samples(posterior, self.hyperparameters.joint_samples)
        if not return_features:
            return posterior
        # Each member's own last hidden layer: `batch x K x q x 1 x H`.
        return PredictionWithFeatures(posterior, append_bias(output.features).unsqueeze(-2))

    def _latent_training_mean(self, train_X: Tensor) -> Tensor:
        # The members' weighted mean straight from the network, in one forward pass up to
        # NOISE_ESTIMATE_ROWS rows (K members' activations of that many rows are a few
        # tens of MB): no posterior objects on the fit's path.
        weights = self.member_weights
        means = [
            torch.einsum("k,...knm->...nm", weights, self._member_outputs(rows).mean)
            for rows in train_X.split(NOISE_ESTIMATE_ROWS, dim=-2)
        ]
        return torch.cat(means, dim=-2)

    def uncertainty_decomposition(self, X: Tensor) -> UncertaintyDecomposition:
        r"""The predictive mean with its aleatoric and epistemic variance.

        Args:
            X: A ``batch_shape x q x d`` (or ``q x d``) tensor of inputs.

        Returns:
            An :class:`UncertaintyDecomposition` of ``batch_shape x q x m`` tensors
            (``batch_shape x q x o1 x o2 x ...`` for tensor-valued outputs) in
            original outcome units (members with mean-only heads report the
            homoscedastic ``noise_variance`` as aleatoric variance, and a model with
            known noise ``train_Yvar`` the mean known variance).
        """
        with torch.no_grad():
            posterior = self.posterior(X, observation_noise=True)
        if not isinstance(posterior, TensorOutputPosterior):
            return UncertaintyDecomposition(
                posterior.mean, posterior.aleatoric_variance, posterior.epistemic_variance
            )
        flat = posterior.flat_posterior
        parts = (flat.mean, flat.aleatoric_variance, flat.epistemic_variance)
        return UncertaintyDecomposition(*map(posterior.unflatten_outputs, parts))


_MEMBER_AVERAGE = Support(Status.WORKS, "exact average over the members")

#: The feature-table column of every ensemble (deep, hyper-deep, NES, AutoDEUQ): they
#: share this serving base, so they support BoTorch's and Ax's features alike.
ENSEMBLE_FAMILY = Family(
    "ensembles",
    "Deep ensembles (incl. hyper-deep, NES, AutoDEUQ)",
    {
        **NEURAL_MODEL_SUPPORT,
        **FUNCTION_BANK_SUPPORT,
        "analytic-acquisitions": Support(
            Status.APPROXIMATE, "moment-matched Gaussian (mixture mean and variance)"
        ),
        "mc-acquisitions": _MEMBER_AVERAGE,
        "noisy-ei-pending": _MEMBER_AVERAGE,
        "multi-objective": _MEMBER_AVERAGE,
        "max-posterior-sampling": Support(
            Status.APPROXIMATE,
            "a sample is one of the K members, so at most K distinct points; "
            '`replacement=False`, `batch_thompson_sampling` or `joint_samples="continuous"` '
            "give more",
        ),
        "batch-thompson-sampling": Support(Status.WORKS, "each member's best separated candidates"),
        "constrained-thompson-sampling": Support(
            Status.APPROXIMATE,
            "a sample is one of the K members: at most K distinct points "
            '(`joint_samples="continuous"` gives more)',
        ),
        "learnable-transforms": Support(
            Status.APPROXIMATE,
            "deep ensemble: one transform shared by the members, trained on their summed "
            "losses, the best step kept jointly (warped Hartmann-6, cold fits: -2.61 ± 0.26 "
            "against -2.09 ± 0.32 with `Normalize`, ahead on 4 of 5 seeds; level with warm "
            "starts); hyper-deep, NES and AutoDEUQ refuse it (`UnsupportedError`: their "
            "members are selected from candidates)",
        ),
        "observation-noise": Support(
            Status.WORKS,
            "Gaussian heads: the members' mixture; mean-only members: homoscedastic noise "
            "estimated from the residuals",
        ),
        "batched-models": Support(
            Status.APPROXIMATE,
            "deep ensembles: `K` members per batch element, all trained as one batched "
            "computation, each element equal to its own fit with the same seed; posterior "
            "batch shapes and `batch_cross_validation` (`mll_cls=NetworkLoss`) as for a "
            "batched GP; no fantasies; hyper-deep, NES and AutoDEUQ refuse, naming the "
            "remedy (a `ModelList` of one model per batch element)",
        ),
        "shift-adaptation": Support(
            Status.APPROXIMATE,
            "NES-RS and NES-RE: the final selection (and NES-RE's parents) on a shifted copy "
            "of the hold-out, `reselect(severity)` selects from the same pool; deep, "
            "hyper-deep and AutoDEUQ ensembles refuse the option",
        ),
        "known-noise": Support(
            Status.WORKS,
            "Gaussian heads trained on the likelihood of the known variances, mean-only "
            "members on weighted least squares; hyper-deep, NES and AutoDEUQ train every "
            "candidate so and select on validation likelihoods with the known variances; "
            "`observation_noise=True`, fantasies and `uncertainty_decomposition` use the "
            "mean known variance",
        ),
    },
)
