"""``botorch-nn-uq tell``: the results of the asked batch added to the run, the same run as
the Python API's, and every results file that is not the asked batch with finite results
refused in one line, the state file left unchanged."""

import errno
import math
from pathlib import Path

import pytest
import torch

from botorch_nn_uq.bo import AcquisitionProposer, BayesianOptimizer, Maximize
from botorch_nn_uq.cli import main
from tests.cli.commands import GP_RUN, LEVY, ask, levy_results, refused_tell, rejected
from tests.testing import write_results


def test_ask_and_tell_run_the_same_proposals_as_the_python_api(tmp_path, capsys) -> None:
    state = tmp_path / "run.state"
    for step in range(3):
        rows = ask(state, capsys, *(GP_RUN if step == 0 else ["--batch-size", "2"]))
        assert {row["step"] for row in rows} == {str(step)}
        results = levy_results(tmp_path / "r.csv", rows)
        assert main(["tell", "--state", str(state), str(results)]) == 0
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


def test_a_maximising_target_run_through_ask_and_tell(tmp_path, capsys) -> None:
    state = tmp_path / "run.state"
    rows = ask(state, capsys, "--bounds", "0", "1", "--model", "random", "--maximize")
    results = write_results(tmp_path / "r.csv", rows, [1.0, 5.0, 3.0, 2.0, 0.0, 4.0, 1.0, 2.0])
    assert main(["tell", "--state", str(state), str(results)]) == 0
    assert "best value so far 5" in capsys.readouterr().out
    loaded = BayesianOptimizer.load(state)
    assert isinstance(loaded.objective, Maximize) and loaded.best().index == 1
    assert not math.isnan(loaded.best().value)


def test_results_saved_with_a_byte_order_mark_are_read(asked, tmp_path, capsys) -> None:
    state, rows = asked
    results = levy_results(tmp_path / "results.csv", rows)
    # Excel's "CSV UTF-8" starts the file with a byte-order mark.
    results.write_bytes(b"\xef\xbb\xbf" + results.read_bytes())
    assert main(["tell", "--state", str(state), str(results)]) == 0
    assert "step 1: told 3 results" in capsys.readouterr().out


# ------------------------------------------------------------------------------------
# Results that are refused
# ------------------------------------------------------------------------------------


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
    results = write_results(tmp_path / "bad.csv", change(rows), [1.0] * len(change(rows)))
    assert message in refused_tell(state, results, capsys)


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
    assert message in refused_tell(state, write_results(tmp_path / "bad.csv", rows, values), capsys)


def test_a_batch_cannot_be_told_twice_and_a_results_file_needs_its_columns(
    asked, tmp_path, capsys
) -> None:
    state, rows = asked
    results = levy_results(tmp_path / "results.csv", rows)
    assert main(["tell", "--state", str(state), str(results)]) == 0
    capsys.readouterr()
    assert "the results of step 1 were told already" in refused_tell(state, results, capsys)
    no_y = tmp_path / "no_y.csv"
    no_y.write_text("step,index,x0,x1\n2,0,0.5,0.5\n")
    assert "no column y" in refused_tell(state, no_y, capsys)


@pytest.mark.parametrize("column", ["y", "step", "index", "x1"])
def test_a_duplicated_column_is_refused_by_name(asked, column, tmp_path, capsys) -> None:
    state, rows = asked
    results = levy_results(tmp_path / "results.csv", rows)
    lines = results.read_text().splitlines()
    duplicated = tmp_path / "duplicated.csv"
    value = {"y": "99", "step": "1", "index": "0", "x1": rows[0]["x1"]}[column]
    duplicated.write_text(
        "\n".join([f"{lines[0]},{column}", *(f"{line},{value}" for line in lines[1:])]) + "\n"
    )
    message = refused_tell(state, duplicated, capsys)
    assert f"argument results: {duplicated}: the column {column} appears twice" in message


def test_results_in_another_encoding_or_a_state_file_are_refused(asked, tmp_path, capsys) -> None:
    state, rows = asked
    latin = tmp_path / "latin.csv"
    latin.write_bytes(
        levy_results(tmp_path / "r.csv", rows).read_bytes() + "# mesuré\n".encode("latin-1")
    )
    message = refused_tell(state, latin, capsys)
    assert f"argument results: {latin}: not UTF-8 text" in message
    message = refused_tell(state, state, capsys)
    assert f"argument results: {state}: is a botorch-nn-uq run state file, not results" in message


def test_a_results_file_that_cannot_be_read_is_one_line(asked, tmp_path, capsys, monkeypatch):
    state, _ = asked
    before = state.read_bytes()
    message = rejected(["tell", "--state", str(state), str(tmp_path)], capsys)
    assert f"argument results: {tmp_path}: Is a directory" in message
    results = tmp_path / "results.csv"
    results.write_text("step,index,x0,x1,y\n")
    open_path = Path.open

    def unreadable(path, *args, **kwargs):
        if path == results:
            raise PermissionError(errno.EACCES, "Permission denied")
        return open_path(path, *args, **kwargs)

    monkeypatch.setattr(Path, "open", unreadable)
    message = rejected(["tell", "--state", str(state), str(results)], capsys)
    assert f"argument results: {results}: Permission denied" in message
    assert state.read_bytes() == before
