"""NOMU's two-branch network and its readout map (Heiss et al., 2022, Section 3.2).

The network has a mean branch ``x -> h_f -> f_hat`` and an uncertainty branch
``x -> h_r``; the raw-uncertainty output layer sees the concatenation of ``h_r`` and
(some of) the mean branch's hidden layers ``h_f``, which is how NOMU re-uses the
features that matter for the prediction (desideratum D4, metric learning).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor, nn

from botorch_nn_uq.nn.init import linear
from botorch_nn_uq.nn.mlp import make_activation

#: The readout maps from raw uncertainty to model uncertainty (see :func:`nomu_readout`).
READOUTS = ("exponential", "linear")


def nomu_readout(
    raw_uncertainty: Tensor,
    min_uncertainty: float,
    max_uncertainty: float,
    readout: str = "exponential",
) -> Tensor:
    r"""NOMU's readout map ``phi`` from the raw uncertainty ``r`` to ``sigma_hat``.

    - ``"exponential"`` (Eq. 2): ``l_max * (1 - exp(-(max(0, r) + l_min) / l_max))``,
      increasing from ``l_max * (1 - exp(-l_min / l_max)) ~ l_min`` (for ``r <= 0``)
      towards ``l_max`` (for ``r -> inf``).
    - ``"linear"`` (Remark 3.2): ``l_min + relu(r - l_min) - relu(r - l_max)``, i.e.
      ``r`` clipped to ``[l_min, l_max]``.

    Args:
        raw_uncertainty: A tensor of raw uncertainties (any shape).
        min_uncertainty: ``l_min >= 0``.
        max_uncertainty: ``l_max > 0``.
        readout: One of ``READOUTS``.

    Returns:
        ``sigma_hat``, a tensor of the same shape with values in ``[l_min', l_max]``.

    Example:
        >>> nomu_readout(torch.tensor([-1.0, 0.0, 100.0]), 1e-3, 2.0)
        tensor([0.0010, 0.0010, 2.0000])
    """
    if readout == "exponential":
        shifted = raw_uncertainty.clamp_min(0.0) + min_uncertainty
        return max_uncertainty * -torch.expm1(-shifted / max_uncertainty)
    if readout == "linear":
        return (
            min_uncertainty
            + (raw_uncertainty - min_uncertainty).clamp_min(0.0)
            - (raw_uncertainty - max_uncertainty).clamp_min(0.0)
        )
    raise ValueError(f"Unknown readout {readout!r}; valid: {', '.join(READOUTS)}.")


def build_mlp(
    input_dim: int,
    hidden_widths: Sequence[int],
    output_dim: int | None,
    activation: str,
    generator: torch.Generator | None = None,
) -> nn.Sequential:
    r"""``Linear -> activation`` for every hidden layer, then a final ``Linear`` to
    ``output_dim`` outputs (omitted if ``output_dim`` is ``None``), each ``Linear``
    initialised as ``nn.Linear`` does, from ``generator`` (``None``: torch's global
    generator)."""
    layers: list[nn.Module] = []
    widths = [input_dim, *hidden_widths]
    for width_in, width_out in zip(widths[:-1], widths[1:], strict=True):
        layers += [linear(width_in, width_out, generator), make_activation(activation)]
    if output_dim is not None:
        layers.append(linear(widths[-1], output_dim, generator))
    return nn.Sequential(*layers)


def hidden_widths_of(mean_network: nn.Sequential) -> list[int]:
    r"""The widths of the hidden layers of a mean network (the inputs of every
    ``nn.Linear`` but the first)."""
    linears = [module for module in mean_network if isinstance(module, nn.Linear)]
    return [layer.in_features for layer in linears[1:]]


def validate_mean_network(mean_network: nn.Module, input_dim: int, output_dim: int) -> None:
    r"""Check that ``mean_network`` can be NOMU's mean branch: an ``nn.Sequential`` with at
    least two ``nn.Linear`` layers, the first taking ``input_dim`` inputs and the last
    module an ``nn.Linear`` with ``output_dim`` outputs."""
    if not isinstance(mean_network, nn.Sequential):
        raise TypeError(
            f"mean_network must be a torch.nn.Sequential; got {type(mean_network).__name__}."
        )
    linears = [module for module in mean_network if isinstance(module, nn.Linear)]
    if len(linears) < 2 or not isinstance(mean_network[-1], nn.Linear):
        raise ValueError(
            "mean_network must contain at least two nn.Linear layers (one hidden layer) and "
            "end with an nn.Linear output layer."
        )
    if linears[0].in_features != input_dim or linears[-1].out_features != output_dim:
        raise ValueError(
            f"mean_network maps {linears[0].in_features} inputs to "
            f"{linears[-1].out_features} outputs; the data need {input_dim} -> {output_dim}."
        )


class NOMUOutput(NamedTuple):
    r"""The outputs of :class:`NOMUNetwork`, each ``batch_shape x q x m``.

    Attributes:
        mean: The model prediction ``f_hat``.
        raw_uncertainty: The raw model uncertainty ``r_hat`` (before the readout).
        noise_std: The learned data-noise standard deviation ``sigma_hat_n`` (only with
            ``learn_noise=True``; else ``None``).
        features: With ``return_features=True``, the ``batch_shape x q x width`` last
            hidden layer of the mean branch (the inputs of its output layer); else
            ``None``.
    """

    mean: Tensor
    raw_uncertainty: Tensor
    noise_std: Tensor | None
    features: Tensor | None = None


class NOMUNetwork(nn.Module):
    r"""NOMU's network: a mean branch and an uncertainty branch with ``m`` outputs each.

    - Mean branch ``mean_network``: an MLP ``x -> h_f^1 -> ... -> h_f^L -> f_hat``.
    - Uncertainty branch: an MLP ``x -> h_r`` (its own hidden layers) followed by the
      raw-uncertainty layer ``r_hat = Linear(concat(h_f^{l} for l in
      connected_mean_layers, h_r))``; by default only the last mean hidden layer is
      connected (Figure 2), more layers implement Remark 3.1.
    - With ``detach_mean_features`` the mean features enter ``r_hat`` through
      ``detach()``: the connection passes forward only and the uncertainty terms of the
      loss cannot change the mean branch (footnote 5 of the paper).
    - With ``learn_noise`` a data-noise head ``sigma_hat_n = min_noise_std +
      softplus(Linear(h_f^L))`` is added (App. C.1).

    Args:
        input_dim: Number of inputs ``d``.
        output_dim: Number of outputs ``m`` (one mean and one raw uncertainty each).
        mean_widths: Hidden widths of the mean branch (ignored if ``mean_network`` is
            given).
        uncertainty_widths: Hidden widths of the uncertainty branch.
        activation: Hidden activation (a key of ``botorch_nn_uq.nn.mlp.ACTIVATIONS``).
        detach_mean_features: Stop the gradient on the mean-to-uncertainty connection.
        connected_mean_layers: Indices (Python-style, negative allowed) of the mean
            branch's hidden layers that feed the raw-uncertainty layer.
        learn_noise: Add the data-noise head.
        min_noise_std: Lower bound of ``sigma_hat_n`` (keeps the noise likelihood
            bounded when the mean interpolates the data).
        init_scale: Initialise every weight and bias of the new layers uniformly in
            ``[-init_scale, init_scale]`` (the paper uses 0.05); ``None`` keeps PyTorch's
            default initialisation.
        mean_network: A (pre-trained) mean branch to use instead of a new one: an
            ``nn.Sequential`` of ``nn.Linear`` layers and activations ending in an
            ``nn.Linear`` with ``m`` outputs (see :func:`validate_mean_network`). It is
            used as is (not re-initialised).
        generator: The source of the initial weights (``nn.Linear``'s initialisation of
            every new layer, then the uniform draws of ``init_scale``); ``None`` draws
            from torch's global generator.

    Example:
        >>> network = NOMUNetwork(2, 1, mean_widths=(16, 16), uncertainty_widths=(8,))
        >>> output = network(torch.rand(5, 3, 2))
        >>> output.mean.shape, output.raw_uncertainty.shape
        (torch.Size([5, 3, 1]), torch.Size([5, 3, 1]))
    """

    def __init__(
        self,
        input_dim: int,
        output_dim: int,
        mean_widths: Sequence[int],
        uncertainty_widths: Sequence[int],
        activation: str = "relu",
        detach_mean_features: bool = True,
        connected_mean_layers: Sequence[int] = (-1,),
        learn_noise: bool = False,
        min_noise_std: float = 1e-3,
        init_scale: float | None = 0.05,
        mean_network: nn.Sequential | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        if not uncertainty_widths:
            raise ValueError("uncertainty_widths must name at least one hidden layer.")
        if mean_network is None:
            if not mean_widths:
                raise ValueError("mean_widths must name at least one hidden layer.")
            mean_network = build_mlp(input_dim, mean_widths, output_dim, activation, generator)
            self._initialise(mean_network, init_scale, generator)
        else:
            validate_mean_network(mean_network, input_dim, output_dim)
        mean_hidden_widths = hidden_widths_of(mean_network)
        depth = len(mean_hidden_widths)
        if not connected_mean_layers or any(
            not -depth <= index < depth for index in connected_mean_layers
        ):
            raise ValueError(
                f"connected_mean_layers {tuple(connected_mean_layers)} must be a non-empty "
                f"list of indices of the mean branch's {depth} hidden layer(s)."
            )
        self.connected_mean_layers = sorted({index % depth for index in connected_mean_layers})
        self.detach_mean_features = detach_mean_features
        self.mean_network = mean_network
        self.uncertainty_network = build_mlp(
            input_dim, uncertainty_widths, None, activation, generator
        )
        feature_width = uncertainty_widths[-1] + sum(
            mean_hidden_widths[index] for index in self.connected_mean_layers
        )
        self.raw_uncertainty_layer = linear(feature_width, output_dim, generator)
        self.noise_layer = (
            linear(mean_hidden_widths[-1], output_dim, generator) if learn_noise else None
        )
        self.min_noise_std = min_noise_std
        for module in (self.uncertainty_network, self.raw_uncertainty_layer, self.noise_layer):
            self._initialise(module, init_scale, generator)

    @staticmethod
    def _initialise(
        module: nn.Module | None, init_scale: float | None, generator: torch.Generator | None
    ) -> None:
        if module is None or init_scale is None:
            return
        with torch.no_grad():
            for parameter in module.parameters():
                parameter.uniform_(-init_scale, init_scale, generator=generator)

    def mean_branch_modules(self) -> list[nn.Module]:
        r"""The modules trained with the prediction: the mean branch and the noise head."""
        return [m for m in (self.mean_network, self.noise_layer) if m is not None]

    def uncertainty_branch_modules(self) -> list[nn.Module]:
        r"""The modules of the raw uncertainty: its own hidden layers and output layer."""
        return [self.uncertainty_network, self.raw_uncertainty_layer]

    def mean_with_features(self, X: Tensor) -> tuple[Tensor, list[Tensor]]:
        r"""The mean prediction and the mean branch's hidden layers.

        Args:
            X: A ``batch_shape x q x d`` tensor of inputs.

        Returns:
            The ``batch_shape x q x m`` mean and the list of the ``L`` hidden layers
            ``h_f^l`` (``batch_shape x q x width_l`` each).
        """
        hidden_layers = []
        hidden = X
        for position, module in enumerate(self.mean_network):
            if position > 0 and isinstance(module, nn.Linear):
                hidden_layers.append(hidden)
            hidden = module(hidden)
        return hidden, hidden_layers

    def forward(self, X: Tensor, return_features: bool = False) -> NOMUOutput:
        r"""Evaluate both branches in one pass.

        Args:
            X: A ``batch_shape x q x d`` tensor of inputs.
            return_features: Also return the mean branch's last hidden layer.

        Returns:
            A :class:`NOMUOutput` of ``batch_shape x q x m`` tensors.
        """
        mean, mean_hidden = self.mean_with_features(X)
        mean_features = [mean_hidden[index] for index in self.connected_mean_layers]
        if self.detach_mean_features:
            mean_features = [feature.detach() for feature in mean_features]
        uncertainty_features = self.uncertainty_network(X)
        raw_uncertainty = self.raw_uncertainty_layer(
            torch.cat([*mean_features, uncertainty_features], dim=-1)
        )
        noise_std = None
        if self.noise_layer is not None:
            noise_std = self.min_noise_std + nn.functional.softplus(
                self.noise_layer(mean_hidden[-1])
            )
        return NOMUOutput(
            mean=mean,
            raw_uncertainty=raw_uncertainty,
            noise_std=noise_std,
            features=mean_hidden[-1] if return_features else None,
        )
