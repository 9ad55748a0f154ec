r"""Building blocks of NEON (epistemic operator networks): weight-factorised dense layers,
trainable Fourier features, the operator backbone (encoder and split decoder) and the
EpiNet with its frozen prior.

An epistemic neural network ``f(u, y, z)`` takes the input ``u`` (the function's
parameters), a query coordinate ``y`` on the output domain and an epistemic index ``z ~
N(0, I_{d_z})``; one ``z`` gives one function sample:

``f(u, y, z) = OutAct(mu(u, y) + sigma_L(x~, z) + alpha * sigma_P(x~, z))``, with
``x~ = stop_gradient(concat(beta, h_N, y tiled to d_beta))``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from botorch_nn_uq.nn.batched_mlp import BatchedMLP
from botorch_nn_uq.nn.mlp import make_activation


class FactorizedLinear(nn.Module):
    r"""A dense layer with random weight factorisation ``W = V diag(exp(s))`` (``in x out``).

    The weight is re-parameterised per output unit as ``W[:, j] = exp(s_j) V[:, j]``
    with ``s ~ N(1, 0.1)`` and ``V = W_0 / exp(s)`` for a Glorot-normal ``W_0``
    (Wang et al., 2022), which the NEON authors use in every dense layer. It has
    ``in * out + 2 * out`` parameters.

    Args:
        in_features: Input width.
        out_features: Output width.
        generator: The source of ``W_0`` and ``s``; ``None`` draws from torch's global
            generator.

    Example:
        >>> layer = FactorizedLinear(3, 4)
        >>> layer(torch.rand(5, 3)).shape
        torch.Size([5, 4])
    """

    def __init__(
        self, in_features: int, out_features: int, generator: torch.Generator | None = None
    ) -> None:
        super().__init__()
        glorot = math.sqrt(2.0 / (in_features + out_features))
        initial = glorot * torch.randn(in_features, out_features, generator=generator)
        scale = 1.0 + 0.1 * torch.randn(out_features, generator=generator)
        self.log_scale = nn.Parameter(scale)
        self.direction = nn.Parameter(initial / scale.exp())
        self.bias = nn.Parameter(torch.zeros(out_features))

    @property
    def weight(self) -> Tensor:
        r"""The ``in x out`` weight ``V diag(exp(s))``."""
        return self.direction * self.log_scale.exp()

    def forward(self, X: Tensor) -> Tensor:
        r"""``X W + b`` for ``... x in`` inputs."""
        # One fused product-and-bias kernel: about twice as fast as `X @ W + b` on large
        # row counts, where the separate bias pass is a full extra sweep over memory.
        return nn.functional.linear(X, self.weight.T, self.bias)


def _mlp(
    widths: Sequence[int],
    activation: str,
    final_activation: bool,
    generator: torch.Generator | None,
) -> nn.Sequential:
    layers: list[nn.Module] = []
    for index, (fan_in, fan_out) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
        layers.append(FactorizedLinear(fan_in, fan_out, generator))
        if final_activation or index < len(widths) - 2:
            layers.append(make_activation(activation))
    return nn.Sequential(*layers)


def tile(values: Tensor, size: int) -> Tensor:
    r"""Repeat the last dimension of ``values`` until it has ``size`` entries."""
    repeats = math.ceil(size / values.shape[-1])
    return values.repeat(*([1] * (values.ndim - 1)), repeats)[..., :size]


class FourierFeatures(nn.Module):
    r"""Trainable random Fourier features ``[cos(y B), sin(y B)]`` with ``B ~ N(0,
    scale^2)`` of shape ``d_y x num_features / 2``.

    Args:
        input_dim: Coordinates ``d_y``.
        num_features: Output width (even).
        scale: Standard deviation of the initial frequencies.
        generator: The source of the initial frequencies; ``None`` draws from torch's
            global generator.
    """

    def __init__(
        self,
        input_dim: int,
        num_features: int,
        scale: float,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        if num_features % 2:
            raise ValueError(f"num_features must be even; got {num_features}.")
        self.frequencies = nn.Parameter(
            scale * torch.randn(input_dim, num_features // 2, generator=generator)
        )

    def forward(self, Y: Tensor) -> Tensor:
        r"""``... x d_y`` coordinates to ``... x num_features`` features."""
        projected = Y @ self.frequencies
        return torch.cat([projected.cos(), projected.sin()], dim=-1)


class OperatorBackbone(nn.Module):
    r"""The backbone ``mu``: an encoder ``beta = MLP(u)`` and a split decoder over query
    coordinates (or, without a decoder, a plain MLP head for scalar outputs).

    Split decoder: ``beta`` is cut into ``N`` equal chunks, one per hidden layer;
    ``h_0 = PE(y)`` (Fourier features, or ``y`` tiled to the chunk size);
    ``h_i = GELU(Dense(concat(h_{i-1}, beta_i)))``; output ``Dense(h_N)``.

    Args:
        input_dim: Inputs ``d_u``.
        output_dim: Channels ``d_out`` per query point (outputs, without a decoder).
        encoder_widths: Hidden widths of the encoder.
        latent_dim: ``d_beta``, the encoder's output width.
        decoder_depth: ``N``, the split decoder's hidden layers (``d_beta`` must be a
            multiple); 0 for a plain MLP without query coordinates.
        decoder_width: The split decoder's hidden width.
        query_dim: Coordinates ``d_y`` of the query points (decoder only).
        fourier_scale: Scale of trainable Fourier features for ``h_0``; ``None`` tiles
            ``y`` instead.
        activation: Hidden activation.
        generator: The source of the initial weights (encoder, Fourier features, decoder,
            head, in this order); ``None`` draws from torch's global generator.
    """

    def __init__(
        self,
        input_dim: int,
        output_dim: int,
        encoder_widths: Sequence[int],
        latent_dim: int,
        decoder_depth: int,
        decoder_width: int,
        query_dim: int,
        fourier_scale: float | None,
        activation: str = "gelu",
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        self.encoder = _mlp([input_dim, *encoder_widths, latent_dim], activation, False, generator)
        self.decoder_depth = decoder_depth
        self.latent_dim = latent_dim
        if decoder_depth == 0:
            self.activation = make_activation(activation)
            self.head = FactorizedLinear(latent_dim, output_dim, generator)
            self.feature_dim = 2 * latent_dim + input_dim
            return
        if latent_dim % decoder_depth:
            raise ValueError(
                f"latent_dim ({latent_dim}) must be a multiple of the decoder depth "
                f"({decoder_depth}) to split it into chunks."
            )
        chunk = latent_dim // decoder_depth
        if fourier_scale is not None and chunk % 2:
            raise ValueError(
                f"Fourier features need an even chunk size latent_dim / decoder_depth; got "
                f"{latent_dim} / {decoder_depth} = {chunk}."
            )
        self.chunk = chunk
        self.encoding = (
            None
            if fourier_scale is None
            else FourierFeatures(query_dim, chunk, fourier_scale, generator)
        )
        widths = [chunk, *[decoder_width] * decoder_depth]
        self.decoder_layers = nn.ModuleList(
            FactorizedLinear(fan_in + chunk, fan_out, generator)
            for fan_in, fan_out in zip(widths[:-1], widths[1:], strict=True)
        )
        self.activation = make_activation(activation)
        self.head = FactorizedLinear(decoder_width, output_dim, generator)
        self.feature_dim = 2 * latent_dim + decoder_width

    def forward(
        self, U: Tensor, Y: Tensor | None = None, return_head_inputs: bool = False
    ) -> tuple[Tensor, ...]:
        r"""Evaluate the backbone.

        Args:
            U: ``... x d_u`` inputs.
            Y: ``... x d_y`` query coordinates broadcastable against ``U``'s leading
                dimensions (e.g. ``U`` of shape ``b x 1 x d_u`` and ``Y`` of ``m x
                d_y``); ``None`` without a decoder.
            return_head_inputs: Also return the inputs of the output layer ``head``.

        Returns:
            The ``... x d_out`` mean and the EpiNet features ``x~`` (``... x
            feature_dim``, not yet detached); with ``return_head_inputs``, third, the
            head's inputs (``... x width``).
        """
        beta = self.encoder(U)
        if self.decoder_depth == 0:
            hidden = self.activation(beta)
            outputs = (self.head(hidden), torch.cat([beta, hidden, U], dim=-1))
            return (*outputs, hidden) if return_head_inputs else outputs
        shape = torch.broadcast_shapes(beta.shape[:-1], Y.shape[:-1])
        beta = beta.expand(*shape, beta.shape[-1])
        Y = Y.expand(*shape, Y.shape[-1])
        hidden = tile(Y, self.chunk) if self.encoding is None else self.encoding(Y)
        for index, layer in enumerate(self.decoder_layers):
            chunk = beta[..., index * self.chunk : (index + 1) * self.chunk]
            hidden = self.activation(layer(torch.cat([hidden, chunk], dim=-1)))
        features = torch.cat([beta, hidden, tile(Y, self.latent_dim)], dim=-1)
        outputs = (self.head(hidden), features)
        return (*outputs, hidden) if return_head_inputs else outputs


class EpiNet(nn.Module):
    r"""The EpiNet: ``sigma_L(x~, z) + alpha * sigma_P(x~, z)`` on detached features.

    - Learnable part: ``A = MLP(concat(x~, z))`` reshaped to ``d_out x d_z``,
      ``sigma_L = A z``. Its first layer is applied as ``x~ W_x + z W_z``, which equals
      the layer on the concatenation but evaluates the feature part once for all ``z``;
      its last layer ``A = h W + b`` is folded into ``A z = h (W z) + b z``, one
      ``width x d_out`` weight per index instead of a ``d_out x d_z`` matrix per row.
    - Prior: ``sigma_P = sum_k z_k MLP_k(x~)``, ``d_z`` small MLPs that are randomly
      initialised and never trained (no parameter of theirs requires a gradient).

    Args:
        feature_dim: Width of ``x~``.
        output_dim: ``d_out``.
        index_dim: ``d_z``.
        hidden_widths: Hidden widths of the learnable MLP.
        prior_widths: Hidden widths of each prior MLP.
        prior_scale: ``alpha``.
        activation: Hidden activation of the learnable MLP.
        generator: The source of the learnable MLP's initial weights and then of the
            prior MLPs' seeds; ``None`` draws from torch's global generator.
    """

    def __init__(
        self,
        feature_dim: int,
        output_dim: int,
        index_dim: int,
        hidden_widths: Sequence[int],
        prior_widths: Sequence[int],
        prior_scale: float,
        activation: str = "gelu",
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        self.output_dim, self.index_dim, self.prior_scale = output_dim, index_dim, prior_scale
        self.feature_dim = feature_dim
        widths = [feature_dim + index_dim, *hidden_widths, index_dim * output_dim]
        self.learnable = nn.ModuleList(
            FactorizedLinear(fan_in, fan_out, generator)
            for fan_in, fan_out in zip(widths[:-1], widths[1:], strict=True)
        )
        self.activation = make_activation(activation)
        prior_seeds = torch.randint(0, 2**31 - 1, (index_dim,), generator=generator).tolist()
        self.prior = BatchedMLP(
            feature_dim, output_dim, prior_widths, prior_seeds, activation="relu"
        )
        self.prior.requires_grad_(False)

    def forward(self, features: Tensor, Z: Tensor) -> Tensor:
        r"""The epistemic term for every index.

        Args:
            features: ``... x feature_dim`` features ``x~`` (detached here).
            Z: ``S x d_z`` epistemic indices.

        Returns:
            ``... x S x d_out``.
        """
        flat = features.detach().reshape(-1, self.feature_dim)
        num_indices, num_rows = Z.shape[0], flat.shape[0]
        first = self.learnable[0]
        weight = first.weight
        # Index-major rows (S x N x width): every layer is one matrix product over all
        # rows, and the index-dependent weights below are one batched product per index.
        hidden = (flat @ weight[: self.feature_dim]).unsqueeze(0)
        hidden = hidden + (Z @ weight[self.feature_dim :] + first.bias).unsqueeze(-2)
        if len(self.learnable) == 1:
            matrices = hidden.unflatten(-1, (self.output_dim, self.index_dim))
            learnable = (matrices @ Z[:, None, :, None]).squeeze(-1)
        else:
            for layer in self.learnable[1:-1]:
                hidden = layer(self.activation(hidden))
            last = self.learnable[-1]
            # A(x~, z) z with A = h W + b folded into the last layer: (h W + b) z is
            # h (W z) + b z, so each index needs a width x d_out weight instead of every
            # row a d_out x d_z matrix (the dominant cost on large output grids).
            index_weight = last.weight.unflatten(-1, (self.output_dim, self.index_dim)) @ Z.T
            index_bias = Z @ last.bias.unflatten(-1, (self.output_dim, self.index_dim)).T
            learnable = torch.baddbmm(
                index_bias.unsqueeze(-2), self.activation(hidden), index_weight.permute(2, 0, 1)
            )
        prior = self.prior(flat).mean  # d_z x N x d_out
        prior = (Z @ prior.flatten(1)).unflatten(-1, (num_rows, self.output_dim))
        epistemic = learnable + self.prior_scale * prior  # S x N x d_out
        return epistemic.transpose(0, 1).reshape(*features.shape[:-1], num_indices, self.output_dim)


class EpistemicOperatorNetwork(nn.Module):
    r"""NEON's epistemic neural network ``f(u, y, z)``: an :class:`OperatorBackbone` and an
    :class:`EpiNet` on its detached features.

    Args:
        backbone: The backbone.
        epinet: The EpiNet (``feature_dim`` and ``output_dim`` must match the backbone).
        output_activation: ``OutAct`` (a key of ``botorch_nn_uq.nn.mlp.ACTIVATIONS``).
    """

    def __init__(
        self, backbone: OperatorBackbone, epinet: EpiNet, output_activation: str = "identity"
    ) -> None:
        super().__init__()
        if epinet.feature_dim != backbone.feature_dim:
            raise ValueError("The EpiNet's feature_dim must equal the backbone's.")
        self.backbone, self.epinet = backbone, epinet
        self.output_activation = make_activation(output_activation)

    def forward(
        self, U: Tensor, Y: Tensor | None, Z: Tensor, return_features: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        r"""Function samples ``f(u, y, z)`` for every index.

        Args:
            U: ``... x d_u`` inputs.
            Y: ``... x d_y`` query coordinates broadcastable against ``U`` (``None``
                for a scalar backbone).
            Z: ``S x d_z`` epistemic indices.
            return_features: Also return the inputs of the backbone's output layer, the
                features that every index shares.

        Returns:
            ``... x S x d_out`` samples; with ``return_features``, a tuple of these and the
            ``... x width`` features.
        """
        mean, features, head_inputs = self.backbone(U, Y, return_head_inputs=True)
        samples = self.output_activation(mean.unsqueeze(-2) + self.epinet(features, Z))
        return (samples, head_inputs) if return_features else samples


def count_parameters(module: nn.Module, trainable_only: bool = True) -> int:
    r"""The number of (trainable, by default) parameter entries of ``module``."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)
