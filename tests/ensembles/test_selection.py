"""Tests of greedy ensemble selection (ForwardSelect and Caruana) on cached log-likelihoods.

The crafted matrices are given as likelihoods ``p_k(y_n | x_n)`` so that every expected loss
can be written down as ``-mean(log(mixture))`` of hand-computed mixture densities.
"""

import math

import pytest
import torch

from botorch_nn_uq.ensembles import SelectionResult, caruana_select, ensemble_nll, forward_select

DTYPE = torch.float64
EPS = 1e-3


def _log(likelihoods: list[list[float]]) -> torch.Tensor:
    return torch.tensor(likelihoods, dtype=DTYPE).log()


def _nll(*mixture_densities: float) -> float:
    return -sum(math.log(p) for p in mixture_densities) / len(mixture_densities)


def _assert_consistent(log_likelihoods: torch.Tensor, result: SelectionResult) -> None:
    assert result.indices.dtype == torch.long
    assert len(set(result.indices.tolist())) == len(result.indices) == len(result.weights)
    assert result.weights.sum().item() == pytest.approx(1.0)
    assert result.loss == result.loss_history[-1]
    direct = ensemble_nll(log_likelihoods[result.indices], result.weights).item()
    assert result.loss == pytest.approx(direct, rel=1e-12, abs=1e-12)


def _assert_non_increasing(loss_history: list[float]) -> None:
    assert all(loss_history[i + 1] <= loss_history[i] for i in range(len(loss_history) - 1))


# Two points. A (index 2) is the best single candidate, A' (index 0) its near-duplicate,
# B (index 3) and C (index 1) are mediocre alone but complement A and each other.
GREEDY = _log(
    [
        [0.5, 0.45],  # A'
        [0.1, 1.4],  # C
        [0.5, 0.5],  # A
        [1.5, 0.1],  # B
    ]
)

# Three points. A (index 1) fits points 0 and 1, B (index 2) fits point 2, C (index 0) fits
# nothing: the best mixture of A and B weights A twice as much as B.
DUPLICATES = _log(
    [
        [EPS, EPS, EPS],  # C
        [1.0, 1.0, EPS],  # A
        [EPS, EPS, 1.0],  # B
    ]
)

# Six points in groups of three, two and one, each fitted by one candidate.
GROUPS = _log(
    [
        [1.0, 1.0, 1.0, 0.1, 0.1, 0.1],  # A
        [0.1, 0.1, 0.1, 1.0, 1.0, 0.1],  # B
        [0.1, 0.1, 0.1, 0.1, 0.1, 1.0],  # C
    ]
)


# ---------------------------------------------------------------------------------------
# ensemble_nll


def test_ensemble_nll_matches_direct_computation() -> None:
    log_likelihoods = torch.tensor(
        [[-0.3, -1.2, -2.0, 0.4], [-1.0, -0.1, -0.7, -3.0], [0.2, -0.5, -1.5, -0.8]],
        dtype=DTYPE,
    )
    raw = torch.tensor([1.0, 0.0, 3.0], dtype=DTYPE)
    w = raw / raw.sum()
    expected = -(torch.log((w[:, None] * log_likelihoods.exp()).sum(0))).mean()
    assert torch.allclose(ensemble_nll(log_likelihoods, raw), expected)
    # Weights are normalised inside, and a zero-weight row does not matter even if NaN.
    log_likelihoods[1] = math.nan
    assert torch.allclose(ensemble_nll(log_likelihoods, 5 * raw), expected)


def test_ensemble_nll_is_differentiable_with_zero_weights() -> None:
    weights = torch.tensor([0.5, 0.0, 0.5], dtype=DTYPE, requires_grad=True)
    ensemble_nll(DUPLICATES, weights).backward()
    assert torch.isfinite(weights.grad).all()


@pytest.mark.parametrize(
    ("log_likelihoods", "weights", "match"),
    [
        (torch.zeros(3), torch.ones(3), "2-dim"),
        (torch.zeros(0, 2), torch.ones(0), "at least one candidate"),
        (torch.zeros(3, 2), torch.ones(2), r"shape \(3,\)"),
        (torch.zeros(3, 2), torch.ones(3, 1), r"shape \(3,\)"),
        (torch.zeros(3, 2), torch.tensor([1.0, -1.0, 1.0]), "non-negative"),
        (torch.zeros(3, 2), torch.tensor([1.0, math.nan, 1.0]), "finite"),
        (torch.zeros(3, 2), torch.zeros(3), "all be zero"),
    ],
)
def test_ensemble_nll_rejects_invalid_inputs(log_likelihoods, weights, match) -> None:
    with pytest.raises(ValueError, match=match):
        ensemble_nll(log_likelihoods, weights)


# ---------------------------------------------------------------------------------------
# forward_select


def test_forward_select_best_single_then_best_complement() -> None:
    # Alone: A = log 2 ~ 0.693 beats A' ~ 0.746 and B, C ~ 0.95.
    # With A: A + A' -> (0.5, 0.475) ~ 0.719, A + C -> (0.3, 0.95) ~ 0.628, and
    # A + B -> (1.0, 0.3) ~ 0.602 is best; then C -> (0.7, 2/3) beats A' -> (5/6, 0.35).
    result = forward_select(GREEDY, ensemble_size=3)
    assert result.indices.tolist() == [2, 3, 1]
    assert torch.equal(result.weights, torch.full((3,), 1 / 3, dtype=DTYPE))
    expected = [_nll(0.5, 0.5), _nll(1.0, 0.3), _nll(2.1 / 3, 2.0 / 3)]
    assert result.loss_history == pytest.approx(expected, rel=1e-12)
    _assert_consistent(GREEDY, result)
    # Greedy, not exhaustive: the pair B + C -> (0.8, 0.75) beats the selected pair A + B.
    pair = forward_select(GREEDY, ensemble_size=2)
    assert pair.indices.tolist() == [2, 3]
    assert _nll(0.8, 0.75) < pair.loss


def test_forward_select_never_repeats_and_may_increase_the_loss() -> None:
    # Caruana would add A again here (see test_caruana_select_repeats_a_strong_candidate).
    result = forward_select(DUPLICATES, ensemble_size=3)
    assert result.indices.tolist() == [1, 2, 0]
    assert torch.equal(result.weights, torch.full((3,), 1 / 3, dtype=DTYPE))
    assert result.loss_history == pytest.approx(
        [_nll(1.0, 1.0, EPS), _nll((1 + EPS) / 2, (1 + EPS) / 2, (1 + EPS) / 2)]
        + [_nll((1 + 2 * EPS) / 3, (1 + 2 * EPS) / 3, (1 + 2 * EPS) / 3)],
        rel=1e-12,
    )
    assert result.loss_history[2] > result.loss_history[1]
    _assert_consistent(DUPLICATES, result)


@pytest.mark.parametrize("ensemble_size", [4, 10])
def test_forward_select_returns_whole_pool_when_small(ensemble_size: int) -> None:
    result = forward_select(GREEDY, ensemble_size=ensemble_size)
    assert sorted(result.indices.tolist()) == [0, 1, 2, 3]
    assert torch.equal(result.weights, torch.full((4,), 0.25, dtype=DTYPE))
    _assert_consistent(GREEDY, result)


def test_forward_select_breaks_ties_by_lowest_index() -> None:
    log_likelihoods = _log([[0.2, 0.2], [0.9, 0.8], [0.9, 0.8], [0.9, 0.8]])
    assert forward_select(log_likelihoods, ensemble_size=1).indices.tolist() == [1]
    # Adding a copy of the best keeps its loss; adding the dominated row 0 raises it.
    assert forward_select(log_likelihoods, ensemble_size=2).indices.tolist() == [1, 2]
    assert forward_select(log_likelihoods, ensemble_size=3).indices.tolist() == [1, 2, 3]


# ---------------------------------------------------------------------------------------
# caruana_select


def test_caruana_select_repeats_a_strong_candidate() -> None:
    # A alone; then B -> all points (1 + eps) / 2; then A again -> weights (2/3, 1/3).
    # A fourth addition does not help: A -> (3/4, 3/4, 1/4)-ish ~ 0.654 > 0.636 now,
    # B -> back to 1/2 everywhere, C -> ~ 0.92.
    result = caruana_select(DUPLICATES, ensemble_size=3)
    assert result.indices.tolist() == [1, 2]
    assert torch.allclose(result.weights, torch.tensor([2 / 3, 1 / 3], dtype=DTYPE))
    expected = [
        _nll(1.0, 1.0, EPS),
        _nll((1 + EPS) / 2, (1 + EPS) / 2, (1 + EPS) / 2),
        _nll((2 + EPS) / 3, (2 + EPS) / 3, (1 + 2 * EPS) / 3),
    ]
    assert result.loss_history == pytest.approx(expected, rel=1e-12)
    _assert_non_increasing(result.loss_history)
    _assert_consistent(DUPLICATES, result)


def test_caruana_select_stops_at_ensemble_size_distinct_members() -> None:
    # A (1.151), then B -> (.55, .55, .55, .55, .55, .1) (0.882), then A again ->
    # (.7, .7, .7, .4, .4, .1) (0.868; C would give 0.4 everywhere, 0.916), then C ->
    # (.55, .55, .55, .325, .325, .325) (0.861): four additions, three distinct members.
    result = caruana_select(GROUPS, ensemble_size=3)
    assert result.indices.tolist() == [0, 1, 2]
    assert torch.allclose(result.weights, torch.tensor([0.5, 0.25, 0.25], dtype=DTYPE))
    expected = [
        _nll(*[1.0] * 3, *[0.1] * 3),
        _nll(*[0.55] * 5, 0.1),
        _nll(*[0.7] * 3, 0.4, 0.4, 0.1),
        _nll(*[0.55] * 3, *[0.325] * 3),
    ]
    assert result.loss_history == pytest.approx(expected, rel=1e-12)
    _assert_non_increasing(result.loss_history)
    _assert_consistent(GROUPS, result)
    # With K = 2 it stops as soon as B joins, although adding A again would still help.
    two = caruana_select(GROUPS, ensemble_size=2)
    assert two.indices.tolist() == [0, 1]
    assert two.loss_history == pytest.approx(expected[:2], rel=1e-12)


def test_caruana_select_stops_without_strict_improvement() -> None:
    # A (index 2) dominates every other candidate pointwise, so any mixture is worse, and
    # adding A again leaves the loss unchanged: one member with weight one.
    log_likelihoods = _log([[0.5, 0.5], [0.7, 0.1], [0.8, 0.6], [0.8, 0.6]])
    result = caruana_select(log_likelihoods, ensemble_size=3)
    assert result.indices.tolist() == [2]
    assert result.weights.tolist() == [1.0]
    assert result.loss_history == pytest.approx([_nll(0.8, 0.6)], rel=1e-12)


def test_caruana_select_respects_max_iterations() -> None:
    one = caruana_select(DUPLICATES, ensemble_size=3, max_iterations=1)
    assert one.indices.tolist() == [1]
    assert one.weights.tolist() == [1.0]
    two = caruana_select(DUPLICATES, ensemble_size=3, max_iterations=2)
    assert two.indices.tolist() == [1, 2]
    assert two.weights.tolist() == [0.5, 0.5]
    assert len(two.loss_history) == 2
    _assert_consistent(DUPLICATES, two)


def test_caruana_select_first_addition_always_happens() -> None:
    # Each candidate alone gives zero density somewhere (infinite loss); together log 2.
    log_likelihoods = torch.tensor([[0.0, -math.inf], [-math.inf, 0.0]], dtype=DTYPE)
    result = caruana_select(log_likelihoods, ensemble_size=2)
    assert result.indices.tolist() == [0, 1]
    assert result.loss_history == [math.inf, pytest.approx(math.log(2))]


# ---------------------------------------------------------------------------------------
# non-finite entries and validation


@pytest.mark.parametrize("select", [forward_select, caruana_select])
def test_invalid_candidates_are_never_selected(select) -> None:
    log_likelihoods = torch.tensor(
        [
            [5.0, 5.0, math.nan],  # would be by far the best without the NaN
            [-1.0, -1.0, -1.0],
            [-math.inf] * 3,
            [-2.0, -1.5, -3.0],
            [math.inf, 0.0, 0.0],
        ],
        dtype=DTYPE,
    )
    result = select(log_likelihoods, ensemble_size=5)
    assert set(result.indices.tolist()) <= {1, 3}
    assert result.indices[0].item() == 1
    assert math.isfinite(result.loss)


@pytest.mark.parametrize("select", [forward_select, caruana_select])
def test_all_invalid_candidates_raise(select) -> None:
    log_likelihoods = torch.tensor([[math.nan, 0.0], [-math.inf, -math.inf]], dtype=DTYPE)
    with pytest.raises(ValueError, match="No candidate can be selected"):
        select(log_likelihoods, ensemble_size=1)


@pytest.mark.parametrize("select", [forward_select, caruana_select])
@pytest.mark.parametrize(
    ("log_likelihoods", "ensemble_size", "match"),
    [
        (torch.zeros(4), 2, "2-dim"),
        (torch.zeros(2, 3, 4), 2, "2-dim"),
        (torch.zeros(0, 3), 2, "at least one candidate"),
        (torch.zeros(3, 0), 2, "one validation point"),
        (torch.zeros(3, 2), 0, "`ensemble_size` must be a positive integer"),
        (torch.zeros(3, 2), -1, "`ensemble_size` must be a positive integer"),
        (torch.zeros(3, 2), 1.5, "`ensemble_size` must be a positive integer"),
        (torch.zeros(3, 2), True, "`ensemble_size` must be a positive integer"),
    ],
)
def test_selection_rejects_invalid_inputs(select, log_likelihoods, ensemble_size, match) -> None:
    with pytest.raises(ValueError, match=match):
        select(log_likelihoods, ensemble_size)


def test_caruana_select_rejects_invalid_max_iterations() -> None:
    with pytest.raises(ValueError, match="`max_iterations` must be a positive integer"):
        caruana_select(GROUPS, ensemble_size=2, max_iterations=0)


# ---------------------------------------------------------------------------------------
# vectorised implementation vs. a loop reference


def _reference_select(
    log_likelihoods: torch.Tensor, ensemble_size: int, replace: bool, max_iterations: int
) -> tuple[list[int], list[float]]:
    r"""Greedy selection with Python loops over steps, candidates and points."""
    likelihoods = log_likelihoods.exp().tolist()
    num_candidates, num_points = len(likelihoods), len(likelihoods[0])
    sums = [0.0] * num_points  # summed likelihoods of the current multiset, per point
    additions: list[int] = []
    history: list[float] = []
    while len(additions) < max_iterations and len(set(additions)) < ensemble_size:
        best, best_loss = None, math.inf
        for j in range(num_candidates):
            if not replace and j in additions:
                continue
            loss = 0.0
            for n in range(num_points):
                density = (sums[n] + likelihoods[j][n]) / (len(additions) + 1)
                loss -= math.log(density) / num_points
            if loss < best_loss:
                best, best_loss = j, loss
        if replace and history and not best_loss < history[-1]:
            break
        additions.append(best)
        history.append(best_loss)
        sums = [sums[n] + likelihoods[best][n] for n in range(num_points)]
    return additions, history


@pytest.mark.parametrize(("replace", "ensemble_size"), [(False, 5), (True, 5), (True, 20)])
def test_vectorised_selection_matches_loop_reference(replace: bool, ensemble_size: int) -> None:
    generator = torch.Generator().manual_seed(0)
    log_likelihoods = -1.0 + 1.5 * torch.randn(200, 50, generator=generator, dtype=DTYPE)
    if replace:
        # With K = 20 this repeats members and stops for lack of improvement.
        result = caruana_select(log_likelihoods, ensemble_size)
        additions, history = _reference_select(
            log_likelihoods, ensemble_size, True, 10 * ensemble_size
        )
        _assert_non_increasing(result.loss_history)
    else:
        result = forward_select(log_likelihoods, ensemble_size)
        additions, history = _reference_select(log_likelihoods, ensemble_size, False, ensemble_size)
    distinct = list(dict.fromkeys(additions))
    assert result.indices.tolist() == distinct
    expected_weights = [additions.count(k) / len(additions) for k in distinct]
    assert torch.allclose(result.weights, torch.tensor(expected_weights, dtype=DTYPE))
    assert result.loss_history == pytest.approx(history, rel=1e-10)
    _assert_consistent(log_likelihoods, result)


def test_selection_keeps_dtype_and_ignores_gradients() -> None:
    log_likelihoods = GROUPS.float().requires_grad_(True)
    for select in (forward_select, caruana_select):
        result = select(log_likelihoods, ensemble_size=2)
        assert result.weights.dtype == torch.float32
        assert not result.weights.requires_grad
