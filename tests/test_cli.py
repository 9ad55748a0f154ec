import csv
import dataclasses
import subprocess
import sys

import pytest
import torch

from botorch_nn_uq import cli
from botorch_nn_uq.bo import registry
from botorch_nn_uq.bo.loop import initial_design
from botorch_nn_uq.cli import main
from botorch_nn_uq.problems import get_bo_problem


def test_optimize_prints_iterations_summary_and_writes_files(tmp_path, capsys) -> None:
    csv_path, plot_path = tmp_path / "run.csv", tmp_path / "run.png"
    code = main(
        [
            "optimize", "--problem", "levy", "--dim", "2", "--model", "mc-dropout",
            "--acquisition", "logei", "--iterations", "2", "--n-initial", "4", "--seed", "0",
            "--num-restarts", "2", "--raw-samples", "16", "--csv", str(csv_path),
            "--plot", str(plot_path),
        ]
    )  # fmt: skip
    assert code == 0
    out = capsys.readouterr().out
    assert out.count("iter ") == 3
    assert "regret" in out and "summary" in out and "s per iteration" in out
    lines = csv_path.read_text().splitlines()
    header = "problem,model,acquisition,seed,iteration,phase,evaluation,x0,x1,value,best_value"
    assert lines[0].startswith(header)
    assert len(lines) == 1 + 4 + 2  # the header, one row per evaluation
    assert plot_path.stat().st_size > 1000


def test_unknown_names_give_clear_errors(capsys) -> None:
    for flag, value, listed in [
        ("--model", "nope", "gp, mc-dropout"),
        ("--acquisition", "nope", "logei"),
        ("--problem", "nope", "levy, rosenbrock, g-function, perm"),
    ]:
        with pytest.raises(SystemExit) as error:
            main(["optimize", flag, value])
        assert error.value.code == 2
        message = capsys.readouterr().err
        assert f"unknown {flag[2:]} 'nope'" in message and listed in message


def _rejected(argv: list[str], capsys) -> str:
    r"""The error message of ``main(argv)``, which must exit with code 2."""
    with pytest.raises(SystemExit) as error:
        main(argv)
    assert error.value.code == 2
    return capsys.readouterr().err


def test_bad_numbers_are_rejected(capsys) -> None:
    for option in ("--dim", "--n-initial"):
        message = _rejected(["optimize", option, "1"], capsys)
        assert f"argument {option}: must be at least 2; got 1" in message


def test_list_and_help(capsys) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "mc-dropout" in out and "qlogei" in out and "perm" in out
    with pytest.raises(SystemExit):
        main(["optimize", "--help"])
    help_text = capsys.readouterr().out
    for flag in ("--problem", "--dim", "--model", "--acquisition", "--iterations", "--seed"):
        assert flag in help_text


def test_version_prints_the_package_version(capsys) -> None:
    import botorch_nn_uq

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"botorch-nn-uq {botorch_nn_uq.__version__}"


def test_list_columns_fit_the_longest_name(capsys) -> None:
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line for line in lines if line.startswith("  ")]
    names = [line.split()[0] for line in rows]
    assert names == [*registry.SURROGATES, registry.RANDOM_SEARCH, *registry.ACQUISITIONS]
    # Every description starts in one column, at least two spaces after the longest name.
    longest = max(map(len, names))
    starts = {len(line) - len(line[2:].split(maxsplit=1)[1]) for line in rows}
    assert starts == {2 + longest + 2}
    assert "hyper-deep-ensemble" in names


def test_module_entry_point_runs() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "botorch_nn_uq", "list"], capture_output=True, text=True, check=True
    )
    assert "models:" in completed.stdout


def test_leaky_and_target_value_acquisitions_are_registered(capsys) -> None:
    common = ["--dim", "2", "--iterations", "1", "--n-initial", "4", "--raw-samples", "16"]
    assert main(["optimize", "--model", "mc-dropout", "--acquisition", "q-leaky-ei", *common]) == 0
    assert main(["optimize", "--model", "gp", "--acquisition", "leaky-ei", *common]) == 0
    target_run = ["optimize", "--model", "gp", "--acquisition", "robust-lcb", "--target", "3"]
    assert main([*target_run, "--aleatoric-variance", "0.01", *common]) == 0
    out = capsys.readouterr().out
    assert "target 3" in out
    message = _rejected(["optimize", "--acquisition", "robust-ei"], capsys)
    assert "argument --acquisition: robust-ei needs --target" in message
    message = _rejected(["optimize", "--acquisition", "logei", "--target", "1"], capsys)
    assert "argument --target: needs a target-value acquisition" in message
    assert "robust-ei" in message


def test_batches_thompson_sampling_and_continual_training_from_the_command_line(
    tmp_path, capsys
) -> None:
    csv_path = tmp_path / "batch.csv"
    code = main(
        [
            "optimize", "--problem", "levy", "--dim", "3", "--model", "deep-ensemble",
            "--acquisition", "ts", "--batch-size", "12", "--num-candidates", "256",
            "--continual", "--warm-start-steps", "10", "--cold-refit-every", "2", "--trust-region",
            "--iterations", "3", "--n-initial", "6", "--csv", str(csv_path),
        ]
    )  # fmt: skip
    assert code == 0
    assert "| 42 evaluations |" in capsys.readouterr().out
    with csv_path.open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 42
    # Every row carries its batch's record.
    warm = {row["iteration"]: row["warm_start"] for row in rows}
    assert warm == {"0": "False", "1": "False", "2": "True", "3": "False"}
    assert {row["batch_duplicates"] for row in rows} == {"0"}


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--batch-size", "0"], "argument --batch-size: must be at least 1"),
        (["--model", "gp", "--continual"], "argument --continual: needs a warm-startable model"),
        (["--model", "random", "--trust-region"], "argument --trust-region: needs a surrogate"),
    ],
)
def test_invalid_batch_options_are_rejected(arguments, message, capsys) -> None:
    assert message in _rejected(["optimize", *arguments], capsys)


def test_nn_draw_takes_a_problem_seed(capsys) -> None:
    argv = ["optimize", "--problem", "nn-draw", "--dim", "3", "--model", "random"]
    assert main([*argv, "--iterations", "1", "--n-initial", "3", "--problem-seed", "2"]) == 0
    seeded_out = capsys.readouterr().out
    assert main([*argv, "--iterations", "1", "--n-initial", "3"]) == 0
    assert seeded_out.split("summary")[1] != capsys.readouterr().out.split("summary")[1]
    message = _rejected(["optimize", "--problem", "levy", "--problem-seed", "1"], capsys)
    assert "argument --problem-seed: applies to nn-draw only" in message


# ------------------------------------------------------------------------------------
# Checks before any work, and an interrupted run
# ------------------------------------------------------------------------------------


@pytest.fixture
def no_work(monkeypatch):
    r"""Fail the test if the command builds the problem or starts the run."""

    def forbidden(*args, **kwargs):
        raise AssertionError("the command started working before checking its options")

    monkeypatch.setattr(cli, "get_bo_problem", forbidden)
    monkeypatch.setattr(cli, "run_bo", forbidden)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--num-restarts", "0"], "argument --num-restarts: must be at least 1; got 0"),
        (["--raw-samples", "0"], "argument --raw-samples: must be at least 1; got 0"),
        (["--num-restarts", "8", "--raw-samples", "4"], "argument --raw-samples: must be at least"),
        (["--beta", "-1"], "argument --beta: must be a finite number >= 0; got '-1'"),
        (["--beta", "inf"], "argument --beta: must be a finite number >= 0; got 'inf'"),
        (["--model", "gp", "--acquisition", "robust-ei", "--target", "nan"], "argument --target"),
        (["--seed", "-1"], "argument --seed: must be at least 0; got -1"),
        (["--seed", str(2**63)], "argument --seed: must be at most"),
        (["--seed", str(2**62)], "argument --seed: must be at most 9223372036854775 with"),
        (["--seed", "1.5"], "argument --seed: must be an integer; got '1.5'"),
        (
            ["--acquisition", "robust-ei", "--target", "0", "--aleatoric-variance", "nan"],
            "argument --aleatoric-variance: must be a finite number >= 0; got 'nan'",
        ),
        (["--aleatoric-variance", "-0.1"], "argument --aleatoric-variance: must be a finite"),
        (["--negative-slope", "1"], "argument --negative-slope: must be a number in [0, 1)"),
        (["--quantile", "0"], "argument --quantile: must be a number in (0, 1); got '0'"),
        (["--quantile", "nan"], "argument --quantile: must be a number in (0, 1)"),
        (["--dim", "two"], "argument --dim: must be an integer; got 'two'"),
        (["--iterations", "-1"], "argument --iterations: must be at least 0; got -1"),
        (["--n-initial", "0"], "argument --n-initial: must be at least 2; got 0"),
        (["--batch-size", "-3"], "argument --batch-size: must be at least 1; got -3"),
        (["--num-candidates", "0"], "argument --num-candidates: must be at least 1; got 0"),
        (["--warm-start-steps", "0"], "argument --warm-start-steps: must be at least 1"),
        (["--cold-refit-every", "0"], "argument --cold-refit-every: must be at least 1"),
        (["--problem", "nn-draw", "--problem-seed", "-1"], "argument --problem-seed: must be"),
    ],
)
def test_every_option_is_checked_before_any_work(arguments, message, capsys, no_work) -> None:
    assert message in _rejected(["optimize", *arguments], capsys)


def test_an_unwritable_csv_or_plot_fails_before_any_work(tmp_path, capsys, no_work) -> None:
    not_a_folder = tmp_path / "file.txt"
    not_a_folder.write_text("")
    for path in (not_a_folder / "run.csv", tmp_path):
        message = _rejected(["optimize", "--csv", str(path)], capsys)
        assert f"argument --csv: cannot write '{path}'" in message
    message = _rejected(["optimize", "--plot", str(tmp_path)], capsys)
    assert f"argument --plot: cannot write '{tmp_path}'" in message


def test_a_valid_command_passes_the_checks(tmp_path, no_work) -> None:
    # The checks let it through: it fails only where the run would start.
    with pytest.raises(AssertionError, match="started working"):
        main(["optimize", "--csv", str(tmp_path / "new" / "run.csv"), "--seed", "12345"])


def test_an_interrupted_run_keeps_every_evaluation_in_the_csv(tmp_path, capsys, monkeypatch):
    csv_path = tmp_path / "run.csv"
    spec = registry.SURROGATES["gp"]
    rows_at_fit: list[int] = []

    def build(*args, **kwargs):
        # What a SIGKILL now would leave: the rows are on disk as soon as evaluated.
        rows_at_fit.append(len(csv_path.read_text().splitlines()) - 1)
        if len(rows_at_fit) == 3:
            raise KeyboardInterrupt
        return spec.build(*args, **kwargs)

    monkeypatch.setitem(registry.SURROGATES, "gp", dataclasses.replace(spec, build=build))
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
    assert [row["iteration"] for row in rows] == ["0", "0", "0", "1", "1", "2", "2"]
    assert [row["phase"] for row in rows] == ["initial"] * 3 + ["bo"] * 4
    assert [row["evaluation"] for row in rows] == [str(i) for i in range(1, 8)]
    assert {(row["problem"], row["model"], row["seed"]) for row in rows} == {("levy-2d", "gp", "4")}
    problem = get_bo_problem("levy", 2)
    X = torch.tensor([[float(row["x0"]), float(row["x1"])] for row in rows], dtype=torch.float64)
    assert torch.equal(X[:3], initial_design(problem, 3, seed=4))
    assert [float(row["value"]) for row in rows] == problem.evaluate(X).tolist()
    assert float(rows[-1]["best_value"]) == min(float(row["value"]) for row in rows)
