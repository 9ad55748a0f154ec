"""The command line on a user's Python function (``optimize --objective``) and for
evaluations made elsewhere (``ask`` and ``tell`` with a state file)."""

import csv
import io
import math
import textwrap
from pathlib import Path

import pytest
import torch

from botorch_nn_uq.bo import (
    AcquisitionProposer,
    BayesianOptimizer,
    Maximize,
    registered_problem,
)
from botorch_nn_uq.bo.proposers import largest_optimize_acqf_batch
from botorch_nn_uq.cli import main
from tests.testing import write_results

OBJECTIVES = """
import math
import torch

def sphere(x):
    return float((x - 0.3).square().sum())

def batch_sphere(X):
    return (X - 0.3).square().sum(-1)

def bump(x):
    return -float((x - 0.6).square().sum())

def broken(x):
    return math.nan

not_a_function = 3
"""


@pytest.fixture
def objectives(tmp_path, monkeypatch):
    r"""A module ``user_objectives`` in the current folder (as a user's would be)."""
    (tmp_path / "user_objectives.py").write_text(textwrap.dedent(OBJECTIVES))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _rejected(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as error:
        main(argv)
    assert error.value.code == 2
    return capsys.readouterr().err


GP = ["--model", "gp", "--num-restarts", "2", "--raw-samples", "16", "--n-initial", "4"]


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
    assert message in _rejected(["optimize", *arguments], capsys)


def test_an_objective_that_returns_nan_ends_the_run_with_a_clear_error(objectives, capsys) -> None:
    argv = ["optimize", "--objective", "user_objectives:broken", "--bounds", "0", "1", *GP]
    assert main(argv) == 1
    assert (
        "error: the objective broken failed on a batch of 4 points: ValueError: Outputs must "
        "be finite" in capsys.readouterr().err
    )


# ------------------------------------------------------------------------------------
# ask and tell
# ------------------------------------------------------------------------------------

LEVY = registered_problem("levy", 2)
NEW_RUN = ["--bounds", "-10", "10", "--dim", "2", *GP, "--acquisition", "qlogei", "--seed", "7"]


def _ask(state: Path, capsys, *arguments: str) -> list[dict[str, str]]:
    assert main(["ask", "--state", str(state), *arguments]) == 0
    return list(csv.DictReader(io.StringIO(capsys.readouterr().out)))


def _results(path: Path, rows: list[dict[str, str]], values=None) -> Path:
    if values is None:
        X = [[float(row["x0"]), float(row["x1"])] for row in rows]
        values = LEVY.evaluate(torch.tensor(X, dtype=torch.float64))[:, 0].tolist()
    return write_results(path, rows, values)


def test_ask_and_tell_run_the_same_proposals_as_the_python_api(tmp_path, capsys) -> None:
    state = tmp_path / "run.state"
    for step in range(3):
        rows = _ask(state, capsys, *(NEW_RUN if step == 0 else ["--batch-size", "2"]))
        assert {row["step"] for row in rows} == {str(step)}
        assert main(["tell", "--state", str(state), str(_results(tmp_path / "r.csv", rows))]) == 0
        assert f"step {step}: told {len(rows)} results" in capsys.readouterr().out
    python = BayesianOptimizer(
        LEVY.bounds,
        surrogate="gp",
        proposer=AcquisitionProposer(
            "qlogei",
            num_restarts=2,
            raw_samples=16,
            options={
                "beta": 4.0,
                "negative_slope": 0.01,
                "aleatoric_variance": 0.0,
                "quantile": 0.1,
                "num_candidates": 4096,
            },
        ),
        seed=7,
        n_initial=4,
    )
    python.run(LEVY, steps=2, q=2)
    assert torch.equal(BayesianOptimizer.load(state).X, python.X)


def test_ask_and_tell_run_on_the_device_they_are_given(tmp_path, capsys, device) -> None:
    state, results = tmp_path / "run.state", tmp_path / "r.csv"
    on_device = ["--device", str(device)]
    for step in range(2):
        rows = _ask(state, capsys, *(NEW_RUN if step == 0 else ["--batch-size", "2"]), *on_device)
        assert main(["tell", "--state", str(state), str(_results(results, rows)), *on_device]) == 0
        assert f"step {step}: told {len(rows)} results" in capsys.readouterr().out
    # The state holds CPU tensors: another device continues the run.
    assert len(_ask(state, capsys, "--batch-size", "1", "--device", "cpu")) == 1
    for command in (["ask", "--state", str(state)], ["tell", "--state", str(state), str(results)]):
        message = _rejected([*command, "--device", "gpu"], capsys)
        assert "argument --device: must be a device name such as 'cpu' or 'cuda'" in message


def test_asking_again_before_telling_gives_the_same_batch(tmp_path, capsys) -> None:
    state = tmp_path / "run.state"
    first = _ask(state, capsys, *NEW_RUN)
    assert _ask(state, capsys) == first
    batch_path = tmp_path / "batch.csv"
    assert main(["ask", "--state", str(state), "--csv", str(batch_path)]) == 0
    assert "the initial design: 4 points in" in capsys.readouterr().err
    with batch_path.open() as handle:
        assert list(csv.DictReader(handle)) == first


@pytest.fixture
def asked(tmp_path, capsys):
    r"""A run whose initial design was told and whose step-1 batch of 3 is asked."""
    state = tmp_path / "run.state"
    rows = _ask(state, capsys, *NEW_RUN)
    main(["tell", "--state", str(state), str(_results(tmp_path / "design.csv", rows))])
    capsys.readouterr()
    rows = _ask(state, capsys, "--batch-size", "3")
    capsys.readouterr()
    return state, rows


def test_asking_again_prints_the_pending_batch_whatever_its_size(asked, capsys) -> None:
    state, rows = asked
    assert _ask(state, capsys) == rows
    assert _ask(state, capsys, "--batch-size", "3") == rows
    message = _rejected(["ask", "--state", str(state), "--batch-size", "1"], capsys)
    assert "argument --batch-size: The batch of step 1 (3 points) was asked and not told" in message


def _refused_tell(state: Path, results: Path, capsys) -> str:
    before = state.read_bytes()
    message = _rejected(["tell", "--state", str(state), str(results)], capsys)
    assert state.read_bytes() == before
    return message


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda rows: rows[:2], "no results for index 2 of the asked batch"),
        (lambda rows: [*rows, rows[1]], "index 1 appears twice (lines 3 and 5)"),
        (lambda rows: [{**rows[0], "step": "0"}, *rows[1:]], "rows of several steps (0, 1)"),
        (
            lambda rows: [{**row, "step": "0"} for row in rows],
            "results of step 0 were told already",
        ),
        (lambda rows: [{**row, "step": "5"} for row in rows], "no batch of step 5 was asked"),
        (
            lambda rows: [{**rows[0], "x1": "0.123"}, *rows[1:]],
            "line 2: the inputs of index 0 are not",
        ),
        (lambda rows: [{**rows[0], "index": "7"}, *rows[1:]], "index 7 was not asked"),
    ],
)
def test_results_that_do_not_match_the_asked_batch_are_refused(
    asked, change, message, tmp_path, capsys
) -> None:
    state, rows = asked
    results = _results(tmp_path / "bad.csv", change(rows), [1.0] * len(change(rows)))
    assert message in _refused_tell(state, results, capsys)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["1.0", "nan", "2.0"], "line 3: y is nan; not finite"),
        (["1.0", "inf", "2.0"], "line 3: y is inf; not finite"),
        (["1.0", "", "2.0"], "line 3: y is '', not a number"),
        (["1.0", "high", "2.0"], "line 3: y is 'high', not a number"),
    ],
)
def test_non_numeric_or_non_finite_results_are_refused(
    asked, values, message, tmp_path, capsys
) -> None:
    state, rows = asked
    assert message in _refused_tell(state, _results(tmp_path / "bad.csv", rows, values), capsys)


def test_a_batch_cannot_be_told_twice_and_a_results_file_needs_its_columns(
    asked, tmp_path, capsys
) -> None:
    state, rows = asked
    results = _results(tmp_path / "results.csv", rows)
    assert main(["tell", "--state", str(state), str(results)]) == 0
    capsys.readouterr()
    assert "the results of step 1 were told already" in _refused_tell(state, results, capsys)
    no_y = tmp_path / "no_y.csv"
    no_y.write_text("step,index,x0,x1\n2,0,0.5,0.5\n")
    assert "no column y" in _refused_tell(state, no_y, capsys)


@pytest.mark.parametrize("column", ["y", "step", "index", "x1"])
def test_a_duplicated_column_is_refused_by_name(asked, column, tmp_path, capsys) -> None:
    state, rows = asked
    results = _results(tmp_path / "results.csv", rows)
    lines = results.read_text().splitlines()
    duplicated = tmp_path / "duplicated.csv"
    value = {"y": "99", "step": "1", "index": "0", "x1": rows[0]["x1"]}[column]
    duplicated.write_text(
        "\n".join([f"{lines[0]},{column}", *(f"{line},{value}" for line in lines[1:])]) + "\n"
    )
    message = _refused_tell(state, duplicated, capsys)
    assert f"argument results: {duplicated}: the column {column} appears twice" in message


def test_results_in_another_encoding_or_a_state_file_are_refused(asked, tmp_path, capsys) -> None:
    state, rows = asked
    latin = tmp_path / "latin.csv"
    latin.write_bytes(
        _results(tmp_path / "r.csv", rows).read_bytes() + "# mesuré\n".encode("latin-1")
    )
    message = _refused_tell(state, latin, capsys)
    assert f"argument results: {latin}: not UTF-8 text" in message
    message = _refused_tell(state, state, capsys)
    assert f"argument results: {state}: is a botorch-nn-uq run state file, not results" in message


def test_results_saved_with_a_byte_order_mark_are_read(asked, tmp_path, capsys) -> None:
    state, rows = asked
    results = _results(tmp_path / "results.csv", rows)
    # Excel's "CSV UTF-8" starts the file with a byte-order mark.
    results.write_bytes(b"\xef\xbb\xbf" + results.read_bytes())
    assert main(["tell", "--state", str(state), str(results)]) == 0
    assert "step 1: told 3 results" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda content: content[:-10], "is corrupted"),
        (
            lambda content: content.replace(b"state 2\n", b"state 9\n", 1),
            "is a run state of format '9'",
        ),
        (lambda content: b"x,y\n1,2\n", "is not a botorch-nn-uq run state file"),
    ],
)
def test_a_damaged_or_foreign_state_file_is_refused(
    asked, damage, message, tmp_path, capsys
) -> None:
    state, rows = asked
    state.write_bytes(damage(state.read_bytes()))
    results = _results(tmp_path / "results.csv", rows)
    assert message in _refused_tell(state, results, capsys)
    assert message in _rejected(["ask", "--state", str(state)], capsys)


def test_ask_refuses_new_run_options_for_an_existing_run_and_needs_bounds_for_a_new_one(
    asked, tmp_path, capsys
) -> None:
    state, _ = asked
    message = _rejected(["ask", "--state", str(state), "--model", "gp"], capsys)
    assert (
        "argument --model: " in message and "holds a run whose strategy is in the file" in message
    )
    message = _rejected(["ask", "--state", str(tmp_path / "new.state")], capsys)
    assert "argument --bounds: " in message and "a new run needs the box" in message
    assert not (tmp_path / "new.state").exists()
    message = _rejected(["ask", "--state", str(state), "--batch-size", "2"], capsys)
    assert "argument --batch-size: The batch of step 1 (3 points) was asked and not told" in message
    message = _rejected(
        ["ask", "--state", str(tmp_path / "t.state"), *NEW_RUN, "--target", "1"], capsys
    )
    assert "argument --target: needs a target-value acquisition" in message


def test_a_maximising_target_run_through_ask_and_tell(tmp_path, capsys) -> None:
    state = tmp_path / "run.state"
    rows = _ask(state, capsys, "--bounds", "0", "1", "--model", "random", "--maximize")
    assert (
        main(
            [
                "tell",
                "--state",
                str(state),
                str(_results(tmp_path / "r.csv", rows, [1.0, 5.0, 3.0, 2.0, 0.0, 4.0, 1.0, 2.0])),
            ]
        )
        == 0
    )
    assert "best value so far 5" in capsys.readouterr().out
    loaded = BayesianOptimizer.load(state)
    assert isinstance(loaded.objective, Maximize) and loaded.best().index == 1
    assert not math.isnan(loaded.best().value)


def test_negative_numbers_in_exponent_notation_are_values_not_options(
    objectives, tmp_path, capsys
) -> None:
    argv = ["optimize", "--objective", "user_objectives:sphere", "--bounds", "-1e-3", "1e-3"]
    assert main([*argv, "--model", "random", "--n-initial", "2", "--iterations", "1"]) == 0
    assert "summary | best value" in capsys.readouterr().out
    state = tmp_path / "run.state"
    rows = _ask(state, capsys, "--bounds", "-1e-3", "1e-3", "--dim", "2", "--model", "random")
    assert len(rows) == 8
    assert BayesianOptimizer.load(state).bounds.tolist() == [[-1e-3, -1e-3], [1e-3, 1e-3]]
    state = tmp_path / "other.state"
    _ask(state, capsys, "--bounds", "-2E+1", "-.5e1", "-1e1", "1", "--model", "random")
    assert BayesianOptimizer.load(state).bounds.tolist() == [[-20.0, -10.0], [-5.0, 1.0]]
    state = tmp_path / "target.state"
    target = ["--model", "gp", "--acquisition", "robust-ei", "--target", "-1e-3"]
    _ask(state, capsys, "--bounds", "0", "1", *target)
    assert BayesianOptimizer.load(state).objective.target == -1e-3


CHANGING_OBJECTIVES = """
import pathlib
import torch

def shifted(x):
    x.sub_(0.3)
    return float(x.square().sum())

def clamped(X):
    X.clamp_(0.0, 0.5)
    return (X - 0.3).square().sum(-1)

def graded(x):
    return (x * torch.ones_like(x).requires_grad_()).sum()

def counted(X):
    pathlib.Path("called").touch()
    return X.sum(-1)
"""


@pytest.fixture
def changing_objectives(tmp_path, monkeypatch):
    r"""A module ``changing_objectives`` in the current folder whose functions change
    their input in place, return a tensor that requires grad, or leave a file ``called``."""
    (tmp_path / "changing_objectives.py").write_text(textwrap.dedent(CHANGING_OBJECTIVES))
    monkeypatch.chdir(tmp_path)
    return tmp_path


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


def test_a_batch_the_acquisition_cannot_hold_is_refused_before_any_evaluation(
    changing_objectives, capsys
) -> None:
    argv = ["optimize", "--objective", "changing_objectives:counted", "--bounds", "0", "1"]
    argv += [*GP, "--acquisition", "qlogei", "--batch-size", "20000"]
    message = _rejected(argv, capsys)
    assert "argument --batch-size: qlogei cannot propose a batch of q = 20000" in message
    assert f"at most q = {largest_optimize_acqf_batch(16, 2)} with 16 raw samples" in message
    assert not (changing_objectives / "called").exists()
    state = changing_objectives / "run.state"
    new_run = ["--bounds", "0", "1", "--dim", "2", *GP]
    message = _rejected(
        ["ask", "--state", str(state), *new_run, "--acquisition", "ts", "--batch-size", "5000"],
        capsys,
    )
    assert "argument --batch-size: ts cannot propose q = 5000 points from its 4096" in message
    assert not state.exists()
    rows = _ask(state, capsys, *new_run, "--acquisition", "qlogei")
    results = _results(changing_objectives / "design.csv", rows)
    assert main(["tell", "--state", str(state), str(results)]) == 0
    message = _rejected(["ask", "--state", str(state), "--batch-size", "20000"], capsys)
    assert "argument --batch-size: qlogei cannot propose a batch of q = 20000" in message
