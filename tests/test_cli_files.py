"""The files of the command line: ``ask --csv`` and ``optimize --plot`` replace no
existing file unless ``--overwrite``, the batch never lands on the run's state file, a
file that cannot be read or written is refused in one line (exit 2) and a refused
command leaves the state file as it was and no new file behind."""

import csv
import errno
import io
import os
import tempfile
import threading
from pathlib import Path

import pytest

from botorch_nn_uq import cli
from botorch_nn_uq.cli import main
from tests.testing import write_results

RANDOM_RUN = ["--bounds", "-10", "10", "--dim", "2", "--model", "random", "--n-initial", "4"]
DEVICES = [Path(device) for device in ("/dev/null", "/dev/full", "/dev/zero")]
needs_devices = pytest.mark.skipif(
    not all(device.exists() for device in DEVICES), reason="needs /dev/null, /dev/full, /dev/zero"
)
needs_fifos = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs (POSIX)")


def _rejected(argv: list[str], capsys) -> str:
    r"""The error of ``main(argv)``, which must exit with code 2 in one line after the
    usage."""
    with pytest.raises(SystemExit) as error:
        main(argv)
    assert error.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.splitlines()[-1].startswith("botorch-nn-uq ")
    return err


def _ask(state: Path, capsys, *arguments: str) -> list[dict[str, str]]:
    assert main(["ask", "--state", str(state), *arguments]) == 0
    return list(csv.DictReader(io.StringIO(capsys.readouterr().out)))


def _tell(state: Path, rows: list[dict[str, str]], results: Path, capsys) -> None:
    write_results(results, rows, [float(row["x0"]) ** 2 for row in rows])
    assert main(["tell", "--state", str(state), str(results)]) == 0
    capsys.readouterr()


@pytest.fixture
def asked(tmp_path, capsys) -> tuple[Path, list[dict[str, str]]]:
    r"""A random-search run whose initial design was told and whose step-1 batch of 3
    points is asked, and the rows of that batch."""
    state = tmp_path / "run.state"
    _tell(state, _ask(state, capsys, *RANDOM_RUN), tmp_path / "design.csv", capsys)
    return state, _ask(state, capsys, "--batch-size", "3")


def _files(folder: Path) -> set[str]:
    return {path.name for path in folder.iterdir()}


# ------------------------------------------------------------------------------------
# No existing file is replaced without --overwrite
# ------------------------------------------------------------------------------------


def test_ask_keeps_an_existing_csv_unless_overwrite_is_given(asked, tmp_path, capsys) -> None:
    state, rows = asked
    batch = tmp_path / "batch.csv"
    batch.write_text("the results typed in so far\n")
    before = state.read_bytes()
    message = _rejected(["ask", "--state", str(state), "--csv", str(batch)], capsys)
    assert f"argument --csv: '{batch}' exists; pass --overwrite to replace it" in message
    assert batch.read_text() == "the results typed in so far\n"
    assert state.read_bytes() == before
    assert main(["ask", "--state", str(state), "--csv", str(batch), "--overwrite"]) == 0
    with batch.open() as handle:
        assert list(csv.DictReader(handle)) == rows


def test_ask_never_writes_the_batch_over_the_run_state(asked, tmp_path, capsys) -> None:
    state, _ = asked
    before = state.read_bytes()
    (tmp_path / "link.state").symlink_to(state)
    (tmp_path / "sub").mkdir()
    for name in (str(state), f"{tmp_path}/sub/../run.state", str(tmp_path / "link.state")):
        for overwrite in ([], ["--overwrite"]):
            argv = ["ask", "--state", str(state), "--csv", name, *overwrite]
            message = _rejected(argv, capsys)
            assert f"argument --csv: '{name}' is the --state file" in message
    assert state.read_bytes() == before
    # A new run neither: no state file is made.
    new = tmp_path / "new.state"
    message = _rejected(["ask", "--state", str(new), "--csv", str(new), *RANDOM_RUN], capsys)
    assert "is the --state file" in message and not new.exists()


def test_ask_refuses_a_folder_as_csv(asked, tmp_path, capsys) -> None:
    state, _ = asked
    for overwrite in ([], ["--overwrite"]):
        message = _rejected(
            ["ask", "--state", str(state), "--csv", str(tmp_path), *overwrite], capsys
        )
        assert f"argument --csv: cannot write '{tmp_path}': it is a folder" in message


@needs_devices
def test_ask_writes_to_a_device_without_overwrite(tmp_path, capsys) -> None:
    state = tmp_path / "run.state"
    assert main(["ask", "--state", str(state), "--csv", "/dev/null", *RANDOM_RUN]) == 0
    assert "the initial design: 4 points in /dev/null" in capsys.readouterr().err
    assert state.exists()


@needs_fifos
def test_ask_writes_to_a_fifo_without_overwrite(asked, tmp_path, capsys) -> None:
    state, rows = asked
    fifo = tmp_path / "batch.fifo"
    os.mkfifo(fifo)
    received: list[str] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()), daemon=True)
    reader.start()
    assert main(["ask", "--state", str(state), "--csv", str(fifo)]) == 0
    reader.join(timeout=10)
    assert list(csv.DictReader(io.StringIO(received[0]))) == rows


def test_optimize_keeps_an_existing_plot_unless_overwrite_is_given(
    tmp_path, capsys, monkeypatch
) -> None:
    def forbidden(*args, **kwargs):
        raise AssertionError("the command started working before checking its options")

    monkeypatch.setattr(cli, "get_bo_problem", forbidden)
    plot = tmp_path / "run.png"
    plot.write_bytes(b"an earlier plot")
    message = _rejected(["optimize", "--plot", str(plot)], capsys)
    assert f"argument --plot: '{plot}' exists; pass --overwrite to replace it" in message
    assert plot.read_bytes() == b"an earlier plot"
    with pytest.raises(AssertionError, match="started working"):
        main(["optimize", "--plot", str(plot), "--overwrite"])


# ------------------------------------------------------------------------------------
# Files that cannot be written or read
# ------------------------------------------------------------------------------------


def test_an_optimize_csv_that_cannot_be_written_is_removed(tmp_path, capsys, monkeypatch):
    path = tmp_path / "run.csv"

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cli._EvaluationWriter, "__init__", full_disk)
    message = _rejected(["optimize", "--model", "random", "--csv", str(path)], capsys)
    assert f"argument --csv: cannot write '{path}': No space left on device" in message
    assert not path.exists()


@needs_devices
def test_a_full_device_as_csv_changes_no_state(asked, tmp_path, capsys) -> None:
    new = tmp_path / "new.state"
    message = _rejected(["ask", "--state", str(new), "--csv", "/dev/full", *RANDOM_RUN], capsys)
    assert "argument --csv: cannot write '/dev/full': No space left on device" in message
    assert not new.exists()
    # The corrected command then starts the run.
    assert main(["ask", "--state", str(new), "--csv", str(tmp_path / "b.csv"), *RANDOM_RUN]) == 0
    state, _ = asked
    before = state.read_bytes()
    message = _rejected(["ask", "--state", str(state), "--csv", "/dev/full"], capsys)
    assert "argument --csv: cannot write '/dev/full': No space left on device" in message
    assert state.read_bytes() == before


def _refuse_files_in(monkeypatch, folder: Path, error: OSError) -> None:
    r"""``os.open`` fails with ``error`` for every file in ``folder``, as in a read-only
    folder or on a full disk (root writes anywhere, so no permission can simulate it)."""
    open_file = os.open

    def failing(path, *args, **kwargs):
        if Path(path).parent == folder:
            raise error
        return open_file(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", failing)


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (PermissionError(errno.EACCES, "Permission denied"), "Permission denied"),
        (OSError(errno.ENOSPC, "No space left on device"), "No space left on device"),
    ],
)
def test_a_csv_folder_that_cannot_be_written_leaves_no_file(
    error, reason, tmp_path, capsys, monkeypatch
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    batch, state = out / "batch.csv", tmp_path / "run.state"
    _refuse_files_in(monkeypatch, out, error)
    argv = ["ask", "--state", str(state), "--csv", str(batch), *RANDOM_RUN]
    message = _rejected(argv, capsys)
    assert f"argument --csv: cannot write '{batch}': {reason}" in message
    assert not state.exists() and _files(out) == set()
    monkeypatch.undo()
    assert main(argv) == 0
    assert state.exists() and _files(out) == {"batch.csv"}


def _fail_saving(monkeypatch, error: OSError) -> None:
    r"""Saving a state fails with ``error`` when it creates its temporary file, as in a
    read-only folder or on a full disk."""

    def failing(*args, **kwargs):
        raise error

    monkeypatch.setattr(tempfile, "mkstemp", failing)


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (PermissionError(errno.EACCES, "Permission denied"), "Permission denied"),
        (OSError(errno.ENOSPC, "No space left on device"), "No space left on device"),
    ],
)
def test_a_state_that_cannot_be_saved_is_one_line_and_leaves_no_batch(
    error, reason, asked, tmp_path, capsys, monkeypatch
) -> None:
    state, rows = asked
    before, files = state.read_bytes(), _files(tmp_path)
    _fail_saving(monkeypatch, error)
    new, batch = tmp_path / "new.state", tmp_path / "batch.csv"
    argv = ["ask", "--state", str(new), "--csv", str(batch), *RANDOM_RUN]
    assert f"argument --state: cannot write '{new}': {reason}" in _rejected(argv, capsys)
    assert _files(tmp_path) == files
    # Telling the asked batch saves the state too.
    results = tmp_path / "results.csv"
    with results.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=[*rows[0], "y"])
        writer.writeheader()
        writer.writerows({**row, "y": 1.0} for row in rows)
    message = _rejected(["tell", "--state", str(state), str(results)], capsys)
    assert f"argument --state: cannot write '{state}': {reason}" in message
    assert state.read_bytes() == before


def test_a_state_that_another_command_changed_meanwhile_is_one_line(
    asked, tmp_path, capsys, monkeypatch
) -> None:
    state, rows = asked
    results = tmp_path / "results.csv"
    with results.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=[*rows[0], "y"])
        writer.writeheader()
        writer.writerows({**row, "y": 1.0} for row in rows)
    tell = cli.BayesianOptimizer.tell

    def concurrent_write(self, *args, **kwargs):
        state.write_bytes(b"another command's file\n")
        return tell(self, *args, **kwargs)

    monkeypatch.setattr(cli.BayesianOptimizer, "tell", concurrent_write)
    message = _rejected(["tell", "--state", str(state), str(results)], capsys)
    assert f"argument --state: '{state}' changed since this run read it" in message
    assert state.read_bytes() == b"another command's file\n"


def test_a_batch_that_cannot_be_moved_into_place_is_one_line(tmp_path, capsys, monkeypatch) -> None:
    state, batch = tmp_path / "run.state", tmp_path / "batch.csv"
    replace = os.replace

    def failing(source, destination):
        if Path(destination) == batch:
            raise PermissionError(errno.EACCES, "Permission denied")
        replace(source, destination)

    monkeypatch.setattr(os, "replace", failing)
    argv = ["ask", "--state", str(state), "--csv", str(batch), *RANDOM_RUN]
    assert f"argument --csv: cannot write '{batch}': Permission denied" in _rejected(argv, capsys)
    # The new run is undone, so the same command can be given again.
    assert _files(tmp_path) == set()
    monkeypatch.undo()
    assert main(argv) == 0 and batch.exists()


@needs_devices
@needs_fifos
def test_a_state_that_is_not_a_regular_file_is_refused_before_reading(
    tmp_path, capsys, monkeypatch
) -> None:
    def forbidden(*args, **kwargs):
        raise AssertionError("the command read the --state file")

    monkeypatch.setattr(cli.BayesianOptimizer, "load", forbidden)
    fifo = tmp_path / "state.fifo"
    os.mkfifo(fifo)
    results = tmp_path / "results.csv"
    results.write_text("step,index,x0,x1,y\n")
    for path in (tmp_path, Path("/dev/zero"), fifo):
        for command in (["ask"], ["tell", str(results)]):
            message = _rejected([*command, "--state", str(path)], capsys)
            assert f"argument --state: '{path}' is not a regular file" in message


def test_a_results_file_that_cannot_be_read_is_one_line(asked, tmp_path, capsys, monkeypatch):
    state, _ = asked
    before = state.read_bytes()
    message = _rejected(["tell", "--state", str(state), str(tmp_path)], capsys)
    assert f"argument results: {tmp_path}: Is a directory" in message
    results = tmp_path / "results.csv"
    results.write_text("step,index,x0,x1,y\n")
    open_path = Path.open

    def unreadable(path, *args, **kwargs):
        if path == results:
            raise PermissionError(errno.EACCES, "Permission denied")
        return open_path(path, *args, **kwargs)

    monkeypatch.setattr(Path, "open", unreadable)
    message = _rejected(["tell", "--state", str(state), str(results)], capsys)
    assert f"argument results: {results}: Permission denied" in message
    assert state.read_bytes() == before
