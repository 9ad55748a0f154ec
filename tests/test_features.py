"""The README's feature table is ``botorch_nn_uq.features`` rendered, and every cell holds:
each feature runs on a small fitted model of each family, or raises the stated error."""

import math
import warnings
from collections.abc import Callable
from pathlib import Path
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
    qNegIntegratedPosteriorVariance,
    qUpperConfidenceBound,
)
from botorch.acquisition.max_value_entropy_search import (
    qLowerBoundMaxValueEntropy,
    qMaxValueEntropy,
)
from botorch.acquisition.objective import GenericMCObjective, ScalarizedPosteriorTransform
from botorch.exceptions.errors import UnsupportedError
from botorch.exceptions.warnings import InputDataWarning
from botorch.fit import fit_gpytorch_mll
from botorch.generation.sampling import MaxPosteriorSampling
from botorch.models import ModelList, SingleTaskGP
from botorch.models.model import Model
from botorch.models.transforms import Normalize, Standardize
from botorch.models.transforms.outcome import ChainedOutcomeTransform, Log
from botorch.optim import optimize_acqf
from botorch.utils.sampling import draw_sobol_samples
from gpytorch.mlls import ExactMarginalLogLikelihood
from torch import Tensor

from botorch_nn_uq import features
from botorch_nn_uq.features import FAMILIES, FEATURES, Status
from botorch_nn_uq.generation import batch_thompson_sampling
from botorch_nn_uq.models import NEON, NOMU, DeepEnsemble, MCDropout

README = Path(__file__).resolve().parents[1] / "README.md"
DIM = 2
BOUNDS = torch.tensor([[0.0] * DIM, [1.0] * DIM], dtype=torch.float64)

#: Each neural family's class and settings that fit the toy data in well under a second.
NEURAL_FAMILIES = {
    "ensembles": (DeepEnsemble, {"hidden_widths": (16,), "epochs": 40, "ensemble_size": 3}),
    "mc-dropout": (MCDropout, {"hidden_widths": (16,), "epochs": 40, "num_masks": 8}),
    "neon": (
        NEON,
        {
            "encoder_widths": (16,),
            "latent_dim": 8,
            "epinet_widths": (8,),
            "epochs": 40,
            "num_epistemic_samples": 8,
        },
    ),
    "nomu": (
        NOMU,
        {
            "mean_widths": (16,),
            "uncertainty_widths": (8,),
            "epochs": 40,
            "num_artificial_points": 16,
        },
    ),
}


def toy_data(num_outputs: int = 1, dtype: torch.dtype = torch.float64, n: int = 12):
    X = torch.rand(n, DIM, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    Y = torch.stack([torch.sin(5 * X).sum(-1), (X - 0.4).pow(2).sum(-1)], dim=-1)
    return X.to(dtype), Y[..., :num_outputs].to(dtype)


def constructor_arguments(family: str, train_Y: Tensor) -> dict:
    transforms = {
        "input_transform": Normalize(DIM, bounds=BOUNDS.to(train_Y)),
        "outcome_transform": Standardize(train_Y.shape[-1]),
    }
    if family == "gp":
        return transforms
    _, hyperparameters = NEURAL_FAMILIES[family]
    extra = {"bounds": BOUNDS.to(train_Y)} if family == "nomu" else {}
    return {**transforms, **hyperparameters, **extra}


def build(family: str, train_X: Tensor, train_Y: Tensor, **overrides) -> Model:
    r"""An unfitted model of ``family`` (a GP, or the family's neural model)."""
    arguments = {**constructor_arguments(family, train_Y), **overrides}
    model_class = SingleTaskGP if family == "gp" else NEURAL_FAMILIES[family][0]
    return model_class(train_X, train_Y, **arguments)


def fit(family: str, model: Model) -> Model:
    if family == "gp":
        fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
        return model.eval()
    return model.fit(seed=0)


_FITTED: dict[tuple, Model] = {}


def fitted(family: str, num_outputs: int = 1, dtype: torch.dtype = torch.float64) -> Model:
    r"""The family's model fitted on the toy data, shared by the checks (which only read it)."""
    key = (family, num_outputs, dtype)
    if key not in _FITTED:
        with warnings.catch_warnings():
            # BoTorch's advice to use float64 with GPs; float32 is what is being checked.
            warnings.simplefilter("ignore", InputDataWarning)
            _FITTED[key] = fit(family, build(family, *toy_data(num_outputs, dtype)))
    return _FITTED[key]


def query_points(*batch: int, dtype: torch.dtype = torch.float64) -> Tensor:
    generator = torch.Generator().manual_seed(1)
    return torch.rand(*batch, DIM, generator=generator, dtype=torch.float64).to(dtype)


def optimize(acquisition, q: int = 1) -> None:
    with warnings.catch_warnings():
        # Ten L-BFGS-B iterations on a rough surface may stop early; the check is that
        # the acquisition runs and gives a finite value at a feasible candidate.
        warnings.simplefilter("ignore", RuntimeWarning)
        candidate, value = optimize_acqf(
            acquisition, BOUNDS, q=q, num_restarts=2, raw_samples=16, options={"maxiter": 10}
        )
    assert candidate.shape == (q, DIM) and value.isfinite().all()
    assert ((candidate >= BOUNDS[0]) & (candidate <= BOUNDS[1])).all()


CHECKS: dict[str, Callable[[str], None]] = {}


def check(key: str):
    def register(function: Callable[[str], None]) -> Callable[[str], None]:
        CHECKS[key] = function
        return function

    return register


@check("analytic-acquisitions")
def _(family: str) -> None:
    model = fitted(family)
    best_f = toy_data()[1].max()
    optimize(LogExpectedImprovement(model, best_f=best_f))
    optimize(UpperConfidenceBound(model, beta=4.0))
    optimize(ProbabilityOfImprovement(model, best_f=best_f))


@check("mc-acquisitions")
def _(family: str) -> None:
    model = fitted(family)
    optimize(qLogExpectedImprovement(model, best_f=toy_data()[1].max()), q=2)
    optimize(qUpperConfidenceBound(model, beta=4.0), q=2)


@check("noisy-ei-pending")
def _(family: str) -> None:
    model = fitted(family)
    acquisition = qLogNoisyExpectedImprovement(
        model, X_baseline=toy_data()[0], X_pending=query_points(2)
    )
    optimize(acquisition)


@check("fantasies")
def _(family: str) -> None:
    model = fitted(family)
    knowledge_gradient = qKnowledgeGradient(model, num_fantasies=2)
    # One candidate plus the value function's two fantasy points, for two t-batches.
    values = knowledge_gradient(query_points(2, 3))
    assert values.shape == (2,) and values.isfinite().all()
    variance_reduction = qNegIntegratedPosteriorVariance(model, mc_points=query_points(16))
    values = variance_reduction(query_points(2, 1))
    assert values.shape == (2,) and values.isfinite().all()


@check("max-value-entropy")
def _(family: str) -> None:
    model = fitted(family)
    candidate_set = draw_sobol_samples(BOUNDS, n=64, q=1, seed=0).squeeze(-2)
    torch.manual_seed(0)
    for acquisition_class in (qMaxValueEntropy, qLowerBoundMaxValueEntropy):
        optimize(acquisition_class(model, candidate_set, num_mv_samples=8))


def _candidates() -> Tensor:
    return draw_sobol_samples(BOUNDS, n=128, q=1, seed=0).squeeze(-2)


@check("max-posterior-sampling")
def _(family: str) -> None:
    model, candidates = fitted(family), _candidates()
    torch.manual_seed(0)
    points = MaxPosteriorSampling(model)(candidates, num_samples=16)
    assert points.shape == (16, DIM)
    assert (points.unsqueeze(-2) == candidates).all(dim=-1).any(dim=-1).all()
    if family == "ensembles":
        # The stated limit: one point per member, unless deduplicated.
        assert points.unique(dim=0).shape[0] <= model.member_weights.numel()
        distinct = MaxPosteriorSampling(model, replacement=False)(candidates, num_samples=16)
        assert distinct.unique(dim=0).shape[0] == 16


@check("batch-thompson-sampling")
def _(family: str) -> None:
    points = batch_thompson_sampling(fitted(family), BOUNDS, q=12, num_candidates=256, seed=0)
    assert points.shape == (12, DIM)
    assert torch.pdist(points).min() > 0


@check("model-list")
def _(family: str) -> None:
    model_list = ModelList(fitted(family), fitted("gp"))
    assert model_list.posterior(query_points(4, 2)).mean.shape == (4, 2, 2)
    objective = GenericMCObjective(lambda samples, X=None: samples.sum(-1))
    optimize(qLogExpectedImprovement(model_list, best_f=1.0, objective=objective), q=2)


@check("transforms")
def _(family: str) -> None:
    train_X, train_Y = toy_data()
    log_standardize = ChainedOutcomeTransform(log=Log(), standardize=Standardize(1))
    model = fit(family, build(family, train_X, train_Y + 2.0, outcome_transform=log_standardize))
    posterior = model.posterior(train_X.unsqueeze(-2))
    # The Log transform maps predictions back to the (positive) original units.
    fitted_Y = posterior.mean.squeeze(-2)
    assert (fitted_Y > 0).all() and (fitted_Y - train_Y - 2.0).abs().mean() < train_Y.std()
    if family in ("ensembles", "mc-dropout", "neon"):
        # The stated limit: a mixture of Gaussians stays one only under affine maps.
        with pytest.raises(UnsupportedError, match="linear outcome transform"):
            model.posterior(query_points(3, 1), observation_noise=True)
    else:
        assert model.posterior(query_points(3, 1), observation_noise=True).variance.isfinite().all()


@check("input-batches")
def _(family: str) -> None:
    model = fitted(family, num_outputs=2)
    X = query_points(2, 3, 4)
    posterior = model.posterior(X)
    assert posterior.mean.shape == posterior.variance.shape == (2, 3, 4, 2)


@check("batched-models")
def _(family: str) -> None:
    train_X, train_Y = toy_data()
    batched_X, batched_Y = torch.stack([train_X, 1 - train_X]), torch.stack([train_Y, -train_Y])
    # Standardised by hand: the models take no outcome transform here, and BoTorch's GP
    # warns about unstandardised outcomes.
    batched_Y = (batched_Y - batched_Y.mean(-2, keepdim=True)) / batched_Y.std(-2, keepdim=True)
    model = build(family, batched_X, batched_Y, input_transform=None, outcome_transform=None)
    assert fit(family, model).posterior(query_points(2, 5)).mean.shape == (2, 5, 1)


@check("dtypes")
def _(family: str) -> None:
    for dtype in (torch.float32, torch.float64):
        posterior = fitted(family, dtype=dtype).posterior(query_points(3, 1, dtype=dtype))
        assert posterior.mean.dtype == posterior.variance.dtype == dtype


@check("output-subsets")
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


@check("observation-noise")
def _(family: str) -> None:
    model, X = fitted(family), query_points(4, 2)
    latent = model.posterior(X)
    noisy = model.posterior(X, observation_noise=True)
    torch.testing.assert_close(noisy.mean, latent.mean)
    assert (noisy.variance >= latent.variance).all()
    explicit = model.posterior(X, observation_noise=torch.full((4, 2, 1), 0.1, dtype=X.dtype))
    assert (explicit.variance > latent.variance).all()


@check("posterior-transform")
def _(family: str) -> None:
    model, X = fitted(family, num_outputs=2), query_points(4, 2)
    weights = torch.tensor([0.5, -2.0], dtype=X.dtype)
    transform = ScalarizedPosteriorTransform(weights=weights)
    scalarized = model.posterior(X, posterior_transform=transform)
    torch.testing.assert_close(scalarized.mean, model.posterior(X).mean @ weights.unsqueeze(-1))
    optimize(qLogExpectedImprovement(model, best_f=0.0, posterior_transform=transform))


@check("state-dict")
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
    r"""Ax's ``ModelConfig`` of the family's model (options as in the other checks)."""
    from ax.generators.torch.botorch_modular.utils import ModelConfig

    model_class = SingleTaskGP if family == "gp" else NEURAL_FAMILIES[family][0]
    options = {} if family == "gp" else NEURAL_FAMILIES[family][1]
    return ModelConfig(botorch_model_class=model_class, model_options=dict(options), name=name)


@check("ax-model-config")
def _(family: str) -> None:
    config = model_config(family)
    surrogate = fitted_surrogate([config])
    assert isinstance(surrogate.model, config.botorch_model_class)
    mean, covariance = surrogate.predict(query_points(5))
    assert mean.shape == (5, 1) and covariance.shape == (5, 1, 1)
    assert mean.isfinite().all() and (covariance >= 0).all()


@check("ax-model-selection")
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


CELLS = [(feature, family) for feature in FEATURES for family in FAMILIES]


@pytest.mark.parametrize(
    ("feature", "family"), CELLS, ids=[f"{feature.key}-{family.key}" for feature, family in CELLS]
)
def test_the_cell_holds(feature: features.Feature, family: features.Family) -> None:
    support = feature.support[family.key]
    run = CHECKS[feature.key]
    if support.status is Status.UNSUPPORTED:
        with pytest.raises(support.error, match=support.error_match):
            run(family.key)
    else:
        run(family.key)


def test_every_feature_has_a_check() -> None:
    assert set(CHECKS) == {feature.key for feature in FEATURES}


def test_the_readme_shows_the_rendered_table() -> None:
    text = README.read_text(encoding="utf-8")
    assert features.replace_table(text) == text, (
        "The README's feature table is stale: run `python -m botorch_nn_uq.features README.md`."
    )


def test_replace_table_needs_both_markers_once() -> None:
    with pytest.raises(ValueError, match="must contain"):
        features.replace_table("no table here")
    with pytest.raises(ValueError, match="must contain"):
        features.replace_table(features.END_MARKER + "\n" + features.BEGIN_MARKER)
    block = f"{features.BEGIN_MARKER}\nold\n{features.END_MARKER}"
    assert features.render_markdown() in features.replace_table(f"intro\n{block}\noutro")


def test_cells_state_a_note_and_an_error_where_needed() -> None:
    with pytest.raises(ValueError, match="needs a note"):
        features.Support(Status.APPROXIMATE)
    with pytest.raises(ValueError, match="error type"):
        features.Support(Status.UNSUPPORTED, "why")
    with pytest.raises(ValueError, match="error type"):
        features.Support(Status.WORKS, error=ValueError)
