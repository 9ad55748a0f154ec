"""Tests of the NOMU model: loss wiring, artificial inputs, gradient stopping, the
pre-trained mean network, calibration and the noisy variant."""

import math

import pytest
import torch
from botorch.models.transforms import Normalize, Standardize

from botorch_nn_uq.models import NOMU, NOMUHyperparameters
from botorch_nn_uq.nn.nomu import NOMUNetwork, build_mlp, nomu_readout
from botorch_nn_uq.posteriors import GaussianMarginalPosterior
from botorch_nn_uq.training import nomu_training
from botorch_nn_uq.training.nomu_loss import artificial_inputs, nomu_loss

DTYPE = torch.float64
# The tests compare the posterior with the network's own outputs: no outcome transform.
TINY = {
    "mean_widths": (8, 8),
    "uncertainty_widths": (4,),
    "num_artificial_points": 16,
    "outcome_transform": None,
}
pytestmark = pytest.mark.filterwarnings(
    "ignore:Data \\(outcome observations\\) is not standardized"
    ":botorch.exceptions.warnings.InputDataWarning"
)


def _data(n: int = 6, d: int = 1, seed: int = 0, noise: float = 0.0):
    generator = torch.Generator().manual_seed(seed)
    train_X = torch.rand(n, d, generator=generator, dtype=DTYPE)
    train_Y = torch.sin(5 * train_X).sum(-1, keepdim=True)
    train_Y = train_Y + noise * torch.randn(n, 1, generator=generator, dtype=DTYPE)
    return train_X, train_Y


def test_training_loss_is_the_nomu_loss_by_hand() -> None:
    train_X, train_Y = _data(n=4)
    bounds = torch.tensor([[0.0], [1.0]], dtype=DTYPE)
    settings = {**TINY, "pi_sqr": 0.3, "pi_exp": 0.2, "c_exp": 5.0, "l2_regularization": 1e-3}
    model = NOMU(train_X, train_Y, bounds=bounds, stable_loss=False, epochs=1, **settings)
    model.fit(seed=3)
    # Replay the fit's random stream: network initialisation, then the artificial inputs.
    generator = torch.Generator().manual_seed(3)
    network = model._build_network(1, 1, generator).to(DTYPE)
    artificial = artificial_inputs(bounds, settings["num_artificial_points"], generator)
    with torch.no_grad():
        at_data, at_artificial = network(train_X), network(artificial)
        fit = ((at_data.mean - train_Y) ** 2).sum()
        in_sample = 0.3 * (at_data.raw_uncertainty**2).sum()
        out_of_sample = 0.2 * torch.exp(-5.0 * at_artificial.raw_uncertainty).mean()
        penalty = 1e-3 * sum((p**2).sum() for p in network.parameters())
    expected = (fit + in_sample + out_of_sample + penalty).item()
    assert model.training_result.loss_history[0] == pytest.approx(expected, rel=1e-10)


def test_readout_of_the_posterior() -> None:
    train_X, train_Y = _data()
    model = NOMU(train_X, train_Y, epochs=30, min_uncertainty=0.01, max_uncertainty=1.5, **TINY)
    model.fit(seed=0)
    model.set_calibration_constant(3.0)
    X = torch.linspace(-1, 2, 9, dtype=DTYPE).view(9, 1, 1)
    posterior = model.posterior(X)
    assert isinstance(posterior, GaussianMarginalPosterior)
    output = model.network(X)
    sigma = 1.5 * (1 - torch.exp(-(output.raw_uncertainty.clamp_min(0) + 0.01) / 1.5))
    torch.testing.assert_close(posterior.mean, output.mean)
    torch.testing.assert_close(posterior.variance, (3.0 * sigma) ** 2)
    # Limits of the readout: l_min' at r <= 0, at most l_max.
    assert (posterior.variance.sqrt() / 3.0 >= nomu_readout(torch.tensor(-1.0), 0.01, 1.5)).all()
    assert (posterior.variance.sqrt() / 3.0 <= 1.5).all()
    linear = NOMU(train_X, train_Y, epochs=30, readout="linear", **TINY).fit(seed=0)
    raw = linear.network(X).raw_uncertainty
    expected = raw.clamp(linear.hyperparameters.min_uncertainty, 4.0) ** 2
    torch.testing.assert_close(linear.posterior(X).variance, expected)


def test_artificial_inputs_are_redrawn_every_step_inside_the_enlarged_box(monkeypatch) -> None:
    draws = []

    def recording(box, num_points, generator):
        points = artificial_inputs(box, num_points, generator)
        draws.append(points)
        return points

    monkeypatch.setattr(nomu_training, "artificial_inputs", recording)
    train_X, train_Y = _data(n=5, d=2)
    bounds = torch.tensor([[-2.0, 0.0], [2.0, 10.0]], dtype=DTYPE)
    train_X = bounds[0] + (bounds[1] - bounds[0]) * train_X
    model = NOMU(
        train_X,
        train_Y,
        bounds=bounds,
        input_transform=Normalize(2, bounds=bounds),
        box_enlargement=0.1,
        epochs=40,
        **{**TINY, "num_artificial_points": 50},
    ).fit(seed=0)
    expected_box = torch.tensor([[-0.1, -0.1], [1.1, 1.1]], dtype=DTYPE)
    torch.testing.assert_close(model.fitted_artificial_input_box, expected_box)
    assert len(draws) == 40  # one fresh draw per gradient step
    assert all(draw.shape == (50, 2) for draw in draws)
    assert all(not torch.equal(a, b) for a, b in zip(draws[:-1], draws[1:], strict=True))
    points = torch.cat(draws)
    assert ((points >= expected_box[0]) & (points <= expected_box[1])).all()
    # The enlargement is used: the draws reach outside the unit box on every side.
    assert (points.min(0).values < -0.09).all() and (points.max(0).values > 1.09).all()


def test_default_box_is_the_bounding_box_of_the_training_inputs() -> None:
    train_X, train_Y = _data(n=5, d=2)
    model = NOMU(train_X, train_Y, epochs=2, **TINY).fit(seed=0)
    expected = torch.stack([train_X.min(0).values, train_X.max(0).values])
    torch.testing.assert_close(model.fitted_artificial_input_box, expected)


@pytest.mark.parametrize("detach", [True, False])
def test_stop_gradient_keeps_uncertainty_terms_out_of_the_mean_network(detach: bool) -> None:
    torch.manual_seed(0)
    network = NOMUNetwork(
        1, 1, (8, 8), (4,), activation="tanh", detach_mean_features=detach, init_scale=None
    ).to(DTYPE)
    train_X, train_Y = _data()
    artificial = torch.rand(20, 1, dtype=DTYPE)
    raw_at_data = network(train_X).raw_uncertainty
    raw_artificial = network(artificial).raw_uncertainty
    # Terms (b) and (c) only: no data-fit term.
    nomu_loss(None, train_Y, raw_at_data, raw_artificial, 1.0, 0.5, 10.0).backward()
    mean_grads = [p.grad for p in network.mean_network.parameters()]
    if detach:
        assert all(grad is None for grad in mean_grads)
    else:
        hidden_grads = mean_grads[:-2]  # the output layer does not feed r_hat
        assert all(grad is not None and grad.abs().sum() > 0 for grad in hidden_grads)
    assert all(p.grad.abs().sum() > 0 for p in network.uncertainty_network.parameters())


def test_pretrained_mean_network_mode_trains_only_the_uncertainty_network() -> None:
    train_X, train_Y = _data(n=8)
    torch.manual_seed(0)
    pretrained = build_mlp(1, (8, 8), 1, "relu").to(DTYPE)
    before = {k: v.clone() for k, v in pretrained.state_dict().items()}
    model = NOMU(train_X, train_Y, mean_network=pretrained, epochs=30, **TINY).fit(seed=0)
    for key, value in model.network.mean_network.state_dict().items():
        torch.testing.assert_close(value, before[key], rtol=0, atol=0)
    torch.testing.assert_close(pretrained.state_dict()["0.weight"], before["0.weight"])
    X = torch.rand(5, 1, 1, dtype=DTYPE)
    torch.testing.assert_close(model.posterior(X).mean, pretrained(X))
    fresh = NOMU(train_X, train_Y, epochs=30, **TINY)
    initial = fresh._build_network(1, 1, torch.Generator().manual_seed(0))
    initial = initial.to(DTYPE).uncertainty_network.state_dict()
    fresh.fit(seed=0)
    trained = fresh.network.uncertainty_network.state_dict()
    assert any(not torch.equal(trained[k], initial[k]) for k in initial)
    assert not any(p.requires_grad for p in model.network.mean_network.parameters())
    # Term (a) is dropped: the loss at the start is just (b) + (c) + L2, far below the
    # data-fit error of the untrained mean.
    assert model.training_result.loss_history[0] < ((pretrained(train_X) - train_Y) ** 2).sum()
    with pytest.raises(TypeError, match="Sequential"):
        NOMU(train_X, train_Y, mean_network=torch.nn.Linear(1, 1))


def test_preset_argument_starts_from_the_preset() -> None:
    train_X, train_Y = _data()
    model = NOMU(train_X, train_Y, preset="uci", epochs=5)
    assert model.hyperparameters.mean_widths == (50,) and model.hyperparameters.epochs == 5


def test_calibration_constant_scales_the_standard_deviation() -> None:
    train_X, train_Y = _data()
    model = NOMU(train_X, train_Y, **{**TINY, "outcome_transform": Standardize(1)}, epochs=30)
    model.fit(seed=0)
    X = torch.rand(6, 1, 1, dtype=DTYPE)
    base = model.posterior(X)
    model.set_calibration_constant(2.5)
    scaled = model.posterior(X)
    torch.testing.assert_close(scaled.mean, base.mean)
    torch.testing.assert_close(scaled.variance, 6.25 * base.variance)
    for bad in (0.0, -1.0, math.inf, math.nan, torch.ones(3)):
        with pytest.raises(ValueError, match="calibration_constant"):
            model.set_calibration_constant(bad)
    constant = NOMU(train_X, train_Y, calibration_constant=4.0, **TINY).calibration_constant
    torch.testing.assert_close(constant, torch.tensor([4.0], dtype=DTYPE))


def test_calibrate_mean_width_and_nll() -> None:
    train_X, train_Y = _data(n=8)
    bounds = torch.tensor([[0.0], [1.0]], dtype=DTYPE)
    model = NOMU(train_X, train_Y, bounds=bounds, **{**TINY, "outcome_transform": Standardize(1)})
    model.fit(seed=0, epochs=40)
    constant = model.calibrate_mean_width(target_width=0.3)
    points = bounds[0] + (bounds[1] - bounds[0]) * torch.rand(
        20_000, 1, generator=torch.Generator().manual_seed(0), dtype=DTYPE
    )
    widths = 2 * model.posterior(points.unsqueeze(-2)).variance.sqrt()
    assert widths.mean().item() == pytest.approx(0.3, rel=1e-9)
    assert torch.equal(constant, model.calibration_constant)
    X_val, Y_val = _data(n=10, seed=5)
    model.calibrate_nll(X_val, Y_val)
    posterior = model.posterior(X_val.unsqueeze(-2))
    squared = (posterior.mean.squeeze(-2) - Y_val) ** 2
    # At the NLL optimum the standardised squared residuals average to one.
    assert (squared / posterior.variance.squeeze(-2)).mean().item() == pytest.approx(1.0)


def test_noisy_variant_learns_the_noise_and_adds_it_for_observation_noise() -> None:
    train_X, train_Y = _data(n=40, noise=0.2, seed=1)
    model = NOMU(
        train_X,
        train_Y,
        learn_noise=True,
        epochs=300,
        learning_rate=1e-2,
        init_scale=None,
        **{**TINY, "mean_widths": (32, 32), "outcome_transform": Standardize(1)},
    ).fit(seed=0)
    X = torch.linspace(0, 1, 11, dtype=DTYPE).view(11, 1, 1)
    latent = model.posterior(X)
    noisy = model.posterior(X, observation_noise=True)
    torch.testing.assert_close(noisy.mean, latent.mean)
    noise_variance = noisy.variance - latent.variance
    output_scale = model.outcome_transform.stdvs.squeeze() ** 2
    expected = model.network(X).noise_std ** 2 * output_scale
    torch.testing.assert_close(noise_variance, expected)
    assert 0.2 / 2 < noise_variance.sqrt().mean().item() < 0.2 * 2
    # The latent uncertainty is calibratable on noisy data with the noise in the likelihood.
    factor = model.calibrate_nll(*_data(n=20, noise=0.2, seed=9), observation_noise=True)
    assert factor.isfinite().all() and (factor > 0).all()
    noiseless = NOMU(train_X, train_Y, epochs=5, **TINY).fit(seed=0)
    torch.testing.assert_close(
        noiseless.posterior(X, observation_noise=True).variance, noiseless.posterior(X).variance
    )


def test_connected_layers_and_no_stop_gradient_are_options() -> None:
    train_X, train_Y = _data()
    model = NOMU(
        train_X,
        train_Y,
        connected_mean_layers=(0, 1),
        detach_mean_features=False,
        uncertainty_l2_regularization=1e-3,
        batch_size=4,
        epochs=5,
        **TINY,
    ).fit(seed=0)
    assert model.network.raw_uncertainty_layer.in_features == 8 + 8 + 4
    assert not model.network.detach_mean_features
    assert model.training_result.epochs_run == 5


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("mean_widths", (), "mean_widths"),
        ("uncertainty_widths", (4, 0), "uncertainty_widths"),
        ("connected_mean_layers", (), "connected_mean_layers"),
        ("activation", "nope", "activation"),
        ("readout", "cubic", "readout"),
        ("pi_sqr", -1.0, "pi_sqr"),
        ("pi_exp", float("nan"), "pi_exp"),
        ("c_exp", 0.0, "c_exp"),
        ("l2_regularization", -1e-8, "l2_regularization"),
        ("uncertainty_l2_regularization", -1.0, "uncertainty_l2_regularization"),
        ("min_uncertainty", -0.1, "min_uncertainty"),
        ("max_uncertainty", 0.0, "max_uncertainty"),
        ("num_artificial_points", 0, "num_artificial_points"),
        ("box_enlargement", -0.05, "box_enlargement"),
        ("init_scale", 0.0, "init_scale"),
        ("min_noise_std", 0.0, "min_noise_std"),
        ("learning_rate", 0.0, "learning_rate"),
        ("batch_size", 0, "batch_size"),
    ],
)
def test_invalid_hyperparameters(field: str, value, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        NOMUHyperparameters(**{field: value})


def test_invalid_bounds_and_transforms() -> None:
    train_X, train_Y = _data(d=2)
    with pytest.raises(ValueError, match="bounds must be a `2 x d`"):
        NOMU(train_X, train_Y, bounds=torch.zeros(2, 3, dtype=DTYPE))
    with pytest.raises(ValueError, match="lower < upper"):
        NOMU(train_X, train_Y, bounds=torch.tensor([[0.0, 1.0], [1.0, 1.0]], dtype=DTYPE))
    with pytest.raises(ValueError, match="connected_mean_layers"):
        NOMU(train_X, train_Y, connected_mean_layers=(5,), **TINY).fit(seed=0)
