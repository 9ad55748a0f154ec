"""What the command line prints: ``list``'s tables, and ``optimize``'s summary with its
time and threads, the hint why a run was slow and the note when no proposal improved."""

import dataclasses
import re

import pytest
import torch

from botorch_nn_uq.bo import (
    RECOMMENDED_STRATEGIES,
    StepRecord,
    Strategy,
    acquisitions,
    initial_design,
    surrogates,
)
from botorch_nn_uq.cli import main, no_improvement_note, slow_run_hint
from botorch_nn_uq.problems import get_bo_problem
from tests.cli.fakes import FAKE_RUN, fake_bo, fake_machine, levy_minimiser, worst_point


def test_list_names_what_is_registered(capsys) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "mc-dropout" in out and "qlogei" in out and "perm" in out


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


def test_the_summary_gives_the_total_time_and_the_torch_threads(capsys) -> None:
    argv = ["optimize", "--dim", "2", "--model", "random", "--iterations", "2", "--n-initial", "3"]
    assert main(argv) == 0
    summary = capsys.readouterr().out.splitlines()[-1]
    assert re.search(
        r"\| \d+\.\d s total \(set-up, initial design and 2 iterations\), \d+\.\d\d s per "
        rf"iteration \| torch threads {torch.get_num_threads()} \(\d+ cores\)$",
        summary,
    ), summary


def test_a_slow_oversubscribed_run_says_why_and_what_avoids_it(
    fake_threads, monkeypatch, capsys
) -> None:
    fake_bo(monkeypatch, levy_minimiser)
    fake_machine(monkeypatch, seconds=415.0, load=3.1)
    assert main([*FAKE_RUN, "--threads", "2"]) == 0
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
    fake_bo(monkeypatch, levy_minimiser)
    fake_machine(monkeypatch, seconds=seconds, load=load)
    assert main([*FAKE_RUN, "--threads", threads]) == 0
    out = capsys.readouterr().out
    assert "hint" not in out and out.splitlines()[-1].startswith("summary |")


def test_slow_run_hint_names_each_cause() -> None:
    hint = slow_run_hint(60.0, threads=8, cores=2, load=None)
    assert hint is not None and "torch used 8 threads on 2 cores;" in hint
    assert "--threads 1" in hint
    hint = slow_run_hint(60.0, threads=1, cores=2, load=3.5)
    assert hint is not None and "the machine was busy (load 3.5 on 2 cores)" in hint
    assert slow_run_hint(60.0, threads=2, cores=4, load=2.5) is None
    # A load at the cores is this run's own threads on an otherwise idle machine.
    assert slow_run_hint(60.0, threads=2, cores=2, load=2.3) is None
    assert slow_run_hint(9.0, threads=8, cores=2, load=9.0) is None


def test_a_run_whose_proposals_never_improve_says_so(monkeypatch, capsys) -> None:
    fake_bo(monkeypatch, worst_point)
    assert main([*FAKE_RUN, "--dim", "10"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == (
        "note | no proposal improved on the best initial point in 3 iterations: with 10 "
        "dimensions, try more iterations (--iterations 30) or a GP (--model gp)"
    )
    # A run that improves has no note.
    fake_bo(monkeypatch, levy_minimiser)
    assert main(FAKE_RUN) == 0
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
    assert no_improvement_note(records, "gp", 2) == (
        "no proposal improved on the best initial point in 1 iteration: with 2 dimensions, "
        "try more iterations (--iterations 30)"
    )
    note = no_improvement_note(records, "random", 2)
    assert note is not None and note.startswith("no random point improved")
    assert note.endswith("or a surrogate (--model gp)")
    assert no_improvement_note([first], "gp", 2) is None
    improved = dataclasses.replace(later, best_value=-1.0)
    assert no_improvement_note([first, improved], "gp", 2) is None
