"""A local Ray cluster for the tests that train candidates on Ray workers."""

from collections.abc import Iterator

import pytest

from botorch_nn_uq.ensembles.pool import RayExecutor


def local_ray_executor() -> Iterator[RayExecutor]:
    r"""The body of a module-scoped ``ray_executor`` fixture: a :class:`RayExecutor` on a
    local two-CPU cluster, shut down when the module's tests are done; the tests are
    skipped where Ray is not installed.

    Yields:
        The executor.
    """
    ray = pytest.importorskip(
        "ray", reason="RayExecutor needs Ray (pip install botorch-nn-uq[ray])"
    )
    executor = RayExecutor(
        init_kwargs={"num_cpus": 2, "include_dashboard": False, "log_to_driver": False}
    )
    yield executor
    ray.shutdown()
