"""``optimize --csv``: a row per evaluation on disk as soon as it is made, so an interrupted
run keeps every evaluation; a file that cannot be written fails before any evaluation and
leaves no file."""

import csv
import dataclasses
import errno
from pathlib import Path

import pytest
import torch

from botorch_nn_uq.bo import initial_design, surrogates
from botorch_nn_uq.cli import evaluations_csv, main
from botorch_nn_uq.problems import get_bo_problem
from tests.cli.commands import rejected


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_a_full_disk_fails_before_any_evaluation(capsys, no_work) -> None:
    message = rejected(["optimize", "--csv", "/dev/full", "--overwrite"], capsys)
    assert "argument --csv: cannot write '/dev/full': No space left on device" in message


def test_an_optimize_csv_that_cannot_be_written_is_removed(tmp_path, capsys, monkeypatch):
    path = tmp_path / "run.csv"

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(evaluations_csv.EvaluationWriter, "__init__", full_disk)
    message = rejected(["optimize", "--model", "random", "--csv", str(path)], capsys)
    assert f"argument --csv: cannot write '{path}': No space left on device" in message
    assert not path.exists()


def test_an_interrupted_run_keeps_every_evaluation_in_the_csv(tmp_path, capsys, monkeypatch):
    csv_path = tmp_path / "run.csv"
    spec = surrogates.SURROGATES["gp"]
    rows_at_fit: list[int] = []

    def build(*args, **kwargs):
        # What a SIGKILL now would leave: the rows are on disk as soon as evaluated.
        rows_at_fit.append(len(csv_path.read_text().splitlines()) - 1)
        if len(rows_at_fit) == 3:
            raise KeyboardInterrupt
        return spec.build(*args, **kwargs)

    monkeypatch.setitem(surrogates.SURROGATES, "gp", dataclasses.replace(spec, build=build))
    code = main(
        [
            "optimize", "--problem", "levy", "--dim", "2", "--model", "gp", "--acquisition",
            "qlogei", "--batch-size", "2", "--iterations", "5", "--n-initial", "3", "--seed",
            "4", "--num-restarts", "2", "--raw-samples", "16", "--csv", str(csv_path), "--quiet",
        ]
    )  # fmt: skip
    assert code == 130
    assert f"interrupted; {csv_path} holds its 7 evaluations" in capsys.readouterr().err
    assert rows_at_fit == [3, 5, 7]
    with csv_path.open() as handle:
        rows = list(csv.DictReader(handle))
    # The initial design and the two batches before the third fit, nothing more.
    assert [row["step"] for row in rows] == ["0", "0", "0", "1", "1", "2", "2"]
    assert [row["phase"] for row in rows] == ["initial"] * 3 + ["bo"] * 4
    assert [row["evaluation"] for row in rows] == [str(i) for i in range(1, 8)]
    assert {(row["problem"], row["model"], row["seed"]) for row in rows} == {("levy-2d", "gp", "4")}
    problem = get_bo_problem("levy", 2)
    X = torch.tensor([[float(row["x0"]), float(row["x1"])] for row in rows], dtype=torch.float64)
    assert torch.equal(X[:3], initial_design(problem.bounds, 3, seed=4))
    assert [float(row["value"]) for row in rows] == problem.evaluate(X).tolist()
    assert float(rows[-1]["best_value"]) == min(float(row["value"]) for row in rows)
