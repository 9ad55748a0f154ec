"""The warped neural surrogates of protocol 7 (benchmarks/warp_variants.py)."""

import pytest
import torch
from botorch.models.transforms.input import Warp

from benchmarks import warp_variants
from botorch_nn_uq.models import MODEL_CARDS


@pytest.mark.parametrize("name", warp_variants.WARPED_CARDS)
def test_a_warped_variant_is_the_registered_model_with_a_learnable_warp(name) -> None:
    card = next(card for card in MODEL_CARDS if card.name == name)
    spec = warp_variants.warped_spec(card)
    assert spec.name == f"{name}-warp"
    assert spec.supports_warm_start == card.bo.supports_warm_start
    bounds = torch.tensor([[0.0] * 3, [2.0] * 3], dtype=torch.float64)
    X = 2 * torch.rand(30, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    model = spec.build(X, X.sum(-1, keepdim=True), bounds, 0, max_steps=20)
    assert type(model) is card.model_class
    transform = model.input_transform
    assert isinstance(transform, Warp) and not transform.training
    assert not torch.equal(transform.concentration0, torch.ones(3, dtype=torch.float64))
    # The card's constructor options, as the registered model has them (but the budget
    # this fit overrides).
    for option, value in card.bo.constructor_options.items():
        if option != "max_steps":
            assert getattr(model.hyperparameters, option) == value
    assert model.posterior(X[:4]).mean.shape == (4, 1)
    # A warm start, as the continual fit policy makes it.
    warm = spec.build(X, X.sum(-1, keepdim=True), bounds, 1, warm_start=model, max_steps=5)
    assert warm.warm_started
