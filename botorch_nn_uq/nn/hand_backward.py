r"""A :class:`~botorch_nn_uq.nn.batched_mlp.BatchedMLP`'s backward pass written by hand.

On a CPU core a small network's training step is bound by bookkeeping, not arithmetic:
autograd records a graph node per operation and walks the graph back, which costs about
as much as the matrix products themselves at a hundred rows. For a plain stack of layers
(no skip connections, no dropout, an activation whose derivative ATen exposes) the
backward pass is a fixed sequence of batched products, so the training loop's common
path runs it directly (:class:`HandDifferentiatedMembers`). The gradients are autograd's
up to the rounding of a different summation order: each activation's derivative is the
ATen kernel autograd itself calls.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from botorch_nn_uq.nn.batched_mlp import BatchedMLP
from botorch_nn_uq.nn.mlp import SmeLU

_aten = torch.ops.aten

#: ``grad_input`` of each activation from ``(grad_output, pre_activation, output)``: the
#: ATen derivative kernels autograd calls for these modules.
_ACTIVATION_BACKWARDS: dict[type[nn.Module], Callable[[Tensor, Tensor, Tensor], Tensor]] = {
    nn.ReLU: lambda grad, pre, out: _aten.threshold_backward(grad, out, 0),
    nn.GELU: lambda grad, pre, out: _aten.gelu_backward(grad, pre),
    nn.Tanh: lambda grad, pre, out: _aten.tanh_backward(grad, out),
    nn.Sigmoid: lambda grad, pre, out: _aten.sigmoid_backward(grad, out),
    nn.SiLU: lambda grad, pre, out: _aten.silu_backward(grad, pre),
    nn.Identity: lambda grad, pre, out: grad,
}


def supports_backward_by_hand(network: BatchedMLP) -> bool:
    r"""Whether :class:`HandDifferentiatedMembers` differentiates ``network``: no skip
    connections, no training-time dropout, and every hidden activation one whose
    derivative it knows (ReLU, SmeLU, GELU with the exact ``erf`` form, tanh, sigmoid,
    SiLU, softplus of any sharpness, identity)."""
    if network.has_dropout or any(network.skip_connections):
        return False
    return all(_backward_of(activation) is not None for activation in network.activations)


def _backward_of(activation: nn.Module) -> Callable[[Tensor, Tensor, Tensor], Tensor] | None:
    if isinstance(activation, SmeLU):
        # HandDifferentiatedMembers.forward keeps what SmeLU's backward needs in place
        # of its input.
        return lambda grad, kept, out: SmeLU.backward_from_slope(grad, kept)
    if isinstance(activation, nn.Softplus):
        beta, threshold = activation.beta, activation.threshold
        return lambda grad, pre, out: _aten.softplus_backward(grad, pre, beta, threshold)
    if isinstance(activation, nn.GELU) and activation.approximate != "none":
        return None
    return _ACTIVATION_BACKWARDS.get(type(activation))


class HandDifferentiatedMembers:
    r"""The members of a :class:`~botorch_nn_uq.nn.batched_mlp.BatchedMLP` evaluated
    outside autograd and differentiated by hand.

    :meth:`forward` keeps each layer's input and pre-activation; :meth:`backward` turns
    the gradient at the output layer into every weight's and bias's gradient, written
    into buffers made once (so a CUDA graph can capture the step) and set as the
    parameters' ``grad``. The network's layers are read once, at construction, as
    detached aliases that follow the optimizer's in-place updates.

    Args:
        network: The members (:func:`supports_backward_by_hand` must hold), in the dtype
            and on the device they train in.

    Example:
        >>> net = BatchedMLP(2, 1, (8,), [0, 1], activation="gelu").to(torch.float64)
        >>> members = HandDifferentiatedMembers(net)
        >>> output = members.forward(torch.rand(2, 5, 2, dtype=torch.float64))
        >>> members.backward(torch.ones_like(output))
        >>> net.weights[0].grad.shape
        torch.Size([2, 2, 8])
    """

    def __init__(self, network: BatchedMLP) -> None:
        if not supports_backward_by_hand(network):
            raise ValueError(
                "These members cannot be differentiated by hand (skip connections, dropout "
                "or an activation without a known derivative)."
            )
        self._parameters = list(zip(network.weights, network.biases, strict=True))
        self._weights = [weight.detach() for weight in network.weights]
        self._biases = [bias.detach() for bias in network.biases]
        self._activations = list(network.activations)
        self._in_place_relu = [isinstance(a, nn.ReLU) for a in self._activations]
        self._activation_backwards = [_backward_of(a) for a in self._activations]
        self._buffers = [
            (torch.zeros_like(weight), torch.zeros_like(bias)) for weight, bias in self._parameters
        ]
        self._inputs: list[Tensor] = []
        self._pre_activations: list[Tensor | None] = []

    def forward(self, X: Tensor) -> Tensor:
        r"""The members' output layer on per-member rows, keeping what :meth:`backward`
        needs.

        Args:
            X: ``K x n x d`` inputs, one row set per member (an expanded view of shared
                rows costs no copy).

        Returns:
            The ``K x n x o`` values of the output layer (``o = m``, or ``2 m`` for
            Gaussian heads: the means, then the standard deviations' raw values).
        """
        hidden = X
        self._inputs, self._pre_activations = [], []
        for weight, bias, activation, in_place_relu in zip(
            self._weights, self._biases, self._activations, self._in_place_relu, strict=False
        ):
            self._inputs.append(hidden)
            affine = torch.baddbmm(bias, hidden, weight)
            if in_place_relu:
                # ReLU's derivative reads its output: the affine values may be overwritten.
                self._pre_activations.append(None)
                hidden = affine.relu_()
            elif isinstance(activation, SmeLU):
                hidden, kept = activation.forward_keeping_slope(affine)
                self._pre_activations.append(kept)
            else:
                self._pre_activations.append(affine)
                hidden = activation(affine)
        self._inputs.append(hidden)
        return torch.baddbmm(self._biases[-1], hidden, self._weights[-1])

    def backward(self, grad_output: Tensor, input_gradient: bool = False) -> Tensor | None:
        r"""Every parameter's gradient from ``grad_output``, the ``K x n x o`` gradient
        of the loss with respect to the last :meth:`forward`'s output.

        Args:
            grad_output: The gradient at the output layer.
            input_gradient: Also return the gradient with respect to the last
                :meth:`forward`'s inputs (for a learnable input transform, whose
                backward pass autograd then runs).

        Returns:
            With ``input_gradient``, the ``K x n x d`` gradient with respect to the
            inputs; else ``None``.
        """
        grad = grad_output
        for layer in reversed(range(len(self._parameters))):
            (weight, bias), (weight_grad, bias_grad) = self._parameters[layer], self._buffers[layer]
            torch.bmm(self._inputs[layer].transpose(1, 2), grad, out=weight_grad)
            torch.sum(grad, dim=1, keepdim=True, out=bias_grad)
            weight.grad, bias.grad = weight_grad, bias_grad
            if layer == 0:
                break
            grad = torch.bmm(grad, self._weights[layer].transpose(1, 2))
            grad = self._activation_backwards[layer - 1](
                grad, self._pre_activations[layer - 1], self._inputs[layer]
            )
        self._inputs, self._pre_activations = [], []
        if not input_gradient:
            return None
        # The first layer's affine map, differentiated in its inputs.
        return torch.bmm(grad, self._weights[0].transpose(1, 2))
