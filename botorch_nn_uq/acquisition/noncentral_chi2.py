r"""Distribution of a squared Gaussian deviation (noncentral chi-square, one dof).

Target-value acquisition functions need the law of ``Z²`` where
``Z = m̂(x) − y• ~ N(offset, std²)`` is the deviation of the surrogate from the target:
``Z² / std² ~ χ²₁(λ)`` with noncentrality ``λ = offset² / std²``.

The exact functions below work in the original units of ``Z²`` (a ``threshold``, the
``offset`` and the ``std``) instead of the normalised units ``threshold / std²`` and
``λ`` of the noncentral chi-square distribution: near training points ``std²`` is of
the order of the GP's jitter (1e-10), which makes the normalised quantities overflow
(λ ~ 1e14) and ``scipy.stats.ncx2`` return NaN. Every function is differentiable with
respect to ``threshold``, ``offset`` and ``std``, vectorised and broadcasts its
arguments; ``std`` must be positive (acquisition functions clamp the posterior
variance at 1e-12 as BoTorch does).

Sankaran's (1959) normal approximation of the noncentral chi-square CDF is provided
for fidelity to published implementations; it is inaccurate for small ``λ`` and in
the lower tail (its expected improvement can even be negative), so the exact forms are
the default everywhere.
"""

from __future__ import annotations

import math

import torch
from botorch.utils.probability.utils import log_prob_normal_in, ndtr, phi
from torch import Tensor

#: Bisection steps for the quantile. The bracket has width O(1) in standardised units,
#: so 64 halvings reach float64 resolution.
QUANTILE_BISECTION_STEPS = 64


def _standardised_interval(
    threshold: Tensor, offset: Tensor, std: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    r"""Standardised bounds of ``{Z² ≤ threshold}`` = ``{lower ≤ (Z − offset)/std ≤ upper}``.

    The offset enters through its absolute value, which mirrors the interval into the
    lower half-line where differences of normal CDFs do not cancel; the squared
    deviation is even in the offset, so this changes no value and no gradient.

    Returns:
        ``(lower, upper, nonempty)``, broadcast to a common shape. Where ``nonempty`` is
        False (``threshold ≤ 0``, or an interval too narrow to resolve), ``lower`` and
        ``upper`` are replaced by the harmless values ``-1`` and ``1`` so that neither
        values nor gradients of the masked entries produce NaN.
    """
    threshold, offset, std = torch.broadcast_tensors(threshold, offset, std)
    # Below √(smallest normal float) the probability is under ~1e-70 while its
    # derivative, ∝ 1/√threshold, would overflow in the backward pass.
    positive = threshold > torch.finfo(threshold.dtype).tiny ** 0.5
    # Double-where: the derivative of sqrt is infinite at 0, so the masked entries
    # must never reach sqrt (0 * inf = NaN in the backward pass).
    radius = torch.where(positive, threshold, torch.ones_like(threshold)).sqrt()
    distance = offset.abs()
    lower = (-radius - distance) / std
    upper = (radius - distance) / std
    nonempty = positive & (lower < upper)
    lower = torch.where(nonempty, lower, -torch.ones_like(lower))
    upper = torch.where(nonempty, upper, torch.ones_like(upper))
    return lower, upper, nonempty


#: Standardised intervals narrower than this take the midpoint rule in
#: :func:`log_squared_gaussian_cdf`.
NARROW_INTERVAL_WIDTH = 1e-4


def log_squared_gaussian_cdf(threshold: Tensor, offset: Tensor, std: Tensor) -> Tensor:
    r"""Logarithm of ``P(Z² ≤ threshold)`` for ``Z ~ N(offset, std²)``.

    Equals ``log F_{1,λ}(threshold / std²)`` with ``λ = offset² / std²``, accurate far
    into the tails (via ``botorch.utils.probability.utils.log_prob_normal_in``) and for
    intervals narrower than :data:`NARROW_INTERVAL_WIDTH` standard deviations (a tiny
    threshold or a huge ``std``), whose mass is the width times the normal density at
    their midpoint.

    Args:
        threshold: Tensor of thresholds ``c`` (any real value; ``c ≤ 0`` gives ``-inf``).
        offset: Tensor of means of ``Z``.
        std: Tensor of positive standard deviations of ``Z``.

    Returns:
        The log-probabilities, with the broadcast shape of the arguments. Entries with
        ``threshold ≤ 0`` are ``-inf`` and have zero gradient.
    """
    threshold, offset, std = torch.broadcast_tensors(threshold, offset, std)
    positive = threshold > torch.finfo(threshold.dtype).tiny ** 0.5
    radius = torch.where(positive, threshold, torch.ones_like(threshold)).sqrt()
    # The interval's width and midpoint in standard units, each without cancellation: a
    # narrow interval (a tiny threshold, or a huge standard deviation) has a mass that
    # differences of normal CDFs round to zero, while its logarithm is finite.
    width = 2 * radius / std
    midpoint = -offset.abs() / std
    lower, upper, nonempty = _standardised_interval(threshold, offset, std)
    wide = nonempty & (width >= NARROW_INTERVAL_WIDTH)
    log_wide = log_prob_normal_in(
        torch.where(wide, lower, -torch.ones_like(lower)),
        torch.where(wide, upper, torch.ones_like(upper)),
    )
    # The midpoint rule: relative error about width^2 |midpoint^2 - 1| / 24.
    safe_width = torch.where(positive, width, torch.ones_like(width))
    log_narrow = safe_width.log() - 0.5 * midpoint.square() - 0.5 * math.log(2 * math.pi)
    log_mass = torch.where(wide, log_wide, log_narrow)
    return torch.where(positive, log_mass, torch.full_like(log_mass, -float("inf")))


def squared_gaussian_cdf(threshold: Tensor, offset: Tensor, std: Tensor) -> Tensor:
    r"""``P(Z² ≤ threshold)`` for ``Z ~ N(offset, std²)``.

    The exact noncentral chi-square CDF with one degree of freedom,
    ``F_{1,λ}(u) = Φ(√u − √λ) − Φ(−√u − √λ)``, written in original units:
    ``Φ((r − |offset|)/std) − Φ((−r − |offset|)/std)`` with ``r = √threshold``.

    Args:
        threshold: Tensor of thresholds ``c`` (``c ≤ 0`` gives probability 0).
        offset: Tensor of means of ``Z``.
        std: Tensor of positive standard deviations of ``Z``.

    Returns:
        The probabilities, with the broadcast shape of the arguments.

    Example:
        >>> # P(Z² ≤ 1) for Z ~ N(0, 1) is P(|Z| ≤ 1) ≈ 0.6827
        >>> squared_gaussian_cdf(torch.tensor(1.0), torch.tensor(0.0), torch.tensor(1.0))
    """
    lower, upper, nonempty = _standardised_interval(threshold, offset, std)
    mass = log_prob_normal_in(lower, upper).exp()
    return torch.where(nonempty, mass, torch.zeros_like(mass))


def squared_gaussian_expected_improvement(threshold: Tensor, offset: Tensor, std: Tensor) -> Tensor:
    r"""``E[(threshold − Z²)₊]`` for ``Z ~ N(offset, std²)``.

    Closed form (``r = √threshold``, ``a = (−r − |offset|)/std``,
    ``b = (r − |offset|)/std``)::

        (threshold − offset² − std²)·[Φ(b) − Φ(a)]
            + std·[(r + |offset|)·φ(b) + (r − |offset|)·φ(a)]

    evaluated as ``std²·[−(1 + ab)·(Φ(b) − Φ(a)) + b·φ(a) − a·φ(b)]``, which is
    ``std² ∫_a^b (b − z)(z − a) φ(z) dz`` with a non-negative integrand. It equals the
    corrected Eq. 13 of Hoffer et al.,
    ``std²·[e F_{1,λ}(e) − F_{3,λ}(e) − λ F_{5,λ}(e)]`` with ``e = threshold / std²``.

    Args:
        threshold: Tensor of thresholds ``c`` (``c ≤ 0`` gives 0).
        offset: Tensor of means of ``Z``.
        std: Tensor of positive standard deviations of ``Z``.

    Returns:
        The non-negative expected improvements, with the broadcast shape of the
        arguments.
    """
    lower, upper, nonempty = _standardised_interval(threshold, offset, std)
    mass = log_prob_normal_in(lower, upper).exp()
    standardised = -(1 + lower * upper) * mass + upper * phi(lower) - lower * phi(upper)
    # The terms cancel in the far lower tail; rounding must not produce negative values.
    improvement = (std.square() * standardised).clamp_min(0)
    return torch.where(nonempty, improvement, torch.zeros_like(improvement))


def _excess_mass(standardised_root: Tensor, ratio: Tensor, quantile: Tensor) -> Tensor:
    r"""``P(|Z| ≤ w) − quantile`` at ``w = |offset| + std·t``, given ``t`` and ``|offset|/std``."""
    return ndtr(standardised_root) - ndtr(-standardised_root - 2 * ratio) - quantile


def check_resolvable_quantile(quantile: Tensor) -> None:
    r"""Refuse quantiles outside ``(0, 1)`` and those too close to 0 or 1 for their dtype:
    the quantile of ``Z²`` needs the finite normal quantiles ``Φ⁻¹(q)`` and
    ``Φ⁻¹((1 + q)/2)``.

    Args:
        quantile: The probability levels, a tensor in the computation's dtype.

    Raises:
        ValueError: If a level lies outside ``(0, 1)`` or its normal quantiles are not
            finite in the dtype.
    """
    if ((quantile <= 0) | (quantile >= 1)).any():
        raise ValueError(f"quantile must lie in the open interval (0, 1), got {quantile}.")
    bounds = torch.stack([torch.special.ndtri(quantile), torch.special.ndtri((1 + quantile) / 2)])
    if not bounds.isfinite().all():
        raise ValueError(
            f"quantile {quantile} is too close to 0 or 1 to be resolved in {quantile.dtype}: "
            "its normal quantiles are infinite."
        )


def squared_gaussian_quantile(quantile: float | Tensor, offset: Tensor, std: Tensor) -> Tensor:
    r"""The ``quantile``-quantile of ``Z²`` for ``Z ~ N(offset, std²)``.

    Returns ``w²`` where ``w ≥ 0`` solves
    ``Φ((w − |offset|)/std) − Φ((−w − |offset|)/std) = quantile``, i.e.
    ``std² · F⁻¹_{1,λ}(quantile)``. There is no closed form: the root is found by
    bisection without gradient tracking in the standardised variable
    ``t = (w − |offset|)/std``, which is bracketed by
    ``[max(−|offset|/std, Φ⁻¹(quantile)), Φ⁻¹((1 + quantile)/2)]`` whatever ``λ``.
    One Newton step on the detached root then attaches the implicit-function
    gradient with respect to ``offset`` and ``std``.

    Args:
        quantile: The probability level, in ``(0, 1)``; a float or a tensor
            broadcastable with ``offset``.
        offset: Tensor of means of ``Z``.
        std: Tensor of positive standard deviations of ``Z``.

    Returns:
        The quantiles of ``Z²``, with the broadcast shape of ``offset`` and ``std``.
    """
    offset, std = torch.broadcast_tensors(offset, std)
    quantile = torch.as_tensor(quantile, dtype=offset.dtype, device=offset.device)
    check_resolvable_quantile(quantile)
    distance = offset.abs()
    ratio = distance / std
    with torch.no_grad():
        lower = torch.maximum(-ratio, torch.special.ndtri(quantile))
        upper = torch.special.ndtri((1 + quantile) / 2).expand_as(lower)
        for _ in range(QUANTILE_BISECTION_STEPS):
            midpoint = (lower + upper) / 2
            above = _excess_mass(midpoint, ratio, quantile) > 0
            upper = torch.where(above, midpoint, upper)
            lower = torch.where(above, lower, midpoint)
        root = (lower + upper) / 2
    slope = phi(root) + phi(-root - 2 * ratio)
    standardised_root = root - _excess_mass(root, ratio, quantile) / slope
    return (distance + std * standardised_root).square()


def _sankaran_parameters(df: float, noncentrality: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    r"""Exponent ``ℓ``, mean ``α`` and standard deviation ``ρ`` of Sankaran's approximation.

    With cumulants-like terms ``r_s = 2^{s−1}(s−1)!(K + sλ)``:
    ``ℓ = 1 − r₁r₃/(3r₂²)``, ``α = 1 + ℓ(ℓ−1)(r₂/(2r₁²) − (2−ℓ)(1−3ℓ)r₂²/(8r₁⁴))``,
    ``ρ = (ℓ√r₂/r₁)(1 − (1−ℓ)(1−3ℓ)r₂/(4r₁²))`` (the √r₂ corrects Eq. 16b as printed
    in Hoffer et al.).
    """
    r1 = df + noncentrality
    r2 = 2 * (df + 2 * noncentrality)
    r3 = 8 * (df + 3 * noncentrality)
    exponent = 1 - r1 * r3 / (3 * r2.square())
    spread = r2 / r1.square()
    mean = 1 + exponent * (exponent - 1) * (
        spread / 2 - (2 - exponent) * (1 - 3 * exponent) * spread.square() / 8
    )
    standard_deviation = (
        exponent * r2.sqrt() / r1 * (1 - (1 - exponent) * (1 - 3 * exponent) * spread / 4)
    )
    return exponent, mean, standard_deviation


def _sankaran_cdf_of_ratio(ratio: Tensor, df: float, noncentrality: Tensor) -> Tensor:
    r"""Sankaran's ``F_{K,λ}(x) ≈ Φ((z − α)/ρ)`` with ``z = ratio^ℓ`` and ``ratio = x/(K + λ)``."""
    exponent, mean, standard_deviation = _sankaran_parameters(df, noncentrality)
    positive = ratio > 0
    safe_ratio = torch.where(positive, ratio, torch.ones_like(ratio))
    probability = ndtr((safe_ratio.pow(exponent) - mean) / standard_deviation)
    return torch.where(positive, probability, torch.zeros_like(probability))


def sankaran_noncentral_chi2_cdf(x: Tensor, df: float, noncentrality: Tensor) -> Tensor:
    r"""Sankaran's normal approximation of the noncentral chi-square CDF ``F_{K,λ}(x)``.

    ``F_{K,λ}(x) ≈ Φ((z − α)/ρ)`` with ``z = (x/(K + λ))^ℓ`` (Eq. 17 of Hoffer et al.
    corrected: the printed ``Φ((x − α)/ρ)`` omits the transform).

    Args:
        x: Tensor of evaluation points (``x ≤ 0`` gives 0).
        df: The degrees of freedom ``K > 0``.
        noncentrality: Tensor of noncentralities ``λ ≥ 0``, broadcastable with ``x``.

    Returns:
        The approximate CDF values, with the broadcast shape of ``x`` and
        ``noncentrality``.
    """
    return _sankaran_cdf_of_ratio(x / (df + noncentrality), df, noncentrality)


def sankaran_squared_gaussian_cdf(threshold: Tensor, offset: Tensor, std: Tensor) -> Tensor:
    r"""Sankaran's approximation of ``P(Z² ≤ threshold)``, ``Z ~ N(offset, std²)``.

    Same arguments and shapes as :func:`squared_gaussian_cdf`.
    """
    noncentrality = (offset / std).square()
    return _sankaran_cdf_of_ratio(threshold / (std.square() + offset.square()), 1, noncentrality)


def sankaran_squared_gaussian_expected_improvement(
    threshold: Tensor, offset: Tensor, std: Tensor
) -> Tensor:
    r"""Eq. 13 of Hoffer et al. (sign corrected) with Sankaran's CDF approximations.

    ``E[(c − Z²)₊] ≈ c·F_{1,λ}(e) − std²·F_{3,λ}(e) − offset²·F_{5,λ}(e)`` with
    ``e = c / std²``. Not clamped: the approximation can be negative where the exact
    value is tiny. Same arguments and shapes as
    :func:`squared_gaussian_expected_improvement`.
    """
    variance, squared_offset = std.square(), offset.square()
    noncentrality = squared_offset / variance

    def cdf(df: float) -> Tensor:
        return _sankaran_cdf_of_ratio(
            threshold / (df * variance + squared_offset), df, noncentrality
        )

    improvement = threshold * cdf(1) - variance * cdf(3) - squared_offset * cdf(5)
    return torch.where(threshold > 0, improvement, torch.zeros_like(improvement))


def sankaran_squared_gaussian_quantile(
    quantile: float | Tensor, offset: Tensor, std: Tensor
) -> Tensor:
    r"""Sankaran's approximation of the ``quantile``-quantile of ``Z²``, ``Z ~ N(offset, std²)``.

    Inverts ``Φ((z − α)/ρ) = quantile``: ``Z²_q ≈ (std² + offset²)·max(α + ρΦ⁻¹(q), 0)^{1/ℓ}``.
    Same arguments and shapes as :func:`squared_gaussian_quantile`.
    """
    offset, std = torch.broadcast_tensors(offset, std)
    quantile = torch.as_tensor(quantile, dtype=offset.dtype, device=offset.device)
    check_resolvable_quantile(quantile)
    exponent, mean, spread = _sankaran_parameters(1, (offset / std).square())
    transformed = mean + spread * torch.special.ndtri(quantile)
    positive = transformed > 0
    safe = torch.where(positive, transformed, torch.ones_like(transformed))
    scaled = torch.where(positive, safe.pow(1 / exponent), torch.zeros_like(safe))
    return (std.square() + offset.square()) * scaled
