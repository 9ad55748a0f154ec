"""``botorch-nn-uq optimize``: a run on a built-in problem end to end, every option checked
before any work, ``--threads`` for the run only, and ``--device``."""

import csv

import pytest
import torch

from botorch_nn_uq.bo import BayesianOptimizer
from botorch_nn_uq.cli import main
from tests.cli.commands import rejected
from tests.cli.fakes import FAKE_RUN, fake_bo, fake_machine, levy_minimiser


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
    header = "problem,model,acquisition,seed,step,phase,evaluation,x0,x1,value,best_value"
    assert lines[0].startswith(header)
    assert len(lines) == 1 + 4 + 2  # the header, one row per evaluation
    assert plot_path.stat().st_size > 1000


def test_bad_numbers_are_rejected(capsys) -> None:
    for option in ("--dim", "--n-initial"):
        message = rejected(["optimize", option, "1"], capsys)
        assert f"argument {option}: must be at least 2; got 1" in message


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
    warm = {row["step"]: row["warm_start"] for row in rows}
    assert warm == {"0": "False", "1": "False", "2": "True", "3": "False"}
    assert {row["batch_duplicates"] for row in rows} == {"0"}


def test_fixed_dimension_problems_default_to_their_dimension(capsys) -> None:
    argv = ["optimize", "--problem", "rover", "--model", "random", "--iterations", "1"]
    assert main([*argv, "--n-initial", "3"]) == 0
    assert "rover" in capsys.readouterr().out


def test_nn_draw_takes_a_problem_seed(capsys) -> None:
    argv = ["optimize", "--problem", "nn-draw", "--dim", "3", "--model", "random"]
    assert main([*argv, "--iterations", "1", "--n-initial", "3", "--problem-seed", "2"]) == 0
    seeded_out = capsys.readouterr().out
    assert main([*argv, "--iterations", "1", "--n-initial", "3"]) == 0
    assert seeded_out.split("summary")[1] != capsys.readouterr().out.split("summary")[1]
    message = rejected(["optimize", "--problem", "levy", "--problem-seed", "1"], capsys)
    assert "argument --problem-seed: applies to nn-draw only" in message


# ------------------------------------------------------------------------------------
# Checks before any work
# ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--num-restarts", "0"], "argument --num-restarts: must be at least 1; got 0"),
        (["--raw-samples", "0"], "argument --raw-samples: must be at least 1; got 0"),
        (["--num-restarts", "8", "--raw-samples", "4"], "argument --raw-samples: must be at least"),
        (["--beta", "-1"], "argument --beta: must be non-negative and finite; got '-1'"),
        (["--beta", "inf"], "argument --beta: must be non-negative and finite; got 'inf'"),
        (["--model", "gp", "--acquisition", "robust-ei", "--target", "nan"], "argument --target"),
        (["--seed", "-1"], "argument --seed: must be at least 0; got -1"),
        (["--seed", str(2**63)], "argument --seed: must be at most"),
        (["--seed", str(2**62)], "argument --seed: must be at most 9223372036853775; got"),
        (["--seed", "1.5"], "argument --seed: must be an integer; got '1.5'"),
        (
            ["--acquisition", "robust-ei", "--target", "0", "--aleatoric-variance", "nan"],
            "argument --aleatoric-variance: must be non-negative and finite; got 'nan'",
        ),
        (["--aleatoric-variance", "-0.1"], "argument --aleatoric-variance: must be non-negative"),
        (["--negative-slope", "1"], "argument --negative-slope: must be a real number in [0, 1)"),
        (["--quantile", "0"], "argument --quantile: must be a real number in (0, 1); got '0'"),
        (["--quantile", "nan"], "argument --quantile: must be a real number in (0, 1)"),
        (["--dim", "two"], "argument --dim: must be an integer; got 'two'"),
        (["--iterations", "-1"], "argument --iterations: must be at least 0; got -1"),
        (["--n-initial", "0"], "argument --n-initial: must be at least 2; got 0"),
        (["--batch-size", "-3"], "argument --batch-size: must be at least 1; got -3"),
        (["--num-candidates", "0"], "argument --num-candidates: must be at least 1; got 0"),
        (["--warm-start-steps", "0"], "argument --warm-start-steps: must be at least 1"),
        (["--cold-refit-every", "0"], "argument --cold-refit-every: must be at least 1"),
        (["--problem", "nn-draw", "--problem-seed", "-1"], "argument --problem-seed: must be"),
        (["--problem", "rover", "--dim", "5"], "argument --dim: rover is 60-dimensional"),
        (["--batch-thompson"], "argument --batch-thompson: applies to --turbo only"),
        (["--local-fit", "4"], "argument --local-fit: needs a trust region (--trust-region or"),
        (
            ["--trust-region", "--local-fit", "0.5"],
            "argument --local-fit: must be a finite real number of at least 1; got '0.5'",
        ),
        (
            ["--trust-region", "--local-fit", "inf"],
            "argument --local-fit: must be a finite real number of at least 1; got 'inf'",
        ),
        (["--dim", "1000000000"], "argument --dim: must be at most 10000"),
        (["--n-initial", "10000000000"], "argument --n-initial: must be at most 1000000"),
        (["--raw-samples", "1000000000000"], "argument --raw-samples: must be at most 1000000"),
        (["--batch-size", "10000000", "--acquisition", "ts"], "argument --batch-size: must be at"),
        (["--iterations", "10000000"], "argument --iterations: must be at most 1000000"),
        (["--threads", "100000"], "argument --threads: must be at most 1024"),
        (
            ["--acquisition", "robust-ei", "--target", "1e308"],
            "argument --target: must be a real number in [-1e+150, 1e+150]",
        ),
        (["--batch-size", "2"], "argument --batch-size: logei is an analytic acquisition"),
        (
            ["--batch-size", "2", "--acquisition", "ucb", "--sequential"],
            "argument --batch-size: ucb is an analytic acquisition",
        ),
    ],
)
def test_every_option_is_checked_before_any_work(arguments, message, capsys, no_work) -> None:
    assert message in rejected(["optimize", *arguments], capsys)


def test_a_valid_command_passes_the_checks(tmp_path, no_work) -> None:
    # The checks let it through: it fails only where the run would start.
    with pytest.raises(AssertionError, match="started working"):
        main(["optimize", "--csv", str(tmp_path / "new" / "run.csv"), "--seed", "12345"])


# ------------------------------------------------------------------------------------
# Threads and devices
# ------------------------------------------------------------------------------------


def test_threads_is_applied_to_the_run_and_then_given_back(
    fake_threads, monkeypatch, capsys
) -> None:
    fake_bo(monkeypatch, levy_minimiser)
    fake_machine(monkeypatch, seconds=2.0, load=0.1)
    during_run: list[int] = []
    run = BayesianOptimizer.run

    def recording_run(*args, **kwargs):
        during_run.append(torch.get_num_threads())
        return run(*args, **kwargs)

    monkeypatch.setattr(BayesianOptimizer, "run", recording_run)
    assert main([*FAKE_RUN, "--threads", "1"]) == 0
    assert during_run == [1]
    assert fake_threads["calls"][0] == 1 and fake_threads["calls"][-1] == 4
    assert fake_threads["threads"] == 4  # the process's own setting again
    assert "2.0 s total" in capsys.readouterr().out
    # Without --threads the run keeps torch's own setting.
    fake_threads["calls"].clear()
    assert main(FAKE_RUN) == 0
    assert during_run[-1] == 4 and 1 not in fake_threads["calls"]
    assert "| torch threads 4 (2 cores)" in capsys.readouterr().out


@pytest.mark.parametrize("value", ["0", "-2", "1.5", "all"])
def test_threads_must_be_a_positive_integer(value, capsys, no_work, fake_threads) -> None:
    message = rejected(["optimize", "--threads", value], capsys)
    assert "argument --threads: must be" in message
    assert fake_threads["calls"] == []


def test_optimize_runs_on_the_device_it_is_given_and_refuses_unusable_ones(capsys) -> None:
    argv = ["optimize", "--model", "random", "--iterations", "1", "--dim", "2", "--quiet"]
    assert main([*argv, "--device", "cpu"]) == 0
    assert "summary | best value" in capsys.readouterr().out
    message = rejected([*argv, "--device", "gpu"], capsys)
    assert "argument --device: must be a device name such as 'cpu' or 'cuda'; got 'gpu'" in message
    if not torch.cuda.is_available():
        message = rejected([*argv, "--device", "cuda"], capsys)
        assert "argument --device: must be a device available on this machine" in message
