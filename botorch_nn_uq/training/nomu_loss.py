"""NOMU's loss (Heiss et al., 2022, Definition 3.3, App. B.2.7 and C.1).

For training data ``(x_i, y_i)`` and artificial inputs ``x~_j`` drawn uniformly from the
input box at every gradient step::

    L = sum_i (f_hat(x_i) - y_i)^2                          (a) fit
      + pi_sqr * sum_i r_hat(x_i)^2                         (b) r_hat -> 0 at the data
      + pi_exp * mean_j exp(-c_exp * r_hat(x~_j))           (c) push r_hat up elsewhere

Terms (b) and (c) act on the RAW uncertainty ``r_hat``. With ``m`` outputs every term is
also summed over the outputs. The L2 penalty ``lambda * ||theta||^2`` is added by the
model (:func:`botorch_nn_uq.training.l2_penalty`).

With known observation noise (a model's ``train_Yvar``), terms (a) and (b) weigh each
row and output by its precision weight ``w_i`` (``1 / sigma_i^2`` normalised to mean one,
:class:`~botorch_nn_uq.training.losses.KnownNoise`). This is the noisy loss of App. C.1
(Eq. 57) with the known variances in place of learned ones, multiplied by a constant:
Eq. 57 divides both terms by ``2 sigma_i^2`` and ``pi_exp`` and ``lambda`` by ``2
mean(sigma^2)``; the weights correspond to dividing ``pi_exp`` and ``lambda`` by twice the
harmonic mean of the variances instead, which is the same for homoscedastic noise (where
the loss is then the noiseless one) and keeps the loss's scale bounded however small a
variance is.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def squared_or_huber(raw_uncertainty: Tensor, stable: bool) -> Tensor:
    r"""The per-point penalty of term (b): ``r^2``, or with ``stable`` the Huber loss
    ``r^2 if |r| <= 1 else 2|r| - 1`` (App. B.2.7, Eq. 54), equal to ``r^2`` for
    ``|r| <= 1`` and with a bounded gradient beyond."""
    if not stable:
        return raw_uncertainty.square()
    magnitude = raw_uncertainty.abs()
    return torch.where(magnitude <= 1.0, raw_uncertainty.square(), 2.0 * magnitude - 1.0)


def exponential_barrier(raw_uncertainty: Tensor, c_exp: float, stable: bool) -> Tensor:
    r"""The per-point penalty of term (c): ``exp(-c_exp r)``, or with ``stable``
    ``exp(-c_exp r)`` for ``r >= 0`` and its tangent ``1 - c_exp r`` for ``r < 0``
    (App. B.2.7, Eq. 55), which cannot overflow for very negative ``r``."""
    if not stable:
        return torch.exp(-c_exp * raw_uncertainty)
    exponential = torch.exp(-c_exp * raw_uncertainty.clamp_min(0.0))
    return torch.where(raw_uncertainty >= 0, exponential, 1.0 - c_exp * raw_uncertainty)


def data_fit_loss(
    mean: Tensor,
    train_Y: Tensor,
    noise_std: Tensor | None = None,
    weights: Tensor | None = None,
) -> Tensor:
    r"""Term (a): ``sum_i (f_hat(x_i) - y_i)^2``; with ``noise_std`` (``n x m``, learned)
    the Gaussian negative log-likelihood ``sum_i (f_hat - y)^2 / (2 sigma_n^2) + ln
    sigma_n`` (App. C.1, without the constant ``n/2 ln 2 pi``); with ``weights`` (``n x
    m`` precision weights of known noise) the weighted sum ``sum_i w_i (f_hat - y)^2``."""
    squared_error = (mean - train_Y).square()
    if weights is not None:
        return (weights * squared_error).sum()
    if noise_std is None:
        return squared_error.sum()
    return (squared_error / (2.0 * noise_std.square()) + noise_std.log()).sum()


def nomu_loss(
    mean: Tensor | None,
    train_Y: Tensor,
    raw_uncertainty_at_data: Tensor,
    raw_uncertainty_artificial: Tensor,
    pi_sqr: float,
    pi_exp: float | Tensor,
    c_exp: float,
    stable: bool = False,
    noise_std: Tensor | None = None,
    weights: Tensor | None = None,
) -> Tensor:
    r"""NOMU's loss without the L2 penalty.

    Args:
        mean: ``n x m`` predictions ``f_hat(x_i)``; ``None`` drops term (a) (a frozen,
            pre-trained mean network, or the second stage of the noisy variant).
        train_Y: ``n x m`` targets.
        raw_uncertainty_at_data: ``n x m`` raw uncertainties ``r_hat(x_i)``.
        raw_uncertainty_artificial: ``l x m`` raw uncertainties at the artificial inputs.
        pi_sqr: Weight of term (b).
        pi_exp: Weight of term (c), a scalar or one value per output (``m``).
        c_exp: Steepness of term (c).
        stable: Use the numerically stable penalties (:func:`squared_or_huber`,
            :func:`exponential_barrier`).
        noise_std: ``n x m`` learned data-noise standard deviations ``sigma_hat_n(x_i)``
            for the noisy loss (App. C.1, Eq. 57): term (a) becomes the Gaussian negative
            log-likelihood ``sum_i (f_hat - y)^2 / (2 sigma_n^2) + ln sigma_n`` and the
            penalty of term (b) is divided by ``2 sigma_n^2``.
        weights: ``n x m`` precision weights of known observation noise (see the module
            docstring): the squared errors of term (a) and the penalties of term (b) are
            multiplied by them. Not together with ``noise_std``.

    Returns:
        The scalar loss.

    Example:
        >>> zeros = torch.zeros(3, 1)
        >>> nomu_loss(zeros, zeros, zeros, torch.zeros(4, 1), 0.1, 0.01, 30.0)
        tensor(0.0100)
    """
    if noise_std is not None and weights is not None:
        raise ValueError(
            "nomu_loss takes learned noise (noise_std) or known noise (weights), not both."
        )
    in_sample = squared_or_huber(raw_uncertainty_at_data, stable)
    if noise_std is not None:
        in_sample = in_sample / (2.0 * noise_std.square())
    if weights is not None:
        in_sample = weights * in_sample
    loss = pi_sqr * in_sample.sum()
    loss = (
        loss
        + (pi_exp * exponential_barrier(raw_uncertainty_artificial, c_exp, stable)).sum(-1).mean()
    )
    if mean is not None:
        loss = loss + data_fit_loss(mean, train_Y, noise_std, weights)
    return loss


def artificial_inputs(
    box: Tensor, num_points: int, generator: torch.Generator | None = None
) -> Tensor:
    r"""``num_points`` inputs drawn iid uniformly from ``box`` (called at every gradient
    step, so the inputs change from step to step).

    Args:
        box: A ``2 x d`` tensor of lower and upper corners.
        num_points: The number ``l`` of points.
        generator: The source of the points, a CPU generator; ``None`` draws from
            torch's global CPU generator.

    Returns:
        An ``l x d`` tensor in ``box``'s dtype and device.
    """
    # Drawn on the CPU and moved: a seed gives the same points on every device.
    unit = torch.rand(num_points, box.shape[-1], dtype=box.dtype, generator=generator)
    return box[0] + (box[1] - box[0]) * unit.to(box.device)


def enlarge_box(box: Tensor, enlargement: float) -> Tensor:
    r"""``box`` (``2 x d``) widened by ``enlargement`` times its width on every side
    (0.05 turns ``[-1, 1]`` into ``[-1.1, 1.1]``)."""
    if not math.isfinite(enlargement) or enlargement < 0:
        raise ValueError(f"enlargement must be a non-negative number; got {enlargement}.")
    margin = enlargement * (box[1] - box[0])
    return torch.stack([box[0] - margin, box[1] + margin])
