"""subset_output beyond the conformance kit: refits, NOMU's calibration, ModelList."""

import torch
from botorch.models import ModelList, SingleTaskGP
from botorch.models.transforms import Normalize, Standardize

from botorch_nn_uq.models import NOMU, DeepEnsemble
from tests.testing import seeded_rand


def _data(dtype):
    X = seeded_rand(16, 2, seed=0, dtype=dtype)
    return X, torch.stack([X.sin().sum(-1), 10.0 * X.prod(-1)], dim=-1)


def _transforms(dtype):
    bounds = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=dtype)
    return {"input_transform": Normalize(2, bounds=bounds), "outcome_transform": Standardize(2)}


def _test_points(dtype):
    return seeded_rand(5, 1, 2, seed=1, dtype=dtype)


def test_a_refit_subset_model_serves_the_selected_outputs_of_the_same_fit(dtype):
    model = DeepEnsemble(*_data(dtype), **_transforms(dtype), hidden_widths=(8,), epochs=20)
    model.fit(seed=0)
    subset = model.subset_output([1])
    subset.fit(seed=3)
    model.fit(seed=3)
    X = _test_points(dtype)
    torch.testing.assert_close(
        subset.posterior(X).mean, model.posterior(X, output_indices=[1]).mean, rtol=0, atol=0
    )


def test_a_nomu_subset_keeps_and_calibrates_its_own_constants(dtype):
    X, Y = _data(dtype)
    bounds = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=dtype)
    model = NOMU(X, Y, **_transforms(dtype), bounds=bounds, mean_widths=(8,), epochs=20)
    model.fit(seed=0).set_calibration_constant(torch.tensor([2.0, 5.0]))
    subset = model.subset_output([1])
    torch.testing.assert_close(subset.calibration_constant, torch.tensor([5.0]).to(X))
    subset.set_calibration_constant(0.5)
    test_X = _test_points(dtype)
    expected = model.posterior(test_X, output_indices=[1]).variance * 0.1**2
    torch.testing.assert_close(subset.posterior(test_X).variance, expected)
    torch.testing.assert_close(model.calibration_constant, torch.tensor([2.0, 5.0]).to(X))
    # Calibrating the subset on data fits the served output's constant only.
    subset.calibrate_nll(X, Y[:, [1]])
    assert subset.calibration_constant.shape == (1,)


# float64 only: the ModelList holds a SingleTaskGP, which BoTorch wants in double precision.
def test_a_model_list_subsets_its_neural_model():
    X, Y = _data(torch.float64)
    model = DeepEnsemble(X, Y, **_transforms(torch.float64), hidden_widths=(8,), epochs=20)
    model.fit(seed=0)
    gp = SingleTaskGP(X, Y[:, :1], outcome_transform=Standardize(1)).eval()
    subset = ModelList(model, gp).subset_output([1])
    assert isinstance(subset, DeepEnsemble) and subset.num_outputs == 1
    test_X = _test_points(torch.float64)
    torch.testing.assert_close(
        subset.posterior(test_X).mean, model.posterior(test_X).mean[..., [1]]
    )
