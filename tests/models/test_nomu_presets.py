"""Tests of NOMU's presets: the paper's values and their rescaling to BoTorch's
coordinates."""

import dataclasses
import math

import pytest
import torch
from botorch.models.transforms import Normalize, Standardize

from botorch_nn_uq.models import NOMU, NOMUHyperparameters
from botorch_nn_uq.models.nomu_presets import (
    PAPER_SETTINGS,
    PAPER_TO_STANDARDIZED_OUTPUT_SCALE,
    build_preset,
    rescale_outputs,
)

DTYPE = torch.float64


def test_presets_hold_the_paper_values_and_rescale_consistently() -> None:
    bo_paper = NOMUHyperparameters.preset("bo", coordinates="paper")
    assert (bo_paper.pi_sqr, bo_paper.pi_exp, bo_paper.c_exp) == (1.0, 0.01, 30.0)
    assert (bo_paper.min_uncertainty, bo_paper.max_uncertainty) == (1e-6, 2.0)
    assert bo_paper.num_artificial_points == 500 and bo_paper.mean_widths == (1024,) * 3
    toy = NOMUHyperparameters.preset("toy-regression-2d", coordinates="paper")
    assert (toy.pi_sqr, toy.num_artificial_points, toy.box_enlargement) == (0.1, 256, 0.05)
    uci = NOMUHyperparameters.preset("uci", coordinates="paper")
    assert (uci.l2_regularization, uci.uncertainty_l2_regularization) == (1e-9, 1e-4)
    assert uci.batch_size == 100 and uci.mean_widths == (50,)
    bo = NOMUHyperparameters.preset("bo")
    assert bo == bo_paper.rescale_outputs(2.0)
    assert (bo.pi_sqr, bo.pi_exp, bo.c_exp, bo.max_uncertainty) == (1.0, 0.04, 15.0, 4.0)
    assert bo.l2_regularization == pytest.approx(4e-8) and bo.min_uncertainty == 2e-6
    # The fast default keeps the BO loss settings; only network size and training differ.
    speed_fields = {
        "mean_widths",
        "uncertainty_widths",
        "init_scale",
        "epochs",
        "learning_rate",
        "num_artificial_points",
        "stable_loss",
    }
    default = NOMUHyperparameters()
    for field in dataclasses.fields(NOMUHyperparameters):
        if field.name not in speed_fields:
            assert getattr(default, field.name) == getattr(bo, field.name), field.name
    assert NOMUHyperparameters.preset("fast-bo") == default
    assert NOMUHyperparameters.preset("bo", epochs=3).epochs == 3
    assert set(PAPER_SETTINGS) == {"toy-regression-1d", "toy-regression-2d", "bo", "uci"}
    assert build_preset(NOMUHyperparameters, "uci", coordinates="paper") == uci
    assert rescale_outputs(bo_paper, PAPER_TO_STANDARDIZED_OUTPUT_SCALE) == bo
    with pytest.raises(ValueError, match="Unknown NOMU preset"):
        NOMUHyperparameters.preset("nope")
    with pytest.raises(ValueError, match="coordinates"):
        NOMUHyperparameters.preset("bo", coordinates="unit")


def _paper_toy_data():
    r"""Eight points of a function on [-1, 1] with outputs in [-1, 1] (standard
    deviation ~0.5, so ``Standardize`` doubles them as assumed by the presets)."""
    train_X = torch.tensor([-0.9, -0.6, -0.5, -0.1, 0.2, 0.3, 0.7, 0.8], dtype=DTYPE)
    train_Y = 0.65 * torch.sin(3.0 * train_X)
    return train_X.unsqueeze(-1), train_Y.unsqueeze(-1)


# The reference trains in the paper's coordinates on purpose: inputs in [-1, 1] and raw
# outputs, which BoTorch's scaling check reports.
@pytest.mark.filterwarnings("ignore::botorch.exceptions.warnings.InputDataWarning")
def test_rescaling_to_botorch_coordinates_preserves_the_uncertainty() -> None:
    r"""The paper's values hold for inputs and outputs in [-1, 1]. In BoTorch's
    coordinates (``Normalize`` to [0, 1], ``Standardize``) the rescaled preset gives
    sigma_hat of the same size in original units, and the paper's values used unchanged
    do not. With the outputs alone rescaled the shape is preserved too; mapping inputs
    to [0, 1] needs no change of values (term (c) is a mean over the box) but changes
    the network's parametrisation, so there only the size is compared."""
    train_X, train_Y = _paper_toy_data()
    bounds = torch.tensor([[-1.0], [1.0]], dtype=DTYPE)
    fast = {"mean_widths": (32, 32), "uncertainty_widths": (32, 32), "epochs": 400}
    fast.update(learning_rate=1e-2, init_scale=None, num_artificial_points=128)
    paper = NOMUHyperparameters.preset("toy-regression-1d", coordinates="paper", **fast)
    rescaled = NOMUHyperparameters.preset("toy-regression-1d", **fast)
    grid = torch.linspace(-1, 1, 101, dtype=DTYPE).view(-1, 1, 1)

    def sigma(settings, seed, normalize=True):
        values = dataclasses.asdict(settings)
        transforms = {"outcome_transform": Standardize(1)}
        if normalize:
            transforms["input_transform"] = Normalize(1, bounds=bounds)
        model = NOMU(train_X, train_Y, bounds=bounds, **transforms, **values).fit(seed=seed)
        return model.posterior(grid).variance.sqrt().squeeze().detach()

    def log_ratio(sigma_a, sigma_b):
        return abs(math.log(sigma_a.mean().item() / sigma_b.mean().item()))

    for seed in range(2):
        values = dataclasses.asdict(paper)
        reference = NOMU(train_X, train_Y, bounds=bounds, outcome_transform=None, **values)
        reference = reference.fit(seed=seed)
        reference = reference.posterior(grid).variance.sqrt().squeeze().detach()
        assert log_ratio(sigma(rescaled, seed), reference) < math.log(1.4)
        assert log_ratio(sigma(paper, seed), reference) > math.log(1.6)
        outputs_only = sigma(rescaled, seed, normalize=False)
        assert torch.corrcoef(torch.stack([outputs_only, reference]))[0, 1] > 0.85


def test_rescale_outputs_scales_every_output_unit_value() -> None:
    settings = NOMUHyperparameters(uncertainty_l2_regularization=1e-3)
    rescaled = rescale_outputs(settings, 0.5)
    assert (rescaled.pi_sqr, rescaled.pi_exp, rescaled.c_exp) == (1.0, 0.01, 30.0)
    assert rescaled.l2_regularization == pytest.approx(1e-8)
    assert rescaled.uncertainty_l2_regularization == pytest.approx(2.5e-4)
    assert (rescaled.min_uncertainty, rescaled.max_uncertainty) == (1e-6, 2.0)
    assert rescale_outputs(NOMUHyperparameters(), 3.0).uncertainty_l2_regularization is None
    for bad in (0.0, -2.0, math.nan):
        with pytest.raises(ValueError, match="scale must be positive"):
            rescale_outputs(settings, bad)
