"""Calibration of Gaussian-marginal predictive uncertainty: ``N(mu, (c * sigma)^2)``.

Relative uncertainty estimates such as NOMU's ``sigma_hat`` need a calibration constant
``c`` (Heiss et al., 2022, App. B.2.1 and B.3.2). This module computes it for any BoTorch
model whose posterior has a ``mean`` and a ``variance``:

- :func:`nll_calibration_factor`: the ``c`` minimising the Gaussian negative
  log-likelihood of validation data (closed form ``c^2 = mean((mu - y)^2 / sigma^2)``).
- :func:`mean_width_calibration_factor`: the ``c`` giving a target mean width
  ``mean(2 c sigma)`` of the uncertainty bounds over the search box ("MW scaling").
- :func:`optimize_acqf_with_dynamic_calibration`: "dynamic c" for a BO step: double
  ``c`` while the acquisition's maximiser is within a distance ``delta`` of an observed
  point (for models with a settable calibration constant, :class:`CalibratedModel`).
- :func:`dynamic_calibration_threshold`: the exponentially decaying ``delta``.

Every factor is relative to the model's current posterior: multiply the model's
calibration constant by it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol, runtime_checkable

import torch
from botorch.acquisition import AcquisitionFunction
from botorch.models.model import Model
from botorch.optim import optimize_acqf
from scipy.optimize import minimize_scalar
from torch import Tensor

from botorch_nn_uq.checks import POSITIVE, check_finite_tensor

__all__ = [
    "CalibratedModel",
    "DynamicCalibrationResult",
    "dynamic_calibration_threshold",
    "mean_width",
    "mean_width_calibration_factor",
    "nll_calibration_factor",
    "optimize_acqf_with_dynamic_calibration",
]

#: The number of uniform points of the box used by MW scaling (App. B.3.2).
MEAN_WIDTH_POINTS = 20_000


@runtime_checkable
class CalibratedModel(Protocol):
    r"""A model whose posterior standard deviation is multiplied by a settable constant."""

    calibration_constant: Tensor

    def set_calibration_constant(self, value: float | Tensor) -> None:
        r"""Set the constant (a positive scalar or one value per output)."""


def _latent_and_noise_variance(
    model: Model, X: Tensor, observation_noise: bool
) -> tuple[Tensor, Tensor, Tensor]:
    with torch.no_grad():
        latent = model.posterior(X.unsqueeze(-2))
        mean, variance = latent.mean.squeeze(-2), latent.variance.squeeze(-2)
        noise = torch.zeros_like(variance)
        if observation_noise:
            noisy = model.posterior(X.unsqueeze(-2), observation_noise=True)
            noise = (noisy.variance.squeeze(-2) - variance).clamp_min(0.0)
    return mean, variance, noise


def nll_calibration_factor(
    model: Model, X: Tensor, Y: Tensor, observation_noise: bool = False
) -> Tensor:
    r"""The factor ``s`` of the posterior standard deviation that minimises the Gaussian
    negative log-likelihood of ``(X, Y)``.

    Without observation noise, the NLL of ``N(mu, s^2 sigma^2)`` is minimised in closed
    form by ``s^2 = mean_i((mu_i - y_i)^2 / sigma_i^2)``. With ``observation_noise``, the
    predictive variance is ``s^2 sigma^2 + sigma_n^2`` (``sigma_n^2`` the model's noise,
    which is not scaled) and ``s`` is found by a bounded 1-d search over ``log s``.

    Args:
        model: A fitted BoTorch model with ``m`` outputs.
        X: An ``n x d`` tensor of validation inputs (original units).
        Y: An ``n x m`` tensor of validation targets (original units).
        observation_noise: Include the model's observation noise in the likelihood.

    Returns:
        A tensor of ``m`` positive factors (one per output).

    Example:
        >>> factor = nll_calibration_factor(model, X_val, Y_val)
        >>> model.set_calibration_constant(model.calibration_constant * factor)
    """
    if X.ndim != 2 or Y.ndim != 2 or X.shape[0] != Y.shape[0] or X.shape[0] == 0:
        raise ValueError(
            f"X and Y must be `n x d` and `n x m` tensors with the same n >= 1; got "
            f"{tuple(X.shape)} and {tuple(Y.shape)}."
        )
    # A NaN target would turn the factor, and so the calibration constant, into NaN.
    check_finite_tensor("Y", Y)
    mean, variance, noise = _latent_and_noise_variance(model, X, observation_noise)
    if mean.shape != Y.shape:
        raise ValueError(f"Y has shape {tuple(Y.shape)}; the model predicts {tuple(mean.shape)}.")
    squared_residual = (mean - Y).square()
    if not observation_noise:
        return (squared_residual / variance).mean(dim=0).sqrt().clamp_min(1e-12)
    factors = []
    for output in range(Y.shape[-1]):
        residual, latent, aleatoric = (
            t[:, output].double() for t in (squared_residual, variance, noise)
        )

        def nll(log_factor: float, residual=residual, latent=latent, aleatoric=aleatoric) -> float:
            total = math.exp(2.0 * log_factor) * latent + aleatoric
            return float((total.log() + residual / total).mean())

        result = minimize_scalar(nll, bounds=(-20.0, 20.0), method="bounded")
        factors.append(math.exp(result.x))
    return torch.tensor(factors, dtype=Y.dtype, device=Y.device)


def uniform_points(bounds: Tensor, num_points: int, seed: int = 0) -> Tensor:
    r"""``num_points x d`` points drawn uniformly from the box ``bounds`` (``2 x d``) with
    a private generator seeded by ``seed``, drawn on the CPU (the same points on every
    device) and moved to ``bounds``' device."""
    generator = torch.Generator().manual_seed(seed)
    unit = torch.rand(num_points, bounds.shape[-1], generator=generator, dtype=bounds.dtype)
    return bounds[0] + (bounds[1] - bounds[0]) * unit.to(bounds.device)


def mean_width(
    model: Model, bounds: Tensor, num_points: int = MEAN_WIDTH_POINTS, seed: int = 0
) -> Tensor:
    r"""The mean width ``mean(2 sigma(x))`` of the ``mu +- sigma`` bounds over uniform
    points of the box (the MW of App. B.2.1 at ``c = 1`` on top of the model's own).

    Args:
        model: A fitted BoTorch model with ``m`` outputs.
        bounds: A ``2 x d`` tensor, the box in original input units.
        num_points: The number of uniform points.
        seed: Seed of the points.

    Returns:
        A tensor of ``m`` mean widths, in the model's outcome units.
    """
    points = uniform_points(bounds, num_points, seed)
    with torch.no_grad():
        widths = [
            2.0 * model.posterior(chunk.unsqueeze(-2)).variance.sqrt().squeeze(-2)
            for chunk in points.split(4096)
        ]
    return torch.cat(widths).mean(dim=0)


def mean_width_calibration_factor(
    model: Model,
    bounds: Tensor,
    target_width: float | Tensor,
    num_points: int = MEAN_WIDTH_POINTS,
    seed: int = 0,
) -> Tensor:
    r"""The factor ``s`` of the posterior standard deviation for which the mean width
    ``mean(2 s sigma(x))`` over ``num_points`` uniform points of the box equals
    ``target_width`` ("MW scaling", App. B.3.2).

    The paper's targets are 0.05 and 0.5 for outputs scaled to ``[-1, 1]``, i.e. 1/40
    and 1/4 of the output range; in standardised outcome units (which
    ``Standardize`` produces) about 0.1 and 1.0.

    Args:
        model: A fitted BoTorch model with ``m`` outputs.
        bounds: A ``2 x d`` tensor, the box in original input units.
        target_width: The target mean width in the model's outcome units (a scalar or
            ``m`` values).
        num_points: The number of uniform points.
        seed: Seed of the points.

    Returns:
        A tensor of ``m`` positive factors.
    """
    target = check_finite_tensor(
        "target_width", target_width, interval=POSITIVE, dtype=bounds.dtype
    ).to(bounds.device)
    return target / mean_width(model, bounds, num_points, seed).clamp_min(1e-300)


def dynamic_calibration_threshold(
    step: int, num_steps: int, start: float = 1 / 32, end: float = 0.005
) -> float:
    r"""The distance threshold ``delta`` of dynamic c at BO step ``step`` (0-based) of
    ``num_steps``: exponential decay from ``start`` to ``end`` (App. B.3.2, Eq. 56).

    Distances are measured in the unit cube of the search box (BoTorch's coordinates);
    the defaults are the paper's ``1/16`` and ``0.01`` for the ``[-1, 1]^d`` scaling,
    halved.
    """
    if num_steps < 1 or not 0 <= step < num_steps:
        raise ValueError(f"Need 0 <= step < num_steps; got step={step}, num_steps={num_steps}.")
    if not start > 0 or not end > 0:
        raise ValueError(f"start and end must be positive; got {start} and {end}.")
    fraction = step / (num_steps - 1) if num_steps > 1 else 0.0
    return start * (end / start) ** fraction


class DynamicCalibrationResult(NamedTuple):
    r"""The outcome of :func:`optimize_acqf_with_dynamic_calibration`.

    Attributes:
        candidate: The ``1 x d`` point to evaluate.
        value: The acquisition value at ``candidate`` (under the final constant).
        calibration_constant: The calibration constant that produced ``candidate``.
        doublings: How often the constant was doubled.
        accepted: Whether ``candidate`` is farther than ``min_distance`` from every
            observed point (``False``: the doublings ran out and it is evaluated anyway).
    """

    candidate: Tensor
    value: Tensor
    calibration_constant: Tensor
    doublings: int
    accepted: bool


def optimize_acqf_with_dynamic_calibration(
    model: CalibratedModel,
    make_acquisition: Callable[[Model], AcquisitionFunction],
    bounds: Tensor,
    train_X: Tensor,
    min_distance: float,
    max_doublings: int = 15,
    **optimize_acqf_kwargs: Any,
) -> DynamicCalibrationResult:
    r"""Maximise an acquisition with "dynamic c" (App. B.3.2).

    The acquisition built by ``make_acquisition(model)`` is maximised with
    ``optimize_acqf`` (q = 1). While the maximiser lies within ``min_distance`` of an
    observed point (Euclidean distance in the unit cube of ``bounds``), the model's
    calibration constant is doubled and the acquisition rebuilt and re-optimised, at
    most ``max_doublings`` times; after that the last maximiser is returned anyway. The
    model's constant is restored afterwards, so a fixed ``c`` carries over to the next
    BO step.

    Args:
        model: A model with a settable calibration constant (e.g. ``NOMU``).
        make_acquisition: Builds the acquisition from the model, e.g.
            ``lambda model: UpperConfidenceBound(model, beta=1.0)``.
        bounds: A ``2 x d`` tensor, the search box.
        train_X: ``n x d`` observed inputs.
        min_distance: The threshold ``delta`` (see :func:`dynamic_calibration_threshold`).
        max_doublings: The most doublings of the constant.
        **optimize_acqf_kwargs: Passed to ``optimize_acqf`` (``num_restarts``,
            ``raw_samples``, ``options``, ...).

    Returns:
        A :class:`DynamicCalibrationResult`.
    """
    if max_doublings < 0 or not min_distance >= 0:
        raise ValueError(
            f"max_doublings and min_distance must be non-negative; got {max_doublings} and "
            f"{min_distance}."
        )
    original = model.calibration_constant.clone()
    scale = bounds[1] - bounds[0]
    try:
        for doublings in range(max_doublings + 1):
            model.set_calibration_constant(original * 2.0**doublings)
            candidate, value = optimize_acqf(
                make_acquisition(model), bounds, q=1, **optimize_acqf_kwargs
            )
            distance = ((candidate - train_X) / scale).norm(dim=-1).min()
            accepted = bool(distance > min_distance)
            if accepted:
                break
        constant = model.calibration_constant.clone()
    finally:
        model.set_calibration_constant(original)
    return DynamicCalibrationResult(
        candidate=candidate.detach(),
        value=value.detach(),
        calibration_constant=constant,
        doublings=doublings,
        accepted=accepted,
    )
