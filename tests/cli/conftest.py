"""Fixtures of the command-line tests: a run with an asked batch, a user's objectives in
the current folder, a guard that no work starts, and torch's threads as a record."""

import textwrap

import pytest
import torch

from botorch_nn_uq.bo import BayesianOptimizer
from botorch_nn_uq.cli import optimize
from tests.cli.commands import RANDOM_RUN, ask, tell

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
def asked(tmp_path, capsys):
    r"""A random-search run whose initial design was told and whose step-1 batch of 3
    points is asked: its state file and the rows of that batch."""
    state = tmp_path / "run.state"
    tell(state, ask(state, capsys, *RANDOM_RUN), tmp_path / "design.csv", capsys)
    return state, ask(state, capsys, "--batch-size", "3")


@pytest.fixture
def objectives(tmp_path, monkeypatch):
    r"""A module ``user_objectives`` in the current folder (as a user's would be)."""
    (tmp_path / "user_objectives.py").write_text(textwrap.dedent(OBJECTIVES))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def changing_objectives(tmp_path, monkeypatch):
    r"""A module ``changing_objectives`` in the current folder whose functions change
    their input in place, return a tensor that requires grad, or leave a file ``called``."""
    (tmp_path / "changing_objectives.py").write_text(textwrap.dedent(CHANGING_OBJECTIVES))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def no_work(monkeypatch):
    r"""Fail the test if the command builds the problem or starts the run."""

    def forbidden(*args, **kwargs):
        raise AssertionError("the command started working before checking its options")

    monkeypatch.setattr(optimize, "get_bo_problem", forbidden)
    monkeypatch.setattr(optimize, "load_objective", forbidden)
    monkeypatch.setattr(BayesianOptimizer, "run", forbidden)


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
