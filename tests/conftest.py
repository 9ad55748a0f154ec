"""Test-suite settings and fixtures shared by every test module."""

import os
import re
from fnmatch import fnmatch
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings

from tests.testing import DTYPES, available_devices

# A pytest-xdist worker (``bash scripts/test.sh`` runs the suite on one per core) runs one
# torch thread, and so do the processes its tests start (``OMP_NUM_THREADS``): workers
# with a thread per core each would oversubscribe the cores several times over.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)

TESTS = Path(__file__).resolve().parent

#: The integration tests (marker ``integration``; ``bash scripts/test.sh --fast`` runs the
#: others, the unit tests): whole files, as glob patterns of their paths relative to
#: ``tests/``. Together they take about three quarters of the suite's time.
INTEGRATION_FILES = (
    "models/test_conformance.py",  # the conformance kit: every check on every model
    "models/test_nomu_desiderata.py",  # NOMU's paper desiderata, fits at full size
    "test_features.py",  # the feature table: each drop-in BoTorch scenario on each family
    "test_tutorials.py",  # executes every tutorial notebook
    "benchmarks/*_smoke.py",  # the benchmark runners end to end (their helpers are unit)
    "cli/*",  # the command line end to end
    "integrations/*",  # Ax
    "test_packaging.py",  # builds the wheel
    "test_docs.py",
    "test_readme.py",
    "test_gpu_check.py",  # runs the GPU scripts
)
#: Integration tests in files of unit tests, by a regular expression that their name
#: (without parameters) matches: runs across several processes, every surrogate of the
#: registry fitted (the conformance kit's kind of check), and a unit test that takes tens
#: of seconds.
INTEGRATION_NAMES = {
    "bo/test_optimizer.py": r"across_processes",
    "bo/test_state_file.py": r"killed_workers",
    "bo/test_surrogates.py": r"test_every_surrogate_builds_a_fitted_model$"
    r"|test_searches_with_step_budgets_are_unchanged_on_small_data$",
    "ensembles/test_history.py": r"killed_with_sigkill",
}
#: Tests that cannot run at the same time as each other, by a regular expression of their
#: names and fixtures: each starts a local Ray cluster (``ray.init()``, which takes all
#: the cores it is given and shares /tmp/ray with any other). Under ``--dist loadgroup``
#: (scripts/test.sh) the tests of a group run one after another on one worker.
XDIST_GROUPS = {"ray": r"^ray_executor$|_in_process_and_ray$"}

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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    r"""Puts tests that cannot run at the same time as each other into one pytest-xdist
    group (:data:`XDIST_GROUPS`), and marks the integration tests ``integration``:
    :data:`INTEGRATION_FILES`, :data:`INTEGRATION_NAMES`, every ``slow`` test and every
    test on a Ray cluster."""
    for item in items:
        if TESTS not in item.path.parents:
            continue
        path = item.path.relative_to(TESTS).as_posix()
        name = getattr(item, "originalname", item.name)
        names = INTEGRATION_NAMES.get(path)
        groups = [
            group
            for group, pattern in XDIST_GROUPS.items()
            if any(re.search(pattern, word) for word in (name, *item.fixturenames))
        ]
        for group in groups:
            item.add_marker(pytest.mark.xdist_group(group))
        if (
            any(fnmatch(path, pattern) for pattern in INTEGRATION_FILES)
            or (names is not None and re.search(names, name))
            or item.get_closest_marker("slow") is not None
            or "ray" in groups
        ):
            item.add_marker(pytest.mark.integration)
