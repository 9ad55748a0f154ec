"""Tests of the stacked-parameter MLP (``K`` members in one computation) and the ensemble
network that concatenates member groups of different architectures."""

import pytest
import torch

from botorch_nn_uq.nn.batched_mlp import (
    DATA_ORDER_STREAM,
    INITIALISATION_STREAM,
    RESAMPLING_STREAM,
    BatchedMLP,
    EnsembleNetwork,
    MemberOutput,
)
from tests.testing import seeded_rand, tolerances

SEEDS = [11, 5, 2024]


def _network(tkwargs, member_seeds=SEEDS, gaussian_head=False, dropout=0.0, **kwargs):
    kwargs = {"input_dim": 3, "output_dim": 2, "hidden_widths": (6, 5), **kwargs}
    return BatchedMLP(
        member_seeds=member_seeds, gaussian_head=gaussian_head, dropout=dropout, **kwargs
    ).to(**tkwargs)


def _inputs(shape, tkwargs, seed=1):
    return seeded_rand(*shape, seed=seed, **tkwargs)


def _manual_forward(network, X, member):
    r"""Member ``member``'s forward pass written out with its slices of the stacked weights
    (ReLU hidden activations, no dropout)."""
    hidden = X
    last = len(network.weights) - 1
    for index, (weight, bias) in enumerate(zip(network.weights, network.biases, strict=True)):
        hidden = hidden @ weight[member] + bias[member, 0]
        if index < last:
            hidden = torch.relu(hidden)
    if not network.gaussian_head:
        return hidden, None
    mean, raw = hidden.split(network.output_dim, dim=-1)
    return mean, network.min_std + torch.nn.functional.softplus(raw)


# ---------------------------------------------------------------------------
# Shapes and the forward pass


@pytest.mark.parametrize("batch_shape", [(), (4,), (2, 3)])
@pytest.mark.parametrize("gaussian_head", [False, True])
def test_shared_input_shapes(batch_shape, gaussian_head, tkwargs):
    network = _network(tkwargs, gaussian_head=gaussian_head).eval()
    output = network(_inputs((*batch_shape, 7, 3), tkwargs))
    assert isinstance(output, MemberOutput)
    assert output.mean.shape == torch.Size([*batch_shape, 3, 7, 2])
    if gaussian_head:
        assert output.std.shape == output.mean.shape
    else:
        assert output.std is None
    assert network.num_members == 3
    assert network.hidden_widths == [6, 5]
    # A Gaussian head doubles the last layer's width (mean and raw std).
    last = 4 if gaussian_head else 2
    assert [weight.shape for weight in network.weights] == [(3, 3, 6), (3, 6, 5), (3, 5, last)]
    assert [bias.shape for bias in network.biases] == [(3, 1, 6), (3, 1, 5), (3, 1, last)]


@pytest.mark.parametrize("gaussian_head", [False, True])
def test_each_member_is_its_own_mlp(gaussian_head, tkwargs):
    network = _network(tkwargs, gaussian_head=gaussian_head).eval()
    X = _inputs((2, 4, 3), tkwargs, seed=2)
    output = network(X)
    for member in range(network.num_members):
        mean, std = _manual_forward(network, X, member)
        torch.testing.assert_close(output.mean[:, member], mean)
        if gaussian_head:
            torch.testing.assert_close(output.std[:, member], std)


def test_per_member_inputs(tkwargs):
    network = _network(tkwargs, gaussian_head=True).eval()
    X = _inputs((3, 5, 3), tkwargs, seed=3)
    output = network(X, per_member=True)
    assert output.mean.shape == output.std.shape == torch.Size([3, 5, 2])
    for member in range(3):
        mean, std = _manual_forward(network, X[member], member)
        torch.testing.assert_close(output.mean[member], mean)
        torch.testing.assert_close(output.std[member], std)
    # Member k sees its own rows: equal rows give the shared-input result.
    shared = _inputs((5, 3), tkwargs, seed=4)
    torch.testing.assert_close(
        network(shared.expand(3, 5, 3), per_member=True).mean, network(shared).mean
    )


@pytest.mark.parametrize("shape", [(2, 5, 3), (3, 5), (1, 3, 5, 3)])
def test_per_member_inputs_must_be_k_by_n_by_d(shape, tkwargs):
    with pytest.raises(ValueError, match="per_member inputs must be"):
        _network(tkwargs)(torch.zeros(*shape, **tkwargs), per_member=True)


# ---------------------------------------------------------------------------
# Initialisation from the member seeds


@pytest.mark.parametrize("gaussian_head", [False, True])
def test_member_parameters_depend_on_its_seed_alone(gaussian_head, tkwargs):
    network = _network(tkwargs, gaussian_head=gaussian_head)
    for member, seed in enumerate(SEEDS):
        alone = _network(tkwargs, member_seeds=[seed], gaussian_head=gaussian_head)
        for stacked, single in zip(network.parameters(), alone.parameters(), strict=True):
            torch.testing.assert_close(stacked[member], single[0], rtol=0, atol=0)
    # The global RNG plays no part, and different seeds give different members.
    torch.manual_seed(0)
    first = _network(tkwargs)
    torch.manual_seed(1)
    second = _network(tkwargs)
    for a, b in zip(first.parameters(), second.parameters(), strict=True):
        assert torch.equal(a, b)
    assert not torch.equal(network.weights[0][0], network.weights[0][1])


def test_initialisation_follows_the_linear_layer_rule():
    network = BatchedMLP(4, 1, hidden_widths=(50,), member_seeds=list(range(20)))
    for weight, bias in zip(network.weights, network.biases, strict=True):
        bound = weight.shape[1] ** -0.5
        for tensor in (weight, bias):
            assert tensor.abs().max() <= bound
            assert tensor.abs().max() > 0.9 * bound
    # reset_parameters reproduces the initialisation.
    before = [p.detach().clone() for p in network.parameters()]
    with torch.no_grad():
        for p in network.parameters():
            p.add_(1.0)
    network.reset_parameters()
    for old, new in zip(before, network.parameters(), strict=True):
        assert torch.equal(old, new)


def test_member_generators_are_per_member_and_per_stream(tkwargs):
    network = _network(tkwargs)
    alone = _network(tkwargs, member_seeds=[SEEDS[1]])
    draws = {
        stream: [torch.rand(4, generator=g) for g in network.member_generators(stream)]
        for stream in (INITIALISATION_STREAM, DATA_ORDER_STREAM, RESAMPLING_STREAM)
    }
    for stream, values in draws.items():
        (single,) = alone.member_generators(stream)
        assert torch.equal(values[1], torch.rand(4, generator=single))
        assert not torch.equal(values[0], values[1])
    assert not torch.equal(draws[INITIALISATION_STREAM][0], draws[DATA_ORDER_STREAM][0])
    assert not torch.equal(draws[DATA_ORDER_STREAM][0], draws[RESAMPLING_STREAM][0])


# ---------------------------------------------------------------------------
# Gaussian head, dropout, penalty


def test_gaussian_head_std_is_positive_and_floored(tkwargs):
    min_std = 0.05
    network = _network(tkwargs, gaussian_head=True, min_std=min_std).eval()
    with torch.no_grad():
        # Push the raw std output far negative: the std approaches the floor from above.
        network.biases[-1][..., 2:] = -50.0
    std = network(_inputs((6, 3), tkwargs)).std
    assert (std >= min_std).all()
    torch.testing.assert_close(std, torch.full_like(std, min_std), **tolerances(tkwargs["dtype"]))
    without_floor = _network(tkwargs, gaussian_head=True, min_std=0.0).eval()
    assert (without_floor(_inputs((6, 3), tkwargs)).std > 0).all()
    with pytest.raises(ValueError, match="min_std"):
        _network(tkwargs, gaussian_head=True, min_std=-1e-3)


def test_dropout_only_in_train_mode(tkwargs):
    network = _network(tkwargs, dropout=0.5)
    X = _inputs((8, 3), tkwargs)
    network.eval()
    first, second = network(X).mean, network(X).mean
    assert torch.equal(first, second)
    without = _network(tkwargs, dropout=0.0).eval()
    assert torch.equal(first, without(X).mean)
    network.train()
    torch.manual_seed(0)
    noisy = network(X).mean
    assert not torch.allclose(noisy, first)
    assert not torch.allclose(noisy, network(X).mean)


def test_dropout_masks_come_from_the_generator(tkwargs):
    network = _network(tkwargs, dropout=0.5).train()
    X = _inputs((8, 3), tkwargs)
    state = torch.random.get_rng_state()
    first = network(X, generator=torch.Generator().manual_seed(1)).mean
    again = network(X, generator=torch.Generator().manual_seed(1)).mean
    assert torch.equal(torch.random.get_rng_state(), state)
    assert torch.equal(first, again)
    assert not torch.equal(first, network(X, generator=torch.Generator().manual_seed(2)).mean)


# float64 only: the whole-unit check needs the average over 4000 units to 1e-6 relative to
# one unit, which float32 rounding does not reach.
@pytest.mark.parametrize("dtype", [torch.float64])
def test_dropout_keeps_units_at_each_members_rate_and_rescales_them(tkwargs):
    rates = torch.tensor([0.1, 0.5, 0.8])
    width = 4000
    network = _network(tkwargs, dropout=rates, hidden_widths=(width,), output_dim=1)
    with torch.no_grad():
        # Every hidden unit outputs 1 before dropout; the output averages the units.
        network.weights[0].zero_()
        network.biases[0].fill_(1.0)
        network.weights[1].fill_(1.0 / width)
        network.biases[1].zero_()
    network.train()
    torch.manual_seed(0)
    averages = network(_inputs((8, 3), tkwargs)).mean.squeeze(-1)  # K x 8
    keep = 1 - network.dropout_rates
    # A kept unit contributes 1 / keep, so the average times keep is the kept fraction.
    kept_fraction = averages * keep[:, None]
    torch.testing.assert_close(kept_fraction.mean(-1), keep, rtol=0, atol=0.01)
    # Units are 0 or exactly 1 / keep: the fraction is a whole number of units.
    units = kept_fraction * width
    torch.testing.assert_close(units, units.round(), rtol=0, atol=1e-6)


def test_per_member_dropout_rates(tkwargs):
    network = _network(tkwargs, dropout=torch.tensor([0.0, 0.5, 0.0]))
    torch.testing.assert_close(
        network.dropout_rates, torch.tensor([0.0, 0.5, 0.0], **tkwargs), rtol=0, atol=0
    )
    X = _inputs((8, 3), tkwargs)
    network.eval()
    plain = network(X).mean
    network.train()
    torch.manual_seed(0)
    noisy = network(X).mean
    # Only the member with a positive rate is thinned.
    torch.testing.assert_close(noisy[0], plain[0], rtol=0, atol=0)
    torch.testing.assert_close(noisy[2], plain[2], rtol=0, atol=0)
    assert not torch.allclose(noisy[1], plain[1])
    assert torch.equal(
        _network(tkwargs, dropout=0.25).dropout_rates, torch.full((3,), 0.25, **tkwargs)
    )


@pytest.mark.parametrize(
    "dropout",
    [
        1.0,
        -0.1,
        torch.tensor([0.1, 0.2]),
        torch.tensor([0.1, 0.2, 0.3, 0.4]),
        torch.tensor([0.1, 1.0, 0.0]),
        torch.tensor([[0.1, 0.2, 0.3]]),
    ],
)
def test_invalid_dropout(dropout, tkwargs):
    with pytest.raises(ValueError, match="dropout must be a float or a 3-vector"):
        _network(tkwargs, dropout=dropout)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"member_seeds": []}, "member_seeds"),
        ({"hidden_widths": (4, 0)}, "hidden_widths"),
        ({"activation": ("relu",)}, "one per hidden layer"),
        ({"skip_connections": ((), (1,))}, "skip_connections"),
        ({"skip_connections": ((-1,),)}, "skip_connections"),
        ({"activation": "nope"}, "activation"),
    ],
)
def test_invalid_arguments(kwargs, message, tkwargs):
    with pytest.raises(ValueError, match=message):
        _network(tkwargs, **kwargs)


def test_squared_norms_is_the_per_member_sum(tkwargs):
    network = _network(tkwargs, gaussian_head=True)
    manual = torch.stack(
        [
            sum(
                (weight[k] ** 2).sum() + (bias[k] ** 2).sum()
                for weight, bias in zip(network.weights, network.biases, strict=True)
            )
            for k in range(network.num_members)
        ]
    )
    norms = network.squared_norms()
    assert norms.shape == (3,)
    torch.testing.assert_close(norms, manual)
    # The gradient of member k's penalty reaches member k only.
    norms[1].backward()
    for weight in network.weights:
        torch.testing.assert_close(weight.grad[1], 2 * weight.detach()[1])
        assert (weight.grad[0] == 0).all() and (weight.grad[2] == 0).all()


# ---------------------------------------------------------------------------
# EnsembleNetwork


@pytest.mark.parametrize("gaussian_head", [False, True])
def test_ensemble_network_concatenates_groups(gaussian_head, tkwargs):
    small = _network(tkwargs, member_seeds=[1, 2], gaussian_head=gaussian_head, hidden_widths=(4,))
    deep = _network(tkwargs, member_seeds=[3], gaussian_head=gaussian_head, hidden_widths=(8, 8, 8))
    ensemble = EnsembleNetwork([small, deep]).eval()
    assert ensemble.num_members == 3
    assert ensemble.gaussian_head is gaussian_head
    X = _inputs((5, 4, 3), tkwargs)
    output = ensemble(X)
    assert output.mean.shape == torch.Size([5, 3, 4, 2])
    torch.testing.assert_close(output.mean[:, :2], small(X).mean)
    torch.testing.assert_close(output.mean[:, 2:], deep(X).mean)
    if gaussian_head:
        torch.testing.assert_close(output.std, torch.cat([small(X).std, deep(X).std], dim=-3))
    else:
        assert output.std is None
    # A single group is passed through unchanged.
    single = EnsembleNetwork([small]).eval()
    torch.testing.assert_close(single(X).mean, small(X).mean)


def test_ensemble_network_rejects_mixed_groups(tkwargs):
    with pytest.raises(ValueError, match="same head"):
        EnsembleNetwork(
            [_network(tkwargs, gaussian_head=True), _network(tkwargs, gaussian_head=False)]
        )
    with pytest.raises(ValueError, match="same number of outputs"):
        EnsembleNetwork([_network(tkwargs, output_dim=1), _network(tkwargs, output_dim=2)])
    with pytest.raises(ValueError, match="at least one member group"):
        EnsembleNetwork([])


def test_skip_connections_project_add_and_apply_relu(tkwargs):
    torch.manual_seed(0)
    net = BatchedMLP(
        3,
        1,
        hidden_widths=(4, 6, 5),
        member_seeds=[0, 1],
        activation=("tanh", "identity", "sigmoid"),
        skip_connections=((), (-1,), (-1, 0)),
    ).to(**tkwargs)
    assert len(net.projections) == 3
    X = torch.rand(7, 3, **tkwargs)
    for member in range(2):
        W = [w[member] for w in net.weights]
        b = [bias[member] for bias in net.biases]
        P = [projection[member] for projection in net.projections]
        h0 = torch.tanh(X @ W[0] + b[0])
        h1 = torch.relu((h0 @ W[1] + b[1]) + X @ P[0])
        h2 = torch.relu(torch.sigmoid(h1 @ W[2] + b[2]) + X @ P[1] + h0 @ P[2])
        expected = h2 @ W[3] + b[3]
        torch.testing.assert_close(net(X).mean[member], expected)


def test_empty_hidden_widths_give_a_linear_model(tkwargs):
    net = BatchedMLP(3, 2, hidden_widths=(), member_seeds=[0, 1]).to(**tkwargs)
    X = torch.rand(5, 3, **tkwargs)
    expected = X @ net.weights[0][1] + net.biases[0][1]
    torch.testing.assert_close(net(X).mean[1], expected)


def test_initial_weights_do_not_depend_on_the_default_dtype():
    previous = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float32)
        single = BatchedMLP(3, 2, (8, 4), [5, 6], skip_connections=((), (-1,)))
        torch.set_default_dtype(torch.float64)
        double = BatchedMLP(3, 2, (8, 4), [5, 6], skip_connections=((), (-1,)))
    finally:
        torch.set_default_dtype(previous)
    for a, b in zip(single.parameters(), double.parameters(), strict=True):
        assert a.dtype == b.dtype == torch.float64
        assert torch.equal(a, b)


# ---------------------------------------------------------------------------
# New input coordinates


@pytest.mark.parametrize("gaussian_head", [False, True])
def test_rebased_inputs_give_the_same_function_in_the_new_coordinates(gaussian_head, tkwargs):
    network = EnsembleNetwork(
        [
            _network(tkwargs, gaussian_head=gaussian_head),
            _network(tkwargs, member_seeds=[3], gaussian_head=gaussian_head, hidden_widths=(4,)),
        ]
    )
    scale = torch.tensor([0.5, 2.0, 0.25], **tkwargs)
    shift = torch.tensor([0.1, -0.3, 0.7], **tkwargs)
    new_inputs = _inputs((7, 3), tkwargs)
    before = network(shift + scale * new_inputs)
    network.rebase_inputs(scale, shift)
    after = network(new_inputs)
    torch.testing.assert_close(after.mean, before.mean, **tolerances(tkwargs["dtype"]))
    if gaussian_head:
        torch.testing.assert_close(after.std, before.std, **tolerances(tkwargs["dtype"]))


def test_inputs_of_a_network_with_skips_from_its_inputs_cannot_be_rebased(tkwargs):
    network = _network(tkwargs, skip_connections=((), (-1,)))
    ones = torch.ones(3, **tkwargs)
    with pytest.raises(ValueError, match="skip connections from its inputs"):
        network.rebase_inputs(ones, 0 * ones)
