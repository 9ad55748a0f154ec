r"""What a run of the command line optimises: a user's function (``optimize --objective
package.module:function``), the box of its inputs (``--bounds``, ``--dim``) and its
direction (minimise, ``--maximize`` or ``--target``).

- :func:`load_objective` imports the user's function;
- :class:`CheckedProblem` reports its failures as :class:`ObjectiveError`, which
  ``optimize`` prints in one line instead of a traceback of the loop;
- :func:`parse_bounds` and :func:`objective_from_options` turn the options into the box
  and the :class:`~botorch_nn_uq.bo.Objective` of a run (``optimize`` and ``ask``).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from botorch_nn_uq.bo import HitTarget, Maximize, Minimize, Objective, Problem
from botorch_nn_uq.cli.parsers import MAX_DIM


class ObjectiveError(Exception):
    r"""A user's objective failed or returned unusable values."""


class CheckedProblem:
    r"""A user's problem whose failures become :class:`ObjectiveError` with the batch
    named, so the command line reports them instead of a traceback of the loop.

    Args:
        problem: The user's problem (a :class:`~botorch_nn_uq.bo.FunctionProblem`).
    """

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        self.name, self.bounds, self.objective = problem.name, problem.bounds, problem.objective

    def evaluate(self, X: Tensor) -> Tensor:
        r"""The problem's outputs at the ``q x d`` points ``X``, checked by its objective.

        Raises:
            ObjectiveError: If the user's function fails or its outputs are unusable.
        """
        try:
            outputs = self.problem.evaluate(X)
            self.objective.check_outputs(outputs)
        except Exception as error:  # the user's code may fail in any way
            raise ObjectiveError(
                f"the objective {self.name} failed on a batch of {X.shape[0]} points: "
                f"{type(error).__name__}: {error}"
            ) from error
        return outputs


def load_objective(reference: str) -> Callable[[Tensor], Any]:
    r"""The function ``package.module:function`` names, imported with the current folder
    first on the module search path.

    Args:
        reference: ``package.module:function``.

    Returns:
        The function.

    Raises:
        ValueError: If the module cannot be imported, or has no such callable.
    """
    module_name, _, name = reference.partition(":")
    folder = os.getcwd()
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # an objective module can fail in any way on import
        raise ValueError(
            f"cannot import {module_name!r}: {type(error).__name__}: {error}"
        ) from None
    finally:
        if added:
            sys.path.remove(folder)
    function = getattr(module, name, None)
    if function is None:
        raise ValueError(f"module {module_name!r} has no {name!r}")
    if not callable(function):
        raise ValueError(f"{reference} is a {type(function).__name__}, not a function")
    return function


def objective_from_options(args: argparse.Namespace) -> Objective:
    r"""The direction of a run: hit ``--target``, maximise with ``--maximize``, or
    minimise.

    Args:
        args: The parsed command, with ``target`` and ``maximize``.
    """
    if args.target is not None:
        return HitTarget(args.target)
    return Maximize() if args.maximize else Minimize()


def parse_bounds(args: argparse.Namespace, parser: argparse.ArgumentParser) -> Tensor:
    r"""The ``2 x d`` box of ``--bounds`` (one pair repeated ``--dim`` times).

    Args:
        args: The parsed command, with ``bounds`` (a lower and an upper bound per input)
            and ``dim``.
        parser: The command's parser, whose error exits on a box that is not one.

    Returns:
        The lower bounds (first row) and upper bounds (second row), in ``float64``.
    """
    numbers = list(args.bounds)
    if len(numbers) % 2:
        parser.error(
            f"argument --bounds: needs a lower and an upper bound per input; got {len(numbers)} "
            "numbers"
        )
    pairs = list(zip(numbers[::2], numbers[1::2], strict=True))
    wrong = [index for index, (low, high) in enumerate(pairs) if not low < high]
    if wrong:
        parser.error(
            f"argument --bounds: the lower bound of input {wrong[0]} is not below its upper bound"
        )
    if args.dim is not None and len(pairs) == 1:
        pairs *= args.dim
    elif args.dim is not None and len(pairs) != args.dim:
        parser.error(
            f"argument --bounds: {len(pairs)} pairs for --dim {args.dim} (give one pair per "
            "input, or one pair for all)"
        )
    if len(pairs) > MAX_DIM:
        parser.error(f"argument --bounds: at most {MAX_DIM} inputs; got {len(pairs)}")
    return torch.tensor(pairs, dtype=torch.float64).T.contiguous()
