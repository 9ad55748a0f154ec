"""NOMU's desiderata D1-D5 (Heiss et al., 2022, Section 3.1) on noiseless 1-D and 2-D toy
data, with the DEFAULT hyperparameters in BoTorch's coordinates (Normalize + Standardize).

``sigma_hat`` is read from the posterior with calibration constant 1. Every threshold is
a ratio well above 1 that a constant ``sigma_hat`` (ratio 1) cannot meet and that random
values meet only by chance, for several checks at once.
"""

import pytest
import torch
from botorch.exceptions.warnings import InputDataWarning
from botorch.models.transforms import Normalize, Standardize
from torch import Tensor

from botorch_nn_uq.models import NOMU

DTYPE = torch.float64


def _fit(train_X: Tensor, train_Y: Tensor, bounds: Tensor, seed: int = 0) -> NOMU:
    return NOMU(
        train_X,
        train_Y,
        bounds=bounds,
        input_transform=Normalize(train_X.shape[-1], bounds=bounds),
        outcome_transform=Standardize(1),
    ).fit(seed=seed)


def _sigma(model: NOMU, X) -> Tensor:
    r"""``sigma_hat`` (original outcome units) at the rows of ``X`` (``n x d``)."""
    X = torch.as_tensor(X, dtype=DTYPE).reshape(-1, model.train_X.shape[-1])
    with torch.no_grad():
        return model.posterior(X.unsqueeze(-2)).variance.sqrt().reshape(-1)


def _toy_function(X: Tensor) -> Tensor:
    return torch.sin(6 * X) + 0.5 * X


BOUNDS_1D = torch.tensor([[-1.0], [1.0]], dtype=DTYPE)
#: Data on [-0.6, 0.5]: two gaps of width 0.35 (midpoints -0.275, 0.175) and room to
#: extrapolate on both sides.
TRAIN_X_1D = torch.tensor([-0.6, -0.45, -0.1, 0.0, 0.35, 0.5], dtype=DTYPE).unsqueeze(-1)
GAP_MIDPOINTS = [-0.275, 0.175]
GRID_1D = torch.linspace(-1, 1, 401, dtype=DTYPE).unsqueeze(-1)


@pytest.fixture(scope="module")
def model_1d() -> NOMU:
    return _fit(TRAIN_X_1D, _toy_function(TRAIN_X_1D), BOUNDS_1D)


def test_d1_non_negativity(model_1d: NOMU) -> None:
    wide = torch.linspace(-3, 3, 601, dtype=DTYPE).unsqueeze(-1)  # also far outside the box
    with pytest.warns(InputDataWarning, match="test inputs lie outside the bounds"):
        sigma = _sigma(model_1d, wide)
        mean = model_1d.posterior(wide.unsqueeze(-2)).mean.reshape(-1)
    assert sigma.isfinite().all() and (sigma >= 0).all()
    lower, upper = mean + torch.stack([-sigma, sigma])
    assert (lower <= upper).all()


def test_d2_in_sample_uncertainty_is_near_l_min(model_1d: NOMU) -> None:
    at_data = _sigma(model_1d, TRAIN_X_1D)
    distance = (GRID_1D - TRAIN_X_1D.T).abs().min(dim=-1).values
    far = _sigma(model_1d, GRID_1D[distance >= 0.15])
    assert at_data.mean() < 0.05 * far.mean(), (at_data, far.mean())


def test_d3_out_of_sample_uncertainty_grows_in_gaps_and_when_extrapolating(
    model_1d: NOMU,
) -> None:
    at_data = _sigma(model_1d, TRAIN_X_1D).mean()
    in_gaps = _sigma(model_1d, GAP_MIDPOINTS)
    assert (in_gaps > 2 * at_data).all(), (in_gaps, at_data)
    # Points outside the data at the same distance (0.175) as the gap midpoints ...
    extrapolation = _sigma(model_1d, [-0.6 - 0.175, 0.5 + 0.175])
    assert extrapolation.mean() > 2 * in_gaps.mean(), (extrapolation, in_gaps)
    # ... and farther out (distance 0.4) still more uncertain.
    farther = _sigma(model_1d, [-0.6 - 0.4, 0.5 + 0.4])
    assert (farther > extrapolation).all(), (farther, extrapolation)


GRID_2D = torch.linspace(0.125, 0.875, 4, dtype=DTYPE)


@pytest.fixture(scope="module")
def model_2d() -> NOMU:
    r"""16 points on a 4 x 4 grid of a function of x1 only that alternates between
    neighbouring columns (Appendix D.4.1's setting)."""
    train_X = torch.cartesian_prod(GRID_2D, GRID_2D)
    train_Y = torch.sin(4 * torch.pi * train_X[:, :1])
    return _fit(train_X, train_Y, torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=DTYPE))


def test_d1_in_two_dimensions(model_2d: NOMU) -> None:
    unit = torch.rand(2000, 2, generator=torch.Generator().manual_seed(0), dtype=DTYPE)
    sigma = _sigma(model_2d, unit)
    assert sigma.isfinite().all() and (sigma >= 0).all()


def test_d4_metric_learning(model_2d: NOMU) -> None:
    r"""Midway between grid neighbours, moving along x1 (which the function depends on)
    is more uncertain than moving along the irrelevant x2, although the geometry of the
    data is the same in both directions (a stationary GP gives equal values)."""
    midpoints = (GRID_2D[:-1] + GRID_2D[1:]) / 2
    along_relevant = _sigma(model_2d, torch.cartesian_prod(midpoints, GRID_2D)).mean()
    along_irrelevant = _sigma(model_2d, torch.cartesian_prod(GRID_2D, midpoints)).mean()
    assert along_relevant > 1.2 * along_irrelevant, (along_relevant, along_irrelevant)


def test_d5_uncertainty_vanishes_as_data_fill_the_domain() -> None:
    # Nested space-filling designs: each adds points to the previous one.
    sobol = torch.quasirandom.SobolEngine(1, scramble=True, seed=0)
    all_X = 2 * sobol.draw(64, dtype=DTYPE) - 1
    mean_sigma = []
    for n in (4, 16, 64):
        model = _fit(all_X[:n], _toy_function(all_X[:n]), BOUNDS_1D)
        mean_sigma.append(_sigma(model, GRID_1D).mean().item())
    assert all(b < 0.5 * a for a, b in zip(mean_sigma[:-1], mean_sigma[1:], strict=True)), (
        mean_sigma
    )
    assert mean_sigma[-1] < 0.1 * mean_sigma[0], mean_sigma
