"""The deep-ensemble variants of protocol 7 (benchmarks/ensemble_variants.py)."""

import pytest
import torch

from benchmarks import ensemble_variants
from botorch_nn_uq.bo import get_surrogate
from botorch_nn_uq.models import MODEL_CARDS, DeepEnsemble


@pytest.mark.parametrize("members", ensemble_variants.LARGER_ENSEMBLE_SIZES)
def test_a_larger_ensemble_is_the_deep_ensemble_with_more_members(members) -> None:
    base = next(card for card in MODEL_CARDS if card.name == "deep-ensemble")
    card = ensemble_variants.larger_ensemble_card(members)
    assert card.name == f"deep-ensemble-{members}"
    assert card.bo.constructor_options == {
        **base.bo.constructor_options,
        "ensemble_size": members,
    }
    assert card.bo.supports_warm_start == base.bo.supports_warm_start

    bounds = torch.tensor([[0.0] * 3, [1.0] * 3], dtype=torch.float64)
    X = torch.rand(30, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    model = get_surrogate(card.name).build(X, X.sum(-1, keepdim=True), bounds, 0, max_steps=5)
    assert isinstance(model, DeepEnsemble)
    assert model.hyperparameters.ensemble_size == members
    assert model.posterior(X[:4]).mean.shape == (4, 1)


@pytest.mark.parametrize("members", [1, 2.5, True])
def test_a_larger_ensemble_needs_an_integer_of_at_least_two_members(members) -> None:
    with pytest.raises(ValueError, match="members must be an integer of at least 2"):
        ensemble_variants.larger_ensemble_card(members)


@pytest.mark.parametrize("steps", ensemble_variants.SHORTER_STEP_BUDGETS)
def test_a_step_budget_variant_is_the_deep_ensemble_with_fewer_steps(steps) -> None:
    base = next(card for card in MODEL_CARDS if card.name == "deep-ensemble")
    card = ensemble_variants.step_budget_card(steps)
    assert card.name == f"deep-ensemble-{steps}-steps"
    assert card.bo.constructor_options == {**base.bo.constructor_options, "max_steps": steps}
    assert f"({steps} steps on batches of 256)" in card.description

    bounds = torch.tensor([[0.0] * 2, [1.0] * 2], dtype=torch.float64)
    X = torch.rand(20, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    model = get_surrogate(card.name).build(X, X.sum(-1, keepdim=True), bounds, 0)
    assert model.training_result.steps_run == steps


@pytest.mark.parametrize("steps", [0, 2.5, True])
def test_a_step_budget_needs_a_positive_integer(steps) -> None:
    with pytest.raises(ValueError, match="steps must be an integer of at least 1"):
        ensemble_variants.step_budget_card(steps)


@pytest.mark.parametrize("name", ["deep-ensemble-float64", "deep-ensemble-200-steps-float64"])
def test_a_double_precision_variant_trains_in_float64(name, monkeypatch) -> None:
    import botorch_nn_uq.models.ensemble as ensemble_module

    dtypes = []
    original = ensemble_module.fit_members

    def spy(*args, **kwargs):
        dtypes.append(kwargs["training_dtype"])
        return original(*args, **kwargs)

    monkeypatch.setattr(ensemble_module, "fit_members", spy)
    bounds = torch.tensor([[0.0] * 2, [1.0] * 2], dtype=torch.float64)
    X = torch.rand(20, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    get_surrogate(name).build(X, X.sum(-1, keepdim=True), bounds, 0, max_steps=3)
    get_surrogate(name.removesuffix("-float64")).build(
        X, X.sum(-1, keepdim=True), bounds, 0, max_steps=3
    )
    assert dtypes == [torch.float64, torch.float32]


def test_the_smooth_short_variant_trains_gelu_members_for_150_full_batch_epochs() -> None:
    card = ensemble_variants.smooth_short_card()
    assert card.name == "deep-ensemble-gelu-150"
    bounds = torch.tensor([[0.0] * 2, [1.0] * 2], dtype=torch.float64)
    X = torch.rand(20, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    model = get_surrogate(card.name).build(X, X.sum(-1, keepdim=True), bounds, 0)
    assert model.hyperparameters.activation == "gelu"
    assert model.training_result.steps_run == 150
