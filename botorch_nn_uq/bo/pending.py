r"""Pending points as a tell names them: by the ids an ask gave them or by their rows.

:meth:`~botorch_nn_uq.bo.optimizer.BayesianOptimizer.ask_trials` gives each asked point
an id (:class:`Trials`); ``tell`` and ``tell_failed`` name the points they report by
those ids or by their input rows, matched to the pending points here
(:func:`pending_rows`), and refuse a point that is not pending
(:class:`NotPendingError`, which says why).
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import Tensor

from botorch_nn_uq.bo.objectives import as_real_tensor
from botorch_nn_uq.bo.state import RunState

#: Told inputs match asked ones within this fraction of the box's side (a CSV that
#: rounds the inputs it was given).
MATCH_TOLERANCE = 1e-9


class Trials(NamedTuple):
    r"""Points an ask proposed, with the ids that :meth:`BayesianOptimizer.tell` and
    :meth:`BayesianOptimizer.tell_failed` take.

    Attributes:
        ids: ``q`` ids (``int64``), unique within the run.
        X: ``q x d`` points.
        step: The step of the ask (0: the initial design).
    """

    ids: Tensor
    X: Tensor
    step: int


#: The pending points a tell names: ``q`` ids (a sequence of integers or an integer
#: tensor) or ``q x d`` inputs (a float tensor or nested sequence).
Points = Tensor | int | Sequence[int] | Sequence[Sequence[float]]


class NotPendingError(ValueError):
    r"""A told point that is not pending: told already (a late duplicate result), told
    as failed, never asked, or named twice in one call. Nothing changed."""


def pending_rows(points: Points, state: RunState, bounds: Tensor) -> Tensor:
    r"""The rows of the pending points that ``points`` (ids or ``q x d`` rows) name,
    in the order named; a :class:`NotPendingError` unless each is pending and named
    once."""
    pending = state.pending
    if are_ids(points):
        ids = torch.as_tensor(points, dtype=torch.long, device=pending.ids.device).reshape(-1)
        if ids.numel() == 0:
            raise ValueError("Name at least one pending point; got no id.")
        if ids.unique().numel() != ids.numel():
            raise NotPendingError(f"Ids are named more than once: {ids.tolist()}.")
        matches = ids.unsqueeze(-1) == pending.ids
        found = matches.any(-1)
        if not found.all():
            raise NotPendingError(not_pending_message(ids[~found].tolist(), state))
        return matches.int().argmax(-1)
    X = as_real_tensor(points, "Told inputs")
    dim = bounds.shape[-1]
    if X.dim() != 2 or X.shape[-1] != dim or X.shape[0] == 0 or not X.is_floating_point():
        raise ValueError(
            f"Told points must be q ids or a q x {dim} tensor of inputs; got "
            f"{tuple(X.shape)} {X.dtype}."
        )
    X = X.to(bounds)
    tolerance = MATCH_TOLERANCE * (bounds[1] - bounds[0])
    close = ((X.unsqueeze(1) - pending.X.unsqueeze(0)).abs() <= tolerance).all(-1)
    # The usual case, each told row close to one pending point of its own: matched
    # at once.
    if bool((close.sum(-1) == 1).all()):
        rows = close.int().argmax(-1)
        if rows.unique().numel() == rows.numel():
            return rows
    # Told rows take the pending rows they match in order, so a point pending
    # several times is matched one to one.
    taken = torch.zeros(len(pending), dtype=torch.bool, device=X.device)
    matched, unmatched = [], []
    for row, candidates in enumerate(close):
        free = (candidates & ~taken).nonzero().squeeze(-1)
        if free.numel() == 0:
            unmatched.append(row)
        else:
            taken[free[0]] = True
            matched.append(int(free[0]))
    if unmatched:
        raise NotPendingError(
            f"Told rows {unmatched} are not pending points (told already, told as "
            f"failed, never asked, or told twice in this call); {len(pending)} points "
            "are pending."
        )
    return torch.tensor(matched, dtype=torch.long, device=X.device)


def not_pending_message(ids: list[int], state: RunState) -> str:
    r"""Why each of ``ids`` is not pending: told already, failed, or never asked."""
    told = set(state.ids.tolist())
    failed = set(state.failed.ids.tolist())
    reasons = [
        f"{i} ("
        + ("told as failed" if i in failed else "told already" if i in told else "never asked")
        + ")"
        for i in ids
    ]
    return f"Ids {', '.join(reasons)} are not pending; {len(state.pending)} points are pending."


def are_ids(points: Points) -> bool:
    r"""Whether ``points`` are ids (integers) rather than rows of inputs."""
    if isinstance(points, Tensor):
        return points.dim() <= 1 and not (
            points.is_floating_point() or points.is_complex() or points.dtype == torch.bool
        )
    if isinstance(points, np.ndarray):
        return points.ndim <= 1 and np.issubdtype(points.dtype, np.integer)
    if isinstance(points, (list, tuple)):
        return bool(points) and all(_is_id(point) for point in points)
    return _is_id(points)


def _is_id(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)
