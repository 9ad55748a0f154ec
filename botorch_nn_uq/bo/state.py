r"""The state of a BO run, its one seeding rule, and its file format.

A run's state is everything its next proposals depend on: the evaluated inputs and
outputs with their ids, the objective values, one record per ``tell``, the seed and the
step counter, the points asked and not yet told (:class:`PendingPoints`, each with its
id and ask time), the points whose evaluation failed (:class:`FailedPoints`, with their
reasons), the random stream's state, the states of the fit policy and the proposer
(e.g. a trust region) and the last model's ``state_dict`` (for a warm-started refit).
:meth:`RunState.save` writes it atomically, comparing before writing;
:meth:`RunState.load` reads it back without running any code from the file, every size
bounded before anything is allocated and every component checked.

**The seeding rule** (:func:`step_seed`): a run has one seed. The initial design
(step 0) is drawn with ``seed``; the fit and the proposal of BO step ``s >= 1`` use
``1000 * seed + s``; draws that continue across steps (random search, random tie
breaks) come from one generator seeded with ``seed + RANDOM_STREAM_OFFSET``, whose
state is part of the run state. So a run proposes the same points whether it goes
through ``run``, through ask/tell in one process, or through ask/tell with the state
saved and loaded between steps.

**File format**: the frame of :mod:`botorch_nn_uq.bo.state_file` (a first line naming
the format and its version, a second line with the SHA-256 of the payload, the advisory
lock), then the payload: ``torch.save`` of a dict of tensors
(inputs, outputs, the last model's weights, the random stream) and a JSON header (the
configuration, records and component states, as UTF-8 bytes in a ``uint8`` tensor),
read back with ``torch.load(weights_only=True)``. Format 3 holds pending and failed
points with ids; a format-2 file (one pending batch, no ids) is converted when read: its
evaluations get the ids ``0, ..., n - 1`` and its pending batch the next ones, with an
unknown (``nan``) ask time. A file of another version, with a wrong checksum or with an
unexpected layout is refused with :class:`StateFileError`, whose message names the file
(and the version, or the field).
"""

from __future__ import annotations

import io
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from botorch_nn_uq.bo.state_file import (
    STATE_FORMAT,
    STATE_MAGIC,
    StateFileError,
    read_state_file,
    write_state_file,
)
from botorch_nn_uq.checks import is_int_in_range

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
#: The most inputs of a run.
MAX_DIM = 10_000
#: The most outputs per evaluation.
MAX_OUTPUTS = 10_000
#: The most evaluations of a run.
MAX_EVALUATIONS = 10**7
#: The most points of one batch.
MAX_BATCH_SIZE = 10**6
#: The longest reason of a failed evaluation, in characters.
MAX_REASON_CHARS = 10_000
#: The largest header (configuration, records and component states) of a state file.
MAX_HEADER_BYTES = 2**28
#: The most elements of one tensor of a saved model.
MAX_MODEL_ELEMENTS = 2**29

__all__ = [
    "MAX_BATCH_SIZE",
    "MAX_DIM",
    "MAX_EVALUATIONS",
    "MAX_OUTPUTS",
    "MAX_RUN_SEED",
    "MAX_STEPS",
    "STATE_FORMAT",
    "STATE_MAGIC",
    "FailedPoints",
    "PendingPoints",
    "RunState",
    "StateFileError",
    "StepRecord",
    "check_seed",
    "step_seed",
]


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
    if not is_int_in_range(seed):
        raise ValueError(f"seed must be a non-negative integer; got {seed!r}.")
    if seed > MAX_RUN_SEED:
        raise ValueError(
            f"seed must be at most {MAX_RUN_SEED} (its step seeds {SEED_STRIDE} * seed + step "
            f"stay below 2**63 for {MAX_STEPS} steps); got {seed}."
        )
    return seed


@dataclass(frozen=True)
class StepCost:
    r"""What a step's ``ask`` cost, and what its batch looks like.

    Attributes:
        seconds: Wall-clock seconds of the ``ask`` (fit, proposal and the
            batch-diversity metric); 0 for the initial design.
        cpu_seconds: CPU seconds of the process (all its threads,
            ``time.process_time``) during the ``ask``: a cost that other jobs on a shared
            machine do not inflate.
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

    seconds: float = 0.0
    cpu_seconds: float = 0.0
    fit_seconds: float = 0.0
    fit_points: int = 0
    warm_start: bool = False
    batch_min_distance: float = math.inf
    batch_duplicates: int = 0
    details: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class StepRecord:
    r"""One ``tell`` of a run (in a synchronous run, the one record of a step), for the
    run's history, the command line's output and the benchmarks' rows (:meth:`row`).

    Attributes:
        step: 0 for the initial design, then 1, 2, ... for BO steps: the latest ask
            among the told points.
        num_evaluations: Evaluations so far, these included.
        value: The best objective value of the told points.
        best_value: The best objective value so far.
        cost: What the asks whose first results this tell reports cost
            (:class:`StepCost`; several such asks: their times summed, the rest the
            latest's; none: an empty cost); its fields are also read as the record's
            own (``record.seconds``).
        regret: The problem's normalised regret of ``best_value``, where the problem
            has one (a registered test problem in ``run_bo``); ``None`` otherwise.
    """

    step: int
    num_evaluations: int
    value: float
    best_value: float
    cost: StepCost = field(default_factory=StepCost)
    regret: float | None = None

    seconds = property(lambda self: self.cost.seconds, doc="See :class:`StepCost`.")
    cpu_seconds = property(lambda self: self.cost.cpu_seconds, doc="See :class:`StepCost`.")
    fit_seconds = property(lambda self: self.cost.fit_seconds, doc="See :class:`StepCost`.")
    fit_points = property(lambda self: self.cost.fit_points, doc="See :class:`StepCost`.")
    warm_start = property(lambda self: self.cost.warm_start, doc="See :class:`StepCost`.")
    batch_min_distance = property(
        lambda self: self.cost.batch_min_distance, doc="See :class:`StepCost`."
    )
    batch_duplicates = property(
        lambda self: self.cost.batch_duplicates, doc="See :class:`StepCost`."
    )
    details = property(lambda self: self.cost.details, doc="See :class:`StepCost`.")

    @property
    def trust_region_length(self) -> float:
        r"""The side (fraction of the box) of the trust region the step proposed in;
        ``nan`` without one."""
        return self.cost.details.get("trust_region_length", math.nan)

    def row(self) -> dict[str, Any]:
        r"""The record as one flat row (for CSV files): the step, the evaluations, the
        values and the regret, then the cost's fields and the trust region's side."""
        cost = {name: value for name, value in asdict(self.cost).items() if name != "details"}
        return {
            "step": self.step,
            "num_evaluations": self.num_evaluations,
            "value": self.value,
            "best_value": self.best_value,
            "regret": math.nan if self.regret is None else self.regret,
            **cost,
            "trust_region_length": self.trust_region_length,
        }


@dataclass
class PendingPoints:
    r"""The points asked and not yet told, each with its id, in the order they were asked.

    Attributes:
        ids: ``p`` ids (``int64``), unique within the run.
        X: ``p x d`` points.
        steps: ``p`` steps (``int64``): the ``ask`` that proposed each point.
        asked_at: ``p`` Unix times (``float64``) of those asks; ``nan`` where unknown
            (a point of a converted format-2 file).
    """

    ids: Tensor
    X: Tensor
    steps: Tensor
    asked_at: Tensor

    @classmethod
    def empty(cls, bounds: Tensor) -> PendingPoints:
        r"""No point, for a box ``bounds`` (``2 x d``)."""
        return cls(*_empty_points(bounds), bounds.new_empty(0, dtype=torch.float64))

    def __len__(self) -> int:
        return self.ids.shape[0]

    def select(self, rows: Tensor) -> PendingPoints:
        r"""The points at ``rows`` (a boolean mask or indices of the ``p`` points)."""
        return PendingPoints(self.ids[rows], self.X[rows], self.steps[rows], self.asked_at[rows])

    def append(self, other: PendingPoints) -> PendingPoints:
        r"""These points, then ``other``'s."""
        return PendingPoints(
            *(
                torch.cat([mine, theirs])
                for mine, theirs in zip(_fields(self), _fields(other), strict=True)
            )
        )


@dataclass
class FailedPoints:
    r"""The points whose evaluation failed, in the order they were told as failed (a
    point told with a penalty is also among the evaluations, under the same id).

    Attributes:
        ids: ``f`` ids (``int64``).
        X: ``f x d`` points.
        steps: ``f`` steps (``int64``) that asked them.
        reasons: ``f`` reasons, as told.
    """

    ids: Tensor
    X: Tensor
    steps: Tensor
    reasons: list[str] = field(default_factory=list)

    @classmethod
    def empty(cls, bounds: Tensor) -> FailedPoints:
        r"""No point, for a box ``bounds`` (``2 x d``)."""
        return cls(*_empty_points(bounds))

    def __len__(self) -> int:
        return self.ids.shape[0]


def _empty_points(bounds: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    r"""Empty ids, ``0 x d`` points and steps on the device of ``bounds``."""
    empty_long = torch.empty(0, dtype=torch.long, device=bounds.device)
    return empty_long, bounds.new_empty(0, bounds.shape[-1]), empty_long.clone()


def _fields(points: PendingPoints) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    return points.ids, points.X, points.steps, points.asked_at


@dataclass
class RunState:
    r"""Everything a run's next proposals depend on.

    Attributes:
        seed: The run's seed (:func:`step_seed`).
        bounds: ``2 x d`` box of the inputs.
        X: ``n x d`` evaluated inputs.
        Y: ``n x m`` observed outputs.
        values: ``n`` objective values (as computed when each result was told).
        records: One :class:`StepRecord` per ``tell``.
        step: The number of asks so far, so the step the next ``ask`` proposes (0: the
            initial design).
        pending: The points asked and not yet told.
        failed: The points told as failed.
        ids: ``n`` ids (``int64``) of the evaluated inputs.
        next_id: The id the next asked point gets (ids are never reused).
        ask_costs: The cost of each ask that no record has reported yet, by step (an
            ask's cost goes into the record of the first ``tell`` of its points).
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
    pending: PendingPoints | None = None
    failed: FailedPoints | None = None
    ids: Tensor | None = None
    next_id: int = 0
    ask_costs: dict[int, StepCost] = field(default_factory=dict)
    random_state: Tensor | None = None
    fit_state: dict[str, Any] = field(default_factory=dict)
    proposer_state: dict[str, Any] = field(default_factory=dict)
    model_state: dict[str, Tensor] | None = None
    model_num_points: int = 0
    config: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # A state built from its data alone (no pending or failed point yet, ids in
        # the order of the data).
        if self.pending is None:
            self.pending = PendingPoints.empty(self.bounds)
        if self.failed is None:
            self.failed = FailedPoints.empty(self.bounds)
        if self.ids is None:
            self.ids = torch.arange(self.X.shape[0], device=self.bounds.device)
            self.next_id = max(self.next_id, self.X.shape[0])

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
        r"""Move the data (bounds, inputs, outputs, values, ids, the pending and the
        failed points) to ``device``; the random stream and the model's saved weights
        stay where they are (the model is rebuilt on the data's device)."""
        self.bounds, self.X, self.Y, self.values, self.ids = (
            tensor.to(device) for tensor in (self.bounds, self.X, self.Y, self.values, self.ids)
        )
        self.pending = PendingPoints(*(tensor.to(device) for tensor in _fields(self.pending)))
        failed = self.failed
        self.failed = FailedPoints(
            failed.ids.to(device), failed.X.to(device), failed.steps.to(device), failed.reasons
        )
        return self

    def save(
        self, path: str | Path, *, replaces: str | None = None, overwrite: bool = False
    ) -> str:
        r"""Write the state to ``path`` atomically, creating the folder
        (:func:`~botorch_nn_uq.bo.state_file.write_state_file`).

        Args:
            path: The state file.
            replaces: The checksum of the state read from ``path`` before (the file must
                still hold it), or ``None`` when ``path`` must not exist.
            overwrite: Replace whatever ``path`` holds.

        Returns:
            The checksum of the written state.
        """
        buffer = io.BytesIO()
        torch.save(self._payload(), buffer)
        return write_state_file(path, buffer.getvalue(), replaces=replaces, overwrite=overwrite)

    def _payload(self) -> dict[str, Any]:
        header = {
            "seed": self.seed,
            "step": self.step,
            "records": [asdict(record) for record in self.records],
            "ask_costs": [
                {"step": step, "cost": asdict(cost)}
                for step, cost in sorted(self.ask_costs.items())
            ],
            "failed_reasons": self.failed.reasons,
            "next_id": self.next_id,
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
            "ids": self.ids,
            "random_state": self.random_state,
            "pending_ids": self.pending.ids,
            "pending_X": self.pending.X,
            "pending_steps": self.pending.steps,
            "pending_asked_at": self.pending.asked_at,
            "failed_ids": self.failed.ids,
            "failed_X": self.failed.X,
            "failed_steps": self.failed.steps,
        }
        for index, value in enumerate((self.model_state or {}).values()):
            tensors[f"model/{index}"] = value
        # Contiguous copies: a view would carry its whole storage into the file.
        return {
            "header": torch.frombuffer(bytearray(text), dtype=torch.uint8).clone(),
            "tensors": {
                name: value.detach().cpu().contiguous().clone() for name, value in tensors.items()
            },
        }

    @classmethod
    def load(cls, path: str | Path) -> RunState:
        r"""Read a state written by :meth:`save` (see :meth:`read`)."""
        return cls.read(path)[0]

    @classmethod
    def read(cls, path: str | Path) -> tuple[RunState, str]:
        r"""Read a state written by :meth:`save`, with the checksum that identifies it.

        Every size is bounded before anything is allocated: a tensor must be dense and
        lie within the bytes the file stores for it (a crafted file cannot claim
        billions of rows with a stride-0 view), and the data, the pending and failed
        points, the records and the header are bounded by :data:`MAX_EVALUATIONS`,
        :data:`MAX_STEPS` and :data:`MAX_HEADER_BYTES`. Every component is checked:
        shapes, dtypes, finite data inside the box, pending and failed points inside the
        box, ids unique, records consistent with the data, a random state that the
        generator takes. A format-2 file is converted (see the module's description).

        Returns:
            ``(state, digest)``.

        Raises:
            StateFileError: If the file is not a regular file, not a state file, of
                another version, corrupted (its checksum does not match) or holds an
                unexpected layout; the message names the file and the field.
            OSError: If the file cannot be read.
        """
        payload, digest, version = read_state_file(path)
        try:
            # Saved from the CPU; a state written by another build on another device
            # still loads where that device is absent.
            raw = torch.load(io.BytesIO(payload), weights_only=True, map_location="cpu")
            return cls._from_payload(raw, version), digest
        except StateFileError as error:
            raise StateFileError(f"{str(path)!r} holds an unusable run state: {error}") from None
        except Exception as error:
            raise StateFileError(f"{str(path)!r} has an unexpected layout: {error}") from None

    @classmethod
    def _from_payload(cls, raw: Any, version: int = STATE_FORMAT) -> RunState:
        _require(isinstance(raw, dict) and set(raw) == {"header", "tensors"}, "top level")
        header_tensor, tensors = raw["header"], raw["tensors"]
        _require(isinstance(tensors, dict), "tensors")
        _check_tensor("header", header_tensor, MAX_HEADER_BYTES)
        _require(header_tensor.dtype == torch.uint8 and header_tensor.dim() == 1, "header")
        header = json.loads(bytes(header_tensor.tolist()).decode())
        expected = {"seed", "step", "records", "fit_state", "proposer_state"}
        expected |= {"model_num_points", "model_keys", "config"}
        expected |= {"pending"} if version == 2 else {"ask_costs", "failed_reasons", "next_id"}
        _require(isinstance(header, dict) and set(header) == expected, "header keys")
        model_keys = header["model_keys"]
        _require(model_keys is None or isinstance(model_keys, list), "model keys")
        model_names = {f"model/{index}" for index in range(len(model_keys or []))}
        if version == 2:
            point_names = set() if header["pending"] is None else {"pending_X"}
        else:
            point_names = {"ids", *(f"pending_{name}" for name in ("ids", "X", "steps"))}
            point_names |= {"pending_asked_at", "failed_ids", "failed_X", "failed_steps"}
        names = {"bounds", "X", "Y", "values", "random_state", *point_names, *model_names}
        _require(set(tensors) == names, "tensor names")
        for name in names - model_names - {"random_state"}:
            _check_tensor(name, tensors[name], MAX_EVALUATIONS * (MAX_DIM + 1))
        bounds, X, Y, values = (tensors[name] for name in ("bounds", "X", "Y", "values"))
        _require(bounds.dim() == 2 and bounds.shape[0] == 2, "bounds shape")
        dim = bounds.shape[1]
        _require(1 <= dim <= MAX_DIM, f"bounds: at most {MAX_DIM} inputs")
        _require(X.dim() == 2 and X.shape[-1] == dim, "X shape")
        n = X.shape[0]
        _require(n <= MAX_EVALUATIONS, f"X: at most {MAX_EVALUATIONS} evaluations")
        _require(Y.dim() == 2 and Y.shape[0] == n, "Y shape")
        _require(Y.shape[1] <= MAX_OUTPUTS and (Y.shape[1] >= 1 or n == 0), "Y outputs")
        _require(values.shape == (n,), "values shape")
        for name, tensor in (("bounds", bounds), ("X", X), ("Y", Y), ("values", values)):
            _require(tensor.dtype == bounds.dtype and tensor.is_floating_point(), f"{name} dtype")
            _require(bool(tensor.isfinite().all()), f"{name}: non-finite values")
        _require(bool((bounds[0] < bounds[1]).all()), "bounds: a lower bound not below its upper")
        _require(_inside(X, bounds), "X: points outside the bounds")
        random_state = tensors["random_state"]
        _check_tensor("random_state", random_state, 2**20)
        try:
            torch.Generator().set_state(random_state)
        except (RuntimeError, TypeError):
            _require(False, "random_state: not a generator state")
        _require(is_int_in_range(header["seed"], maximum=MAX_RUN_SEED), "seed")
        step = header["step"]
        _require(is_int_in_range(step, maximum=MAX_STEPS), "step")
        records = _records(header["records"], n, step)
        if version == 2:
            points = _converted_format_2(header["pending"], tensors, bounds, step)
            step, ask_costs = points.pop("step"), points.pop("ask_costs")
        else:
            points = _points(header, tensors, bounds, step)
            ask_costs = _ask_costs(header["ask_costs"], points["pending"].steps)
        model_state = None
        if model_keys is not None:
            _require(len(set(model_keys)) == len(model_keys), "model keys: repeated")
            model_state = {}
            for index, key in enumerate(model_keys):
                _require(isinstance(key, str), "model keys")
                value = tensors[f"model/{index}"]
                _check_tensor(f"model state {key!r}", value, MAX_MODEL_ELEMENTS)
                model_state[key] = value
        model_num_points = header["model_num_points"]
        _require(is_int_in_range(model_num_points, maximum=n), "model_num_points")
        return cls(
            seed=header["seed"],
            bounds=bounds,
            X=X,
            Y=Y,
            values=values,
            records=records,
            step=step,
            ask_costs=ask_costs,
            random_state=random_state,
            fit_state=_dict(header["fit_state"], "fit_state"),
            proposer_state=_dict(header["proposer_state"], "proposer_state"),
            model_state=model_state,
            model_num_points=model_num_points,
            config=_dict(header["config"], "config"),
            **points,
        )


def _converted_format_2(
    pending: Any, tensors: dict[str, Tensor], bounds: Tensor, step: int
) -> dict[str, Any]:
    r"""The points of a format-2 state (one pending batch, no ids) in format 3: the
    evaluations get ids ``0, ..., n - 1``, the pending batch the next ones, its ask an
    unknown time (``nan``), and the step counter counts its ask (format 2 counted a
    step when its batch was told)."""
    n = tensors["X"].shape[0]
    ids = torch.arange(n)
    converted: dict[str, Any] = {"ids": ids, "next_id": n, "step": step, "ask_costs": {}}
    if pending is None:
        return converted
    pending_X = tensors["pending_X"]
    _check_points("pending batch", pending_X, bounds, MAX_BATCH_SIZE)
    _require(pending_X.shape[0] >= 1, "pending batch size")
    fields_ = _checked_fields(pending, {"step": int, "cost": dict}, "pending")
    _require(fields_["step"] == step, "pending step")
    q = pending_X.shape[0]
    converted["pending"] = PendingPoints(
        torch.arange(n, n + q),
        pending_X,
        torch.full((q,), step, dtype=torch.long),
        torch.full((q,), math.nan, dtype=torch.float64),
    )
    converted.update(next_id=n + q, step=step + 1, ask_costs={step: _cost(fields_["cost"])})
    return converted


def _points(
    header: dict[str, Any], tensors: dict[str, Tensor], bounds: Tensor, step: int
) -> dict[str, Any]:
    r"""The ids, pending and failed points of a format-3 state, checked: ids unique
    across the three and below ``next_id``, steps of asks made, points in the box."""
    n = tensors["X"].shape[0]
    next_id = header["next_id"]
    _require(is_int_in_range(next_id, maximum=2**62), "next_id")
    ids = _check_ids("ids", tensors["ids"], n)
    pending_X, failed_X = tensors["pending_X"], tensors["failed_X"]
    _check_points("pending points", pending_X, bounds, MAX_EVALUATIONS)
    _check_points("failed points", failed_X, bounds, MAX_EVALUATIONS)
    p, f = pending_X.shape[0], failed_X.shape[0]
    pending_ids = _check_ids("pending_ids", tensors["pending_ids"], p)
    failed_ids = _check_ids("failed_ids", tensors["failed_ids"], f)
    # A failed point told with a penalty is also an evaluation: its id is in both.
    for name, value in (("ids", ids), ("pending_ids", pending_ids), ("failed_ids", failed_ids)):
        _require(value.unique().numel() == value.numel(), f"{name}: repeated")
    _require(not bool(torch.isin(pending_ids, torch.cat([ids, failed_ids])).any()), "pending ids")
    every = torch.cat([ids, pending_ids, failed_ids])
    _require(not every.numel() or int(every.max()) < next_id, "ids against next_id")
    pending_steps = _check_ids("pending_steps", tensors["pending_steps"], p)
    failed_steps = _check_ids("failed_steps", tensors["failed_steps"], f)
    asked_steps = torch.cat([pending_steps, failed_steps])
    _require(not asked_steps.numel() or int(asked_steps.max()) < step, "steps of points")
    asked_at = tensors["pending_asked_at"]
    _require(asked_at.shape == (p,) and asked_at.dtype == torch.float64, "pending_asked_at")
    _require(not bool(asked_at.isinf().any()), "pending_asked_at: infinite times")
    reasons = header["failed_reasons"]
    _require(isinstance(reasons, list) and len(reasons) == f, "failed_reasons")
    _require(
        all(isinstance(reason, str) and len(reason) <= MAX_REASON_CHARS for reason in reasons),
        f"failed_reasons: a reason is not text of at most {MAX_REASON_CHARS} characters",
    )
    return {
        "ids": ids,
        "next_id": next_id,
        "pending": PendingPoints(pending_ids, pending_X, pending_steps, asked_at),
        "failed": FailedPoints(failed_ids, failed_X, failed_steps, reasons),
    }


def _check_ids(name: str, value: Tensor, count: int) -> Tensor:
    r"""``value``: ``count`` non-negative ``int64`` numbers (ids or steps)."""
    _require(value.dtype == torch.long and value.shape == (count,), f"{name} shape")
    _require(not count or int(value.min()) >= 0, f"{name}: negative")
    return value


def _check_points(what: str, X: Tensor, bounds: Tensor, most: int) -> None:
    r"""``X``: at most ``most`` finite points of the box, in its dtype."""
    _require(X.dim() == 2 and X.shape[-1] == bounds.shape[-1], f"{what} shape")
    _require(X.shape[0] <= most, f"{what}: more than {most}")
    _require(X.dtype == bounds.dtype, f"{what} dtype")
    _require(bool(X.isfinite().all()), f"{what}: non-finite points")
    _require(_inside(X, bounds), f"{what}: points outside the bounds")


def _ask_costs(value: Any, pending_steps: Tensor) -> dict[int, StepCost]:
    r"""The costs of asks not reported yet: one per step, each a step of pending points
    (an ask whose points all failed has none to report)."""
    _require(isinstance(value, list), "ask_costs")
    costs = {}
    for entry in value:
        fields_ = _checked_fields(entry, {"step": int, "cost": dict}, "ask cost")
        costs[fields_["step"]] = _cost(fields_["cost"])
    _require(len(costs) == len(value), "ask_costs: a step repeated")
    _require(set(costs) <= set(pending_steps.tolist()), "ask_costs: a step without pending points")
    return costs


_COST_TYPES: dict[str, Any] = {
    "seconds": float,
    "cpu_seconds": float,
    "fit_seconds": float,
    "fit_points": int,
    "warm_start": bool,
    "batch_min_distance": float,
    "batch_duplicates": int,
    "details": dict,
}
#: ``"optional number"``: a number or ``None`` (a regret where the problem has none).
_RECORD_TYPES: dict[str, Any] = {
    "step": int,
    "num_evaluations": int,
    "value": float,
    "best_value": float,
    "cost": dict,
    "regret": "optional number",
}


def _cost(value: Any) -> StepCost:
    return StepCost(**_checked_fields(value, _COST_TYPES, "cost"))


def _require(condition: bool, what: str) -> None:
    if not condition:
        raise StateFileError(f"unexpected {what}")


def _check_tensor(name: str, value: Any, max_elements: int) -> None:
    r"""A tensor that is dense, lies within its storage (the bytes the file holds for
    it) and has at most ``max_elements`` elements; checked before anything reads it."""
    _require(isinstance(value, Tensor), f"{name}: not a tensor")
    _require(value.numel() <= max_elements, f"{name}: more than {max_elements} elements")
    _require(value.is_contiguous(), f"{name}: not a dense tensor")
    end = (value.storage_offset() + value.numel()) * value.element_size()
    _require(end <= value.untyped_storage().nbytes(), f"{name}: larger than its stored bytes")


def _inside(X: Tensor, bounds: Tensor) -> bool:
    return bool(((X >= bounds[0]) & (X <= bounds[1])).all())


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _checked_fields(value: Any, types: dict[str, Any], what: str) -> dict[str, Any]:
    r"""``value``, a dict with exactly the keys of ``types`` and values of those types
    (a float field takes any JSON number but ``nan``, an ``"optional number"`` field also
    ``None``; ``cost``
    is checked by :func:`_cost`; ``details`` maps names to numbers)."""
    _require(isinstance(value, dict) and set(value) == set(types), f"{what} fields")
    for name, kind in types.items():
        field_value = value[name]
        if kind == "optional number":
            valid = field_value is None or _is_number(field_value)
        elif kind is float:
            valid = _is_number(field_value) and not math.isnan(field_value)
        elif kind is int:
            valid = is_int_in_range(field_value)
        elif name == "cost":
            valid = isinstance(field_value, dict)
        elif kind is dict:
            valid = isinstance(field_value, dict) and all(
                isinstance(key, str) and _is_number(number) for key, number in field_value.items()
            )
        else:
            valid = isinstance(field_value, kind)
        _require(valid, f"{what} field {name}")
    return value


def _records(value: Any, n: int, step: int) -> list[StepRecord]:
    r"""The records of a run with ``n`` evaluations and ``step`` asks: one per ``tell``
    (in the order told, so not always in step order), each of an ask made, counting
    more evaluations than the one before, the last counting ``n``."""
    _require(isinstance(value, list) and len(value) <= MAX_STEPS, "records")
    records = []
    for record in value:
        fields_ = _checked_fields(record, _RECORD_TYPES, "record")
        records.append(StepRecord(**{**fields_, "cost": _cost(fields_["cost"])}))
    counts = [record.num_evaluations for record in records]
    _require(all(record.step < step for record in records), "record steps")
    _require(
        all(before < after for before, after in zip([0, *counts], counts, strict=False)),
        "record evaluation counts",
    )
    _require(not records or counts[-1] == n, "records against the data")
    return records


def _dict(value: Any, what: str) -> dict:
    _require(isinstance(value, dict), what)
    return value
