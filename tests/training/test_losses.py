"""Tests of the training loop's losses."""

import torch
from torch import nn

from botorch_nn_uq.training import l2_penalty

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
