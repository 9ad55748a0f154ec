r"""The architecture space of Neural Ensemble Search (NES) and AutoDEUQ.

:class:`ArchitectureSpace` is AutoDEUQ's MLP space of ``num_nodes`` *variable nodes* (3
for 1-D toys, 5 for UCI in the paper). Each node is either "no layer" or a dense layer
``units x activation``, and may receive skip connections from up to
``max_skip_sources`` earlier node outputs. Its points are :class:`Architecture`\ s;
:meth:`Architecture.network_spec` compiles one into the compact :class:`NetworkSpec` a
network builder needs. NES-RS samples it uniformly (:meth:`ArchitectureSpace.sample`);
NES-RE and AutoDEUQ's aging evolution mutate one decision variable of a parent
(:meth:`ArchitectureSpace.mutate`). The training hyperparameters the searches pair with
an architecture live in :mod:`botorch_nn_uq.ensembles.hyperparameter_space`.

All randomness comes from an explicit :class:`torch.Generator`, so a search is
reproducible from its seed and independent of torch's global RNG.

Example:
    >>> space = ArchitectureSpace(num_nodes=3)
    >>> generator = torch.Generator().manual_seed(0)
    >>> parent = space.sample(generator)
    >>> child = space.mutate(parent, generator)
    >>> spec = child.network_spec()  # widths, activations and skips of the real layers
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from botorch_nn_uq.ensembles._space_utils import is_int, randint
from botorch_nn_uq.nn.mlp import ACTIVATIONS

#: The activations a search draws from by default: all of them but ``smelu``, which is
#: ``relu`` to within 0.005 and would give a search two names for one choice.
SEARCHED_ACTIVATIONS: tuple[str, ...] = tuple(sorted(set(ACTIVATIONS) - {"smelu"}))

#: The value of an operation variable that means "no layer".
NO_LAYER = "none"


@dataclass(frozen=True)
class Node:
    r"""One variable node of an :class:`Architecture`.

    Attributes:
        units: The dense layer's width, or ``None`` for "no layer" (the node passes its
            input through unchanged).
        activation: The dense layer's activation (a key of
            :data:`~botorch_nn_uq.nn.mlp.ACTIVATIONS`), ``None`` exactly when ``units``
            is ``None``.
        skip_sources: The earlier node outputs this node receives skip connections from,
            as node indices (``-1`` is the network input); stored sorted. On a "no layer"
            node they are *inactive*: they are decision variables of the space (and so
            can be mutated), but the node's output is its input and
            :meth:`Architecture.network_spec` ignores them, as in DeepHyper where
            merging into a zero node is an identity.
    """

    units: int | None = None
    activation: str | None = None
    skip_sources: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if (self.units is None) != (self.activation is None):
            raise ValueError(
                "A node has both units and an activation (a dense layer) or neither (no "
                f"layer); got units={self.units!r}, activation={self.activation!r}."
            )
        if self.units is not None and not (is_int(self.units) and self.units > 0):
            raise ValueError(f"A node's units must be a positive integer; got {self.units!r}.")
        if self.activation is not None and self.activation not in ACTIVATIONS:
            raise ValueError(
                f"Unknown activation {self.activation!r}; valid: {', '.join(sorted(ACTIVATIONS))}."
            )
        sources = tuple(self.skip_sources)
        if not all(is_int(j) and j >= -1 for j in sources):
            raise ValueError(
                f"Skip sources are node indices >= -1 (-1: the input); got {sources!r}."
            )
        if len(set(sources)) != len(sources):
            raise ValueError(f"Skip sources must be distinct; got {sources!r}.")
        # Sorted storage makes equal nodes compare and hash equal however they were built.
        object.__setattr__(self, "skip_sources", tuple(sorted(sources)))

    @property
    def is_empty(self) -> bool:
        r"""Whether the node is "no layer"."""
        return self.units is None

    @property
    def operation(self) -> str:
        r"""The operation as a decision-variable value: ``"64-relu"`` or ``"none"``."""
        return NO_LAYER if self.is_empty else f"{self.units}-{self.activation}"

    def __str__(self) -> str:
        text = "-" if self.is_empty else self.operation
        if self.skip_sources:
            text += " +[" + ",".join(str(j) for j in self.skip_sources) + "]"
        return text


@dataclass(frozen=True)
class NetworkSpec:
    r"""The dense layers an :class:`Architecture` actually builds.

    With ``h_{-1} = x`` the network input and ``h_k`` the output of layer ``k``:
    ``a_k = act_k(W_k h_{k-1} + b_k)``; if ``skip_connections[k]`` is empty,
    ``h_k = a_k``, otherwise ``h_k = relu(a_k + sum_{s in skip_connections[k]} P_ks h_s)``
    with ``P_ks`` a bias-free linear projection from ``h_s``'s width to ``width_k``.
    The output layer is linear on the last ``h`` (``x`` when there are no layers).

    Attributes:
        hidden_widths: The widths of the dense layers, in order (empty: a linear model).
        activations: Their activations.
        skip_connections: For each layer, its skip sources as layer indices (``-1``: the
            network input), sorted. An index may repeat, and may equal the layer's direct
            input ``k - 1``, when several node outputs (or a node output and the main
            path) are the same tensor because of "no layer" nodes between them: each
            entry is still its own projection term, exactly as in the node graph.
    """

    hidden_widths: tuple[int, ...]
    activations: tuple[str, ...]
    skip_connections: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        num_layers = len(self.hidden_widths)
        if len(self.activations) != num_layers or len(self.skip_connections) != num_layers:
            raise ValueError(
                "hidden_widths, activations and skip_connections need one entry per layer; "
                f"got lengths {num_layers}, {len(self.activations)}, "
                f"{len(self.skip_connections)}."
            )
        for k, sources in enumerate(self.skip_connections):
            if not all(-1 <= s < k for s in sources):
                raise ValueError(
                    f"Layer {k} can only take skips from layers -1..{k - 1}; got {sources}."
                )

    @property
    def num_layers(self) -> int:
        r"""The number of dense hidden layers."""
        return len(self.hidden_widths)

    def num_parameters(self, input_dim: int, output_dim: int) -> int:
        r"""The number of trainable parameters of the network this spec describes.

        Counts every hidden layer's weights and biases, one bias-free projection per
        skip entry (``width_s x width_k``, with width ``input_dim`` for ``s = -1``) and
        the linear output layer's weights and biases. Heads that predict several
        quantities per output (e.g. a mean and a standard deviation) pass the total,
        e.g. ``output_dim = 2 * m``.

        Args:
            input_dim: The network's input dimension ``d``.
            output_dim: The output layer's width.

        Returns:
            The parameter count.

        Example:
            >>> NetworkSpec((8,), ("relu",), ((-1,),)).num_parameters(2, 1)
            49
        """
        widths = (input_dim, *self.hidden_widths)  # widths[k + 1] is layer k's width

        def width(source: int) -> int:
            return widths[source + 1]

        total = 0
        for k, units in enumerate(self.hidden_widths):
            total += width(k - 1) * units + units
            total += sum(width(s) * units for s in self.skip_connections[k])
        return total + widths[-1] * output_dim + output_dim


@dataclass(frozen=True)
class Architecture:
    r"""A point of an :class:`ArchitectureSpace`: a sequence of variable nodes.

    Node ``i`` takes ``h_{i-1}`` as its input (``h_{-1}`` is the network input) and
    computes ``h_i = op_i(h_{i-1})``, where ``op_i`` is a dense layer or the identity
    ("no layer"). If a dense node has skip sources ``S``,
    ``h_i = relu(op_i(h_{i-1}) + sum_{j in S} P_ij h_j)`` with ``P_ij`` a linear
    projection to ``h_i``'s width (AutoDEUQ's merge: project, add, ReLU). Skip sources of
    node ``i`` are earlier outputs other than its direct input: ``-1 <= j <= i - 2``.

    Architectures are hashable, so candidates with the same architecture can be grouped
    (e.g. to train them in one batched computation).

    Attributes:
        nodes: The nodes, in order.

    Example:
        >>> arch = Architecture((Node(64, "relu"), Node(), Node(128, "tanh", (0,))))
        >>> str(arch)
        '64-relu | - | 128-tanh +[0]'
    """

    nodes: tuple[Node, ...]

    def __post_init__(self) -> None:
        nodes = tuple(self.nodes)
        if not nodes:
            raise ValueError("An architecture needs at least one node.")
        if not all(isinstance(node, Node) for node in nodes):
            raise TypeError("An architecture's nodes must be Node instances.")
        for i, node in enumerate(nodes):
            if any(j > i - 2 for j in node.skip_sources):
                raise ValueError(
                    f"Node {i} can only take skips from nodes -1..{i - 2} (earlier outputs "
                    f"other than its direct input); got {node.skip_sources}."
                )
        object.__setattr__(self, "nodes", nodes)

    @property
    def num_nodes(self) -> int:
        r"""The number of variable nodes (empty ones included)."""
        return len(self.nodes)

    def __str__(self) -> str:
        return " | ".join(str(node) for node in self.nodes)

    def describe(self) -> str:
        r"""A multi-line description: one line per node, then the compiled layers."""

        def name(j: int) -> str:
            return "the input" if j == -1 else f"node {j}"

        lines = []
        for i, node in enumerate(self.nodes):
            sources = ", ".join(name(j) for j in node.skip_sources)
            if node.is_empty:
                line = "no layer" + (f" (inactive skips from {sources})" if sources else "")
            else:
                line = f"dense {node.units} units, {node.activation}"
                line += f", skips from {sources}" if sources else ""
            lines.append(f"node {i}: {line}")
        spec = self.network_spec()
        lines.append(f"layers: {spec.hidden_widths or 'none (linear model)'}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        r"""A JSON-serialisable form (lists, ints, strings and ``None`` only)."""
        return {
            "nodes": [
                {
                    "units": node.units,
                    "activation": node.activation,
                    "skip_sources": list(node.skip_sources),
                }
                for node in self.nodes
            ]
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Architecture:
        r"""The inverse of :meth:`to_dict` (also accepts its JSON round trip)."""
        if set(data) != {"nodes"}:
            raise ValueError(f"An architecture dict has exactly the key 'nodes'; got {set(data)}.")
        nodes = []
        for entry in data["nodes"]:
            if set(entry) != {"units", "activation", "skip_sources"}:
                raise ValueError(
                    "A node dict has exactly the keys 'units', 'activation', 'skip_sources'; "
                    f"got {sorted(entry)}."
                )
            nodes.append(Node(entry["units"], entry["activation"], tuple(entry["skip_sources"])))
        return cls(tuple(nodes))

    def network_spec(self) -> NetworkSpec:
        r"""Compile to the dense layers that exist (see :class:`NetworkSpec`).

        "No layer" nodes are removed; since such a node's output *is* its input, every
        reference to it (a later node's input or skip source) is resolved, transitively,
        to the last dense layer before it, or to the network input (``-1``). The
        inactive skip sources of "no layer" nodes are ignored. An architecture whose
        nodes are all empty compiles to a linear model (no hidden layers).
        """
        # resolved[i + 1]: the layer index whose output equals h_i (-1: the network input).
        resolved = [-1]
        widths: list[int] = []
        activations: list[str] = []
        skips: list[tuple[int, ...]] = []
        for node in self.nodes:
            if node.is_empty:
                resolved.append(resolved[-1])
                continue
            skips.append(tuple(sorted(resolved[j + 1] for j in node.skip_sources)))
            widths.append(node.units)
            activations.append(node.activation)
            resolved.append(len(widths) - 1)
        return NetworkSpec(tuple(widths), tuple(activations), tuple(skips))


@dataclass(frozen=True)
class ArchitectureSpace:
    r"""AutoDEUQ's space of MLP architectures with variable nodes and skip connections.

    The decision variables of node ``i`` (0-based) are

    1. ``"node{i}.operation"``: one categorical variable with
       ``len(units) * len(activations) + 1`` values: ``"none"`` (no layer; left out if
       ``allow_empty_nodes`` is ``False``) or ``"{units}-{activation}"``, e.g. ``"64-relu"``;
    2. ``"node{i}.skip{j}"``: one binary variable (connect or not) for each candidate skip
       source ``j`` in :meth:`skip_candidates`: the earlier outputs that are not node
       ``i``'s direct input, nodes ``i-2, i-3, ...`` down to ``-1`` (the network input),
       the nearest ``max_skip_sources`` of them. Node 0 has none, node 1 can connect the
       input (variable ``"node1.skip-1"``), node 2 the input and node 0, and so on.

    See :class:`Architecture` for what the variables mean. Skip variables of a "no layer"
    node are inactive but remain decision variables (as in DeepHyper).

    Args:
        num_nodes: The number of variable nodes (maximum depth).
        units: The possible layer widths.
        activations: The possible activations (keys of
            :data:`~botorch_nn_uq.nn.mlp.ACTIVATIONS`; default:
            :data:`SEARCHED_ACTIVATIONS`).
        max_skip_sources: The most candidate skip sources per node (nearest first).
        allow_empty_nodes: Whether a node may be "no layer".

    Example:
        >>> space = ArchitectureSpace()
        >>> space.num_decision_variables  # 5 operations + 0 + 1 + 2 + 3 + 3 skips
        14
    """

    num_nodes: int = 5
    units: tuple[int, ...] = tuple(range(16, 257, 16))
    activations: tuple[str, ...] = SEARCHED_ACTIVATIONS
    max_skip_sources: int = 3
    allow_empty_nodes: bool = True

    def __post_init__(self) -> None:
        # Lists would break hashing and equality of the frozen dataclass: store tuples.
        object.__setattr__(self, "units", tuple(self.units))
        object.__setattr__(self, "activations", tuple(self.activations))
        if not (is_int(self.num_nodes) and self.num_nodes > 0):
            raise ValueError(f"num_nodes must be a positive integer; got {self.num_nodes!r}.")
        if not self.units or not all(is_int(u) and u > 0 for u in self.units):
            raise ValueError(f"units must be non-empty positive integers; got {self.units!r}.")
        if len(set(self.units)) != len(self.units):
            raise ValueError(f"units must be distinct; got {self.units!r}.")
        if not self.activations:
            raise ValueError("activations must not be empty.")
        unknown = [a for a in self.activations if a not in ACTIVATIONS]
        if unknown:
            raise ValueError(
                f"Unknown activations {unknown}; valid: {', '.join(sorted(ACTIVATIONS))}."
            )
        if len(set(self.activations)) != len(self.activations):
            raise ValueError(f"activations must be distinct; got {self.activations!r}.")
        if not (is_int(self.max_skip_sources) and self.max_skip_sources >= 0):
            raise ValueError(
                f"max_skip_sources must be a non-negative integer; got {self.max_skip_sources!r}."
            )

    # -- the variables ----------------------------------------------------------------

    def operations(self) -> list[str]:
        r"""The values of every operation variable, ``"none"`` first if allowed."""
        dense = [f"{u}-{a}" for u in self.units for a in self.activations]
        return [NO_LAYER, *dense] if self.allow_empty_nodes else dense

    def skip_candidates(self, node: int) -> tuple[int, ...]:
        r"""The candidate skip sources of node ``node``, sorted (``-1``: the input)."""
        nearest = range(node - 2, max(-2, node - 2 - self.max_skip_sources), -1)
        return tuple(sorted(nearest))

    @property
    def num_decision_variables(self) -> int:
        r"""The number of decision variables (operations and skip bits)."""
        return self.num_nodes + sum(len(self.skip_candidates(i)) for i in range(self.num_nodes))

    def decision_variables(self, architecture: Architecture) -> dict[str, object]:
        r"""The architecture's value of every decision variable, in a flat dict.

        Keys are ``"node{i}.operation"`` (values like ``"64-relu"`` or ``"none"``) and
        ``"node{i}.skip{j}"`` (a ``bool`` per candidate source ``j``), node by node.
        """
        self._check(architecture)
        variables: dict[str, object] = {}
        for i, node in enumerate(architecture.nodes):
            variables[f"node{i}.operation"] = node.operation
            for j in self.skip_candidates(i):
                variables[f"node{i}.skip{j}"] = j in node.skip_sources
        return variables

    def contains(self, architecture: Architecture) -> bool:
        r"""Whether ``architecture`` is a point of this space."""
        if not isinstance(architecture, Architecture):
            return False
        if architecture.num_nodes != self.num_nodes:
            return False
        operations = set(self.operations())
        return all(
            node.operation in operations and set(node.skip_sources) <= set(self.skip_candidates(i))
            for i, node in enumerate(architecture.nodes)
        )

    # -- sampling and mutation --------------------------------------------------------

    def sample(self, generator: torch.Generator) -> Architecture:
        r"""An architecture with every decision variable drawn uniformly and independently.

        Args:
            generator: The source of all randomness (seed it for reproducibility).

        Returns:
            The sampled :class:`Architecture`. Note that "no layer" is one of
            ``len(units) * len(activations) + 1`` operation values, so it is rare with
            the defaults (1/177 per node).
        """
        operations = self.operations()
        nodes = []
        for i in range(self.num_nodes):
            operation = operations[randint(0, len(operations), generator)]
            candidates = self.skip_candidates(i)
            bits = torch.randint(0, 2, (len(candidates),), generator=generator).tolist()
            sources = tuple(j for j, bit in zip(candidates, bits, strict=True) if bit)
            nodes.append(self._node(operation, sources))
        return Architecture(tuple(nodes))

    def mutate(self, architecture: Architecture, generator: torch.Generator) -> Architecture:
        r"""A copy of ``architecture`` with exactly one decision variable changed.

        The variable is drawn uniformly among the decision variables that can change
        (every skip bit, and the operation variables when there are at least two
        operations); an operation gets a different value drawn uniformly, a skip bit is
        flipped. This is the mutation of AutoDEUQ's aging evolution and covers NES's
        MLP mutations: changing a width or activation, adding or removing a layer
        (to or from "none") and toggling a skip connection.

        Args:
            architecture: The parent, a point of this space.
            generator: The source of all randomness.

        Returns:
            The child :class:`Architecture`.
        """
        self._check(architecture)
        operations = self.operations()
        variables: list[tuple[int, int | None]] = []  # (node, skip source or None: operation)
        for i in range(self.num_nodes):
            if len(operations) > 1:
                variables.append((i, None))
            variables.extend((i, j) for j in self.skip_candidates(i))
        if not variables:
            raise ValueError("This space has a single architecture: nothing to mutate.")
        i, source = variables[randint(0, len(variables), generator)]
        node = architecture.nodes[i]
        if source is None:
            others = [op for op in operations if op != node.operation]
            new_node = self._node(others[randint(0, len(others), generator)], node.skip_sources)
        else:
            sources = set(node.skip_sources) ^ {source}  # flip the bit
            new_node = Node(node.units, node.activation, tuple(sources))
        nodes = list(architecture.nodes)
        nodes[i] = new_node
        return Architecture(tuple(nodes))

    # -- helpers ----------------------------------------------------------------------

    def _check(self, architecture: Architecture) -> None:
        if not self.contains(architecture):
            raise ValueError(f"The architecture {architecture} is not in this space.")

    @staticmethod
    def _node(operation: str, skip_sources: tuple[int, ...]) -> Node:
        if operation == NO_LAYER:
            return Node(None, None, skip_sources)
        units, activation = operation.split("-", 1)  # activation names have no "-"
        return Node(int(units), activation, skip_sources)
