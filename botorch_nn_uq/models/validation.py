"""Input checks shared by every model: clear errors instead of silent wrong answers."""

from __future__ import annotations

from torch import Tensor


def validate_training_data(train_X: Tensor, train_Y: Tensor, min_points: int = 2) -> None:
    r"""Check training data for a neural surrogate.

    Args:
        train_X: An ``n x d`` tensor of training inputs.
        train_Y: An ``n x m`` tensor of training targets.
        min_points: The fewest training points the model accepts.

    Raises:
        TypeError: If either argument is not a floating-point tensor.
        ValueError: On wrong dimensionality, mismatched ``n``, empty tensors, fewer
            than ``min_points`` points, NaN/inf entries, or mismatched dtypes/devices.
    """
    for name, tensor in (("train_X", train_X), ("train_Y", train_Y)):
        if not isinstance(tensor, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor; got {type(tensor).__name__}.")
        if not tensor.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor; got dtype {tensor.dtype}.")
    if train_X.ndim != 2:
        raise ValueError(
            f"train_X must be an `n x d` tensor; got shape {tuple(train_X.shape)}. "
            "Batched training data are not supported."
        )
    if train_Y.ndim != 2:
        raise ValueError(
            f"train_Y must be an `n x m` tensor; got shape {tuple(train_Y.shape)}. "
            "Use train_Y.unsqueeze(-1) for a single output."
        )
    if train_X.shape[0] != train_Y.shape[0]:
        raise ValueError(
            f"train_X and train_Y must have the same number of rows; got "
            f"{train_X.shape[0]} and {train_Y.shape[0]}."
        )
    if train_X.numel() == 0 or train_Y.numel() == 0:
        raise ValueError(
            f"Empty training data: train_X {tuple(train_X.shape)}, train_Y {tuple(train_Y.shape)}."
        )
    if train_X.shape[0] < min_points:
        raise ValueError(
            f"At least {min_points} training points are needed; got {train_X.shape[0]}."
        )
    if train_X.dtype != train_Y.dtype:
        raise ValueError(
            "train_X and train_Y must have the same dtype; got "
            f"{train_X.dtype} and {train_Y.dtype}."
        )
    if train_X.device != train_Y.device:
        raise ValueError(
            f"train_X and train_Y must be on the same device; got {train_X.device} and "
            f"{train_Y.device}."
        )
    for name, tensor in (("train_X", train_X), ("train_Y", train_Y)):
        if not tensor.isfinite().all():
            raise ValueError(f"{name} contains NaN or infinite values.")


def validate_test_inputs(X: Tensor, train_X: Tensor) -> None:
    r"""Check inputs passed to ``posterior``.

    Args:
        X: A ``batch_shape x q x d`` tensor.
        train_X: The model's ``n x d`` training inputs (for ``d``, dtype and device).

    Raises:
        ValueError: On fewer than two dimensions, a wrong ``d``, mismatched
            dtype/device, or NaN/inf entries.
    """
    if not isinstance(X, Tensor):
        raise TypeError(f"X must be a torch.Tensor; got {type(X).__name__}.")
    if X.ndim < 2:
        raise ValueError(
            f"X must be a `batch_shape x q x d` tensor with at least two dimensions; got "
            f"shape {tuple(X.shape)}."
        )
    if X.shape[-1] != train_X.shape[-1]:
        raise ValueError(
            f"X has {X.shape[-1]} input dimensions but the model was trained on "
            f"{train_X.shape[-1]}."
        )
    if X.dtype != train_X.dtype:
        raise ValueError(
            f"X has dtype {X.dtype} but the model was trained on {train_X.dtype}; convert "
            "one of them (silent down-casting is avoided on purpose)."
        )
    if X.device != train_X.device:
        raise ValueError(f"X is on {X.device} but the model is on {train_X.device}.")
    if not X.isfinite().all():
        raise ValueError("X contains NaN or infinite values.")


def _is_positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def check_positive_integers(owner: object, *names: str) -> None:
    r"""Raise a ``ValueError`` naming the first attribute of ``owner`` among ``names``
    that is not a positive integer (booleans are rejected)."""
    for name in names:
        value = getattr(owner, name)
        if not _is_positive_int(value):
            raise ValueError(f"{name} must be a positive integer; got {value!r}.")


def check_widths(owner: object, *names: str) -> None:
    r"""Store the attributes ``names`` of the (frozen dataclass) ``owner`` as tuples and
    raise a ``ValueError`` unless each is a non-empty sequence of positive integers."""
    for name in names:
        widths = tuple(getattr(owner, name))
        object.__setattr__(owner, name, widths)
        if not widths or not all(_is_positive_int(width) for width in widths):
            raise ValueError(
                f"{name} must be a non-empty sequence of positive integers; got {widths}."
            )
