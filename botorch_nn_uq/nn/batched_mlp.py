"""Stacked-parameter MLPs: ``K`` independent networks of one architecture in one computation."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor, nn

from botorch_nn_uq.nn.mlp import make_activation

#: Members are created in float64 whatever torch's default dtype, so that a member's
#: initial weights depend on its seed alone (e.g. in a Ray worker with another default);
#: move the network to the data's dtype with ``.to(...)``.
FLOAT64 = {"dtype": torch.float64}

#: Random streams of a member (see :meth:`BatchedMLP.member_generators`).
INITIALISATION_STREAM, DATA_ORDER_STREAM, RESAMPLING_STREAM, VALIDATION_STREAM = 0, 1, 2, 3


class MemberOutput(NamedTuple):
    r"""The outputs of the ``K`` members of a :class:`BatchedMLP`.

    Attributes:
        mean: ``... x K x n x m`` member means.
        std: ``... x K x n x m`` positive member standard deviations (Gaussian heads), or
            ``None`` for mean-only members.
        features: With ``return_features=True``, the ``... x K x n x h`` inputs of each
            member's output layer (its last hidden layer), else ``None``.
    """

    mean: Tensor
    std: Tensor | None
    features: Tensor | None = None


class BatchedMLP(nn.Module):
    r"""``K`` MLPs of the same architecture with stacked parameters.

    Layer ``l`` holds a ``K x width_{l-1} x width_l`` weight and a ``K x 1 x width_l``
    bias, so one batched matrix product evaluates (and trains) all members at once.
    The members are mathematically independent: member ``k`` is initialised from its
    own seed exactly like ``torch.nn.Linear`` (weights and biases uniform in
    ``+-1/sqrt(fan_in)``), and gradients of a summed per-member loss reach each member
    only through its own loss.

    A member either predicts a mean only, or (``gaussian_head=True``) a mean and a
    standard deviation ``min_std + softplus(raw)``.

    Beyond a plain MLP, each hidden layer may have its own activation and skip
    connections (the searched architectures of NES and AutoDEUQ): hidden layer ``l``
    computes ``h_l = act_l(h_{l-1} W_l + b_l)`` and, with skip sources ``S_l`` (earlier
    layers, ``-1`` for the input), ``h_l = relu(h_l + sum_{j in S_l} h_j P_lj)`` with a
    learned projection ``P_lj`` (no bias) to ``h_l``'s width.

    Args:
        input_dim: Number of inputs ``d``.
        output_dim: Number of outputs ``m``.
        hidden_widths: Widths of the hidden layers (empty: a linear model).
        member_seeds: One integer seed per member; ``K = len(member_seeds)``.
        activation: The hidden activation (see ``botorch_nn_uq.nn.mlp.ACTIVATIONS``), or
            one per hidden layer.
        gaussian_head: Whether members also predict a standard deviation.
        dropout: Training-time dropout rate after every hidden activation: a float for
            all members or a ``K``-vector of per-member rates in ``[0, 1)``. Dropout is
            off in ``eval`` mode.
        min_std: Floor of the predicted standard deviation.
        skip_connections: For each hidden layer, the indices of the earlier hidden layers
            (``-1``: the input) whose outputs are projected and added to it; ``None``:
            no skip connections.

    Parameters are created in float64 whatever torch's default dtype (so initial weights
    depend on the seeds alone); move the network to the data's dtype with ``.to(...)``.

    Example:
        >>> net = BatchedMLP(3, 1, hidden_widths=(16, 16), member_seeds=[0, 1, 2, 3, 4])
        >>> net(torch.rand(7, 2, 3, dtype=torch.float64)).mean.shape  # batch x K x q x m
        torch.Size([7, 5, 2, 1])
    """

    def __init__(
        self,
        input_dim: int,
        output_dim: int,
        hidden_widths: Sequence[int],
        member_seeds: Sequence[int],
        activation: str | Sequence[str] = "relu",
        gaussian_head: bool = False,
        dropout: float | Tensor = 0.0,
        min_std: float = 1e-3,
        skip_connections: Sequence[Sequence[int]] | None = None,
    ) -> None:
        super().__init__()
        hidden_widths = tuple(hidden_widths)
        if any(w < 1 for w in hidden_widths):
            raise ValueError(f"hidden_widths must be positive integers; got {hidden_widths}.")
        if len(member_seeds) < 1:
            raise ValueError("member_seeds must name at least one member.")
        activations = (
            (activation,) * len(hidden_widths) if isinstance(activation, str) else tuple(activation)
        )
        if len(activations) != len(hidden_widths):
            raise ValueError(
                f"Give one activation or one per hidden layer ({len(hidden_widths)}); got "
                f"{len(activations)}."
            )
        skip_connections = (
            ((),) * len(hidden_widths)
            if skip_connections is None
            else tuple(tuple(sources) for sources in skip_connections)
        )
        if len(skip_connections) != len(hidden_widths) or any(
            not -1 <= source < layer
            for layer, sources in enumerate(skip_connections)
            for source in sources
        ):
            raise ValueError(
                "skip_connections needs one tuple of earlier layer indices (-1: the input) "
                f"per hidden layer; got {skip_connections}."
            )
        num_members = len(member_seeds)
        dropout = torch.as_tensor(dropout, **FLOAT64)
        dropout = dropout.expand(num_members).clone() if dropout.ndim == 0 else dropout
        if dropout.shape != (num_members,) or ((dropout < 0) | (dropout >= 1)).any():
            raise ValueError(
                f"dropout must be a float or a {num_members}-vector of rates in [0, 1); "
                f"got {dropout.tolist()}."
            )
        if not min_std >= 0:
            raise ValueError(f"min_std must be non-negative; got {min_std}.")
        self.output_dim = output_dim
        self.gaussian_head = gaussian_head
        self.min_std = min_std
        self.activations = nn.ModuleList(make_activation(name) for name in activations)
        self.activation_names = activations
        self.skip_connections = skip_connections
        self.member_seeds = [int(seed) for seed in member_seeds]
        widths = [input_dim, *hidden_widths, output_dim * (2 if gaussian_head else 1)]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for fan_in, fan_out in zip(widths[:-1], widths[1:], strict=True):
            self.weights.append(nn.Parameter(torch.empty(num_members, fan_in, fan_out, **FLOAT64)))
            self.biases.append(nn.Parameter(torch.empty(num_members, 1, fan_out, **FLOAT64)))
        # widths[source + 1] is the width of layer `source`'s output (-1: the input).
        self.projections = nn.ParameterList(
            nn.Parameter(torch.empty(num_members, widths[source + 1], widths[layer + 1], **FLOAT64))
            for layer, sources in enumerate(skip_connections)
            for source in sources
        )
        # Not persistent: the rate is a hyperparameter of the fit, not a learned state that
        # a warm start should carry over.
        self.register_buffer("dropout_rates", dropout, persistent=False)
        #: Whether any member drops units in training; a Python flag, so that a forward
        #: pass never reads the rates back from the device.
        self.has_dropout = bool((dropout > 0).any())
        self.reset_parameters()

    @property
    def num_members(self) -> int:
        r"""The number of members ``K``."""
        return len(self.member_seeds)

    @property
    def hidden_widths(self) -> list[int]:
        r"""The widths of the hidden layers."""
        return [weight.shape[-1] for weight in self.weights[:-1]]

    def reset_parameters(self) -> None:
        r"""Initialise member ``k`` from ``member_seeds[k]`` alone (``nn.Linear``'s rule)."""
        with torch.no_grad():
            for member, generator in enumerate(self.member_generators(INITIALISATION_STREAM)):
                layers = [(w, (w, b)) for w, b in zip(self.weights, self.biases, strict=True)]
                layers += [(p, (p,)) for p in self.projections]
                for fan_in_source, tensors in layers:
                    bound = 1.0 / math.sqrt(fan_in_source.shape[1])
                    for tensor in tensors:
                        # float64 draws make the values independent of torch's default
                        # dtype (a Ray worker's may differ from the caller's).
                        values = torch.rand(
                            tensor.shape[1:], generator=generator, dtype=torch.float64
                        )
                        tensor[member] = ((2 * values - 1) * bound).to(tensor)

    def member_generators(self, stream: int) -> list[torch.Generator]:
        r"""One fresh generator per member for the random stream ``stream`` (e.g.
        ``INITIALISATION_STREAM``, ``DATA_ORDER_STREAM``, ``RESAMPLING_STREAM``,
        ``VALIDATION_STREAM``), seeded
        from the member's seed alone, so a member's randomness never depends on the
        other members."""
        return [
            torch.Generator().manual_seed((seed * 1_000_003 + stream) % 2**63)
            for seed in self.member_seeds
        ]

    def squared_norms(self) -> Tensor:
        r"""``K``-vector of each member's ``sum ||theta||^2`` over weights and biases (the
        Keras-style L2 penalty before multiplying by ``lambda``)."""
        return sum(p.pow(2).flatten(1).sum(-1) for p in self.parameters())

    @torch.no_grad()
    def rebase_inputs(self, scale: Tensor, shift: Tensor) -> None:
        r"""Re-express every member in new input coordinates, exactly: after the call,
        the network at ``u`` computes what it computed before at ``shift + scale * u``
        (the first layer absorbs the affine map).

        Args:
            scale: A ``d``-vector, the old coordinates' change per unit of the new.
            shift: A ``d``-vector, the old coordinates of the new origin.

        Raises:
            ValueError: If a skip connection reads the inputs (its constant would land
                after an activation, where no bias can absorb it).
        """
        if any(-1 in sources for sources in self.skip_connections):
            raise ValueError(
                "A network with skip connections from its inputs cannot be re-expressed "
                "in new input coordinates."
            )
        weight = self.weights[0]
        self.biases[0].add_(torch.matmul(shift.to(weight).unsqueeze(0), weight))
        weight.mul_(scale.to(weight).unsqueeze(-1))

    def forward(
        self,
        X: Tensor,
        per_member: bool = False,
        generator: torch.Generator | None = None,
        return_features: bool = False,
    ) -> MemberOutput:
        r"""Evaluate all members.

        Args:
            X: Shared inputs ``batch_shape x n x d`` (every member sees them), or with
                ``per_member=True`` member-specific inputs ``K x n x d``.
            per_member: Whether ``X`` holds one row set per member.
            generator: The source of the training-time dropout masks of all members (in
                ``training`` mode with positive dropout rates), a CPU generator; ``None``
                draws from torch's global CPU generator.
            return_features: Also return the inputs of the output layer.

        Returns:
            A :class:`MemberOutput` with ``batch_shape x K x n x m`` tensors (``K x n x
            m`` with ``per_member=True``).
        """
        if per_member and (X.ndim != 3 or X.shape[0] != self.num_members):
            raise ValueError(
                f"per_member inputs must be `K x n x d` with K = {self.num_members}; got "
                f"{tuple(X.shape)}."
            )
        # Shared inputs are flattened to one row set, `1 x (batch n) x d`, so every layer
        # is one `K`-batched matmul; broadcasting `batch x K x n x d` against the `K x d x
        # h` weights would copy the weights once per batch element (gigabytes at a few
        # thousand training points).
        hidden = X if per_member else X.reshape(1, -1, X.shape[-1])
        # outputs[source + 1] is the output of layer `source` (-1: the input).
        outputs = [hidden]
        projections = iter(self.projections)
        dropout = self.training and self.has_dropout
        for layer, sources in enumerate(self.skip_connections):
            hidden = _affine(hidden, self.weights[layer], self.biases[layer])
            # In place where exact: the affine map's backward does not need its output,
            # and a CPU step is bound by passes over these activations.
            if isinstance(self.activations[layer], nn.ReLU):
                hidden = hidden.relu_()
            else:
                hidden = self.activations[layer](hidden)
            if sources:
                for source in sources:
                    hidden = hidden + torch.matmul(outputs[source + 1], next(projections))
                hidden = torch.relu(hidden)
            if dropout:
                keep = (1 - self.dropout_rates).to(hidden)[:, None, None]
                # Single-precision uniforms compared with the keep rate are Bernoulli
                # draws at under half the cost of torch.bernoulli with a per-member rate;
                # drawn on the CPU and moved, so a seed gives the same masks on every
                # device.
                uniform = torch.rand(hidden.shape, dtype=torch.float32, generator=generator)
                hidden = hidden * ((uniform.to(hidden.device) < keep) / keep)
            outputs.append(hidden)
        features = hidden if return_features else None
        hidden = _affine(hidden, self.weights[-1], self.biases[-1])
        if not per_member:
            # The output width is explicit: `-1` is ambiguous for an empty batch.
            hidden = hidden.reshape(self.num_members, *X.shape[:-1], hidden.shape[-1])
            hidden = hidden.movedim(0, -3)
            if features is not None:
                features = features.reshape(self.num_members, *X.shape[:-1], features.shape[-1])
                features = features.movedim(0, -3)
        if not self.gaussian_head:
            return MemberOutput(hidden, None, features)
        mean, raw_std = hidden.split(self.output_dim, dim=-1)
        return MemberOutput(mean, self.min_std + nn.functional.softplus(raw_std), features)


def _affine(hidden: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    r"""``hidden @ weight + bias`` for ``K x n x a`` or ``1 x n x a`` rows, ``K x a x b``
    weights and ``K x 1 x b`` biases: one fused ``baddbmm``, shared rows expanded over the
    members without a copy (a broadcasting ``matmul`` copies and transposes them, at twice
    the cost of a small posterior's whole first layer)."""
    return torch.baddbmm(bias, hidden.expand(weight.shape[0], -1, -1), weight)


class EnsembleNetwork(nn.Module):
    r"""The members of an ensemble, possibly of several architectures.

    Each group is a :class:`BatchedMLP` (one architecture, evaluated in one batched
    pass); the outputs of the groups are concatenated along the member dimension.

    Args:
        groups: The member groups; all must agree on the number of outputs and on
            whether members have Gaussian heads.

    Example:
        >>> net = EnsembleNetwork([BatchedMLP(2, 1, (8,), [0, 1]), BatchedMLP(2, 1, (4, 4), [2])])
        >>> net(torch.rand(3, 2)).mean.shape
        torch.Size([3, 3, 1])
    """

    def __init__(self, groups: Sequence[BatchedMLP]) -> None:
        super().__init__()
        if not groups:
            raise ValueError("An ensemble needs at least one member group.")
        if len({(g.output_dim, g.gaussian_head) for g in groups}) != 1:
            raise ValueError(
                "All member groups must have the same number of outputs and the same head "
                "(mean only or Gaussian)."
            )
        self.groups = nn.ModuleList(groups)

    @property
    def num_members(self) -> int:
        r"""The total number of members."""
        return sum(group.num_members for group in self.groups)

    @property
    def gaussian_head(self) -> bool:
        r"""Whether members predict a standard deviation."""
        return self.groups[0].gaussian_head

    def rebase_inputs(self, scale: Tensor, shift: Tensor) -> None:
        r"""Re-express every member in new input coordinates (see
        :meth:`BatchedMLP.rebase_inputs`)."""
        for group in self.groups:
            group.rebase_inputs(scale, shift)

    def forward(self, X: Tensor, return_features: bool = False) -> MemberOutput:
        r"""Evaluate every member at ``batch_shape x n x d`` inputs; returns ``batch_shape
        x K x n x m`` tensors. With ``return_features``, also each member's output-layer
        inputs, ``batch_shape x K x n x h`` with ``h`` the widest group's last hidden
        width (narrower groups padded with zeros, which leave their outputs unchanged
        under any last-layer weights)."""
        outputs = [group(X, return_features=return_features) for group in self.groups]
        if len(outputs) == 1:
            return outputs[0]
        mean = torch.cat([output.mean for output in outputs], dim=-3)
        std = None if not self.gaussian_head else torch.cat([o.std for o in outputs], dim=-3)
        features = None
        if return_features:
            width = max(output.features.shape[-1] for output in outputs)
            features = torch.cat(
                [
                    nn.functional.pad(output.features, (0, width - output.features.shape[-1]))
                    for output in outputs
                ],
                dim=-3,
            )
        return MemberOutput(mean, std, features)
