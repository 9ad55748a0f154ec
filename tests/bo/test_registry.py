import pytest
import torch
from botorch.acquisition import AcquisitionFunction
from botorch.models.model import Model

from botorch_nn_uq.bo.registry import (
    ACQUISITIONS,
    SURROGATES,
    AcquisitionContext,
    SurrogateSpec,
    get_acquisition,
    get_surrogate,
    register_surrogate,
)
from tests.testing import allow_single_member_warning


def _data():
    generator = torch.Generator().manual_seed(0)
    train_X = 4 * torch.rand(10, 2, generator=generator, dtype=torch.float64) - 2
    train_Y = -(train_X**2).sum(-1, keepdim=True)
    bounds = torch.tensor([[-2.0, -2.0], [2.0, 2.0]], dtype=torch.float64)
    return train_X, train_Y, bounds


@allow_single_member_warning
@pytest.mark.parametrize("name", sorted(SURROGATES))
def test_every_surrogate_builds_a_fitted_model(name: str) -> None:
    train_X, train_Y, bounds = _data()
    model = get_surrogate(name).build(train_X, train_Y, bounds, 0)
    assert isinstance(model, Model)
    posterior = model.posterior(train_X.unsqueeze(1))
    # Predictions are in original units and track the data.
    assert (posterior.mean.squeeze() - train_Y.squeeze()).abs().mean() < train_Y.std()


# The registry offers plain EI on purpose (a baseline of the papers); BoTorch advises LogEI.
@pytest.mark.filterwarnings("ignore:ExpectedImprovement has known numerical issues")
@pytest.mark.parametrize("name", sorted(ACQUISITIONS))
def test_every_acquisition_builds_and_evaluates(name: str) -> None:
    train_X, train_Y, bounds = _data()
    model = get_surrogate("gp").build(train_X, train_Y, bounds, 0)
    spec = get_acquisition(name)
    options = {"target": -1.0, "aleatoric_variance": 0.01} if spec.requires_target else {}
    context = AcquisitionContext(
        train_X=train_X, train_Y=train_Y, bounds=bounds, seed=0, options=options
    )
    if spec.propose is not None:
        proposals = spec.propose(model, context, 3)
        assert proposals.shape == (3, 2)
        assert ((proposals >= bounds[0]) & (proposals <= bounds[1])).all()
        assert torch.cdist(proposals, proposals).fill_diagonal_(1.0).min() > 0
        return
    acquisition = spec.build(model, context)
    assert isinstance(acquisition, AcquisitionFunction)
    values = acquisition(torch.rand(5, 1, 2, dtype=torch.float64))
    assert values.shape == (5,)
    # Log-probabilities may be -inf where no improvement is possible; nothing may be NaN.
    assert not values.isnan().any() and (values < float("inf")).all()


def test_unknown_names_list_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="valid models: .*gp.*mc-dropout.*random"):
        get_surrogate("unknown")
    with pytest.raises(ValueError, match="valid acquisitions: .*logei.*qlogei"):
        get_acquisition("unknown")


def test_names_are_registered_once() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_surrogate(SurrogateSpec("gp", "duplicate", SURROGATES["gp"].build))
    with pytest.raises(ValueError, match="already registered"):
        register_surrogate(SurrogateSpec("random", "reserved", SURROGATES["gp"].build))


@pytest.mark.parametrize(
    ("name", "model_class"), [("deep-ensemble", "DeepEnsemble"), ("mc-dropout", "MCDropout")]
)
def test_step_budgets_leave_small_data_fits_exactly_as_full_batch_epochs(name, model_class):
    from botorch.models.transforms import Normalize, Standardize

    import botorch_nn_uq.models as models

    train_X, train_Y, bounds = _data()
    registered = get_surrogate(name).build(train_X, train_Y, bounds, 3)
    plain = getattr(models, model_class)(
        train_X,
        train_Y,
        input_transform=Normalize(2, bounds=bounds),
        outcome_transform=Standardize(1),
    ).fit(seed=3)
    assert registered.hyperparameters.batch_size == 256
    assert registered.training_result.steps_run == plain.training_result.steps_run == 500
    test_X = torch.rand(7, 1, 2, dtype=torch.float64)
    torch.testing.assert_close(
        registered.posterior(test_X).mean, plain.posterior(test_X).mean, rtol=0, atol=0
    )


@allow_single_member_warning
@pytest.mark.parametrize(
    ("name", "options", "full_batch"),
    [
        ("hyper-deep-ensemble", {"num_candidates": 3, "ensemble_size": 2}, {"batch_size": None}),
        ("nes-rs", {"pool_size": 3, "ensemble_size": 2}, {}),
        ("autodeuq", {"pool_size": 3, "ensemble_size": 2}, {}),
    ],
)
def test_searches_with_step_budgets_are_unchanged_on_small_data(name, options, full_batch):
    from dataclasses import fields

    generator = torch.Generator().manual_seed(1)
    # 80 points: the most for which the registered budgets equal the registered epochs.
    train_X = torch.rand(80, 2, generator=generator, dtype=torch.float64)
    train_Y = (3 * train_X).sin().sum(-1, keepdim=True)
    bounds = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
    registered = get_surrogate(name).build(train_X, train_Y, bounds, 3, **options)
    hyperparameters = registered.hyperparameters
    assert hyperparameters.max_steps is not None
    without_budget = {
        field.name: getattr(hyperparameters, field.name) for field in fields(hyperparameters)
    }
    without_budget.update(max_steps=None, **full_batch)
    plain = type(registered)(
        train_X,
        train_Y,
        input_transform=registered.input_transform,
        outcome_transform=type(registered.outcome_transform)(1),
        **without_budget,
    ).fit(seed=3)
    test_X = torch.rand(7, 1, 2, dtype=torch.float64)
    torch.testing.assert_close(
        registered.posterior(test_X).mean, plain.posterior(test_X).mean, rtol=0, atol=0
    )
