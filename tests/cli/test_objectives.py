"""``optimize --objective``: a user's Python function imported from the current folder,
the box of its inputs, its direction, and its failures reported in one line."""

import csv

import pytest
import torch

from botorch_nn_uq.cli import main
from tests.cli.commands import GP, rejected


def test_a_users_function_is_optimised_from_the_command_line(objectives, capsys) -> None:
    csv_path, plot_path = objectives / "run.csv", objectives / "run.png"
    argv = ["optimize", "--objective", "user_objectives:sphere", "--bounds", "0", "1", "-1", "1"]
    assert (
        main([*argv, *GP, "--iterations", "2", "--csv", str(csv_path), "--plot", str(plot_path)])
        == 0
    )
    out = capsys.readouterr().out
    assert out.startswith("sphere (minimise) | strategy gp:logei(num_restarts=2,raw_samples=16)")
    assert "regret" not in out and "summary | best value" in out and "at x = [" in out
    with csv_path.open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 6 and rows[0]["problem"] == "sphere" and rows[0]["regret"] == "nan"
    X = torch.tensor([[float(row["x0"]), float(row["x1"])] for row in rows], dtype=torch.float64)
    assert (X[:, 0] >= 0).all() and (X[:, 1] >= -1).all()
    assert [float(row["value"]) for row in rows] == (X - 0.3).square().sum(-1).tolist()
    assert plot_path.stat().st_size > 1000


def test_one_bounds_pair_for_every_input_a_vectorized_function_and_maximising(
    objectives, capsys
) -> None:
    argv = ["optimize", "--bounds", "0", "1", "--dim", "3", *GP, "--iterations", "1", "--quiet"]
    assert main([*argv, "--objective", "user_objectives:batch_sphere", "--vectorized"]) == 0
    assert "| 5 evaluations |" in capsys.readouterr().out
    assert main([*argv, "--objective", "user_objectives:bump", "--maximize"]) == 0
    out = capsys.readouterr().out
    assert "bump (maximise)" in out


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            ["--objective", "no_such_module:f", "--bounds", "0", "1"],
            "cannot import 'no_such_module'",
        ),
        (["--objective", "user_objectives:nope", "--bounds", "0", "1"], "has no 'nope'"),
        (["--objective", "user_objectives:not_a_function", "--bounds", "0", "1"], "is a int"),
        (["--objective", "user_objectives"], "must be package.module:function"),
        (["--objective", "user_objectives:sphere"], "--objective needs the box"),
        (
            ["--objective", "user_objectives:sphere", "--bounds", "1", "0"],
            "the lower bound of input 0 is not below",
        ),
        (["--objective", "user_objectives:sphere", "--bounds", "0", "x"], "must be a number"),
        (
            ["--objective", "user_objectives:sphere", "--bounds", "0", "1", "0", "1", "--dim", "3"],
            "2 pairs for --dim 3",
        ),
        (
            ["--objective", "user_objectives:sphere", "--bounds", "0", "1", "--problem", "levy"],
            "argument --problem: not with --objective",
        ),
        (["--bounds", "0", "1"], "argument --bounds: applies to --objective only"),
        (["--maximize"], "argument --maximize: applies to --objective"),
        (
            [
                "--objective",
                "user_objectives:sphere",
                "--bounds",
                "0",
                "1",
                "--maximize",
                "--target",
                "1",
            ],
            "argument --maximize: not with --target",
        ),
    ],
)
def test_a_bad_objective_is_refused_before_any_work(objectives, arguments, message, capsys) -> None:
    assert message in rejected(["optimize", *arguments], capsys)


def test_an_objective_that_returns_nan_ends_the_run_with_a_clear_error(objectives, capsys) -> None:
    argv = ["optimize", "--objective", "user_objectives:broken", "--bounds", "0", "1", *GP]
    assert main(argv) == 1
    assert (
        "error: the objective broken failed on a batch of 4 points: ValueError: Outputs must "
        "be finite" in capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("function", "options", "expected"),
    [
        ("shifted", [], lambda X: (X - 0.3).square().sum(-1)),
        (
            "clamped",
            ["--vectorized", "--acquisition", "qlogei", "--batch-size", "2"],
            lambda X: (X.clamp(0.0, 0.5) - 0.3).square().sum(-1),
        ),
        ("graded", [], lambda X: X.sum(-1)),
    ],
)
def test_an_objective_that_changes_its_input_or_returns_a_graph_runs_to_the_end(
    changing_objectives, function, options, expected, capsys
) -> None:
    csv_path = changing_objectives / "run.csv"
    argv = ["optimize", "--objective", f"changing_objectives:{function}", "--bounds", "0", "1"]
    argv += ["--dim", "2", *GP, "--iterations", "2", "--csv", str(csv_path), *options]
    assert main([*argv]) == 0
    assert "summary | best value" in capsys.readouterr().out
    with csv_path.open() as handle:
        rows = list(csv.DictReader(handle))
    q = 2 if options else 1
    assert len(rows) == 4 + 2 * q
    # Every row holds an asked point and the objective's value there.
    X = torch.tensor([[float(row["x0"]), float(row["x1"])] for row in rows], dtype=torch.float64)
    values = torch.tensor([float(row["value"]) for row in rows], dtype=torch.float64)
    torch.testing.assert_close(values, expected(X))
