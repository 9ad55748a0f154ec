"""Resizable function banks (exercised through MC dropout's bank of dropout masks)."""

import pytest
import torch

from botorch_nn_uq.models import MCDropout
from tests.models.mc_dropout_toy import FAST, toy_data
from tests.testing import tolerances


def test_resample_function_bank_arguments_are_checked() -> None:
    X = torch.rand(10, 2, dtype=torch.float64)
    model = MCDropout(X, X.sum(-1, keepdim=True), epochs=2, num_masks=4).fit(seed=0)
    for size, seed, name in [
        (2.5, 0, "size"),
        (True, 0, "size"),
        (4, -1, "seed"),
        (4, 1.5, "seed"),
    ]:
        with pytest.raises(ValueError, match=name):
            model.resample_function_bank(size, seed)


def test_function_bank_subset_serves_the_first_functions_and_leaves_the_model_as_it_was() -> None:
    train_X, train_Y = toy_data()
    model = MCDropout(train_X, train_Y, **FAST).fit(seed=0)
    masks = [mask.clone() for mask in model.masks]
    X = torch.rand(4, 3, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    values = model.posterior(X).values
    subset = model.function_bank_subset(3)
    assert (model.function_bank_size, subset.function_bank_size) == (FAST["num_masks"], 3)
    assert all(torch.equal(mine, full[:3]) for mine, full in zip(subset.masks, masks, strict=True))
    assert all(torch.equal(now, before) for now, before in zip(model.masks, masks, strict=True))
    assert subset.network is not model.network
    assert torch.equal(subset.noise_variance, model.noise_variance)
    torch.testing.assert_close(
        subset.posterior(X).values, values[..., :3, :, :], **tolerances(torch.float64)
    )
    torch.testing.assert_close(model.posterior(X).values, values, rtol=0, atol=0)
    # The copy is a checkpoint like any other, and follows the model in .to().
    fresh = MCDropout(train_X, train_Y, **FAST)
    fresh.load_state_dict(subset.state_dict())
    assert fresh.function_bank_size == 3
    torch.testing.assert_close(fresh.posterior(X).values, subset.posterior(X).values)
    assert subset.to(torch.float32).posterior(X.float()).values.shape == (4, 3, 3, 1)


def test_function_bank_subset_arguments_are_checked() -> None:
    train_X, train_Y = toy_data()
    unfitted = MCDropout(train_X, train_Y, **FAST)
    with pytest.raises(RuntimeError, match="MCDropout is not fitted"):
        unfitted.function_bank_subset(2)
    with pytest.raises(RuntimeError, match="MCDropout is not fitted"):
        unfitted.function_bank_size  # noqa: B018
    model = unfitted.fit(seed=0)
    for size, message in [
        (1, "size must be an integer of at least 2"),
        (2.0, "size must be an integer of at least 2"),
        (True, "size must be an integer of at least 2"),
        (9, "size must be at most the bank's 8 functions; got 9"),
    ]:
        with pytest.raises(ValueError, match=message):
            model.function_bank_subset(size)
    assert model.function_bank_subset(8).function_bank_size == 8
