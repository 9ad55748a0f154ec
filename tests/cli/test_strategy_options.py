"""A run's strategy on the command line: ``--strategy``, the shorthand options as parts of
it, their combinations checked before any work, and the state file that keeps it."""

import csv

import pytest

from botorch_nn_uq.bo import BayesianOptimizer
from botorch_nn_uq.bo.batch_limits import largest_optimize_acqf_batch
from botorch_nn_uq.cli import main
from tests.cli.commands import GP, ask, levy_results, rejected, tell

QUICK = ["--problem", "levy", "--dim", "2", "--iterations", "2", "--n-initial", "4"]


def _evaluations(path) -> list[list[str]]:
    with path.open() as handle:
        return [[row["x0"], row["x1"]] for row in csv.DictReader(handle)]


def test_the_shorthand_options_are_parts_of_one_strategy(tmp_path, capsys) -> None:
    shorthand, spelled = tmp_path / "shorthand.csv", tmp_path / "spelled.csv"
    options = ["--batch-size", "2", "--seed", "3"]
    assert (
        main(
            ["optimize", *QUICK, *options, "--model", "deep-ensemble", "--acquisition", "ts"]
            + ["--num-candidates", "128", "--trust-region", "--local-fit", "2"]
            + ["--csv", str(shorthand)]
        )
        == 0
    )
    printed = capsys.readouterr().out
    strategy = "deep-ensemble:ts(num_candidates=128)+tr+local(2)"
    assert f"| strategy {strategy} |" in printed
    assert main(["optimize", *QUICK, *options, "--strategy", strategy, "--csv", str(spelled)]) == 0
    assert f"| strategy {strategy} |" in capsys.readouterr().out
    assert _evaluations(shorthand) == _evaluations(spelled)


def test_a_strategy_with_model_options_runs_and_is_kept_in_the_state_file(tmp_path, capsys) -> None:
    state = tmp_path / "run.state"
    strategy = "deep-ensemble(max_steps=30):ts(num_candidates=64)+turbo+bts+local(4)"
    new_run = ["--bounds", "0", "1", "--dim", "2", "--n-initial", "4", "--strategy", strategy]
    for step in range(2):
        rows = ask(state, capsys, *(new_run if step == 0 else []))
        tell(state, rows, tmp_path / "results.csv", capsys)
    loaded = BayesianOptimizer.load(state)
    assert str(loaded.strategy) == strategy
    assert loaded.surrogate.name == "deep-ensemble(max_steps=30)"
    assert loaded.X.shape[0] == 5


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--strategy", "deep-ensemble:ts+bts"], "argument --strategy: The strategy"),
        (["--strategy", "deep-ensemble:ts+wat"], "unknown option 'wat'"),
        (["--strategy", "gp:logei", "--model", "gp"], "argument --model: a part of the strategy"),
        (["--strategy", "gp:logei", "--trust-region"], "argument --trust-region: a part of"),
        (["--strategy", "gp:robust-ei"], "argument --strategy: robust-ei needs a target value"),
        (["--strategy", "gp:logei", "--batch-size", "2"], "proposes one point per step"),
        (
            ["--strategy", "gp:qlogei", "--batch-size", "20000"],
            "qlogei cannot propose a batch of q = 20000",
        ),
    ],
)
def test_a_bad_strategy_is_refused_before_any_work(arguments, message, capsys) -> None:
    assert message in rejected(["optimize", *QUICK, *arguments], capsys)


def test_ask_refuses_a_strategy_for_an_existing_run(tmp_path, capsys) -> None:
    state = tmp_path / "run.state"
    assert main(["ask", "--state", str(state), "--bounds", "0", "1", "--strategy", "random"]) == 0
    capsys.readouterr()
    message = rejected(["ask", "--state", str(state), "--strategy", "gp:logei"], capsys)
    assert "argument --strategy: " in message and "holds a run whose strategy" in message


def test_leaky_and_target_value_acquisitions_are_registered(capsys) -> None:
    common = ["--dim", "2", "--iterations", "1", "--n-initial", "4", "--raw-samples", "16"]
    assert main(["optimize", "--model", "mc-dropout", "--acquisition", "q-leaky-ei", *common]) == 0
    assert main(["optimize", "--model", "gp", "--acquisition", "leaky-ei", *common]) == 0
    target_run = ["optimize", "--model", "gp", "--acquisition", "robust-lcb", "--target", "3"]
    assert main([*target_run, "--aleatoric-variance", "0.01", *common]) == 0
    out = capsys.readouterr().out
    assert "target 3" in out
    message = rejected(["optimize", "--acquisition", "robust-ei"], capsys)
    assert "argument --acquisition: robust-ei needs --target" in message
    message = rejected(["optimize", "--acquisition", "logei", "--target", "1"], capsys)
    assert "argument --target: needs a target-value acquisition" in message
    assert "robust-ei" in message


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
    assert message in rejected(["optimize", *arguments], capsys)


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
    proposer = BayesianOptimizer.load(state).proposer
    assert proposer.batch_thompson and proposer.local_fit == 4.0


def test_a_batch_the_acquisition_cannot_hold_is_refused_before_any_evaluation(
    changing_objectives, capsys
) -> None:
    argv = ["optimize", "--objective", "changing_objectives:counted", "--bounds", "0", "1"]
    argv += [*GP, "--acquisition", "qlogei", "--batch-size", "20000"]
    message = rejected(argv, capsys)
    assert "argument --batch-size: qlogei cannot propose a batch of q = 20000" in message
    assert f"at most q = {largest_optimize_acqf_batch(16, 2)} with 16 raw samples" in message
    assert not (changing_objectives / "called").exists()
    state = changing_objectives / "run.state"
    new_run = ["--bounds", "0", "1", "--dim", "2", *GP]
    message = rejected(
        ["ask", "--state", str(state), *new_run, "--acquisition", "ts", "--batch-size", "5000"],
        capsys,
    )
    assert "argument --batch-size: ts cannot propose q = 5000 points from its 4096" in message
    assert not state.exists()
    rows = ask(state, capsys, *new_run, "--acquisition", "qlogei")
    results = levy_results(changing_objectives / "design.csv", rows)
    assert main(["tell", "--state", str(state), str(results)]) == 0
    message = rejected(["ask", "--state", str(state), "--batch-size", "20000"], capsys)
    assert "argument --batch-size: qlogei cannot propose a batch of q = 20000" in message
