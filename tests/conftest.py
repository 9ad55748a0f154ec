"""Test-suite settings shared by every test module."""

import os

from hypothesis import HealthCheck, settings

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
