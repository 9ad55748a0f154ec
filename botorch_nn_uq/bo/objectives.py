r"""What a BO run optimises: objectives, and the problem protocol.

A run observes **outputs** ``Y`` (``n x m``) at inputs ``X`` (``n x d``); its
:class:`Objective` turns them into the **values** it reports (``f``, or ``g(h)`` for a
composite problem), ranks evaluations by their **scores** (smaller is better) and says
what the surrogate is fitted on (the model targets, to maximise, as BoTorch expects):

- :class:`Minimize` / :class:`Maximize`: a scalar ``f`` (``m = 1``);
- :class:`HitTarget`: target-value optimisation, the best value is the one closest to a
  target, and the acquisition (a target-value one) receives the target in the model's
  units;
- :class:`Composite`: ``f = g(h(x))`` with a known, differentiable ``g`` of the
  ``m`` outputs of an expensive ``h``; the surrogate models ``h`` and the acquisition
  averages ``-g`` over its samples.

A :class:`Problem` is anything with a ``name``, ``bounds``, an ``objective`` and an
``evaluate(X) -> Y``; :class:`FunctionProblem` wraps a user's Python function in one
line, :func:`registered_problem` the package's test functions and
:func:`composite_problem` its composite problems.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
from botorch.acquisition.objective import GenericMCObjective, MCAcquisitionObjective
from torch import Tensor

from botorch_nn_uq.checks import check_device, is_int_in_range
from botorch_nn_uq.problems import BOProblem, CompositeProblem, get_bo_problem


class Objective(ABC):
    r"""How a run's outputs rank its evaluations and what its surrogate is fitted on.

    Attributes:
        num_outputs: The number ``m`` of outputs per evaluation (``None``: any).
    """

    num_outputs: int | None = 1

    @abstractmethod
    def values(self, Y: Tensor) -> Tensor:
        r"""The objective values of outputs ``Y`` (``n x m`` -> ``n``)."""

    @abstractmethod
    def scores(self, values: Tensor) -> Tensor:
        r"""Ranking scores of ``values`` (``n`` -> ``n``): smaller is better."""

    @abstractmethod
    def model_targets(self, Y: Tensor) -> Tensor:
        r"""What the surrogate is fitted on (``n x m`` -> ``n x k``, to maximise)."""

    def acquisition_options(self) -> dict[str, Any]:
        r"""Options every acquisition of the run receives (e.g. a target value)."""
        return {}

    @property
    def mc_objective(self) -> MCAcquisitionObjective | None:
        r"""The BoTorch objective of the model's samples, or ``None`` for the model's
        own (single) output."""
        return None

    @property
    def requires_target(self) -> bool:
        r"""Whether the run needs a target-value acquisition."""
        return False

    def to_config(self) -> dict[str, Any] | None:
        r"""A JSON description that :func:`objective_from_config` turns back into this
        objective, or ``None`` for one that holds code (a composite ``g``)."""
        return None

    def describe(self) -> str:
        r"""A few words for progress output (e.g. ``"minimise"``)."""
        return type(self).__name__

    def check_outputs(self, Y: Tensor) -> Tensor:
        r"""``Y`` as an ``n x m`` tensor, or a clear error.

        Args:
            Y: ``n`` (for ``m = 1``) or ``n x m`` outputs.
        """
        if Y.dim() == 1 and self.num_outputs in (1, None):
            Y = Y.unsqueeze(-1)
        if Y.dim() != 2:
            raise ValueError(f"Outputs must be an n x m tensor; got shape {tuple(Y.shape)}.")
        if self.num_outputs is not None and Y.shape[-1] != self.num_outputs:
            raise ValueError(
                f"{self.describe()} expects {self.num_outputs} output(s) per evaluation; got "
                f"{Y.shape[-1]}."
            )
        if not torch.is_floating_point(Y):
            raise ValueError(f"Outputs must be floating point; got {Y.dtype}.")
        if not Y.isfinite().all():
            rows = (~Y.isfinite()).any(-1).nonzero().squeeze(-1).tolist()
            # A batch is told whole (tell refuses one with points missing).
            raise ValueError(
                f"Outputs must be finite; rows {rows} hold NaN or infinite values (evaluate "
                "them again, or give a point that cannot be evaluated a finite stand-in "
                "value, such as the worst value seen so far)."
            )
        return Y


class Minimize(Objective):
    r"""Minimise a scalar output ``f``; the surrogate is fitted on ``-f``."""

    def values(self, Y: Tensor) -> Tensor:
        return Y[..., 0]

    def scores(self, values: Tensor) -> Tensor:
        return values

    def model_targets(self, Y: Tensor) -> Tensor:
        return -Y

    def to_config(self) -> dict[str, Any]:
        return {"type": "minimize"}

    def describe(self) -> str:
        return "minimise"


class Maximize(Objective):
    r"""Maximise a scalar output ``f``; the surrogate is fitted on ``f``."""

    def values(self, Y: Tensor) -> Tensor:
        return Y[..., 0]

    def scores(self, values: Tensor) -> Tensor:
        return -values

    def model_targets(self, Y: Tensor) -> Tensor:
        return Y

    def to_config(self) -> dict[str, Any]:
        return {"type": "maximize"}

    def describe(self) -> str:
        return "maximise"


class HitTarget(Objective):
    r"""Target-value optimisation: the best evaluation has the output closest to
    ``target`` (smallest ``(f - target)^2``).

    The surrogate is fitted on ``-f`` and the acquisition (a target-value one, such as
    ``RobustTargetExpectedImprovement``) receives ``target = -target`` in the model's
    units.

    Args:
        target: The target value of ``f`` (finite).
    """

    def __init__(self, target: float) -> None:
        target = float(target)
        if not math.isfinite(target):
            raise ValueError(f"target must be finite; got {target}.")
        self.target = target

    def values(self, Y: Tensor) -> Tensor:
        return Y[..., 0]

    def scores(self, values: Tensor) -> Tensor:
        return (values - self.target) ** 2

    def model_targets(self, Y: Tensor) -> Tensor:
        return -Y

    def acquisition_options(self) -> dict[str, Any]:
        return {"target": -self.target}

    @property
    def requires_target(self) -> bool:
        return True

    def to_config(self) -> dict[str, Any]:
        return {"type": "target", "target": self.target}

    def describe(self) -> str:
        return f"target {self.target:g}"


class Composite(Objective):
    r"""Minimise ``g(h(x))``: the run observes the ``m`` outputs of ``h`` and a known,
    differentiable ``g`` maps them to the value.

    The surrogate models ``h`` (all ``m`` outputs), and MC acquisitions average ``-g``
    of its samples (``mc_objective``).

    Args:
        g: Maps ``... x m`` outputs to ``...`` values to minimise (also model samples,
            with any leading batch shape).
        num_outputs: ``m``.

    Example:
        >>> objective = Composite(lambda Y: (Y - observed).square().sum(-1), num_outputs=12)
    """

    def __init__(self, g: Callable[[Tensor], Tensor], num_outputs: int) -> None:
        if not is_int_in_range(num_outputs, minimum=1):
            raise ValueError(f"num_outputs must be a positive integer; got {num_outputs!r}.")
        self.g = g
        self.num_outputs = num_outputs

    def values(self, Y: Tensor) -> Tensor:
        return self.g(Y)

    def scores(self, values: Tensor) -> Tensor:
        return values

    def model_targets(self, Y: Tensor) -> Tensor:
        return Y

    @property
    def mc_objective(self) -> MCAcquisitionObjective:
        def negative_g(samples: Tensor, X: Tensor | None = None) -> Tensor:
            return -self.g(samples)

        return GenericMCObjective(negative_g)

    def describe(self) -> str:
        return f"minimise g of {self.num_outputs} outputs"


def objective_from_config(config: dict[str, Any]) -> Objective:
    r"""The objective a :meth:`Objective.to_config` describes.

    Args:
        config: ``{"type": "minimize"}``, ``{"type": "maximize"}`` or ``{"type":
            "target", "target": t}``.
    """
    kind = config.get("type")
    if kind == "minimize":
        return Minimize()
    if kind == "maximize":
        return Maximize()
    if kind == "target":
        return HitTarget(config["target"])
    raise ValueError(f"Unknown objective {config!r}.")


@runtime_checkable
class Problem(Protocol):
    r"""What :meth:`~botorch_nn_uq.bo.BayesianOptimizer.run` optimises.

    Attributes:
        name: A name for progress output and result files.
        bounds: The ``2 x d`` box of the inputs.
        objective: How the outputs rank evaluations.

    A problem may also have ``regret(best_value) -> float``, a normalised regret of a
    best value, which run records then report.
    """

    name: str
    bounds: Tensor
    objective: Objective

    def evaluate(self, X: Tensor) -> Tensor:
        r"""The outputs at ``X`` (``q x d`` -> ``q x m``, or ``q`` for ``m = 1``)."""


class FunctionProblem:
    r"""A user's Python function as a :class:`Problem`.

    Args:
        function: With ``vectorized=False`` (default) it takes one point (a
            ``d``-tensor in ``bounds``' dtype) and returns a number, or ``m`` numbers for
            a composite objective; with ``vectorized=True`` it takes a ``q x d`` tensor
            and returns ``q`` or ``q x m`` outputs.
        bounds: The ``2 x d`` box (a tensor or nested sequence; stored as float64).
        objective: How the outputs rank evaluations (default :class:`Minimize`).
        name: A name for output (default: the function's name).
        vectorized: Whether ``function`` evaluates a whole batch at once.

    Example:
        >>> problem = FunctionProblem(lambda x: float((x - 0.3).square().sum()), [[0, 0], [1, 1]])
        >>> BayesianOptimizer.for_problem(problem, surrogate="gp").run(problem, steps=10)
    """

    def __init__(
        self,
        function: Callable[[Tensor], Any],
        bounds: Tensor | Sequence[Sequence[float]],
        objective: Objective | None = None,
        name: str | None = None,
        vectorized: bool = False,
    ) -> None:
        if not callable(function):
            raise TypeError(f"function must be callable; got {type(function).__name__}.")
        self.function = function
        self.bounds = check_bounds(torch.as_tensor(bounds, dtype=torch.float64))
        self.objective = Minimize() if objective is None else objective
        self.name = name or getattr(function, "__name__", "function")
        self.vectorized = vectorized

    def evaluate(self, X: Tensor) -> Tensor:
        r"""The function's outputs at the ``q x d`` points ``X`` (``q x m``, on the device
        of ``X``).

        The function gets a copy of the points (each point, or the whole batch), so one
        that changes its input in place leaves ``X`` as it was; its outputs are detached
        from any autograd graph they belong to.
        """
        if self.vectorized:
            outputs = self._outputs(self.function(X.clone()), X)
        else:
            outputs = torch.stack(
                [self._outputs(self.function(x.clone()), X).reshape(-1) for x in X]
            )
        if outputs.dim() < 2:
            # One number per point, or a single number for the whole batch.
            outputs = outputs.reshape(-1, 1)
        if outputs.shape[0] != X.shape[0]:
            raise ValueError(
                f"{self.name} returned {outputs.shape[0]} outputs for {X.shape[0]} points."
            )
        return outputs

    def _outputs(self, returned: Any, X: Tensor) -> Tensor:
        r"""What the function ``returned`` as a detached tensor in the dtype and on the
        device of the ``q x d`` points ``X``."""
        return as_real_tensor(returned, f"The outputs of {self.name}", X.dtype, X.device)


class RegisteredProblem:
    r"""A registered test function (:func:`~botorch_nn_uq.problems.get_bo_problem`) as a
    :class:`Problem`: minimise ``f``, or hit a target value of it.

    Args:
        problem: The test function with its known extrema.
        target: A target value of ``f`` (target-value optimisation), or ``None`` to
            minimise.
        device: The device of ``bounds`` (and so of a run's points and evaluations);
            ``None`` keeps the test function's, the CPU.
    """

    def __init__(
        self,
        problem: BOProblem,
        target: float | None = None,
        device: str | torch.device | None = None,
    ) -> None:
        self.problem = problem
        self.name = f"{problem.name}-{problem.dim}d"
        self.bounds = (
            problem.bounds if device is None else problem.bounds.to(check_device("device", device))
        )
        self.objective: Objective = Minimize() if target is None else HitTarget(target)

    def evaluate(self, X: Tensor) -> Tensor:
        r"""``f`` at the ``q x d`` points ``X`` (``q x 1``)."""
        return self.problem.evaluate(X).unsqueeze(-1)

    def regret(self, best_value: float) -> float:
        r"""The normalised regret of ``best_value``: ``2 (f - f_min) / (f_max - f_min)``,
        or with a target ``2 |f - target| / (f_max - f_min)``."""
        if isinstance(self.objective, HitTarget):
            spread = self.problem.max_value - self.problem.min_value
            return 2 * abs(best_value - self.objective.target) / spread
        return float(self.problem.normalized_regret(best_value))


def registered_problem(
    name: str,
    dim: int,
    problem_seed: int | None = None,
    target: float | None = None,
    device: str | torch.device | None = None,
) -> RegisteredProblem:
    r"""The registered test function ``name`` in ``dim`` dimensions as a :class:`Problem`.

    Args:
        name: One of :data:`~botorch_nn_uq.problems.BO_PROBLEM_NAMES`.
        dim: The input dimension.
        problem_seed: The seed of ``nn-draw``'s random network.
        target: A target value of ``f`` (target-value optimisation), or ``None``.
        device: The device of the problem's bounds (``None``: the CPU).
    """
    return RegisteredProblem(
        get_bo_problem(name, dim, problem_seed=problem_seed), target, device=device
    )


class CompositeFunctionProblem:
    r"""A composite problem ``g(h(u))`` (:class:`~botorch_nn_uq.problems.CompositeProblem`)
    as a :class:`Problem`: the outputs are ``h`` flattened (grid-point major), the
    objective :class:`Composite` with the problem's ``g``.

    Args:
        problem: The composite problem.
    """

    def __init__(self, problem: CompositeProblem) -> None:
        self.problem = problem
        self.name = problem.name
        self.bounds = problem.bounds
        self.objective = Composite(
            lambda Y: problem.g(problem.unflatten(Y)), num_outputs=problem.num_outputs
        )

    def evaluate(self, X: Tensor) -> Tensor:
        r"""``h`` at the ``q x d`` points ``X``, flattened (``q x m d_s``)."""
        return self.problem.flatten(self.problem.h(X))


def composite_problem(problem: CompositeProblem) -> CompositeFunctionProblem:
    r"""The composite problem as a :class:`Problem` (see
    :class:`CompositeFunctionProblem`)."""
    return CompositeFunctionProblem(problem)


def check_bounds(bounds: Tensor) -> Tensor:
    r"""``bounds`` if it is a finite ``2 x d`` box with every lower bound below its upper
    bound; a clear error otherwise."""
    if bounds.device.type == "meta":
        raise ValueError(
            "bounds are on the meta device, which holds no values; create them on the CPU or "
            "an accelerator (e.g. torch.tensor(..., device='cpu'))."
        )
    if bounds.dim() != 2 or bounds.shape[0] != 2 or bounds.shape[1] < 1:
        raise ValueError(f"bounds must have shape 2 x d; got {tuple(bounds.shape)}.")
    if not torch.is_floating_point(bounds):
        raise ValueError(f"bounds must be floating point; got {bounds.dtype}.")
    if not bounds.isfinite().all():
        raise ValueError("bounds must be finite.")
    if not (bounds[0] < bounds[1]).all():
        bad = (bounds[0] >= bounds[1]).nonzero().squeeze(-1).tolist()
        raise ValueError(f"Every lower bound must be below its upper bound; not in {bad}.")
    return bounds


def as_real_tensor(
    values: Any,
    what: str,
    dtype: torch.dtype | None = None,
    device: torch.device | None = None,
) -> Tensor:
    r"""``values`` as a tensor detached from any autograd graph, or a clear error if they
    are complex (a cast to a real dtype would drop their imaginary part silently).

    Args:
        values: A tensor, array, number, or nested sequence of them.
        what: What the values are, for the error (e.g. ``"Outputs"``).
        dtype: The tensor's dtype (``None``: that of ``values``).
        device: The tensor's device (``None``: that of ``values``, or the CPU).

    Returns:
        A tensor of the values' shape.
    """
    if _holds_complex(values):
        kind = f" ({values.dtype})" if isinstance(values, (Tensor, np.ndarray)) else ""
        raise ValueError(f"{what} must be real numbers; got complex values{kind}.")
    return torch.as_tensor(values, dtype=dtype, device=device).detach()


def _holds_complex(values: Any) -> bool:
    r"""Whether ``values`` (see :func:`as_real_tensor`) hold a complex number."""
    if isinstance(values, Tensor):
        return values.is_complex()
    if isinstance(values, (list, tuple)):
        return any(_holds_complex(value) for value in values)
    return bool(np.iscomplexobj(values))
