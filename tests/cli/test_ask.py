"""``botorch-nn-uq ask``: a new run or the next batch of one, the pending batch asked
again, and its ``--csv``: no existing file replaced without ``--overwrite``, never the
state file, a stream written directly, and a file that cannot be written leaving the run
as it was and no file behind."""

import csv
import errno
import io
import os
import threading
from pathlib import Path

from botorch_nn_uq.cli import main
from tests.cli.commands import (
    GP_RUN,
    RANDOM_RUN,
    ask,
    each_write_failure,
    needs_devices,
    needs_fifos,
    rejected,
)


def _files(folder: Path) -> set[str]:
    return {path.name for path in folder.iterdir()}


def test_asking_again_before_telling_gives_the_same_batch(tmp_path, capsys) -> None:
    state = tmp_path / "run.state"
    first = ask(state, capsys, *GP_RUN)
    assert ask(state, capsys) == first
    batch_path = tmp_path / "batch.csv"
    assert main(["ask", "--state", str(state), "--csv", str(batch_path)]) == 0
    assert "the initial design: 4 points in" in capsys.readouterr().err
    with batch_path.open() as handle:
        assert list(csv.DictReader(handle)) == first


def test_asking_again_prints_the_pending_batch_whatever_its_size(asked, capsys) -> None:
    state, rows = asked
    assert ask(state, capsys) == rows
    assert ask(state, capsys, "--batch-size", "3") == rows
    message = rejected(["ask", "--state", str(state), "--batch-size", "1"], capsys)
    assert "argument --batch-size: The batch of step 1 (3 points) was asked and not told" in message


def test_ask_refuses_new_run_options_for_an_existing_run_and_needs_bounds_for_a_new_one(
    asked, tmp_path, capsys
) -> None:
    state, _ = asked
    message = rejected(["ask", "--state", str(state), "--model", "gp"], capsys)
    assert (
        "argument --model: " in message and "holds a run whose strategy is in the file" in message
    )
    message = rejected(["ask", "--state", str(tmp_path / "new.state")], capsys)
    assert "argument --bounds: " in message and "a new run needs the box" in message
    assert not (tmp_path / "new.state").exists()
    message = rejected(["ask", "--state", str(state), "--batch-size", "2"], capsys)
    assert "argument --batch-size: The batch of step 1 (3 points) was asked and not told" in message
    message = rejected(
        ["ask", "--state", str(tmp_path / "t.state"), *GP_RUN, "--target", "1"], capsys
    )
    assert "argument --target: needs a target-value acquisition" in message


# ------------------------------------------------------------------------------------
# No existing file is replaced without --overwrite
# ------------------------------------------------------------------------------------


def test_ask_keeps_an_existing_csv_unless_overwrite_is_given(asked, tmp_path, capsys) -> None:
    state, rows = asked
    batch = tmp_path / "batch.csv"
    batch.write_text("the results typed in so far\n")
    before = state.read_bytes()
    message = rejected(["ask", "--state", str(state), "--csv", str(batch)], capsys)
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
            message = rejected(argv, capsys)
            assert f"argument --csv: '{name}' is the --state file" in message
    assert state.read_bytes() == before
    # A new run neither: no state file is made.
    new = tmp_path / "new.state"
    message = rejected(["ask", "--state", str(new), "--csv", str(new), *RANDOM_RUN], capsys)
    assert "is the --state file" in message and not new.exists()


def test_ask_refuses_a_folder_as_csv(asked, tmp_path, capsys) -> None:
    state, _ = asked
    for overwrite in ([], ["--overwrite"]):
        message = rejected(
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


# ------------------------------------------------------------------------------------
# A --csv that cannot be written
# ------------------------------------------------------------------------------------


@needs_devices
def test_a_full_device_as_csv_changes_no_state(asked, tmp_path, capsys) -> None:
    new = tmp_path / "new.state"
    message = rejected(["ask", "--state", str(new), "--csv", "/dev/full", *RANDOM_RUN], capsys)
    assert "argument --csv: cannot write '/dev/full': No space left on device" in message
    assert not new.exists()
    # The corrected command then starts the run.
    assert main(["ask", "--state", str(new), "--csv", str(tmp_path / "b.csv"), *RANDOM_RUN]) == 0
    state, _ = asked
    before = state.read_bytes()
    message = rejected(["ask", "--state", str(state), "--csv", "/dev/full"], capsys)
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


@each_write_failure
def test_a_csv_folder_that_cannot_be_written_leaves_no_file(
    error, reason, tmp_path, capsys, monkeypatch
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    batch, state = out / "batch.csv", tmp_path / "run.state"
    _refuse_files_in(monkeypatch, out, error)
    argv = ["ask", "--state", str(state), "--csv", str(batch), *RANDOM_RUN]
    message = rejected(argv, capsys)
    assert f"argument --csv: cannot write '{batch}': {reason}" in message
    assert not state.exists() and _files(out) == set()
    monkeypatch.undo()
    assert main(argv) == 0
    assert state.exists() and _files(out) == {"batch.csv"}


def test_a_batch_that_cannot_be_moved_into_place_is_one_line(tmp_path, capsys, monkeypatch) -> None:
    state, batch = tmp_path / "run.state", tmp_path / "batch.csv"
    replace = os.replace

    def failing(source, destination):
        if Path(destination) == batch:
            raise PermissionError(errno.EACCES, "Permission denied")
        replace(source, destination)

    monkeypatch.setattr(os, "replace", failing)
    argv = ["ask", "--state", str(state), "--csv", str(batch), *RANDOM_RUN]
    assert f"argument --csv: cannot write '{batch}': Permission denied" in rejected(argv, capsys)
    # The new run is undone, so the same command can be given again.
    assert _files(tmp_path) == set()
    monkeypatch.undo()
    assert main(argv) == 0 and batch.exists()
