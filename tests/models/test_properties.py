"""Property-based checks of every model: whatever data and calls it is given, it answers
with a clear ``ValueError``/``TypeError`` (or the training error that names a diverging
loss), or with a finite posterior whose variance is non-negative. Never a silent NaN.

Examples are drawn over small shapes, all floating dtypes, scales from 1e-8 to 1e8,
duplicated rows, NaN/inf injected into inputs, targets and observation noise, with and
without transforms. The number of examples is bounded by the profile in
``tests/conftest.py``. Each example is drawn on the CPU and runs on every available
device (the CPU, and CUDA where there is one).
"""

import dataclasses
import warnings

import pytest
import torch
from botorch.models.transforms import Normalize, Standardize
from hypothesis import event, given
from hypothesis import strategies as st

from botorch_nn_uq.training import NonFiniteLossError
from tests.cards import smallest
from tests.models.test_conformance import MODEL_ENTRIES
from tests.testing import available_devices

# Valid data are drawn about half the time, so that fits are exercised as often as errors.
VALID_DTYPES = (torch.float32, torch.float64)
INVALID_DTYPES = (torch.float16, torch.bfloat16)
INJECTIONS = ("nan-X", "inf-X", "nan-Y", "inf-Y", "-inf-Y")
# Few epochs and the smallest searches: the properties concern data handling, not fit quality.
ENTRIES = [
    dataclasses.replace(entry, hyperparameters=smallest(entry.hyperparameters, epochs=4))
    for entry in MODEL_ENTRIES
]


@st.composite
def problems(draw):
    r"""Training data, a test batch and an observation-noise argument."""
    generator = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    num_points = draw(st.integers(1, 12))
    dim = draw(st.integers(1, 3))
    num_outputs = draw(st.integers(1, 2))
    invalid_dtype = draw(st.sampled_from([False, False, False, True]))
    dtype = draw(st.sampled_from(INVALID_DTYPES if invalid_dtype else VALID_DTYPES))
    input_scale = 10.0 ** draw(st.integers(-4, 4))
    output_scale = 10.0 ** draw(st.integers(-8, 8))
    X = input_scale * torch.rand(num_points, dim, generator=generator, dtype=torch.float64)
    if draw(st.booleans()):
        X = torch.cat([X, X[:1]])
    Y = output_scale * torch.randn(X.shape[0], num_outputs, generator=generator, dtype=X.dtype)
    injection = draw(st.sampled_from((None,) * len(INJECTIONS) + INJECTIONS))
    if injection is not None:
        value, target = injection.rsplit("-", 1)
        (X if target == "X" else Y)[0, 0] = float(value)
    test_shape = draw(st.sampled_from([(3, 1), (2, 2), (4, 3, 1), (0, 1)]))
    test_X = input_scale * torch.rand(*test_shape, dim, generator=generator, dtype=torch.float64)
    noise = draw(st.sampled_from([False, True, "tensor", "nan-tensor", "negative-tensor"]))
    if isinstance(noise, str):
        fill = {"tensor": 0.1, "nan-tensor": float("nan"), "negative-tensor": -0.1}[noise]
        noise = torch.full((*test_shape, num_outputs), fill, dtype=torch.float64)
    return {
        "X": X.to(dtype),
        "Y": Y.to(dtype),
        "test_X": test_X.to(dtype),
        "observation_noise": noise,
        "bounds": torch.tensor([[0.0] * dim, [input_scale] * dim], dtype=torch.float64).to(dtype),
        "transforms": draw(st.booleans()),
        "invalid": injection is not None or dtype in (torch.float16, torch.bfloat16),
    }


def _build(entry, problem):
    X, Y, bounds = problem["X"], problem["Y"], problem["bounds"]
    transforms = {}
    if problem["transforms"]:
        transforms = {
            "input_transform": Normalize(X.shape[-1], bounds=bounds),
            "outcome_transform": Standardize(Y.shape[-1]),
        }
    return entry.model_class(
        X, Y, **entry.extra_kwargs(bounds), **transforms, **entry.hyperparameters
    )


def _on(problem, device):
    r"""``problem`` with its tensors moved to ``device``."""
    return {
        key: value.to(device) if isinstance(value, torch.Tensor) else value
        for key, value in problem.items()
    }


# Parametrised, not the `device` fixture: hypothesis refuses function-scoped fixtures.
@pytest.mark.parametrize("device", available_devices(), ids=str)
@pytest.mark.parametrize("entry", ENTRIES, ids=lambda entry: entry.name)
@given(problem=problems())
def test_a_clear_error_or_a_finite_posterior(entry, device, problem) -> None:
    problem = _on(problem, device)
    with warnings.catch_warnings():
        # Extreme scales warn (tests/models/test_scaling.py); here only errors count.
        warnings.simplefilter("ignore")
        try:
            model = _build(entry, problem).fit(seed=0)
        except (ValueError, TypeError, NonFiniteLossError) as error:
            event(f"fit refused: {type(error).__name__}")
            assert str(error)
            return
        assert not problem["invalid"], "invalid training data were accepted"
        assert problem["X"].shape[0] >= entry.model_class.min_training_points
        noise = problem["observation_noise"]
        if isinstance(noise, torch.Tensor):
            noise = noise.to(problem["test_X"])
        try:
            posterior = model.posterior(problem["test_X"], observation_noise=noise)
        except (ValueError, TypeError) as error:
            assert isinstance(noise, torch.Tensor) and not (noise >= 0).all(), error
            return
    assert not (isinstance(noise, torch.Tensor) and not (noise >= 0).all()), (
        "invalid observation noise was accepted"
    )
    event("fitted and predicted")
    expected = problem["test_X"].shape[:-1] + problem["Y"].shape[-1:]
    assert posterior.mean.shape == posterior.variance.shape == expected
    assert posterior.mean.device == posterior.variance.device == device
    assert posterior.mean.isfinite().all()
    assert posterior.variance.isfinite().all() and (posterior.variance >= 0).all()
