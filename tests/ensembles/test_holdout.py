"""Hold-out sizes, validation splits and cached validation log-likelihoods of candidate
members."""

import math

import pytest
import torch

from botorch_nn_uq.ensembles.holdout import (
    holdout_size,
    make_validation_splits,
    member_log_likelihoods,
    validation_log_likelihoods,
)
from botorch_nn_uq.nn.batched_mlp import BatchedMLP
from botorch_nn_uq.training.config import TrainingConfig
from botorch_nn_uq.training.members import fit_members


@pytest.mark.parametrize(
    ("num_rows", "fraction", "size"),
    [
        # ceil(fraction n) wherever it leaves two rows on each side.
        (10, 0.25, 3),
        (30, 0.2, 6),
        (300, 0.1, 30),
        (8, 0.2, 2),
        # From four rows on, at least two rows on each side.
        (4, 0.2, 2),
        (5, 0.2, 2),
        (100, 0.001, 2),
        (10, 0.9, 8),
        # Two or three rows: one row on the smaller side.
        (2, 0.2, 1),
        (2, 0.9, 1),
        (3, 0.2, 1),
        (3, 0.9, 2),
    ],
)
def test_holdout_size(num_rows: int, fraction: float, size: int) -> None:
    assert holdout_size(num_rows, fraction) == size


@pytest.mark.parametrize(
    ("num_rows", "fraction", "message"),
    [(1, 0.5, "at least 2 rows"), (10, 0.0, r"\(0, 1\)"), (10, 1.0, r"\(0, 1\)")],
)
def test_holdout_size_rejects_what_cannot_be_split(num_rows, fraction, message) -> None:
    with pytest.raises(ValueError, match=message):
        holdout_size(num_rows, fraction)


def test_cross_validation_validates_every_row_exactly_once() -> None:
    torch.manual_seed(0)
    splits = make_validation_splits(23, "cross-validation", num_folds=5)
    assert splits.num_splits == 5
    assert torch.equal(splits.validation_weights.sum(0), torch.ones(23))
    assert torch.equal(splits.train_weights + splits.validation_weights, torch.ones(5, 23))
    sizes = splits.validation_weights.sum(-1)
    assert sizes.max() - sizes.min() <= 1
    assert torch.equal(splits.validation_rows, torch.arange(23))


@pytest.mark.parametrize("scheme", ["cross-validation", "holdout"])
def test_splits_come_from_the_generator(scheme) -> None:
    state = torch.random.get_rng_state()
    first = make_validation_splits(20, scheme, generator=torch.Generator().manual_seed(1))
    again = make_validation_splits(20, scheme, generator=torch.Generator().manual_seed(1))
    other = make_validation_splits(20, scheme, generator=torch.Generator().manual_seed(2))
    assert torch.equal(torch.random.get_rng_state(), state)
    assert torch.equal(first.validation_weights, again.validation_weights)
    assert not torch.equal(first.validation_weights, other.validation_weights)


def test_holdout_and_auto_schemes() -> None:
    torch.manual_seed(0)
    holdout = make_validation_splits(50, "holdout", validation_fraction=0.2)
    assert holdout.num_splits == 1 and holdout.validation_weights.sum() == 10
    small = make_validation_splits(5, "holdout", validation_fraction=0.2)
    assert small.validation_weights.sum() == holdout_size(5, 0.2) == 2
    assert make_validation_splits(200, "auto").num_splits == 5
    assert make_validation_splits(201, "auto").num_splits == 1
    # Fewer rows than folds: one row per fold.
    assert make_validation_splits(3, "cross-validation", num_folds=5).num_splits == 3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_data": 10, "scheme": "loo"}, "Unknown validation scheme"),
        ({"num_data": 1, "scheme": "holdout"}, "at least 2 rows"),
        ({"num_data": 10, "scheme": "cross-validation", "num_folds": 1}, "num_folds"),
        ({"num_data": 10, "scheme": "holdout", "validation_fraction": 1.0}, "validation_fraction"),
    ],
)
def test_invalid_splits(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_validation_splits(**kwargs)


def test_member_log_likelihoods_are_gaussian_log_densities() -> None:
    torch.manual_seed(0)
    X, Y = torch.rand(7, 2, dtype=torch.float64), torch.randn(7, 1, dtype=torch.float64)
    gaussian = BatchedMLP(2, 1, (8,), [0, 1], gaussian_head=True).double()
    output = gaussian(X)
    expected = torch.distributions.Normal(output.mean, output.std).log_prob(Y).sum(-1)
    torch.testing.assert_close(member_log_likelihoods(gaussian, X, Y), expected.detach())
    # Mean-only members use their own maximum-likelihood variance on the given rows.
    mean_only = BatchedMLP(2, 1, (8,), [0, 1]).double()
    residuals = (mean_only(X).mean - Y).detach()
    variance = residuals.pow(2).mean(-2, keepdim=True)
    expected = torch.distributions.Normal(mean_only(X).mean, variance.sqrt()).log_prob(Y)
    torch.testing.assert_close(member_log_likelihoods(mean_only, X, Y), expected.detach().sum(-1))


def test_out_of_fold_scores_come_from_the_copy_that_held_the_row_out() -> None:
    torch.manual_seed(0)
    X = torch.rand(20, 2, dtype=torch.float64)
    Y = X.sum(-1, keepdim=True).sin()
    splits = make_validation_splits(20, "cross-validation", num_folds=4)
    config = TrainingConfig(epochs=30, learning_rate=1e-2)
    l2 = torch.tensor([0.0, 1e-3], dtype=torch.float64)
    learning_rates = torch.tensor([1e-2, 3e-3], dtype=torch.float64)
    seeds = list(range(100, 108))

    def make_network(num_members: int) -> BatchedMLP:
        return BatchedMLP(2, 1, (8,), seeds[:num_members], gaussian_head=True)

    scores = validation_log_likelihoods(
        make_network, X, Y, splits, config, l2_regularization=l2, learning_rates=learning_rates
    )
    assert scores.shape == (2, 20)
    # Reproduce candidate 1's copy for fold 2 alone and score its held-out rows.
    candidate, fold = 1, 2
    alone = BatchedMLP(2, 1, (8,), [seeds[candidate * 4 + fold]], gaussian_head=True).double()
    fit_members(
        alone,
        X,
        Y,
        config,
        l2_regularization=l2[candidate : candidate + 1],
        row_weights=splits.train_weights[fold : fold + 1].double(),
        learning_rates=learning_rates[candidate : candidate + 1],
    )
    held_out = splits.validation_weights[fold].nonzero().squeeze(-1)
    expected = member_log_likelihoods(alone, X[held_out], Y[held_out])[0]
    torch.testing.assert_close(scores[candidate, held_out], expected, atol=1e-8, rtol=1e-6)


def test_a_copy_that_never_had_a_finite_loss_scores_minus_infinity() -> None:
    torch.manual_seed(0)
    X = torch.rand(12, 1, dtype=torch.float64)
    Y = X.sin()
    splits = make_validation_splits(12, "cross-validation", num_folds=3)

    def make_network(num_members: int) -> BatchedMLP:
        network = BatchedMLP(1, 1, (4,), list(range(num_members)))
        with torch.no_grad():
            # Candidate 0's copy for fold 1 is broken from the start.
            network.weights[0][1] = math.inf
        return network

    scores = validation_log_likelihoods(
        make_network,
        X,
        Y,
        splits,
        TrainingConfig(epochs=3, learning_rate=1e-2),
        l2_regularization=torch.zeros(2, dtype=torch.float64),
        learning_rates=torch.full((2,), 1e-2, dtype=torch.float64),
    )
    fold_1 = splits.validation_weights[1].bool()
    assert (scores[0, fold_1] == -math.inf).all()
    assert scores[0, ~fold_1].isfinite().all() and scores[1].isfinite().all()
