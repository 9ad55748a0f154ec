"""The parsers: unknown names and help, the version, and negative numbers in exponent
notation read as values."""

import pytest

from botorch_nn_uq.bo import BayesianOptimizer
from botorch_nn_uq.cli import main
from tests.cli.commands import ask, rejected


def test_unknown_names_give_clear_errors(capsys) -> None:
    for flag, value, listed in [
        ("--model", "nope", "gp, mc-dropout"),
        ("--acquisition", "nope", "logei"),
        ("--problem", "nope", "levy, rosenbrock, g-function, perm"),
    ]:
        message = rejected(["optimize", flag, value], capsys)
        assert f"unknown {flag[2:]} 'nope'" in message and listed in message


def test_help_lists_the_options(capsys) -> None:
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


def test_negative_numbers_in_exponent_notation_are_values_not_options(
    objectives, tmp_path, capsys
) -> None:
    argv = ["optimize", "--objective", "user_objectives:sphere", "--bounds", "-1e-3", "1e-3"]
    assert main([*argv, "--model", "random", "--n-initial", "2", "--iterations", "1"]) == 0
    assert "summary | best value" in capsys.readouterr().out
    state = tmp_path / "run.state"
    rows = ask(state, capsys, "--bounds", "-1e-3", "1e-3", "--dim", "2", "--model", "random")
    assert len(rows) == 8
    assert BayesianOptimizer.load(state).bounds.tolist() == [[-1e-3, -1e-3], [1e-3, 1e-3]]
    state = tmp_path / "other.state"
    ask(state, capsys, "--bounds", "-2E+1", "-.5e1", "-1e1", "1", "--model", "random")
    assert BayesianOptimizer.load(state).bounds.tolist() == [[-20.0, -10.0], [-5.0, 1.0]]
    state = tmp_path / "target.state"
    target = ["--model", "gp", "--acquisition", "robust-ei", "--target", "-1e-3"]
    ask(state, capsys, "--bounds", "0", "1", *target)
    assert BayesianOptimizer.load(state).objective.target == -1e-3
