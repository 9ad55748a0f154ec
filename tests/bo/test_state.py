"""The run state's file: written atomically, read back exactly, and refused with a clear
error when it is not a state file, of another version, corrupted or reshaped."""

import pytest
import torch

from botorch_nn_uq.bo import BayesianOptimizer, StateFileError, registered_problem, step_seed
from botorch_nn_uq.bo.state import STATE_FORMAT, STATE_MAGIC, RunState
from tests.testing import rewrite_state_payload, saved_as_if_on_cuda


@pytest.fixture
def saved(tmp_path):
    problem = registered_problem("levy", 2)
    optimizer = BayesianOptimizer.for_problem(problem, proposer="random", n_initial=3, seed=5)
    optimizer.run(problem, steps=2, q=2)
    optimizer.ask(2)
    path = tmp_path / "run.state"
    optimizer.save(path)
    return optimizer, path


def test_the_state_is_read_back_exactly(saved) -> None:
    optimizer, path = saved
    loaded = BayesianOptimizer.load(path)
    for name in ("X", "Y", "values", "pending"):
        assert torch.equal(getattr(loaded, name), getattr(optimizer, name))
    assert loaded.records == optimizer.records and loaded.step == optimizer.step == 4
    assert torch.equal(loaded.state.random_state, optimizer.state.random_state)
    assert [p.name for p in path.parent.iterdir()] == ["run.state"]


def test_a_state_saved_on_a_gpu_loads_without_one(saved, tmp_path) -> None:
    optimizer, _ = saved
    path = tmp_path / "gpu.state"
    with saved_as_if_on_cuda():
        optimizer.save(path)
    loaded = BayesianOptimizer.load(path)
    for name in ("X", "Y", "values", "pending"):
        assert torch.equal(getattr(loaded, name), getattr(optimizer, name))
        assert getattr(loaded, name).device.type == "cpu"


def test_step_seeds_follow_the_one_rule() -> None:
    assert [step_seed(3, step) for step in range(3)] == [3, 3001, 3002]
    with pytest.raises(ValueError, match="seed must be at most"):
        BayesianOptimizer([[0.0], [1.0]], seed=2**62)


def _rewrite(path, transform) -> None:
    path.write_bytes(transform(path.read_bytes()))


@pytest.mark.parametrize(
    ("transform", "message"),
    [
        (lambda content: b"PK\x03\x04" + content, "is not a botorch-nn-uq run state file"),
        (
            lambda content: content.replace(
                f"{STATE_MAGIC.decode()} {STATE_FORMAT}".encode(),
                f"{STATE_MAGIC.decode()} 99".encode(),
                1,
            ),
            "is a run state of format '99'",
        ),
        (lambda content: content[:-40], "is corrupted"),
        (lambda content: content[:-1] + bytes([content[-1] ^ 1]), "is corrupted"),
    ],
    ids=["foreign", "version", "truncated", "flipped-byte"],
)
def test_a_bad_file_is_refused_clearly(saved, transform, message) -> None:
    _, path = saved
    _rewrite(path, transform)
    with pytest.raises(StateFileError, match=message):
        BayesianOptimizer.load(path)


@pytest.mark.parametrize(
    "change",
    [
        lambda raw: raw["tensors"].pop("X"),
        lambda raw: raw["tensors"].__setitem__("X", torch.zeros(2, 2, dtype=torch.float64)),
        lambda raw: raw["tensors"].__setitem__("Y", raw["tensors"]["Y"] * float("nan")),
        lambda raw: raw.__setitem__("extra", 1),
        lambda raw: raw.__setitem__("header", torch.zeros(3)),
    ],
    ids=["missing-tensor", "wrong-shape", "non-finite", "extra-key", "header-type"],
)
def test_a_crafted_layout_is_refused(saved, change) -> None:
    _, path = saved
    rewrite_state_payload(path, change)
    with pytest.raises(StateFileError, match="unexpected"):
        RunState.load(path)


def test_loading_runs_no_code_from_the_file(saved, tmp_path) -> None:
    import hashlib
    import pickle

    class Payload:
        def __reduce__(self):
            return (exec, ("open('" + str(tmp_path / "pwned") + "', 'w').close()",))

    _, path = saved
    payload = pickle.dumps(Payload())
    first = path.read_bytes().partition(b"\n")[0]
    path.write_bytes(first + b"\n" + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload)
    with pytest.raises(StateFileError, match="unexpected layout"):
        RunState.load(path)
    assert not (tmp_path / "pwned").exists()
