"""Multi-layer perceptrons, including one that evaluates a bank of dropout masks in one pass."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

ACTIVATIONS: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU,
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
    ) -> None:
        super().__init__()
        if not hidden_widths:
            raise ValueError("hidden_widths must name at least one hidden layer.")
        if not 0 <= dropout < 1:
            raise ValueError(f"dropout must be in [0, 1); got {dropout}.")
        widths = [input_dim, *hidden_widths]
        self.hidden_layers = nn.ModuleList(
            nn.Linear(w_in, w_out) for w_in, w_out in zip(widths[:-1], widths[1:], strict=True)
        )
        self.output_layer = nn.Linear(widths[-1], output_dim)
        self.activation = make_activation(activation)
        self.dropout = dropout

    @property
    def hidden_widths(self) -> list[int]:
        r"""The widths of the hidden layers."""
        return [layer.out_features for layer in self.hidden_layers]

    def sample_masks(self, num_masks: int) -> list[Tensor]:
        r"""Draw ``num_masks`` dropout masks from torch's global RNG.

        Returns:
            One ``num_masks x width_l`` tensor per hidden layer, with entries
            ``1 / (1 - p)`` (kept) or ``0`` (dropped), in the network's dtype.
        """
        reference = self.output_layer.weight
        keep = 1.0 - self.dropout
        return [
            torch.bernoulli(
                torch.full((num_masks, width), keep, dtype=reference.dtype, device=reference.device)
            )
            / keep
            for width in self.hidden_widths
        ]

    def forward(self, X: Tensor, masks: Sequence[Tensor] | None = None) -> Tensor:
        r"""Evaluate the network.

        Args:
            X: A ``batch_shape x q x d`` tensor of inputs.
            masks: Optional fixed masks from :meth:`sample_masks` (``s x width_l`` each).

        Returns:
            ``batch_shape x q x m`` outputs without masks, or ``batch_shape x s x q x m``
            outputs of the ``s`` thinned networks with masks.
        """
        hidden = X
        for index, layer in enumerate(self.hidden_layers):
            hidden = self.activation(layer(hidden))
            if masks is not None:
                if index == 0:
                    hidden = hidden.unsqueeze(-3)
                hidden = hidden * masks[index].unsqueeze(-2)
            else:
                hidden = nn.functional.dropout(hidden, self.dropout, training=self.training)
        return self.output_layer(hidden)
