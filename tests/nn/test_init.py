"""Tests of the layers initialised from an explicit generator."""

import pytest
import torch
from torch import nn

from botorch_nn_uq.nn.init import linear


@pytest.mark.parametrize(("in_features", "out_features"), [(3, 64), (64, 1), (1, 1)])
def test_linear_equals_nn_linear_after_manual_seed(in_features, out_features) -> None:
    torch.manual_seed(4)
    expected = [nn.Linear(in_features, out_features), nn.Linear(out_features, 5)]
    after = torch.rand(3)
    generator = torch.Generator().manual_seed(4)
    layers = [linear(in_features, out_features, generator), linear(out_features, 5, generator)]
    for layer, wanted in zip(layers, expected, strict=True):
        assert type(layer) is nn.Linear and layer.weight.dtype == torch.get_default_dtype()
        assert torch.equal(layer.weight, wanted.weight) and torch.equal(layer.bias, wanted.bias)
        assert layer.weight.requires_grad and layer.bias.requires_grad
    # The generator continues where the global stream continued.
    assert torch.equal(torch.rand(3, generator=generator), after)


def test_linear_draws_nothing_from_the_global_generator() -> None:
    torch.manual_seed(0)
    state = torch.random.get_rng_state()
    linear(8, 8, torch.Generator().manual_seed(1))
    assert torch.equal(torch.random.get_rng_state(), state)


def test_linear_without_a_generator_draws_from_the_global_one() -> None:
    torch.manual_seed(2)
    expected = nn.Linear(4, 3)
    torch.manual_seed(2)
    layer = linear(4, 3)
    assert torch.equal(layer.weight, expected.weight) and torch.equal(layer.bias, expected.bias)
