import subprocess
import sys

import pytest

from botorch_nn_uq.cli import main


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
    assert lines[0].startswith("problem,model,acquisition,seed,iteration")
    assert len(lines) == 4
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


def test_bad_numbers_are_rejected(capsys) -> None:
    assert main(["optimize", "--dim", "1"]) == 2
    assert "--dim" in capsys.readouterr().err
    assert main(["optimize", "--n-initial", "1"]) == 2


def test_list_and_help(capsys) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "mc-dropout" in out and "qlogei" in out and "perm" in out
    with pytest.raises(SystemExit):
        main(["optimize", "--help"])
    help_text = capsys.readouterr().out
    for flag in ("--problem", "--dim", "--model", "--acquisition", "--iterations", "--seed"):
        assert flag in help_text


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
    assert main(["optimize", "--acquisition", "robust-ei"]) == 2
    assert "needs --target" in capsys.readouterr().err
    assert main(["optimize", "--acquisition", "logei", "--target", "1"]) == 2
    assert "robust-ei" in capsys.readouterr().err


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
    rows = csv_path.read_text().splitlines()
    header = rows[0].split(",")
    warm = [row.split(",")[header.index("warm_start")] for row in rows[1:]]
    duplicates = [row.split(",")[header.index("batch_duplicates")] for row in rows[1:]]
    assert warm == ["False", "False", "True", "False"] and set(duplicates) == {"0"}


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--batch-size", "0"], "--batch-size must be at least 1"),
        (["--model", "gp", "--continual"], "--continual needs a warm-startable model"),
        (["--model", "random", "--trust-region"], "--trust-region needs a surrogate"),
    ],
)
def test_invalid_batch_options_are_rejected(arguments, message, capsys) -> None:
    assert main(["optimize", *arguments]) == 2
    assert message in capsys.readouterr().err


def test_nn_draw_takes_a_problem_seed(capsys) -> None:
    argv = ["optimize", "--problem", "nn-draw", "--dim", "3", "--model", "random"]
    assert main([*argv, "--iterations", "1", "--n-initial", "3", "--problem-seed", "2"]) == 0
    seeded_out = capsys.readouterr().out
    assert main([*argv, "--iterations", "1", "--n-initial", "3"]) == 0
    assert seeded_out.split("summary")[1] != capsys.readouterr().out.split("summary")[1]
    assert main(["optimize", "--problem", "levy", "--problem-seed", "1"]) == 2
    assert "--problem-seed applies to nn-draw only" in capsys.readouterr().err
