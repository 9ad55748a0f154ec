"""Tests of the training loop's losses."""

import pytest
import torch
from torch import nn

from botorch_nn_uq.training import KnownNoise, l2_penalty, mean_squared_error

DTYPE = torch.float64


def test_l2_penalty_is_the_sum_of_squares_of_trainable_parameters():
    network = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).to(DTYPE)
    expected = sum((p.detach() ** 2).sum() for p in network.parameters())
    manual = (
        network[0].weight.detach().pow(2).sum()
        + network[0].bias.detach().pow(2).sum()
        + network[2].weight.detach().pow(2).sum()
        + network[2].bias.detach().pow(2).sum()
    )
    penalty = l2_penalty(network)
    torch.testing.assert_close(penalty.detach(), manual)
    torch.testing.assert_close(penalty.detach(), expected)
    penalty.backward()
    torch.testing.assert_close(network[0].weight.grad, 2 * network[0].weight.detach())
    # Frozen parameters are excluded.
    network[2].weight.requires_grad_(False)
    torch.testing.assert_close(
        l2_penalty(network).detach(), manual - network[2].weight.detach().pow(2).sum()
    )


def test_known_noise_weights_are_the_precisions_normalised_to_mean_one():
    variance = torch.tensor([[0.5, 2.0], [1e-6, 1.0]], dtype=DTYPE)
    known = KnownNoise.from_variance(variance)
    precision = 1.0 / variance
    torch.testing.assert_close(known.weights, precision / precision.mean())
    assert known.weights.mean().item() == pytest.approx(1.0)
    # However small a variance, a weight stays below the number of entries.
    assert known.weights.max() < variance.numel()
    # Constant variances weigh every entry by one.
    assert torch.equal(KnownNoise.from_variance(torch.full((3, 2), 0.25)).weights, torch.ones(3, 2))
    rows = known.rows(torch.tensor([[1], [0]]))
    assert rows.variance.shape == (2, 1, 2) and torch.equal(rows.variance[0, 0], variance[1])
    assert known.rows(None) is known
    single = known.to(torch.float32)
    assert single.variance.dtype == single.weights.dtype == torch.float32


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_known_noise_needs_positive_finite_variances(bad):
    with pytest.raises(ValueError, match="positive and finite"):
        KnownNoise.from_variance(torch.tensor([[1.0], [bad]], dtype=DTYPE))


def test_mean_squared_error_is_weighted_least_squares():
    prediction = torch.tensor([[1.0], [2.0]], dtype=DTYPE)
    target = torch.tensor([[0.0], [0.0]], dtype=DTYPE)
    assert mean_squared_error(prediction, target).item() == pytest.approx(2.5)
    weights = torch.tensor([[2.0], [0.0]], dtype=DTYPE)
    assert mean_squared_error(prediction, target, weights).item() == pytest.approx(1.0)
