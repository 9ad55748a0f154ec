r"""Argument checks shared by the package's public entry points.

Every check raises a ``ValueError`` that names the offending argument, so a wrong
setting fails where it is given, before any work, instead of deep inside a fit (``'<'
not supported between NoneType and int``) or as a silently wrong answer (``True``
training one epoch, a NaN patience stopping after one epoch, a NaN incumbent giving an
all-zero acquisition).

The ``check_*_fields`` functions check attributes of an object, typically the fields of
a frozen hyperparameter dataclass in its ``__post_init__``; the others check one value.
This module imports nothing from the package, so every module can use it.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor


@dataclass(frozen=True)
class Interval:
    r"""An interval of the real line that a number must lie in.

    Args:
        lower: The lower end (``-inf`` for none).
        upper: The upper end (``inf`` for none).
        lower_closed: Whether ``lower`` itself is allowed.
        upper_closed: Whether ``upper`` itself is allowed.
    """

    lower: float = -math.inf
    upper: float = math.inf
    lower_closed: bool = True
    upper_closed: bool = True

    def contains(self, value: float) -> bool:
        r"""Whether ``value`` lies in the interval (never for NaN)."""
        above = value >= self.lower if self.lower_closed else value > self.lower
        below = value <= self.upper if self.upper_closed else value < self.upper
        return bool(above and below)

    def __str__(self) -> str:
        r"""What a number in the interval is, for error messages ("must be ...")."""
        if self.lower == -math.inf and self.upper == math.inf:
            return "a finite real number"
        if self.lower == 0 and self.upper == math.inf:
            return "non-negative and finite" if self.lower_closed else "positive and finite"
        # A half-unbounded interval in words: "[1, inf)" would suggest that infinity is
        # accepted, while every check also demands a finite number.
        if self.upper == math.inf:
            bound = "of at least" if self.lower_closed else "above"
            return f"a finite real number {bound} {self.lower:g}"
        if self.lower == -math.inf:
            bound = "of at most" if self.upper_closed else "below"
            return f"a finite real number {bound} {self.upper:g}"
        left = "[" if self.lower_closed else "("
        right = "]" if self.upper_closed else ")"
        return f"a real number in {left}{self.lower:g}, {self.upper:g}{right}"


#: Every real number.
REALS = Interval()
#: The positive reals ``(0, inf)``.
POSITIVE = Interval(0.0, lower_closed=False)
#: The non-negative reals ``[0, inf)``.
NON_NEGATIVE = Interval(0.0)
#: The open unit interval ``(0, 1)``.
OPEN_UNIT_INTERVAL = Interval(0.0, 1.0, lower_closed=False, upper_closed=False)


def is_integer(value: Any, minimum: float = -math.inf, maximum: float = math.inf) -> bool:
    r"""Whether ``value`` is an integer (Python or NumPy) and not a boolean (``True`` as
    a count is a bug, not a 1), with ``minimum <= value <= maximum``.

    Args:
        value: The value to check.
        minimum: The smallest value allowed (``-inf`` for no limit).
        maximum: The largest value allowed (``inf`` for no limit).
    """
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        return False
    # A NumPy integer compares to a NumPy boolean.
    return bool(minimum <= value <= maximum)


def is_int_in_range(value: Any, minimum: int = 0, maximum: float = math.inf) -> bool:
    r"""Whether ``value`` is a built-in ``int`` (not a boolean) with
    ``minimum <= value <= maximum``; by default a count (``0`` or more).

    Stricter than :func:`is_integer`: a NumPy integer is refused, since the counts, sizes
    and seeds checked with it are written to JSON (run states, configurations), which
    cannot store one.

    Args:
        value: The value to check.
        minimum: The smallest value allowed.
        maximum: The largest value allowed (``inf`` for no limit).
    """
    return isinstance(value, int) and is_integer(value, minimum, maximum)


def is_real_number(value: Any) -> bool:
    r"""Whether ``value`` is a real number (Python or NumPy) and not a boolean."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _is_integer_dtype(dtype: torch.dtype) -> bool:
    return not dtype.is_floating_point and not dtype.is_complex and dtype != torch.bool


def _or_none(optional: bool) -> str:
    return ", or None" if optional else ""


def check_integer(name: str, value: Any, minimum: int = 1, optional: bool = False) -> None:
    r"""Raise a ``ValueError`` naming ``name`` unless ``value`` is an integer of at least
    ``minimum`` (or ``None`` if ``optional``)."""
    if optional and value is None:
        return
    if not is_integer(value, minimum):
        requirement = "a positive integer" if minimum == 1 else f"an integer of at least {minimum}"
        raise ValueError(f"{name} must be {requirement}{_or_none(optional)}; got {value!r}.")


def check_real_number(
    name: str, value: Any, interval: Interval = REALS, optional: bool = False
) -> None:
    r"""Raise a ``ValueError`` naming ``name`` unless ``value`` is a finite real number
    in ``interval`` (or ``None`` if ``optional``)."""
    if optional and value is None:
        return
    if not (is_real_number(value) and math.isfinite(value) and interval.contains(value)):
        raise ValueError(f"{name} must be {interval}{_or_none(optional)}; got {value!r}.")


def check_boolean(name: str, value: Any) -> None:
    r"""Raise a ``ValueError`` naming ``name`` unless ``value`` is ``True`` or ``False``
    (truthiness would turn ``"no"`` into ``True``)."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False; got {value!r}.")


def check_choice(name: str, value: Any, choices: Collection[str]) -> None:
    r"""Raise a ``ValueError`` naming ``name`` unless ``value`` is one of ``choices``."""
    if not (isinstance(value, str) and value in choices):
        raise ValueError(f"Unknown {name} {value!r}; valid: {', '.join(sorted(choices))}.")


def check_integer_fields(
    owner: object, *names: str, minimum: int = 1, optional: bool = False
) -> None:
    r""":func:`check_integer` on the attributes ``names`` of ``owner``."""
    for name in names:
        check_integer(name, getattr(owner, name), minimum=minimum, optional=optional)


def check_real_fields(
    owner: object, *names: str, interval: Interval = REALS, optional: bool = False
) -> None:
    r""":func:`check_real_number` on the attributes ``names`` of ``owner``."""
    for name in names:
        check_real_number(name, getattr(owner, name), interval=interval, optional=optional)


def check_boolean_fields(owner: object, *names: str) -> None:
    r""":func:`check_boolean` on the attributes ``names`` of ``owner``."""
    for name in names:
        check_boolean(name, getattr(owner, name))


def check_widths(owner: object, *names: str) -> None:
    r"""Store the attributes ``names`` of the (frozen dataclass) ``owner`` as tuples and
    raise a ``ValueError`` unless each is a non-empty sequence of positive integers."""
    for name in names:
        value = getattr(owner, name)
        if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
            raise ValueError(
                f"{name} must be a non-empty sequence of positive integers; got {value!r}."
            )
        widths = tuple(value)
        object.__setattr__(owner, name, widths)
        if not widths or not all(is_integer(width, minimum=1) for width in widths):
            raise ValueError(
                f"{name} must be a non-empty sequence of positive integers; got {widths}."
            )


def check_range(name: str, value: Any, interval: Interval = REALS) -> None:
    r"""Raise a ``ValueError`` naming ``name`` unless ``value`` is a pair ``(low, high)``
    of finite real numbers in ``interval`` with ``low <= high``."""
    pair = tuple(value) if isinstance(value, (tuple, list)) else ()
    if not (
        len(pair) == 2
        and all(
            is_real_number(end) and math.isfinite(end) and interval.contains(end) for end in pair
        )
        and pair[0] <= pair[1]
    ):
        raise ValueError(
            f"{name} must be a pair (low, high) with low <= high, each {interval}; got {value!r}."
        )


def check_seed(name: str, value: Any) -> None:
    r"""Raise a ``ValueError`` naming ``name`` unless ``value`` is an integer seed that
    ``torch.manual_seed`` accepts, in ``[0, 2**64)``."""
    if not is_integer(value, 0, 2**64 - 1):
        raise ValueError(f"{name} must be an integer in [0, 2**64); got {value!r}.")


def check_device(name: str, value: Any) -> torch.device:
    r"""``value`` as a ``torch.device`` that this process can compute on, or a
    ``ValueError`` naming ``name``.

    Args:
        name: The argument's name, for the error message.
        value: A device or its name (``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"``).

    Returns:
        The device.

    Raises:
        ValueError: If ``value`` names no device, names the ``meta`` device (which holds
            no values to compute on), or names a backend that is not available here
            (``"cuda"`` without a CUDA device, ``"cuda:3"`` with three).
    """
    if not isinstance(value, (str, torch.device)):
        raise ValueError(f"{name} must be a device name such as 'cpu' or 'cuda'; got {value!r}.")
    try:
        device = torch.device(value)
    except RuntimeError:
        raise ValueError(
            f"{name} must be a device name such as 'cpu' or 'cuda'; got {value!r}."
        ) from None
    if device.type == "cpu":
        return device
    if device.type == "meta":
        raise ValueError(f"{name} must be a device that holds values; got {value!r}.")
    backend = getattr(torch, device.type, None)
    if device.type == "mps":
        backend = torch.backends.mps
    if backend is None or not backend.is_available():
        raise ValueError(
            f"{name} must be a device available on this machine; got {str(value)!r} (torch "
            f"has no {device.type} device here)."
        )
    count = getattr(backend, "device_count", None)
    if device.index is not None and count is not None and device.index >= count():
        raise ValueError(
            f"{name} must be a device available on this machine; got {str(value)!r} (torch "
            f"sees {count()} {device.type} device(s))."
        )
    return device


def check_finite_tensor(
    name: str, value: Any, interval: Interval = REALS, dtype: torch.dtype | None = None
) -> Tensor:
    r"""``value`` as a tensor (``torch.as_tensor``), after checking that it is
    real-valued, finite and in ``interval`` everywhere.

    Args:
        name: The argument's name, for the error message.
        value: A number or a tensor.
        interval: The interval every entry must lie in.
        dtype: The dtype of the tensor; ``None`` keeps that of ``value``. (Converting
            the value directly keeps a Python float's precision, which a float32
            tensor would round.)

    Returns:
        The tensor.

    Raises:
        ValueError: If ``value`` is not real-valued (booleans included) or has an entry
            that is NaN, infinite or outside ``interval``.
    """
    try:
        tensor = torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError) as error:
        raise ValueError(f"{name} must be a number or a tensor; got {value!r}.") from error
    if not (tensor.is_floating_point() or _is_integer_dtype(tensor.dtype)):
        raise ValueError(f"{name} must be real-valued; got {value!r} of dtype {tensor.dtype}.")
    if dtype is not None:
        tensor = torch.as_tensor(value, dtype=dtype)
    if not tensor.isfinite().all():
        described = repr(tensor.item()) if tensor.numel() == 1 else "NaN or infinite entries"
        raise ValueError(f"{name} must be finite; got {described}.")
    inside = tensor >= interval.lower if interval.lower_closed else tensor > interval.lower
    inside &= tensor <= interval.upper if interval.upper_closed else tensor < interval.upper
    if not inside.all():
        described = (
            repr(tensor.item())
            if tensor.numel() == 1
            else f"entries from {tensor.min().item()} to {tensor.max().item()}"
        )
        raise ValueError(f"{name} must be {interval}; got {described}.")
    return tensor


def check_points_in_box(owner: str, name: str, points: Tensor, bounds: Tensor) -> None:
    r"""Raise a ``ValueError`` naming ``owner`` and ``name`` unless ``points`` are points
    of the box ``bounds`` (its faces included).

    Args:
        owner: What the points are given to (a problem's name), for the message.
        name: The argument's name, for the message.
        points: A ``batch_shape x d`` tensor of points.
        bounds: The ``2 x d`` tensor of lower (row 0) and upper (row 1) bounds; it is
            compared in the dtype and on the device of ``points``.

    Raises:
        ValueError: If the last dimension of ``points`` is not ``d`` or a point lies
            outside the box.
    """
    dim = bounds.shape[-1]
    if points.shape[-1] != dim:
        raise ValueError(
            f"{owner}: expected {name} of shape batch_shape x {dim}, got {tuple(points.shape)}."
        )
    lower, upper = bounds.to(points)
    if not (points.ge(lower) & points.le(upper)).all():
        raise ValueError(f"{owner}: {name} lies outside the bounds of the problem.")


def broadcasts_to(shape: torch.Size, target_shape: torch.Size) -> bool:
    r"""Whether a tensor of shape ``shape`` broadcasts to ``target_shape`` without
    enlarging it (so ``target_shape`` is also the shape of the broadcast result)."""
    try:
        return torch.broadcast_shapes(shape, target_shape) == target_shape
    except RuntimeError:
        return False


def check_batch_broadcastable(name: str, tensor: Tensor, batch_shape: torch.Size) -> Tensor:
    r"""``tensor`` as a scalar if it has one entry, else unchanged, after checking that
    it broadcasts to ``batch_shape`` without enlarging it (a model's batch shape, for a
    per-batch incumbent as BoTorch's ``best_f``).

    Raises:
        ValueError: If ``tensor`` has several entries and does not broadcast to
            ``batch_shape``.
    """
    if tensor.numel() == 1:
        return tensor.reshape(())
    if not broadcasts_to(tensor.shape, batch_shape):
        raise ValueError(
            f"{name} must be a scalar or broadcast to the model's batch shape "
            f"{tuple(batch_shape)}; got shape {tuple(tensor.shape)}."
        )
    return tensor
