r"""Batch Thompson sampling over a finite function bank, for large q.

A model of the finite-set family (ensemble members, a bank of dropout masks, a bank of
NEON indices) gives Thompson sampling almost for free: score a candidate set with every
function of the bank in ONE batched forward pass and let each of the ``q`` slots of the
batch take the best candidate of its function. With more slots than functions (a
5-member ensemble and ``q = 100``), plain Thompson sampling returns each function's
maximiser again and again; here every slot takes the best candidate of its function
that lies farther than ``exclusion_radius`` from every point already chosen and every
point already evaluated, so a function used for ``c`` slots contributes its ``c`` best
separated candidates (per-member proposals with penalisation of near-duplicates).

The candidates are scored once, in as few forward passes as memory allows, and the
``q`` greedy picks run on the CPU. Each function ranks its candidates once and every
slot walks its function's ranking from where that function's previous pick stopped:
availability only ever shrinks, so the walk never needs to look back, and the first
available candidate it meets is the one the eager rule (mask, then ``argmax``) takes.
A candidate's distance to the evaluated points (possibly hundreds of thousands, on a
GPU) is computed only when a walk reaches it, a block of candidates at a time: for
``q = 100`` out of 4,096 candidates that is a few hundred candidates, not all of them.
Every distance is that of the single pair, however many are computed at once, so the
lazy walk proposes exactly what excluding all candidates up front would.

BoTorch's ``MaxPosteriorSampling`` is plain Thompson sampling: one function per sample
from ``posterior.rsample``. An ensemble of ``K`` members then gives at most ``K``
distinct points (``replacement=False`` takes each sample's next-best candidates); MC
dropout and NEON draw fresh masks or indices beyond their bank, so every sample is a
distinct function.

The candidate set mixes global scrambled-Sobol points with TuRBO-style local
perturbations of the best points observed so far (Eriksson et al., 2019): each
coordinate of a centre is perturbed with probability ``min(1, 20 / d)``, so in high
dimension a candidate changes a few coordinates at a time, which is where a global
random candidate set stops finding anything better than the incumbent.

Models outside the finite-set family (a GP, say) are served by joint posterior samples
at the candidates (``q`` independent draws), which is exact but costs a joint sample
over all candidates. A posterior of independent marginals (NOMU's) has no joint
function samples at all and is refused with a clear error.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from botorch.models.model import Model
from botorch.posteriors.ensemble import EnsemblePosterior
from torch import Tensor
from torch.quasirandom import SobolEngine

from botorch_nn_uq.posteriors.gaussian import GaussianMarginalPosterior

#: Function evaluations per forward pass of a finite set of functions (bank size times
#: candidates), which bounds the memory of a bank's forward pass.
_SCORE_BUDGET = 2**16

#: The bank size presumed for the first forward pass of a model that does not state its
#: own (an ensemble's members rarely number more).
_PRESUMED_BANK_SIZE = 16

#: The most candidates whose distances to the evaluated points are computed together.
_EXCLUSION_BLOCK = 64

#: Candidates a walk checks against the picks at once: most slots take one of the
#: first few candidates of their walk.
_WALK_STEP = 8

#: Entries of a candidates-by-evaluated-points distance chunk.
_DISTANCE_BUDGET = 2**19


def thompson_candidates(
    bounds: Tensor,
    num_candidates: int,
    *,
    centers: Tensor | None = None,
    local_fraction: float = 0.5,
    perturbation_scale: float = 0.2,
    seed: int = 0,
) -> Tensor:
    r"""A candidate set for batch Thompson sampling, in the units of ``bounds``.

    Args:
        bounds: A ``2 x d`` tensor of lower and upper bounds.
        num_candidates: The number ``N`` of candidates.
        centers: An optional ``c x d`` tensor of points (problem units, e.g. the best
            observed points) around which ``local_fraction`` of the candidates are drawn;
            ``None`` draws all candidates globally.
        local_fraction: The share of local candidates when ``centers`` is given.
        perturbation_scale: Half-width of a local perturbation of one coordinate, as a
            fraction of the box's side.
        seed: Seed of the Sobol scrambling and of the perturbations.

    Returns:
        An ``N x d`` tensor of candidates inside the box, in the dtype of ``bounds``.

    Example:
        >>> bounds = torch.tensor([[0.0] * 3, [1.0] * 3], dtype=torch.float64)
        >>> thompson_candidates(bounds, 100, centers=torch.full((2, 3), 0.5)).shape
        torch.Size([100, 3])
    """
    if bounds.ndim != 2 or bounds.shape[0] != 2 or not (bounds[1] > bounds[0]).all():
        raise ValueError(f"bounds must be a 2 x d tensor with upper > lower; got {bounds}.")
    if num_candidates < 1:
        raise ValueError(f"num_candidates must be positive; got {num_candidates}.")
    if not 0 <= local_fraction <= 1:
        raise ValueError(f"local_fraction must be in [0, 1]; got {local_fraction}.")
    if not perturbation_scale > 0:
        raise ValueError(f"perturbation_scale must be positive; got {perturbation_scale}.")
    dim = bounds.shape[-1]
    generator = torch.Generator().manual_seed(seed)
    num_local = 0 if centers is None else round(local_fraction * num_candidates)
    num_global = num_candidates - num_local
    unit = torch.empty(0, dim, dtype=torch.float64)
    if num_global > 0:
        unit = SobolEngine(dim, scramble=True, seed=seed).draw(num_global, dtype=torch.float64)
    if num_local > 0:
        if centers.ndim != 2 or centers.shape[-1] != dim or centers.shape[0] < 1:
            raise ValueError(f"centers must be a c x {dim} tensor; got {tuple(centers.shape)}.")
        # The local candidates are drawn on the CPU, next to the generator that seeds
        # them, and moved with the global ones: the same candidates on every device.
        unit_centers = ((centers - bounds[0]) / (bounds[1] - bounds[0])).to(
            device="cpu", dtype=torch.float64
        )
        chosen = torch.randint(unit_centers.shape[0], (num_local,), generator=generator)
        base = unit_centers[chosen].clamp(0, 1)
        probability = min(1.0, 20.0 / dim)
        perturbed = torch.rand(num_local, dim, generator=generator, dtype=torch.float64)
        perturbed = perturbed < probability
        # Every local candidate changes at least one coordinate, or it would repeat a centre.
        forced = torch.randint(dim, (num_local,), generator=generator)
        perturbed[torch.arange(num_local), forced] = True
        steps = perturbation_scale * (
            2 * torch.rand(num_local, dim, generator=generator, dtype=torch.float64) - 1
        )
        local = torch.where(perturbed, base + steps, base).clamp(0, 1)
        unit = torch.cat([unit, local])
    candidates = bounds[0] + (bounds[1] - bounds[0]) * unit.to(bounds)
    # Rounding can put a point of the upper face one ulp outside the box.
    return torch.minimum(torch.maximum(candidates, bounds[0]), bounds[1]).contiguous()


def function_bank_scores(
    model: Model, candidates: Tensor, num_draws: int, seed: int, chunk_size: int | None = None
) -> tuple[Tensor, Tensor]:
    r"""Scores of the candidates under the model's functions.

    A finite set of functions is deterministic, so it is evaluated a chunk of candidates
    at a time (one batched forward pass per chunk over the whole bank), which bounds the
    memory of large banks; any other posterior is sampled jointly over all candidates at
    once. By default a chunk holds ``2**16 / s`` candidates for a bank of ``s``
    functions: a 5-member ensemble scores 4,096 candidates in one forward pass, a bank
    of 300 dropout masks 218 candidates per pass.

    Args:
        model: A single-output BoTorch model.
        candidates: An ``N x d`` tensor of candidates (problem units).
        num_draws: For posteriors that are not a finite set of functions, the number of
            joint posterior samples to draw.
        seed: Seed of those samples.
        chunk_size: Candidates per forward pass of a finite set of functions; ``None``
            sizes the chunks from the bank (the first from the model's
            ``function_bank_size`` where it has one, else from a bank of 16).

    Returns:
        A pair ``(scores, weights)``: an ``s x N`` tensor (one row per function of the
        bank, or per joint sample) and the ``s`` function weights (summing to one).
    """
    first = chunk_size or max(
        1, _SCORE_BUDGET // getattr(model, "function_bank_size", _PRESUMED_BANK_SIZE)
    )
    with torch.no_grad():
        posterior = model.posterior(candidates[:first])
        if isinstance(posterior, EnsemblePosterior):
            step = chunk_size or max(1, _SCORE_BUDGET // posterior.ensemble_size)
            chunks = [posterior.values] + [
                model.posterior(candidates[start : start + step]).values
                for start in range(first, candidates.shape[0], step)
            ]
            values, weights = torch.cat(chunks, dim=-2), posterior.weights
        elif isinstance(posterior, GaussianMarginalPosterior):
            raise ValueError(
                f"{type(model).__name__}'s posterior is a set of independent marginals with no "
                "joint function samples to maximise; propose its batches with a q-acquisition "
                "(e.g. qLogExpectedImprovement optimised sequentially)."
            )
        else:
            # A joint sample must cover every candidate; the first posterior may already.
            if first < candidates.shape[0]:
                posterior = model.posterior(candidates)
            with torch.random.fork_rng():
                torch.manual_seed(seed)
                values = posterior.rsample(torch.Size([num_draws]))
            weights = values.new_full((num_draws,), 1.0 / num_draws)
    if values.ndim != 3 or values.shape[-1] != 1:
        raise ValueError(
            "Batch Thompson sampling needs a single-output model without batch dimensions; "
            f"its posterior values have shape {tuple(values.shape)}."
        )
    return values.squeeze(-1), weights


def slot_functions(weights: Tensor, q: int, seed: int) -> Tensor:
    r"""Which function of the bank serves each of the ``q`` slots.

    Functions are assigned by systematic resampling of ``weights``: with equal weights
    every function serves ``q / s`` slots up to rounding, so a batch spreads over the
    whole bank before any function serves a second slot; the order is a seeded
    permutation.

    Args:
        weights: An ``s``-vector of non-negative function weights.
        q: The number of slots.
        seed: Seed of the offset and the order.

    Returns:
        A ``q`` long tensor of function indices.
    """
    generator = torch.Generator().manual_seed(seed)
    probabilities = (weights / weights.sum()).detach().to(device="cpu", dtype=torch.float64)
    offset = torch.rand(1, generator=generator, dtype=torch.float64)
    positions = (offset + torch.arange(q, dtype=torch.float64)) / q
    indices = torch.searchsorted(probabilities.cumsum(0), positions)
    indices = indices.clamp_max(probabilities.numel() - 1)
    return indices[torch.randperm(q, generator=generator)]


def batch_thompson_sampling(
    model: Model,
    bounds: Tensor,
    q: int,
    *,
    X_baseline: Tensor | None = None,
    centers: Tensor | None = None,
    num_candidates: int = 2048,
    local_fraction: float = 0.5,
    perturbation_scale: float = 0.2,
    exclusion_radius: float | None = None,
    seed: int = 0,
    candidates: Tensor | None = None,
) -> Tensor:
    r"""Propose a batch of ``q`` distinct points by Thompson sampling.

    Every slot takes, under its function of the bank (see :func:`slot_functions`), the
    best candidate farther than ``exclusion_radius`` (Euclidean, in the unit cube of
    ``bounds``) from the points already chosen and from ``X_baseline``. The batch is
    therefore free of duplicates whatever ``q`` and the bank size are, as long as the
    candidate set has enough separated points (it is an error otherwise). Among equal
    scores the candidate that comes first in ``candidates`` is taken.

    The candidates are scored once and the picks run on the CPU, each walking its
    function's ranking from where that function's previous pick stopped; distances to
    ``X_baseline`` are computed only for the candidates a walk reaches (see
    :func:`_greedy_picks`), which gives the same batch as excluding every candidate near
    ``X_baseline`` up front, at a fraction of the cost when ``X_baseline`` is large.

    Args:
        model: A fitted single-output model (the package's finite-set models score the
            whole bank in one forward pass; any other model is sampled jointly).
        bounds: A ``2 x d`` tensor of bounds.
        q: The batch size.
        X_baseline: An optional ``n x d`` tensor of evaluated points, never proposed
            again. The distances to them are computed on its device.
        centers: An optional ``c x d`` tensor of points around which
            ``local_fraction`` of the candidates are drawn (see
            :func:`thompson_candidates`).
        num_candidates: Candidates scored by every function.
        local_fraction: The share of candidates drawn around ``centers``.
        perturbation_scale: Half-width of a local perturbation, as a fraction of the
            side of ``bounds`` (see :func:`thompson_candidates`).
        exclusion_radius: The smallest distance between two proposals in the unit cube;
            ``None`` uses ``0.01 sqrt(d)`` (one percent of the cube's diagonal).
        seed: Seed of the candidates, the slot assignment and joint samples.
        candidates: An optional ``N x d`` tensor of candidates inside ``bounds`` (e.g.
            TuRBO-1's) to choose from instead of drawing them; ``centers``,
            ``num_candidates``, ``local_fraction`` and ``perturbation_scale`` are then
            unused.

    Returns:
        A ``q x d`` tensor of proposals in the units and dtype of ``bounds``.

    Example:
        >>> X = batch_thompson_sampling(model, bounds, q=100, X_baseline=train_X,
        ...                             centers=train_X[train_Y.squeeze(-1).topk(5).indices])
    """
    if q < 1:
        raise ValueError(f"q must be positive; got {q}.")
    dim = bounds.shape[-1]
    radius = 0.01 * math.sqrt(dim) if exclusion_radius is None else exclusion_radius
    if not radius >= 0:
        raise ValueError(f"exclusion_radius must be non-negative; got {exclusion_radius}.")
    if candidates is None:
        candidates = thompson_candidates(
            bounds,
            num_candidates,
            centers=centers,
            local_fraction=local_fraction,
            perturbation_scale=perturbation_scale,
            seed=seed,
        )
    elif candidates.dim() != 2 or candidates.shape[-1] != dim:
        raise ValueError(f"candidates must have shape N x {dim}; got {tuple(candidates.shape)}.")
    scores, weights = function_bank_scores(model, candidates, num_draws=q, seed=seed)
    functions = slot_functions(weights, q, seed)
    lower, scale = bounds[0], bounds[1] - bounds[0]
    evaluated = None
    if X_baseline is not None and X_baseline.numel() > 0:
        # A NaN point would be invisible to the distance screens: refuse it.
        if not X_baseline.isfinite().all():
            raise ValueError("X_baseline contains NaN or infinite values.")
        # The evaluated points may be many and on a GPU: they stay there, and only the
        # candidates of a distance block and its results travel.
        device = X_baseline.device
        evaluated = (X_baseline.to(dtype=candidates.dtype) - lower.to(device)) / scale.to(device)
        # Their squared norms, once for all the distance blocks' screens.
        evaluated = torch.cat([evaluated, evaluated.square().sum(dim=-1, keepdim=True)], dim=-1)
    used, slots = functions.unique(return_inverse=True)
    # One copy of the used functions' scores and of the candidates to the CPU, so that
    # the picks read scalars there instead of synchronising with the device each time.
    ranking = scores[used.to(scores.device)].cpu().sort(dim=-1, descending=True, stable=True)
    unit = ((candidates - lower) / scale).cpu()
    chosen = _greedy_picks(ranking.values, ranking.indices, slots, unit, evaluated, radius)
    return candidates[chosen.to(candidates.device)]


def _greedy_picks(
    ranked_scores: Tensor,
    ranking: Tensor,
    slots: Tensor,
    unit: Tensor,
    evaluated: Tensor | None,
    radius: float,
) -> Tensor:
    r"""The candidates the slots pick, in slot order.

    The greedy rule: slot ``i`` takes the best-scoring candidate of its function among
    the *available* ones, those farther than ``radius`` from every evaluated point and
    from the picks of slots ``0, ..., i - 1``, the first such candidate in index order
    among equal scores (``argmax``'s choice); too few available candidates is an error.

    Each function's candidates are ranked once, by a stable descending sort (equal
    scores in index order; NaN first, as ``argmax`` takes a NaN), so its best available
    candidate is the first available one of its ranking. Availability only ever shrinks
    (the picks only grow), so a candidate that a slot's walk passes over is unavailable
    for every later slot too: each function keeps a cursor into its ranking that only
    moves forward, and the walks find exactly the candidates of the eager rule. A
    candidate's distance to the evaluated points is computed when a walk first reaches
    it, together with the next not yet known candidates of that ranking (twice as many
    as the function has slots left, at most ``_EXCLUSION_BLOCK``); its distances to the
    picks are checked against those (at most ``q``) picks, ``_WALK_STEP`` candidates at
    a time.

    Args:
        ranked_scores: An ``r x N`` tensor, each row one function's scores sorted as
            ``ranking`` orders them.
        ranking: An ``r x N`` long tensor, each row the candidate indices of one
            function, best first (ties in index order).
        slots: A ``q`` long tensor: the row of ``ranking`` that serves each slot.
        unit: An ``N x d`` CPU tensor of candidates in the unit cube.
        evaluated: An optional ``n x (d + 1)`` tensor of evaluated points in the unit
            cube with their squared norms last (see :func:`_separated`), on any device.
        radius: The exclusion radius.

    Returns:
        A ``q`` long CPU tensor of candidate indices.
    """
    num_candidates = ranking.shape[-1]
    # The bookkeeping is NumPy's: its scalar reads and small slices cost a fraction of
    # a tensor operation's dispatch. The distances stay torch's, rounded as the caller's.
    orders = ranking.numpy()
    cursors = [0] * ranking.shape[0]
    remaining = np.bincount(slots.numpy(), minlength=ranking.shape[0])
    # Whether a candidate's distance to the evaluated points is known yet, and, where it
    # is, whether the candidate is farther than the radius from all of them.
    known = np.full(num_candidates, evaluated is None)
    clear = np.ones(num_candidates, dtype=bool)
    chosen = unit.new_empty(slots.numel(), unit.shape[-1])
    picks: list[int] = []
    for row in slots.tolist():
        order, cursor = orders[row], cursors[row]
        while True:
            if cursor == num_candidates:
                raise _too_few_separated(len(picks), slots.numel(), radius)
            if not known[order[cursor]]:
                rest = order[cursor:]
                block = rest[~known[rest]][: min(_EXCLUSION_BLOCK, 2 * remaining[row])]
                points = unit[torch.from_numpy(block)].to(evaluated.device)
                clear[block] = _separated(points, evaluated, radius).cpu().numpy()
                known[block] = True
            window = order[cursor : cursor + _WALK_STEP]
            unknown = np.flatnonzero(~known[window])
            if unknown.size > 0:
                window = window[: unknown[0]]
            positions = np.flatnonzero(clear[window])
            if picks and positions.size > 0:
                gaps = (
                    unit[torch.from_numpy(window[positions])].unsqueeze(-2) - chosen[: len(picks)]
                )
                positions = positions[(gaps.norm(dim=-1) > radius).all(dim=-1).numpy()]
            if positions.size > 0:
                break
            cursor += window.size
        position = cursor + int(positions[0])
        pick = int(order[position])
        # With no available score above -inf, argmax over the masked scores returns
        # index 0, an unavailable candidate unless it is this one: the eager rule's error.
        if ranked_scores[row, position] == -math.inf and pick != 0:
            raise _too_few_separated(len(picks), slots.numel(), radius)
        chosen[len(picks)] = unit[pick]
        picks.append(pick)
        cursors[row] = position + 1
        remaining[row] -= 1
    return torch.tensor(picks)


def _too_few_separated(num_separated: int, q: int, radius: float) -> ValueError:
    return ValueError(
        f"Only {num_separated} of the {q} proposals are separated by exclusion_radius "
        f"{radius:.3g}; use more candidates or a smaller radius."
    )


def _separated(
    points: Tensor, others: Tensor, radius: float, chunk_size: int | None = None
) -> Tensor:
    r"""Whether each of the ``N`` points is farther than ``radius`` from every one of the
    ``n`` others, on their device (both must be on one device), ``chunk_size`` others at
    a time (``None``: ``2**19 / N`` of them), so memory stays ``O(N chunk_size)``.

    The answer is that of the distances ``(point - other).norm()``, rounded exactly as
    the distances between candidates in :func:`_greedy_picks`, so it does not depend on
    the chunks or on how many points are asked at once (a lazy caller gets an eager
    caller's answers bit for bit), and a point sitting on another is never separated
    from it. A matrix product ``|y|^2 - 2 x.y`` screens each chunk; it is fast but
    rounded differently for every shape, and off by up to its rounding bound, so only
    the pairs it cannot place on one side of the radius within that bound (rare unless
    the point is near one of the others) are computed exactly.

    Args:
        points: An ``N x d`` tensor.
        others: An ``n x (d + 1)`` tensor: the others' coordinates and, last, their
            squared norms (the screen reads both in one matrix product).
        radius: The non-negative separation radius.
        chunk_size: The others screened at once.

    Returns:
        An ``N`` boolean tensor.
    """
    num_points, dim = points.shape
    chunk_size = chunk_size or max(1, _DISTANCE_BUDGET // max(1, num_points))
    points_squared = points.square().sum(dim=-1)
    # The screen's rounding bound, with that of the exact distances and of the radius
    # in the points' dtype, relative to |x|^2 + |y|^2 + radius^2 (with room to spare); a
    # float32 product may run in TF32 or bfloat16 unless the matmul precision is "highest".
    eps = torch.finfo(points.dtype).eps
    if points.dtype == torch.float32 and torch.get_float32_matmul_precision() != "highest":
        eps = 2.0**-7
    tolerance = (4 * dim + 16) * eps
    # [-2 x, 1] . [y, |y|^2] = |y|^2 - 2 x.y: the squared distance less |x|^2.
    scaled = torch.cat([-2 * points, torch.ones_like(points[:, :1])], dim=-1)
    separated = torch.ones(num_points, dtype=torch.bool, device=points.device)
    for start in range(0, others.shape[0], chunk_size):
        chunk = others[start : start + chunk_size]
        screen = scaled @ chunk.mT
        margin = tolerance * (points_squared + chunk[:, -1].amax() + radius**2)
        threshold = (radius**2 - points_squared + margin).unsqueeze(-1)
        near = (screen.amin(dim=-1, keepdim=True) <= threshold).squeeze(-1)
        if near.any():
            rows = near.nonzero().squeeze(-1)
            pairs, columns = (screen[rows] <= threshold[rows]).nonzero(as_tuple=True)
            distances = (points[rows[pairs]] - chunk[columns, :dim]).norm(dim=-1)
            separated[rows[pairs[~(distances > radius)]]] = False
    return separated
