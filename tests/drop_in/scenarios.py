"""Drop-in scenarios: what BoTorch's tutorials do with a ``SingleTaskGP``, done with each
model family, asserting what a GP user expects.

Each scenario is registered under the key of a row of the user guide's feature table
(:data:`botorch_nn_uq.models.card.FEATURES`) and takes a family key (``"gp"``,
``"ensembles"``, ``"mc-dropout"``, ...: the ``family`` of the model cards);
``tests/test_features.py`` runs every cell. A cell marked as not supported must raise the
error it states. What a scenario asserts beyond a GP's behaviour depends on the model (a
finite set of functions, the members of an ensemble), not on the family's name, so a new
family runs every scenario as it is.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from botorch.acquisition import (
    LogExpectedImprovement,
    ProbabilityOfImprovement,
    UpperConfidenceBound,
    qKnowledgeGradient,
    qLogExpectedImprovement,
    qLogNoisyExpectedImprovement,
    qMultiFidelityKnowledgeGradient,
    qNegIntegratedPosteriorVariance,
    qUpperConfidenceBound,
)
from botorch.acquisition.max_value_entropy_search import (
    qLowerBoundMaxValueEntropy,
    qMaxValueEntropy,
)
from botorch.acquisition.monte_carlo import MCAcquisitionFunction
from botorch.acquisition.multi_objective import (
    qLogExpectedHypervolumeImprovement,
    qLogNoisyExpectedHypervolumeImprovement,
)
from botorch.acquisition.multi_objective.parego import qLogNParEGO
from botorch.acquisition.objective import GenericMCObjective, ScalarizedPosteriorTransform
from botorch.acquisition.risk_measures import CVaR
from botorch.exceptions.errors import UnsupportedError
from botorch.exceptions.warnings import InputDataWarning
from botorch.generation.sampling import ConstrainedMaxPosteriorSampling, MaxPosteriorSampling
from botorch.models import HigherOrderGP, ModelList
from botorch.models.higher_order_gp import FlattenedStandardize
from botorch.models.transforms import Normalize, Standardize
from botorch.models.transforms.input import AppendFeatures, Warp
from botorch.models.transforms.outcome import ChainedOutcomeTransform, Log
from botorch.optim import optimize_acqf
from botorch.sampling import IIDNormalSampler, SobolQMCNormalSampler
from botorch.test_functions import SixHumpCamel
from botorch.utils.multi_objective.box_decompositions import FastNondominatedPartitioning
from botorch.utils.sampling import draw_sobol_samples
from botorch.utils.transforms import normalize, standardize, t_batch_mode_transform
from torch import Tensor

from botorch_nn_uq.generation import batch_thompson_sampling
from botorch_nn_uq.models import MemberEnsemble, ModelCard
from botorch_nn_uq.posteriors import (
    ContinuousFunctionPosterior,
    FunctionEnsemblePosterior,
    GaussianMarginalPosterior,
)
from tests.cards import families
from tests.drop_in.batched_data import batched_models_scenario
from tests.drop_in.setting import (
    BOUNDS,
    DIM,
    FAMILIES,
    MODELS,
    build,
    family_options,
    fit,
    fitted,
    model_class,
    optimize,
    query_points,
    toy_data,
)
from tests.drop_in.tutorial_patterns import known_noise_scenario

#: Feature key -> the scenario that checks its cells.
SCENARIOS: dict[str, Callable[[str], None]] = {}


def is_function_bank(family: str) -> bool:
    r"""Whether the family's posterior is a finite set of functions."""
    return isinstance(fitted(family).posterior(query_points(1, 1)), FunctionEnsemblePosterior)


def samples_whole_functions(family: str) -> bool:
    r"""Whether a sample of the family's posterior is one function of a finite set (not
    the continuous Gaussian of the set's moments)."""
    posterior = fitted(family).posterior(query_points(1, 1))
    return is_function_bank(family) and not isinstance(posterior, ContinuousFunctionPosterior)


def is_member_ensemble(family: str) -> bool:
    r"""Whether a sample of the family's posterior is one of a few members."""
    return isinstance(fitted(family), MemberEnsemble)


def continuous_sample_model(family: str) -> MemberEnsemble:
    r"""The family's ensemble fitted on the toy data with continuous joint samples
    (``joint_samples="continuous"``) in place of its finite set of members."""
    model = model_class(family)(*toy_data(), **family_options(family), joint_samples="continuous")
    return fit(family, model)


def scenario(key: str) -> Callable[[Callable[[str], None]], Callable[[str], None]]:
    def register(function: Callable[[str], None]) -> Callable[[str], None]:
        SCENARIOS[key] = function
        return function

    return register


def sobol(num_samples: int = 32) -> SobolQMCNormalSampler:
    return SobolQMCNormalSampler(torch.Size([num_samples]), seed=0)


def best_f() -> Tensor:
    return toy_data()[1].max()


def assert_distinct(points: Tensor) -> None:
    assert torch.pdist(points).min() > 1e-6, f"repeated proposals: {points}"


@scenario("analytic-acquisitions")
def _(family: str) -> None:
    model = fitted(family)
    optimize(LogExpectedImprovement(model, best_f=best_f()))
    optimize(UpperConfidenceBound(model, beta=4.0))
    optimize(ProbabilityOfImprovement(model, best_f=best_f()))


@scenario("mc-acquisitions")
def _(family: str) -> None:
    model = fitted(family)
    optimize(qLogExpectedImprovement(model, best_f=best_f()), q=2)
    optimize(qUpperConfidenceBound(model, beta=4.0), q=2)


@scenario("noisy-ei-pending")
def _(family: str) -> None:
    model = fitted(family)
    acquisition = qLogNoisyExpectedImprovement(
        model, X_baseline=toy_data()[0], X_pending=query_points(2)
    )
    optimize(acquisition)


@scenario("normal-samplers")
def _(family: str) -> None:
    model, X = fitted(family), query_points(4, 3)
    posterior = model.posterior(X)
    for sampler_class in (SobolQMCNormalSampler, IIDNormalSampler):
        sampler = sampler_class(torch.Size([32]), seed=0)
        samples = sampler(posterior)
        # The sampler's number of samples and its seed are kept.
        assert samples.shape == (32, 4, 3, 1)
        assert torch.equal(samples, sampler_class(torch.Size([32]), seed=0)(posterior))
        if samples_whole_functions(family):
            # Each sample is one whole function of the bank, the same for every batch
            # element (two functions may agree at a batch element's points).
            functions = posterior.values  # 4 x s x 3 x 1
            matches = (samples.unsqueeze(2) == functions).all(-1).all(-1)  # 32 x 4 x s
            assert matches.all(1).any(-1).all()
        values = qLogExpectedImprovement(model, best_f=best_f(), sampler=sampler)(X)
        assert values.shape == (4,) and values.isfinite().all()
    # Through ModelList, next to a GP, with an outcome constraint.
    model_list = ModelList(model, fitted("gp"))
    acquisition = qLogExpectedImprovement(
        model_list,
        best_f=best_f(),
        sampler=sobol(),
        objective=GenericMCObjective(lambda samples, X=None: samples[..., 0]),
        constraints=[lambda samples: samples[..., 1] - 0.3],
    )
    optimize(acquisition, q=2)


def _knowledge_gradient(model) -> qKnowledgeGradient:
    return qKnowledgeGradient(model, num_fantasies=4, sampler=sobol(4))


def _candidate_gradient(acquisition, X: Tensor) -> Tensor:
    r"""The gradient of the summed acquisition values with respect to the candidates
    (the first point of every t-batch)."""
    X = X.clone().requires_grad_(True)
    acquisition(X).sum().backward()
    return X.grad[..., 0, :]


@scenario("fantasies")
def _(family: str) -> None:
    model, gp = fitted(family), fitted("gp")
    # qKnowledgeGradient's one-shot input: a candidate and the 4 fantasies' points.
    X = query_points(3, 5)
    assert (_candidate_gradient(_knowledge_gradient(gp), X).abs().sum(-1) > 0).all()
    assert (_candidate_gradient(_knowledge_gradient(model), X).abs().sum(-1) > 0).all()
    mc_points = query_points(16, seed=2)
    X = query_points(3, 1)
    for candidate_model in (gp, model):
        acquisition = qNegIntegratedPosteriorVariance(candidate_model, mc_points=mc_points)
        assert (_candidate_gradient(acquisition, X).abs().sum(-1) > 0).all()
    # optimize_acqf moves the candidate from its initial condition.
    initial = query_points(1, 5, seed=3)
    candidate, value = optimize_acqf(
        _knowledge_gradient(model),
        BOUNDS,
        q=1,
        num_restarts=1,
        batch_initial_conditions=initial,
        options={"maxiter": 20},
    )
    assert value.isfinite().all()
    assert not torch.allclose(candidate, initial[0, :1])


@scenario("append-features")
def _(family: str) -> None:
    # Inputs (x, w) with w an environmental variable; AppendFeatures appends w's samples.
    train_X, train_Y = toy_data()
    w_set = torch.linspace(0.1, 0.9, 4, dtype=torch.float64).unsqueeze(-1)
    model = fit(
        family, build(family, train_X, train_Y, input_transform=AppendFeatures(feature_set=w_set))
    )
    acquisition = qMultiFidelityKnowledgeGradient(
        model,
        num_fantasies=2,
        sampler=sobol(2),
        objective=CVaR(alpha=0.7, n_w=4),
        project=lambda X: X[..., :-1],
    )
    assert_distinct(optimize(acquisition, q=2, raw_samples=8, options={"maxiter": 5}))


#: Each family's default network on the noiseless toy objective, told that the noise is
#: small (as a GP fitted to noiseless data finds): batch max-value entropy search then
#: has no reason to repeat a point. A family without an entry runs with its card's fast
#: settings.
NOISELESS_OPTIONS = {
    "gp": {},
    "ensembles": {"likelihood": "mse", "noise_variance": 1e-4},
    "mc-dropout": {"noise_variance": 1e-4},
    "neon": {"noise_variance": 1e-4, "learning_rate": 3e-3, "epochs": 300},
    "nomu": {"bounds": BOUNDS},
}


@scenario("max-value-entropy")
def _(family: str) -> None:
    options = NOISELESS_OPTIONS.get(family, family_options(family))
    model = fit(family, model_class(family)(*toy_data(), **options))
    candidate_set = draw_sobol_samples(BOUNDS, n=64, q=1, seed=0).squeeze(-2)
    for acquisition_class in (qMaxValueEntropy, qLowerBoundMaxValueEntropy):
        for q in (2, 3):
            torch.manual_seed(0)
            acquisition = acquisition_class(model, candidate_set, num_mv_samples=8)
            assert_distinct(optimize(acquisition, q=q, sequential=True, num_restarts=4))


def gibbon_tutorial_data() -> tuple[Tensor, Tensor]:
    r"""BoTorch's GIBBON tutorial's design: 5 uniform points of the negated SixHumpCamel
    with noise of standard deviation 0.05, its inputs normalised to the unit square and
    its outcomes standardised (its seed; float32 draws, as the tutorial's, in float64)."""
    generator = torch.Generator().manual_seed(123456)
    bounds = torch.tensor(SixHumpCamel._bounds).T
    train_X = bounds[0] + (bounds[1] - bounds[0]) * torch.rand(5, DIM, generator=generator)
    train_Y = SixHumpCamel(negate=True)(train_X).unsqueeze(-1)
    train_Y = train_Y + 0.05 * torch.randn(train_Y.shape, generator=generator)
    return normalize(train_X, bounds).double(), standardize(train_Y).double()


@scenario("gibbon-batch")
def _(family: str) -> None:
    # The tutorial's batches of 3 with each family's default settings, at a tenth of its
    # candidate set and its optimiser effort. Only a stated limit of the model excuses a
    # repeated point.
    train_X, train_Y = gibbon_tutorial_data()
    model = fit(family, build(family, train_X, train_Y))
    if isinstance(model, MemberEnsemble) and int((model.member_weights > 0).sum()) == 1:
        pytest.skip("the member selection kept one member: no spread to choose points by")
    candidate_set = draw_sobol_samples(BOUNDS, n=1000, q=1, seed=0).squeeze(-2)
    # A noise estimate above the model's typical spread (both in the transformed outcome
    # space): fantasies at a pending point hardly shrink the spread there, so
    # qMaxValueEntropy may take the point again (the max-value-entropy cell's limit).
    noise_variance = getattr(model, "noise_variance", None)
    with torch.no_grad():
        spread = model(candidate_set).variance.mean()
    noisy_fantasies = noise_variance is not None and bool(noise_variance.max() > spread)
    # A joint batch may repeat a point where the samples cannot tell the points apart
    # beyond BoTorch's smoothed maximum, which rewards a duplicate: independent samples
    # (NOMU) and a bank's K functions or their rank-(K - 1) Gaussian (the stated limits).
    posterior = model.posterior(candidate_set)
    joint_samples = not isinstance(
        posterior, (GaussianMarginalPosterior, FunctionEnsemblePosterior)
    )
    acquisitions = [
        (lambda: qLowerBoundMaxValueEntropy(model, candidate_set), True, True),
        (lambda: qMaxValueEntropy(model, candidate_set), True, not noisy_fantasies),
        (lambda: qLogNoisyExpectedImprovement(model, train_X), False, joint_samples),
    ]
    for make_acquisition, sequential, distinct in acquisitions:
        # Seeded before construction: the entropy searches draw their max values then.
        torch.manual_seed(0)
        points = optimize(
            make_acquisition(), q=3, sequential=sequential, num_restarts=5, raw_samples=100
        )
        if distinct:
            assert_distinct(points)


class _ScalarizedUpperConfidenceBound(MCAcquisitionFunction):
    r"""A custom MC acquisition as BoTorch's tutorial writes one: it reads posterior
    samples and the posterior mean."""

    def __init__(self, model, beta: float, weights: Tensor) -> None:
        super(MCAcquisitionFunction, self).__init__(model=model)
        self.sampler = sobol(64)
        self.beta, self.weights = beta, weights

    @t_batch_mode_transform()
    def forward(self, X: Tensor) -> Tensor:
        posterior = self.model.posterior(X)
        samples = self.get_posterior_samples(posterior) @ self.weights
        mean = posterior.mean @ self.weights
        spread = math.sqrt(self.beta * math.pi / 2) * (samples - mean).abs()
        return (mean + spread).max(dim=-1).values.mean(dim=0)


@scenario("gaussian-access")
def _(family: str) -> None:
    model, X = fitted(family, num_outputs=2), query_points(4, 3)
    # model(X): the latent Gaussian, with the outputs as a batch dimension (a batched
    # multi-output GP takes its inputs with that dimension already there).
    gp_X = X.unsqueeze(-3) if family == "gp" else X
    distribution = model(gp_X)
    assert distribution.mean.shape == (4, 2, 3)
    assert distribution.covariance_matrix.shape == (4, 2, 3, 3)
    torch.linalg.cholesky(distribution.covariance_matrix)
    single = fitted(family)
    distribution = single(X)
    assert distribution.mean.shape == (4, 3) and distribution.covariance_matrix.shape == (4, 3, 3)
    # In the transformed outcome space, as a GP's, and joint across the points.
    transformed_mean = single.outcome_transform(single.posterior(X).mean)[0].squeeze(-1)
    torch.testing.assert_close(distribution.mean, transformed_mean)
    off_diagonal = distribution.covariance_matrix - torch.diag_embed(distribution.variance)
    assert off_diagonal.abs().max() > 0
    # posterior.mvn, as the custom analytic acquisition of BoTorch's tutorial reads it.
    covariance = model.posterior(query_points(5, 1)).mvn.covariance_matrix
    assert covariance.shape == (5, 2, 2)
    weights = torch.tensor([0.1, 0.5], dtype=torch.float64)
    optimize(_ScalarizedUpperConfidenceBound(model, beta=0.1, weights=weights), q=2)
    # A cost model: exp(model(X).mean) of a model of log-costs, which are not
    # standardised (BoTorch's tutorial silences the GP's warning about that too).
    train_X, _ = toy_data()
    costs = 1.0 + train_X.sum(-1, keepdim=True)
    with pytest.warns(InputDataWarning, match="not standardized"):
        cost_model = build(family, train_X, costs, outcome_transform=Log())
    cost_model = fit(family, cost_model)
    predicted = cost_model(query_points(6, 1)).mean.exp()[:, 0]
    assert predicted.shape == (6,) and (predicted > 0).all()


@scenario("multi-objective")
def _(family: str) -> None:
    train_X, train_Y = toy_data(num_outputs=2)
    models = [fit(family, build(family, train_X, train_Y[:, [i]])) for i in range(2)]
    model_list = ModelList(*models)
    ref_point = train_Y.min(dim=0).values - 0.1
    partitioning = FastNondominatedPartitioning(ref_point=ref_point, Y=train_Y)
    acquisitions = [
        qLogExpectedHypervolumeImprovement(
            model_list, ref_point=ref_point, partitioning=partitioning, sampler=sobol()
        ),
        qLogNoisyExpectedHypervolumeImprovement(
            model_list, ref_point=ref_point, X_baseline=train_X, sampler=sobol()
        ),
        qLogNParEGO(model_list, X_baseline=train_X, sampler=sobol()),
    ]
    for acquisition in acquisitions:
        optimize(acquisition, q=2, sequential=True)


def _candidates() -> Tensor:
    return draw_sobol_samples(BOUNDS, n=128, q=1, seed=0).squeeze(-2)


@scenario("max-posterior-sampling")
def _(family: str) -> None:
    model, candidates = fitted(family), _candidates()
    torch.manual_seed(0)
    points = MaxPosteriorSampling(model)(candidates, num_samples=16)
    assert points.shape == (16, DIM)
    assert (points.unsqueeze(-2) == candidates).all(dim=-1).any(dim=-1).all()
    if is_member_ensemble(family):
        # The stated limit of the finite set of members (the ensembles' default): one
        # point per member, unless deduplicated or sampled continuously.
        assert points.unique(dim=0).shape[0] <= model.member_weights.numel()
        distinct = MaxPosteriorSampling(model, replacement=False)(candidates, num_samples=16)
        assert distinct.unique(dim=0).shape[0] == 16
        continuous = continuous_sample_model(family)
        points = MaxPosteriorSampling(continuous)(candidates, num_samples=64)
        assert points.unique(dim=0).shape[0] > 1


@scenario("constrained-thompson-sampling")
def _(family: str) -> None:
    train_X, train_Y = toy_data(num_outputs=2)
    objective_model = fitted(family)
    constraint_model = fit(family, build(family, train_X, train_Y[:, 1:] - 0.3))
    # A trust region: the box of half-width 0.2 around the best point, as in SCBO.
    center = train_X[train_Y[:, 0].argmax()]
    lower, upper = (center - 0.2).clamp(0.0, 1.0), (center + 0.2).clamp(0.0, 1.0)
    candidates = lower + (upper - lower) * _candidates()
    torch.manual_seed(0)
    sampling = ConstrainedMaxPosteriorSampling(
        model=objective_model, constraint_model=ModelList(constraint_model), replacement=False
    )
    points = sampling(candidates, num_samples=3)
    assert points.shape == (3, DIM)
    assert ((points >= lower) & (points <= upper)).all()
    assert (points.unsqueeze(-2) == candidates).all(dim=-1).any(dim=-1).all()
    distinct = points.unique(dim=0).shape[0]
    if is_member_ensemble(family):
        # The stated limit of the finite set of members (the ensembles' default): a
        # sample is one of the K members.
        assert 1 <= distinct <= objective_model.member_weights.numel()
    else:
        assert distinct == 3


@scenario("batch-thompson-sampling")
def _(family: str) -> None:
    points = batch_thompson_sampling(fitted(family), BOUNDS, q=12, num_candidates=256, seed=0)
    assert points.shape == (12, DIM)
    assert torch.pdist(points).min() > 0


@scenario("model-list")
def _(family: str) -> None:
    model_list = ModelList(fitted(family), fitted("gp"))
    assert model_list.posterior(query_points(4, 2)).mean.shape == (4, 2, 2)
    objective = GenericMCObjective(lambda samples, X=None: samples[..., 0])
    constraints = [lambda samples: samples[..., 1] - 0.3]
    acquisition = qLogExpectedImprovement(
        model_list, best_f=best_f(), objective=objective, constraints=constraints
    )
    optimize(acquisition, q=2)


@scenario("default-outcome-transform")
def _(family: str) -> None:
    train_X, train_Y = toy_data()
    scaled_Y = 100.0 + 50.0 * train_Y
    options = family_options(family)
    model = model_class(family)(train_X, scaled_Y, **options)
    assert isinstance(model.outcome_transform, Standardize)
    mean = fit(family, model).posterior(train_X.unsqueeze(-2)).mean.squeeze(-2)
    assert (mean - scaled_Y).abs().mean() < scaled_Y.std()
    # The old behaviour, one argument away, with BoTorch's warning.
    with pytest.warns(InputDataWarning, match="not standardized"):
        raw = model_class(family)(train_X, scaled_Y, outcome_transform=None, **options)
    assert getattr(raw, "outcome_transform", None) is None
    with pytest.warns(InputDataWarning, match="unit cube"):
        model_class(family)(10.0 * train_X, train_Y, **options)


@scenario("transforms")
def _(family: str) -> None:
    train_X, train_Y = toy_data()
    log_standardize = ChainedOutcomeTransform(log=Log(), standardize=Standardize(1))
    model = fit(family, build(family, train_X, train_Y + 2.0, outcome_transform=log_standardize))
    posterior = model.posterior(train_X.unsqueeze(-2))
    # The Log transform maps predictions back to the (positive) original units.
    fitted_Y = posterior.mean.squeeze(-2)
    assert (fitted_Y > 0).all() and (fitted_Y - train_Y - 2.0).abs().mean() < train_Y.std()
    optimize(qLogExpectedImprovement(model, best_f=best_f() + 2.0, sampler=sobol()))
    if is_function_bank(family):
        # The stated limit: a mixture of Gaussians stays one only under affine maps.
        with pytest.raises(UnsupportedError, match="linear outcome transform"):
            model.posterior(query_points(3, 1), observation_noise=True)
    else:
        assert model.posterior(query_points(3, 1), observation_noise=True).variance.isfinite().all()


@scenario("learnable-transforms")
def _(family: str) -> None:
    # BoTorch's bo_with_warped_gp tutorial: SingleTaskGP(train_X, train_Y,
    # input_transform=Warp(d=d, indices=list(range(d)), bounds=bounds)), fitted, then
    # qLogNoisyExpectedImprovement; the same call on every family.
    train_X, train_Y = toy_data()
    warp = Warp(d=DIM, indices=list(range(DIM)), bounds=BOUNDS)
    initial = [parameter.detach().clone() for parameter in warp.parameters()]
    model = fit(family, build(family, train_X, train_Y, input_transform=warp))
    # The model serves with the trained warp, in eval mode.
    served = model.input_transform
    assert not served.training
    learned = [parameter.detach() for parameter in served.parameters()]
    assert any(not torch.equal(a, b) for a, b in zip(initial, learned, strict=True))
    posterior = model.posterior(query_points(3, 1))
    assert posterior.mean.isfinite().all() and posterior.variance.isfinite().all()
    optimize(qLogNoisyExpectedImprovement(model, X_baseline=train_X))


@scenario("input-batches")
def _(family: str) -> None:
    model = fitted(family, num_outputs=2)
    X = query_points(2, 3, 4)
    posterior = model.posterior(X)
    assert posterior.mean.shape == posterior.variance.shape == (2, 3, 4, 2)


#: BoTorch's batched GPs' training data and batch_cross_validation
#: (``tests/drop_in/batched_data.py``).
scenario("batched-models")(batched_models_scenario)


def field_outputs(train_X: Tensor) -> Tensor:
    r"""A ``2 x 3`` field per point of ``train_X`` (``n x 2``): what BoTorch's composite
    tutorial models with a ``HigherOrderGP``."""
    rows = torch.linspace(0.5, 1.5, 2, dtype=train_X.dtype)
    columns = torch.linspace(0.0, 1.0, 3, dtype=train_X.dtype)
    phase = 3 * train_X[:, :1, None] + columns
    return rows[:, None] * torch.sin(phase + train_X[:, 1:, None])


@scenario("tensor-outputs")
def _(family: str) -> None:
    # BoTorch's composite_bo_with_hogp tutorial: HigherOrderGP(train_X, train_Y, ...) on
    # `n x o1 x o2` outputs with FlattenedStandardize, and q-batch expected improvement
    # with an IIDNormalSampler and a GenericMCObjective over the outputs' grid.
    train_X, _ = toy_data()
    train_Y = field_outputs(train_X)
    target = field_outputs(torch.tensor([[0.3, 0.6]], dtype=train_X.dtype))[0]
    objective = GenericMCObjective(
        lambda samples, X=None: -(samples - target).pow(2).sum(dim=(-1, -2))
    )
    model_type = HigherOrderGP if family == "gp" else model_class(family)
    options = {} if family == "gp" else family_options(family)
    transforms = {
        "input_transform": Normalize(DIM, bounds=BOUNDS),
        "outcome_transform": FlattenedStandardize(train_Y.shape[1:]),
    }
    with warnings.catch_warnings():
        # Raised by torch inside the HigherOrderGP's sparse interpolation, not by BoTorch.
        warnings.filterwarnings("ignore", message="Sparse invariant checks", category=UserWarning)
        model = fit(family, model_type(train_X, train_Y, **transforms, **options))
        posterior = model.posterior(query_points(4, 1))
        assert posterior.mean.shape == posterior.variance.shape == (4, 1, 2, 3)
        sampler = IIDNormalSampler(sample_shape=torch.Size([16]), seed=0)
        assert sampler(posterior).shape == (16, 4, 1, 2, 3)
        acquisition = qLogExpectedImprovement(
            model, best_f=objective(train_Y).max(), sampler=sampler, objective=objective
        )
        optimize(acquisition, q=2)


@scenario("dtypes")
def _(family: str) -> None:
    for dtype in (torch.float32, torch.float64):
        model = fitted(family, dtype=dtype)
        posterior = model.posterior(query_points(3, 1, dtype=dtype))
        assert posterior.mean.dtype == posterior.variance.dtype == dtype
        acquisition = qLogExpectedImprovement(model, best_f=best_f().to(dtype), sampler=sobol())
        assert optimize(acquisition, q=2, dtype=dtype).dtype == dtype


@scenario("output-subsets")
def _(family: str) -> None:
    model, X = fitted(family, num_outputs=2), query_points(4, 2)
    full = model.posterior(X)
    subset = model.subset_output([1]).posterior(X)
    torch.testing.assert_close(subset.mean, full.mean[..., [1]])
    torch.testing.assert_close(subset.variance, full.variance[..., [1]])
    if family == "gp":
        # The stated limits, BoTorch's own.
        swapped = model.posterior(X, output_indices=[1, 0])
        assert not torch.allclose(swapped.mean, full.mean[..., [1, 0]])
        with pytest.raises(ValueError, match="at least 2 MVNs"):
            model.posterior(X, output_indices=[1])
        return
    swapped = model.posterior(X, output_indices=[1, 0])
    torch.testing.assert_close(swapped.mean, full.mean[..., [1, 0]])
    single = model.posterior(X, output_indices=[1])
    torch.testing.assert_close(single.mean, subset.mean, rtol=0, atol=0)


@scenario("observation-noise")
def _(family: str) -> None:
    model, X = fitted(family), query_points(4, 2)
    latent = model.posterior(X)
    noisy = model.posterior(X, observation_noise=True)
    torch.testing.assert_close(noisy.mean, latent.mean)
    assert (noisy.variance >= latent.variance).all()
    explicit = model.posterior(X, observation_noise=torch.full((4, 2, 1), 0.1, dtype=X.dtype))
    assert (explicit.variance > latent.variance).all()


#: BoTorch's tutorials' uses of known observation noise (``tests/drop_in/tutorial_patterns.py``).
scenario("known-noise")(known_noise_scenario)


@scenario("posterior-transform")
def _(family: str) -> None:
    model, X = fitted(family, num_outputs=2), query_points(4, 2)
    weights = torch.tensor([0.5, -2.0], dtype=X.dtype)
    transform = ScalarizedPosteriorTransform(weights=weights)
    scalarized = model.posterior(X, posterior_transform=transform)
    torch.testing.assert_close(scalarized.mean, model.posterior(X).mean @ weights.unsqueeze(-1))
    optimize(qLogExpectedImprovement(model, best_f=0.0, posterior_transform=transform))
    optimize(UpperConfidenceBound(model, beta=0.1, posterior_transform=transform))


@scenario("state-dict")
def _(family: str) -> None:
    model = fitted(family)
    loaded = build(family, *toy_data())
    loaded.load_state_dict(model.state_dict())
    loaded.eval()
    X = query_points(4, 1)
    torch.testing.assert_close(loaded.posterior(X).mean, model.posterior(X).mean)
    torch.testing.assert_close(loaded.posterior(X).variance, model.posterior(X).variance)


def fitted_surrogate(model_configs: list, **spec_options: Any):
    r"""Ax's ``Surrogate`` with ``model_configs``, fitted on the toy data."""
    from ax.core.search_space import SearchSpaceDigest
    from ax.generators.torch.botorch_modular.surrogate import Surrogate, SurrogateSpec
    from botorch.utils.datasets import SupervisedDataset

    spec = SurrogateSpec(model_configs=model_configs, **spec_options)
    surrogate = Surrogate(surrogate_spec=spec)
    names = [f"x{i}" for i in range(DIM)]
    train_X, train_Y = toy_data()
    # Ax's adapter standardises the outcomes before they reach the surrogate; the check
    # calls the surrogate directly, so it standardises them itself.
    train_Y = (train_Y - train_Y.mean()) / train_Y.std()
    dataset = SupervisedDataset(train_X, train_Y, feature_names=names, outcome_names=["y"])
    digest = SearchSpaceDigest(feature_names=names, bounds=[(0.0, 1.0)] * DIM)
    torch.manual_seed(0)
    surrogate.fit(datasets=[dataset], search_space_digest=digest)
    return surrogate


def model_config(family: str, name: str = "candidate"):
    r"""Ax's ``ModelConfig`` of the family's model (its card's fast settings, as in the
    other scenarios; Ax gives NOMU the search space's box)."""
    from ax.generators.torch.botorch_modular.utils import ModelConfig

    options = dict(FAMILIES[family].fast.hyperparameters)
    return ModelConfig(botorch_model_class=model_class(family), model_options=options, name=name)


@scenario("ax-model-config")
def _(family: str) -> None:
    config = model_config(family)
    surrogate = fitted_surrogate([config])
    assert isinstance(surrogate.model, config.botorch_model_class)
    mean, covariance = surrogate.predict(query_points(5))
    assert mean.shape == (5, 1) and covariance.shape == (5, 1, 1)
    assert mean.isfinite().all() and (covariance >= 0).all()


@scenario("ax-model-selection")
def _(family: str) -> None:
    configs = [model_config("gp", name="gp"), model_config(family)]
    surrogate = fitted_surrogate(configs, num_folds=4)
    scores = surrogate._model_name_to_eval["y"]
    assert set(scores) == {"gp", "candidate"}
    assert all(math.isfinite(score) for score in scores.values())
    # Ax's default criterion, rank correlation, is maximised.
    models = surrogate._model_name_to_model["y"]
    chosen = [name for name, model in models.items() if model is surrogate.model]
    assert len(chosen) == 1 and scores[chosen[0]] == max(scores.values())
    mean, _ = surrogate.predict(query_points(5))
    assert mean.isfinite().all()


def adapts_to_shift(card: ModelCard) -> bool:
    r"""Whether the card's model takes ``validation_shift_severity`` (NES's models)."""
    hyperparameters = getattr(card.model_class, "hyperparameter_class", None)
    return hyperparameters is not None and "validation_shift_severity" in {
        field.name for field in dataclasses.fields(hyperparameters)
    }


@scenario("shift-adaptation")
def _(family: str) -> None:
    train_X, train_Y = toy_data()
    cards = families()[MODELS[family].family.key][1]
    adaptable = [card for card in cards if adapts_to_shift(card)]
    for card in cards:
        if card not in adaptable:
            with pytest.raises(TypeError, match="validation_shift_severity"):
                build(card.name, train_X, train_Y, validation_shift_severity=5)
    if not adaptable:
        build(family, train_X, train_Y, validation_shift_severity=5)
    for card in adaptable:
        model = fit(card.name, build(card.name, train_X, train_Y, validation_shift_severity=5))
        plain = model.reselect(0)
        assert plain.hyperparameters.validation_shift_severity == 0
        assert plain.search_history.candidates is model.search_history.candidates
        optimize(LogExpectedImprovement(plain, best_f=best_f()))
