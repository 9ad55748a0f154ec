r"""Batched training data (``batch_shape x n x d`` and ``batch_shape x n x m``), as BoTorch's
batched GPs take them: one independent model per batch element, served as one model of
that batch shape.

A :class:`~botorch_nn_uq.models.ensemble.DeepEnsemble` of ``K`` members on data of batch
shape ``batch_shape`` (``B`` elements, flattened) trains ``B * K`` members as ONE batched
computation (:class:`~botorch_nn_uq.nn.batched_mlp.BatchedMLP`), member ``b * K + k``
being member ``k`` of element ``b``, trained on that element's rows only. Every element
draws its members' seeds from the fit's seed as an unbatched fit does, so element ``b``
of a batched fit is the fit of element ``b`` alone with the same seed (up to
floating-point rounding; with training-time ``dropout`` the masks are drawn for all
members at once and differ). The posterior at ``batch_shape' x q x d`` inputs has the
batch shape ``broadcast(batch_shape', batch_shape)``, as a batched GP's: element ``b``'s
members are evaluated at the inputs of batch element ``b`` only.

The other families (MC dropout, NOMU, NEON, hyper-deep and searched ensembles) refuse
batched training data at construction with the remedy: one model per batch element in a
``ModelList``, or a ``DeepEnsemble``.
"""

from __future__ import annotations

import torch
from botorch.models.transforms.outcome import OutcomeTransform
from torch import Tensor

from botorch_nn_uq.nn.batched_mlp import BatchedMLP, MemberOutput


def posterior_batch_shape(X: Tensor, batch_shape: torch.Size) -> torch.Size:
    r"""The batch shape of a batched model's posterior at ``X``: ``X``'s batch shape
    broadcast with the model's, as for a batched GP.

    Args:
        X: A ``batch_shape' x q x d`` tensor of (transformed) inputs.
        batch_shape: The model's batch shape.

    Raises:
        ValueError: If the two do not broadcast.
    """
    try:
        return torch.broadcast_shapes(X.shape[:-2], batch_shape)
    except RuntimeError as error:
        raise ValueError(
            f"X has the batch shape {tuple(X.shape[:-2])}, which does not broadcast with the "
            f"model's batch shape {tuple(batch_shape)} (the training data's): give `q x d`, "
            f"`batch_shape x q x d` or `b x batch_shape x q x d` inputs (a size-1 dimension "
            "broadcasts), as for a batched GP."
        ) from error


def element_member_outputs(
    members: BatchedMLP, X: Tensor, batch_shape: torch.Size, return_features: bool = False
) -> MemberOutput:
    r"""Evaluate the members of a batched fit, each batch element's members at that
    element's inputs only, in one batched computation.

    Args:
        members: ``B * K`` members, member ``b * K + k`` the ``k``-th of element ``b`` (``B``
            the number of elements of ``batch_shape``).
        X: A ``batch_shape' x q x d`` tensor of transformed inputs, ``batch_shape'``
            broadcastable with ``batch_shape``.
        batch_shape: The model's batch shape.
        return_features: Also return the members' output-layer inputs.

    Returns:
        A :class:`~botorch_nn_uq.nn.batched_mlp.MemberOutput` of ``broadcast(batch_shape',
        batch_shape) x K x q x m`` tensors (``... x h`` features).
    """
    shape = posterior_batch_shape(X, batch_shape)
    elements = batch_shape.numel()
    per_element = members.num_members // elements
    outer = shape[: len(shape) - len(batch_shape)].numel()
    q, d = X.shape[-2:]
    # `outer x B x q x d` -> `B x (outer q) x d`: each element's rows, then repeated for
    # its K members (per-member inputs of one batched matmul per layer).
    rows = X.expand(*shape, q, d).reshape(outer, elements, q, d).transpose(0, 1)
    rows = rows.reshape(elements, outer * q, d).repeat_interleave(per_element, dim=0)
    output = members(rows, per_member=True, return_features=return_features)

    def served(values: Tensor | None) -> Tensor | None:
        if values is None:
            return None
        # `(B K) x (outer q) x c` -> `outer x B x K x q x c` -> `shape x K x q x c`.
        values = values.reshape(elements, per_element, outer, q, values.shape[-1])
        return values.permute(2, 0, 1, 3, 4).reshape(*shape, per_element, q, values.shape[-1])

    return MemberOutput(served(output.mean), served(output.std), served(output.features))


def element_rows(tensor: Tensor, batch_shape: torch.Size) -> Tensor:
    r"""A ``batch_shape x n x c`` tensor of training data as ``B x n x c``, ``B`` the
    number of elements of ``batch_shape``: the element rows that
    :func:`~botorch_nn_uq.training.members.fit_members` trains on."""
    return tensor.reshape(batch_shape.numel(), *tensor.shape[len(batch_shape) :])


class MembersFirstOutcomeTransform(OutcomeTransform):
    r"""A batched model's outcome transform, applied to values laid out as the members'
    posteriors hold them, ``batch_shape x K x q x m``.

    The member dimension ``K`` is moved out of the way first, so that the batch
    dimensions of the transform (such as ``Standardize(m, batch_shape=batch_shape)``)
    meet the values' batch dimensions instead of the members'.

    Only :meth:`untransform` is served (what a posterior's ``untransform_outcomes``
    calls); linear transforms stay linear.

    Args:
        transform: The model's fitted outcome transform.
    """

    def __init__(self, transform: OutcomeTransform) -> None:
        super().__init__()
        self.transform = transform

    @property
    def _is_linear(self) -> bool:
        return bool(getattr(self.transform, "_is_linear", False))

    def forward(
        self, Y: Tensor, Yvar: Tensor | None = None, X: Tensor | None = None
    ) -> tuple[Tensor, Tensor | None]:
        r"""Not served: a batched model transforms its training data with the model's
        own transform."""
        raise NotImplementedError("MembersFirstOutcomeTransform only untransforms outcomes.")

    def untransform(
        self, Y: Tensor, Yvar: Tensor | None = None, X: Tensor | None = None
    ) -> tuple[Tensor, Tensor | None]:
        r"""Untransform ``batch_shape x K x q x m`` member values ``Y`` (and variances
        ``Yvar`` of the same shape) with the wrapped transform.

        Args:
            Y: Member values in the transformed outcome space.
            Yvar: Optional member variances.
            X: The ``batch_shape x q x d`` transformed inputs, passed on.

        Returns:
            ``Y`` and ``Yvar`` in original outcome units, in their layout.
        """
        Y_first = Y.movedim(-3, 0)
        Yvar_first = None if Yvar is None else Yvar.movedim(-3, 0)
        Y_utf, Yvar_utf = self.transform.untransform(Y_first, Yvar_first, X=X)
        return Y_utf.movedim(0, -3), None if Yvar_utf is None else Yvar_utf.movedim(0, -3)
