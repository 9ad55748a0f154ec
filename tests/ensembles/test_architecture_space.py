"""The NES / AutoDEUQ architecture space: nodes, architectures and their compiled layers."""

import json
from collections import Counter

import pytest
import torch

from botorch_nn_uq.ensembles.architecture_space import (
    Architecture,
    ArchitectureSpace,
    NetworkSpec,
    Node,
)
from botorch_nn_uq.nn.mlp import ACTIVATIONS

SPACE = ArchitectureSpace()


def _generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _architecture(text: str) -> Architecture:
    r"""Parse the ``str`` form, e.g. ``"64-relu | - +[0] | 8-elu +[-1,1]"`` (tests only)."""
    nodes = []
    for part in text.split("|"):
        operation, _, skips = part.strip().partition(" +")
        sources = tuple(int(j) for j in skips.strip("[]").split(",")) if skips else ()
        if operation == "-":
            nodes.append(Node(None, None, sources))
        else:
            units, activation = operation.split("-", 1)
            nodes.append(Node(int(units), activation, sources))
    return Architecture(tuple(nodes))


def _differences(before: dict, after: dict) -> list[str]:
    assert before.keys() == after.keys()
    return [key for key in before if before[key] != after[key]]


@pytest.fixture(scope="module")
def samples() -> list[Architecture]:
    generator = _generator(0)
    return [SPACE.sample(generator) for _ in range(5000)]


# ------------------------------------------------------------------------------------
# The architecture space
# ------------------------------------------------------------------------------------


def test_default_space_variables():
    assert SPACE.activations == tuple(sorted(set(ACTIVATIONS) - {"smelu"}))
    assert len(SPACE.activations) == 11
    assert SPACE.units == tuple(range(16, 257, 16))
    assert len(SPACE.operations()) == 16 * 11 + 1 == 177
    assert SPACE.operations()[0] == "none"
    assert [SPACE.skip_candidates(i) for i in range(5)] == [
        (),
        (-1,),
        (-1, 0),
        (-1, 0, 1),
        (0, 1, 2),  # capped at the nearest 3
    ]
    assert SPACE.num_decision_variables == 5 + 0 + 1 + 2 + 3 + 3
    wide = ArchitectureSpace(num_nodes=5, max_skip_sources=10)
    assert wide.skip_candidates(4) == (-1, 0, 1, 2)
    none = ArchitectureSpace(num_nodes=4, max_skip_sources=0)
    assert none.num_decision_variables == 4
    assert all(none.skip_candidates(i) == () for i in range(4))


def test_sampling_is_reproducible():
    first = [SPACE.sample(_generator(7)) for _ in range(3)]
    again = [SPACE.sample(_generator(7)) for _ in range(3)]
    assert first == again
    generator_a, generator_b = _generator(7), _generator(7)
    assert [SPACE.sample(generator_a) for _ in range(20)] == [
        SPACE.sample(generator_b) for _ in range(20)
    ]
    generator_c = _generator(8)
    assert [SPACE.sample(generator_c) for _ in range(20)] != [
        SPACE.sample(_generator(7)) for _ in range(20)
    ]


def test_samples_are_valid_and_cover_every_value(samples):
    assert all(SPACE.contains(a) for a in samples)
    values: dict[str, Counter] = {}
    for architecture in samples:
        for key, value in SPACE.decision_variables(architecture).items():
            values.setdefault(key, Counter())[value] += 1
    assert len(values) == SPACE.num_decision_variables
    for i in range(SPACE.num_nodes):
        operations = values[f"node{i}.operation"]
        assert operations["none"] > 0  # ~1/177 per node: ~28 expected in 5000
        for activation in SPACE.activations:
            assert sum(n for op, n in operations.items() if op.endswith(f"-{activation}")) > 0
        for units in SPACE.units:
            assert sum(n for op, n in operations.items() if op.startswith(f"{units}-")) > 0
        for j in SPACE.skip_candidates(i):
            counts = values[f"node{i}.skip{j}"]
            assert 0.45 < counts[True] / len(samples) < 0.55  # a fair coin


def test_space_without_empty_nodes():
    space = ArchitectureSpace(num_nodes=3, units=(8, 16), activations=("relu",),
                              allow_empty_nodes=False)  # fmt: skip
    generator = _generator(1)
    architectures = [space.sample(generator) for _ in range(200)]
    assert all(not node.is_empty for a in architectures for node in a.nodes)
    architectures += [space.mutate(a, generator) for a in architectures]
    assert all(space.contains(a) for a in architectures)
    assert not space.contains(_architecture("8-relu | - | 16-relu"))


def test_contains():
    assert SPACE.contains(_architecture("64-relu | - | 128-tanh +[0] | 16-elu +[-1,1] | -"))
    assert not SPACE.contains(_architecture("64-relu | - | 128-tanh"))  # 3 nodes, not 5
    assert not SPACE.contains(_architecture("60-relu | - | - | - | -"))  # unknown width
    assert not SPACE.contains(_architecture("- | - | - | - | 16-relu +[-1]"))  # beyond 3 back
    small = ArchitectureSpace(num_nodes=2, activations=("relu",))
    assert not small.contains(_architecture("16-relu | 16-tanh"))  # activation not in space
    with pytest.raises(ValueError, match="not in this space"):
        small.decision_variables(_architecture("16-relu | 16-tanh"))
    with pytest.raises(ValueError, match="not in this space"):
        small.mutate(_architecture("16-relu | 16-tanh"), _generator())


def test_mutation_changes_exactly_one_variable(samples):
    generator = _generator(3)
    mutated: Counter = Counter()
    for parent in samples[:500]:
        child = SPACE.mutate(parent, generator)
        assert SPACE.contains(child)
        (key,) = _differences(SPACE.decision_variables(parent), SPACE.decision_variables(child))
        mutated[key] += 1
    # Every single variable (and so every kind: operations and skip bits) got mutated.
    assert set(mutated) == set(SPACE.decision_variables(samples[0]))
    assert SPACE.mutate(samples[0], _generator(5)) == SPACE.mutate(samples[0], _generator(5))


def test_mutation_adds_and_removes_layers():
    # Two operations ("none" and "16-relu"): every operation mutation toggles a layer.
    space = ArchitectureSpace(num_nodes=3, units=(16,), activations=("relu",))
    generator = _generator(4)
    architecture = space.sample(generator)
    transitions = Counter()
    for _ in range(300):
        child = space.mutate(architecture, generator)
        before = space.decision_variables(architecture)
        after = space.decision_variables(child)
        (key,) = _differences(before, after)
        kind = "operation" if key.endswith("operation") else "skip"
        transitions[(kind, before[key], after[key])] += 1
        architecture = child
    assert transitions[("operation", "none", "16-relu")] > 0  # add a layer
    assert transitions[("operation", "16-relu", "none")] > 0  # remove a layer
    assert transitions[("skip", False, True)] > 0
    assert transitions[("skip", True, False)] > 0


def test_mutating_a_single_point_space_fails():
    space = ArchitectureSpace(num_nodes=1, units=(8,), activations=("relu",),
                              allow_empty_nodes=False)  # fmt: skip
    architecture = space.sample(_generator())
    assert str(architecture) == "8-relu"
    with pytest.raises(ValueError, match="nothing to mutate"):
        space.mutate(architecture, _generator())


def test_dict_round_trip(samples):
    for architecture in samples[:200]:
        data = architecture.to_dict()
        assert Architecture.from_dict(data) == architecture
        restored = Architecture.from_dict(json.loads(json.dumps(data)))
        assert restored == architecture
        assert hash(restored) == hash(architecture)
    example = _architecture("64-relu | - +[-1]")
    assert example.to_dict() == {
        "nodes": [
            {"units": 64, "activation": "relu", "skip_sources": []},
            {"units": None, "activation": None, "skip_sources": [-1]},
        ]
    }
    with pytest.raises(ValueError, match="exactly the key 'nodes'"):
        Architecture.from_dict({"layers": []})
    with pytest.raises(ValueError, match="exactly the keys"):
        Architecture.from_dict({"nodes": [{"units": 8, "activation": "relu"}]})


def test_str_is_readable_and_distinct(samples):
    text = "64-relu | - | 128-tanh +[0] | 16-elu +[-1,1] | -"
    architecture = _architecture(text)
    assert str(architecture) == text
    assert str(_architecture("- | - +[-1] | 8-hard_sigmoid")) == "- | - +[-1] | 8-hard_sigmoid"
    assert "node 2: dense 128 units, tanh, skips from node 0" in architecture.describe()
    assert "node 3: dense 16 units, elu, skips from the input, node 1" in architecture.describe()
    distinct = set(samples)
    assert len({str(a) for a in distinct}) == len(distinct)
    # Inactive skips of empty nodes still make architectures (and their strings) differ.
    assert str(_architecture("8-relu | - | - +[0]")) != str(_architecture("8-relu | - | -"))
    # Groupable: equal architectures built separately hash equal.
    assert len({_architecture(text), _architecture(text)}) == 1


def test_node_and_architecture_validation():
    assert Node(8, "relu", (1, -1)).skip_sources == (-1, 1)  # stored sorted
    with pytest.raises(ValueError, match="both units and an activation"):
        Node(8, None)
    with pytest.raises(ValueError, match="both units and an activation"):
        Node(None, "relu")
    with pytest.raises(ValueError, match="Unknown activation 'leaky'"):
        Node(8, "leaky")
    with pytest.raises(ValueError, match="positive integer"):
        Node(0, "relu")
    with pytest.raises(ValueError, match=">= -1"):
        Node(8, "relu", (-2,))
    with pytest.raises(ValueError, match="distinct"):
        Node(8, "relu", (0, 0))
    with pytest.raises(ValueError, match="other than its direct input"):
        Architecture((Node(8, "relu"), Node(8, "relu", (0,))))
    with pytest.raises(ValueError, match="at least one node"):
        Architecture(())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_nodes": 0}, "num_nodes must be a positive integer"),
        ({"units": ()}, "units must be non-empty positive integers"),
        ({"units": (16, -8)}, "units must be non-empty positive integers"),
        ({"units": (16, 16)}, "units must be distinct"),
        ({"activations": ()}, "activations must not be empty"),
        ({"activations": ("relu", "leaky")}, r"Unknown activations \['leaky'\]"),
        ({"activations": ("relu", "relu")}, "activations must be distinct"),
        ({"max_skip_sources": -1}, "max_skip_sources must be a non-negative integer"),
    ],
)
def test_architecture_space_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ArchitectureSpace(**kwargs)


def test_space_normalises_lists_to_tuples():
    space = ArchitectureSpace(units=[8, 16], activations=["relu"])
    assert space.units == (8, 16) and space.activations == ("relu",)
    hash(space)


# ------------------------------------------------------------------------------------
# network_spec
# ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "widths", "activations", "skips"),
    [
        # The skip from node 0 of node 2 reaches layer 0, which (node 1 being empty) is
        # also layer 1's direct input: kept, it is a separate projection term.
        (
            "64-relu | - | 128-tanh +[0] | 16-elu +[-1,1] | -",
            (64, 128, 16),
            ("relu", "tanh", "elu"),
            ((), (0,), (-1, 0)),
        ),
        # Leading empty nodes resolve to the input, so a skip from node 0 is the input
        # again: the index repeats.
        (
            "- | - | 32-relu +[-1,0] | 8-tanh +[1]",
            (32, 8),
            ("relu", "tanh"),
            ((-1, -1), (-1,)),
        ),
        # Skips on an empty node are inactive; chains of empty nodes resolve transitively
        # to the last layer before them.
        (
            "16-relu | 16-swish | - +[-1,0] | - | 8-elu +[0,1,2]",
            (16, 16, 8),
            ("relu", "swish", "elu"),
            ((), (), (0, 1, 1)),
        ),
        # All empty: a linear model.
        ("- | - +[-1] | - +[-1,0]", (), (), ()),
    ],
)
def test_network_spec(text, widths, activations, skips):
    spec = _architecture(text).network_spec()
    assert spec == NetworkSpec(widths, activations, skips)
    assert spec.num_layers == len(widths)


def test_network_spec_of_samples_is_consistent(samples):
    for architecture in samples[:300]:
        spec = architecture.network_spec()
        dense = [node for node in architecture.nodes if not node.is_empty]
        assert spec.hidden_widths == tuple(node.units for node in dense)
        assert [len(s) for s in spec.skip_connections] == [len(n.skip_sources) for n in dense]


def test_num_parameters():
    spec = _architecture("64-relu | - | 128-tanh +[0] | 16-elu +[-1,1] | -").network_spec()
    d, m = 2, 1
    expected = (
        (d * 64 + 64)
        + (64 * 128 + 128) + 64 * 128  # layer 1 and its projection of layer 0
        + (128 * 16 + 16) + d * 16 + 64 * 16  # layer 2 and projections of x and layer 0
        + (16 * m + m)
    )  # fmt: skip
    assert spec.num_parameters(d, m) == expected
    assert NetworkSpec((), (), ()).num_parameters(3, 2) == 3 * 2 + 2
    # Matches torch's count for a plain MLP.
    plain = NetworkSpec((8, 4), ("relu", "tanh"), ((), ()))
    mlp = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Linear(8, 4), torch.nn.Linear(4, 2))
    assert plain.num_parameters(3, 2) == sum(p.numel() for p in mlp.parameters())


def test_network_spec_validation():
    with pytest.raises(ValueError, match="one entry per layer"):
        NetworkSpec((8,), (), ((),))
    with pytest.raises(ValueError, match="Layer 1 can only take skips from layers -1..0"):
        NetworkSpec((8, 8), ("relu", "relu"), ((), (1,)))
