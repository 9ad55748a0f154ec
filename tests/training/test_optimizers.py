"""Tests of the training loop's optimizers."""

import pytest
import torch
from torch import nn

from botorch_nn_uq.training import OPTIMIZERS, TrainingConfig, train_network
from botorch_nn_uq.training.optimizers import DirectFusedAdam, is_plain_fused_adam, make_optimizer
from tests.training.vector import DTYPE, Vector


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_every_optimizer_reduces_a_quadratic(name):
    module = Vector([1.0, -2.0])
    learning_rate = 1.0 if name == "adadelta" else 0.05
    config = TrainingConfig(epochs=20, learning_rate=learning_rate, optimizer=name)
    result = train_network(module, lambda _: (module.theta**2).sum(), 1, config)
    assert result.best_loss < result.loss_history[0]


def test_sgd_weight_decay_adds_to_the_gradient():
    module = Vector([1.0])
    visited = []

    def loss_fn(indices):
        visited.append(module.theta.detach().clone())
        return 0.0 * module.theta.sum()

    config = TrainingConfig(epochs=3, learning_rate=0.1, optimizer="sgd", weight_decay=0.5)
    train_network(module, loss_fn, 1, config)
    # theta <- theta - lr * weight_decay * theta
    torch.testing.assert_close(visited[1], torch.tensor([0.95], dtype=DTYPE))
    torch.testing.assert_close(visited[2], torch.tensor([0.95**2], dtype=DTYPE))


def test_a_fused_adam_stepped_through_its_kernel_takes_adams_steps():
    generator = torch.Generator().manual_seed(0)
    start = torch.randn(3, 4, generator=generator, dtype=DTYPE)
    targets = torch.randn(5, 3, 4, generator=generator, dtype=DTYPE)
    config = TrainingConfig(learning_rate=0.05, optimizer="adam")
    trajectories = []
    for direct in (False, True):
        weights = nn.Parameter(start.clone())
        optimizer, _ = make_optimizer([weights], config, fused=True, capturable=False)
        assert is_plain_fused_adam(optimizer)
        stepper = DirectFusedAdam(optimizer) if direct else optimizer
        for target in targets:
            stepper.zero_grad(set_to_none=True)
            (weights - target).pow(2).sum().backward()
            stepper.step()
        trajectories.append(weights.detach())
    torch.testing.assert_close(trajectories[1], trajectories[0], rtol=0, atol=0)


def test_only_a_plain_fused_adam_is_stepped_through_its_kernel():
    weights = [nn.Parameter(torch.zeros(2, dtype=DTYPE))]
    for name, fused in [("adam", False), ("adamw", True), ("sgd", True)]:
        config = TrainingConfig(optimizer=name)
        optimizer, _ = make_optimizer(weights, config, fused=fused, capturable=False)
        assert not is_plain_fused_adam(optimizer)


def test_a_fused_adam_with_parameter_groups_is_stepped_group_by_group():
    # A shared input transform's parameters train in their own group, without weight
    # decay: the kernel is called once per group, with the group's options.
    generator = torch.Generator().manual_seed(0)
    start = torch.randn(3, 4, generator=generator, dtype=DTYPE)
    targets = torch.randn(5, 3, 4, generator=generator, dtype=DTYPE)
    config = TrainingConfig(learning_rate=0.05, optimizer="adam", weight_decay=0.1)
    trajectories = []
    for direct in (False, True):
        weights = [nn.Parameter(start.clone()) for _ in range(2)]
        groups = [{"params": [weights[0]]}, {"params": [weights[1]], "weight_decay": 0.0}]
        optimizer, _ = make_optimizer(groups, config, fused=True, capturable=False)
        assert is_plain_fused_adam(optimizer)
        stepper = DirectFusedAdam(optimizer) if direct else optimizer
        for target in targets:
            stepper.zero_grad(set_to_none=True)
            sum((weight - target).pow(2).sum() for weight in weights).backward()
            stepper.step()
        trajectories.append([weight.detach() for weight in weights])
    for direct, stepped in zip(trajectories[1], trajectories[0], strict=True):
        torch.testing.assert_close(direct, stepped, rtol=0, atol=0)
    # The groups started equal and differ only in their decay.
    assert not torch.equal(trajectories[0][0], trajectories[0][1])
