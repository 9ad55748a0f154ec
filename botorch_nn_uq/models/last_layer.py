r"""Exact conditioning of a network's last layer: fantasies that are cheap and
differentiable.

A network's outputs are linear in its last layer, ``f(x) = phi(x)^T w`` with ``phi(x)``
the last hidden layer and a constant one (the bias), ``H`` features. Treating ``w`` as
Bayesian given the rest of the network (a Bayesian last layer) makes conditioning on new
observations a closed-form update, as for a GP.

The update
----------
The fitted weights ``w`` are the posterior mean of the last layer given the training
data, and its posterior precision is that of ridge regression on the training features,
in units of the observation noise ``sigma^2``:

``G = sum_i phi(x_i) phi(x_i)^T + lambda I``, with ``lambda`` the mean squared training
feature (a prior worth one training row).

New observations ``y'`` at ``X'`` (features ``Phi'``, residuals ``r = y' - f(X')``) with
the same noise give the exact posterior mean

``w' = w + (G + Phi'^T Phi')^{-1} Phi'^T r = w + G^{-1} Phi'^T (Phi' G^{-1} Phi'^T + I)^{-1} r``

(the second form when there are fewer new rows than features). The noise level cancels
from the mean, so no noise estimate enters. The conditioned model predicts
``f(x) + phi(x)^T (w' - w)``: one forward pass of the fitted network and a matrix
product. Everything is differentiable in ``X'`` (through ``Phi'`` and ``f(X')``) and in
``y'``, which is what ``qKnowledgeGradient`` and ``qNegIntegratedPosteriorVariance``
need to move their candidates.

The families
------------
- Function banks (ensemble members, dropout masks, NEON's epistemic indices): every
  function is conditioned with its own features (a member's or a mask's last hidden
  layer; NEON's indices share the backbone's) and its own residuals. The bank's spread,
  the epistemic variance, shrinks where the functions are pulled to the same
  observations.
- NOMU (:class:`GaussianConditioning`): its Gaussian marginals become a Gaussian process
  with NOMU's variance ``sigma^2(x)`` and the correlation of the last layer's features,
  ``rho(x, x') = phi(x)^T G^{-1} phi(x') / sqrt(...)``, conditioned exactly.

The precision ``G`` is computed once per fitted state from the training data and cached.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import torch
from botorch.posteriors import Posterior
from torch import Tensor

from botorch_nn_uq.posteriors.gaussian import GaussianMarginalPosterior, min_variance

if TYPE_CHECKING:
    from botorch_nn_uq.models.base import NeuralSurrogateModel

#: Training rows whose features are computed at once for the precision (bounds memory:
#: ``functions x rows x H`` features per chunk).
PRECISION_CHUNK_ROWS = 1024


class PredictionWithFeatures(NamedTuple):
    r"""A prediction together with what last-layer conditioning needs.

    Attributes:
        posterior: The posterior a model's ``_predict`` returns (transformed outcome
            space).
        features: ``batch_shape x s' x q x R x H`` inputs of the last layer with a
            trailing one (the bias): ``s'`` is 1 when every function shares the features,
            else the number of functions ``s``; ``R`` rows of features per point (1, or
            the grid points of a function-valued output, whose ``m = R C`` outputs are
            ``R`` rows of ``C`` channels).
        noise_variance: For a Gaussian-marginal posterior, the ``batch_shape x q x m``
            part of its variance that is observation noise (zeros without); else
            ``None``.
    """

    posterior: Posterior
    features: Tensor
    noise_variance: Tensor | None = None


def append_bias(features: Tensor) -> Tensor:
    r"""``features`` (``... x h``) with a column of ones appended (``... x (h + 1)``)."""
    return torch.cat([features, torch.ones_like(features[..., :1])], dim=-1)


class LastLayerPrecision(NamedTuple):
    r"""The training precision of the last layer (see the module docstring).

    Attributes:
        precision: ``s' x H x H``, ``G``.
        covariance: ``s' x H x H``, ``G^{-1}``.
    """

    precision: Tensor
    covariance: Tensor


def training_precision(model: NeuralSurrogateModel) -> LastLayerPrecision:
    r"""The last layer's precision ``G`` on ``model``'s training data, and its inverse.

    Computed from the transformed training inputs in chunks of rows, without gradients,
    and cached on the model for as long as none of its parameters and buffers changes
    (they are compared by identity and version).
    """
    cached = getattr(model, "_last_layer_precision_cache", None)
    if cached is not None and cached[0] == state_key(model):
        return cached[2]
    train_X, _ = model.transformed_training_data()
    model.eval()
    gram, num_rows = None, 0
    with torch.no_grad():
        for rows in train_X.split(PRECISION_CHUNK_ROWS):
            features = model._predict(
                rows.unsqueeze(-2), observation_noise=False, return_features=True
            ).features  # rows x s' x 1 x R x H
            features = features.squeeze(-3).movedim(0, -3).flatten(-3, -2)  # s' x rows R x H
            chunk_gram = features.transpose(-2, -1) @ features
            gram = chunk_gram if gram is None else gram + chunk_gram
            num_rows += features.shape[-2]
        size = gram.shape[-1]
        ridge = gram.diagonal(dim1=-2, dim2=-1).sum(-1) / (num_rows * size)
        ridge = ridge.clamp_min(min_variance(gram.dtype))
        identity = torch.eye(size, dtype=gram.dtype, device=gram.device)
        precision = gram + ridge[..., None, None] * identity
        covariance = torch.cholesky_inverse(torch.linalg.cholesky(precision))
    result = LastLayerPrecision(precision, covariance)
    # Keyed after the computation (transforming the training inputs may refresh learned
    # transform coefficients); the cache keeps the key's tensors alive, so their ids
    # cannot be reused by other tensors.
    tensors = (*model.parameters(), *model.buffers())
    model._last_layer_precision_cache = (state_key(model), tensors, result)
    return result


def state_key(model: NeuralSurrogateModel) -> tuple[tuple[int, int], ...]:
    r"""The identity and version of every parameter and buffer of ``model``: equal keys
    mean an unchanged fitted state."""
    return tuple(
        (id(tensor), tensor._version) for tensor in (*model.parameters(), *model.buffers())
    )


def _solve_cholesky(factor: Tensor, rhs: Tensor) -> Tensor:
    r"""``(L L^T)^{-1} rhs`` for a lower-triangular ``L``, batch dimensions broadcast."""
    half = torch.linalg.solve_triangular(factor, rhs, upper=False)
    return torch.linalg.solve_triangular(factor.transpose(-2, -1), half, upper=True)


def _weight_shift(
    precision: LastLayerPrecision, features: Tensor, residuals: Tensor
) -> Tensor:
    r"""The last-layer update ``w' - w`` (see the module docstring).

    Args:
        precision: The training precision (``s' x H x H``).
        features: ``batch_X x s' x k x H`` features of the ``k`` new rows.
        residuals: ``batch x s x k x C`` residuals ``y' - f(X')`` per function.

    Returns:
        The ``broadcast x s x H x C`` update.
    """
    num_rows, size = features.shape[-2:]
    transposed = features.transpose(-2, -1)
    if num_rows <= size:
        gain = precision.covariance @ transposed  # G^{-1} Phi'^T
        innovation = features @ gain
        innovation = innovation + torch.eye(num_rows, dtype=features.dtype, device=features.device)
        return gain @ _solve_cholesky(torch.linalg.cholesky(innovation), residuals)
    updated = precision.precision + transposed @ features
    return _solve_cholesky(torch.linalg.cholesky(updated), transposed @ residuals)


class FunctionBankConditioning:
    r"""The last-layer update of every function of a bank (ensemble members, dropout
    masks, epistemic indices) given observations.

    Args:
        model: The fitted model; its ``_predict`` returns a function bank or mixture
            posterior and, with ``return_features=True``, the last layer's features.
        X: ``batch_X x n' x d'`` transformed conditioning inputs.
        Y: ``batch_Y x n' x M`` transformed observations of all ``M`` network outputs.
        observed: An optional ``M``-vector marking the observed outputs (the others get
            no update); ``None``: all.
    """

    def __init__(
        self, model: NeuralSurrogateModel, X: Tensor, Y: Tensor, observed: Tensor | None
    ) -> None:
        precision = training_precision(model)
        prediction = model._predict(X, observation_noise=False, return_features=True)
        residuals = Y.unsqueeze(-3) - prediction.posterior.values  # batch x s x n' x M
        if observed is not None:
            residuals = residuals * observed
        features = prediction.features  # batch_X x s' x n' x R x H
        rows = features.shape[-2]
        features = features.flatten(-3, -2)
        residuals = residuals.unflatten(-1, (rows, -1)).flatten(-3, -2)
        self._model = model
        self._rows = rows
        self.weight_shift = _weight_shift(precision, features, residuals)

    def posterior(self, X: Tensor, observation_noise: bool) -> Posterior:
        r"""The conditioned posterior at transformed inputs ``X`` (``batch x q x d'``), in
        the transformed outcome space, of the model's own family."""
        prediction = self._model._predict(X, observation_noise, return_features=True)
        num_points = X.shape[-2]
        shift = prediction.features.flatten(-3, -2) @ self.weight_shift
        shift = shift.unflatten(-2, (num_points, self._rows)).flatten(-2)
        return prediction.posterior.shift_functions(shift)


class GaussianConditioning:
    r"""Exact Gaussian conditioning of a Gaussian-marginal model (NOMU) whose marginal
    variances ``sigma^2(x)`` are correlated across points by its last layer's features:
    ``cov(x, x') = sigma(x) sigma(x') rho(x, x')`` with ``rho`` the correlation of the
    Bayesian last layer, ``phi(x)^T G^{-1} phi(x')`` normalised. Observations carry the
    model's observation noise (none without a noise model) and a jitter of ``1e-6``
    of their variance.

    Args:
        model: The fitted model; its ``_predict`` with ``return_features=True`` returns
            the posterior, the features and the noise part of the variance.
        X: ``batch_X x n' x d'`` transformed conditioning inputs.
        Y: ``batch_Y x n' x M`` transformed observations of all ``M`` network outputs.
        observed: An optional ``M``-vector marking the observed outputs (the others are
            not conditioned); ``None``: all.
    """

    def __init__(
        self, model: NeuralSurrogateModel, X: Tensor, Y: Tensor, observed: Tensor | None
    ) -> None:
        self._model = model
        self._covariance = training_precision(model).covariance.squeeze(0)  # H x H
        prediction = model._predict(X, observation_noise=True, return_features=True)
        noise = prediction.noise_variance
        variance = (prediction.posterior.variance - noise).clamp_min(min_variance(X.dtype))
        self._features = prediction.features.squeeze(-4).squeeze(-2)  # batch_X x n' x H
        self._feature_variance = self._self_similarity(self._features)
        self._std = variance.sqrt().transpose(-2, -1)  # batch_X x M x n'
        correlation = self._correlation(self._features, self._feature_variance)
        covariance = self._std.unsqueeze(-1) * self._std.unsqueeze(-2) * correlation.unsqueeze(-3)
        diagonal = (noise + 1e-6 * variance).transpose(-2, -1)
        self._factor = torch.linalg.cholesky(covariance + torch.diag_embed(diagonal))
        residuals = Y - prediction.posterior.mean
        if observed is not None:
            residuals = residuals * observed
        self._weights = _solve_cholesky(self._factor, residuals.transpose(-2, -1).unsqueeze(-1))

    def _self_similarity(self, features: Tensor) -> Tensor:
        return ((features @ self._covariance) * features).sum(-1).clamp_min(
            min_variance(features.dtype)
        )

    def _correlation(self, features: Tensor, feature_variance: Tensor) -> Tensor:
        r"""``rho(x, X')`` for ``... x q x H`` features: ``... x q x n'``."""
        similarity = features @ self._covariance @ self._features.transpose(-2, -1)
        scale = (feature_variance.unsqueeze(-1) * self._feature_variance.unsqueeze(-2)).sqrt()
        return similarity / scale

    def posterior(self, X: Tensor, observation_noise: bool) -> Posterior:
        r"""The conditioned posterior at transformed inputs ``X`` (``batch x q x d'``), in
        the transformed outcome space."""
        prediction = self._model._predict(X, observation_noise, return_features=True)
        noise = prediction.noise_variance
        variance = (prediction.posterior.variance - noise).clamp_min(min_variance(X.dtype))
        features = prediction.features.squeeze(-4).squeeze(-2)  # batch x q x H
        correlation = self._correlation(features, self._self_similarity(features))
        std = variance.sqrt().transpose(-2, -1)  # batch x M x q
        cross = std.unsqueeze(-1) * self._std.unsqueeze(-2) * correlation.unsqueeze(-3)
        mean = prediction.posterior.mean + (cross @ self._weights).squeeze(-1).transpose(-2, -1)
        explained = torch.linalg.solve_triangular(
            self._factor, cross.transpose(-2, -1), upper=False
        )
        reduction = explained.pow(2).sum(-2).transpose(-2, -1)
        conditioned = (variance - reduction).clamp_min(min_variance(X.dtype)) + noise
        # The mean carries the observations' batch, the variance does not depend on them.
        shape = torch.broadcast_shapes(mean.shape, conditioned.shape)
        return GaussianMarginalPosterior(mean.expand(shape), conditioned.expand(shape))
