import pytest
import torch

from botorch_nn_uq.models import MCDropout, MCDropoutHyperparameters
from botorch_nn_uq.posteriors import FunctionEnsemblePosterior, MixtureOfGaussiansPosterior


def _one_dimensional_data(
    n: int = 12, noise: float = 0.0, seed: int = 0, dtype: torch.dtype = torch.float64
):
    generator = torch.Generator().manual_seed(seed)
    train_X = 0.4 * torch.rand(n, 1, generator=generator, dtype=torch.float64)
    train_Y = torch.sin(8 * train_X) + noise * torch.randn(n, 1, generator=generator).double()
    return train_X.to(dtype), train_Y.to(dtype)


# The tests whose fits are short run in both dtypes; the longer fits (hundreds of epochs)
# stay in float64.


def test_posterior_is_the_fixed_bank_of_thinned_networks(dtype: torch.dtype) -> None:
    train_X, train_Y = _one_dimensional_data(dtype=dtype)
    model = MCDropout(train_X, train_Y, num_masks=10, epochs=100).fit(seed=0)
    X = torch.linspace(0, 1, 7, dtype=dtype).view(7, 1, 1)
    posterior = model.posterior(X)
    assert isinstance(posterior, FunctionEnsemblePosterior)
    assert posterior.values.shape == (7, 10, 1, 1) and posterior.dtype == dtype
    torch.testing.assert_close(model.posterior(X).values, posterior.values, rtol=0, atol=0)
    masks = model.masks
    for k in range(10):
        manual = model.network(X, masks=[mask[k : k + 1] for mask in masks])
        expected = model.outcome_transform.untransform(manual[:, 0])[0]
        torch.testing.assert_close(posterior.values[:, k], expected)


def test_uncertainty_grows_away_from_the_data() -> None:
    train_X, train_Y = _one_dimensional_data(n=16)
    model = MCDropout(train_X, train_Y, epochs=400, dropout=0.2).fit(seed=0)
    at_data = model.posterior(train_X.unsqueeze(-2)).variance.mean()
    far_away = model.posterior(torch.tensor([[[0.9]], [[1.0]]], dtype=torch.float64)).variance
    assert (far_away > 3 * at_data).all()


def test_noise_variance_is_estimated_or_taken_from_the_hyperparameter() -> None:
    train_X, train_Y = _one_dimensional_data(n=200, noise=0.1)
    model = MCDropout(train_X, train_Y, epochs=400).fit(seed=0)
    # Estimated in the standardised outcome space.
    noise_variance = model.noise_variance.item() * model.outcome_transform.stdvs.item() ** 2
    assert 0.1**2 / 3 < noise_variance < 3 * 0.1**2
    noisy = model.posterior(train_X[:5].unsqueeze(-2), observation_noise=True)
    assert isinstance(noisy, MixtureOfGaussiansPosterior)
    torch.testing.assert_close(
        noisy.aleatoric_variance, torch.full_like(noisy.aleatoric_variance, noise_variance)
    )
    fixed = MCDropout(train_X, train_Y, epochs=50, noise_variance=0.5).fit(seed=0)
    assert fixed.noise_variance.item() == 0.5


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("dropout", 0.0, "dropout"),
        ("num_masks", 1, "num_masks"),
        ("hidden_widths", (), "hidden_widths"),
        ("hidden_widths", (8, -1), "hidden_widths"),
        ("activation", "nope", "activation"),
        ("noise_variance", -1.0, "noise_variance"),
        ("learning_rate", 0.0, "learning_rate"),
        ("batch_size", 0, "batch_size"),
    ],
)
def test_invalid_hyperparameters(field: str, value, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        MCDropoutHyperparameters(**{field: value})


def test_mini_batch_training_runs(dtype: torch.dtype) -> None:
    train_X, train_Y = _one_dimensional_data(n=20, dtype=dtype)
    model = MCDropout(train_X, train_Y, epochs=5, batch_size=8).fit(seed=0)
    assert model.training_result.epochs_run == 5


def test_a_bank_of_equal_masks_warns_of_zero_variance() -> None:
    train_X, train_Y = _one_dimensional_data()
    with pytest.warns(UserWarning, match="zero variance everywhere"):
        model = MCDropout(train_X, train_Y, hidden_widths=(2,), dropout=1e-9, epochs=5).fit(seed=0)
    assert (model.posterior(train_X.unsqueeze(-2)).variance == 0).all()


def test_a_huge_function_bank_is_refused_before_any_allocation() -> None:
    train_X, train_Y = _one_dimensional_data()
    model = MCDropout(train_X, train_Y, epochs=5).fit(seed=0)
    with pytest.raises(ValueError, match="GiB"):
        model.resample_function_bank(10**9, seed=0)
    assert model.function_bank_size == 64
