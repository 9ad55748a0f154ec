r"""Conditioning the networks on new observations in closed form: fantasies that are
cheap, differentiable and calibrated to the model's own uncertainty.

A network's outputs are linear in its last layer, ``f(x) = phi(x)^T w`` with ``phi(x)``
the last hidden layer and a constant one (the bias), ``H`` features. Treating ``w`` as
Bayesian given the rest of the network (a Bayesian last layer) with the ridge precision
of the training features,

``G = sum_i phi(x_i) phi(x_i)^T + lambda I``, with ``lambda`` a hundredth of the mean
squared training feature (a prior worth a hundredth of a training row; see
:data:`PRIOR_ROWS`),

makes the function a Gaussian process in ``x`` with the kernel
``k(x, x') = phi(x)^T G^{-1} phi(x')``: points whose features the training data explain
alike are tied together, and the tie weakens where the features differ in directions the
data have not pinned down.

The last layer of each function is Bayesian with covariance ``s^2 G^{-1}``: the
function is a Gaussian process with kernel ``s^2 k(x, x')``, mean the function itself.
Its magnitude ``s^2`` is calibrated to the model, not to the last layer: it makes the
last layer's variance at the observed points, on average, the model's own variance
``sigma^2`` there (the spread of a function bank, NOMU's variance), and the observation
noise ``N`` is the model's (its noise estimate, its members' predicted variances, or its
known noise), unless the observations come with their own noise variances. Each function
is conditioned exactly:

``f'(x) = f(x) + s^2 k(x, X') (s^2 k(X', X') + N)^{-1} (y' + eps - f(X'))``.

At an observed point the update has the gain ``sigma^2 / (sigma^2 + N)`` of a GP with the
model's variance and noise; away from it the update follows the last layer's kernel (an
observation moves a function where its features say the function is tied to the
observed point), not the model's variance, which far from the data can be large. For a
bank of functions (ensemble members, dropout masks, NEON's epistemic indices; each with
its own features where it has its own last hidden layer) the observation is perturbed
per function by ``eps_k = z_k sqrt(N)``, with ``z`` fixed standard normals centred, made
orthogonal to the functions' deviations and scaled to unit weighted variance over the
functions (:func:`observation_perturbations`): the conditioned bank's mean is the
Gaussian update of the bank's mean, and its spread, the epistemic variance, shrinks to
``sigma^2 N / (sigma^2 + N)`` at an observed point, as a GP's variance does (with two
functions, whose deviations leave no free direction, it shrinks to
``sigma^2 N^2 / (sigma^2 + N)^2``). NOMU's mean is conditioned the same way, and its
variance shrinks by the fraction of the last layer's prior variance that the
observations explain.

Everything is differentiable in the conditioning inputs and observations, which is what
``qKnowledgeGradient`` and ``qNegIntegratedPosteriorVariance`` need to move their
candidates, and costs one forward pass and small solves (``n' x n'`` per function). The
hidden layers are not retrained, which a refit on the augmented data would do
(``benchmarks/conditioning.py`` compares the two). ``G`` is computed once per fitted
state from the training data and cached.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import torch
from botorch.exceptions.errors import UnsupportedError
from botorch.posteriors import Posterior
from linear_operator.utils.cholesky import psd_safe_cholesky
from torch import Tensor

from botorch_nn_uq.posteriors.gaussian import GaussianMarginalPosterior, min_variance
from botorch_nn_uq.posteriors.mixture import MixtureOfGaussiansPosterior

if TYPE_CHECKING:
    from botorch_nn_uq.models.base import NeuralSurrogateModel

#: Training rows whose features are computed at once for the precision (bounds memory:
#: ``functions x rows x H`` features per chunk).
PRECISION_CHUNK_ROWS = 1024
#: The weight of the last layer's ridge prior, in training rows (see the module docstring).
PRIOR_ROWS = 0.01
#: The seed of the fixed perturbations ``z`` of a function bank's observations.
PERTURBATION_SEED = 0
#: A jitter, relative to the model's variance, added to the observation noise.
RELATIVE_JITTER = 1e-6


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
    r"""``features`` (``batch x h``) with a column of ones appended (``batch x (h + 1)``)."""
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
        ridge = PRIOR_ROWS * gram.diagonal(dim1=-2, dim2=-1).sum(-1) / (num_rows * size)
        ridge = ridge.clamp_min(min_variance(gram.dtype))
        identity = torch.eye(size, dtype=gram.dtype, device=gram.device)
        precision = gram + ridge[..., None, None] * identity
        covariance = torch.cholesky_inverse(psd_safe_cholesky(precision))
    result = LastLayerPrecision(precision, covariance)
    # Keyed after the computation (transforming the training inputs may refresh learned
    # transform coefficients); the cache keeps the key's tensors alive, so their ids
    # cannot be reused by other tensors.
    tensors = (*model.parameters(), *model.buffers())
    model._last_layer_precision_cache = (state_key(model), tensors, result)
    return result


def state_key(model: NeuralSurrogateModel) -> tuple[tuple[int, int, int], ...]:
    r"""The storage, version and size of every parameter and buffer of ``model``: equal
    keys mean an unchanged fitted state, as long as the tensors of the earlier key are
    kept alive (so that their storage cannot be reused). Storage rather than identity:
    BoTorch's transforms replace their buffers by detached views of the same storage
    whenever they are applied."""
    return tuple(
        (tensor.data_ptr(), tensor._version, tensor.numel())
        for tensor in (*model.parameters(), *model.buffers())
    )


def feature_similarity(features: Tensor, covariance: Tensor) -> Tensor:
    r"""``phi(x)^T G^{-1} phi(x)`` for ``batch x q x H`` features and ``G^{-1}``
    (``H x H``), a ``batch x q`` tensor floored at the dtype's minimum variance."""
    similarity = ((features @ covariance) * features).sum(-1)
    return similarity.clamp_min(min_variance(features.dtype))


def feature_correlation(
    features: Tensor,
    other_features: Tensor,
    covariance: Tensor,
    similarity: Tensor | None = None,
    other_similarity: Tensor | None = None,
) -> Tensor:
    r"""The last layer's correlation ``rho(x, x')`` between the points of ``features``
    (``batch x q x H``) and of ``other_features`` (``batch x n x H``), a ``batch x q x n``
    tensor.

    Args:
        features: Features of the first points.
        other_features: Features of the second points.
        covariance: ``G^{-1}``, ``H x H``.
        similarity: :func:`feature_similarity` of ``features``, if already computed.
        other_similarity: The same for ``other_features``.
    """
    if similarity is None:
        similarity = feature_similarity(features, covariance)
    if other_similarity is None:
        other_similarity = feature_similarity(other_features, covariance)
    cross = features @ covariance @ other_features.transpose(-2, -1)
    return cross / (similarity.unsqueeze(-1) * other_similarity.unsqueeze(-2)).sqrt()


def broadcast_matmul(left: Tensor, right: Tensor) -> Tensor:
    r"""``left @ right`` with broadcast batch dimensions, without materialising the
    broadcast: a batch dimension that only ``left`` has becomes more rows of one product
    and one that only ``right`` has more columns, so the work and memory are those of the
    result (``torch.matmul`` copies the smaller operand for every element of the other's
    batch, gigabytes for a fantasy model evaluated at many candidates).

    Args:
        left: A ``batch_A x r x k`` tensor.
        right: A ``batch_B x k x c`` tensor, ``batch_B`` broadcastable with ``batch_A``.

    Returns:
        The ``broadcast(batch_A, batch_B) x r x c`` product.
    """
    batch = torch.broadcast_shapes(left.shape[:-2], right.shape[:-2])
    ndim = len(batch)
    left = left.reshape((1,) * (ndim + 2 - left.ndim) + left.shape)
    right = right.reshape((1,) * (ndim + 2 - right.ndim) + right.shape)
    left_only = [i for i in range(ndim) if left.shape[i] != 1 and right.shape[i] == 1]
    right_only = [i for i in range(ndim) if right.shape[i] != 1 and left.shape[i] == 1]
    shared = [i for i in range(ndim) if i not in left_only and i not in right_only]
    shared_shape = [batch[i] for i in shared]
    rows, size, columns = left.shape[-2], left.shape[-1], right.shape[-1]
    # Each operand's own size-1 dimensions ride along (they do not change the reshapes).
    folded_left = left.permute(*shared, *left_only, *right_only, ndim, ndim + 1)
    folded_right = right.permute(*shared, *left_only, ndim, *right_only, ndim + 1)
    product = folded_left.reshape(*shared_shape, -1, size) @ folded_right.reshape(
        *shared_shape, size, -1
    )
    product = product.reshape(
        *shared_shape,
        *[batch[i] for i in left_only],
        rows,
        *[batch[i] for i in right_only],
        columns,
    )
    order = [*shared, *left_only, ndim, *right_only, ndim + 1]
    return product.permute(*[order.index(i) for i in range(ndim + 2)])


def _solve_cholesky(factor: Tensor, rhs: Tensor) -> Tensor:
    r"""``(L L^T)^{-1} rhs`` for a lower-triangular ``L``, batch dimensions broadcast."""
    half = torch.linalg.solve_triangular(factor, rhs, upper=False)
    return torch.linalg.solve_triangular(factor.transpose(-2, -1), half, upper=True)


def observation_perturbations(weights: Tensor, functions: Tensor) -> Tensor:
    r"""The fixed perturbations ``z`` of a function bank's observations: standard normals
    per function, point and output, centred over the functions, made orthogonal to the
    functions' deviations from their mean (so that they do not change the conditioned
    spread through a chance correlation with the functions), and scaled to unit weighted
    variance.

    Where the functions' deviations leave no direction free (two functions, whose
    deviations are opposite), the perturbations are zero.

    Args:
        weights: The ``s`` function weights, summing to one.
        functions: ``batch x s x n' x M`` values of the functions at the conditioning
            points.

    Returns:
        A ``batch x s x n' x M`` tensor.
    """
    generator = torch.Generator().manual_seed(PERTURBATION_SEED)
    draws = torch.randn(functions.shape[-3:], generator=generator, dtype=torch.float64)
    draws = draws.to(functions)
    weights = weights[:, None, None]

    def weighted_mean(values: Tensor) -> Tensor:
        return (weights * values).sum(-3, keepdim=True)

    deviations = functions - weighted_mean(functions)
    draws = draws - weighted_mean(draws)
    spread = weighted_mean(deviations.pow(2))
    along = weighted_mean(draws * deviations) / spread.clamp_min(min_variance(draws.dtype))
    free = draws - along * deviations
    variance = weighted_mean(free.pow(2))
    usable = variance > 1e-6
    return torch.where(usable, free / variance.clamp_min(1e-6).sqrt(), torch.zeros_like(free))


class _Moments(NamedTuple):
    r"""What the conditioning reads of a prediction, in the transformed outcome space.

    Attributes:
        functions: ``batch x s x q x m`` function values (NOMU: its mean, ``s = 1``).
        std: ``batch x q x m`` the model's latent standard deviation.
        noise: ``batch x q x m`` the observation-noise variance.
        features: ``batch x s' x q x H`` last-layer features.
    """

    functions: Tensor
    std: Tensor
    noise: Tensor
    features: Tensor


def _moments(prediction: PredictionWithFeatures) -> _Moments:
    r"""The functions, latent standard deviation, noise and features of a prediction
    made with ``observation_noise=True``."""
    posterior, features = prediction.posterior, prediction.features
    if features.shape[-2] != 1:
        raise UnsupportedError(
            "Conditioning a model whose outputs are functions on a grid (rows of features "
            "per point, such as a function-valued NEON) on observations is not supported; "
            "use a scalar or multi-output model for fantasies."
        )
    features = features.squeeze(-2)
    if isinstance(posterior, MixtureOfGaussiansPosterior):
        return _Moments(
            posterior.component_means,
            posterior.epistemic_variance.sqrt(),
            posterior.aleatoric_variance,
            features,
        )
    noise = prediction.noise_variance
    latent = (posterior.variance - noise).clamp_min(min_variance(posterior.dtype))
    return _Moments(posterior.mean.unsqueeze(-3), latent.sqrt(), noise, features)


class GaussianConditioning:
    r"""Closed-form conditioning of a fitted model on observations (see the module
    docstring): a function bank keeps its functions, each with its Bayesian last layer
    updated; a Gaussian-marginal model (NOMU) gets its conditioned mean and variance.

    Args:
        model: The fitted model; its ``_predict`` with ``return_features=True`` returns
            the posterior and the last layer's features.
        X: ``batch_X x n' x d'`` transformed conditioning inputs.
        Y: ``batch_Y x n' x M`` transformed observations of all ``M`` network outputs.
        observed: An optional ``M``-vector marking the observed outputs (the others are
            not conditioned); ``None``: all.
        noise: An optional ``batch x n' x M`` tensor of the observations' noise variances
            (transformed outcome space), NaN where the model's own noise applies;
            ``None``: the model's own noise ``N`` for every observation.
    """

    def __init__(
        self,
        model: NeuralSurrogateModel,
        X: Tensor,
        Y: Tensor,
        observed: Tensor | None,
        noise: Tensor | None = None,
    ) -> None:
        self._model = model
        self._covariance = training_precision(model).covariance  # s' x H x H
        prediction = model._predict(X, observation_noise=True, return_features=True)
        self._bank = isinstance(prediction.posterior, MixtureOfGaussiansPosterior)
        moments = _moments(prediction)
        observation_noise = (
            moments.noise
            if noise is None
            else torch.where(noise.isnan(), moments.noise, noise.to(moments.noise))
        )
        self._whitened = broadcast_matmul(moments.features, self._covariance)
        kernel = broadcast_matmul(self._whitened, moments.features.transpose(-2, -1))
        own = kernel.diagonal(dim1=-2, dim2=-1).clamp_min(min_variance(X.dtype))
        # The prior scale s^2 of each function's last layer (per output), calibrated so
        # that the last layer's variance at the observed points is the model's variance.
        variance = moments.std.pow(2).transpose(-2, -1).unsqueeze(-3)  # batch_X x 1 x M x n'
        self._scale = (variance / own.unsqueeze(-2)).mean(-1, keepdim=True)  # bX x s' x M x 1
        jittered_noise = (observation_noise + RELATIVE_JITTER * moments.std.pow(2)).clamp_min(
            min_variance(X.dtype)
        )
        covariance = self._scale.unsqueeze(-1) * kernel.unsqueeze(-3)
        # With little noise (NOMU is noiseless) and nearly collinear features the matrix is
        # singular up to rounding, in float32 especially: jitter is added where needed.
        self._factor = psd_safe_cholesky(
            covariance + torch.diag_embed(jittered_noise.transpose(-2, -1).unsqueeze(-3))
        )  # batch x s' x M x n' x n'
        targets = Y.unsqueeze(-3)
        if self._bank:
            weights = prediction.posterior.weights
            perturbations = observation_perturbations(weights, moments.functions)
            targets = targets + perturbations * observation_noise.unsqueeze(-3).sqrt()
        residuals = targets - moments.functions  # batch x s x n' x M
        if observed is not None:
            residuals = residuals * observed
        self._weights = _solve_cholesky(
            self._factor, residuals.transpose(-2, -1).unsqueeze(-1)
        )  # batch x s x M x n' x 1

    def _cross_covariance(self, features: Tensor) -> Tensor:
        r"""``s^2 k(x, X')`` for ``batch x s' x q x H`` features: ``batch x s' x M x q x
        n'``."""
        kernel = broadcast_matmul(features, self._whitened.transpose(-2, -1))
        return self._scale.unsqueeze(-1) * kernel.unsqueeze(-3)

    def posterior(self, X: Tensor, observation_noise: bool) -> Posterior:
        r"""The conditioned posterior at transformed inputs ``X`` (``batch x q x d'``), in
        the transformed outcome space, of the model's own family."""
        prediction = self._model._predict(X, observation_noise, return_features=True)
        posterior = prediction.posterior
        features = prediction.features
        if features.shape[-2] != 1:
            raise UnsupportedError(
                "A model whose outputs are functions on a grid cannot be conditioned."
            )
        features = features.squeeze(-2)
        cross = self._cross_covariance(features)
        update = broadcast_matmul(cross, self._weights).squeeze(-1)  # batch x s x M x q
        if self._bank:
            return posterior.shift_functions(update.transpose(-2, -1))
        # NOMU: its variance shrinks by the fraction the last layer explains.
        noise = prediction.noise_variance
        latent = (posterior.variance - noise).clamp_min(min_variance(X.dtype))
        mean = posterior.mean + update.squeeze(-3).transpose(-2, -1)
        explained = torch.linalg.solve_triangular(
            self._factor, cross.transpose(-2, -1), upper=False
        )
        own = feature_similarity(features, self._covariance.squeeze(0))  # batch x 1 x q
        prior = self._scale * own.unsqueeze(-2)  # batch x 1 x M x q
        fraction = (explained.pow(2).sum(-2) / prior).clamp(0.0, 1.0)
        remaining = 1.0 - fraction.squeeze(-3).transpose(-2, -1)
        variance = (latent * remaining).clamp_min(min_variance(X.dtype)) + noise
        # The mean carries the observations' batch, the variance does not depend on them.
        shape = torch.broadcast_shapes(mean.shape, variance.shape)
        return GaussianMarginalPosterior(mean.expand(shape), variance.expand(shape))
