r"""Tensor-valued outputs: training targets of shape ``n x o1 x o2`` (or more output
dimensions), as BoTorch's ``HigherOrderGP`` takes them: a field on a grid per point, for
composite BO.

Every model of the package takes them. Its networks train on the ``m = o1 o2 ...``
flattened outputs (``train_Y.flatten(1)``), and its posteriors serve them in their shape
(:class:`~botorch_nn_uq.posteriors.TensorOutputPosterior`): means, variances and samples
``batch_shape x q x o1 x o2 x ...``, so an ``MCAcquisitionObjective`` written for a
``HigherOrderGP`` reads them unchanged.

Outcome transforms:

- the default standardises each of the ``m`` outputs (``Standardize(m)``), as for ``n x m``
  targets;
- BoTorch's ``FlattenedStandardize(output_shape)`` (``HigherOrderGP``'s) standardises all
  outputs with one mean and one standard deviation; the model keeps the equivalent
  ``FlattenedStandardize`` of the flattened outputs (``output_shape = (m,)``), fitted and
  in the mode it was given in;
- ``Standardize(m)`` acts on the flattened outputs as given; ``None`` trains on the raw
  outputs.

Other transforms are refused: what they do to a tensor of outputs is not what they do to
its flattened columns in general. Known noise (``train_Yvar``) has the outputs' shape and
is flattened with them.
"""

from __future__ import annotations

import torch
from botorch.models.higher_order_gp import FlattenedStandardize
from botorch.models.transforms.outcome import OutcomeTransform, Standardize
from torch import Tensor

from botorch_nn_uq.compat import standardize_min_stdv, standardize_width


def tensor_output_shape(train_X: Tensor, train_Y: Tensor) -> torch.Size | None:
    r"""The shape of each point's outputs if ``train_Y`` holds tensor-valued outputs;
    ``None`` otherwise.

    Tensor-valued outputs are ``n x d`` inputs with ``n x o1 x o2 x ...`` targets, the
    same ``n``; anything else is ``n x m`` targets or data that training-data validation
    refuses."""
    if not (isinstance(train_X, Tensor) and isinstance(train_Y, Tensor)):
        return None
    if train_X.ndim == 2 and train_Y.ndim > 2 and train_Y.shape[0] == train_X.shape[0]:
        return train_Y.shape[1:]
    return None


def scaling_check_targets(
    train_Y: Tensor, train_Yvar: Tensor | None, outcome_transform: OutcomeTransform | None
) -> dict[str, Tensor | None]:
    r"""The transformed targets as BoTorch's input-scaling check should see them: as one
    column after a ``FlattenedStandardize``, which standardises all outputs together (its
    outputs are not standardised one by one, and need not be), else as they are.

    Args:
        train_Y: The ``n x m`` transformed targets.
        train_Yvar: Their ``n x m`` noise variances, or ``None``.
        outcome_transform: The transform that made them.

    Returns:
        ``train_Y`` and ``train_Yvar`` keyword arguments of ``validate_input_scaling``.
    """
    if isinstance(outcome_transform, FlattenedStandardize):
        return {
            "train_Y": train_Y.reshape(-1, 1),
            "train_Yvar": None if train_Yvar is None else train_Yvar.reshape(-1, 1),
        }
    return {"train_Y": train_Y, "train_Yvar": train_Yvar}


def flatten_outputs(values: Tensor, output_shape: torch.Size, name: str) -> Tensor:
    r"""Values of tensor-valued outputs with the outputs flattened into one dimension.

    ``... x o1 x o2 x ...`` becomes ``... x m``.

    Args:
        values: Observations, noise variances or samples, the trailing dimensions
            ``output_shape``.
        output_shape: The outputs' shape ``o1 x o2 x ...``.
        name: What ``values`` are, for the error.

    Raises:
        ValueError: If the trailing dimensions of ``values`` are not ``output_shape``.
    """
    if values.ndim <= len(output_shape) or values.shape[-len(output_shape) :] != output_shape:
        raise ValueError(
            f"{name} must end in the outputs' shape {tuple(output_shape)} (the model serves "
            f"tensor-valued outputs); got shape {tuple(values.shape)}."
        )
    return values.flatten(-len(output_shape))


def flat_outcome_transform(
    outcome_transform: OutcomeTransform, output_shape: torch.Size
) -> OutcomeTransform:
    r"""The transform of the flattened outputs equivalent to ``outcome_transform`` of
    outputs of shape ``output_shape`` (see the module's docstring).

    Args:
        outcome_transform: The transform given with the tensor-valued outputs.
        output_shape: The outputs' shape ``o1 x o2 x ...``.

    Returns:
        A transform of ``n x m`` targets, ``m = o1 o2 ...``.

    Raises:
        ValueError: For a ``FlattenedStandardize`` of another output shape or with a
            batch shape, a ``Standardize`` of another width than ``m``, or another
            transform.
    """
    num_outputs = output_shape.numel()
    if isinstance(outcome_transform, FlattenedStandardize):
        if tuple(outcome_transform.output_shape) != tuple(output_shape):
            raise ValueError(
                f"FlattenedStandardize was made for outputs of shape "
                f"{tuple(outcome_transform.output_shape)}; train_Y's are "
                f"{tuple(output_shape)}."
            )
        if len(outcome_transform.batch_shape) > 0:
            raise ValueError(
                "A FlattenedStandardize with a batch_shape standardises batched tensor-valued "
                "outputs, and tensor-valued outputs come with `n x d` inputs; make it without "
                "one, or fit one model per batch element."
            )
        flat = FlattenedStandardize(
            torch.Size([num_outputs]), min_stdv=standardize_min_stdv(outcome_transform)
        )
        # Assigned, not copied: the new buffers' default dtype would round the statistics.
        flat.load_state_dict(outcome_transform.state_dict(), assign=True)
        return flat.train(outcome_transform.training)
    if (
        type(outcome_transform) is Standardize
        and standardize_width(outcome_transform) == num_outputs
    ):
        return outcome_transform
    raise ValueError(
        f"With tensor-valued outputs of shape {tuple(output_shape)} the outcome transform "
        f"must be FlattenedStandardize({tuple(output_shape)}) (as for HigherOrderGP), "
        f"Standardize(m={num_outputs}) of the flattened outputs, or None; got "
        f"{type(outcome_transform).__name__}."
    )
