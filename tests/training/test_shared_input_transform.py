"""A learnable input transform shared by stacked members (training/loop.py,
training/trained_networks.py, training/members.py): gradients from every member, best
weights kept jointly, the hand-written backward pass continued into the transform, and
constrained parameters projected onto their bounds."""

import pytest
import torch
from botorch.models.transforms.input import Warp
from torch import nn

from botorch_nn_uq.models.input_transforms import TrainingInputs, TransformedInputNetwork
from botorch_nn_uq.nn.batched_mlp import BatchedMLP
from botorch_nn_uq.training import TrainingConfig, train_network
from botorch_nn_uq.training.members import CommonPathLoss, fit_members, member_row_losses

F64 = {"dtype": torch.float64}
D = 3


def _members(num_members: int = 3, activation: str = "relu") -> BatchedMLP:
    members = BatchedMLP(
        D, 1, (8,), list(range(num_members)), activation=activation, gaussian_head=True
    )
    return members.to(torch.float64)


def _data(n: int = 20):
    X = torch.rand(n, D, generator=torch.Generator().manual_seed(0), **F64)
    return X, (3 * X).sin().sum(-1, keepdim=True)


def _warp() -> Warp:
    warp = Warp(D, indices=list(range(D))).to(torch.float64)
    with torch.no_grad():  # away from the identity, so every term of the gradient counts
        warp.concentration0.copy_(torch.tensor([0.7, 1.3, 1.1]))
        warp.concentration1.copy_(torch.tensor([1.4, 0.8, 1.2]))
    return warp


def _warp_gradients(warp: Warp) -> torch.Tensor:
    return torch.cat([warp.concentration0.grad, warp.concentration1.grad])


@pytest.mark.parametrize("batch_size", [None, 8])
@pytest.mark.parametrize("activation", ["relu", "smelu"])
def test_the_hand_backward_pass_reaches_the_transform_as_autograd_does(batch_size, activation):
    X, Y = _data()
    gradients = {}
    for hand in (True, False):
        torch.manual_seed(0)
        network, warp = _members(activation=activation), _warp()
        loss = CommonPathLoss(
            network,
            X,
            Y,
            batch_size,
            1e-3,
            hand_gradients=hand,
            input_transform=TrainingInputs(warp),
        )
        if batch_size is not None:
            generators = [torch.Generator().manual_seed(k) for k in range(3)]
            loss.begin_epoch(torch.stack([torch.randperm(20, generator=g) for g in generators]))
        loss.select_batch(0, batch_size or 20)
        losses, _ = loss()
        loss.backward(losses, torch.zeros(3, dtype=torch.bool))
        gradients[hand] = (_warp_gradients(warp), network.weights[0].grad.clone())
    for by_hand, by_autograd in zip(gradients[True], gradients[False], strict=True):
        torch.testing.assert_close(by_hand, by_autograd)


def test_the_shared_transform_gets_the_gradient_of_every_member_that_has_not_diverged():
    X, Y = _data()
    network, warp = _members(), _warp()
    module = TransformedInputNetwork(warp, network)
    loss = CommonPathLoss(network, X, Y, None, 0.0, input_transform=module.inputs)

    def warp_gradient(diverged):
        warp.zero_grad()
        loss.select_batch(0, 20)
        losses, _ = loss()
        loss.backward(losses, diverged)
        return _warp_gradients(warp)

    total = warp_gradient(torch.zeros(3, dtype=torch.bool))
    # Each member's own gradient, from its loss alone.
    each = []
    for member in range(3):
        module.zero_grad()
        member_row_losses(module, X, Y, per_member=False)[member].mean().backward()
        each.append(_warp_gradients(warp))
    assert all(gradient.abs().sum() > 0 for gradient in each)
    torch.testing.assert_close(total, sum(each))
    # A diverged member's gradient is left out.
    torch.testing.assert_close(warp_gradient(torch.tensor([True, False, False])), each[1] + each[2])


class _Shared(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.s = nn.Parameter(torch.zeros((), **F64))


def test_the_best_weights_of_members_that_share_a_module_are_kept_jointly():
    # The loss's gradient is one for every parameter, so SGD moves member parameter k by
    # -lr per step and the shared one by -K lr: member k's loss at step t is table[t, k]
    # - 0.4 t. Alone, members 0, 1 and 2 would keep steps 1, 2 and 4; the mean is lowest
    # at step 3.
    table = torch.tensor(
        [[5.0, 5.0, 5.0], [1.0, 4.0, 4.0], [4.0, 0.5, 4.0], [2.0, 2.0, 2.0], [4.0, 4.0, 1.5]],
        **F64,
    )
    shared = _Shared()
    module = nn.Module()
    module.a, module.shared = nn.Parameter(torch.zeros(3, **F64)), shared
    step = iter(range(len(table)))

    def loss_fn(indices):
        return table[next(step)] + module.a + shared.s

    config = TrainingConfig(epochs=len(table), learning_rate=0.1, optimizer="sgd")
    generators = [torch.Generator().manual_seed(k) for k in range(3)]
    result = train_network(
        module, loss_fn, 1, config, member_generators=generators, member_shared=shared
    )
    assert result.best_epoch.tolist() == [3, 3, 3]
    torch.testing.assert_close(result.best_loss, table[3] - 1.2)
    torch.testing.assert_close(module.a.detach(), torch.full((3,), -0.3, **F64))
    torch.testing.assert_close(shared.s.detach(), torch.tensor(-0.9, **F64))


def test_members_without_a_shared_module_keep_their_own_best_weights():
    table = torch.tensor([[5.0, 5.0], [1.0, 4.0], [4.0, 0.5]], **F64)
    module = nn.Module()
    module.a = nn.Parameter(torch.zeros(2, **F64))
    step = iter(range(len(table)))
    config = TrainingConfig(epochs=len(table), learning_rate=0.1, optimizer="sgd")
    result = train_network(
        module,
        lambda indices: table[next(step)] + module.a,
        1,
        config,
        member_generators=[torch.Generator(), torch.Generator()],
    )
    assert result.best_epoch.tolist() == [1, 2]


def test_a_shared_module_needs_member_mode():
    module = nn.Linear(1, 1)
    with pytest.raises(ValueError, match="member_shared"):
        train_network(
            module, lambda i: module.weight.sum(), 1, TrainingConfig(epochs=1), member_shared=module
        )


def test_constrained_transform_parameters_stay_in_their_bounds():
    # A loss that pulls Warp's concentrations below zero: the steps stop at GPyTorch's
    # lower bound (1e-4), where the Kumaraswamy CDF stays defined.
    warp = Warp(1, indices=[0]).to(torch.float64)
    module = TransformedInputNetwork(warp, nn.Identity())
    config = TrainingConfig(epochs=50, learning_rate=0.5, optimizer="sgd")
    train_network(
        module, lambda i: warp.concentration0.sum() + warp.concentration1.sum(), 1, config
    )
    lower = warp.concentration0_constraint.lower_bound
    assert torch.equal(warp.concentration0.detach(), lower.expand(1))
    assert torch.equal(warp.concentration1.detach(), lower.expand(1))


def test_fit_members_trains_the_transform_and_returns_it_in_its_dtype():
    X, Y = _data()
    bounds = torch.tensor([[-0.1] * D, [1.1] * D], **F64)
    network = _members()
    warp = Warp(D, indices=list(range(D)), bounds=bounds).to(torch.float64)
    constants = {name: buffer.clone() for name, buffer in warp.named_buffers()}
    config = TrainingConfig(epochs=30, learning_rate=1e-2)
    result = fit_members(
        network, X, Y, config, training_dtype=torch.float32, input_transform=TrainingInputs(warp)
    )
    assert warp.concentration0.dtype == torch.float64
    # Its constants are not rounded through float32.
    for name, buffer in warp.named_buffers():
        assert torch.equal(buffer, constants[name]), name
    assert not torch.equal(warp.concentration0, torch.ones(D, **F64))
    assert len(set(result.best_epoch.tolist())) == 1
    # The general path (per-member L2 coefficients) trains it too.
    warp_general = Warp(D, indices=list(range(D))).to(torch.float64)
    fit_members(
        _members(),
        X,
        Y,
        config,
        l2_regularization=torch.tensor([1e-4, 1e-3, 1e-2]),
        input_transform=TrainingInputs(warp_general),
    )
    assert not torch.equal(warp_general.concentration0, torch.ones(D, **F64))
