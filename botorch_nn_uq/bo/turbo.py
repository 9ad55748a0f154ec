r"""TuRBO-1 (Eriksson et al., NeurIPS 2019) as a proposer of the BO core, for any
surrogate.

TuRBO-1 keeps one trust region: a box around the best point of the current run, whose
side doubles after ``success_tolerance`` improving batches in a row and halves after
``failure_tolerance`` batches without improvement. Unlike
:class:`~botorch_nn_uq.bo.proposers.TrustRegionProposer` (the package's cube, with the
surrogate fitted on all data), it is TuRBO's own machinery:

- the surrogate is fitted on the data of the current run only: when the side falls below
  ``length_min`` the region **restarts**, the run's data are set aside, and a fresh
  scrambled Sobol design of ``n_initial`` points (proposed ``q`` at a time, rounded up to
  whole batches) starts a new run; evaluations keep counting and the optimizer's best
  point is over all of them;
- the region's sides are weighted by the model's ARD lengthscales where it has them
  (``w = ls / mean(ls)``, then ``w / prod(w)^(1/d)``: the volume of a cube of side
  ``length``), and a cube otherwise (a network has no lengthscales);
- the candidates are ``min(5000, max(2000, 200 d))`` Sobol points in the region, each
  coordinate taken from the Sobol point with probability ``min(20 / d, 1)`` (at least
  one per candidate) and from the centre otherwise;
- a batch is ``q`` distinct candidates by Thompson sampling
  (``MaxPosteriorSampling(replacement=False)``), with the joint posterior over the
  candidates factorised exactly by Cholesky, as the tutorial does (GPyTorch's default
  above 4,096 points is an approximate Lanczos root; exact is also faster there, 3.5 CPU
  s against 4.9 s for 5,000 candidates in 60-D).

The defaults are those of BoTorch's TuRBO-1 tutorial (success tolerance 10; the paper's
code uses 3). Sides are fractions of the problem's box (the unit cube after
normalisation).
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

import gpytorch
import torch
from botorch.generation import MaxPosteriorSampling
from botorch.models.model import Model
from botorch.utils.sampling import manual_seed
from torch import Tensor
from torch.quasirandom import SobolEngine

from botorch_nn_uq.bo.acquisitions import AcquisitionContext
from botorch_nn_uq.bo.objectives import Objective
from botorch_nn_uq.bo.proposers import Proposal, Proposer, check_local_fit, local_fit_bounds
from botorch_nn_uq.bo.trust_region import TrustRegion
from botorch_nn_uq.checks import is_int_in_range
from botorch_nn_uq.generation import batch_thompson_sampling


def turbo_num_candidates(dim: int) -> int:
    r"""TuRBO's candidate count, ``min(5000, max(2000, 200 d))``."""
    return min(5000, max(2000, 200 * dim))


def lengthscale_weights(model: Model, dim: int) -> Tensor | None:
    r"""TuRBO's side weights from a model's ARD lengthscales.

    Args:
        model: A fitted model.
        dim: The input dimension ``d``.

    Returns:
        A ``d``-tensor ``w / prod(w)^(1/d)`` with ``w = ls / mean(ls)`` for the first
        kernel of the model with ``d`` lengthscales (e.g. a ``SingleTaskGP``'s), or
        ``None`` if the model has none.
    """
    kernel = getattr(model, "covar_module", None)
    if kernel is None:
        return None
    for module in kernel.modules():
        if getattr(module, "has_lengthscale", False) and module.lengthscale.shape[-1] == dim:
            lengthscale = module.lengthscale.detach().reshape(-1, dim)[0]
            weights = lengthscale / lengthscale.mean()
            return weights / weights.prod().pow(1.0 / dim)
    return None


def turbo_candidates(
    center: Tensor, lower: Tensor, upper: Tensor, num_candidates: int, seed: int
) -> Tensor:
    r"""TuRBO's candidates in a region of the unit cube: Sobol points, each coordinate
    taken from the Sobol point with probability ``min(20 / d, 1)`` (at least one per
    candidate) and from the centre otherwise.

    Args:
        center: The ``d``-vector centre (unit cube).
        lower: The region's ``d`` lower bounds (unit cube).
        upper: The region's ``d`` upper bounds (unit cube).
        num_candidates: ``N``.
        seed: Seeds the Sobol scrambling and the perturbation mask.

    Returns:
        An ``N x d`` tensor of candidates in the region (unit cube).
    """
    dim = center.shape[-1]
    sobol = SobolEngine(dim, scramble=True, seed=seed).draw(num_candidates, dtype=center.dtype)
    perturbed = lower + (upper - lower) * sobol.to(center.device)
    generator = torch.Generator().manual_seed(seed)
    probability = min(20.0 / dim, 1.0)
    mask = torch.rand(num_candidates, dim, generator=generator) <= probability
    unchanged = (~mask.any(-1)).nonzero().squeeze(-1)
    mask[unchanged, torch.randint(dim, (unchanged.numel(),), generator=generator)] = True
    mask = mask.to(center.device)
    return torch.where(mask, perturbed, center.expand(num_candidates, dim))


def _away_from(unit: Tensor, avoid: Tensor, q: int) -> Tensor:
    r"""The candidates (``N x d``, unit cube) farther than batch Thompson sampling's
    exclusion radius (``0.01 sqrt(d)``) from every point of ``avoid`` (``p x d``, unit
    cube): TuRBO-1 does not propose a pending or failed point (or a near duplicate of
    one) again; at least ``q`` must remain."""
    radius = 0.01 * math.sqrt(unit.shape[-1])
    kept = unit[torch.cdist(unit, avoid.to(unit)).min(-1).values > radius]
    if kept.shape[0] < q:
        raise ValueError(
            f"TuRBO has {kept.shape[0]} candidates away from the {avoid.shape[0]} pending and "
            f"failed points, fewer than q = {q}; tell pending results first, or give it more "
            "num_candidates."
        )
    return kept


class TurboProposer(Proposer):
    r"""TuRBO-1: Thompson sampling in a trust region, with restarts that set the run's
    data aside (see the module's description).

    The batch size and a restart design's size come from the run, not from the
    proposer's arguments: the batch size ``q`` is that of the first BO step's ``ask``
    (it sets the failure tolerance and the restart design's batches; later steps must
    ask for the same ``q``), and a restart design has as many points as the run's
    initial design (TuRBO's rule), rounded up to whole batches.

    In an asynchronous run (points asked while others are pending) the pending points
    are in flight: the candidates leave them and the failed points out (and their near
    duplicates), and they count for nothing until told. Each ``tell`` updates the region
    once, as a batch of the results it tells, judged against the incumbent at the time
    it is told: a result that arrives late counts when it arrives. A result of a point
    asked before a restart and told after it joins the new run's data and counts toward
    its restart design; once a restart design is asked in full, further asks propose
    from the model of the new run's told results.

    Args:
        success_tolerance: Improving batches in a row that double the side.
        failure_tolerance: Batches without improvement in a row that halve it; ``None``:
            ``ceil(max(4 / q, d / q))``.
        length_init: The side at the start and after a restart.
        length_min: Below this side the region restarts.
        length_max: The largest side.
        num_candidates: Thompson-sampling candidates; ``None``:
            :func:`turbo_num_candidates`.
        batch_thompson: Choose the batch among TuRBO's candidates with the package's
            batch Thompson sampling
            (:func:`~botorch_nn_uq.generation.batch_thompson_sampling`: every slot the
            best candidate of its function of the model's bank, at least 1% of the
            region's diagonal from the points already chosen and the run's evaluated
            points) instead of ``MaxPosteriorSampling``, which gives an ensemble of
            ``K`` members at most ``K`` maximisers and their next-best neighbours.
        local_fit: ``None``, or a region-local fit: the surrogate normalises its inputs
            to the region's cube grown ``local_fit`` (at least 1) times around the
            incumbent (see
            :class:`~botorch_nn_uq.bo.proposers.TrustRegionProposer`).

    Example:
        >>> optimizer = BayesianOptimizer(
        ...     bounds, surrogate="gp", proposer=TurboProposer(), n_initial=20
        ... )
        >>> X = optimizer.ask()  # the initial design (20 points): the restart design's size
        >>> optimizer.tell(X, f(X))
        >>> X = optimizer.ask(10)  # the batch size of every step of the run
    """

    def __init__(
        self,
        *,
        success_tolerance: int = 10,
        failure_tolerance: int | None = None,
        length_init: float = 0.8,
        length_min: float = 0.5**7,
        length_max: float = 1.6,
        num_candidates: int | None = None,
        batch_thompson: bool = False,
        local_fit: float | None = None,
    ) -> None:
        if num_candidates is not None and not is_int_in_range(num_candidates, minimum=1):
            raise ValueError(f"num_candidates must be a positive integer; got {num_candidates!r}.")
        self.region_options = {
            "success_tolerance": success_tolerance,
            "failure_tolerance": failure_tolerance,
            "length_init": length_init,
            "length": length_init,
            "length_min": length_min,
            "length_max": length_max,
        }
        TrustRegion(1, 1, **self.region_options)  # checks the options
        self.num_candidates = num_candidates
        self.batch_thompson = bool(batch_thompson)
        self.local_fit = check_local_fit(local_fit)
        self.region: TrustRegion | None = None
        #: The batch size of the run's BO steps (``None`` before the first one).
        self.batch_size: int | None = None
        #: The size of the run's initial design (``None`` before it was told).
        self.n_initial: int | None = None
        #: The first row of the current run (rows before it were set aside by restarts).
        self.segment_start = 0
        #: Rows told so far.
        self.num_told = 0
        #: Points of the current restart design not yet told (0: no design under way).
        self.design_untold = 0
        #: The restart design's points not yet proposed (``None``: not drawn yet).
        self.design: Tensor | None = None

    def check(self, objective: Objective) -> None:
        if objective.requires_target or objective.mc_objective is not None:
            raise ValueError(
                "TuRBO's Thompson sampling maximises the model's single output; it serves "
                f"minimisation and maximisation, not {objective.describe()}."
            )

    def check_batch_size(self, q: int, dim: int) -> None:
        r"""Refuse a batch of another size than the run's first BO step (which set the
        tolerances and the restart design), or of more points than TuRBO has candidates
        (Thompson sampling picks distinct ones)."""
        if self.batch_size is not None and q != self.batch_size:
            raise ValueError(
                f"TuRBO's run has batches of {self.batch_size} (its first step set its "
                f"tolerances and restart design); got q = {q}."
            )
        num_candidates = self.num_candidates or turbo_num_candidates(dim)
        if q > num_candidates:
            raise ValueError(
                f"TuRBO cannot propose q = {q} points from its {num_candidates} candidates "
                f"(Thompson sampling picks distinct ones); give TurboProposer num_candidates "
                f"of at least {q}, or use a smaller batch."
            )

    @property
    def design_size(self) -> int:
        r"""A restart design's size: the initial design's rounded up to whole batches
        (0 before the first BO step)."""
        if self.batch_size is None or self.n_initial is None:
            return 0
        return math.ceil(self.n_initial / self.batch_size) * self.batch_size

    def fit_rows(self, num_rows: int) -> slice:
        return slice(self.segment_start, num_rows)

    def needs_model(self) -> bool:
        # A restart design asked in full but not yet told in full: further asks propose
        # from the model of the new run's told results.
        return self.design_untold == 0 or self._design_asked()

    def _design_asked(self) -> bool:
        return self.design is not None and self.design.shape[0] == 0

    def start(self, n_initial: int) -> None:
        self.n_initial = n_initial

    def fit_bounds(self, bounds: Tensor, center: Tensor | None) -> Tensor:
        return local_fit_bounds(self.region, self.local_fit, bounds, center)

    def observe(self, X: Tensor, values: Tensor, scores: Tensor) -> None:
        if self.region is None:
            # The initial design: its size is a restart design's (told by start, or the
            # size of a state's first tell); the batch size of the BO steps sets the
            # region's failure tolerance batch by batch.
            if self.n_initial is None:
                self.n_initial = X.shape[0]
            self.region = TrustRegion(X.shape[-1], **self.region_options)
        self.num_told += X.shape[0]
        region = self.region
        if self.design_untold > 0:
            # A restart design: it sets the new run's incumbent, and counts for nothing else.
            self.design_untold = max(self.design_untold - X.shape[0], 0)
            region.best_value = max(region.best_value, float((-scores).max()))
            return
        restarts = region.restarts
        region.update(-scores)
        if region.restarts > restarts:
            self.segment_start = self.num_told
            region.best_value, region.successes, region.failures = -math.inf, 0, 0
            self.design_untold, self.design = self.design_size, None

    def propose(
        self, model: Model | None, context: AcquisitionContext, q: int, random: torch.Generator
    ) -> Proposal:
        bounds = context.bounds
        self.check_batch_size(q, bounds.shape[-1])
        self.batch_size = q
        region = self.region
        details = {"trust_region_length": region.length, "restarts": float(region.restarts)}
        if self.design_untold > 0 and not self._design_asked():
            if self.design is None:
                self.design = SobolEngine(bounds.shape[-1], scramble=True, seed=context.seed).draw(
                    self.design_size, dtype=bounds.dtype
                )
            unit, self.design = self.design[:q], self.design[q:]
            X = bounds[0] + (bounds[1] - bounds[0]) * unit.to(bounds.device)
            return Proposal(X, {**details, "restart_design": 1.0})
        dim = bounds.shape[-1]
        span = bounds[1] - bounds[0]
        center = (context.center - bounds[0]) / span
        weights = lengthscale_weights(model, dim)
        half = 0.5 * region.length * (torch.ones_like(center) if weights is None else weights)
        half = half.to(center)
        lower, upper = (center - half).clamp(0, 1), (center + half).clamp(0, 1)
        num_candidates = self.num_candidates or turbo_num_candidates(dim)
        unit = turbo_candidates(center, lower, upper, num_candidates, context.seed)
        avoid = context.X_avoid
        if avoid is not None:
            unit = _away_from(unit, (avoid - bounds[0]) / span, q)
        candidates = bounds[0] + span * unit
        if self.batch_thompson:
            region_bounds = torch.stack([bounds[0] + span * lower, bounds[0] + span * upper])
            X = batch_thompson_sampling(
                model,
                region_bounds,
                q,
                X_baseline=context.train_X
                if avoid is None
                else torch.cat([context.train_X, avoid]),
                candidates=candidates,
                seed=context.seed,
            )
            return Proposal(X.to(bounds).clamp(bounds[0], bounds[1]), details)
        with (
            manual_seed(context.seed),
            torch.no_grad(),
            gpytorch.settings.max_cholesky_size(math.inf),
        ):
            X = MaxPosteriorSampling(model, replacement=False)(candidates, num_samples=q)
        return Proposal(X.detach().to(bounds).clamp(bounds[0], bounds[1]), details)

    def state_dict(self) -> dict[str, Any]:
        return {
            "region": None if self.region is None else asdict(self.region),
            "segment_start": self.segment_start,
            "num_told": self.num_told,
            "design_untold": self.design_untold,
            "design": None if self.design is None else self.design.tolist(),
            "batch_size": self.batch_size,
            "n_initial": self.n_initial,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        expected = {"region", "segment_start", "num_told", "design_untold", "design"}
        if set(state) != expected | {"batch_size", "n_initial"}:
            raise ValueError(f"Unexpected TuRBO state {sorted(state)}.")
        counts = [state[name] for name in ("segment_start", "num_told", "design_untold")]
        if not all(is_int_in_range(count) for count in counts):
            raise ValueError(f"TuRBO's counts must be non-negative integers; got {counts}.")
        sizes = [state["batch_size"], state["n_initial"]]
        if not all(size is None or is_int_in_range(size, minimum=1) for size in sizes):
            raise ValueError(f"TuRBO's batch and design sizes must be positive; got {sizes}.")
        self.batch_size, self.n_initial = sizes
        segment_start, num_told, design_untold = counts
        if segment_start > num_told or design_untold > self.design_size:
            raise ValueError(
                f"Inconsistent TuRBO state: segment start {segment_start}, {num_told} told, "
                f"{design_untold} untold design points (a design holds {self.design_size})."
            )
        design = state["design"]
        if design is not None:
            design = torch.tensor(design, dtype=torch.float64)
            # An exhausted design is saved as an empty list.
            shaped = design.dim() == 2 or design.numel() == 0
            if not shaped or design.shape[0] > self.design_size:
                raise ValueError(f"TuRBO's design must be a list of points; got {design.shape}.")
            if not ((design >= 0) & (design <= 1)).all():
                raise ValueError("TuRBO's design must lie in the unit cube.")
        self.region = None if state["region"] is None else TrustRegion(**state["region"])
        self.segment_start, self.num_told, self.design_untold = counts
        self.design = design

    def to_config(self) -> dict[str, Any]:
        options = {key: value for key, value in self.region_options.items() if key != "length"}
        return {
            "type": "turbo",
            "num_candidates": self.num_candidates,
            "batch_thompson": self.batch_thompson,
            "local_fit": self.local_fit,
            **options,
        }

    def describe(self) -> str:
        return "TuRBO-1 (Thompson sampling in a trust region with restarts)"
