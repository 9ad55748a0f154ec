"""The run's state file as ``ask`` and ``tell`` use it: a file that cannot be saved, that
another command changed meanwhile, that is not a regular file, damaged or foreign, is
refused in one line and left as it was; each command may use another device."""

import os
import tempfile
from pathlib import Path

import pytest

from botorch_nn_uq.bo import BayesianOptimizer
from botorch_nn_uq.cli import main
from tests.cli.commands import (
    GP_RUN,
    RANDOM_RUN,
    ask,
    each_write_failure,
    levy_results,
    needs_devices,
    needs_fifos,
    refused_tell,
    rejected,
)
from tests.testing import write_results


def _fail_saving(monkeypatch, error: OSError) -> None:
    r"""Saving a state fails with ``error`` when it creates its temporary file, as in a
    read-only folder or on a full disk."""

    def failing(*args, **kwargs):
        raise error

    monkeypatch.setattr(tempfile, "mkstemp", failing)


@each_write_failure
def test_a_state_that_cannot_be_saved_is_one_line_and_leaves_no_batch(
    error, reason, asked, tmp_path, capsys, monkeypatch
) -> None:
    state, rows = asked
    before, files = state.read_bytes(), {path.name for path in tmp_path.iterdir()}
    _fail_saving(monkeypatch, error)
    new, batch = tmp_path / "new.state", tmp_path / "batch.csv"
    argv = ["ask", "--state", str(new), "--csv", str(batch), *RANDOM_RUN]
    assert f"argument --state: cannot write '{new}': {reason}" in rejected(argv, capsys)
    assert {path.name for path in tmp_path.iterdir()} == files
    # Telling the asked batch saves the state too.
    results = write_results(tmp_path / "results.csv", rows, [1.0] * len(rows))
    message = rejected(["tell", "--state", str(state), str(results)], capsys)
    assert f"argument --state: cannot write '{state}': {reason}" in message
    assert state.read_bytes() == before


def test_a_state_that_another_command_changed_meanwhile_is_one_line(
    asked, tmp_path, capsys, monkeypatch
) -> None:
    state, rows = asked
    results = write_results(tmp_path / "results.csv", rows, [1.0] * len(rows))
    tell = BayesianOptimizer.tell

    def concurrent_write(self, *args, **kwargs):
        state.write_bytes(b"another command's file\n")
        return tell(self, *args, **kwargs)

    monkeypatch.setattr(BayesianOptimizer, "tell", concurrent_write)
    message = rejected(["tell", "--state", str(state), str(results)], capsys)
    assert f"argument --state: '{state}' changed since this run read it" in message
    assert state.read_bytes() == b"another command's file\n"


@needs_devices
@needs_fifos
def test_a_state_that_is_not_a_regular_file_is_refused_before_reading(
    tmp_path, capsys, monkeypatch
) -> None:
    def forbidden(*args, **kwargs):
        raise AssertionError("the command read the --state file")

    monkeypatch.setattr(BayesianOptimizer, "load", forbidden)
    fifo = tmp_path / "state.fifo"
    os.mkfifo(fifo)
    results = tmp_path / "results.csv"
    results.write_text("step,index,x0,x1,y\n")
    for path in (tmp_path, Path("/dev/zero"), fifo):
        for command in (["ask"], ["tell", str(results)]):
            message = rejected([*command, "--state", str(path)], capsys)
            assert f"argument --state: '{path}' is not a regular file" in message


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda content: content[:-10], "is corrupted"),
        (
            lambda content: content.replace(b"state 3\n", b"state 9\n", 1),
            "is a run state of format '9'",
        ),
        (lambda content: b"x,y\n1,2\n", "is not a botorch-nn-uq run state file"),
    ],
)
def test_a_damaged_or_foreign_state_file_is_refused(
    asked, damage, message, tmp_path, capsys
) -> None:
    state, rows = asked
    state.write_bytes(damage(state.read_bytes()))
    results = levy_results(tmp_path / "results.csv", rows)
    assert message in refused_tell(state, results, capsys)
    assert message in rejected(["ask", "--state", str(state)], capsys)


def test_ask_and_tell_run_on_the_device_they_are_given(tmp_path, capsys, device) -> None:
    state, results = tmp_path / "run.state", tmp_path / "r.csv"
    on_device = ["--device", str(device)]
    for step in range(2):
        rows = ask(state, capsys, *(GP_RUN if step == 0 else ["--batch-size", "2"]), *on_device)
        told = ["tell", "--state", str(state), str(levy_results(results, rows)), *on_device]
        assert main(told) == 0
        assert f"step {step}: told {len(rows)} results" in capsys.readouterr().out
    # The state holds CPU tensors: another device continues the run.
    assert len(ask(state, capsys, "--batch-size", "1", "--device", "cpu")) == 1
    for command in (["ask", "--state", str(state)], ["tell", "--state", str(state), str(results)]):
        message = rejected([*command, "--device", "gpu"], capsys)
        assert "argument --device: must be a device name such as 'cpu' or 'cuda'" in message
