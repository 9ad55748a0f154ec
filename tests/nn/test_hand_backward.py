"""Tests of the members' backward pass by hand against autograd's."""

import pytest
import torch

from botorch_nn_uq.nn.batched_mlp import BatchedMLP
from botorch_nn_uq.nn.hand_backward import HandDifferentiatedMembers, supports_backward_by_hand

DTYPE = torch.float64
SEEDS = [3, 1, 4, 1]
HAND_DIFFERENTIATED = [
    "relu",
    "smelu",
    "gelu",
    "tanh",
    "sigmoid",
    "swish",
    "softplus",
    "identity",
]


def _members(**options) -> BatchedMLP:
    options = {"hidden_widths": (7, 5), **options}
    return BatchedMLP(3, 2, member_seeds=SEEDS, **options).to(DTYPE)


def _per_member_rows(n: int = 11, shared: bool = False) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    if shared:
        return torch.randn(n, 3, generator=generator, dtype=DTYPE).expand(len(SEEDS), n, 3)
    return torch.randn(len(SEEDS), n, 3, generator=generator, dtype=DTYPE)


def _autograd_gradients(network, X, grad_output):
    network.zero_grad()
    _raw_output(network, X).backward(grad_output)
    return [parameter.grad.clone() for parameter in network.parameters()]


def _raw_output(network, X):
    r"""The output layer's values (the Gaussian head's raw standard deviations, before
    the softplus) through autograd."""
    hidden = X
    for weight, bias, activation in zip(
        network.weights[:-1], network.biases[:-1], network.activations, strict=True
    ):
        hidden = activation(torch.baddbmm(bias, hidden, weight))
    return torch.baddbmm(network.biases[-1], hidden, network.weights[-1])


@pytest.mark.parametrize("activation", HAND_DIFFERENTIATED)
@pytest.mark.parametrize("gaussian_head", [True, False])
@pytest.mark.parametrize("shared", [True, False])
def test_the_gradients_are_autograds(activation, gaussian_head, shared):
    network = _members(activation=activation, gaussian_head=gaussian_head)
    X = _per_member_rows(shared=shared)
    hand = HandDifferentiatedMembers(network)
    output = hand.forward(X)
    torch.testing.assert_close(output, _raw_output(network, X).detach(), atol=1e-14, rtol=0)
    grad_output = torch.randn(output.shape, generator=torch.Generator().manual_seed(1), dtype=DTYPE)
    expected = _autograd_gradients(network, X, grad_output)
    network.zero_grad(set_to_none=True)
    hand.backward(grad_output)
    for parameter, reference in zip(network.parameters(), expected, strict=True):
        torch.testing.assert_close(parameter.grad, reference, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("hidden_widths", [(), (4,), (6, 5, 4)])
def test_any_depth_including_a_linear_model(hidden_widths):
    network = _members(hidden_widths=hidden_widths, activation="gelu")
    X = _per_member_rows()
    hand = HandDifferentiatedMembers(network)
    grad_output = torch.ones_like(hand.forward(X))
    expected = _autograd_gradients(network, X, grad_output)
    hand.backward(grad_output)
    for parameter, reference in zip(network.parameters(), expected, strict=True):
        torch.testing.assert_close(parameter.grad, reference, atol=1e-12, rtol=1e-12)


def test_the_gradients_are_written_into_buffers_that_stay_in_place():
    # A CUDA graph replays its kernels on the same memory at every step.
    network = _members()
    hand = HandDifferentiatedMembers(network)
    X = _per_member_rows()
    hand.backward(torch.ones_like(hand.forward(X)))
    first = [parameter.grad for parameter in network.parameters()]
    network.zero_grad(set_to_none=True)
    hand.backward(2 * torch.ones_like(hand.forward(X)))
    for parameter, buffer in zip(network.parameters(), first, strict=True):
        assert parameter.grad is buffer


def test_the_forward_pass_stays_outside_autograd():
    network = _members(activation="gelu")
    output = HandDifferentiatedMembers(network).forward(_per_member_rows())
    assert not output.requires_grad and output.grad_fn is None


@pytest.mark.parametrize(
    "options",
    [
        {"skip_connections": [(), (-1,)]},
        {"dropout": 0.1},
        {"activation": "selu"},
        {"activation": "softsign"},
        {"activation": ["relu", "hard_sigmoid"]},
    ],
    ids=["skip-connections", "dropout", "selu", "softsign", "hard-sigmoid"],
)
def test_networks_it_cannot_differentiate_are_refused(options):
    network = _members(**options)
    assert not supports_backward_by_hand(network)
    with pytest.raises(ValueError, match="cannot be differentiated by hand"):
        HandDifferentiatedMembers(network)


def test_approximate_gelu_is_not_differentiated_by_hand():
    network = _members(activation="gelu")
    network.activations[0] = torch.nn.GELU(approximate="tanh")
    assert not supports_backward_by_hand(network)
    assert all(supports_backward_by_hand(_members(activation=a)) for a in HAND_DIFFERENTIATED)


@pytest.mark.parametrize("beta, threshold", [(2.0, 20.0), (50.0, 20.0), (7.0, 3.0)])
def test_a_softplus_of_any_sharpness_is_differentiated_as_autograd_does(beta, threshold):
    network = _members(activation="softplus")
    network.activations[1] = torch.nn.Softplus(beta=beta, threshold=threshold)
    X = 3 * _per_member_rows()
    hand = HandDifferentiatedMembers(network)
    grad_output = torch.randn(hand.forward(X).shape, dtype=DTYPE)
    expected = _autograd_gradients(network, X, grad_output)
    network.zero_grad(set_to_none=True)
    hand.backward(grad_output)
    for parameter, reference in zip(network.parameters(), expected, strict=True):
        torch.testing.assert_close(parameter.grad, reference, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("activation", ["relu", "smelu", "tanh"])
@pytest.mark.parametrize("shared", [True, False])
def test_the_input_gradient_is_autograds(activation, shared):
    # What a learnable input transform in front of the members receives.
    network = _members(activation=activation, gaussian_head=True)
    X = _per_member_rows(shared=shared).clone().requires_grad_(True)
    hand = HandDifferentiatedMembers(network)
    output = hand.forward(X.detach())
    grad_output = torch.randn(output.shape, generator=torch.Generator().manual_seed(1), dtype=DTYPE)
    _raw_output(network, X).backward(grad_output)
    expected = [X.grad.clone(), *(parameter.grad.clone() for parameter in network.parameters())]
    network.zero_grad(set_to_none=True)
    grad_input = hand.backward(grad_output, input_gradient=True)
    gradients = [grad_input, *(parameter.grad for parameter in network.parameters())]
    for value, reference in zip(gradients, expected, strict=True):
        torch.testing.assert_close(value, reference, atol=1e-12, rtol=1e-12)
    # Without a transform nothing is computed for the inputs.
    hand.forward(X.detach())
    assert hand.backward(grad_output) is None
