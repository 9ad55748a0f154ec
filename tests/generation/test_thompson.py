"""Tests of batch Thompson sampling over function banks."""

import math

import pytest
import torch
from botorch.models import SingleTaskGP
from botorch.models.model import Model
from botorch.models.transforms import Normalize, Standardize
from botorch.posteriors.ensemble import EnsemblePosterior
from torch import Tensor

from botorch_nn_uq.generation import batch_thompson_sampling, thompson
from botorch_nn_uq.generation.thompson import (
    function_bank_scores,
    slot_functions,
    thompson_candidates,
)
from botorch_nn_uq.metrics import batch_diversity
from botorch_nn_uq.models import DeepEnsemble, MCDropout
from tests.testing import tolerances

# The tests that fit models stay in float64 (one fit each); the candidate, slot and
# distance helpers run in both dtypes.
DTYPE = torch.float64
BOUNDS = torch.tensor([[-2.0, 0.0, 0.0], [2.0, 1.0, 3.0]], dtype=DTYPE)


def _data(n=30, seed=0):
    generator = torch.Generator().manual_seed(seed)
    unit = torch.rand(n, 3, generator=generator, dtype=DTYPE)
    X = BOUNDS[0] + (BOUNDS[1] - BOUNDS[0]) * unit
    Y = -((unit - 0.3) ** 2).sum(-1, keepdim=True)
    return X, Y


def _transforms():
    return {"input_transform": Normalize(3, bounds=BOUNDS), "outcome_transform": Standardize(1)}


@pytest.fixture(scope="module")
def ensemble():
    X, Y = _data()
    return DeepEnsemble(X, Y, ensemble_size=3, hidden_widths=(16,), epochs=50, **_transforms()).fit(
        seed=0
    )


def test_candidates_lie_in_the_box_and_local_ones_change_few_coordinates(tkwargs):
    bounds = torch.tensor([[0.0] * 100, [1.0] * 100], **tkwargs)
    center = torch.full((1, 100), 0.5, **tkwargs)
    candidates = thompson_candidates(bounds, 400, centers=center, local_fraction=0.5, seed=1)
    assert candidates.shape == (400, 100) and candidates.dtype == tkwargs["dtype"]
    assert candidates.device == tkwargs["device"]
    assert ((candidates >= 0) & (candidates <= 1)).all()
    local = candidates[200:]
    changed = (local != 0.5).sum(-1).to(tkwargs["dtype"])
    # Each coordinate moves with probability 20 / d, and at least one always moves.
    assert changed.min() >= 1 and 15 < changed.mean() < 25
    assert (local - 0.5).abs().max() <= 0.2 + tolerances(tkwargs["dtype"])["atol"]
    assert torch.equal(candidates, thompson_candidates(bounds, 400, centers=center, seed=1))
    assert not torch.equal(candidates, thompson_candidates(bounds, 400, centers=center, seed=2))


def test_slots_spread_over_the_whole_bank_before_repeating_a_function(tkwargs):
    functions = slot_functions(torch.ones(5, **tkwargs), q=23, seed=0)
    counts = torch.bincount(functions, minlength=5)
    assert counts.min() >= 4 and counts.max() <= 5 and counts.sum() == 23
    weights = torch.tensor([3.0, 1.0], **tkwargs)
    weighted = torch.bincount(slot_functions(weights, q=40, seed=0), minlength=2)
    assert weighted.tolist() == [30, 10]


@pytest.mark.parametrize("q", [2, 20, 60])
def test_a_batch_larger_than_the_ensemble_has_no_duplicates(ensemble, q):
    X, _ = _data()
    proposals = batch_thompson_sampling(
        ensemble, BOUNDS, q, X_baseline=X, centers=X[:3], num_candidates=1024, seed=0
    )
    assert proposals.shape == (q, 3)
    diversity = batch_diversity(proposals, BOUNDS)
    radius = 0.01 * math.sqrt(3)
    assert diversity.duplicates == 0 and diversity.min_distance > radius
    unit_X = (X - BOUNDS[0]) / (BOUNDS[1] - BOUNDS[0])
    unit_proposals = (proposals - BOUNDS[0]) / (BOUNDS[1] - BOUNDS[0])
    assert torch.cdist(unit_proposals, unit_X).min() > radius


def test_each_slot_takes_the_best_free_candidate_of_its_function(ensemble):
    candidates = thompson_candidates(BOUNDS, 256, seed=3)
    scores, weights = function_bank_scores(ensemble, candidates, num_draws=4, seed=3)
    assert scores.shape == (3, 256) and torch.allclose(
        weights.sum(), torch.tensor(1.0, dtype=DTYPE)
    )
    proposals = batch_thompson_sampling(ensemble, BOUNDS, 3, num_candidates=256, seed=3)
    functions = slot_functions(weights, 3, 3)
    # Three slots over three members: every member proposes its own maximiser.
    assert sorted(functions.tolist()) == [0, 1, 2]
    unit = (candidates - BOUNDS[0]) / (BOUNDS[1] - BOUNDS[0])
    free = torch.ones(256, dtype=torch.bool)
    for function, proposal in zip(functions.tolist(), proposals, strict=True):
        best = scores[function].masked_fill(~free, -math.inf).argmax()
        assert torch.equal(proposal, candidates[best])
        free &= (unit - unit[best]).norm(dim=-1) > 0.01 * math.sqrt(3)


def test_given_candidates_replace_the_drawn_ones(ensemble):
    candidates = thompson_candidates(BOUNDS, 128, seed=7)
    proposals = batch_thompson_sampling(ensemble, BOUNDS, 6, candidates=candidates, seed=0)
    # Every proposal is one of the given candidates (the drawn set would not contain them).
    assert (torch.cdist(proposals, candidates).min(dim=-1).values < 1e-6).all()
    drawn = batch_thompson_sampling(ensemble, BOUNDS, 6, num_candidates=128, seed=0)
    assert not torch.equal(proposals, drawn)
    with pytest.raises(ValueError, match="candidates must have shape N x 3"):
        batch_thompson_sampling(ensemble, BOUNDS, 2, candidates=candidates[:, :2])


def test_proposals_are_reproducible_from_the_seed(ensemble):
    first = batch_thompson_sampling(ensemble, BOUNDS, 10, num_candidates=512, seed=5)
    again = batch_thompson_sampling(ensemble, BOUNDS, 10, num_candidates=512, seed=5)
    other = batch_thompson_sampling(ensemble, BOUNDS, 10, num_candidates=512, seed=6)
    assert torch.equal(first, again) and not torch.equal(first, other)


def test_a_mask_bank_larger_than_q_is_used_and_can_be_regrown():
    X, Y = _data()
    model = MCDropout(X, Y, hidden_widths=(16,), num_masks=4, epochs=30, **_transforms()).fit(
        seed=0
    )
    before = model.posterior(X[:2]).mean
    model.resample_function_bank(50, seed=1)
    assert model.posterior(X[:2]).values.shape[-3] == 50
    assert not torch.allclose(before, model.posterior(X[:2]).mean)
    masks = [mask.clone() for mask in model.masks]
    model.resample_function_bank(50, seed=1)
    assert all(torch.equal(a, b) for a, b in zip(masks, model.masks, strict=True))
    proposals = batch_thompson_sampling(model, BOUNDS, 40, num_candidates=512, seed=0)
    assert batch_diversity(proposals, BOUNDS).duplicates == 0
    with pytest.raises(ValueError, match="size must be an integer of at least 2"):
        model.resample_function_bank(1, seed=0)


def test_a_gp_is_served_by_joint_samples():
    X, Y = _data()
    gp = SingleTaskGP(X, Y, **_transforms())
    scores, weights = function_bank_scores(gp, thompson_candidates(BOUNDS, 64), 7, seed=0)
    assert scores.shape == (7, 64) and weights.shape == (7,)
    proposals = batch_thompson_sampling(gp, BOUNDS, 7, num_candidates=64, seed=0)
    assert batch_diversity(proposals, BOUNDS).duplicates == 0


def test_too_few_separated_candidates_is_a_clear_error(ensemble):
    with pytest.raises(ValueError, match="Only 4 of the 5 proposals are separated"):
        batch_thompson_sampling(ensemble, BOUNDS, 5, num_candidates=4, seed=0)
    with pytest.raises(ValueError, match="q must be positive"):
        batch_thompson_sampling(ensemble, BOUNDS, 0)
    with pytest.raises(ValueError, match="bounds must be a 2 x d tensor"):
        thompson_candidates(BOUNDS.flip(0), 10)
    evaluated = torch.rand(3, BOUNDS.shape[-1], dtype=BOUNDS.dtype)
    evaluated[1, 0] = float("nan")
    with pytest.raises(ValueError, match="X_baseline contains NaN or infinite values"):
        batch_thompson_sampling(ensemble, BOUNDS, 5, X_baseline=evaluated, seed=0)


def test_chunked_scores_equal_one_pass_over_all_candidates(ensemble):
    candidates = thompson_candidates(BOUNDS, 300, seed=4)
    whole, _ = function_bank_scores(ensemble, candidates, 1, seed=0, chunk_size=300)
    chunked, _ = function_bank_scores(ensemble, candidates, 1, seed=0, chunk_size=64)
    torch.testing.assert_close(chunked, whole, rtol=0, atol=1e-12)


def test_independent_marginals_are_refused_with_a_clear_error():
    from botorch_nn_uq.models import NOMU

    X, Y = _data()
    nomu = NOMU(X, Y, bounds=BOUNDS, epochs=5, num_artificial_points=8, **_transforms()).fit(seed=0)
    with pytest.raises(ValueError, match="independent marginals.*q-acquisition"):
        batch_thompson_sampling(nomu, BOUNDS, 3, num_candidates=16)


# float64 only: the rounding of this particular box is a float64 one.
def test_candidates_on_the_upper_face_stay_inside_an_inexact_box():
    # lower + (upper - lower) * 1 rounds to 5.120000000000001 for this lower bound.
    bounds = torch.tensor([[-3.9362445906816426] * 5, [5.12] * 5], dtype=DTYPE)
    assert bounds[0, 0] + (bounds[1, 0] - bounds[0, 0]) > bounds[1, 0]
    centers = bounds[1:].clone()
    candidates = thompson_candidates(bounds, 200, centers=centers, local_fraction=1.0, seed=0)
    assert ((candidates >= bounds[0]) & (candidates <= bounds[1])).all()
    assert (candidates == bounds[1]).any()


class _FunctionBank(Model):
    r"""A cheap bank of ``s`` functions of the candidates, whose ``kind`` sets the ties:
    ``"smooth"`` (almost none), ``"quantised"`` (five levels), ``"constant"`` (every
    candidate ties) or ``"extreme"`` (quantised, -inf on a third of the candidates and
    NaN on a few of function 0's). It records the candidates of every posterior call."""

    _num_outputs = 1

    def __init__(self, num_functions: int, dim: int, kind: str, seed: int, weighted: bool = False):
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.directions = torch.randn(dim, num_functions, generator=generator, dtype=DTYPE)
        self.weights = torch.rand(num_functions, generator=generator) if weighted else None
        self.kind = kind
        self.calls: list[int] = []

    def posterior(self, X: Tensor, **kwargs) -> EnsemblePosterior:
        self.calls.append(X.shape[0])
        values = torch.sin(3 * X @ self.directions.to(X))
        if self.kind == "constant":
            values = torch.zeros_like(values)
        elif self.kind != "smooth":
            values = (2 * values).round()
        if self.kind == "extreme":
            values[torch.sin(7 * X.sum(-1)) > 0.5] = -math.inf
            values[torch.sin(11 * X.sum(-1)) > 0.95, 0] = math.nan
        return EnsemblePosterior(values.mT.unsqueeze(-1), self.weights)


class _StatedFunctionBank(_FunctionBank):
    r"""A bank that states its size, as the package's resizable banks do."""

    @property
    def function_bank_size(self) -> int:
        return self.directions.shape[-1]


def _eager_thompson(model, bounds, q, *, X_baseline, exclusion_radius, seed, candidates):
    r"""The greedy rule as batch Thompson sampling ran it before the lazy walk: every
    candidate near an evaluated point excluded up front (by brute-force distances), then
    ``q`` masked ``argmax`` picks."""
    dim = bounds.shape[-1]
    radius = 0.01 * math.sqrt(dim) if exclusion_radius is None else exclusion_radius
    scores, weights = function_bank_scores(model, candidates, num_draws=q, seed=seed)
    functions = slot_functions(weights, q, seed)
    scale = bounds[1] - bounds[0]
    unit = (candidates - bounds[0]) / scale
    available = torch.ones(candidates.shape[0], dtype=torch.bool, device=candidates.device)
    if X_baseline is not None and X_baseline.numel() > 0:
        evaluated = (X_baseline.to(candidates) - bounds[0]) / scale
        nearest = torch.stack([(unit - other).norm(dim=-1) for other in evaluated], dim=-1).amin(
            dim=-1
        )
        available &= nearest > radius
    scores = scores.to(torch.float64)
    chosen = []
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


def _outcome(propose):
    r"""The proposals, or the message of the ValueError raised instead."""
    try:
        return propose()
    except ValueError as error:
        return str(error)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kind", ["smooth", "quantised", "constant", "extreme"])
def test_lazy_walks_propose_exactly_what_eager_exclusion_proposes(dtype, kind, monkeypatch):
    outcomes = []
    for seed in range(24):
        generator = torch.Generator().manual_seed(seed)

        def draw(options, generator=generator):
            return options[int(torch.randint(len(options), (1,), generator=generator))]

        dim, size, q = draw([1, 2, 5, 20]), draw([40, 300, 2048]), draw([1, 7, 50, 100, 130])
        num_functions = draw([1, 3, 5, 40])
        radius = draw([0.0, None, 0.05 * math.sqrt(dim), 0.4 * math.sqrt(dim)])
        # Tiny blocks and distance chunks make walks cross many of them.
        monkeypatch.setattr(thompson, "_EXCLUSION_BLOCK", draw([64, 5]))
        monkeypatch.setattr(thompson, "_DISTANCE_BUDGET", draw([2**18, 64]))
        lower = -3 * torch.rand(dim, generator=generator, dtype=dtype)
        bounds = torch.stack(
            [lower, lower + 0.5 + torch.rand(dim, generator=generator, dtype=dtype)]
        )
        unit = torch.rand(size, dim, generator=generator, dtype=dtype)
        candidates = bounds[0] + (bounds[1] - bounds[0]) * unit
        # Repeated candidates tie on every function and sit at distance 0 from each other.
        candidates = torch.cat([candidates, candidates[: size // 10]])
        baseline = draw(["none", "empty", "random", "on candidates"])
        X_baseline = None if baseline == "none" else candidates[:0]
        if baseline in ("random", "on candidates"):
            # Wider than the box: some evaluated points lie outside it.
            unit = 1.4 * torch.rand(draw([1, 70, 150]), dim, generator=generator, dtype=dtype) - 0.2
            X_baseline = bounds[0] + (bounds[1] - bounds[0]) * unit
        if baseline == "on candidates":
            on = torch.randperm(candidates.shape[0], generator=generator)[:40]
            X_baseline = torch.cat([X_baseline, candidates[on]])
        model = _FunctionBank(num_functions, dim, kind, seed, weighted=draw([False, True]))
        arguments = {"X_baseline": X_baseline, "exclusion_radius": radius, "seed": seed}
        eager = _outcome(
            lambda: _eager_thompson(model, bounds, q, candidates=candidates, **arguments)  # noqa: B023
        )
        lazy = _outcome(
            lambda: batch_thompson_sampling(model, bounds, q, candidates=candidates, **arguments)  # noqa: B023
        )
        assert type(lazy) is type(eager), (seed, eager, lazy)
        if isinstance(eager, str):
            assert lazy == eager and "proposals are separated" in eager
        else:
            assert torch.equal(lazy, eager), seed
        outcomes.append(isinstance(eager, str))
    # Both the proposals and the error are compared, on several seeds each.
    assert 3 <= sum(outcomes) <= len(outcomes) - 3


def test_lazy_walks_propose_what_eager_exclusion_proposes_with_a_fitted_ensemble(ensemble):
    X, _ = _data()
    generator = torch.Generator().manual_seed(0)
    near = X + 0.004 * torch.randn(X.shape, generator=generator, dtype=DTYPE)
    X_baseline = torch.cat([X, near]).clamp(BOUNDS[0], BOUNDS[1])
    for seed in range(4):
        candidates = thompson_candidates(BOUNDS, 1024, centers=X[:3], seed=seed)
        candidates = torch.cat([candidates, X_baseline[:20]])
        for q in (3, 60):
            arguments = {"X_baseline": X_baseline, "exclusion_radius": None, "seed": seed}
            eager = _eager_thompson(ensemble, BOUNDS, q, candidates=candidates, **arguments)
            lazy = batch_thompson_sampling(ensemble, BOUNDS, q, candidates=candidates, **arguments)
            assert torch.equal(lazy, eager)


def test_a_small_bank_scores_all_candidates_in_one_forward_pass_and_a_large_one_in_chunks():
    small = _FunctionBank(5, 4, "smooth", seed=0)
    candidates = torch.rand(4096, 4, dtype=DTYPE)
    scores, _ = function_bank_scores(small, candidates, 1, seed=0)
    assert small.calls == [4096] and scores.shape == (5, 4096)
    # A bank that states its size is chunked from its first forward pass on.
    large = _StatedFunctionBank(300, 4, "smooth", seed=0)
    chunked, _ = function_bank_scores(large, candidates, 1, seed=0)
    assert len(large.calls) == math.ceil(4096 / (2**16 // 300))
    assert max(large.calls) * 300 <= 2**16 and sum(large.calls) == 4096
    # One that does not is chunked once its first pass has shown its size.
    unstated = _FunctionBank(300, 4, "smooth", seed=0)
    function_bank_scores(unstated, torch.cat([candidates, candidates]), 1, seed=0)
    assert unstated.calls[0] == 4096 and max(unstated.calls[1:]) * 300 <= 2**16
    whole, _ = function_bank_scores(large, candidates, 1, seed=0, chunk_size=4096)
    torch.testing.assert_close(chunked, whole, rtol=0, atol=1e-12)


def test_separation_from_evaluated_points_is_that_of_single_pairs_bit_for_bit(tkwargs):
    from botorch_nn_uq.generation.thompson import _separated

    generator = torch.Generator().manual_seed(0)
    points = torch.rand(300, 20, generator=generator, dtype=tkwargs["dtype"])
    # Far points (a trust region's view of the whole domain), near points, points sitting
    # on the candidates, and rings of points equally far from a candidate up to rounding.
    directions = torch.randn(50, 8, 20, generator=generator, dtype=tkwargs["dtype"])
    rings = points[100:150].unsqueeze(-2) + 0.3 * directions / directions.norm(dim=-1, keepdim=True)
    others = torch.cat(
        [
            200 * torch.rand(100, 20, generator=generator, dtype=tkwargs["dtype"]) - 100,
            points[:50] + 1e-4 * torch.rand(50, 20, generator=generator, dtype=tkwargs["dtype"]),
            points[50:80],
            rings.flatten(end_dim=-2),
            torch.rand(200, 20, generator=generator, dtype=tkwargs["dtype"]),
        ]
    )
    # Each device rounds the single pairs its own way.
    points, others = points.to(**tkwargs), others.to(**tkwargs)
    nearest = torch.stack([(points - other).norm(dim=-1) for other in others], -1).amin(-1)
    assert (nearest[50:80] == 0).all()
    augmented = torch.cat([others, others.square().sum(-1, keepdim=True)], dim=-1)
    # Radii on the nearest distances themselves, where one rounding step decides.
    for radius in [0.0, 0.05, *nearest[[0, 120, 140, 299]].tolist()]:
        expected = nearest > radius
        for chunk_size in (None, 1, 64, 1000):
            separated = _separated(points, augmented, radius, chunk_size=chunk_size)
            assert separated.device == tkwargs["device"] and torch.equal(separated, expected)
        assert torch.equal(_separated(points[118:123], augmented, radius), expected[118:123])


def test_only_the_candidates_the_walks_reach_are_measured_against_evaluated_points(
    monkeypatch,
):
    measured = []
    separated = thompson._separated

    def counted(points, others, radius, chunk_size=None):
        measured.append(points.shape[0])
        return separated(points, others, radius, chunk_size)

    monkeypatch.setattr(thompson, "_separated", counted)
    bounds = torch.tensor([[0.0] * 20, [1.0] * 20], dtype=DTYPE)
    X_baseline = torch.rand(3000, 20, generator=torch.Generator().manual_seed(0), dtype=DTYPE)
    model = _FunctionBank(5, 20, "smooth", seed=0)
    proposals = batch_thompson_sampling(
        model, bounds, 100, X_baseline=X_baseline, num_candidates=4096, seed=0
    )
    assert proposals.shape == (100, 20)
    # Each of the 5 functions serves 20 slots: one block of (at most) 40 candidates each,
    # some of them measured already by another function's block.
    assert len(measured) == 5 and sum(measured) <= 200


def test_evaluated_points_on_a_device_give_the_proposals_of_the_cpu(device):
    bounds = torch.tensor([[-1.0] * 5, [2.0] * 5], dtype=DTYPE)
    generator = torch.Generator().manual_seed(0)
    candidates = bounds[0] + 3 * torch.rand(2048, 5, generator=generator, dtype=DTYPE)
    X_baseline = bounds[0] + 3 * torch.rand(500, 5, generator=generator, dtype=DTYPE)
    X_baseline = torch.cat([X_baseline, candidates[:300]])
    model = _FunctionBank(5, 5, "quantised", seed=0)
    arguments = {"candidates": candidates, "exclusion_radius": 0.05, "seed": 0}
    on_cpu = batch_thompson_sampling(model, bounds, 60, X_baseline=X_baseline, **arguments)
    on_device = batch_thompson_sampling(
        model, bounds, 60, X_baseline=X_baseline.to(device), **arguments
    )
    assert torch.equal(on_device, on_cpu)
