"""The run state file as a database: a crafted file cannot exhaust memory, every
component is checked on load with the field named, writers compare before they write,
commands hold a lock, and a killed writer's temporary files do not pile up."""

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from botorch_nn_uq.bo import (
    BayesianOptimizer,
    ContinualFit,
    ContinualTraining,
    StateFileError,
    TrustRegionProposer,
    TurboProposer,
    registered_problem,
)
from botorch_nn_uq.bo.proposers import AcquisitionProposer
from botorch_nn_uq.bo.state import RunState
from botorch_nn_uq.bo.state_file import (
    PARTIAL_SUFFIX,
    StaleStateFileError,
    StateFileBusyError,
    locked_state_file,
)
from tests.testing import rewrite_state_payload

ROOT = Path(__file__).resolve().parents[2]
LEVY = registered_problem("levy", 2)


def _random_run(path: Path, steps: int = 2, q: int = 2, ask: bool = True) -> BayesianOptimizer:
    optimizer = BayesianOptimizer.for_problem(LEVY, proposer="random", n_initial=3, seed=5)
    optimizer.run(LEVY, steps=steps, q=q)
    if ask:
        optimizer.ask(q)
    optimizer.save(path)
    return optimizer


def _rewrite_header(path: Path, change) -> None:
    def rewrite(raw) -> None:
        header = json.loads(bytes(raw["header"].tolist()).decode())
        change(header)
        text = json.dumps(header).encode()
        raw["header"] = torch.frombuffer(bytearray(text), dtype=torch.uint8).clone()

    rewrite_state_payload(path, rewrite)


def _set_tensor(name: str, value):
    return lambda raw: raw["tensors"].__setitem__(name, value(raw["tensors"][name]))


#: A script that loads a crafted state and reports its peak memory (kilobytes).
PEAK_MEMORY_SCRIPT = """
import resource, sys
from botorch_nn_uq.bo import BayesianOptimizer, StateFileError
try:
    BayesianOptimizer.load(sys.argv[1])
except StateFileError as error:
    print("refused:", error)
print("peak", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


@pytest.mark.parametrize("name", ["X", "pending_X"])
def test_a_crafted_file_that_claims_billions_of_rows_is_refused_before_any_allocation(
    tmp_path, name
) -> None:
    path = tmp_path / "run.state"
    _random_run(path)
    # A stride-0 view: 16 stored bytes that claim 2e9 rows (32 GB to materialise).
    rewrite_state_payload(path, _set_tensor(name, lambda t: t[:1].expand(2 * 10**9, t.shape[-1])))
    assert path.stat().st_size < 20_000
    with pytest.raises(StateFileError, match=f"unexpected {name}: not a dense tensor"):
        RunState.load(path)
    result = subprocess.run(
        [sys.executable, "-c", PEAK_MEMORY_SCRIPT, str(path)],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    assert "refused:" in result.stdout
    peak_kilobytes = int(result.stdout.split("peak")[-1])
    assert peak_kilobytes < 2_000_000


def test_a_dense_view_must_lie_within_its_stored_bytes(tmp_path) -> None:
    path = tmp_path / "run.state"
    _random_run(path)
    # Within the element limit, but a view of 1 stored row repeated: not dense.
    rewrite_state_payload(path, _set_tensor("X", lambda t: t[:1].expand(t.shape[0], t.shape[-1])))
    with pytest.raises(StateFileError, match="unexpected X: not a dense tensor"):
        RunState.load(path)


def test_sizes_are_bounded_on_load(tmp_path, monkeypatch) -> None:
    import botorch_nn_uq.bo.state as state_module

    path = tmp_path / "run.state"
    _random_run(path)
    _rewrite_header(path, lambda header: header.__setitem__("step", 10**7))
    with pytest.raises(StateFileError, match="unexpected step"):
        RunState.load(path)
    # A long history is refused by the header's bound before it is parsed (a bound
    # lowered here, so the test need not write a quarter of a gigabyte).
    _random_run(path := tmp_path / "records.state")
    monkeypatch.setattr(state_module, "MAX_HEADER_BYTES", 1000)
    with pytest.raises(StateFileError, match="unexpected header: more than 1000 elements"):
        RunState.load(path)


def _trust_region_run(path: Path) -> BayesianOptimizer:
    optimizer = BayesianOptimizer.for_problem(
        LEVY,
        surrogate="gp",
        proposer=TrustRegionProposer(AcquisitionProposer("qlogei", num_restarts=2, raw_samples=16)),
        n_initial=3,
        seed=1,
    )
    optimizer.run(LEVY, steps=1, q=2)
    optimizer.save(path)
    return optimizer


def _set_region(field: str, value):
    def change(header) -> None:
        header["proposer_state"]["region"][field] = value

    return change


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        (
            _set_tensor("random_state", lambda t: t[:100].clone()),
            "random_state",
            "not a generator state",
        ),
        (
            _set_tensor("pending_X", lambda t: torch.full_like(t, math.nan)),
            "pending points",
            "non-finite",
        ),
        (
            _set_tensor("pending_X", lambda t: t + 100.0),
            "pending points",
            "outside the bounds",
        ),
        (_set_tensor("X", lambda t: t - 100.0), "X", "outside the bounds"),
        (_set_tensor("values", lambda t: t + 1.0), "values and Y", "inconsistent"),
        (_set_tensor("Y", lambda t: t * 2.0), "values and Y", "inconsistent"),
    ],
    ids=["random-state", "nan-pending", "pending-outside", "data-outside", "values", "outputs"],
)
def test_crafted_data_is_refused_with_the_field_named(tmp_path, change, field, message) -> None:
    path = tmp_path / "run.state"
    _random_run(path)
    rewrite_state_payload(path, change)
    with pytest.raises(StateFileError, match=message) as error:
        BayesianOptimizer.load(path)
    assert str(path) in str(error.value) and field in str(error.value)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (_set_region("length", -1.0), "length must lie in"),
        (_set_region("length", math.nan), "length must lie in"),
        (_set_region("failures", -3), "failures must be an integer"),
        (_set_region("surprise", 1), "unexpected keyword argument 'surprise'"),
        (lambda header: header["proposer_state"].pop("inner"), "KeyError"),
        (lambda header: header["config"]["objective"].__setitem__("type", "x"), "config.objective"),
        (lambda header: header["config"].__setitem__("n_initial", "many"), "config"),
        (lambda header: header["records"][0].__setitem__("value", "low"), "record field value"),
        (lambda header: header["records"][1].__setitem__("step", 5), "record steps"),
    ],
    ids=[
        "negative-length",
        "nan-length",
        "negative-count",
        "unknown-field",
        "missing-inner",
        "objective",
        "n-initial",
        "record-type",
        "record-step",
    ],
)
def test_crafted_component_states_are_refused_with_the_field_named(
    tmp_path, change, message
) -> None:
    path = tmp_path / "run.state"
    _trust_region_run(path)
    _rewrite_header(path, change)
    with pytest.raises(StateFileError, match=message) as error:
        BayesianOptimizer.load(path)
    assert str(path) in str(error.value)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda state: state.__setitem__("segment_start", 99), "Inconsistent TuRBO state"),
        (lambda state: state.__setitem__("design", [[2.0, 0.5]]), "unit cube"),
        (lambda state: state.__setitem__("num_told", -1), "non-negative integers"),
    ],
    ids=["segment", "design", "count"],
)
def test_crafted_turbo_states_are_refused(tmp_path, change, message) -> None:
    path = tmp_path / "run.state"
    optimizer = BayesianOptimizer.for_problem(
        LEVY, surrogate="gp", proposer=TurboProposer(), n_initial=3
    )
    optimizer.run(LEVY, steps=1, q=2)
    optimizer.save(path)
    _rewrite_header(path, lambda header: change(header["proposer_state"]))
    with pytest.raises(StateFileError, match=message):
        BayesianOptimizer.load(path)


def test_a_crafted_fit_policy_state_is_refused(tmp_path) -> None:
    path = tmp_path / "run.state"
    optimizer = BayesianOptimizer.for_problem(
        LEVY,
        proposer="random",
        fit_policy=ContinualFit(ContinualTraining()),
        surrogate="gp",
        n_initial=3,
    )
    optimizer.save(path)
    _rewrite_header(path, lambda header: header["fit_state"].__setitem__("last_error", "nan"))
    with pytest.raises(StateFileError, match="unusable fit_state: .*last_error"):
        BayesianOptimizer.load(path)


def _model_header(raw) -> dict:
    return json.loads(bytes(raw["header"].tolist()).decode())


def _set_model_header(raw, header: dict) -> None:
    text = json.dumps(header).encode()
    raw["header"] = torch.frombuffer(bytearray(text), dtype=torch.uint8).clone()


def _add_model_key(raw) -> None:
    header = _model_header(raw)
    header["model_keys"].append("newer.version.buffer")
    raw["tensors"][f"model/{len(header['model_keys']) - 1}"] = torch.zeros(3)
    _set_model_header(raw, header)


def _grow_a_weight(raw) -> None:
    header = _model_header(raw)
    index = header["model_keys"].index("network.groups.0.weights.1")
    weight = raw["tensors"][f"model/{index}"]
    raw["tensors"][f"model/{index}"] = torch.zeros(*weight.shape[:-1], 2 * weight.shape[-1])


@pytest.mark.parametrize("change", [_add_model_key, _grow_a_weight], ids=["extra-key", "shape"])
def test_a_model_state_that_does_not_fit_the_model_is_a_state_file_error(tmp_path, change) -> None:
    path = tmp_path / "run.state"
    optimizer = BayesianOptimizer.for_problem(
        LEVY,
        surrogate="deep-ensemble",
        proposer=AcquisitionProposer("ts", options={"num_candidates": 64}),
        fit_policy=ContinualFit(ContinualTraining(warm_start_steps=5, cold_refit_every=3)),
        n_initial=4,
    )
    optimizer.run(LEVY, steps=1, q=2)
    optimizer.save(path)
    rewrite_state_payload(path, change)
    with pytest.raises(StateFileError, match="unusable model_state"):
        BayesianOptimizer.load(path)


@pytest.mark.parametrize("special", ["/dev/zero", "folder", "fifo"])
def test_a_state_path_that_is_not_a_regular_file_is_refused_without_reading_it(
    tmp_path, special
) -> None:
    path = Path(special) if special == "/dev/zero" else tmp_path / special
    if special == "folder":
        path.mkdir()
    elif special == "fifo":
        os.mkfifo(path)
    with pytest.raises(StateFileError, match="not a regular file"):
        RunState.load(path)


def test_a_stale_writer_is_refused_rather_than_erasing_a_told_batch(tmp_path) -> None:
    path = tmp_path / "run.state"
    _random_run(path)
    teller, asker = BayesianOptimizer.load(path), BayesianOptimizer.load(path)
    X = teller.ask()
    teller.tell(X, LEVY.evaluate(X))
    teller.save(path)
    with pytest.raises(StaleStateFileError, match="changed since this run read it"):
        asker.save(path)
    assert BayesianOptimizer.load(path).X.shape[0] == teller.X.shape[0]


def test_two_asks_with_different_q_cannot_strand_the_first_workers_batch(tmp_path) -> None:
    path = tmp_path / "run.state"
    _random_run(path, ask=False)
    first, second = BayesianOptimizer.load(path), BayesianOptimizer.load(path)
    batch = first.ask(2)
    first.save(path)
    second.ask(3)
    with pytest.raises(StaleStateFileError):
        second.save(path)
    assert torch.equal(BayesianOptimizer.load(path).pending, batch)


def test_an_existing_file_is_replaced_only_by_its_own_run_or_with_overwrite(tmp_path) -> None:
    path = tmp_path / "run.state"
    path.write_text("my notes\n")
    optimizer = BayesianOptimizer.for_problem(LEVY, proposer="random", n_initial=3)
    with pytest.raises(StaleStateFileError, match="exists and holds something else"):
        optimizer.save(path)
    assert path.read_text() == "my notes\n"
    optimizer.save(path, overwrite=True)
    optimizer.ask()
    optimizer.save(path)
    other = BayesianOptimizer.for_problem(LEVY, proposer="random", n_initial=3)
    with pytest.raises(StaleStateFileError, match="exists and holds another run"):
        other.save(path)


def test_a_removed_state_file_is_not_silently_recreated(tmp_path) -> None:
    path = tmp_path / "run.state"
    optimizer = _random_run(path)
    path.unlink()
    with pytest.raises(StaleStateFileError, match="was removed"):
        optimizer.save(path)


def test_a_killed_writers_temporary_files_are_removed_by_the_next_save(tmp_path) -> None:
    path = tmp_path / "run.state"
    optimizer = _random_run(path)
    leftovers = [tmp_path / f".run.state.{tag}{PARTIAL_SUFFIX}" for tag in ("a1b2", "zz")]
    for leftover in leftovers:
        leftover.write_bytes(b"\0" * 1000)
    unrelated = tmp_path / ".other.state.a1b2.partial"
    unrelated.write_bytes(b"")
    optimizer.save(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [unrelated.name, "run.state"]


#: Holds the state file's lock until its standard input closes.
HOLD_LOCK_SCRIPT = """
import sys
from botorch_nn_uq.bo.state_file import locked_state_file
with locked_state_file(sys.argv[1]):
    print("locked", flush=True)
    sys.stdin.read()
"""


def test_a_command_that_finds_the_lock_held_is_refused_and_changes_nothing(
    tmp_path, capsys
) -> None:
    from botorch_nn_uq.cli import main

    path = tmp_path / "run.state"
    optimizer = _random_run(path, ask=False)
    before = path.read_bytes()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK_SCRIPT, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(StateFileBusyError, match="in use by another command"):
            optimizer.save(path)
        with pytest.raises(StateFileBusyError), locked_state_file(path):
            pass
        with pytest.raises(SystemExit) as error:
            main(["ask", "--state", str(path), "--batch-size", "2"])
        assert error.value.code == 2
        assert "in use by another command" in capsys.readouterr().err
        assert path.read_bytes() == before
    finally:
        holder.communicate(timeout=60)
    with locked_state_file(path):
        optimizer.save(path)
        optimizer.save(path)


#: One worker: repeatedly, under the lock, tell the pending batch (evaluated) or ask a
#: new one; prints each batch it told, after the save that holds it returned.
WORKER_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    from botorch_nn_uq.bo import BayesianOptimizer, registered_problem
    from botorch_nn_uq.bo.state_file import StateFileBusyError, locked_state_file

    path, iterations = sys.argv[1], int(sys.argv[2])
    problem = registered_problem("levy", 2)
    done = 0
    while done < iterations:
        try:
            with locked_state_file(path):
                optimizer = BayesianOptimizer.load(path)
                if optimizer.pending is None:
                    optimizer.ask(2)
                    optimizer.save(path)
                else:
                    X = optimizer.pending
                    optimizer.tell(X, problem.evaluate(X))
                    optimizer.save(path)
                    print("told", json.dumps(X.tolist()), flush=True)
                done += 1
        except StateFileBusyError:
            time.sleep(0.01)
    """
)


def test_concurrent_and_killed_workers_never_lose_or_duplicate_a_told_result(tmp_path) -> None:
    path = tmp_path / "run.state"
    initial = _random_run(path, steps=0, ask=False)
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER_SCRIPT, str(path), "12"],
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        for _ in range(3)
    ]
    victim = subprocess.Popen(
        [sys.executable, "-c", WORKER_SCRIPT, str(path), "1000"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    told = []
    for worker in workers:
        output, _ = worker.communicate(timeout=600)
        assert worker.returncode == 0
        told += [line for line in output.splitlines() if line.startswith("told")]
    victim.kill()
    output, _ = victim.communicate(timeout=60)
    told += [line for line in output.splitlines() if line.startswith("told")]
    final = BayesianOptimizer.load(path)
    rows = sorted(final.X[initial.X.shape[0] :].tolist())
    told_rows = [row for line in told for row in json.loads(line.removeprefix("told "))]
    # Every batch a worker told after its save returned is in the file, once; the killed
    # worker may have saved one more batch before it could print it.
    assert all(rows.count(row) == 1 for row in told_rows)
    assert len(told_rows) <= len(rows) <= len(told_rows) + 2
    assert len(told_rows) >= 3 * 6 * 2
    assert torch.unique(final.X, dim=0).shape[0] == final.X.shape[0]
    assert torch.equal(final.values, LEVY.evaluate(final.X).squeeze(-1))


def test_a_new_run_never_replaces_a_file_created_meanwhile(tmp_path, monkeypatch) -> None:
    import botorch_nn_uq.bo.state_file as state_file

    path = tmp_path / "run.state"
    write_temporary = state_file._write_temporary

    def another_command_creates_the_file_first(target: Path, content: bytes) -> str:
        monkeypatch.setattr(state_file, "_write_temporary", write_temporary)
        _random_run(target, steps=0, ask=False)
        return write_temporary(target, content)

    monkeypatch.setattr(state_file, "_write_temporary", another_command_creates_the_file_first)
    optimizer = BayesianOptimizer.for_problem(LEVY, proposer="random", n_initial=4)
    with pytest.raises(StaleStateFileError, match="created by another command meanwhile"):
        optimizer.save(path)
    assert BayesianOptimizer.load(path).n_initial == 3
    assert [p.name for p in tmp_path.iterdir()] == ["run.state"]
