"""The dtypes, devices and tolerances the tests run over.

Tests take the ``dtype``, ``device`` and ``tkwargs`` fixtures of ``tests/conftest.py``
(built from :data:`DTYPES` and :func:`available_devices`) to run in both floating-point
precisions and on every available device, and compare results with
:func:`tolerances`, which scale with the precision.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

#: The floating-point precisions the tests run in.
DTYPES = (torch.float32, torch.float64)

#: Rounding steps (units of machine epsilon) that two computations of one quantity may
#: differ by: sums over a few hundred terms and the transcendental functions of a
#: posterior or an acquisition value stay within this.
DEFAULT_ROUNDING_STEPS = 1000.0


#: Searched ensembles (AutoDEUQ, NES, hyper-deep ensembles) fitted on the tests' few points
#: may keep a single member, which the package warns about (the warning itself is asserted
#: in tests/models/test_validation.py). A test about other behaviour of such a fit carries
#: this mark, so that the warning does not fail it.
allow_single_member_warning = pytest.mark.filterwarnings(
    "ignore:The member selection of .* kept a single member:UserWarning"
)


def available_devices() -> list[torch.device]:
    r"""The devices the tests run on: the CPU, and the first CUDA device when there is one."""
    devices = [torch.device("cpu")]
    if torch.cuda.is_available():
        devices.append(torch.device("cuda", 0))
    return devices


def tolerances(
    dtype: torch.dtype, rounding_steps: float = DEFAULT_ROUNDING_STEPS
) -> dict[str, float]:
    r"""``rtol`` and ``atol`` for ``torch.testing.assert_close`` (or ``torch.allclose``)
    when two computations of the same quantity differ only by rounding.

    Args:
        dtype: The floating-point dtype the quantities were computed in.
        rounding_steps: How many units of the dtype's machine epsilon the two computations
            may differ by, relative to the values' magnitude (``rtol``) and absolutely
            (``atol``, for values near zero).

    Returns:
        ``{"rtol": ..., "atol": ...}``: both ``rounding_steps * eps`` (about ``1.2e-4``
        in float32 and ``2.2e-13`` in float64 with the default).
    """
    tolerance = rounding_steps * torch.finfo(dtype).eps
    return {"rtol": tolerance, "atol": tolerance}


def seeded_rand(*shape: int, seed: int, **tkwargs: Any) -> Tensor:
    r"""Uniform values in ``[0, 1)`` of shape ``shape`` from a CPU generator seeded with
    ``seed``, then moved to ``tkwargs["device"]``: the same values on every device.

    Args:
        shape: The tensor's shape.
        seed: The generator's seed.
        tkwargs: ``dtype`` (default float32) and ``device`` (default the CPU).
    """
    generator = torch.Generator().manual_seed(seed)
    values = torch.rand(shape, generator=generator, dtype=tkwargs.get("dtype"))
    return values.to(**tkwargs)


def seeded_randn(*shape: int, seed: int, **tkwargs: Any) -> Tensor:
    r"""Standard normal values of shape ``shape``, as :func:`seeded_rand`."""
    generator = torch.Generator().manual_seed(seed)
    values = torch.randn(shape, generator=generator, dtype=tkwargs.get("dtype"))
    return values.to(**tkwargs)


class DeviceDrawRecorder(TorchDispatchMode):
    r"""Inside the block, records every random draw (an operation tagged
    ``nondeterministic_seeded``) that touches a tensor off the CPU (its name in
    ``draws``).

    The package draws on the CPU, from CPU generators, and moves the values: a seed then
    gives the same run on every device. A draw on the data's device breaks that, and
    fails on a GPU when it takes one of the package's CPU generators. With meta tensors
    (shapes without values) as the data, the block finds such draws without a GPU.
    """

    def __init__(self) -> None:
        super().__init__()
        self.draws: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if torch.Tag.nondeterministic_seeded in func.tags:
            tensors = (
                leaf for leaf in tree_leaves((result, args, kwargs)) if isinstance(leaf, Tensor)
            )
            if any(tensor.device.type != "cpu" for tensor in tensors):
                self.draws.append(str(func))
        return result


@contextlib.contextmanager
def saved_as_if_on_cuda() -> Iterator[None]:
    r"""Inside the block, ``torch.save`` tags every tensor's storage as a ``cuda:0`` one,
    as a save on a GPU does; loading such a file without ``map_location`` fails where
    CUDA is absent."""
    with mock.patch.object(torch.serialization, "location_tag", lambda storage: "cuda:0"):
        yield


class DeviceTrafficCounter(TorchDispatchMode):
    r"""Inside the block, counts what a computation on ``device`` would make the host wait
    for, and the device operations it queues; with meta tensors (shapes without values)
    as the device's data, it measures GPU properties on a CPU-only machine.

    Counted on tensors of ``device``: scalar reads (``.item()``, ``bool(tensor)``: a host
    synchronisation on a GPU) and data-dependent shapes (``nonzero``, boolean-mask
    indexing), device-to-host and host-to-device copies, and the device operations (every
    ATen operation that is not a view). On the meta device a read returns a placeholder
    of zeros (a copy to the host) or zero (a scalar), so that the run goes on;
    computations that branch on read values therefore follow their zero branch.

    Inside :meth:`step` the counts also go to a record of their own: ``steps`` holds each
    step's counts and the ``(operation, shapes)`` sequence it ran.

    Args:
        device: The device whose traffic is counted (default: the meta device).
    """

    READS = ("aten::_local_scalar_dense", "aten::is_nonzero", "aten::item")
    DATA_DEPENDENT = ("aten::nonzero", "aten::masked_select", "aten::unique")
    INDEXING = ("aten::index.Tensor", "aten::index_put_", "aten::index_put")

    def __init__(self, device: torch.device | str = "meta") -> None:
        super().__init__()
        self.device = torch.device(device)
        self.steps: list[dict[str, Any]] = []
        self.totals = self._empty()
        self._current: dict[str, Any] | None = None

    @staticmethod
    def _empty() -> dict[str, Any]:
        return {
            "syncs": 0,
            "device_to_host": 0,
            "host_to_device": 0,
            "operations": 0,
            "sequence": [],
        }

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        r"""Inside the block, counts go to a new record of ``steps`` too."""
        self._current = self._empty()
        try:
            yield
        finally:
            self.steps.append(self._current)
            self._current = None

    def _count(self, key: str, entry: Any = None) -> None:
        for record in (self.totals, self._current):
            if record is None:
                continue
            if entry is None:
                record[key] += 1
            else:
                record[key].append(entry)

    def _on_device(self, value: Any) -> bool:
        return isinstance(value, Tensor) and value.device.type == self.device.type

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.name()
        tensors = [leaf for leaf in tree_leaves((args, kwargs)) if isinstance(leaf, Tensor)]
        on_device = [tensor for tensor in tensors if self._on_device(tensor)]
        placeholders = self.device.type == "meta"
        if name in self.READS and on_device:
            self._count("syncs")
            if placeholders:
                return on_device[0].new_zeros((), device="cpu").item()
        if name in self.DATA_DEPENDENT and on_device:
            self._count("syncs")
        boolean_mask = name in self.INDEXING and any(
            isinstance(index, Tensor) and index.dtype == torch.bool
            for index in (args[1] if len(args) > 1 else ())
        )
        if boolean_mask and on_device:
            self._count("syncs")
        if name in ("aten::_to_copy", "aten::copy_") and tensors:
            source = args[0] if name == "aten::_to_copy" else args[1]
            target_device = (
                torch.device(kwargs.get("device", source.device))
                if name == "aten::_to_copy"
                else args[0].device
            )
            if self._on_device(source) and target_device.type != self.device.type:
                self._count("device_to_host")
                if not placeholders:
                    return func(*args, **kwargs)
                if name == "aten::copy_":
                    return args[0].zero_()
                dtype = kwargs.get("dtype") or source.dtype
                return torch.zeros(source.shape, dtype=dtype, device=target_device)
            if not self._on_device(source) and target_device.type == self.device.type:
                self._count("host_to_device")
        result = func(*args, **kwargs)
        if on_device and not func.is_view and func.namespace == "aten":
            self._count("operations")
            shapes = tuple(tuple(tensor.shape) for tensor in tensors)
            self._count("sequence", (name, shapes))
        return result


def quadratic_bo_data() -> tuple[Tensor, Tensor, Tensor]:
    r"""Ten points of a 2-D quadratic to maximise, with their box: ``10 x 2`` inputs,
    ``10 x 1`` outputs and the ``2 x 2`` bounds (float64, the same every call)."""
    generator = torch.Generator().manual_seed(0)
    train_X = 4 * torch.rand(10, 2, generator=generator, dtype=torch.float64) - 2
    train_Y = -(train_X**2).sum(-1, keepdim=True)
    bounds = torch.tensor([[-2.0, -2.0], [2.0, 2.0]], dtype=torch.float64)
    return train_X, train_Y, bounds


def rewrite_state_payload(path: Path, change: Callable[[dict], None]) -> None:
    r"""Rewrite a run state file with ``change(raw)`` applied to its payload (the dict
    that ``torch.save`` wrote) and a matching checksum: a crafted file that passes the
    integrity check."""
    content = path.read_bytes()
    first, _, rest = content.partition(b"\n")
    payload = rest.partition(b"\n")[2]
    raw = torch.load(io.BytesIO(payload), weights_only=True)
    change(raw)
    buffer = io.BytesIO()
    torch.save(raw, buffer)
    payload = buffer.getvalue()
    digest = hashlib.sha256(payload).hexdigest().encode()
    path.write_bytes(first + b"\n" + digest + b"\n" + payload)


def write_results(path: Path, rows: list[dict[str, str]], values: Sequence[float]) -> Path:
    r"""The batch ``ask`` printed (``rows``, as ``csv.DictReader`` reads them) with a
    column ``y`` of ``values`` added, written to ``path`` for ``tell``."""
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=[*rows[0], "y"])
        writer.writeheader()
        writer.writerows({**row, "y": value} for row, value in zip(rows, values, strict=True))
    return path
