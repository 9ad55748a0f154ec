"""The registry of acquisitions: every entry builds through BoTorch's input constructors
exactly as by hand, and its specs are checked when registered."""

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
from botorch_nn_uq.bo.acquisitions import (
    ACQUISITIONS,
    PACKAGE_ACQUISITIONS,
    AcquisitionContext,
    AcquisitionSpec,
    get_acquisition,
    register_acquisition,
)
from botorch_nn_uq.bo.surrogates import (
    get_surrogate,
)
from tests.testing import quadratic_bo_data


# The registry offers plain EI on purpose (a baseline of the papers); BoTorch advises LogEI.
@pytest.mark.filterwarnings("ignore:ExpectedImprovement has known numerical issues")
@pytest.mark.parametrize("name", sorted(PACKAGE_ACQUISITIONS))
def test_every_acquisition_builds_and_evaluates(name: str) -> None:
    train_X, train_Y, bounds = quadratic_bo_data()
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
    train_X, train_Y, bounds = quadratic_bo_data()
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
    train_X, train_Y, bounds = quadratic_bo_data()
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
    train_X, train_Y, bounds = quadratic_bo_data()
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
    train_X, train_Y, bounds = quadratic_bo_data()
    context = AcquisitionContext(train_X=train_X, train_Y=train_Y, bounds=bounds, seed=0)
    with pytest.raises(TypeError, match="proposes batches itself"):
        get_acquisition("ts").build(get_surrogate("gp").build(train_X, train_Y, bounds, 0), context)


def test_unknown_names_list_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="valid models: .*gp.*mc-dropout.*random"):
        get_surrogate("unknown")
    with pytest.raises(ValueError, match="valid acquisitions: .*logei.*qlogei"):
        get_acquisition("unknown")
