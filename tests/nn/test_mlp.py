"""Tests of the dropout MLP and the activations."""

import pytest
import torch
from torch import nn

from botorch_nn_uq.nn.mlp import ACTIVATIONS, DropoutMLP, SmeLU, dropout, make_activation
from tests.testing import seeded_rand


def _network(
    tkwargs, input_dim=3, output_dim=2, hidden_widths=(5, 4), activation="tanh", dropout=0.3
):
    torch.manual_seed(0)
    return DropoutMLP(input_dim, output_dim, hidden_widths, activation, dropout).to(**tkwargs)


def _inputs(shape, tkwargs, seed=1):
    return seeded_rand(*shape, seed=seed, **tkwargs)


@pytest.mark.parametrize("batch_shape", [(), (4,), (2, 3)])
def test_output_shapes_without_and_with_masks(batch_shape, tkwargs):
    network = _network(tkwargs).eval()
    X = _inputs((*batch_shape, 6, 3), tkwargs)
    assert network(X).shape == torch.Size([*batch_shape, 6, 2])
    torch.manual_seed(1)
    masks = network.sample_masks(7)
    assert [mask.shape for mask in masks] == [torch.Size([7, 5]), torch.Size([7, 4])]
    assert network(X, masks=masks).shape == torch.Size([*batch_shape, 7, 6, 2])


def _manual_forward(network, x, masks, member):
    r"""Forward pass of one thinned network written out with the layer weights."""
    hidden = x
    for index, layer in enumerate(network.hidden_layers):
        hidden = torch.tanh(hidden @ layer.weight.T + layer.bias)
        hidden = hidden * masks[index][member]
    return hidden @ network.output_layer.weight.T + network.output_layer.bias


@pytest.mark.parametrize("batch_shape", [(), (3,), (2, 2)])
def test_each_member_output_is_the_thinned_network(batch_shape, tkwargs):
    network = _network(tkwargs)
    X = _inputs((*batch_shape, 4, 3), tkwargs, seed=2)
    torch.manual_seed(3)
    masks = network.sample_masks(6)
    outputs = network(X, masks=masks)
    for member in range(6):
        expected = _manual_forward(network, X, masks, member)
        torch.testing.assert_close(outputs[..., member, :, :], expected)


def test_members_differ_and_a_full_mask_is_the_plain_network(tkwargs):
    network = _network(tkwargs)
    X = _inputs((4, 3), tkwargs, seed=4)
    torch.manual_seed(5)
    masks = network.sample_masks(5)
    outputs = network(X, masks=masks)
    assert not torch.allclose(outputs[0], outputs[1])
    ones = [torch.ones(1, width, **tkwargs) for width in network.hidden_widths]
    network.eval()
    torch.testing.assert_close(network(X, masks=ones)[0], network(X))


def test_masks_in_training_mode_are_the_only_dropout(tkwargs):
    network = _network(tkwargs).train()
    X = _inputs((2, 4, 3), tkwargs, seed=6)
    torch.manual_seed(7)
    masks = network.sample_masks(3)
    first = network(X, masks=masks)
    second = network(X, masks=masks)
    torch.testing.assert_close(first, second, rtol=0.0, atol=0.0)


@pytest.mark.parametrize("dropout", [0.1, 0.5, 0.8])
def test_mask_values_and_keep_rate(dropout, tkwargs):
    network = _network(tkwargs, hidden_widths=(200, 100), dropout=dropout)
    torch.manual_seed(8)
    masks = network.sample_masks(50)
    keep = 1.0 - dropout
    for mask in masks:
        assert mask.dtype == tkwargs["dtype"]
        kept = mask != 0
        torch.testing.assert_close(mask[kept], torch.full_like(mask[kept], 1.0 / keep))
        # Keep rate within 5 standard errors of 1 - p.
        standard_error = (keep * dropout / mask.numel()) ** 0.5
        assert abs(kept.to(tkwargs["dtype"]).mean().item() - keep) < 5 * standard_error
        # Inverted dropout keeps the expected activation scale: E[mask] = 1.
        assert abs(mask.mean().item() - 1.0) < 5 * standard_error / keep


def test_zero_dropout_gives_masks_of_ones(tkwargs):
    network = _network(tkwargs, dropout=0.0)
    masks = network.sample_masks(4)
    for mask in masks:
        assert torch.equal(mask, torch.ones_like(mask))


def test_masks_follow_the_generator_and_without_one_the_global_rng(tkwargs):
    network = _network(tkwargs)
    torch.manual_seed(9)
    from_global = network.sample_masks(3)
    state = torch.random.get_rng_state()
    first = network.sample_masks(3, torch.Generator().manual_seed(9))
    second = network.sample_masks(3, torch.Generator().manual_seed(9))
    assert torch.equal(torch.random.get_rng_state(), state)
    for a, b, c in zip(first, second, from_global, strict=True):
        assert torch.equal(a, b) and torch.equal(a, c)


def test_a_generator_builds_the_network_that_the_seeded_global_rng_builds():
    torch.manual_seed(3)
    expected = DropoutMLP(3, 2, (5, 4))
    state = torch.random.get_rng_state()
    network = DropoutMLP(3, 2, (5, 4), generator=torch.Generator().manual_seed(3))
    assert torch.equal(torch.random.get_rng_state(), state)
    for actual, wanted in zip(network.parameters(), expected.parameters(), strict=True):
        assert torch.equal(actual, wanted)


@pytest.mark.parametrize("p", [0.0, 0.1, 0.5])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dropout_equals_torch_dropout_with_the_same_seed(p, dtype):
    X = _inputs((6, 40), {"dtype": dtype})
    torch.manual_seed(5)
    expected = nn.functional.dropout(X, p, training=True)
    assert torch.equal(dropout(X, p, torch.Generator().manual_seed(5)), expected)


def test_training_mode_dropout_draws_its_masks_from_the_generator(tkwargs):
    network = _network(tkwargs, dropout=0.5).train()
    X = _inputs((8, 3), tkwargs)
    state = torch.random.get_rng_state()
    first = network(X, generator=torch.Generator().manual_seed(2))
    again = network(X, generator=torch.Generator().manual_seed(2))
    assert torch.equal(torch.random.get_rng_state(), state)
    assert torch.equal(first, again)
    assert not torch.equal(first, network(X, generator=torch.Generator().manual_seed(3)))


def test_eval_mode_is_deterministic_and_train_mode_is_stochastic(tkwargs):
    network = _network(tkwargs, dropout=0.5)
    X = _inputs((3, 6, 3), tkwargs, seed=10)
    network.eval()
    torch.manual_seed(0)
    first = network(X)
    torch.manual_seed(1)
    second = network(X)
    assert torch.equal(first, second)
    network.train()
    torch.manual_seed(0)
    train_first = network(X)
    train_second = network(X)
    assert not torch.allclose(train_first, train_second)
    # Same seed, same dropout draw.
    torch.manual_seed(0)
    assert torch.equal(network(X), train_first)


def test_train_mode_dropout_is_inverted_dropout(tkwargs):
    # Mean over many dropout draws approaches the eval-mode output for a network that is
    # linear after the (only) hidden layer activation.
    network = _network(tkwargs, hidden_widths=(8,), activation="identity", dropout=0.5)
    X = _inputs((1, 3), tkwargs, seed=11)
    network.eval()
    deterministic = network(X)
    network.train()
    torch.manual_seed(12)
    draws = network(X.expand(4000, 1, 3))
    standard_error = draws.std(0) / 4000**0.5
    assert ((draws.mean(0) - deterministic).abs() < 5 * standard_error).all()


def test_masks_follow_the_network_dtype_and_device(tkwargs):
    torch.manual_seed(0)
    network = DropoutMLP(2, 1, (3,), dropout=0.2).to(**tkwargs)
    masks = network.sample_masks(2)
    assert masks[0].dtype == tkwargs["dtype"] and masks[0].device == tkwargs["device"]
    assert network(torch.rand(4, 2, **tkwargs), masks=masks).dtype == tkwargs["dtype"]


def test_hidden_widths_and_structure(tkwargs):
    network = _network(tkwargs, input_dim=3, output_dim=2, hidden_widths=(5, 4, 6))
    assert network.hidden_widths == [5, 4, 6]
    assert [layer.in_features for layer in network.hidden_layers] == [3, 5, 4]
    assert network.output_layer.in_features == 6
    assert network.output_layer.out_features == 2


@pytest.mark.parametrize("dropout", [-0.1, 1.0, 1.5])
def test_invalid_dropout_raises(dropout):
    with pytest.raises(ValueError, match="dropout"):
        DropoutMLP(2, 1, (4,), dropout=dropout)


def test_invalid_activation_raises():
    with pytest.raises(ValueError, match="Unknown activation 'leaky'"):
        DropoutMLP(2, 1, (4,), activation="leaky")
    with pytest.raises(ValueError, match="valid: "):
        make_activation("nope")


@pytest.mark.parametrize("hidden_widths", [(), []])
def test_empty_hidden_widths_raise(hidden_widths):
    with pytest.raises(ValueError, match="hidden_widths"):
        DropoutMLP(2, 1, hidden_widths)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_every_activation_builds_and_runs(name, tkwargs):
    activation = make_activation(name)
    assert isinstance(activation, ACTIVATIONS[name])
    assert isinstance(activation, nn.Module)
    network = _network(tkwargs, activation=name, dropout=0.2)
    X = _inputs((2, 3, 3), tkwargs)
    masks = network.sample_masks(4)
    outputs = network(X, masks=masks)
    assert outputs.shape == torch.Size([2, 4, 3, 2])
    assert torch.isfinite(outputs).all()
    # The eval-mode network applies exactly this activation.
    single = _network(tkwargs, hidden_widths=(5,), activation=name).eval()
    layer, output_layer = single.hidden_layers[0], single.output_layer
    expected = activation(X @ layer.weight.T + layer.bias) @ output_layer.weight.T
    torch.testing.assert_close(single(X), expected + output_layer.bias)


def test_rebased_inputs_give_the_same_function_in_the_new_coordinates(tkwargs):
    network = _network(tkwargs, input_dim=3).eval()
    scale = torch.tensor([0.5, 2.0, 0.25], **tkwargs)
    shift = torch.tensor([0.1, -0.3, 0.7], **tkwargs)
    new_inputs = _inputs((7, 3), tkwargs)
    before = network(shift + scale * new_inputs)
    network.rebase_inputs(scale, shift)
    torch.testing.assert_close(network(new_inputs), before)


def test_smelu_is_relu_with_a_parabola_over_the_kink():
    x = torch.linspace(-3, 3, 6001, dtype=torch.float64)
    for half_width in (0.05, 0.5):
        smooth = SmeLU(half_width)(x)
        outside = x.abs() >= half_width
        torch.testing.assert_close(smooth[outside], torch.relu(x)[outside], rtol=0, atol=1e-15)
        inside = ~outside
        torch.testing.assert_close(smooth[inside], (x[inside] + half_width) ** 2 / (4 * half_width))
        assert (smooth - torch.relu(x)).max().item() == pytest.approx(half_width / 4)


@pytest.mark.parametrize("half_width", [0.05, 0.7])
def test_smelu_slope_is_continuous_and_is_autograds(half_width):
    x = torch.linspace(-2, 2, 4001, dtype=torch.float64, requires_grad=True)
    activation = SmeLU(half_width)
    grad = torch.linspace(-1, 1, 4001, dtype=torch.float64)
    (expected,) = torch.autograd.grad(activation(x), x, grad)
    value, kept = activation.forward_keeping_slope(x.detach())
    torch.testing.assert_close(SmeLU.backward_from_slope(grad, kept), expected)
    torch.testing.assert_close(value, activation(x).detach())
    (slope,) = torch.autograd.grad(activation(x).sum(), x)
    assert slope.diff().abs().max() <= 0.001 / half_width + 1e-12
    assert slope.min() == 0 and slope.max() == 1
    ends = torch.tensor([-half_width, half_width], dtype=torch.float64, requires_grad=True)
    (slope_at_ends,) = torch.autograd.grad(activation(ends).sum(), ends)
    assert slope_at_ends.tolist() == [0.0, 1.0]


@pytest.mark.parametrize("half_width", [0.0, -1.0, float("nan")])
def test_smelu_refuses_a_half_width_that_is_not_positive(half_width):
    with pytest.raises(ValueError, match="half_width must be positive"):
        SmeLU(half_width)
