"""Multi-layer perceptrons, including one that evaluates a bank of dropout masks in one pass."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from botorch_nn_uq.nn.init import linear


class SmeLU(nn.Module):
    r"""The smooth ReLU (SmeLU; Shamir, Lin and Coviello, 2020): a ReLU whose kink is
    replaced by the parabola that joins its two pieces with a continuous slope,

    ``0`` for ``x <= -h``, ``(x + h)^2 / (4 h)`` for ``|x| < h``, ``x`` for ``x >= h``.

    It is within ``h / 4`` of ``relu(x)`` everywhere (0.005 at the default ``h = 0.02``,
    for pre-activations of order one), so a network trains as a ReLU network does, at
    about the cost of a ReLU (a softplus of the same closeness costs ten times more on a
    CPU core). Unlike a ReLU network's, the function's gradient is continuous, which is
    what a quasi-Newton optimiser of an acquisition function assumes: on a ReLU network's
    piecewise-linear surface L-BFGS-B's line searches fail the curvature condition at
    every kink they cross, and ``optimize_acqf`` spends three to four times the
    evaluations a smooth surface needs.

    Args:
        half_width: ``h``, half the width of the parabolic piece, in units of the
            pre-activation. Protocol 1 measured 0.02 level with ReLU and 0.05 behind on
            one problem (``benchmarks/docs/protocol-6-scale.md``, "Small data"); both
            make ``optimize_acqf`` converge in about a third of a ReLU network's
            evaluations.

    Example:
        >>> SmeLU()(torch.tensor([-1.0, 0.0, 0.01, 1.0]))
        tensor([0.0000, 0.0050, 0.0112, 1.0000])
    """

    def __init__(self, half_width: float = 0.02) -> None:
        super().__init__()
        if not half_width > 0:
            raise ValueError(f"half_width must be positive; got {half_width}.")
        self.half_width = float(half_width)

    def forward(self, x: Tensor) -> Tensor:
        r"""The activation of ``x``, elementwise."""
        return self.forward_keeping_slope(x)[0]

    def forward_keeping_slope(self, x: Tensor) -> tuple[Tensor, Tensor]:
        r"""The activation of ``x`` and what :meth:`backward_from_slope` needs, in four
        elementwise operations (a CPU step at a hundred rows is bound by their number).

        With ``r = clamp((h - x) / (2 h), 0, 1)``, one minus the slope, the value is
        ``(x + h r) (1 - r)``: ``0`` where ``r = 1``, ``x`` where ``r = 0``, and the
        parabola in between.

        Returns:
            The activation, and ``r``, elementwise.
        """
        h = self.half_width
        # In place only outside autograd, which keeps clamp's input for its backward.
        if torch.is_grad_enabled() and x.requires_grad:
            one_minus_slope = torch.rsub(x, 0.5, alpha=0.5 / h).clamp(0, 1)
        else:
            one_minus_slope = torch.rsub(x, 0.5, alpha=0.5 / h).clamp_(0, 1)
        shifted = torch.add(x, one_minus_slope, alpha=h)
        return torch.addcmul(shifted, shifted, one_minus_slope, value=-1), one_minus_slope

    @staticmethod
    def backward_from_slope(grad: Tensor, one_minus_slope: Tensor) -> Tensor:
        r"""The gradient with respect to the input from ``grad``, the gradient with
        respect to the output, and the ``r`` that :meth:`forward_keeping_slope` kept:
        ``grad (1 - r)``, in one operation."""
        return torch.addcmul(grad, grad, one_minus_slope, value=-1)

    def extra_repr(self) -> str:
        return f"half_width={self.half_width}"


ACTIVATIONS: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU,
    "smelu": SmeLU,
    "tanh": nn.Tanh,
    "elu": nn.ELU,
    "gelu": nn.GELU,
    "selu": nn.SELU,
    "swish": nn.SiLU,
    "softplus": nn.Softplus,
    "sigmoid": nn.Sigmoid,
    "softsign": nn.Softsign,
    "hard_sigmoid": nn.Hardsigmoid,
    "identity": nn.Identity,
}


def make_activation(name: str) -> nn.Module:
    r"""Instantiate the activation called ``name`` (one of ``ACTIVATIONS``)."""
    if name not in ACTIVATIONS:
        raise ValueError(f"Unknown activation {name!r}; valid: {', '.join(sorted(ACTIVATIONS))}.")
    return ACTIVATIONS[name]()


class DropoutMLP(nn.Module):
    r"""An MLP with dropout after every hidden activation.

    In training mode, ordinary (inverted) dropout with rate ``dropout`` is applied. Given
    a bank of ``s`` fixed dropout masks, :meth:`forward` evaluates all ``s`` thinned
    networks at once (the masks broadcast over a new member dimension), which is what MC
    dropout's posterior needs: ``s`` deterministic functions in one batched pass.

    Args:
        input_dim: Number of inputs ``d``.
        output_dim: Number of outputs ``m``.
        hidden_widths: Widths of the hidden layers.
        activation: The hidden activation (a key of ``ACTIVATIONS``).
        dropout: The dropout rate ``p`` in ``[0, 1)``.
        generator: The source of the initial weights (``nn.Linear``'s initialisation,
            layer by layer); ``None`` draws from torch's global generator.

    Example:
        >>> net = DropoutMLP(3, 1, hidden_widths=(16, 16), dropout=0.1)
        >>> masks = net.sample_masks(8)
        >>> net(torch.rand(5, 2, 3), masks=masks).shape
        torch.Size([5, 8, 2, 1])
    """

    def __init__(
        self,
        input_dim: int,
        output_dim: int,
        hidden_widths: Sequence[int],
        activation: str = "relu",
        dropout: float = 0.1,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        if not hidden_widths:
            raise ValueError("hidden_widths must name at least one hidden layer.")
        if not 0 <= dropout < 1:
            raise ValueError(f"dropout must be in [0, 1); got {dropout}.")
        widths = [input_dim, *hidden_widths]
        self.hidden_layers = nn.ModuleList(
            linear(w_in, w_out, generator)
            for w_in, w_out in zip(widths[:-1], widths[1:], strict=True)
        )
        self.output_layer = linear(widths[-1], output_dim, generator)
        self.activation = make_activation(activation)
        self.dropout = dropout

    @property
    def hidden_widths(self) -> list[int]:
        r"""The widths of the hidden layers."""
        return [layer.out_features for layer in self.hidden_layers]

    def sample_masks(
        self, num_masks: int, generator: torch.Generator | None = None
    ) -> list[Tensor]:
        r"""Draw ``num_masks`` dropout masks.

        Args:
            num_masks: The number of masks ``s``.
            generator: The source of the masks, a CPU generator; ``None`` draws from
                torch's global CPU generator.

        Returns:
            One ``num_masks x width_l`` tensor per hidden layer, with entries
            ``1 / (1 - p)`` (kept) or ``0`` (dropped), in the network's dtype.
        """
        reference = self.output_layer.weight
        keep = 1.0 - self.dropout
        # Drawn on the CPU and moved: a seed gives the same masks on every device.
        return [
            torch.bernoulli(
                torch.full((num_masks, width), keep, dtype=reference.dtype), generator=generator
            ).to(reference.device)
            / keep
            for width in self.hidden_widths
        ]

    @torch.no_grad()
    def rebase_inputs(self, scale: Tensor, shift: Tensor) -> None:
        r"""Re-express the network in new input coordinates, exactly: after the call it
        computes at ``u`` what it computed before at ``shift + scale * u`` (the first
        layer absorbs the affine map).

        Args:
            scale: A ``d``-vector, the old coordinates' change per unit of the new.
            shift: A ``d``-vector, the old coordinates of the new origin.
        """
        first = self.hidden_layers[0]
        first.bias.add_(torch.matmul(first.weight, shift.to(first.weight)))
        first.weight.mul_(scale.to(first.weight))

    def forward(
        self,
        X: Tensor,
        masks: Sequence[Tensor] | None = None,
        generator: torch.Generator | None = None,
        return_features: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        r"""Evaluate the network.

        Args:
            X: A ``batch_shape x q x d`` tensor of inputs.
            masks: Optional fixed masks from :meth:`sample_masks` (``s x width_l`` each).
            generator: The source of the training-time dropout masks (``training`` mode
                without ``masks``), a CPU generator; ``None`` draws from torch's global
                CPU generator.
            return_features: Also return the output layer's inputs.

        Returns:
            ``batch_shape x q x m`` outputs without masks, or ``batch_shape x s x q x m``
            outputs of the ``s`` thinned networks with masks; with ``return_features``,
            a tuple of these and the output layer's inputs (``batch_shape x q x h``, or
            ``batch_shape x s x q x h`` with masks).
        """
        hidden = X
        for index, layer in enumerate(self.hidden_layers):
            hidden = self.activation(layer(hidden))
            if masks is not None:
                if index == 0:
                    hidden = hidden.unsqueeze(-3)
                hidden = hidden * masks[index].unsqueeze(-2)
            elif self.training:
                hidden = dropout(hidden, self.dropout, generator)
        if return_features:
            return self.output_layer(hidden), hidden
        return self.output_layer(hidden)


def dropout(X: Tensor, p: float, generator: torch.Generator | None = None) -> Tensor:
    r"""Inverted dropout with rate ``p``, with the mask drawn from ``generator``.

    It computes what ``nn.functional.dropout(X, p, training=True)`` computes on the CPU
    (a Bernoulli mask of ``X``'s shape and dtype with keep rate ``1 - p``, divided by
    ``1 - p``, times ``X``; ``X`` itself for ``p = 0`` or no elements), so with the
    global generator in the state of ``generator`` the result is the same to the bit.

    Args:
        X: The activations (any shape).
        p: The dropout rate in ``[0, 1)``.
        generator: The source of the mask, a CPU generator (the mask is drawn on the CPU
            and moved to ``X``'s device); ``None`` draws from torch's global CPU generator.

    Returns:
        The thinned activations, of ``X``'s shape.
    """
    if p == 0 or X.numel() == 0:
        return X
    keep = 1.0 - p
    # Drawn on the CPU and moved: a seed gives the same mask on every device.
    mask = torch.empty_like(X, device="cpu").bernoulli_(keep, generator=generator)
    return X * mask.to(X.device).div_(keep)
