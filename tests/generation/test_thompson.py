"""Tests of batch Thompson sampling over function banks."""

import math

import pytest
import torch
from botorch.models import SingleTaskGP
from botorch.models.transforms import Normalize, Standardize

from botorch_nn_uq.generation import batch_thompson_sampling
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


def test_chunked_scores_equal_one_pass_over_all_candidates(ensemble):
    candidates = thompson_candidates(BOUNDS, 300, seed=4)
    whole, _ = function_bank_scores(ensemble, candidates, 1, seed=0, chunk_size=300)
    chunked, _ = function_bank_scores(ensemble, candidates, 1, seed=0, chunk_size=64)
    torch.testing.assert_close(chunked, whole, rtol=0, atol=1e-12)


def test_distances_to_evaluated_points_are_exact_across_chunks(tkwargs):
    from botorch_nn_uq.generation.thompson import _distance_to_nearest

    points, others = torch.rand(50, 4, **tkwargs), torch.rand(33, 4, **tkwargs)
    expected = torch.cdist(points, others).min(dim=-1).values
    torch.testing.assert_close(_distance_to_nearest(points, others, chunk_size=7), expected)


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


def test_distances_to_evaluated_points_stay_on_the_points_device():
    from botorch_nn_uq.generation.thompson import _distance_to_nearest

    # Meta tensors hold no values: a running minimum created on the CPU would fail here
    # as it failed on a GPU.
    points, others = torch.empty(50, 4, device="meta"), torch.empty(33, 4, device="meta")
    distances = _distance_to_nearest(points, others, chunk_size=7)
    assert distances.device.type == "meta" and distances.shape == (50,)
