r"""A warning about test inputs far outside the bounds declared to ``Normalize``.

The training data are checked as BoTorch's GPs check them (``validate_input_scaling``:
inputs in the unit cube and standardised outcomes after the transforms, each a BoTorch
``InputDataWarning``). Test inputs far outside a declared box are extrapolations, which
BoTorch does not warn about; this check does, with the same warning class.
"""

from __future__ import annotations

import warnings

import torch
from botorch.exceptions.warnings import InputDataWarning
from botorch.models.transforms.input import InputTransform, Normalize
from torch import Tensor


def inputs_outside_bounds(
    transformed_X: Tensor, input_transform: InputTransform | None, tolerance: float
) -> Tensor | None:
    r"""Which inputs lie outside the bounds declared to a ``Normalize`` input transform by
    more than ``tolerance`` (in units of the box width), computed on the inputs' device
    without reading it back.

    Only a ``Normalize`` with fixed ``bounds`` declares a box; learned bounds cover the
    training inputs by construction.

    Args:
        transformed_X: ``batch_shape x n x d`` inputs after the input transform.
        input_transform: The model's input transform.
        tolerance: How far outside ``[0, 1]`` (after normalisation) is accepted.

    Returns:
        A boolean ``batch_shape x n x d'`` tensor over the normalised dimensions (``d'``
        of them), or ``None`` when no box is declared.
    """
    if not isinstance(input_transform, Normalize) or input_transform.learn_bounds:
        return None
    indices = getattr(input_transform, "indices", None)
    with torch.no_grad():
        normalized = transformed_X if indices is None else transformed_X[..., indices]
        return (normalized < -tolerance) | (normalized > 1 + tolerance)


def warn_inputs_outside_bounds(
    transformed_X: Tensor, outside: Tensor, input_transform: Normalize, role: str
) -> None:
    r"""Warn that inputs lie outside the bounds declared to ``input_transform``, naming
    the dimensions and the largest distance.

    Args:
        transformed_X: ``batch_shape x n x d`` inputs after the input transform.
        outside: The mask of :func:`inputs_outside_bounds`, with at least one entry set.
        input_transform: The ``Normalize`` transform that declares the box.
        role: ``"training inputs"`` or ``"test inputs"`` (named in the warning).
    """
    indices = getattr(input_transform, "indices", None)
    with torch.no_grad():
        normalized = transformed_X if indices is None else transformed_X[..., indices]
        dims = outside.reshape(-1, outside.shape[-1]).any(0).nonzero().squeeze(-1)
        if indices is not None:
            dims = indices[dims]
        distance = torch.maximum(-normalized, normalized - 1).max().item()
    warnings.warn(
        f"Some {role} lie outside the bounds given to Normalize (dimension(s) "
        f"{dims.tolist()}, up to {distance:.3g} box widths away); check the bounds, or "
        "expect extrapolation.",
        InputDataWarning,
        stacklevel=4,
    )
