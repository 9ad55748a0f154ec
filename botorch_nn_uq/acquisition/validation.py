r"""Checks of the arguments the acquisition functions share.

A NaN incumbent or target does not fail on its own: it turns every acquisition value
into NaN, zero or ``-inf``, and the optimiser then returns an arbitrary point. These
checks reject such arguments at construction, naming them. An empty q-batch is
refused at evaluation, by the MC acquisitions' shared base class
:class:`NonEmptyBatchMCAcquisitionFunction`.
"""

from __future__ import annotations

import torch
from botorch.acquisition.monte_carlo import SampleReducingMCAcquisitionFunction
from botorch.models.model import Model
from torch import Tensor

from botorch_nn_uq.checks import REALS, Interval, check_batch_broadcastable, check_finite_tensor


def validate_best_f(best_f: float | Tensor, model: Model, interval: Interval = REALS) -> Tensor:
    r"""``best_f`` as a float64 tensor for the model's batches, after checking it.

    As for BoTorch's analytic acquisitions, ``best_f`` is a scalar or a tensor that
    broadcasts to the model's ``batch_shape`` (one incumbent per batch of models).

    Args:
        best_f: The incumbent.
        model: The model of the acquisition function.
        interval: The values the incumbent can take.

    Returns:
        The incumbent, a scalar tensor if it has one entry.

    Raises:
        ValueError: If ``best_f`` is not finite, lies outside ``interval`` or does not
            broadcast to the model's batch shape.
    """
    tensor = check_finite_tensor("best_f", best_f, interval=interval, dtype=torch.float64)
    try:
        batch_shape = model.batch_shape
    except NotImplementedError:
        # A model that does not state its batch shape: any shape broadcasts at evaluation.
        batch_shape = tensor.shape
    return check_batch_broadcastable("best_f", tensor, batch_shape)


def check_candidates(X: Tensor, X_pending: Tensor | None) -> None:
    r"""Refuse an empty q-batch (``batch_shape x 0 x d``) without pending points: a
    q-batch acquisition value needs at least one point.

    Args:
        X: A ``batch_shape x q x d`` tensor of candidates.
        X_pending: The acquisition's pending points, if any.

    Raises:
        ValueError: If ``X`` has no point and there are no pending points.
    """
    if X.ndim >= 2 and X.shape[-2] == 0 and (X_pending is None or X_pending.shape[-2] == 0):
        raise ValueError(
            f"X holds no candidate point (shape {tuple(X.shape)}): a q-batch acquisition "
            "needs q >= 1 points per batch."
        )


class NonEmptyBatchMCAcquisitionFunction(SampleReducingMCAcquisitionFunction):
    r"""A ``SampleReducingMCAcquisitionFunction`` that refuses an empty q-batch with a
    clear error (BoTorch's own error names its sampler's dimension, not the batch)."""

    def forward(self, X: Tensor) -> Tensor:
        r"""The acquisition value of every t-batch of ``X``.

        Args:
            X: A ``batch_shape x q x d``-dim tensor of candidates (``q >= 1``), or a
                ``q x d``-dim one.

        Returns:
            A ``batch_shape``-dim tensor of acquisition values.

        Raises:
            ValueError: If ``X`` holds no point and there are no pending points.
        """
        check_candidates(X, self.X_pending)
        return super().forward(X)
