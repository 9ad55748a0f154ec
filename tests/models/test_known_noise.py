"""Known observation noise (``train_Yvar``) as ``SingleTaskGP`` takes it: the argument and
its checks, the transform and the floor (compared with BoTorch's fixed-noise GP), the
training losses it weighs, the noise the posterior and fantasies use, and checkpoints,
for every model (the searched ensembles' candidates and selection in
``tests/ensembles/test_searched_known_noise.py``). (Every family runs BoTorch's tutorial
patterns with it in the drop-in suite, ``tests/drop_in/tutorial_patterns.py``.)"""

from __future__ import annotations

import copy
import inspect
import re
import warnings
from pathlib import Path

import pytest
import torch
from botorch.exceptions.warnings import InputDataWarning
from botorch.models import SingleTaskGP
from botorch.models.transforms import Normalize, Standardize
from botorch.models.transforms.outcome import Bilog, Log
from botorch.sampling import SobolQMCNormalSampler
from gpytorch.utils.warnings import NumericalWarning

from botorch_nn_uq.models import NEON, NOMU, AutoDEUQ, DeepEnsemble, HyperDeepEnsemble, MCDropout
from botorch_nn_uq.models.checkpoint import KNOWN_NOISE_KEY, CheckpointError, decode_header
from tests.cards import CARDS, NEURAL_CARDS, fast_settings

DTYPE = torch.float64
BOUNDS = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=DTYPE)
MODEL_CLASSES = list(dict.fromkeys(card.model_class for card in NEURAL_CARDS))
#: On these twelve points a searched ensemble's Caruana selection may keep one member
#: (the fit warns); the checks here hold for any number of members.
pytestmark = pytest.mark.filterwarnings(
    "ignore:The member selection .* kept a single member:UserWarning"
)
#: A variance whose reciprocal and its mean are exact: constant known noise of it gives
#: precision weights of exactly one.
EXACT_VARIANCE = 0.25


def _data(n: int = 12, num_outputs: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    X = torch.rand(n, 2, generator=torch.Generator().manual_seed(0), dtype=DTYPE)
    Y = torch.stack([X.sin().sum(-1), X.prod(-1)], dim=-1)[..., :num_outputs]
    Yvar = torch.linspace(0.01, 0.3, n, dtype=DTYPE).unsqueeze(-1).expand_as(Y).contiguous()
    return X, Y, Yvar


def _settings(cls: type, **overrides) -> dict:
    card = next(card for card in NEURAL_CARDS if card.model_class is cls)
    return card.fast_options(BOUNDS, **{"epochs": 30, **overrides})


def _model(cls: type, Yvar: torch.Tensor | None, num_outputs: int = 1, **overrides):
    X, Y, _ = _data(num_outputs=num_outputs)
    return cls(
        X, Y, Yvar, input_transform=Normalize(2, bounds=BOUNDS), **_settings(cls, **overrides)
    )


def _test_points() -> torch.Tensor:
    return torch.rand(5, 1, 2, generator=torch.Generator().manual_seed(9), dtype=DTYPE)


@pytest.mark.parametrize("cls", MODEL_CLASSES, ids=lambda cls: cls.__name__)
def test_train_Yvar_is_the_third_argument_as_for_a_gp(cls) -> None:
    gp_arguments = list(inspect.signature(SingleTaskGP).parameters)
    arguments = list(inspect.signature(cls).parameters)
    assert arguments[:3] == gp_arguments[:3] == ["train_X", "train_Y", "train_Yvar"]
    assert inspect.signature(cls).parameters["train_Yvar"].default is None


@pytest.mark.parametrize("cls", MODEL_CLASSES, ids=lambda cls: cls.__name__)
def test_positional_and_keyword_known_noise_give_the_same_fit(cls) -> None:
    X, Y, Yvar = _data()
    positional = cls(X, Y, Yvar, **_settings(cls)).fit(seed=0)
    keyword = cls(X, Y, train_Yvar=Yvar, **_settings(cls)).fit(seed=0)
    for observation_noise in (False, True):
        expected = positional.posterior(_test_points(), observation_noise=observation_noise)
        given = keyword.posterior(_test_points(), observation_noise=observation_noise)
        assert torch.equal(given.mean, expected.mean)
        assert torch.equal(given.variance, expected.variance)


@pytest.mark.parametrize(
    ("Yvar", "error", "message"),
    [
        (Normalize(2), TypeError, "Pass transforms by keyword"),
        (0.1, TypeError, "train_Yvar must be a torch.Tensor"),
        (torch.full((12,), 0.1, dtype=DTYPE), ValueError, "shape of train_Y"),
        (torch.full((12, 2), 0.1, dtype=DTYPE), ValueError, "shape of train_Y"),
        (torch.full((12, 1), 0.1), ValueError, "dtype and device of train_Y"),
        (torch.full((12, 1), float("nan"), dtype=DTYPE), ValueError, "NaN or infinite"),
        (torch.full((12, 1), float("inf"), dtype=DTYPE), ValueError, "NaN or infinite"),
        (torch.full((12, 1), -0.1, dtype=DTYPE), ValueError, "negative variances"),
    ],
)
def test_bad_known_noise_raises_a_clear_error(Yvar, error, message) -> None:
    X, Y, _ = _data()
    with pytest.raises(error, match=message):
        DeepEnsemble(X, Y, Yvar)


def test_known_noise_is_transformed_with_the_outcomes_as_for_a_gp() -> None:
    X, Y, Yvar = _data(num_outputs=2)
    for transform in (Standardize(2), Log()):
        with warnings.catch_warnings():
            # Log-transformed outcomes are not standardised; BoTorch says so for both.
            warnings.simplefilter("ignore", InputDataWarning)
            model = DeepEnsemble(X, Y + 2, Yvar, outcome_transform=transform)
            gp = SingleTaskGP(X, Y + 2, Yvar, outcome_transform=copy.deepcopy(transform))
        # The GP's fixed-noise likelihood holds the transformed noise output by output.
        torch.testing.assert_close(model.transformed_train_Yvar, gp.likelihood.noise.T)
    assert torch.equal(model.train_Yvar, Yvar)
    # A transform that cannot map variances raises, as it does for the GP.
    for model_class in (SingleTaskGP, DeepEnsemble):
        with pytest.raises(NotImplementedError, match="transforming observation noise"):
            model_class(X, Y, Yvar, outcome_transform=Bilog())
    with pytest.warns(InputDataWarning, match="not standardized"):
        untransformed = DeepEnsemble(X, Y, Yvar, outcome_transform=None)
    assert torch.equal(untransformed.transformed_train_Yvar, Yvar)


@pytest.mark.parametrize(("dtype", "floor"), [(torch.float64, 1e-6), (torch.float32, 1e-4)])
def test_zero_variances_are_rounded_up_to_the_fixed_noise_gps_floor(dtype, floor) -> None:
    X, Y, Yvar = (tensor.to(dtype) for tensor in _data())
    Yvar = Yvar.clone()
    Yvar[:4] = 0.0
    with pytest.warns(NumericalWarning, match=f"rounded up to it.*{floor}|{floor}.*rounded up"):
        model = DeepEnsemble(X, Y, Yvar)
    # BoTorch's advice to use float64 with GPs aside: float32 is what is being checked.
    with (
        pytest.warns(NumericalWarning, match="Rounding small noise values up"),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore", InputDataWarning)
        gp = SingleTaskGP(X, Y, Yvar)
    assert (model.transformed_train_Yvar[:4] == floor).all()
    torch.testing.assert_close(model.transformed_train_Yvar, gp.likelihood.noise.unsqueeze(-1))


@pytest.mark.parametrize("cls", [MCDropout, DeepEnsemble, NEON], ids=lambda cls: cls.__name__)
def test_known_noise_and_a_fixed_noise_variance_are_refused_together(cls) -> None:
    X, Y, Yvar = _data()
    options = {"likelihood": "mse"} if cls is DeepEnsemble else {}
    with pytest.raises(ValueError, match="both train_Yvar .* and noise_variance"):
        cls(X, Y, Yvar, noise_variance=0.1, **options)
    model = cls(X, Y, Yvar, **_settings(cls, **options)).fit(seed=0)
    before = model.state_dict()
    with pytest.raises(ValueError, match="both train_Yvar"):
        model.fit(seed=1, noise_variance=0.1)
    assert all(torch.equal(before[key], value) for key, value in model.state_dict().items())


def test_nomu_learns_its_noise_or_takes_it_known_not_both() -> None:
    X, Y, Yvar = _data()
    with pytest.raises(ValueError, match="learn_noise=True"):
        NOMU(X, Y, Yvar, learn_noise=True)
    model = NOMU(X, Y, Yvar, **_settings(NOMU))
    with pytest.raises(ValueError, match="learn_noise=True"):
        model.fit(seed=0, learn_noise=True)
    assert not model.is_fitted


@pytest.mark.parametrize("cls", [MCDropout, NEON, NOMU], ids=lambda cls: cls.__name__)
def test_constant_known_noise_trains_exactly_as_the_unweighted_loss(cls) -> None:
    # Weighted least squares with weights normalised to mean one: constant noise weighs
    # every row by exactly one, so the networks are the ones trained without it.
    X, Y, _ = _data()
    with_noise = cls(X, Y, torch.full_like(Y, EXACT_VARIANCE), **_settings(cls)).fit(seed=0)
    without = cls(X, Y, **_settings(cls)).fit(seed=0)
    for name, value in without.network.state_dict().items():
        assert torch.equal(with_noise.network.state_dict()[name], value), name


@pytest.mark.parametrize("cls", MODEL_CLASSES, ids=lambda cls: cls.__name__)
def test_observation_noise_adds_the_mean_known_variance_not_the_models_estimate(cls) -> None:
    X, Y, Yvar = _data(num_outputs=2)
    model = _model(cls, Yvar, num_outputs=2).fit(seed=0)
    latent = model.posterior(_test_points())
    noisy = model.posterior(_test_points(), observation_noise=True)
    added = noisy.variance - latent.variance
    torch.testing.assert_close(added, Yvar.mean(dim=0).expand_as(added))
    # A tensor of noise variances is added as given, as without known noise.
    given = torch.full((5, 1, 2), 0.5, dtype=DTYPE)
    explicit = model.posterior(_test_points(), observation_noise=given)
    stdvs = model.outcome_transform.stdvs
    added = explicit.variance - latent.variance
    torch.testing.assert_close(added, (0.5 * stdvs**2).expand_as(added))


def test_a_gaussian_head_ensemble_reports_the_known_noise_as_aleatoric() -> None:
    X, Y, Yvar = _data()
    model = DeepEnsemble(X, Y, Yvar, **_settings(DeepEnsemble)).fit(seed=0)
    assert model.network.gaussian_head
    decomposition = model.uncertainty_decomposition(_test_points())
    torch.testing.assert_close(
        decomposition.aleatoric_variance, Yvar.mean().expand_as(decomposition.mean)
    )
    torch.testing.assert_close(
        decomposition.epistemic_variance, model.posterior(_test_points()).variance
    )


@pytest.mark.parametrize("likelihood", ["gaussian", "mse"])
def test_a_deep_ensemble_trains_on_the_known_noise(likelihood, monkeypatch) -> None:
    from botorch_nn_uq.training import members

    # The members train on the common path, which takes the known noise.
    seen = []
    common_path_loss = members.CommonPathLoss

    def recording(*args, **kwargs):
        seen.append(kwargs.get("known_noise"))
        return common_path_loss(*args, **kwargs)

    monkeypatch.setattr(members, "CommonPathLoss", recording)
    X, Y, Yvar = _data()
    model = DeepEnsemble(X, Y, Yvar, **_settings(DeepEnsemble, likelihood=likelihood))
    model.fit(seed=0)
    assert seen and all(known is not None for known in seen)
    # In the members' training precision (single by default).
    assert seen[0].variance.dtype == model.hyperparameters.training_dtype
    torch.testing.assert_close(seen[0].variance.double(), model.transformed_train_Yvar)


def test_a_subset_of_outputs_serves_its_known_noise() -> None:
    X, Y, Yvar = _data(num_outputs=2)
    Yvar = Yvar * torch.tensor([1.0, 3.0], dtype=DTYPE)
    model = MCDropout(X, Y, Yvar, **_settings(MCDropout)).fit(seed=0)
    subset = model.subset_output([1])
    expected = model.posterior(_test_points(), observation_noise=True).variance[..., [1]]
    assert torch.equal(subset.posterior(_test_points(), observation_noise=True).variance, expected)
    fantasy = subset.condition_on_observations(
        _test_points()[:2, 0],
        torch.zeros(2, 1, dtype=DTYPE),
        noise=torch.full((2, 1), 1e-3).to(DTYPE),
    )
    assert fantasy.posterior(_test_points()[:, 0]).mean.shape == (5, 1)


#: The models whose fit on these twelve points has epistemic variance to condition: the
#: Caruana selections of HyperDeepEnsemble and AutoDEUQ keep one member here (the fit
#: warns), which conditioning cannot move.
WITH_SPREAD = [cls for cls in MODEL_CLASSES if cls not in (HyperDeepEnsemble, AutoDEUQ)]


@pytest.mark.parametrize("cls", WITH_SPREAD, ids=lambda cls: cls.__name__)
def test_conditioning_noise_weighs_the_new_observation(cls) -> None:
    model = _model(cls, _data()[2]).fit(seed=0)
    x = _test_points()[0]
    y = model.posterior(x).mean + 1.0
    means = {
        noise: model.condition_on_observations(x, y, noise=torch.full((1, 1), noise, dtype=DTYPE))
        .posterior(x)
        .mean
        for noise in (1e-6, 100.0)
    }
    # A nearly exact observation is followed; a very noisy one barely moves the mean.
    assert (means[1e-6] - y).abs() < (means[100.0] - y).abs()
    assert (means[100.0] - model.posterior(x).mean).abs() < 0.1


@pytest.mark.parametrize("cls", MODEL_CLASSES, ids=lambda cls: cls.__name__)
def test_conditioning_without_noise_uses_the_mean_known_variance(cls) -> None:
    model = _model(cls, _data()[2]).fit(seed=0)
    X = _test_points()[:2, 0]
    Y = model.posterior(X).mean + 0.5
    mean_noise = model.transformed_train_Yvar.mean().expand(2, 1)
    own = model.condition_on_observations(X, Y).posterior(_test_points())
    given = model.condition_on_observations(X, Y, noise=mean_noise).posterior(_test_points())
    assert torch.equal(own.mean, given.mean) and torch.equal(own.variance, given.variance)
    # In two steps, the first without noise: the same as at once with that noise.
    two_steps = (
        model.condition_on_observations(X[:1], Y[:1])
        .condition_on_observations(X[1:], Y[1:], noise=mean_noise[1:])
        .posterior(_test_points())
    )
    torch.testing.assert_close(two_steps.mean, own.mean)
    torch.testing.assert_close(two_steps.variance, own.variance)


def test_fantasize_conditions_with_an_observation_noise_tensor_given_known_noise() -> None:
    x = _test_points()[0]

    def left_variance(model: MCDropout, noise: float) -> torch.Tensor:
        sampler = SobolQMCNormalSampler(torch.Size([4]), seed=0)
        fantasy = model.fantasize(
            x, sampler, observation_noise=torch.full((1, 1), noise, dtype=DTYPE)
        )
        return fantasy.posterior(x).variance

    known = _model(MCDropout, _data()[2]).fit(seed=0)
    assert (left_variance(known, 1e-6) < left_variance(known, 1.0)).all()
    # A model that estimates its noise draws with the tensor and conditions with its own
    # estimate, as before models took known noise: what is left at the point is the same.
    estimating = _model(MCDropout, None).fit(seed=0)
    torch.testing.assert_close(left_variance(estimating, 1e-6), left_variance(estimating, 1.0))


def test_a_checkpoint_with_known_noise_loads_only_into_a_model_with_known_noise() -> None:
    X, Y, Yvar = _data()
    model = DeepEnsemble(X, Y, Yvar, **_settings(DeepEnsemble)).fit(seed=0)
    state = model.state_dict()
    assert decode_header(state["_extra_state"])[KNOWN_NOISE_KEY] is True
    with pytest.raises(CheckpointError, match="known observation noise, train_Yvar"):
        DeepEnsemble(X, Y, **_settings(DeepEnsemble)).load_state_dict(state)
    plain = DeepEnsemble(X, Y, **_settings(DeepEnsemble)).fit(seed=0).state_dict()
    # Checkpoints without known noise keep their header.
    assert KNOWN_NOISE_KEY not in decode_header(plain["_extra_state"])
    with pytest.raises(CheckpointError, match="known observation noise, train_Yvar"):
        DeepEnsemble(X, Y, Yvar, **_settings(DeepEnsemble)).load_state_dict(plain)
    # On other data and noise, the loaded model serves the checkpoint's posterior, and its
    # known noise is mapped by the checkpoint's outcome transform for a refit.
    other = DeepEnsemble(X[:8], 3 * Y[:8], 2 * Yvar[:8], **_settings(DeepEnsemble))
    other.load_state_dict(state)
    for observation_noise in (False, True):
        expected = model.posterior(_test_points(), observation_noise=observation_noise)
        loaded = other.posterior(_test_points(), observation_noise=observation_noise)
        assert torch.equal(loaded.variance, expected.variance)
    stdvs = other.outcome_transform.stdvs
    torch.testing.assert_close(other.transformed_train_Yvar, 2 * Yvar[:8] / stdvs**2)


def test_the_deep_ensemble_card_fits_with_known_noise_in_single_precision() -> None:
    # The registry's deep ensemble trains in float32 on float64 data.
    X, Y, Yvar = _data()
    options = {**CARDS["deep-ensemble"].bo.constructor_options, "max_steps": 20}
    model = DeepEnsemble(X, Y, Yvar, **fast_settings("deep-ensemble", **options)).fit(seed=0)
    assert model.posterior(_test_points(), observation_noise=True).variance.isfinite().all()


def test_the_guides_example_trains_with_known_noise() -> None:
    r"""The example of "Known observation noise" in ``docs/guide/models.md``, as written."""
    guide = Path(__file__).resolve().parents[2] / "docs" / "guide" / "models.md"
    blocks = re.findall(r"```python\n(.*?)```", guide.read_text(encoding="utf-8"), re.DOTALL)
    (example,) = [block for block in blocks if "train_Yvar" in block]
    namespace: dict = {}
    exec(compile(example, str(guide), "exec"), namespace)
    model, train_Yvar = namespace["model"], namespace["train_Yvar"]
    assert model.has_known_noise and torch.equal(model.train_Yvar, train_Yvar)
    X = torch.rand(3, 1, 2, dtype=DTYPE)
    assert namespace["acquisition"](X).isfinite().all()


def test_a_function_valued_neon_weighs_every_grid_point_by_its_noise() -> None:
    X = torch.rand(10, 2, generator=torch.Generator().manual_seed(0), dtype=DTYPE)
    grid = torch.linspace(0, 1, 4, dtype=DTYPE).unsqueeze(-1)
    Y = torch.sin(3 * X[:, :1] + grid.T)
    # The noise differs from grid point to grid point and from function to function.
    Yvar = 0.01 * (1 + torch.arange(40, dtype=DTYPE).reshape(10, 4) % 5)
    model = NEON(X, Y, Yvar, output_grid=grid, **_settings(NEON)).fit(seed=0)
    latent = model.posterior(_test_points())
    added = model.posterior(_test_points(), observation_noise=True).variance - latent.variance
    torch.testing.assert_close(added, Yvar.mean(dim=0).expand_as(added))
