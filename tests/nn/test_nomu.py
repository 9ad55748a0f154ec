"""Tests of NOMU's two-branch network and its readout map."""

import pytest
import torch
from torch import nn

from botorch_nn_uq.nn.nomu import NOMUNetwork, build_mlp, nomu_readout
from tests.testing import seeded_rand


def _network(tkwargs: dict, **kwargs) -> NOMUNetwork:
    torch.manual_seed(0)
    settings = {"mean_widths": (6, 5), "uncertainty_widths": (4, 3), **kwargs}
    return NOMUNetwork(3, 2, **settings).to(**tkwargs)


def _inputs(*shape: int, tkwargs: dict) -> torch.Tensor:
    return seeded_rand(*shape, seed=1, **tkwargs)


@pytest.mark.parametrize("init_scale", [0.05, None])
def test_a_generator_builds_the_network_that_the_seeded_global_rng_builds(init_scale) -> None:
    settings = {"mean_widths": (6, 5), "uncertainty_widths": (4,), "learn_noise": True}
    torch.manual_seed(3)
    expected = NOMUNetwork(3, 2, init_scale=init_scale, **settings)
    state = torch.random.get_rng_state()
    generator = torch.Generator().manual_seed(3)
    network = NOMUNetwork(3, 2, init_scale=init_scale, generator=generator, **settings)
    assert torch.equal(torch.random.get_rng_state(), state)
    for actual, wanted in zip(network.parameters(), expected.parameters(), strict=True):
        assert torch.equal(actual, wanted)


@pytest.mark.parametrize("batch_shape", [(), (4,), (2, 3)])
def test_output_shapes(batch_shape, tkwargs: dict) -> None:
    network = _network(tkwargs, learn_noise=True)
    output = network(_inputs(*batch_shape, 7, 3, tkwargs=tkwargs))
    for tensor in (output.mean, output.raw_uncertainty, output.noise_std):
        assert tensor.shape == torch.Size([*batch_shape, 7, 2])
    assert (output.noise_std >= 1e-3).all() and output.features is None
    with_features = network(_inputs(*batch_shape, 7, 3, tkwargs=tkwargs), return_features=True)
    mean_hidden = network.mean_network[:-1](_inputs(*batch_shape, 7, 3, tkwargs=tkwargs))
    torch.testing.assert_close(with_features.features, mean_hidden)
    assert _network(tkwargs)(_inputs(7, 3, tkwargs=tkwargs)).noise_std is None


def test_raw_uncertainty_layer_sees_both_last_hidden_layers(tkwargs: dict) -> None:
    network = _network(tkwargs)
    X = _inputs(5, 3, tkwargs=tkwargs)
    mean_hidden = network.mean_network[:-1](X)  # last hidden layer of the mean net
    uncertainty_hidden = network.uncertainty_network(X)
    layer = network.raw_uncertainty_layer
    assert layer.in_features == 5 + 3
    expected = torch.cat([mean_hidden, uncertainty_hidden], dim=-1) @ layer.weight.T + layer.bias
    output = network(X)
    torch.testing.assert_close(output.raw_uncertainty, expected)
    torch.testing.assert_close(output.mean, network.mean_network(X))


def test_connecting_earlier_mean_layers(tkwargs: dict) -> None:
    network = _network(tkwargs, connected_mean_layers=(0, -1))
    assert network.raw_uncertainty_layer.in_features == 6 + 5 + 3
    X = _inputs(5, 3, tkwargs=tkwargs)
    first_hidden = network.mean_network[:2](X)
    last_hidden = network.mean_network[:-1](X)
    features = torch.cat([first_hidden, last_hidden, network.uncertainty_network(X)], dim=-1)
    layer = network.raw_uncertainty_layer
    torch.testing.assert_close(network(X).raw_uncertainty, features @ layer.weight.T + layer.bias)
    with pytest.raises(ValueError, match="connected_mean_layers"):
        _network(tkwargs, connected_mean_layers=(2,))


@pytest.mark.parametrize("detach", [True, False])
def test_stop_gradient_on_the_mean_to_uncertainty_connection(detach: bool, tkwargs: dict) -> None:
    network = _network(tkwargs, detach_mean_features=detach, activation="tanh")  # no dead units
    network(_inputs(5, 3, tkwargs=tkwargs)).raw_uncertainty.sum().backward()
    mean_hidden_grads = [layer.weight.grad for layer in network.mean_network[:-1:2]]
    if detach:
        assert all(grad is None for grad in mean_hidden_grads)
    else:
        assert all(grad is not None and grad.abs().sum() > 0 for grad in mean_hidden_grads)
    assert network.uncertainty_network[0].weight.grad.abs().sum() > 0


def test_uniform_initialisation(tkwargs: dict) -> None:
    network = _network(tkwargs, init_scale=0.05)
    for parameter in network.parameters():
        assert parameter.abs().max() <= 0.05
    default = _network(tkwargs, init_scale=None)
    assert max(p.abs().max() for p in default.parameters()) > 0.05


def test_pretrained_mean_network_is_used_as_is(tkwargs: dict) -> None:
    torch.manual_seed(3)
    pretrained = build_mlp(3, (8, 8), 2, "tanh").to(**tkwargs)
    state = {k: v.clone() for k, v in pretrained.state_dict().items()}
    network = NOMUNetwork(3, 2, (), (4,), mean_network=pretrained).to(**tkwargs)
    assert network.mean_network is pretrained
    for key, value in state.items():
        torch.testing.assert_close(pretrained.state_dict()[key], value, rtol=0, atol=0)
    assert network.raw_uncertainty_layer.in_features == 8 + 4
    with pytest.raises(TypeError, match="Sequential"):
        NOMUNetwork(3, 2, (), (4,), mean_network=nn.Linear(3, 2))
    with pytest.raises(ValueError, match="2 outputs"):
        NOMUNetwork(3, 1, (), (4,), mean_network=pretrained)
    with pytest.raises(ValueError, match="at least two nn.Linear"):
        NOMUNetwork(3, 2, (), (4,), mean_network=nn.Sequential(nn.Linear(3, 2)))


def test_invalid_widths() -> None:
    with pytest.raises(ValueError, match="uncertainty_widths"):
        NOMUNetwork(3, 1, (4,), ())
    with pytest.raises(ValueError, match="mean_widths"):
        NOMUNetwork(3, 1, (), (4,))


def test_exponential_readout_formula_and_limits(tkwargs: dict) -> None:
    raw = torch.tensor([-5.0, -0.1, 0.0, 0.3, 2.0, 1e6], **tkwargs)
    l_min, l_max = 1e-3, 2.0
    sigma = nomu_readout(raw, l_min, l_max)
    expected = l_max * (1 - torch.exp(-(raw.clamp_min(0) + l_min) / l_max))
    torch.testing.assert_close(sigma, expected)
    # r <= 0 gives ~l_min; r -> inf gives l_max; monotone in between.
    floor = l_max * (1 - torch.exp(torch.tensor(-l_min / l_max, **tkwargs)))
    torch.testing.assert_close(sigma[:3], floor.expand(3))
    assert abs(floor - l_min) < 1e-6
    torch.testing.assert_close(sigma[-1], torch.tensor(l_max, **tkwargs))
    assert (sigma.diff() >= 0).all() and (sigma >= 0).all()


def test_linear_readout_clips_to_the_interval(tkwargs: dict) -> None:
    raw = torch.tensor([-1.0, 0.0005, 0.5, 1.5, 3.0], **tkwargs)
    sigma = nomu_readout(raw, 1e-3, 2.0, readout="linear")
    torch.testing.assert_close(sigma, torch.tensor([1e-3, 1e-3, 0.5, 1.5, 2.0], **tkwargs))
    with pytest.raises(ValueError, match="readout"):
        nomu_readout(raw, 1e-3, 2.0, readout="cubic")
