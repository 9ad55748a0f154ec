"""Test-suite settings and fixtures shared by every test module."""

import os

import pytest
import torch
from hypothesis import HealthCheck, settings

from tests.testing import DTYPES, available_devices

# Property-based tests: a bounded, derandomised number of examples, so the suite's time
# and outcome are the same on every run; `HYPOTHESIS_PROFILE=thorough` searches wider.
settings.register_profile(
    "default",
    max_examples=40,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("thorough", max_examples=300, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture(params=DTYPES, ids=lambda dtype: str(dtype).removeprefix("torch."))
def dtype(request: pytest.FixtureRequest) -> torch.dtype:
    r"""Each floating-point precision in turn (a test taking it runs once per dtype).

    A test that only holds in one precision parametrises ``dtype`` directly, which
    overrides this fixture: ``@pytest.mark.parametrize("dtype", [torch.float64])``.
    """
    return request.param


@pytest.fixture(params=available_devices(), ids=str)
def device(request: pytest.FixtureRequest) -> torch.device:
    r"""Each available device in turn: the CPU, and CUDA when it is available."""
    return request.param


@pytest.fixture
def tkwargs(dtype: torch.dtype, device: torch.device) -> dict[str, torch.dtype | torch.device]:
    r"""``{"dtype": ..., "device": ...}`` for tensor factories and ``Module.to``, over
    every dtype and device."""
    return {"dtype": dtype, "device": device}
