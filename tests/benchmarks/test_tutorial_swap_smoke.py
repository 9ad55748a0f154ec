"""The tutorial swap (benchmarks/tutorial_swap.py) on a small notebook written the way
BoTorch's tutorials are: the GP runs untouched, the deep ensemble takes its place with the
minimal change, a tutorial that reads the GP's kernel fails as it would for a user, and
the list of tutorials matches the drop-in patterns kept in tests/drop_in/tutorials.py."""

import csv
import json
from pathlib import Path

import pytest

from benchmarks import tutorial_swap
from tests.drop_in.scenarios import SCENARIOS
from tests.drop_in.tutorials import TUTORIAL_PATTERNS

#: A tutorial in BoTorch's style: an IPython command inside a block, the marginal
#: likelihood fitted, known noise passed positionally, a model list, an explicit sampler.
TUTORIAL_CELLS = [
    "import sys\nif 'google.colab' in sys.modules:\n    %pip install botorch\n%matplotlib inline",
    "import os\nimport torch\nfrom botorch import fit_gpytorch_mll\n"
    "from botorch.models import ModelListGP, SingleTaskGP\n"
    "from botorch.models.transforms import Normalize, Standardize\n"
    "from gpytorch.mlls import ExactMarginalLogLikelihood\n"
    "from gpytorch.mlls.sum_marginal_log_likelihood import SumMarginalLogLikelihood\n"
    "SMOKE_TEST = os.environ.get('SMOKE_TEST')",
    "X = torch.rand(12, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))\n"
    "Y = torch.sin(5 * X).sum(-1, keepdim=True)\n"
    "model = SingleTaskGP(X, Y, torch.full_like(Y, 1e-4), input_transform=Normalize(2),\n"
    "                     outcome_transform=Standardize(1))\n"
    "mll = ExactMarginalLogLikelihood(model.likelihood, model)\n"
    "fit_gpytorch_mll(mll)",
    "from botorch.acquisition import qLogExpectedImprovement\n"
    "from botorch.optim import optimize_acqf\n"
    "from botorch.sampling import SobolQMCNormalSampler\n"
    "models = ModelListGP(model, SingleTaskGP(X, -Y))\n"
    "fit_gpytorch_mll(SumMarginalLogLikelihood(models.likelihood, models))\n"
    "acquisition = qLogExpectedImprovement(model, best_f=Y.max(),\n"
    "                                      sampler=SobolQMCNormalSampler(torch.Size([16])))\n"
    "bounds = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=torch.float64)\n"
    "candidate, _ = optimize_acqf(acquisition, bounds, q=2, num_restarts=2, raw_samples=8,\n"
    "                             options={'maxiter': 5})\n"
    "print(type(model).__name__, type(models).__name__, tuple(candidate.shape))",
]


def write_tutorial(root: Path, name: str, cells: list[str]) -> None:
    folder = root / "tutorials" / name
    folder.mkdir(parents=True)
    notebook = {
        "cells": [{"cell_type": "code", "source": source} for source in cells],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (folder / f"{name}.ipynb").write_text(json.dumps(notebook))


def test_the_gp_runs_untouched_and_the_deep_ensemble_takes_its_place(tmp_path, monkeypatch) -> None:
    botorch_dir = tmp_path / "botorch"
    first, second = "compare_mc_analytic_acquisition", "turbo_1"
    # The sanity check runs on the tutorial's variables after its code.
    monkeypatch.setitem(
        tutorial_swap.SANITY_CHECKS, first, "assert candidate.shape == (2, 2), candidate\n"
    )
    write_tutorial(botorch_dir, first, TUTORIAL_CELLS)
    # A tutorial that reads the GP's kernel, as TuRBO's reads its lengthscales.
    write_tutorial(
        botorch_dir, second, [*TUTORIAL_CELLS[1:3], "print(model.covar_module.lengthscale)"]
    )
    out = tmp_path / "out"
    runs = tutorial_swap.main(
        [
            "--botorch-dir",
            str(botorch_dir),
            "--models",
            "gp",
            "deep-ensemble",
            "--tutorials",
            first,
            second,
            "--out",
            str(out),
        ]
    )
    outcome = {(run.tutorial, run.model): run for run in runs}
    assert all(outcome[first, model].ran for model in ("gp", "deep-ensemble"))
    assert outcome[second, "gp"].ran
    failed = outcome[second, "deep-ensemble"]
    assert not failed.ran and "covar_module" in failed.error
    logs = out / "logs"
    assert "SingleTaskGP ModelListGP (2, 2)" in (logs / f"{first}.gp.log").read_text()
    swapped = (logs / f"{first}.deep-ensemble.log").read_text()
    assert "SwappedDeepEnsemble SwappedModelList (2, 2)" in swapped
    table = (out / "tutorial_swap.md").read_text()
    assert "| deep-ensemble | 1 of 2 |" in table and "| gp | 2 of 2 |" in table
    with (out / "tutorial_swap.csv").open() as handle:
        assert len(list(csv.DictReader(handle))) == 4


def test_commands_become_pass_so_that_their_blocks_stay_valid(tmp_path) -> None:
    write_tutorial(tmp_path, "closed_loop_botorch_only", TUTORIAL_CELLS[:1])
    notebook = tutorial_swap.tutorial_notebook(tmp_path, "closed_loop_botorch_only")
    code = tutorial_swap.tutorial_code(notebook)
    assert code.splitlines()[:4] == [
        "import sys",
        "if 'google.colab' in sys.modules:",
        "    pass",
        "pass",
    ]
    compile(code, "tutorial", "exec")


def test_a_folder_without_the_tutorial_says_what_is_expected(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="BoTorch checkout"):
        tutorial_swap.tutorial_notebook(tmp_path, "turbo_1")


def test_every_tutorial_has_its_patterns_tested_by_drop_in_scenarios() -> None:
    assert list(TUTORIAL_PATTERNS) == list(tutorial_swap.TUTORIALS)
    for tutorial, patterns in TUTORIAL_PATTERNS.items():
        assert patterns, tutorial
        assert set(patterns) <= set(SCENARIOS), tutorial


def test_a_failure_is_reported_by_the_first_line_of_its_exception() -> None:
    output = (
        'some output\nTraceback (most recent call last):\n  File "x.py", line 3, in <module>\n'
        "    assert False, f'{points}'\nAssertionError: MES repeats a point: tensor([[0., 0.],\n"
        "        [0., 0.]])\n"
    )
    assert (
        tutorial_swap.error_line(output) == "AssertionError: MES repeats a point: tensor([[0., 0.],"
    )
    assert tutorial_swap.error_line("still running\nKilled\n") == "Killed"
    assert tutorial_swap.error_line("") == "no output"


def test_the_sanity_check_follows_the_tutorial_and_the_swap_precedes_it() -> None:
    script = tutorial_swap.swapped_script("x = 1", "deep-ensemble", "assert x == 1\n")
    lines = script.splitlines()
    assert lines[:2] == [
        "from benchmarks.tutorial_swap import install_swap",
        "install_swap('deep-ensemble')",
    ]
    assert lines[2:] == ["x = 1", "assert x == 1"]
    assert tutorial_swap.swapped_script("x = 1", "gp", "assert x\n").splitlines() == [
        "x = 1",
        "assert x",
    ]
    assert set(tutorial_swap.SANITY_CHECKS) <= set(tutorial_swap.TUTORIALS)
