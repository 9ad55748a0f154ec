"""``--strategy``: one spelling of a run's strategy on the command line, the shorthand
options as parts of it, and the state file that keeps it."""

import csv
import io

import pytest

from botorch_nn_uq.bo import BayesianOptimizer
from botorch_nn_uq.cli import main
from tests.testing import write_results

QUICK = ["--problem", "levy", "--dim", "2", "--iterations", "2", "--n-initial", "4"]


def _rejected(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as error:
        main(argv)
    assert error.value.code == 2
    return capsys.readouterr().err


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
        assert main(["ask", "--state", str(state), *(new_run if step == 0 else [])]) == 0
        rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
        results = write_results(
            tmp_path / "results.csv", rows, [float(row["x0"]) ** 2 for row in rows]
        )
        assert main(["tell", "--state", str(state), str(results)]) == 0
        capsys.readouterr()
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
    assert message in _rejected(["optimize", *QUICK, *arguments], capsys)


def test_ask_refuses_a_strategy_for_an_existing_run(tmp_path, capsys) -> None:
    state = tmp_path / "run.state"
    assert main(["ask", "--state", str(state), "--bounds", "0", "1", "--strategy", "random"]) == 0
    capsys.readouterr()
    message = _rejected(["ask", "--state", str(state), "--strategy", "gp:logei"], capsys)
    assert "argument --strategy: " in message and "holds a run whose strategy" in message
