r"""Known observation noise: the ``train_Yvar`` that every model of the package takes as
BoTorch's ``SingleTaskGP(train_X, train_Y, train_Yvar)`` does, third argument or keyword.

``train_Yvar`` is an ``n x m`` tensor of observation-noise variances, one per training
point and output, in the units of ``train_Y``; the outcome transform maps it with the
outcomes (``outcome_transform(train_Y, train_Yvar)``: ``Standardize`` divides it by the
outcomes' variance, ``Log`` maps it by the delta method; a transform that cannot map
variances, such as ``Bilog`` or ``Power``, raises as it does for a GP). What a model does
with the transformed variances:

- **Training**: the known noise replaces the model's own noise model in its loss, row by
  row and output by output (heteroscedastic noise is never averaged). Networks with a
  Gaussian head (deep ensembles' default) are trained on the Gaussian negative
  log-likelihood with the known variance in place of the head's; networks that predict
  a mean (MC dropout, NEON, NOMU's mean branch, ``likelihood="mse"`` ensembles) on
  weighted least squares with weights ``1 / Yvar`` normalised to mean one (see
  :class:`~botorch_nn_uq.training.losses.KnownNoise`): the Gaussian log-likelihood with
  the known variances up to a constant factor, at the scale of the unweighted loss, so
  that constant variances train exactly as the unweighted loss does and the learning
  rate, the L2 penalty and NOMU's loss weights keep their meaning. The searched ensembles
  (hyper-deep, NES, AutoDEUQ) train every candidate so, and score candidates on
  validation rows with those rows' known variances in place of the heads' own (see
  :func:`~botorch_nn_uq.ensembles.holdout.member_log_likelihoods`).
- **Posterior**: ``posterior(X, observation_noise=True)`` adds the mean of the known
  variances (per output) at the new points, as BoTorch's fixed-noise GP does; the model's
  own estimate (the homoscedastic residual variance, Gaussian heads' aleatoric variance,
  NOMU's learned noise) is not used, and a deep ensemble's
  ``uncertainty_decomposition`` reports the known noise as aleatoric. A tensor of noise
  variances is added as given, as without known noise.
- **Fantasies**: ``fantasize`` without ``observation_noise`` draws observations with the
  mean known noise and conditions on them with it, as BoTorch's fixed-noise GP does; an
  ``observation_noise`` tensor is used for both, and ``condition_on_observations`` takes
  the new observations' variances as ``noise`` (see :mod:`botorch_nn_uq.models.fantasy`).

Zero and tiny variances: a variance below GPyTorch's ``min_fixed_noise`` (``1e-6`` in
double, ``1e-4`` in single precision, in the transformed outcome space) is rounded up to
it with a ``NumericalWarning``, exactly as BoTorch's fixed-noise GP rounds it. Zero is
allowed: it states an observation without noise (Ax passes a standard error of 0 so),
which a network fits as closely as that floor asks. The floor keeps the Gaussian
likelihood finite and the weights bounded; a noiseless point then weighs at most
``1 / floor`` times a point of unit variance.
"""

from __future__ import annotations

import warnings

from botorch.models.transforms.input import InputTransform
from botorch.models.transforms.outcome import OutcomeTransform
from gpytorch.settings import min_fixed_noise
from gpytorch.utils.warnings import NumericalWarning
from torch import Tensor


def noise_variance_floor(variance: Tensor) -> float:
    r"""The smallest noise variance a model uses: GPyTorch's ``min_fixed_noise``, the
    floor of BoTorch's fixed-noise GP.

    Args:
        variance: Noise variances, whose dtype selects the floor (``1e-6`` for float64,
            ``1e-4`` for float32 by default; GPyTorch's ``min_fixed_noise`` context
            changes them for both kinds of model).
    """
    return min_fixed_noise.value(variance.dtype)


def validate_train_Yvar(train_Yvar: Tensor, train_Y: Tensor) -> None:
    r"""Check known observation-noise variances against the training targets.

    Args:
        train_Yvar: An ``n x m`` tensor of noise variances.
        train_Y: The ``n x m`` training targets (checked before).

    Raises:
        TypeError: If ``train_Yvar`` is not a tensor (a transform passed third, where it
            was before ``train_Yvar`` came first, is named as such).
        ValueError: On another shape, dtype or device than ``train_Y``'s, NaN or
            infinite entries, or negative variances.
    """
    if isinstance(train_Yvar, (InputTransform, OutcomeTransform)):
        raise TypeError(
            f"The third argument is train_Yvar (as for SingleTaskGP), the observation-noise "
            f"variances; got a {type(train_Yvar).__name__}. Pass transforms by keyword: "
            "input_transform=..., outcome_transform=...."
        )
    if not isinstance(train_Yvar, Tensor):
        raise TypeError(
            "train_Yvar must be a torch.Tensor of observation-noise variances; got "
            f"{type(train_Yvar).__name__}."
        )
    if train_Yvar.shape != train_Y.shape:
        raise ValueError(
            f"train_Yvar must have the shape of train_Y, `n x m` = {tuple(train_Y.shape)}: "
            f"one noise variance per observation; got {tuple(train_Yvar.shape)}. A constant "
            "variance is `torch.full_like(train_Y, variance)`."
        )
    if train_Yvar.dtype != train_Y.dtype or train_Yvar.device != train_Y.device:
        raise ValueError(
            f"train_Yvar ({train_Yvar.dtype}, {train_Yvar.device}) must have the dtype and "
            f"device of train_Y ({train_Y.dtype}, {train_Y.device})."
        )
    if not train_Yvar.isfinite().all():
        raise ValueError("train_Yvar contains NaN or infinite values.")
    if (train_Yvar < 0).any():
        raise ValueError(
            f"train_Yvar holds negative variances (the smallest is {train_Yvar.min().item():.3g})."
        )


def transformed_noise_variance(
    transformed_Yvar: Tensor | None, outcome_transform: OutcomeTransform | None
) -> Tensor:
    r"""The variances the model uses: ``train_Yvar`` after the outcome transform,
    checked and floored at :func:`noise_variance_floor` (with a ``NumericalWarning``
    where any is below, as BoTorch's fixed-noise GP warns).

    Args:
        transformed_Yvar: The ``n x m`` variances the outcome transform returned.
        outcome_transform: That transform (``None``: the variances as given).

    Raises:
        ValueError: If the transform returned no variances, or non-finite or negative
            ones.
    """
    name = type(outcome_transform).__name__
    if transformed_Yvar is None:
        raise ValueError(
            f"The outcome transform {name} returned no noise variances for train_Yvar."
        )
    if not (transformed_Yvar.isfinite() & (transformed_Yvar >= 0)).all():
        raise ValueError(
            f"The outcome transform {name} mapped train_Yvar to non-finite or negative variances."
        )
    floor = noise_variance_floor(transformed_Yvar)
    if (transformed_Yvar < floor).any():
        warnings.warn(
            f"train_Yvar holds variances below {floor} (after the outcome transform); they "
            "are rounded up to it, as BoTorch's fixed-noise GP rounds them.",
            NumericalWarning,
            stacklevel=4,
        )
    return transformed_Yvar.detach().clamp_min(floor)
