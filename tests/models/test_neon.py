"""Tests of NEON as a BoTorch model: the fixed bank of epistemic indices, epistemic spread,
function-valued use on an output grid, chunked evaluation, seeds, losses, the noise
model and argument checks. Shapes, transforms and acquisitions are covered by the
conformance kit (``tests/models/test_conformance.py``)."""

import copy
import dataclasses
import math

import pytest
import torch
from botorch.models.transforms import Standardize

from botorch_nn_uq.models import NEON, NEONHyperparameters
from botorch_nn_uq.posteriors import FunctionEnsemblePosterior, MixtureOfGaussiansPosterior
from tests.cards import fast_settings
from tests.testing import tolerances

# The models here are fitted (most once per module) in float64 only: the fits are the
# expensive part of the suite, and the conformance kit covers float32.
DTYPE = torch.float64
# These tests compare the posterior with the network's own outputs, so the models train on
# the raw targets (no outcome transform), which BoTorch's scaling check reports.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Data \\(outcome observations\\) is not standardized"
    ":botorch.exceptions.warnings.InputDataWarning"
)
#: NEON's card's fast settings on the raw targets; the bank's size is each test's own.
FAST = fast_settings("neon", without=["num_epistemic_samples"], outcome_transform=None)
FUNCTIONAL = {
    "outcome_transform": None,
    "encoder_widths": (16, 16),
    "latent_dim": 16,
    "decoder_depth": 2,
    "decoder_width": 16,
    "epinet_widths": (16,),
    "index_dim": 8,
    "epochs": 200,
    "learning_rate": 1e-2,
    "lr_decay_rate": None,
    "num_epistemic_samples": 32,
}
NUM_POINTS, NUM_CHANNELS = 12, 2


def _one_dimensional_data(n=20, seed=0, noise=0.05, upper=0.5):
    r"""``n`` points on ``[0, upper]`` of ``sin(6 x) + noise * eps``."""
    generator = torch.Generator().manual_seed(seed)
    train_X = upper * torch.rand(n, 1, generator=generator, dtype=DTYPE)
    eps = torch.randn(n, 1, generator=generator, dtype=DTYPE)
    return train_X, torch.sin(6 * train_X) + noise * eps


def _grid():
    return torch.linspace(0, 1, NUM_POINTS, dtype=DTYPE).unsqueeze(-1)


def _functions(X, equal_norms=False):
    r"""Two channels on the 12-point grid, flattened grid-point major (``j * 2 + c``).

    Channel 1 has an offset of 2, so confusing the layout with channel-major costs a
    large error. With ``equal_norms`` the channels are ``cos`` and ``sin`` of one phase:
    every function then has mean squared value 1/2.
    """
    y = _grid().squeeze(-1)
    phase = 3 * X[:, :1] * y + X[:, 1:]
    if equal_norms:
        channels = [phase.cos(), phase.sin()]
    else:
        channels = [phase.sin(), 2.0 + X[:, :1] * y**2 - X[:, 1:]]
    return torch.stack(channels, dim=-1).flatten(-2)


def _functional_data(n=16, seed=0, equal_norms=False):
    train_X = torch.rand(n, 2, generator=torch.Generator().manual_seed(seed), dtype=DTYPE)
    return train_X, _functions(train_X, equal_norms)


def _functional_model(seed=0, **kwargs):
    train_X, train_Y = _functional_data(equal_norms=kwargs.pop("equal_norms", False))
    settings = {**FUNCTIONAL, **kwargs}
    return NEON(train_X, train_Y, output_grid=_grid(), num_channels=NUM_CHANNELS, **settings).fit(
        seed=seed
    )


@pytest.fixture(scope="module")
def scalar_model():
    r"""A scalar NEON on 1-D data on ``[0, 0.5]`` with a large bank of 4096 indices."""
    train_X, train_Y = _one_dimensional_data()
    return NEON(train_X, train_Y, **FAST, num_epistemic_samples=4096).fit(seed=0)


@pytest.fixture(scope="module")
def functional_model():
    return _functional_model()


def _test_points():
    return torch.tensor([[0.1], [0.3], [0.6], [1.0], [2.0]], dtype=DTYPE).unsqueeze(-2)


# ---------------------------------------------------------------------------
# The bank of epistemic indices


def test_samples_differ_across_indices(scalar_model):
    X = _test_points()
    with torch.no_grad():
        posterior = scalar_model.posterior(X)
    assert isinstance(posterior, FunctionEnsemblePosterior)
    values = posterior.values
    assert values.shape == (5, 4096, 1, 1)
    assert scalar_model.epistemic_indices.shape == (4096, 16)
    assert (values.std(dim=-3) > 0).all()
    assert len(torch.unique(values[0, :, 0, 0])) == 4096


def test_posterior_moments_are_those_of_the_bank(scalar_model):
    X = _test_points()
    with torch.no_grad():
        posterior = scalar_model.posterior(X)
        samples = scalar_model.function_samples(X)  # no transforms: the same units
    torch.testing.assert_close(posterior.values, samples, rtol=0, atol=0)
    torch.testing.assert_close(posterior.mean, samples.mean(-3))
    torch.testing.assert_close(posterior.variance, samples.var(-3, unbiased=False))


def test_bank_is_standard_normal(scalar_model):
    Z = scalar_model.epistemic_indices
    num = Z.shape[0]
    assert (Z.mean(0).abs() < 5 / math.sqrt(num)).all()
    covariance = Z.T @ Z / num
    identity = torch.eye(Z.shape[1], dtype=DTYPE)
    assert (covariance - identity).abs().max() < 0.15


def test_samples_agree_with_the_backbone_mean_in_expectation(scalar_model):
    r"""The prior term ``alpha * sum_k z_k MLP_k(x~)`` is linear in ``z``, so its mean
    over ``z ~ N(0, I)`` is zero; the learnable term ``A(x~, z) z`` is NOT linear (``A``
    depends on ``z``) and its mean need not vanish. So: (1) with the learnable term
    switched off (its last layer zeroed), the backbone mean lies within four standard
    errors of the average over the 4096-index bank; (2) for the trained model, the
    average stays within one posterior standard deviation of the backbone mean (a weak
    check; the largest ratio seen over seeds was about 0.6)."""
    X = _test_points()
    with torch.no_grad():
        backbone_mean = scalar_model.network.backbone(X, None)[0]
        posterior = scalar_model.posterior(X)
        prior_only = copy.deepcopy(scalar_model)
        for parameter in prior_only.network.epinet.learnable[-1].parameters():
            parameter.zero_()
        prior_posterior = prior_only.posterior(X)
    num = prior_posterior.values.shape[-3]
    standard_error = (prior_posterior.variance / num).sqrt()
    assert (prior_posterior.variance > 0).all()
    assert ((prior_posterior.mean - backbone_mean).abs() < 4 * standard_error).all()
    assert ((posterior.mean - backbone_mean).abs() < posterior.variance.sqrt()).all()


def test_epistemic_spread_is_larger_away_from_the_data(scalar_model):
    train_X, _ = _one_dimensional_data()
    far = torch.linspace(1.5, 2.0, 6, dtype=DTYPE).view(-1, 1, 1)
    with torch.no_grad():
        at_data = scalar_model.posterior(train_X.unsqueeze(-2)).variance
        away = scalar_model.posterior(far).variance
    # A constant variance fails this; over six fit seeds the ratio of the smallest
    # variance away to the largest at the data was >= 580.
    assert away.min() > 100 * at_data.max()


def test_the_prior_is_never_trained(scalar_model):
    train_X, train_Y = scalar_model.transformed_training_data()
    generator = torch.Generator().manual_seed(scalar_model.fit_seed)
    initial = scalar_model._build_network(train_X.shape[-1], train_Y.shape[-1], generator)
    initial = initial.to(DTYPE)
    trained, fresh = scalar_model.network.epinet, initial.epinet
    for after, before in zip(trained.prior.parameters(), fresh.prior.parameters(), strict=True):
        assert torch.equal(after, before)
    pairs = zip(trained.learnable.parameters(), fresh.learnable.parameters(), strict=True)
    for after, before in pairs:
        assert not torch.allclose(after, before)


# ---------------------------------------------------------------------------
# Function-valued use


def test_query_points_are_standardised(functional_model):
    grid = _grid()
    expected = (grid - grid.mean(0)) / grid.std(0)
    torch.testing.assert_close(functional_model.query_points, expected)
    assert functional_model.is_function_valued
    assert functional_model.num_outputs == NUM_POINTS * NUM_CHANNELS


def test_function_valued_shapes_and_layout(functional_model):
    model = functional_model
    train_X, train_Y = _functional_data()
    X = torch.rand(3, 2, 2, generator=torch.Generator().manual_seed(5), dtype=DTYPE)
    with torch.no_grad():
        posterior = model.posterior(X)
        fitted = model.posterior(train_X.unsqueeze(-2)).mean.squeeze(-2)
    assert posterior.mean.shape == (3, 2, NUM_POINTS * NUM_CHANNELS)
    assert posterior.values.shape == (3, 32, 2, NUM_POINTS * NUM_CHANNELS)
    # Training and prediction agree on the grid-point-major layout: the fit is close to
    # the data and far from the data read channel-major.
    channel_major = train_Y.unflatten(-1, (NUM_POINTS, NUM_CHANNELS)).transpose(-1, -2)
    assert (fitted - train_Y).pow(2).mean().sqrt() < 0.1
    assert (fitted - channel_major.flatten(-2)).pow(2).mean().sqrt() > 0.4


def test_function_samples_are_joint_across_q_and_grid_points(functional_model):
    model = functional_model
    X = torch.rand(3, 2, 2, generator=torch.Generator().manual_seed(5), dtype=DTYPE)
    with torch.no_grad():
        values = model.posterior(X).values
        again = model.function_samples(X)
        Z = model.epistemic_indices
        for b, k, q in [(0, 0, 0), (0, 0, 1), (2, 7, 0), (2, 7, 1), (1, 31, 1)]:
            # One index z_k for all grid points: channel c of grid point j is output
            # j * d_s + c.
            sample = model.network(X[b, q].unsqueeze(0), model.query_points, Z[k : k + 1])
            assert sample.shape == (NUM_POINTS, 1, NUM_CHANNELS)
            torch.testing.assert_close(values[b, k, q], sample.reshape(-1))
        # Deterministic, and a point's functions do not depend on its q-batch.
        torch.testing.assert_close(again, values, rtol=0, atol=0)
        torch.testing.assert_close(model.posterior(X[:, 1:]).values, values[:, :, 1:])
    assert (values.std(dim=1) > 0).all()


def test_mini_batches_pair_each_row_with_its_function():
    r"""Mini-batches index flattened ``(u_i, y_j)`` rows; a wrong pairing could not fit."""
    model = _functional_model(batch_size=64, epochs=40)
    train_X, train_Y = _functional_data()
    assert model.training_result.epochs_run == 40
    with torch.no_grad():
        fitted = model.posterior(train_X.unsqueeze(-2)).mean.squeeze(-2)
    assert (fitted - train_Y).pow(2).mean().sqrt() < 0.1


@pytest.mark.parametrize("chunk_rows", [1, 7, 160])
def test_chunked_evaluation_equals_unchunked(functional_model, scalar_model, chunk_rows):
    r"""Chunks of inputs and, below one input's rows, of grid points give the same values."""
    X = torch.rand(3, 4, 2, generator=torch.Generator().manual_seed(6), dtype=DTYPE)
    for model, inputs in [(functional_model, X), (scalar_model, X[..., :1])]:
        chunked = copy.copy(model)
        chunked.hyperparameters = dataclasses.replace(
            model.hyperparameters, evaluation_chunk_rows=chunk_rows
        )
        whole = copy.copy(model)
        whole.hyperparameters = dataclasses.replace(
            model.hyperparameters, evaluation_chunk_rows=10**9
        )
        assert model.hyperparameters.evaluation_chunk_rows == 2**17  # the default, untouched
        with torch.no_grad():
            expected = whole.posterior(inputs).values
            got = chunked.posterior(inputs).values
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)


# ---------------------------------------------------------------------------
# Seeds


def test_seed_determines_the_model_and_the_bank():
    settings = {"epochs": 20, "num_epistemic_samples": 16}
    X = torch.rand(2, 3, 2, generator=torch.Generator().manual_seed(7), dtype=DTYPE)
    first = _functional_model(seed=3, **settings)
    torch.manual_seed(123)  # the global RNG plays no part
    again = _functional_model(seed=3, **settings)
    other = _functional_model(seed=4, **settings)
    assert torch.equal(first.epistemic_indices, again.epistemic_indices)
    assert not torch.allclose(first.epistemic_indices, other.epistemic_indices)
    for a, b in zip(first.network.parameters(), again.network.parameters(), strict=True):
        assert torch.equal(a, b)
    with torch.no_grad():
        values = first.posterior(X).values
        torch.testing.assert_close(again.posterior(X).values, values, rtol=0, atol=0)
        other_values = other.posterior(X).values
    for k in range(16):
        assert not torch.allclose(values[:, k], other_values[:, k])


# ---------------------------------------------------------------------------
# Losses and the noise model


def test_relative_l2_loss():
    r"""Every function of the equal-norm data has mean squared value 1/2, so the first
    relative loss (same seed: same initial network and same first indices) is exactly
    twice the first MSE; both train, to different models."""
    settings = {"epochs": 50, "equal_norms": True}
    mse = _functional_model(loss="mse", **settings)
    relative = _functional_model(loss="relative_l2", **settings)
    mse_history = mse.training_result.loss_history
    relative_history = relative.training_result.loss_history
    assert relative_history[0] == pytest.approx(2 * mse_history[0], rel=1e-10)
    assert relative_history[-1] < relative_history[0] / 10
    assert mse_history[-1] < mse_history[0] / 10
    X = torch.rand(4, 1, 2, generator=torch.Generator().manual_seed(8), dtype=DTYPE)
    with torch.no_grad():
        assert not torch.allclose(mse.posterior(X).mean, relative.posterior(X).mean)


def test_estimated_noise_is_the_aleatoric_part(scalar_model):
    train_X, train_Y = _one_dimensional_data()
    X = _test_points()
    with torch.no_grad():
        fitted = scalar_model.posterior(train_X.unsqueeze(-2)).mean.squeeze(-2)
        latent = scalar_model.posterior(X)
        noisy = scalar_model.posterior(X, observation_noise=True)
    estimate = (fitted - train_Y).pow(2).mean(0).clamp_min(1e-6)
    torch.testing.assert_close(scalar_model.noise_variance, estimate)
    assert isinstance(noisy, MixtureOfGaussiansPosterior)
    torch.testing.assert_close(noisy.aleatoric_variance, estimate.expand(5, 1, 1))
    torch.testing.assert_close(noisy.epistemic_variance, latent.variance)
    torch.testing.assert_close(noisy.mean, latent.mean)


def test_given_noise_variance_is_in_transformed_units():
    train_X, train_Y = _one_dimensional_data()
    train_Y = 100.0 + 20.0 * train_Y
    model = NEON(
        train_X,
        train_Y,
        **{**FAST, "epochs": 20, "outcome_transform": Standardize(1)},
        noise_variance=0.01,
    ).fit(seed=0)
    with torch.no_grad():
        noisy = model.posterior(_test_points(), observation_noise=True)
    expected = 0.01 * train_Y.var()  # Standardize uses the unbiased std
    torch.testing.assert_close(noisy.aleatoric_variance, expected.expand(5, 1, 1))


# ---------------------------------------------------------------------------
# Argument checks


@pytest.mark.parametrize(
    ("grid", "num_channels", "message"),
    [
        (torch.linspace(0, 1, NUM_POINTS, dtype=DTYPE), 2, "finite `m x d_y`"),
        (torch.zeros(1, NUM_POINTS, 1, dtype=DTYPE), 2, "finite `m x d_y`"),
        (torch.full((NUM_POINTS, 1), math.nan, dtype=DTYPE), 2, "finite `m x d_y`"),
        (torch.full((NUM_POINTS, 1), math.inf, dtype=DTYPE), 2, "finite `m x d_y`"),
        (_grid(), 3, "m \\* d_s = 12 \\* 3"),
        (_grid(), 1, "m \\* d_s = 12 \\* 1"),
        (_grid()[:5], 2, "m \\* d_s = 5 \\* 2"),
        (_grid(), 0, "num_channels must be a positive integer"),
    ],
)
def test_invalid_output_grid(grid, num_channels, message):
    train_X, train_Y = _functional_data()
    with pytest.raises(ValueError, match=message):
        NEON(train_X, train_Y, output_grid=grid, num_channels=num_channels)


def test_num_channels_needs_a_grid():
    train_X, train_Y = _functional_data()
    with pytest.raises(ValueError, match="num_channels applies"):
        NEON(train_X, train_Y, num_channels=2)


def test_latent_dim_must_split_into_the_decoder_depth_at_fit():
    train_X, train_Y = _functional_data()
    model = NEON(
        train_X,
        train_Y,
        output_grid=_grid(),
        num_channels=NUM_CHANNELS,
        latent_dim=10,
        decoder_depth=3,
        epochs=1,
    )
    with pytest.raises(ValueError, match="multiple of the decoder depth"):
        model.fit(seed=0)
    # Without a grid there is no decoder and the depth plays no part.
    NEON(train_X, train_Y, latent_dim=10, decoder_depth=3, epochs=1).fit(seed=0)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"loss": "l1"}, "Unknown loss 'l1'"),
        ({"encoder_widths": ()}, "encoder_widths must be a non-empty sequence"),
        ({"encoder_widths": (8, 0)}, "encoder_widths must be a non-empty sequence"),
        ({"epinet_widths": (2.5,)}, "epinet_widths must be a non-empty sequence"),
        ({"prior_widths": (-1,)}, "prior_widths must be a non-empty sequence"),
        ({"latent_dim": 0}, "latent_dim must be a positive integer"),
        ({"decoder_width": 0}, "decoder_width must be a positive integer"),
        ({"index_dim": 0}, "index_dim must be a positive integer"),
        ({"num_epistemic_samples": 1}, "num_epistemic_samples must be an integer of at least 2"),
        ({"num_training_indices": 0}, "num_training_indices must be a positive"),
        ({"evaluation_chunk_rows": 0}, "evaluation_chunk_rows must be a positive"),
        ({"decoder_depth": 0}, "decoder_depth must be a positive integer"),
        ({"fourier_scale": 0.0}, "fourier_scale must be positive"),
        ({"fourier_scale": -1.0}, "fourier_scale must be positive"),
        ({"activation": "foo"}, "Unknown activation 'foo'"),
        ({"output_activation": "foo"}, "Unknown output_activation 'foo'"),
        ({"prior_scale": -0.1}, "prior_scale must be non-negative"),
        ({"noise_variance": 0.0}, "noise_variance must be positive"),
        ({"epochs": 0}, "epochs"),
    ],
)
def test_invalid_hyperparameters(values, message):
    with pytest.raises(ValueError, match=message):
        NEONHyperparameters(**values)
    train_X, train_Y = _one_dimensional_data()
    with pytest.raises(ValueError, match=message):
        NEON(train_X, train_Y, **values)


def test_presets():
    pollutants = NEONHyperparameters.preset("pollutants")
    assert pollutants.latent_dim == 64 and pollutants.decoder_depth == 2
    assert pollutants.fourier_scale is None and pollutants.prior_scale == 0.75
    brusselator = NEONHyperparameters.preset("brusselator", epochs=5)
    assert brusselator.latent_dim == 96 and brusselator.decoder_depth == 3
    assert brusselator.fourier_scale == 5.0 and brusselator.prior_scale == 1.0
    assert brusselator.epochs == 5
    assert brusselator.learning_rate == 1e-3 and brusselator.lr_decay_rate == 0.8
    with pytest.raises(ValueError, match="Unknown NEON preset 'interferometer'"):
        NEONHyperparameters.preset("interferometer")
    with pytest.raises(ValueError, match="fourier_scale must be positive"):
        NEONHyperparameters.preset("brusselator", fourier_scale=0.0)


def test_preset_argument_starts_from_the_authors_setting():
    train_X = torch.rand(6, 4, dtype=DTYPE)
    grid = torch.rand(12, 2, dtype=DTYPE)
    model = NEON(
        train_X, torch.rand(6, 12, dtype=DTYPE), output_grid=grid, preset="pollutants", epochs=7
    )
    expected = NEONHyperparameters.preset("pollutants", epochs=7)
    assert model.hyperparameters == expected
    with pytest.raises(ValueError, match="Unknown NEON preset"):
        NEON(train_X, torch.rand(6, 12, dtype=DTYPE), output_grid=grid, preset="nope")


def test_the_index_bank_can_be_redrawn_at_any_size_from_a_seed():
    X = torch.rand(12, 2, dtype=torch.float64)
    model = NEON(X, X.sin().sum(-1, keepdim=True), epochs=5).fit(seed=0)
    model.resample_function_bank(300, seed=4)
    assert model.posterior(X[:3]).values.shape[-3] == 300
    first = model.epistemic_indices.clone()
    assert torch.equal(model.resample_function_bank(300, seed=4).epistemic_indices, first)
    # A bank of one function has zero variance.
    with pytest.raises(ValueError, match="size must be an integer of at least 2"):
        model.resample_function_bank(1, seed=0)
    with pytest.raises(RuntimeError, match="NEON is not fitted"):
        NEON(X, X.sum(-1, keepdim=True)).resample_function_bank(5, seed=0)


def _unfitted_like(fixture):
    r"""A freshly constructed model of the configuration of the fixture ``fixture``."""
    if fixture == "scalar_model":
        return NEON(*_one_dimensional_data(), **FAST)
    train_X, train_Y = _functional_data()
    return NEON(train_X, train_Y, output_grid=_grid(), num_channels=NUM_CHANNELS, **FUNCTIONAL)


@pytest.mark.parametrize("fixture", ["scalar_model", "functional_model"])
def test_a_function_bank_subset_serves_the_first_indices_of_the_bank(fixture, request):
    model = request.getfixturevalue(fixture)
    bank = model.epistemic_indices.clone()
    X = torch.rand(3, 2, model.train_X.shape[-1], generator=torch.Generator().manual_seed(2))
    X = X.to(DTYPE)
    values = model.posterior(X).values
    subset = model.function_bank_subset(5)
    assert subset.function_bank_size == 5
    assert model.function_bank_size == bank.shape[0]
    assert torch.equal(subset.epistemic_indices, bank[:5])
    assert torch.equal(model.epistemic_indices, bank)
    assert torch.equal(subset.noise_variance, model.noise_variance)
    torch.testing.assert_close(
        subset.posterior(X).values, values[..., :5, :, :], **tolerances(DTYPE)
    )
    # A checkpoint of the subset loads into a freshly constructed model.
    fresh = _unfitted_like(fixture)
    fresh.load_state_dict(subset.state_dict())
    assert fresh.function_bank_size == 5
    torch.testing.assert_close(fresh.posterior(X).values, subset.posterior(X).values)


def test_a_function_bank_subset_needs_a_fitted_model_and_a_size_within_the_bank(
    functional_model,
):
    with pytest.raises(ValueError, match="size must be an integer of at least 2"):
        functional_model.function_bank_subset(1)
    with pytest.raises(ValueError, match="size must be at most the bank's 32 functions; got 33"):
        functional_model.function_bank_subset(33)
    X = torch.rand(12, 2, dtype=DTYPE)
    with pytest.raises(RuntimeError, match="NEON is not fitted"):
        NEON(X, X.sum(-1, keepdim=True)).function_bank_subset(2)
