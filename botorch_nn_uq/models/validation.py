"""Input checks shared by every model: clear errors instead of silent wrong answers."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor

from botorch_nn_uq.checks import is_integer

#: The dtypes a model trains and predicts in: half precision (float16, bfloat16) is too
#: coarse for the training loop's losses and gradients.
SUPPORTED_DTYPES = (torch.float32, torch.float64)


def _check_dtype(name: str, tensor: Tensor) -> None:
    if tensor.dtype not in SUPPORTED_DTYPES:
        raise TypeError(
            f"{name} must be a floating-point tensor of dtype torch.float32 or "
            f"torch.float64; got dtype {tensor.dtype}."
        )


#: Why a model takes no batched training data, unless it says more.
NO_BATCHED_DATA = "it is trained on `n x d` and `n x m` training data."


def batched_data_refusal(model_name: str, batch_shape: tuple[int, ...], reason: str) -> str:
    r"""The error message of a model that takes no batched training data, naming what
    to do instead: one model per batch element in a ``ModelList``, or a ``DeepEnsemble``.

    Args:
        model_name: The refusing model's class name.
        batch_shape: The batch shape of the training data it was given.
        reason: Why the model takes none (a sentence).
    """
    return (
        f"{model_name} does not take batched training data (`batch_shape x n x d`; got batch "
        f"shape {batch_shape}): {reason} Fit one model per batch element and "
        f"combine them, e.g. `ModelList(*({model_name}(train_X[i], train_Y[i]).fit(seed=0) "
        "for i in range(len(train_X))))`, or use DeepEnsemble, which trains batched training "
        "data as one batched computation (also in BoTorch's `batch_cross_validation`)."
    )


def validate_training_data(
    train_X: Tensor,
    train_Y: Tensor,
    min_points: int = 2,
    model_name: str = "This model",
    batched_data_limit: str | None = NO_BATCHED_DATA,
) -> None:
    r"""Check training data for a neural surrogate.

    Args:
        train_X: An ``n x d`` tensor of training inputs, or ``batch_shape x n x d`` for a
            model that takes batched training data.
        train_Y: An ``n x m`` tensor of training targets (tensor-valued outputs are
            flattened before, see :mod:`botorch_nn_uq.models.tensor_outputs`), or
            ``batch_shape x n x m`` with ``train_X``'s batch shape.
        min_points: The fewest training points the model accepts (per batch element).
        model_name: The model's class name, for the error messages.
        batched_data_limit: ``None`` for a model that takes batched training data, else
            why it takes none (the refusal names the remedy after it).

    Raises:
        TypeError: If either argument is not a float32 or float64 tensor.
        ValueError: On wrong dimensionality, batched data for a model that takes none
            (the message names the remedy), mismatched batch shapes or ``n``, empty
            tensors, fewer than ``min_points`` points, NaN/inf entries, or mismatched
            dtypes/devices.
    """
    for name, tensor in (("train_X", train_X), ("train_Y", train_Y)):
        if not isinstance(tensor, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor; got {type(tensor).__name__}.")
        _check_dtype(name, tensor)
    for name, tensor, columns in (("train_X", train_X, "d"), ("train_Y", train_Y, "m")):
        if tensor.ndim < 2:
            raise ValueError(
                f"{name} must be an `n x {columns}` tensor; got shape {tuple(tensor.shape)}. "
                f"Use {name}.unsqueeze(-1) for a single "
                f"{'input dimension' if columns == 'd' else 'output'}."
            )
    batched_tensor_outputs = (
        2 < train_X.ndim < train_Y.ndim and train_Y.shape[: train_X.ndim - 1] == train_X.shape[:-1]
    )
    if batched_tensor_outputs:
        raise ValueError(
            "Tensor-valued outputs (`n x o1 x o2 x ...`, as HigherOrderGP takes them) come "
            f"with `n x d` inputs, not batched ones; got train_X of shape "
            f"{tuple(train_X.shape)} and train_Y of shape {tuple(train_Y.shape)}. Flatten "
            f"each point's outputs (`train_Y.flatten({train_X.ndim - 1})`), or fit one "
            "model per batch element."
        )
    if train_X.shape[:-2] != train_Y.shape[:-2]:
        raise ValueError(
            "train_X (`batch_shape x n x d`) and train_Y (`batch_shape x n x m`) must have "
            f"the same batch shape; got shapes {tuple(train_X.shape)} and "
            f"{tuple(train_Y.shape)}, with batch dimensions {tuple(train_X.shape[:-2])} and "
            f"{tuple(train_Y.shape[:-2])}."
        )
    batch_shape = tuple(train_X.shape[:-2])
    if batch_shape and batched_data_limit is not None:
        raise ValueError(batched_data_refusal(model_name, batch_shape, batched_data_limit))
    if train_X.shape[-2] != train_Y.shape[-2]:
        raise ValueError(
            f"train_X and train_Y must have the same number of rows; got "
            f"{train_X.shape[-2]} and {train_Y.shape[-2]}."
        )
    if train_X.numel() == 0 or train_Y.numel() == 0:
        raise ValueError(
            f"Empty training data: train_X {tuple(train_X.shape)}, train_Y {tuple(train_Y.shape)}."
        )
    if train_X.shape[-2] < min_points:
        raise ValueError(
            f"At least {min_points} training points are needed"
            f"{' per batch element' if batch_shape else ''}; got {train_X.shape[-2]}."
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


#: The error message for test inputs with NaN or infinite entries.
NON_FINITE_INPUTS = "X contains NaN or infinite values."


def validate_test_inputs(
    X: Tensor,
    train_X: Tensor,
    check_dimension: bool = True,
    check_values: bool = True,
    promote: bool = False,
) -> None:
    r"""Check inputs passed to ``posterior``.

    Args:
        X: A ``batch_shape x q x d`` tensor.
        train_X: The model's ``n x d`` training inputs (for ``d``, dtype and device).
        check_dimension: Whether ``X`` must have ``train_X``'s ``d`` (not when an input
            transform may change the dimension, as ``AppendFeatures`` does at
            evaluation; the transformed inputs are checked instead).
        check_values: Whether to check that every entry is finite, which reads a flag
            back from the device (``False`` for a caller that reads it together with
            its other flags).
        promote: Whether float32 ``X`` of a float64 model is accepted, for a caller
            that promotes it (as torch's type promotion and BoTorch's GPs do: nothing
            is lost); float64 ``X`` of a float32 model is refused either way.

    Raises:
        TypeError: If ``X`` is not a float32 or float64 tensor.
        ValueError: On fewer than two dimensions, a wrong ``d``, mismatched
            dtype/device, or NaN/inf entries.
    """
    if not isinstance(X, Tensor):
        raise TypeError(f"X must be a torch.Tensor; got {type(X).__name__}.")
    _check_dtype("X", X)
    if X.ndim < 2:
        raise ValueError(
            f"X must be a `batch_shape x q x d` tensor with at least two dimensions; got "
            f"shape {tuple(X.shape)}."
        )
    if check_dimension and X.shape[-1] != train_X.shape[-1]:
        raise ValueError(
            f"X has {X.shape[-1]} input dimensions but the model was trained on "
            f"{train_X.shape[-1]}."
        )
    promoted = promote and X.dtype == torch.float32 and train_X.dtype == torch.float64
    if X.dtype != train_X.dtype and not promoted:
        raise ValueError(
            f"X has dtype {X.dtype} but the model was trained on {train_X.dtype}; convert "
            "one of them (silent down-casting is avoided on purpose)."
        )
    if X.device != train_X.device:
        raise ValueError(f"X is on {X.device} but the model is on {train_X.device}.")
    if check_values and not X.isfinite().all():
        raise ValueError(NON_FINITE_INPUTS)


def validate_output_indices(
    output_indices: Iterable[int], num_outputs: int, name: str = "output_indices"
) -> list[int]:
    r"""Check output indices (of ``posterior``, ``subset_output``) and return a list.

    Args:
        output_indices: Indices of outputs, each in ``[-num_outputs, num_outputs)``.
        num_outputs: The model's number of outputs ``m``.
        name: The argument's name in error messages.

    Raises:
        ValueError: If the indices are empty, not integers (``0.0`` and ``True`` are
            not indices) or out of range.
    """
    if isinstance(output_indices, (str, bytes, Tensor)) or not isinstance(output_indices, Iterable):
        raise ValueError(f"{name} must be a list of integers; got {output_indices!r}.")
    indices = list(output_indices)
    invalid = [i for i in indices if not (is_integer(i) and -num_outputs <= i < num_outputs)]
    if invalid or not indices:
        raise ValueError(
            f"{name} {indices} are invalid for a model with {num_outputs} "
            "output(s): give a non-empty list of integer indices."
        )
    return indices


def validate_observation_noise(observation_noise: Tensor, expected_shape: torch.Size) -> None:
    r"""Check a tensor of observation-noise variances passed to ``posterior``.

    Args:
        observation_noise: Noise variances, broadcastable to ``expected_shape``.
        expected_shape: ``batch_shape x q x m``.

    Raises:
        ValueError: If the shape does not broadcast to ``expected_shape`` or an entry
            is negative, NaN or infinite.
    """
    try:
        broadcastable = (
            torch.broadcast_shapes(observation_noise.shape, expected_shape) == expected_shape
        )
    except RuntimeError:
        broadcastable = False
    if not broadcastable:
        raise ValueError(
            f"observation_noise must be broadcastable to `batch_shape x q x m` = "
            f"{tuple(expected_shape)}; got {tuple(observation_noise.shape)}."
        )
    if not (observation_noise.isfinite() & (observation_noise >= 0)).all():
        raise ValueError("observation_noise must be finite and non-negative.")
