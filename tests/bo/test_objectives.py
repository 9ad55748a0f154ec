"""Objectives and problems of the BO core: a user's function in one line, the registered
and composite problems, and clear errors for bad outputs."""

import math

import pytest
import torch

from botorch_nn_uq.bo import (
    BayesianOptimizer,
    Composite,
    FunctionProblem,
    HitTarget,
    Maximize,
    Minimize,
    Problem,
    composite_problem,
    registered_problem,
)
from botorch_nn_uq.bo.objectives import check_bounds
from botorch_nn_uq.problems import Pollutants, get_bo_problem


def test_a_function_of_one_point_or_of_a_batch_is_a_problem() -> None:
    def sphere(x):
        return float((x - 0.25).square().sum())

    problem = FunctionProblem(sphere, [[0.0, 0.0], [1.0, 1.0]])
    assert isinstance(problem, Problem) and problem.name == "sphere"
    X = torch.tensor([[0.25, 0.25], [1.0, 0.25]], dtype=torch.float64)
    assert problem.evaluate(X).tolist() == [[0.0], [0.5625]]
    batched = FunctionProblem(
        lambda X: (X - 0.25).square().sum(-1), problem.bounds, vectorized=True
    )
    assert torch.equal(batched.evaluate(X), problem.evaluate(X))
    pairs = FunctionProblem(lambda x: [x.sum(), x.prod()], problem.bounds)
    assert pairs.evaluate(X).shape == (2, 2)


def test_a_function_returning_the_wrong_number_of_outputs_is_named() -> None:
    problem = FunctionProblem(lambda X: X[:1, 0], [[0.0], [1.0]], vectorized=True, name="short")
    with pytest.raises(ValueError, match="short returned 1 outputs for 2 points"):
        problem.evaluate(torch.zeros(2, 1, dtype=torch.float64))
    total = FunctionProblem(lambda X: X.sum(), [[0.0], [1.0]], vectorized=True, name="total")
    with pytest.raises(ValueError, match="total returned 1 outputs for 2 points"):
        total.evaluate(torch.zeros(2, 1, dtype=torch.float64))


def test_objectives_check_outputs() -> None:
    with pytest.raises(ValueError, match="expects 1 output"):
        Minimize().check_outputs(torch.zeros(3, 2))
    with pytest.raises(ValueError, match=r"rows \[1\] hold NaN or infinite"):
        Minimize().check_outputs(torch.tensor([0.0, math.inf]))
    with pytest.raises(ValueError, match="floating point"):
        Minimize().check_outputs(torch.tensor([1, 2]))
    assert Minimize().check_outputs(torch.tensor([1.0, 2.0])).shape == (2, 1)
    with pytest.raises(ValueError, match="target must be finite"):
        HitTarget(math.nan)
    with pytest.raises(ValueError, match="num_outputs must be a positive integer"):
        Composite(lambda Y: Y.sum(-1), num_outputs=0)


def test_objective_scores_and_model_targets() -> None:
    Y = torch.tensor([[3.0], [1.0]])
    assert Minimize().scores(Minimize().values(Y)).tolist() == [3.0, 1.0]
    assert Maximize().scores(Maximize().values(Y)).tolist() == [-3.0, -1.0]
    assert HitTarget(2.5).scores(Y[:, 0]).tolist() == [0.25, 2.25]
    assert torch.equal(Minimize().model_targets(Y), -Y)
    assert HitTarget(2.5).acquisition_options() == {"target": -2.5}


def test_registered_and_composite_problems_follow_the_protocol() -> None:
    problem = registered_problem("rosenbrock", 3)
    original = get_bo_problem("rosenbrock", 3)
    X = original.maximizer.unsqueeze(0)
    assert problem.evaluate(X).shape == (1, 1) and problem.name == "rosenbrock-3d"
    assert problem.regret(original.max_value) == pytest.approx(2.0)
    target = registered_problem("rosenbrock", 3, target=1.0)
    assert target.regret(1.0) == 0.0 and isinstance(target.objective, HitTarget)
    pollutants = composite_problem(Pollutants())
    U = pollutants.bounds.mean(0, keepdim=True)
    outputs = pollutants.evaluate(U)
    assert outputs.shape == (1, Pollutants().num_outputs)
    torch.testing.assert_close(pollutants.objective.values(outputs), Pollutants().evaluate(U))


def test_a_function_gets_a_copy_of_the_points_and_its_outputs_are_detached() -> None:
    def shifted(x):
        x.sub_(0.3)
        return float(x.square().sum())

    def clamped(X):
        X.clamp_(0.0, 0.5)
        return (X - 0.3).square().sum(-1)

    def graded(x):
        return (x * torch.ones_like(x).requires_grad_()).sum(-1)

    X = torch.tensor([[0.25, 0.75], [1.0, 0.0]], dtype=torch.float64)
    before = X.clone()
    bounds = [[0.0, 0.0], [1.0, 1.0]]
    assert FunctionProblem(shifted, bounds).evaluate(X).squeeze(-1).tolist() == pytest.approx(
        [0.205, 0.58]
    )
    assert FunctionProblem(clamped, bounds, vectorized=True).evaluate(X).squeeze(-1).tolist() == (
        pytest.approx([0.0425, 0.13])
    )
    assert torch.equal(X, before)
    for vectorized in (False, True):
        outputs = FunctionProblem(graded, bounds, vectorized=vectorized).evaluate(X)
        assert not outputs.requires_grad and outputs.shape[0] == 2


def test_a_function_returning_complex_outputs_is_refused() -> None:
    X = torch.zeros(2, 1, dtype=torch.float64)
    for vectorized, function in ((False, lambda x: 1 + 2j), (True, lambda X: X[:, 0] + 1j)):
        problem = FunctionProblem(function, [[0.0], [1.0]], vectorized=vectorized, name="wave")
        with pytest.raises(
            ValueError, match="The outputs of wave must be real numbers; got complex values"
        ):
            problem.evaluate(X)


def test_the_non_finite_output_error_says_what_tell_accepts() -> None:
    with pytest.raises(ValueError, match=r"rows \[1\] hold NaN") as error:
        Minimize().check_outputs(torch.tensor([0.0, math.nan]))
    message = str(error.value)
    assert "leave the points out" not in message
    assert "evaluate them again" in message and "worst value seen so far" in message


def test_bounds_on_the_meta_device_are_refused() -> None:
    bounds = torch.tensor([[0.0], [1.0]], dtype=torch.float64, device="meta")
    for make in (check_bounds, lambda b: FunctionProblem(abs, b), BayesianOptimizer):
        with pytest.raises(ValueError, match="bounds are on the meta device, which holds no"):
            make(bounds)
