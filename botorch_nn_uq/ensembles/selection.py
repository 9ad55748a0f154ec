r"""Greedy ensemble selection from cached validation log-likelihoods.

The input is a matrix ``log_likelihoods`` of shape ``num_candidates x num_points`` with
``log_likelihoods[k, n] = log p_k(y_n | x_n)``, the predictive log density of candidate
``k`` at validation point ``n``. An ensemble is a multiset ``S`` of candidates; it predicts
with the mixture whose weights are ``w_k = multiplicity_k / |S|``, and its validation loss
is the mean negative log-likelihood of that mixture,

    ``mean_n -log(sum_k w_k exp(log_likelihoods[k, n]))``,

computed stably with ``logsumexp``. Candidates are never retrained: every greedy step only
combines rows of the cached matrix.

- :func:`forward_select`: ForwardSelect of Neural Ensemble Search (Zaidi et al., 2021),
  greedy selection without replacement of a fixed number of members.
- :func:`caruana_select`: ensemble selection with replacement (Caruana et al., 2004) as
  used by AutoDEUQ (Egele et al., 2022); repeated members get larger weights.
- :func:`ensemble_nll`: the validation loss of an arbitrary weighted mixture.

A greedy step scores all candidates with one tensor operation: with the running log-sum
``R[n] = logsumexp_{k in S} log_likelihoods[k, n]`` of a multiset of size ``t``, adding
candidate ``j`` gives the mixture log density ``logaddexp(R, log_likelihoods[j]) -
log(t + 1)``.

References:
    Caruana, R., Niculescu-Mizil, A., Crew, G., Ksikes, A. (2004). Ensemble selection from
    libraries of models. ICML.
    Zaidi, S., Zela, A., Elsken, T., Holmes, C., Hutter, F., Teh, Y. W. (2021). Neural
    Ensemble Search for Uncertainty Estimation and Dataset Shift. NeurIPS.
    Egele, R., Maulik, R., Raghavan, K., Lusch, B., Guyon, I., Balaprakash, P. (2022).
    AutoDEUQ: Automated Deep Ensemble with Uncertainty Quantification. ICPR.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass

import torch
from torch import Tensor

#: Default cap on the number of additions of :func:`caruana_select`, per ensemble member.
DEFAULT_ITERATIONS_PER_MEMBER = 10


@dataclass(frozen=True)
class SelectionResult:
    r"""The outcome of a greedy ensemble selection.

    Attributes:
        indices: A ``num_members``-dim long tensor of the distinct selected candidate
            indices (rows of ``log_likelihoods``), in order of first selection.
        weights: A ``num_members``-dim tensor of mixture weights aligned with ``indices``:
            each member's multiplicity divided by the number of additions. Sums to one.
        loss_history: The ensemble's validation negative log-likelihood after each
            addition (one entry per addition, so repeats add entries too).
        loss: The final ensemble's validation negative log-likelihood,
            ``loss_history[-1]``.
    """

    indices: Tensor
    weights: Tensor
    loss_history: list[float]
    loss: float


def ensemble_nll(log_likelihoods: Tensor, weights: Tensor) -> Tensor:
    r"""Mean negative log-likelihood of a weighted mixture of candidates.

    Computes ``mean_n -log(sum_k w_k exp(log_likelihoods[k, n]))`` with ``w = weights /
    weights.sum()``. Candidates with zero weight do not contribute, whatever their
    log-likelihoods (NaN included). Differentiable in both arguments.

    Args:
        log_likelihoods: A ``num_candidates x num_points`` tensor of predictive log
            densities, ``log_likelihoods[k, n] = log p_k(y_n | x_n)``.
        weights: A ``num_candidates``-dim tensor of non-negative mixture weights, not all
            zero; normalised to sum to one.

    Returns:
        A scalar tensor: the mixture's negative log-likelihood averaged over points.

    Example:
        >>> log_likelihoods = torch.tensor([[0.0, -2.0], [-2.0, 0.0]])
        >>> ensemble_nll(log_likelihoods, torch.tensor([1.0, 1.0]))  # -log((1 + e^-2) / 2)
        tensor(0.5662)
    """
    log_likelihoods = _check_log_likelihoods(log_likelihoods)
    weights = torch.as_tensor(weights, dtype=log_likelihoods.dtype, device=log_likelihoods.device)
    num_candidates = log_likelihoods.shape[0]
    if weights.shape != (num_candidates,):
        raise ValueError(
            f"`weights` must be a 1-dim tensor with one weight per candidate (row of "
            f"`log_likelihoods`), i.e. of shape ({num_candidates},); got shape "
            f"{tuple(weights.shape)}."
        )
    if not torch.isfinite(weights).all() or (weights < 0).any():
        raise ValueError(f"`weights` must be finite and non-negative; got {weights.tolist()}.")
    total = weights.sum()
    if total <= 0:
        raise ValueError("`weights` must not all be zero.")
    positive = weights > 0
    # Taking the log of a placeholder 1 instead of 0 keeps gradients finite for zero weights.
    log_weights = torch.where(positive, weights / total, torch.ones_like(weights)).log()
    terms = (log_weights.unsqueeze(-1) + log_likelihoods).masked_fill(
        ~positive.unsqueeze(-1), -math.inf
    )
    return -torch.logsumexp(terms, dim=0).mean()


def forward_select(log_likelihoods: Tensor, ensemble_size: int) -> SelectionResult:
    r"""ForwardSelect (Neural Ensemble Search): greedy selection without replacement.

    Starting from the empty ensemble, repeatedly adds the not-yet-selected candidate whose
    addition gives the lowest validation negative log-likelihood of the uniform mixture,
    until the ensemble has ``ensemble_size`` members. The loss may increase along the way:
    the ensemble size is fixed, not tuned. Ties go to the lowest candidate index. If there
    are at most ``ensemble_size`` selectable candidates, all of them are returned (with
    uniform weights), in greedy order.

    A candidate whose row contains NaN (or +inf, a degenerate density) is invalid and
    treated as ``-inf`` everywhere; candidates that are ``-inf`` at every point are never
    selected.

    Args:
        log_likelihoods: A ``num_candidates x num_points`` tensor of validation predictive
            log densities, ``log_likelihoods[k, n] = log p_k(y_n | x_n)``.
        ensemble_size: The number of (distinct) members, a positive integer.

    Returns:
        A :class:`SelectionResult` with ``min(ensemble_size, num_selectable)`` distinct
        indices, uniform weights and one ``loss_history`` entry per member.

    Example:
        >>> log_likelihoods = torch.randn(20, 100)  # 20 candidates, 100 validation points
        >>> result = forward_select(log_likelihoods, ensemble_size=5)
        >>> result.indices  # 5 distinct candidate indices, best single candidate first
        >>> result.weights  # tensor([0.2000, 0.2000, 0.2000, 0.2000, 0.2000])
    """
    log_likelihoods, selectable = _prepare(log_likelihoods)
    ensemble_size = _check_positive_int(ensemble_size, "ensemble_size")
    num_steps = min(ensemble_size, int(selectable.sum()))
    running = torch.full_like(log_likelihoods[0], -math.inf)
    available = selectable.clone()
    additions: list[int] = []
    loss_history: list[float] = []
    for step in range(num_steps):
        losses = _candidate_losses(log_likelihoods, running, step)
        best = _lowest_argmin(losses, available)
        additions.append(best)
        loss_history.append(losses[best].item())
        available[best] = False
        running = torch.logaddexp(running, log_likelihoods[best])
    return _build_result(additions, loss_history, log_likelihoods)


def caruana_select(
    log_likelihoods: Tensor, ensemble_size: int, max_iterations: int | None = None
) -> SelectionResult:
    r"""Caruana ensemble selection with replacement, as in AutoDEUQ.

    Starting from the empty ensemble, repeatedly adds the candidate (possibly one already
    in the ensemble) whose addition gives the lowest validation negative log-likelihood of
    the mixture with weights ``multiplicity / number of additions``. Stops as soon as

    - the ensemble has ``ensemble_size`` distinct members,
    - no addition strictly lowers the loss (the first addition always happens), or
    - ``max_iterations`` additions have been made.

    Unlike the printed AutoDEUQ algorithm, which loops while ``|distinct| <= K`` (admitting
    ``K + 1`` members) and while the loss is ``<=`` the best so far (which need not
    terminate), this never exceeds ``ensemble_size`` distinct members and requires strict
    improvement. Ties go to the lowest candidate index.

    A candidate whose row contains NaN (or +inf, a degenerate density) is invalid and
    treated as ``-inf`` everywhere; candidates that are ``-inf`` at every point are never
    selected.

    Args:
        log_likelihoods: A ``num_candidates x num_points`` tensor of validation predictive
            log densities, ``log_likelihoods[k, n] = log p_k(y_n | x_n)``.
        ensemble_size: The maximum number of distinct members ``K``, a positive integer.
        max_iterations: The maximum number of additions (repeats included), a positive
            integer. Defaults to ``10 * ensemble_size``.

    Returns:
        A :class:`SelectionResult` with at most ``ensemble_size`` distinct indices, weights
        proportional to their multiplicities and one ``loss_history`` entry per addition
        (non-increasing).

    Example:
        >>> log_likelihoods = torch.randn(20, 100)  # 20 candidates, 100 validation points
        >>> result = caruana_select(log_likelihoods, ensemble_size=5)
        >>> result.indices  # at most 5 distinct candidate indices
        >>> result.weights  # multiplicities / additions, e.g. tensor([0.5, 0.25, 0.25])
    """
    log_likelihoods, selectable = _prepare(log_likelihoods)
    ensemble_size = _check_positive_int(ensemble_size, "ensemble_size")
    if max_iterations is None:
        max_iterations = DEFAULT_ITERATIONS_PER_MEMBER * ensemble_size
    max_iterations = _check_positive_int(max_iterations, "max_iterations")
    running = torch.full_like(log_likelihoods[0], -math.inf)
    additions: list[int] = []
    loss_history: list[float] = []
    distinct: set[int] = set()
    while len(additions) < max_iterations and len(distinct) < ensemble_size:
        losses = _candidate_losses(log_likelihoods, running, len(additions))
        best = _lowest_argmin(losses, selectable)
        loss = losses[best].item()
        if loss_history and not loss < loss_history[-1]:
            break
        additions.append(best)
        loss_history.append(loss)
        distinct.add(best)
        running = torch.logaddexp(running, log_likelihoods[best])
    return _build_result(additions, loss_history, log_likelihoods)


def _check_log_likelihoods(log_likelihoods: Tensor) -> Tensor:
    log_likelihoods = torch.as_tensor(log_likelihoods)
    if log_likelihoods.ndim != 2:
        raise ValueError(
            "`log_likelihoods` must be a 2-dim tensor of shape num_candidates x num_points; "
            f"got {log_likelihoods.ndim} dimension(s) (shape {tuple(log_likelihoods.shape)})."
        )
    if log_likelihoods.shape[0] == 0 or log_likelihoods.shape[1] == 0:
        raise ValueError(
            "`log_likelihoods` needs at least one candidate (row) and one validation point "
            f"(column); got shape {tuple(log_likelihoods.shape)}."
        )
    if not log_likelihoods.is_floating_point():
        log_likelihoods = log_likelihoods.to(torch.get_default_dtype())
    return log_likelihoods


def _check_positive_int(value: int, name: str) -> int:
    try:
        if isinstance(value, bool):
            raise TypeError
        value = operator.index(value)
    except TypeError:
        raise ValueError(f"`{name}` must be a positive integer; got {value!r}.") from None
    if value < 1:
        raise ValueError(f"`{name}` must be a positive integer; got {value}.")
    return value


def _prepare(log_likelihoods: Tensor) -> tuple[Tensor, Tensor]:
    r"""Validate and sanitise the matrix for selection.

    Returns the detached ``num_candidates x num_points`` matrix with invalid rows set to
    ``-inf`` and a ``num_candidates``-dim boolean mask of the selectable candidates.
    """
    log_likelihoods = _check_log_likelihoods(log_likelihoods).detach()
    invalid = (torch.isnan(log_likelihoods) | (log_likelihoods == math.inf)).any(dim=-1)
    log_likelihoods = log_likelihoods.masked_fill(invalid.unsqueeze(-1), -math.inf)
    selectable = (log_likelihoods > -math.inf).any(dim=-1)
    if not selectable.any():
        raise ValueError(
            f"No candidate can be selected: every one of the {log_likelihoods.shape[0]} rows "
            "of `log_likelihoods` contains NaN (or +inf) or is -inf at every point."
        )
    return log_likelihoods, selectable


def _candidate_losses(log_likelihoods: Tensor, running: Tensor, size: int) -> Tensor:
    r"""The ensemble loss after adding each candidate to the current multiset.

    Args:
        log_likelihoods: The ``num_candidates x num_points`` sanitised matrix.
        running: A ``num_points``-dim tensor, the ``logsumexp`` over the current multiset's
            rows (``-inf`` for the empty multiset).
        size: The number of additions so far.

    Returns:
        A ``num_candidates``-dim tensor of losses (``+inf`` where a point gets zero density).
    """
    mixture = torch.logaddexp(running, log_likelihoods) - math.log(size + 1)
    return -mixture.mean(dim=-1)


def _lowest_argmin(losses: Tensor, allowed: Tensor) -> int:
    r"""The lowest allowed index among the allowed minimisers of ``losses``."""
    best = losses[allowed].min()
    return int(torch.nonzero(allowed & (losses == best))[0, 0])


def _build_result(
    additions: list[int], loss_history: list[float], log_likelihoods: Tensor
) -> SelectionResult:
    counts: dict[int, int] = {}
    for index in additions:
        counts[index] = counts.get(index, 0) + 1
    device = log_likelihoods.device
    indices = torch.tensor(list(counts), dtype=torch.long, device=device)
    multiplicities = torch.tensor(list(counts.values()), dtype=log_likelihoods.dtype, device=device)
    return SelectionResult(
        indices=indices,
        weights=multiplicities / len(additions),
        loss_history=loss_history,
        loss=loss_history[-1],
    )
