"""Benchmark problems: BO test functions (the NOMU suite and the large-scale problems),
their regret metrics, a non-stationary test function (warped Hartmann-6), two control
problems (the lunar lander and the rover trajectory) and composite problems."""

from botorch_nn_uq.problems.composite import Brusselator, CompositeProblem, Pollutants
from botorch_nn_uq.problems.lunar import LunarLander
from botorch_nn_uq.problems.rover import RoverTrajectory
from botorch_nn_uq.problems.scale import RandomTanhNetwork
from botorch_nn_uq.problems.suite import (
    BO_PROBLEM_NAMES,
    CONTROL_PROBLEM_NAMES,
    NOMU_SUITE_NAMES,
    NON_STATIONARY_PROBLEM_NAMES,
    SCALE_PROBLEM_NAMES,
    BOProblem,
    get_bo_problem,
)
from botorch_nn_uq.problems.synthetic import GFunction, Perm
from botorch_nn_uq.problems.warped import WarpedHartmann

__all__ = [
    "BO_PROBLEM_NAMES",
    "CONTROL_PROBLEM_NAMES",
    "NOMU_SUITE_NAMES",
    "NON_STATIONARY_PROBLEM_NAMES",
    "SCALE_PROBLEM_NAMES",
    "BOProblem",
    "Brusselator",
    "CompositeProblem",
    "GFunction",
    "LunarLander",
    "Perm",
    "Pollutants",
    "RandomTanhNetwork",
    "RoverTrajectory",
    "WarpedHartmann",
    "get_bo_problem",
]
