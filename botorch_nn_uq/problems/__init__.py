"""Benchmark problems: BO test functions and their regret metrics."""

from botorch_nn_uq.problems.suite import BO_PROBLEM_NAMES, BOProblem, get_bo_problem
from botorch_nn_uq.problems.synthetic import GFunction, Perm

__all__ = ["BO_PROBLEM_NAMES", "BOProblem", "GFunction", "Perm", "get_bo_problem"]
