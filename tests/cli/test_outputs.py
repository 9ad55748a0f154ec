"""The files ``optimize`` writes: a ``--csv`` or ``--plot`` that cannot be written, or that
would replace a file without ``--overwrite``, is refused before any work."""

import pytest

from botorch_nn_uq.cli import main
from tests.cli.commands import rejected


def test_an_unwritable_csv_or_plot_fails_before_any_work(tmp_path, capsys, no_work) -> None:
    not_a_folder = tmp_path / "file.txt"
    not_a_folder.write_text("")
    for path in (not_a_folder / "run.csv", tmp_path):
        message = rejected(["optimize", "--csv", str(path), "--overwrite"], capsys)
        assert f"argument --csv: cannot write '{path}'" in message
    message = rejected(["optimize", "--plot", str(tmp_path)], capsys)
    assert f"argument --plot: cannot write '{tmp_path}'" in message


def test_an_existing_csv_is_kept_unless_overwrite_is_given(tmp_path, capsys, no_work) -> None:
    path = tmp_path / "run.csv"
    path.write_text("earlier rows\n")
    message = rejected(["optimize", "--csv", str(path)], capsys)
    assert f"argument --csv: '{path}' exists; pass --overwrite" in message
    assert path.read_text() == "earlier rows\n"
    message = rejected(["optimize", "--csv", str(path), "--plot", str(path), "--overwrite"], capsys)
    assert "argument --plot: is the --csv file" in message
    assert path.read_text() == "earlier rows\n"


def test_optimize_keeps_an_existing_plot_unless_overwrite_is_given(
    tmp_path, capsys, no_work
) -> None:
    plot = tmp_path / "run.png"
    plot.write_bytes(b"an earlier plot")
    message = rejected(["optimize", "--plot", str(plot)], capsys)
    assert f"argument --plot: '{plot}' exists; pass --overwrite to replace it" in message
    assert plot.read_bytes() == b"an earlier plot"
    with pytest.raises(AssertionError, match="started working"):
        main(["optimize", "--plot", str(plot), "--overwrite"])
