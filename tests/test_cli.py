import csv
import dataclasses
import itertools
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from botorch_nn_uq import cli
from botorch_nn_uq.bo import (
    RECOMMENDED_STRATEGIES,
    StepRecord,
    Strategy,
    acquisitions,
    initial_design,
    surrogates,
)
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
    header = "problem,model,acquisition,seed,step,phase,evaluation,x0,x1,value,best_value"
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
    for flag in (
        "--problem", "--dim", "--model", "--acquisition", "--iterations", "--seed", "--threads"
    ):  # fmt: skip
        assert flag in help_text


def test_version_prints_the_package_version(capsys) -> None:
    import botorch_nn_uq

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"botorch-nn-uq {botorch_nn_uq.__version__}"


def test_list_columns_fit_the_longest_name(capsys) -> None:
    assert main(["list"]) == 0
    output = capsys.readouterr().out
    registered, strategies = output.split("recommended strategies")
    rows = [line for line in registered.splitlines() if line.startswith("  ")]
    names = [line.split()[0] for line in rows]
    recommended = [line.split()[0] for line in strategies.splitlines()[1:]]
    assert recommended == [spelling for spelling, _ in RECOMMENDED_STRATEGIES]
    for spelling in recommended:
        assert str(Strategy.parse(spelling)) == spelling
    assert names == [*surrogates.SURROGATES, surrogates.RANDOM_SEARCH, *acquisitions.ACQUISITIONS]
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
    warm = {row["step"]: row["warm_start"] for row in rows}
    assert warm == {"0": "False", "1": "False", "2": "True", "3": "False"}
    assert {row["batch_duplicates"] for row in rows} == {"0"}


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--batch-size", "0"], "argument --batch-size: must be at least 1"),
        (["--model", "gp", "--continual"], "argument --continual: needs a warm-startable model"),
        (["--model", "random", "--trust-region"], "argument --trust-region: needs a surrogate"),
        (["--model", "random", "--turbo"], "argument --turbo: needs a surrogate"),
        (["--model", "gp", "--turbo", "--trust-region"], "argument --turbo: has its own trust"),
        (
            ["--model", "gp", "--turbo", "--acquisition", "robust-ei", "--target", "1"],
            "argument --turbo: minimises or maximises",
        ),
    ],
)
def test_invalid_batch_options_are_rejected(arguments, message, capsys) -> None:
    assert message in _rejected(["optimize", *arguments], capsys)


def test_turbo_from_the_command_line(tmp_path, capsys) -> None:
    csv_path = tmp_path / "turbo.csv"
    code = main(
        [
            "optimize", "--problem", "levy", "--dim", "3", "--model", "gp", "--turbo",
            "--batch-size", "4", "--iterations", "2", "--n-initial", "5", "--csv", str(csv_path),
        ]
    )  # fmt: skip
    assert code == 0
    output = capsys.readouterr().out
    assert "strategy gp:ts+turbo |" in output and "| 13 evaluations |" in output
    with csv_path.open() as handle:
        assert {row["acquisition"] for row in csv.DictReader(handle)} == {"turbo"}
    state = tmp_path / "run.state"
    argv = ["ask", "--state", str(state), "--bounds", "0", "1", "--dim", "3", "--model", "gp"]
    argv += ["--turbo", "--batch-thompson", "--batch-size", "2", "--n-initial", "3"]
    assert main([*argv, "--local-fit", "4"]) == 0
    proposer = cli.BayesianOptimizer.load(state).proposer
    assert proposer.batch_thompson and proposer.local_fit == 4.0


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
    monkeypatch.setattr(cli, "load_objective", forbidden)
    monkeypatch.setattr(cli.BayesianOptimizer, "run", forbidden)


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
    assert message in _rejected(["optimize", *arguments], capsys)


def test_an_unwritable_csv_or_plot_fails_before_any_work(tmp_path, capsys, no_work) -> None:
    not_a_folder = tmp_path / "file.txt"
    not_a_folder.write_text("")
    for path in (not_a_folder / "run.csv", tmp_path):
        message = _rejected(["optimize", "--csv", str(path), "--overwrite"], capsys)
        assert f"argument --csv: cannot write '{path}'" in message
    message = _rejected(["optimize", "--plot", str(tmp_path)], capsys)
    assert f"argument --plot: cannot write '{tmp_path}'" in message


def test_an_existing_csv_is_kept_unless_overwrite_is_given(tmp_path, capsys, no_work) -> None:
    path = tmp_path / "run.csv"
    path.write_text("earlier rows\n")
    message = _rejected(["optimize", "--csv", str(path)], capsys)
    assert f"argument --csv: '{path}' exists; pass --overwrite" in message
    assert path.read_text() == "earlier rows\n"
    message = _rejected(
        ["optimize", "--csv", str(path), "--plot", str(path), "--overwrite"], capsys
    )
    assert "argument --plot: is the --csv file" in message
    assert path.read_text() == "earlier rows\n"


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_a_full_disk_fails_before_any_evaluation(capsys, no_work) -> None:
    message = _rejected(["optimize", "--csv", "/dev/full", "--overwrite"], capsys)
    assert "argument --csv: cannot write '/dev/full': No space left on device" in message


def test_a_valid_command_passes_the_checks(tmp_path, no_work) -> None:
    # The checks let it through: it fails only where the run would start.
    with pytest.raises(AssertionError, match="started working"):
        main(["optimize", "--csv", str(tmp_path / "new" / "run.csv"), "--seed", "12345"])


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


# ------------------------------------------------------------------------------------
# Time, threads and notes of the summary
# ------------------------------------------------------------------------------------


@pytest.fixture
def fake_threads(monkeypatch):
    r"""torch's thread setting replaced by a record of the calls (starting at 4 threads),
    so a test sees which setting the command asks for without changing the process's."""
    state = {"threads": 4, "calls": []}

    def set_num_threads(threads: int) -> None:
        state["calls"].append(threads)
        state["threads"] = threads

    monkeypatch.setattr(torch, "set_num_threads", set_num_threads)
    monkeypatch.setattr(torch, "get_num_threads", lambda: state["threads"])
    return state


def _fake_machine(monkeypatch, *, seconds: float, load: float, cores: int = 2) -> None:
    r"""A run that takes ``seconds`` on ``cores`` cores under a load average ``load``."""
    ticks = itertools.count(0.0, seconds)  # the start, then the end, of each run
    monkeypatch.setattr(cli, "_clock", lambda: next(ticks))
    monkeypatch.setattr(cli, "_load_average", lambda: load)
    monkeypatch.setattr(cli, "_cpu_count", lambda: cores)


def _fake_bo(monkeypatch, proposal) -> None:
    r"""A surrogate that costs nothing and a proposing strategy ``ts`` that proposes
    ``proposal(context)`` (a ``d``-vector), so a run's values are known in advance."""
    spec = surrogates.SURROGATES["mc-dropout"]
    monkeypatch.setitem(
        surrogates.SURROGATES, "mc-dropout", dataclasses.replace(spec, build=lambda *a, **k: None)
    )
    monkeypatch.setitem(
        acquisitions.ACQUISITIONS,
        "ts",
        dataclasses.replace(
            acquisitions.ACQUISITIONS["ts"],
            propose=lambda model, context, q: proposal(context).expand(q, -1).clone(),
        ),
    )


_FAKE_RUN = ["optimize", "--problem", "levy", "--dim", "2", "--model", "mc-dropout",
             "--acquisition", "ts", "--n-initial", "4", "--iterations", "3", "--quiet"]  # fmt: skip


def _worst_point(context):
    # train_Y is -f: its smallest entry is the worst point evaluated so far.
    return context.train_X[context.train_Y.squeeze(-1).argmin()]


def _levy_minimiser(context):
    return torch.ones(context.bounds.shape[-1], dtype=context.bounds.dtype)  # f = 0


def test_the_summary_gives_the_total_time_and_the_torch_threads(capsys) -> None:
    argv = ["optimize", "--dim", "2", "--model", "random", "--iterations", "2", "--n-initial", "3"]
    assert main(argv) == 0
    summary = capsys.readouterr().out.splitlines()[-1]
    assert re.search(
        r"\| \d+\.\d s total \(set-up, initial design and 2 iterations\), \d+\.\d\d s per "
        rf"iteration \| torch threads {torch.get_num_threads()} \(\d+ cores\)$",
        summary,
    ), summary


def test_threads_is_applied_to_the_run_and_then_given_back(
    fake_threads, monkeypatch, capsys
) -> None:
    _fake_bo(monkeypatch, _levy_minimiser)
    _fake_machine(monkeypatch, seconds=2.0, load=0.1)
    during_run: list[int] = []
    run = cli.BayesianOptimizer.run

    def recording_run(*args, **kwargs):
        during_run.append(torch.get_num_threads())
        return run(*args, **kwargs)

    monkeypatch.setattr(cli.BayesianOptimizer, "run", recording_run)
    assert main([*_FAKE_RUN, "--threads", "1"]) == 0
    assert during_run == [1]
    assert fake_threads["calls"][0] == 1 and fake_threads["calls"][-1] == 4
    assert fake_threads["threads"] == 4  # the process's own setting again
    assert "2.0 s total" in capsys.readouterr().out
    # Without --threads the run keeps torch's own setting.
    fake_threads["calls"].clear()
    assert main(_FAKE_RUN) == 0
    assert during_run[-1] == 4 and 1 not in fake_threads["calls"]
    assert "| torch threads 4 (2 cores)" in capsys.readouterr().out


@pytest.mark.parametrize("value", ["0", "-2", "1.5", "all"])
def test_threads_must_be_a_positive_integer(value, capsys, no_work, fake_threads) -> None:
    message = _rejected(["optimize", "--threads", value], capsys)
    assert "argument --threads: must be" in message
    assert fake_threads["calls"] == []


def test_a_slow_oversubscribed_run_says_why_and_what_avoids_it(
    fake_threads, monkeypatch, capsys
) -> None:
    _fake_bo(monkeypatch, _levy_minimiser)
    _fake_machine(monkeypatch, seconds=415.0, load=3.1)
    assert main([*_FAKE_RUN, "--threads", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "415.0 s total" in lines[-2] and "| torch threads 2 (2 cores)" in lines[-2]
    assert lines[-1] == (
        "hint | torch used 2 threads on 2 cores under load 3.1; `OMP_NUM_THREADS=1` or "
        "`--threads 1` avoids oversubscription (much faster on a busy machine)"
    )


@pytest.mark.parametrize(
    ("threads", "seconds", "load"),
    [
        ("2", 415.0, 1.2),  # an idle machine: its cores were free
        ("1", 415.0, 1.2),
        ("2", 4.0, 3.1),  # a short run: not worth a hint
    ],
)
def test_no_hint_without_its_cause(threads, seconds, load, fake_threads, monkeypatch, capsys):
    _fake_bo(monkeypatch, _levy_minimiser)
    _fake_machine(monkeypatch, seconds=seconds, load=load)
    assert main([*_FAKE_RUN, "--threads", threads]) == 0
    out = capsys.readouterr().out
    assert "hint" not in out and out.splitlines()[-1].startswith("summary |")


def test_slow_run_hint_names_each_cause() -> None:
    hint = cli.slow_run_hint(60.0, threads=8, cores=2, load=None)
    assert hint is not None and "torch used 8 threads on 2 cores;" in hint
    assert "--threads 1" in hint
    hint = cli.slow_run_hint(60.0, threads=1, cores=2, load=3.5)
    assert hint is not None and "the machine was busy (load 3.5 on 2 cores)" in hint
    assert cli.slow_run_hint(60.0, threads=2, cores=4, load=2.5) is None
    # A load at the cores is this run's own threads on an otherwise idle machine.
    assert cli.slow_run_hint(60.0, threads=2, cores=2, load=2.3) is None
    assert cli.slow_run_hint(9.0, threads=8, cores=2, load=9.0) is None


def test_a_run_whose_proposals_never_improve_says_so(monkeypatch, capsys) -> None:
    _fake_bo(monkeypatch, _worst_point)
    assert main([*_FAKE_RUN, "--dim", "10"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == (
        "note | no proposal improved on the best initial point in 3 iterations: with 10 "
        "dimensions, try more iterations (--iterations 30) or a GP (--model gp)"
    )
    # A run that improves has no note.
    _fake_bo(monkeypatch, _levy_minimiser)
    assert main(_FAKE_RUN) == 0
    out = capsys.readouterr().out
    assert "note" not in out
    assert float(re.search(r"best value (\S+)", out).group(1)) < 1e-12  # Levy's minimum, 0


def test_the_note_suggests_what_fits_the_model() -> None:
    problem = get_bo_problem("levy", 2)
    X = initial_design(problem.bounds, 4, seed=0)
    values = problem.evaluate(X)
    first = StepRecord(0, 4, float(values.min()), float(values.min()), regret=0.1)
    later = dataclasses.replace(first, step=1, num_evaluations=5, value=1e9)
    records = [first, later]
    assert cli.no_improvement_note(records, "gp", 2) == (
        "no proposal improved on the best initial point in 1 iteration: with 2 dimensions, "
        "try more iterations (--iterations 30)"
    )
    note = cli.no_improvement_note(records, "random", 2)
    assert note is not None and note.startswith("no random point improved")
    assert note.endswith("or a surrogate (--model gp)")
    assert cli.no_improvement_note([first], "gp", 2) is None
    improved = dataclasses.replace(later, best_value=-1.0)
    assert cli.no_improvement_note([first, improved], "gp", 2) is None


def test_optimize_runs_on_the_device_it_is_given_and_refuses_unusable_ones(capsys) -> None:
    argv = ["optimize", "--model", "random", "--iterations", "1", "--dim", "2", "--quiet"]
    assert main([*argv, "--device", "cpu"]) == 0
    assert "summary | best value" in capsys.readouterr().out
    message = _rejected([*argv, "--device", "gpu"], capsys)
    assert "argument --device: must be a device name such as 'cpu' or 'cuda'; got 'gpu'" in message
    if not torch.cuda.is_available():
        message = _rejected([*argv, "--device", "cuda"], capsys)
        assert "argument --device: must be a device available on this machine" in message
