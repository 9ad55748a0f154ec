"""Benchmark problems: BO test functions, their regret metrics and composite problems."""

from botorch_nn_uq.problems.composite import Brusselator, CompositeProblem, Pollutants
from botorch_nn_uq.problems.suite import BO_PROBLEM_NAMES, BOProblem, get_bo_problem
from botorch_nn_uq.problems.synthetic import GFunction, Perm

__all__ = [
    "BO_PROBLEM_NAMES",
    "BOProblem",
    "Brusselator",
    "CompositeProblem",
    "GFunction",
    "Perm",
    "Pollutants",
    "get_bo_problem",
]
