import importlib

import pytest
import torch
from botorch.acquisition import (
    AcquisitionFunction,
    ExpectedImprovement,
    LogExpectedImprovement,
    MCAcquisitionFunction,
    ProbabilityOfImprovement,
    UpperConfidenceBound,
    qLogExpectedImprovement,
    qLogNoisyExpectedImprovement,
    qUpperConfidenceBound,
)
from botorch.acquisition.input_constructors import get_acqf_input_constructor
from botorch.models.model import Model
from botorch.sampling.get_sampler import get_sampler
from torch import Tensor

from botorch_nn_uq.acquisition import (
    LeakyExpectedImprovement,
    LogRobustTargetProbabilityOfImprovement,
    RobustTargetExpectedImprovement,
    RobustTargetLowerConfidenceBound,
    RobustTargetProbabilityOfImprovement,
    compute_e_min,
    qLeakyExpectedImprovement,
    qRobustTargetExpectedImprovement,
)
from botorch_nn_uq.bo.registry import (
    ACQUISITIONS,
    PACKAGE_ACQUISITIONS,
    AcquisitionContext,
    AcquisitionSpec,
    get_acquisition,
    register_acquisition,
)
from botorch_nn_uq.bo.surrogates import (
    PACKAGE_SURROGATES,
    SURROGATES,
    SurrogateSpec,
    get_surrogate,
    register_surrogate,
    surrogate_from_card,
)
from botorch_nn_uq.models import MODEL_CARDS, NOMU, DeepEnsemble, ModelCard
from botorch_nn_uq.models.card import BODefaults, FastSettings
from tests.testing import allow_single_member_warning


def _data():
    generator = torch.Generator().manual_seed(0)
    train_X = 4 * torch.rand(10, 2, generator=generator, dtype=torch.float64) - 2
    train_Y = -(train_X**2).sum(-1, keepdim=True)
    bounds = torch.tensor([[-2.0, -2.0], [2.0, 2.0]], dtype=torch.float64)
    return train_X, train_Y, bounds


@allow_single_member_warning
@pytest.mark.parametrize("name", sorted(PACKAGE_SURROGATES))
def test_every_surrogate_builds_a_fitted_model(name: str) -> None:
    train_X, train_Y, bounds = _data()
    model = get_surrogate(name).build(train_X, train_Y, bounds, 0)
    assert isinstance(model, Model)
    posterior = model.posterior(train_X.unsqueeze(1))
    # Predictions are in original units and track the data.
    assert (posterior.mean.squeeze() - train_Y.squeeze()).abs().mean() < train_Y.std()


# The registry offers plain EI on purpose (a baseline of the papers); BoTorch advises LogEI.
@pytest.mark.filterwarnings("ignore:ExpectedImprovement has known numerical issues")
@pytest.mark.parametrize("name", sorted(PACKAGE_ACQUISITIONS))
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


def _seeded_sampler(model: Model, context: AcquisitionContext):
    return get_sampler(model.posterior(context.train_X[:1]), torch.Size([128]), seed=context.seed)


def _target_arguments(context: AcquisitionContext) -> dict:
    target, variance = context.options["target"], context.options["aleatoric_variance"]
    e_min = compute_e_min(context.train_Y, target, variance, X=context.train_X)
    return {"target": target, "aleatoric_variance": variance, "best_f": e_min}


# Each registered acquisition written out by hand, with the incumbents, samplers and
# defaults the BO runs have always used.
HAND_WRITTEN = {
    "logei": lambda model, ctx: LogExpectedImprovement(model, best_f=ctx.train_Y.max()),
    "ei": lambda model, ctx: ExpectedImprovement(model, best_f=ctx.train_Y.max()),
    "pi": lambda model, ctx: ProbabilityOfImprovement(model, best_f=ctx.train_Y.max()),
    "ucb": lambda model, ctx: UpperConfidenceBound(model, beta=ctx.options.get("beta", 4.0)),
    "qlogei": lambda model, ctx: qLogExpectedImprovement(
        model, best_f=ctx.train_Y.max(), sampler=_seeded_sampler(model, ctx)
    ),
    "qlognei": lambda model, ctx: qLogNoisyExpectedImprovement(
        model, X_baseline=ctx.train_X, sampler=_seeded_sampler(model, ctx)
    ),
    "qucb": lambda model, ctx: qUpperConfidenceBound(
        model, beta=ctx.options.get("beta", 4.0), sampler=_seeded_sampler(model, ctx)
    ),
    "leaky-ei": lambda model, ctx: LeakyExpectedImprovement(
        model, best_f=ctx.train_Y.max(), negative_slope=ctx.options.get("negative_slope", 0.01)
    ),
    "q-leaky-ei": lambda model, ctx: qLeakyExpectedImprovement(
        model,
        best_f=ctx.train_Y.max(),
        negative_slope=ctx.options.get("negative_slope", 0.01),
        sampler=_seeded_sampler(model, ctx),
    ),
    "robust-ei": lambda model, ctx: RobustTargetExpectedImprovement(
        model, **_target_arguments(ctx)
    ),
    "robust-pi": lambda model, ctx: RobustTargetProbabilityOfImprovement(
        model, **_target_arguments(ctx)
    ),
    "robust-log-pi": lambda model, ctx: LogRobustTargetProbabilityOfImprovement(
        model, **_target_arguments(ctx)
    ),
    "robust-lcb": lambda model, ctx: RobustTargetLowerConfidenceBound(
        model,
        target=ctx.options["target"],
        aleatoric_variance=ctx.options["aleatoric_variance"],
        quantile=ctx.options.get("quantile", 0.1),
    ),
    "q-robust-ei": lambda model, ctx: qRobustTargetExpectedImprovement(
        model, sampler=_seeded_sampler(model, ctx), **_target_arguments(ctx)
    ),
}


def test_every_acquisition_function_is_written_out_by_hand_here() -> None:
    built = {name for name, spec in ACQUISITIONS.items() if spec.acqf_class is not None}
    assert built == set(HAND_WRITTEN)


# The CLI passes every option to every acquisition; each reads only its own.
CLI_OPTIONS = {"beta": 4.0, "negative_slope": 0.01, "quantile": 0.1, "num_candidates": 4096}


@pytest.mark.parametrize(
    "options",
    [
        {},
        CLI_OPTIONS,
        {"beta": 0.5, "negative_slope": 0.2, "quantile": 0.3, "num_candidates": 64},
    ],
)
@pytest.mark.parametrize("name", sorted(HAND_WRITTEN))
def test_registry_builds_through_the_input_constructor_exactly_as_by_hand(
    name: str, options: dict
) -> None:
    train_X, train_Y, bounds = _data()
    model = get_surrogate("gp").build(train_X, train_Y, bounds, 0)
    spec = get_acquisition(name)
    if spec.requires_target:
        options = {**options, "target": -1.0, "aleatoric_variance": 0.01}
    context = AcquisitionContext(
        train_X=train_X, train_Y=train_Y, bounds=bounds, seed=3, options=options
    )
    q = 2 if issubclass(spec.acqf_class, MCAcquisitionFunction) else 1
    test_X = torch.rand(6, q, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    acquisitions = []
    for build in (spec.build, HAND_WRITTEN[name]):
        # qLogNEI prunes its baseline with torch's global generator.
        torch.manual_seed(0)
        acquisitions.append(build(model, context))
    registered, by_hand = acquisitions
    assert type(registered) is type(by_hand) is spec.acqf_class
    torch.testing.assert_close(registered(test_X), by_hand(test_X), rtol=0, atol=0)
    if hasattr(by_hand, "best_f"):
        torch.testing.assert_close(
            registered.best_f.reshape(by_hand.best_f.shape), by_hand.best_f, rtol=0, atol=0
        )


def test_registry_acquisition_is_what_the_input_constructor_produces() -> None:
    train_X, train_Y, bounds = _data()
    model = get_surrogate("gp").build(train_X, train_Y, bounds, 0)
    context = AcquisitionContext(
        train_X=train_X, train_Y=train_Y, bounds=bounds, seed=3, options={"beta": 2.0}
    )
    inputs = get_acqf_input_constructor(qUpperConfidenceBound)(
        model=model,
        training_data=context.training_data,
        beta=2.0,
        sampler=_seeded_sampler(model, context),
    )
    test_X = torch.rand(4, 3, 2, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    torch.testing.assert_close(
        get_acquisition("qucb").build(model, context)(test_X),
        qUpperConfidenceBound(**inputs)(test_X),
        rtol=0,
        atol=0,
    )


def test_robust_acquisitions_take_a_callable_aleatoric_variance() -> None:
    train_X, train_Y, bounds = _data()
    model = get_surrogate("gp").build(train_X, train_Y, bounds, 0)

    def variance(X: Tensor) -> Tensor:
        return 0.1 * X[..., 0].abs()

    context = AcquisitionContext(
        train_X=train_X,
        train_Y=train_Y,
        bounds=bounds,
        seed=0,
        options={"target": -1.0, "aleatoric_variance": variance},
    )
    acquisition = get_acquisition("robust-ei").build(model, context)
    expected = ((train_Y.squeeze(-1) + 1.0).square() + 0.1 * train_X[:, 0].abs()).min()
    torch.testing.assert_close(acquisition.best_f, expected)
    assert acquisition.aleatoric_variance_function is variance


def test_acquisition_specs_are_checked_when_registered() -> None:
    with pytest.raises(ValueError, match="exactly one of acqf_class and propose"):
        AcquisitionSpec("neither", "no way to propose")
    with pytest.raises(ValueError, match="exactly one of acqf_class and propose"):
        AcquisitionSpec(
            "both", "two ways", UpperConfidenceBound, propose=ACQUISITIONS["ts"].propose
        )

    class WithoutInputConstructor(UpperConfidenceBound):
        pass

    with pytest.raises(RuntimeError, match="Input constructor .* not registered"):
        AcquisitionSpec("unconstructible", "no input constructor", WithoutInputConstructor)
    with pytest.raises(ValueError, match="already registered"):
        register_acquisition(AcquisitionSpec("ucb", "duplicate", UpperConfidenceBound))
    train_X, train_Y, bounds = _data()
    context = AcquisitionContext(train_X=train_X, train_Y=train_Y, bounds=bounds, seed=0)
    with pytest.raises(TypeError, match="proposes batches itself"):
        get_acquisition("ts").build(get_surrogate("gp").build(train_X, train_Y, bounds, 0), context)


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
    ("name", "model_class", "precision"),
    [
        # The registry's deep ensemble trains in single precision, the class in the data's.
        ("deep-ensemble", "DeepEnsemble", {"training_dtype": torch.float32}),
        ("mc-dropout", "MCDropout", {}),
    ],
)
def test_step_budgets_leave_small_data_fits_exactly_as_full_batch_epochs(
    name, model_class, precision
):
    from botorch.models.transforms import Normalize, Standardize

    import botorch_nn_uq.models as models

    train_X, train_Y, bounds = _data()
    registered = get_surrogate(name).build(train_X, train_Y, bounds, 3)
    plain = getattr(models, model_class)(
        train_X,
        train_Y,
        input_transform=Normalize(2, bounds=bounds),
        outcome_transform=Standardize(1),
        **precision,
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


def test_the_package_registers_one_surrogate_per_model_card_in_their_order() -> None:
    names = [card.name for card in MODEL_CARDS]
    assert list(PACKAGE_SURROGATES) == names
    assert [name for name in SURROGATES if name in names] == names
    for card in MODEL_CARDS:
        spec = SURROGATES[card.name]
        assert spec.description == card.description
        assert spec.supports_warm_start == card.bo.supports_warm_start
        assert spec.build.__module__ == "botorch_nn_uq.bo.surrogates"


#: The BO defaults behind the published benchmark results (benchmarks/README.md): the
#: constructor options, the fit options, warm starts and the after-fit hook of every card
#: that was registered then. A card's BO defaults change only with its results.
PUBLISHED_BO_DEFAULTS = {
    "gp": ({}, {}, False, None),
    "mc-dropout": ({"max_steps": 500, "batch_size": 256}, {}, True, None),
    # In single precision since the precision study (benchmarks/README.md, "Training
    # precision"), which reran the protocols' rows that it names.
    "deep-ensemble": (
        {"max_steps": 500, "batch_size": 256, "training_dtype": torch.float32},
        {},
        True,
        None,
    ),
    "hyper-deep-ensemble": (
        {
            "num_folds": 3,
            "epochs": 300,
            "max_steps": 300,
            "training_dtype": torch.float32,
            "batch_size": 256,
        },
        {},
        False,
        None,
    ),
    "nes-rs": ({"max_steps": 600}, {}, False, None),
    "nes-re": ({"max_steps": 600}, {}, False, None),
    "autodeuq": ({"max_steps": 1200}, {}, False, None),
    "neon": ({"max_steps": 2000, "batch_size": 256}, {}, True, None),
    "nomu": ({}, {"max_steps": 1024, "batch_size": 256}, True, "_narrow_mean_width"),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_BO_DEFAULTS))
def test_published_bo_defaults_are_unchanged(name: str) -> None:
    card = next(card for card in MODEL_CARDS if card.name == name)
    options, fit_options, warm_start, after_fit = PUBLISHED_BO_DEFAULTS[name]
    bounds = torch.zeros(2, 2, dtype=torch.float64)
    box = {"bounds": bounds} if name == "nomu" else {}
    assert card.constructor_options(bounds) == {**options, **box}
    assert dict(card.bo.fit_options) == fit_options
    assert card.bo.supports_warm_start == warm_start
    assert getattr(card.bo.after_fit, "__name__", None) == after_fit


def test_a_new_card_is_registered_as_its_bo_defaults_say() -> None:
    r"""A toy card (a NOMU variant with a BO default of its own) builds, fits, calls its
    after-fit hook and restores through the spec derived from it."""
    calls = []
    nomu = next(card for card in MODEL_CARDS if card.model_class is NOMU)
    toy = ModelCard(
        name="toy-nomu",
        description="a toy NOMU",
        model_class=NOMU,
        family=nomu.family,
        summary="a toy",
        posterior="Gaussian",
        bo=BODefaults(
            constructor_options={"mean_widths": (8,), "uncertainty_widths": (8,), "epochs": 7},
            fit_options={"epochs": 5},
            supports_warm_start=True,
            after_fit=lambda model, train_Y: calls.append(train_Y.shape),
        ),
        fast=FastSettings({"epochs": 3}),
        takes_bounds=True,
    )
    spec = surrogate_from_card(toy)
    assert (spec.name, spec.description, spec.supports_warm_start) == (
        "toy-nomu",
        "a toy NOMU",
        True,
    )
    train_X, train_Y, bounds = _data()
    model = spec.build(train_X, train_Y, bounds, 0)
    assert isinstance(model, NOMU) and model.is_fitted and calls == [train_Y.shape]
    assert model.hyperparameters.epochs == 5 and model.hyperparameters.mean_widths == (8,)
    assert torch.equal(model.bounds, bounds)
    restored = spec.restore(train_X, train_Y, bounds, model.state_dict())
    X = torch.rand(3, 1, 2, dtype=torch.float64)
    torch.testing.assert_close(restored.posterior(X).mean, model.posterior(X).mean)
    assert "toy-nomu" not in SURROGATES


def test_a_toy_card_is_checked() -> None:
    family = next(card.family for card in MODEL_CARDS if card.model_class is DeepEnsemble)
    with pytest.raises(ValueError, match="lower-case words"):
        ModelCard("Toy Model", "a toy", DeepEnsemble, family, "a toy", "none")
    with pytest.raises(ValueError, match="one line"):
        ModelCard("toy", "a\ntoy", DeepEnsemble, family, "a toy", "none")


def test_entries_registered_outside_the_package_are_not_the_packages() -> None:
    # A benchmark's peer registers its own entries on import; the package's lists, which
    # the tests above and the README's table cover, stay what the package registers.
    importlib.import_module("benchmarks.vbll_peer")
    assert {"vbll"} <= set(SURROGATES) and "vbll" not in PACKAGE_SURROGATES
    assert {"vbll-ts"} <= set(ACQUISITIONS) and "vbll-ts" not in PACKAGE_ACQUISITIONS
    assert all(
        SURROGATES[name].build.__module__.startswith("botorch_nn_uq") for name in PACKAGE_SURROGATES
    )
