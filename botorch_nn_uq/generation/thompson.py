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

import torch
from botorch.models.model import Model
from botorch.posteriors.ensemble import EnsemblePosterior
from torch import Tensor
from torch.quasirandom import SobolEngine

from botorch_nn_uq.posteriors.gaussian import GaussianMarginalPosterior


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
    model: Model, candidates: Tensor, num_draws: int, seed: int, chunk_size: int = 512
) -> tuple[Tensor, Tensor]:
    r"""Scores of the candidates under the model's functions.

    A finite set of functions is deterministic, so it is evaluated ``chunk_size``
    candidates at a time (one batched forward pass per chunk over the whole bank), which
    bounds the memory of large banks; any other posterior is sampled jointly over all
    candidates at once.

    Args:
        model: A single-output BoTorch model.
        candidates: An ``N x d`` tensor of candidates (problem units).
        num_draws: For posteriors that are not a finite set of functions, the number of
            joint posterior samples to draw.
        seed: Seed of those samples.
        chunk_size: Candidates per forward pass of a finite set of functions.

    Returns:
        A pair ``(scores, weights)``: an ``s x N`` tensor (one row per function of the
        bank, or per joint sample) and the ``s`` function weights (summing to one).
    """
    with torch.no_grad():
        posterior = model.posterior(candidates[:chunk_size])
        if isinstance(posterior, EnsemblePosterior):
            chunks = [posterior.values] + [
                model.posterior(candidates[start : start + chunk_size]).values
                for start in range(chunk_size, candidates.shape[0], chunk_size)
            ]
            values, weights = torch.cat(chunks, dim=-2), posterior.weights
        elif isinstance(posterior, GaussianMarginalPosterior):
            raise ValueError(
                f"{type(model).__name__}'s posterior is a set of independent marginals with no "
                "joint function samples to maximise; propose its batches with a q-acquisition "
                "(e.g. qLogExpectedImprovement optimised sequentially)."
            )
        else:
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
    candidate set has enough separated points (it is an error otherwise).

    Args:
        model: A fitted single-output model (the package's finite-set models score the
            whole bank in one forward pass; any other model is sampled jointly).
        bounds: A ``2 x d`` tensor of bounds.
        q: The batch size.
        X_baseline: An optional ``n x d`` tensor of evaluated points, never proposed
            again.
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
    scale = bounds[1] - bounds[0]
    unit = (candidates - bounds[0]) / scale
    available = torch.ones(candidates.shape[0], dtype=torch.bool, device=candidates.device)
    if X_baseline is not None and X_baseline.numel() > 0:
        evaluated = (X_baseline.to(candidates) - bounds[0]) / scale
        available &= _distance_to_nearest(unit, evaluated) > radius
    scores = scores.to(torch.float64)
    chosen = []
    # q greedy picks over a precomputed s x N score matrix: no model call inside.
    for function in functions.tolist():
        masked = scores[function].masked_fill(~available, -math.inf)
        best = int(masked.argmax())
        if not available[best]:
            raise ValueError(
                f"Only {len(chosen)} of the {q} proposals are separated by exclusion_radius "
                f"{radius:.3g}; use more candidates or a smaller radius."
            )
        chosen.append(best)
        available &= (unit - unit[best]).norm(dim=-1) > radius
    return candidates[chosen]


def _distance_to_nearest(points: Tensor, others: Tensor, chunk_size: int = 1024) -> Tensor:
    r"""Each of the ``N`` points' distance to its nearest of the ``n`` others, ``chunk_size``
    others at a time, so memory stays ``O(N chunk_size)`` however many points were
    evaluated."""
    nearest = points.new_full(points.shape[:1], math.inf)
    for start in range(0, others.shape[0], chunk_size):
        chunk = torch.cdist(points, others[start : start + chunk_size]).min(dim=-1).values
        nearest = torch.minimum(nearest, chunk)
    return nearest
