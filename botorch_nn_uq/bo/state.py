r"""The state of a BO run, its one seeding rule, and its file format.

A run's state is everything its next proposals depend on: the evaluated inputs and
outputs, the objective values, one record per told batch, the seed and the step
counter, the batch asked but not yet told, the random stream's state, the states of the
fit policy and the proposer (e.g. a trust region) and the last model's ``state_dict``
(for a warm-started refit). :meth:`RunState.save` writes it atomically;
:meth:`RunState.load` reads it back without running any code from the file.

**The seeding rule** (:func:`step_seed`): a run has one seed. The initial design
(step 0) is drawn with ``seed``; the fit and the proposal of BO step ``s >= 1`` use
``1000 * seed + s``; draws that continue across steps (random search, random tie
breaks) come from one generator seeded with ``seed + RANDOM_STREAM_OFFSET``, whose
state is part of the run state. So a run proposes the same points whether it goes
through ``run``, through ask/tell in one process, or through ask/tell with the state
saved and loaded between steps.

**File format**: a first line naming the format and its version, a second line with
the SHA-256 of the payload, then the payload: ``torch.save`` of a dict of tensors
(inputs, outputs, the last model's weights, the random stream) and a JSON header (the
configuration, records and component states, as UTF-8 bytes in a ``uint8`` tensor),
read back with ``torch.load(weights_only=True)``. A file of another version, with a
wrong checksum or with an unexpected layout is refused with :class:`StateFileError`.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import tempfile
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

#: The first line of a state file.
STATE_MAGIC = b"botorch-nn-uq run state"
#: Version of the file layout; a file of another version is refused.
STATE_FORMAT = 1
#: The random stream of a run is seeded with its seed plus this offset.
RANDOM_STREAM_OFFSET = 7919
#: Step seeds are ``SEED_STRIDE * seed + step``.
SEED_STRIDE = 1000
#: The largest seed a torch generator takes.
MAX_GENERATOR_SEED = 2**63 - 1
#: The most BO steps of a run.
MAX_STEPS = 10**6
#: The largest seed of a run: its step seeds stay below ``2**63`` for ``MAX_STEPS`` steps.
MAX_RUN_SEED = (MAX_GENERATOR_SEED - MAX_STEPS) // SEED_STRIDE


class StateFileError(ValueError):
    r"""A state file that cannot be loaded: not a state file, from another version,
    corrupted, or with an unexpected layout."""


def step_seed(seed: int, step: int) -> int:
    r"""The seed of BO step ``step`` of a run with ``seed``: ``1000 * seed + step``
    (step 0, the initial design, uses ``seed`` itself).

    Args:
        seed: The run's seed (non-negative).
        step: The step (0 for the initial design).

    Example:
        >>> step_seed(3, 2)
        3002
    """
    if not 0 <= step <= MAX_STEPS:
        raise ValueError(f"A run has at most {MAX_STEPS} steps; got step {step}.")
    return seed if step == 0 else SEED_STRIDE * seed + step


def check_seed(seed: Any) -> int:
    r"""``seed`` if it is a non-negative integer whose step seeds fit a torch generator."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer; got {seed!r}.")
    if seed > MAX_RUN_SEED:
        raise ValueError(
            f"seed must be at most {MAX_RUN_SEED} (its step seeds {SEED_STRIDE} * seed + step "
            f"stay below 2**63 for {MAX_STEPS} steps); got {seed}."
        )
    return seed


@dataclass(frozen=True)
class StepRecord:
    r"""One told batch of a run.

    Attributes:
        step: 0 for the initial design, then 1, 2, ... for BO steps.
        num_evaluations: Evaluations so far, this batch included.
        value: The best objective value of the batch.
        best_value: The best objective value so far.
        seconds: Wall-clock seconds of the step's ``ask`` (fit, proposal and the
            batch-diversity metric); 0 for the initial design.
        cpu_seconds: CPU seconds of the process (all its threads,
            ``time.process_time``) during the step's ``ask``: a cost that other jobs on
            a shared machine do not inflate.
        fit_seconds: The part of ``seconds`` spent fitting the surrogate.
        fit_points: The points the step's surrogate was fitted on (all evaluations so
            far, or the current run's with TuRBO-1's restarts); 0 without a fit.
        warm_start: Whether the step's fit continued from the previous model's weights.
        batch_min_distance: The smallest distance between two points of the batch in
            the unit cube (``inf`` for a single point).
        batch_duplicates: Points of the batch that repeat an earlier point of it.
        details: What the proposer reports of the step (e.g. ``trust_region_length``,
            ``doublings`` of NOMU's dynamic c).
    """

    step: int
    num_evaluations: int
    value: float
    best_value: float
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    fit_seconds: float = 0.0
    fit_points: int = 0
    warm_start: bool = False
    batch_min_distance: float = math.inf
    batch_duplicates: int = 0
    details: dict[str, float] = field(default_factory=dict)


@dataclass
class PendingBatch:
    r"""A batch that was asked and not yet told.

    Attributes:
        step: The step that proposed it.
        X: ``q x d`` proposed inputs.
        seconds: Wall-clock seconds of its ``ask``.
        cpu_seconds: CPU seconds of the process during its ``ask``.
        fit_seconds: The part spent fitting.
        fit_points: The points the surrogate was fitted on (0 without a fit).
        warm_start: Whether the fit was warm-started.
        batch_min_distance: See :class:`StepRecord`.
        batch_duplicates: See :class:`StepRecord`.
        details: The proposer's report of the step.
    """

    step: int
    X: Tensor
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    fit_seconds: float = 0.0
    fit_points: int = 0
    warm_start: bool = False
    batch_min_distance: float = math.inf
    batch_duplicates: int = 0
    details: dict[str, float] = field(default_factory=dict)


@dataclass
class RunState:
    r"""Everything a run's next proposals depend on.

    Attributes:
        seed: The run's seed (:func:`step_seed`).
        bounds: ``2 x d`` box of the inputs.
        X: ``n x d`` evaluated inputs.
        Y: ``n x m`` observed outputs.
        values: ``n`` objective values (as computed when each batch was told).
        records: One :class:`StepRecord` per told batch.
        step: The next step to propose (0 before the initial design is told).
        pending: The batch asked and not yet told, if any.
        random_state: The random stream's generator state (``uint8`` tensor).
        fit_state: The fit policy's state (JSON values).
        proposer_state: The proposer's state (JSON values).
        model_state: The last model's ``state_dict`` (for warm starts), if kept.
        model_num_points: How many of the first points the last model was fitted on.
        config: The configuration of the run's components (JSON values; ``None``
            entries for components given as code).
    """

    seed: int
    bounds: Tensor
    X: Tensor
    Y: Tensor
    values: Tensor
    records: list[StepRecord] = field(default_factory=list)
    step: int = 0
    pending: PendingBatch | None = None
    random_state: Tensor | None = None
    fit_state: dict[str, Any] = field(default_factory=dict)
    proposer_state: dict[str, Any] = field(default_factory=dict)
    model_state: dict[str, Tensor] | None = None
    model_num_points: int = 0
    config: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def empty(cls, seed: int, bounds: Tensor, config: dict[str, Any]) -> RunState:
        r"""The state of a run before its first evaluation."""
        dim = bounds.shape[-1]
        generator = torch.Generator().manual_seed(seed + RANDOM_STREAM_OFFSET)
        return cls(
            seed=seed,
            bounds=bounds,
            X=bounds.new_empty(0, dim),
            Y=bounds.new_empty(0, 0),
            values=bounds.new_empty(0),
            random_state=generator.get_state(),
            config=config,
        )

    def to(self, device: str | torch.device) -> RunState:
        r"""Move the data (bounds, inputs, outputs, values, the pending batch) to
        ``device``; the random stream and the model's saved weights stay where they are
        (the model is rebuilt on the data's device)."""
        self.bounds, self.X, self.Y, self.values = (
            tensor.to(device) for tensor in (self.bounds, self.X, self.Y, self.values)
        )
        if self.pending is not None:
            self.pending.X = self.pending.X.to(device)
        return self

    def save(self, path: str | Path) -> None:
        r"""Write the state to ``path`` atomically (a temporary file in the same folder,
        then a rename), creating the folder."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        buffer = io.BytesIO()
        torch.save(self._payload(), buffer)
        payload = buffer.getvalue()
        digest = hashlib.sha256(payload).hexdigest().encode()
        content = STATE_MAGIC + b" " + str(STATE_FORMAT).encode() + b"\n" + digest + b"\n" + payload
        descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        try:
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(content)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    def _payload(self) -> dict[str, Any]:
        header = {
            "seed": self.seed,
            "step": self.step,
            "records": [asdict(record) for record in self.records],
            "pending": None
            if self.pending is None
            else {k: v for k, v in asdict(self.pending).items() if k != "X"},
            "fit_state": self.fit_state,
            "proposer_state": self.proposer_state,
            "model_num_points": self.model_num_points,
            "model_keys": None if self.model_state is None else list(self.model_state),
            "config": self.config,
        }
        text = json.dumps(header, sort_keys=True).encode()
        tensors = {
            "bounds": self.bounds,
            "X": self.X,
            "Y": self.Y,
            "values": self.values,
            "random_state": self.random_state,
        }
        if self.pending is not None:
            tensors["pending_X"] = self.pending.X
        for index, value in enumerate((self.model_state or {}).values()):
            tensors[f"model/{index}"] = value
        return {
            "header": torch.frombuffer(bytearray(text), dtype=torch.uint8).clone(),
            "tensors": {name: value.detach().cpu() for name, value in tensors.items()},
        }

    @classmethod
    def load(cls, path: str | Path) -> RunState:
        r"""Read a state written by :meth:`save`.

        Raises:
            StateFileError: If the file is not a state file, is of another version, is
                corrupted (its checksum does not match) or holds an unexpected layout.
            OSError: If the file cannot be read.
        """
        content = Path(path).read_bytes()
        first, _, rest = content.partition(b"\n")
        if not first.startswith(STATE_MAGIC + b" "):
            raise StateFileError(f"{str(path)!r} is not a botorch-nn-uq run state file.")
        version = first[len(STATE_MAGIC) + 1 :].decode(errors="replace")
        if version != str(STATE_FORMAT):
            raise StateFileError(
                f"{str(path)!r} is a run state of format {version!r}; this version of "
                f"botorch-nn-uq reads format {STATE_FORMAT} only."
            )
        digest, _, payload = rest.partition(b"\n")
        if hashlib.sha256(payload).hexdigest().encode() != digest:
            raise StateFileError(
                f"{str(path)!r} is corrupted: its content does not match its checksum."
            )
        try:
            # Saved from the CPU; a state written by another build on another device
            # still loads where that device is absent.
            raw = torch.load(io.BytesIO(payload), weights_only=True, map_location="cpu")
            return cls._from_payload(raw)
        except StateFileError:
            raise
        except Exception as error:
            raise StateFileError(f"{str(path)!r} has an unexpected layout: {error}") from None

    @classmethod
    def _from_payload(cls, raw: Any) -> RunState:
        _require(isinstance(raw, dict) and set(raw) == {"header", "tensors"}, "top level")
        header_tensor, tensors = raw["header"], raw["tensors"]
        _require(isinstance(header_tensor, Tensor) and header_tensor.dtype == torch.uint8, "header")
        header = json.loads(bytes(header_tensor.tolist()).decode())
        _require(isinstance(tensors, dict), "tensors")
        expected = {"seed", "step", "records", "pending", "fit_state", "proposer_state"}
        expected |= {"model_num_points", "model_keys", "config"}
        _require(isinstance(header, dict) and set(header) == expected, "header keys")
        for name in ("bounds", "X", "Y", "values", "random_state"):
            _require(isinstance(tensors.get(name), Tensor), f"tensor {name}")
        bounds, X, Y, values = (tensors[name] for name in ("bounds", "X", "Y", "values"))
        _require(bounds.dim() == 2 and bounds.shape[0] == 2, "bounds shape")
        n, dim = X.shape[0], bounds.shape[1]
        _require(X.shape == (n, dim) and Y.dim() == 2 and Y.shape[0] == n, "data shapes")
        _require(values.shape == (n,), "values shape")
        for tensor in (bounds, X, Y, values):
            _require(tensor.is_floating_point() and bool(tensor.isfinite().all()), "data values")
        _require(tensors["random_state"].dtype == torch.uint8, "random state")
        _require(_is_int(header["seed"]) and _is_int(header["step"]), "seed and step")
        records = [StepRecord(**record) for record in _list(header["records"], "records")]
        _require(len(records) == (header["step"] if n else 0), "records against step")
        pending = None
        if header["pending"] is not None:
            pending_X = tensors.get("pending_X")
            _require(isinstance(pending_X, Tensor) and pending_X.dim() == 2, "pending batch")
            _require(pending_X.shape[-1] == dim and pending_X.dtype == X.dtype, "pending batch")
            pending = PendingBatch(X=pending_X, **_dict(header["pending"], "pending"))
            _require(pending.step == header["step"], "pending step")
        model_state = None
        if header["model_keys"] is not None:
            keys = _list(header["model_keys"], "model keys")
            model_state = {}
            for index, key in enumerate(keys):
                value = tensors.get(f"model/{index}")
                _require(isinstance(key, str) and isinstance(value, Tensor), "model state")
                model_state[key] = value
        _require(_is_int(header["model_num_points"]), "model points")
        _require(0 <= header["model_num_points"] <= n, "model points")
        return cls(
            seed=header["seed"],
            bounds=bounds,
            X=X,
            Y=Y,
            values=values,
            records=records,
            step=header["step"],
            pending=pending,
            random_state=tensors["random_state"],
            fit_state=_dict(header["fit_state"], "fit state"),
            proposer_state=_dict(header["proposer_state"], "proposer state"),
            model_state=model_state,
            model_num_points=header["model_num_points"],
            config=_dict(header["config"], "config"),
        )


_RECORD_FIELDS = {f.name for f in fields(StepRecord)}


def _require(condition: bool, what: str) -> None:
    if not condition:
        raise StateFileError(f"unexpected {what}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _list(value: Any, what: str) -> list:
    _require(isinstance(value, list), what)
    if what == "records":
        for record in value:
            _require(isinstance(record, dict) and set(record) == _RECORD_FIELDS, "record")
    return value


def _dict(value: Any, what: str) -> dict:
    _require(isinstance(value, dict), what)
    return value
