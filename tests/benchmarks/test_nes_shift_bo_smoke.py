"""Smoke runs of protocol 10's BO side (benchmarks/nes_shift_bo.py): ensembles trained on
the first half of a BO run and tested on its second half."""

import math

import pytest
import torch

from benchmarks import nes_shift, nes_shift_bo
from botorch_nn_uq.bo import BOResult
from tests.benchmarks import check_shift_scores, read_runs_csv


def test_halves_cut_a_run_in_evaluation_order() -> None:
    X = torch.arange(14, dtype=torch.float32).reshape(7, 2)
    result = BOResult("toy-2d", "random", "", 0, X, -X.sum(-1))
    train_X, train_Y, test_X, test_Y = nes_shift_bo.halves(result)
    assert torch.equal(train_X, X[:4].double()) and torch.equal(test_X, X[4:].double())
    assert train_Y.shape == (4, 1) and test_Y.shape == (3, 1)
    assert torch.equal(torch.cat([train_Y, test_Y]).squeeze(-1), -X.double().sum(-1))


# On the smoke run's 12 training rows a reference's selection may keep one member.
@pytest.mark.filterwarnings("ignore:The member selection of .* kept a single member")
def test_smoke_run_trains_on_the_first_half_and_resumes(tmp_path, monkeypatch) -> None:
    argv = ["--smoke", "--out", str(tmp_path)]
    summary = nes_shift_bo.main(argv).read_text()
    assert "Command: `python -m benchmarks.nes_shift_bo --smoke" in summary
    assert "### rastrigin-3d, M = 2" in summary
    assert "| method | severity | seeds |" in summary
    runs = read_runs_csv(tmp_path)
    assert [(run["method"], run["severity"]) for run in runs] == [
        (method, severity) for method in nes_shift.METHODS for severity in ("0", "5")
    ]
    budget = nes_shift_bo.SMOKE_RUN_BUDGET
    evaluations = budget.n_initial + budget.iterations * budget.batch_size
    assert {run["num_train"] for run in runs} == {str(math.ceil(evaluations / 2))}
    assert {run["num_test"] for run in runs} == {str(evaluations // 2)}
    by_method: dict[str, list[dict[str, str]]] = {}
    for run in runs:
        by_method.setdefault(run["method"], []).append(run)
        check_shift_scores(run, nes_shift.SEARCHES)
    # A reference is fitted once: both selection severities report the same model.
    for method in nes_shift.REFERENCES:
        plain, shifted = by_method[method]
        assert plain["test_nll"] == shifted["test_nll"]
    assert len(list((tmp_path / "bo_runs").glob("*.pt"))) == 1

    def fail(*args, **kwargs):
        raise AssertionError("a stored run or job was run again")

    monkeypatch.setattr(nes_shift_bo, "evaluate", fail)
    monkeypatch.setattr(nes_shift_bo.scale_suite, "run", fail)
    again = nes_shift_bo.main(argv).read_text()
    assert summary.split("### rastrigin-3d")[1] == again.split("### rastrigin-3d")[1]
