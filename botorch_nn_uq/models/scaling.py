r"""Warnings about data whose scale a network cannot learn from as given.

A network starts with outputs of order one and inputs it treats as order one. Targets
of order 1e12, or with a spread of 1e-12, train into silently wrong means; inputs far
outside the bounds declared to ``Normalize`` are extrapolations. BoTorch's GPs warn in
these cases (``InputDataWarning``); these checks do the same for the package's models,
with thresholds wide enough that ordinary unscaled data do not trigger them.
"""

from __future__ import annotations

import warnings

import torch
from botorch.exceptions.warnings import InputDataWarning
from botorch.models.transforms.input import InputTransform, Normalize
from botorch.models.transforms.outcome import OutcomeTransform
from torch import Tensor

#: Targets a network trains on should have magnitudes below this.
LARGEST_TARGET_MAGNITUDE = 1e4
#: A non-zero spread of training targets below this is lost against the network's
#: initial outputs and the training loss's rounding.
SMALLEST_TARGET_SPREAD = 1e-4


def warn_on_extreme_target_scale(
    trained_Y: Tensor, outcome_transform: OutcomeTransform | None
) -> None:
    r"""Warn when the ``n x m`` targets a network trains on (after ``outcome_transform``)
    are too large or have a vanishing spread.

    Args:
        trained_Y: The ``n x m`` training targets after the outcome transform.
        outcome_transform: The model's outcome transform, if any (named in the warning).
    """
    with torch.no_grad():
        magnitude = trained_Y.abs().amax(dim=0)
        spread = trained_Y.std(dim=0) if trained_Y.shape[0] > 1 else torch.ones_like(magnitude)
    large = (magnitude > LARGEST_TARGET_MAGNITUDE).nonzero().squeeze(-1).tolist()
    tiny = ((spread > 0) & (spread < SMALLEST_TARGET_SPREAD)).nonzero().squeeze(-1).tolist()
    if not large and not tiny:
        return
    if outcome_transform is None:
        remedy = "Pass outcome_transform=Standardize(m) (as for SingleTaskGP) or rescale train_Y."
        source = "train_Y (no outcome transform)"
    else:
        remedy = (
            "Rescale train_Y before the transform (BoTorch's Standardize replaces standard "
            "deviations below 1e-8 by 1)."
        )
        source = f"train_Y after {type(outcome_transform).__name__}"
    problems = []
    if large:
        problems.append(f"output(s) {large} reach magnitudes up to {magnitude.max().item():.3g}")
    if tiny:
        problems.append(f"output(s) {tiny} have a spread of only {spread[tiny].min().item():.3g}")
    warnings.warn(
        f"The network trains on {source}, whose {' and '.join(problems)}; its predictions "
        f"will be inaccurate. {remedy}",
        InputDataWarning,
        stacklevel=3,
    )


def warn_on_inputs_outside_bounds(
    transformed_X: Tensor, input_transform: InputTransform | None, tolerance: float, role: str
) -> None:
    r"""Warn when inputs lie outside the bounds declared to a ``Normalize`` input
    transform by more than ``tolerance`` (in units of the box width).

    Only a ``Normalize`` with fixed ``bounds`` declares a box; learned bounds cover the
    training inputs by construction.

    Args:
        transformed_X: ``batch_shape x n x d`` inputs after the input transform.
        input_transform: The model's input transform.
        tolerance: How far outside ``[0, 1]`` (after normalisation) is accepted.
        role: ``"training inputs"`` or ``"test inputs"`` (named in the warning).
    """
    if not isinstance(input_transform, Normalize) or input_transform.learn_bounds:
        return
    indices = getattr(input_transform, "indices", None)
    with torch.no_grad():
        normalized = transformed_X if indices is None else transformed_X[..., indices]
        outside = (normalized < -tolerance) | (normalized > 1 + tolerance)
        if not outside.any():
            return
        dims = outside.reshape(-1, outside.shape[-1]).any(0).nonzero().squeeze(-1)
        if indices is not None:
            dims = indices[dims]
        distance = torch.maximum(-normalized, normalized - 1).max().item()
    warnings.warn(
        f"Some {role} lie outside the bounds given to Normalize (dimension(s) "
        f"{dims.tolist()}, up to {distance:.3g} box widths away); check the bounds, or "
        "expect extrapolation.",
        InputDataWarning,
        stacklevel=3,
    )
