r"""Tabular dataset shifts of severity 0 (none) to 5, to select and test ensembles under
shift.

Zaidi et al. (2021, Section 4.3 and Appendix B.2) select ensembles on a shifted
validation set ``D_val^shift`` and evaluate them on a shifted test set
``D_test^shift``, built by corrupting each point with one corruption drawn at random
from a set, at a severity from 1 to 5 (Hendrycks and Dietterich's image corruptions);
crucially, the validation corruptions and the test corruptions are DISJOINT kinds, so
the selection never sees the shift it is tested on, and the training data are never
corrupted. This module is that protocol for regression inputs (an ``n x d`` matrix
``X``; the targets ``Y`` are never changed, only selected):

===================== ========== ===================================================
kind                  split      what it models
===================== ========== ===================================================
``feature_noise``     validation measurement noise on every feature
``quantisation``      validation features recorded on a coarse grid
``sensor_drift``      test       miscalibrated sensors: a gain and an offset per feature
``missing_features``  test       entries missing at random, imputed with the mean
``extreme_selection`` test       a covariate shift toward the extremes of a direction
===================== ========== ===================================================

:func:`shift_validation_set` and :func:`shift_test_set` corrupt a data set with the kinds
of their split (all of them by default; one kind drawn uniformly at random per row, as
the paper does) and refuse the kinds of the other split. For severity ``s`` in ``1, ...,
5``, row ``i`` and feature ``j``:

- ``feature_noise``: ``x'_ij = x_ij + 0.1 s sigma_j eps_ij`` with ``eps_ij ~ N(0, 1)``;
- ``quantisation``: ``x'_ij = mu_j + h_j round((x_ij - mu_j) / h_j)`` with grid step
  ``h_j = 0.25 s sigma_j``;
- ``sensor_drift``: ``x'_ij = x_ij + 0.1 s a_j (x_ij - mu_j) + 0.2 s b_j sigma_j`` with
  random signs ``a_j, b_j`` in ``{-1, +1}`` per feature (gain and offset errors);
- ``missing_features``: ``x'_ij = mu_j`` (mean imputation) with probability ``0.1 s``,
  else ``x_ij``;
- ``extreme_selection``: the ``ceil(n (1 - 0.15 s))`` rows of largest ``|z_i . u|`` are
  kept, with the standardised rows ``z_ij = (x_ij - mu_j) / sigma_j`` and a direction
  ``u`` drawn uniformly from the unit sphere.

Every shift is relative to each feature's location ``mu_j`` and scale ``sigma_j`` (mean
and standard deviation, with divisor ``r``) over ``r`` reference rows: the training
inputs, which are only read, or by default the corrupted set itself. So a shift commutes
with any per-feature affine map of positive scale (normalising the inputs before or after
shifting gives the same points), and a feature constant on the reference rows
(``sigma_j = 0``) is left as it is by the scale-relative corruptions. Severity 0 returns
copies of the data; severities 1 to 5 grow, and as every draw is the same whatever the
severity, one seed gives nested shifts: the same noise scaled up, a superset of missing
entries, a subset of selected rows. Randomness comes from ``generator`` alone (drawn on
its device, then moved to the data's, so a seed shifts alike on every device), and the
functions return new tensors: the data passed in are never modified.

Reference:
    Zaidi, S., Zela, A., Elsken, T., Holmes, C., Hutter, F., Teh, Y. W. (2021). Neural
    Ensemble Search for Uncertainty Estimation and Dataset Shift. NeurIPS.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from fractions import Fraction

import torch
from torch import Tensor

from botorch_nn_uq.checks import check_finite_tensor, is_integer

#: The highest severity; severity 0 is no shift.
MAX_SEVERITY = 5
#: The kinds of shift of a validation set (the selection's ``D_val^shift``).
VALIDATION_SHIFTS: tuple[str, ...] = ("feature_noise", "quantisation")
#: The kinds of shift of a test set (``D_test^shift``), disjoint from the validation ones.
TEST_SHIFTS: tuple[str, ...] = ("sensor_drift", "missing_features", "extreme_selection")
#: Per severity step: the noise's standard deviation, in feature standard deviations.
NOISE_PER_SEVERITY = 0.1
#: Per severity step: the quantisation grid's step, in feature standard deviations.
GRID_STEP_PER_SEVERITY = 0.25
#: Per severity step: a drifting sensor's relative gain error.
GAIN_ERROR_PER_SEVERITY = 0.1
#: Per severity step: a drifting sensor's offset, in feature standard deviations.
OFFSET_PER_SEVERITY = 0.2
#: Per severity step: the probability that an entry is missing.
MISSING_PER_SEVERITY = 0.1
#: Per severity step: the fraction of the rows that the extreme selection drops (exact, so
#: that the number of kept rows is not off by one through rounding).
DROPPED_PER_SEVERITY = Fraction(3, 20)


def check_severity(severity: object, name: str = "severity") -> None:
    r"""Raise a ``ValueError`` naming ``name`` unless ``severity`` is an integer from 0
    (no shift) to :data:`MAX_SEVERITY`."""
    if not is_integer(severity, 0, MAX_SEVERITY):
        raise ValueError(
            f"{name} must be an integer from 0 (no shift) to {MAX_SEVERITY}; got {severity!r}."
        )


def shift_validation_set(
    X: Tensor,
    Y: Tensor,
    severity: int,
    generator: torch.Generator,
    *,
    reference: Tensor | None = None,
    kinds: str | Sequence[str] = VALIDATION_SHIFTS,
) -> tuple[Tensor, Tensor]:
    r"""A shifted validation set ``D_val^shift``: each row of ``X`` corrupted by one of
    the validation ``kinds`` (:data:`VALIDATION_SHIFTS`), drawn uniformly per row.

    Args:
        X: ``n x d`` validation inputs (finite).
        Y: ``n x m`` validation targets (finite), returned unchanged.
        severity: ``0`` (no shift: copies of ``X`` and ``Y``) to :data:`MAX_SEVERITY`.
        generator: The source of every random draw.
        reference: ``r x d`` rows whose per-feature mean and standard deviation set the
            shifts' location and scale (typically the training inputs, which are only
            read); ``None``: ``X`` itself.
        kinds: The validation kind, or kinds to draw from; a test kind is refused,
            since validation and test shifts are disjoint.

    Returns:
        The shifted ``n x d`` inputs and a copy of the ``n x m`` targets.

    Example:
        >>> X, Y = torch.rand(50, 3), torch.rand(50, 1)
        >>> X_shift, Y_shift = shift_validation_set(X, Y, 5, torch.Generator().manual_seed(0))
    """
    return _shift(X, Y, severity, generator, reference, kinds, "validation")


def shift_test_set(
    X: Tensor,
    Y: Tensor,
    severity: int,
    generator: torch.Generator,
    *,
    reference: Tensor | None = None,
    kinds: str | Sequence[str] = TEST_SHIFTS,
) -> tuple[Tensor, Tensor]:
    r"""A shifted test set ``D_test^shift``: with ``"extreme_selection"`` among ``kinds``
    the rows toward the extremes of a random direction are kept, and each kept row is
    corrupted by one of the other test ``kinds`` (:data:`TEST_SHIFTS`), drawn uniformly
    per row.

    Args:
        X: ``n x d`` test inputs (finite).
        Y: ``n x m`` test targets (finite), returned unchanged but for the row selection.
        severity: ``0`` (no shift: copies of ``X`` and ``Y``) to :data:`MAX_SEVERITY`.
        generator: The source of every random draw.
        reference: ``r x d`` rows whose per-feature mean and standard deviation set the
            shifts' location and scale (typically the training inputs, which are only
            read); ``None``: ``X`` itself.
        kinds: The test kind, or kinds to apply; a validation kind is refused, since
            validation and test shifts are disjoint.

    Returns:
        The shifted ``n' x d`` inputs and the ``n' x m`` targets of the kept rows, in their
        original order (``n' = n`` without ``"extreme_selection"``).
    """
    return _shift(X, Y, severity, generator, reference, kinds, "test")


def _feature_noise(
    X: Tensor, severity: int, location: Tensor, scale: Tensor, generator: torch.Generator
) -> Tensor:
    r"""Measurement noise: ``x'_ij = x_ij + 0.1 s sigma_j eps_ij`` with ``eps_ij ~ N(0, 1)``
    (standard deviations of 0.1 to 0.5 ``sigma_j`` for ``s = 1, ..., 5``).

    Args:
        X: ``n x d`` inputs.
        severity: ``s`` in ``1, ..., 5``.
        location: The ``d`` feature means ``mu_j`` (unused: noise is centred).
        scale: The ``d`` feature standard deviations ``sigma_j``.
        generator: The source of ``eps``.

    Returns:
        The ``n x d`` noisy inputs.
    """
    noise = _draw(torch.randn, X, X.shape, generator)
    return X + NOISE_PER_SEVERITY * severity * scale * noise


def _quantisation(
    X: Tensor, severity: int, location: Tensor, scale: Tensor, generator: torch.Generator
) -> Tensor:
    r"""Coarse recording: ``x'_ij = mu_j + h_j round((x_ij - mu_j) / h_j)`` on a grid of
    step ``h_j = 0.25 s sigma_j`` through the mean (0.25 to 1.25 ``sigma_j``; ties round
    to the even grid point); a feature with ``sigma_j = 0`` is unchanged.

    Args:
        X: ``n x d`` inputs.
        severity: ``s`` in ``1, ..., 5``.
        location: The ``d`` feature means ``mu_j``.
        scale: The ``d`` feature standard deviations ``sigma_j``.
        generator: Unused: the grid is deterministic.

    Returns:
        The ``n x d`` quantised inputs.
    """
    step = GRID_STEP_PER_SEVERITY * severity * scale
    # A constant feature has no scale to quantise on; a unit step keeps its division finite.
    usable_step = torch.where(step > 0, step, torch.ones_like(step))
    grid = location + usable_step * torch.round((X - location) / usable_step)
    return torch.where(step > 0, grid, X)


def _sensor_drift(
    X: Tensor, severity: int, location: Tensor, scale: Tensor, generator: torch.Generator
) -> Tensor:
    r"""Miscalibrated sensors: ``x'_ij = x_ij + 0.1 s a_j (x_ij - mu_j) + 0.2 s b_j
    sigma_j`` with random signs ``a_j, b_j`` in ``{-1, +1}`` per feature, shared by all
    rows (gains off by 10 to 50 %, offsets of 0.2 to 1 ``sigma_j``).

    Args:
        X: ``n x d`` inputs.
        severity: ``s`` in ``1, ..., 5``.
        location: The ``d`` feature means ``mu_j``.
        scale: The ``d`` feature standard deviations ``sigma_j``.
        generator: The source of the signs.

    Returns:
        The ``n x d`` drifted inputs.
    """
    signs = 2 * _draw(torch.randint, X, (2, X.shape[-1]), generator, 0, 2) - 1
    gain_error, offset = signs
    return (
        X
        + GAIN_ERROR_PER_SEVERITY * severity * gain_error * (X - location)
        + OFFSET_PER_SEVERITY * severity * offset * scale
    )


def _missing_features(
    X: Tensor, severity: int, location: Tensor, scale: Tensor, generator: torch.Generator
) -> Tensor:
    r"""Mean imputation of entries missing at random: ``x'_ij = mu_j`` if ``u_ij < 0.1 s``,
    else ``x_ij``, with ``u_ij ~ U(0, 1)`` (10 to 50 % of the entries missing).

    Args:
        X: ``n x d`` inputs.
        severity: ``s`` in ``1, ..., 5``.
        location: The ``d`` feature means ``mu_j``, the imputed values.
        scale: The ``d`` feature standard deviations (unused).
        generator: The source of ``u``.

    Returns:
        The ``n x d`` imputed inputs.
    """
    missing = _draw(torch.rand, X, X.shape, generator) < MISSING_PER_SEVERITY * severity
    return torch.where(missing, location.expand_as(X), X)


def _extreme_rows(
    X: Tensor, severity: int, location: Tensor, scale: Tensor, generator: torch.Generator
) -> Tensor:
    r"""Covariate selection toward the extremes of a random direction: with the
    standardised rows ``z_ij = (x_ij - mu_j) / sigma_j`` (0 where ``sigma_j = 0``) and a
    direction ``u = g / ||g||``, ``g ~ N(0, I_d)``, the ``ceil(n (1 - 0.15 s))`` rows of
    largest ``|z_i . u|`` are kept (85 % down to 25 % of the rows; ties keep the earlier
    row).

    Args:
        X: ``n x d`` inputs.
        severity: ``s`` in ``1, ..., 5``.
        location: The ``d`` feature means ``mu_j``.
        scale: The ``d`` feature standard deviations ``sigma_j``.
        generator: The source of ``g``.

    Returns:
        The indices of the kept rows, ascending (a ``n'``-dim long tensor).
    """
    direction = _draw(torch.randn, X, (X.shape[-1],), generator)
    direction = direction / direction.norm()
    standardised = torch.where(scale > 0, (X - location) / scale, torch.zeros_like(X))
    extremeness = (standardised @ direction).abs()
    num_kept = math.ceil(X.shape[0] * (1 - DROPPED_PER_SEVERITY * severity))
    order = torch.argsort(extremeness, descending=True, stable=True)
    return order[:num_kept].sort().values


#: A corruption of every row: ``(X, severity, location, scale, generator) -> X'``.
_RowShift = Callable[[Tensor, int, Tensor, Tensor, torch.Generator], Tensor]
#: The kinds that corrupt rows, in the order their draws are made.
_ROW_SHIFTS: dict[str, _RowShift] = {
    "feature_noise": _feature_noise,
    "quantisation": _quantisation,
    "sensor_drift": _sensor_drift,
    "missing_features": _missing_features,
}


def _shift(
    X: Tensor,
    Y: Tensor,
    severity: int,
    generator: torch.Generator,
    reference: Tensor | None,
    kinds: str | Sequence[str],
    split: str,
) -> tuple[Tensor, Tensor]:
    r"""Check the arguments, then corrupt every row with one row kind of ``kinds`` (drawn
    uniformly per row) and keep the extreme rows if ``"extreme_selection"`` is asked for.

    The draws are made in a fixed order, whatever the severity: the row's kind (with two
    or more row kinds), each row kind's draws in the order of ``_ROW_SHIFTS``, then the
    selection's direction.
    """
    allowed = VALIDATION_SHIFTS if split == "validation" else TEST_SHIFTS
    kinds = _check_kinds(kinds, allowed, split)
    X, Y, reference = _check_data(X, Y, reference)
    check_severity(severity)
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator; got {generator!r}.")
    if severity == 0:
        return X.clone(), Y.clone()
    location = reference.mean(dim=0)
    scale = reference.std(dim=0, correction=0)
    row_kinds = [kind for kind in _ROW_SHIFTS if kind in kinds]
    shifted = X.clone()
    if row_kinds:
        choice = torch.zeros(X.shape[0], dtype=torch.long, device=X.device)
        if len(row_kinds) > 1:
            choice = _draw(torch.randint, X, (X.shape[0],), generator, 0, len(row_kinds))
        corrupted = torch.stack(
            [_ROW_SHIFTS[kind](X, severity, location, scale, generator) for kind in row_kinds]
        )
        shifted = corrupted[choice, torch.arange(X.shape[0], device=X.device)]
    if "extreme_selection" not in kinds:
        return shifted, Y.clone()
    kept = _extreme_rows(X, severity, location, scale, generator)
    return shifted[kept], Y[kept]


def _check_kinds(kinds: str | Sequence[str], allowed: tuple[str, ...], split: str) -> set[str]:
    r"""The set of ``kinds`` (one kind or several) after checking that each is one of
    ``allowed``, the kinds of ``split``, with an error that tells an unknown kind from a
    kind of the other split."""
    if isinstance(kinds, str):
        kinds = (kinds,)
    kinds = list(kinds)
    if not kinds:
        raise ValueError(f"kinds must name at least one {split} shift of {allowed}.")
    for kind in kinds:
        if kind in allowed:
            continue
        if kind in VALIDATION_SHIFTS + TEST_SHIFTS:
            other = "test" if split == "validation" else "validation"
            raise ValueError(
                f"{kind!r} is a {other} shift: validation and test shifts are disjoint "
                f"kinds, so a {split} set takes only {allowed}."
            )
        raise ValueError(
            f"Unknown shift kind {kind!r}; validation kinds: {VALIDATION_SHIFTS}, test "
            f"kinds: {TEST_SHIFTS}."
        )
    return set(kinds)


def _check_data(X: Tensor, Y: Tensor, reference: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    r"""``X``, ``Y`` and the reference rows (``X`` by default, moved to ``X``'s dtype and
    device) after checking their shapes and that they are finite."""
    for name, value in (("X", X), ("Y", Y), ("reference", reference)):
        if value is None:
            continue
        if not isinstance(value, Tensor) or value.ndim != 2 or not value.is_floating_point():
            described = (
                f"shape {tuple(value.shape)}, dtype {value.dtype}"
                if isinstance(value, Tensor)
                else repr(value)
            )
            raise ValueError(f"{name} must be a 2-dim floating-point tensor; got {described}.")
        check_finite_tensor(name, value)
    if X.shape[0] < 1 or X.shape[1] < 1:
        raise ValueError(f"X must have at least one row and one feature; got {tuple(X.shape)}.")
    if Y.shape[0] != X.shape[0]:
        raise ValueError(f"Y must have one row per row of X ({X.shape[0]}); got {tuple(Y.shape)}.")
    if reference is None:
        return X, Y, X
    if reference.shape[0] < 1 or reference.shape[1] != X.shape[1]:
        raise ValueError(
            f"reference must be r x d with r >= 1 and d = {X.shape[1]} features, as X; got "
            f"{tuple(reference.shape)}."
        )
    return X, Y, reference.to(X)


def _draw(
    sample: Callable[..., Tensor],
    like: Tensor,
    shape: Sequence[int],
    generator: torch.Generator,
    *bounds: int,
) -> Tensor:
    r"""``sample(*bounds, shape)`` drawn from ``generator`` on its device (floating-point
    draws in double precision), then moved to ``like``'s device (and, floating-point, to
    its dtype), so a seed draws alike whatever device and precision hold the data."""
    floating = sample is not torch.randint
    options = {"dtype": torch.float64} if floating else {}
    values = sample(*bounds, tuple(shape), generator=generator, device=generator.device, **options)
    return values.to(like) if floating else values.to(like.device)
