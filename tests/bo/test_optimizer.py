"""The ask/tell core: one seeding rule for run, ask/tell and ask/tell across processes;
tell's checks; saving and loading with components given as code."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from botorch.acquisition import LogExpectedImprovement

from botorch_nn_uq.bo import (
    AcquisitionProposer,
    BayesianOptimizer,
    ColdFit,
    Composite,
    ContinualFit,
    ContinualTraining,
    FunctionProblem,
    HitTarget,
    Maximize,
    RandomProposer,
    TrustRegionProposer,
    TurboProposer,
    registered_problem,
)
from botorch_nn_uq.bo.optimizer import EvaluationsNotToldError
from botorch_nn_uq.bo.pending import NotPendingError
from botorch_nn_uq.bo.surrogates import get_surrogate

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ("levy", 2)

#: name -> (optimizer options, q, steps)
CONFIGURATIONS = {
    "gp": (
        lambda: {
            "surrogate": "gp",
            "proposer": AcquisitionProposer("qlogei", num_restarts=2, raw_samples=16),
        },
        2,
        3,
    ),
    "network": (
        lambda: {
            "surrogate": "deep-ensemble",
            "proposer": TrustRegionProposer(
                AcquisitionProposer("ts", options={"num_candidates": 256})
            ),
            "fit_policy": ContinualFit(ContinualTraining(warm_start_steps=20, cold_refit_every=3)),
        },
        3,
        3,
    ),
    "random": (lambda: {"proposer": RandomProposer()}, 4, 3),
    # TuRBO-1 with a quick collapse, so the run restarts (its data set aside, the last
    # model not continued) within the steps.
    "turbo-network": (
        lambda: {
            "surrogate": "deep-ensemble",
            "proposer": TurboProposer(failure_tolerance=1, length_min=0.3, num_candidates=128),
            "fit_policy": ContinualFit(ContinualTraining(warm_start_steps=20, cold_refit_every=3)),
        },
        3,
        7,
    ),
}

#: One step in a fresh process: load, ask, save, load, evaluate and tell, save.
STEP_SCRIPT = """
import sys
from botorch_nn_uq.bo import BayesianOptimizer, registered_problem

path, q = sys.argv[1], int(sys.argv[2])
optimizer = BayesianOptimizer.load(path)
X = optimizer.ask(None if optimizer.step == 0 else q)
optimizer.save(path)
optimizer = BayesianOptimizer.load(path)
optimizer.tell(X, registered_problem("levy", 2).evaluate(X))
optimizer.save(path)
"""


def _optimizer(name: str, seed: int = 3) -> BayesianOptimizer:
    options, _, _ = CONFIGURATIONS[name]
    return BayesianOptimizer(
        registered_problem(*PROBLEM).bounds, seed=seed, n_initial=4, **options()
    )


@pytest.mark.parametrize("name", list(CONFIGURATIONS))
def test_run_ask_tell_and_ask_tell_across_processes_propose_the_same_points(
    name: str, tmp_path
) -> None:
    _, q, steps = CONFIGURATIONS[name]
    problem = registered_problem(*PROBLEM)
    torch.manual_seed(0)
    through_run = _optimizer(name)
    through_run.run(problem, steps, q=q)

    torch.manual_seed(1)
    in_process = _optimizer(name)
    for step in range(steps + 1):
        X = in_process.ask(None if step == 0 else q)
        in_process.tell(X, problem.evaluate(X))

    path = tmp_path / "run.state"
    _optimizer(name).save(path)
    for _ in range(steps + 1):
        subprocess.run([sys.executable, "-c", STEP_SCRIPT, str(path), str(q)], check=True, cwd=ROOT)
    across_processes = BayesianOptimizer.load(path)

    assert through_run.X.shape == (4 + steps * q, 2)
    for other in (in_process, across_processes):
        assert torch.equal(other.X, through_run.X)
        assert torch.equal(other.Y, through_run.Y)
        assert [r.warm_start for r in other.records] == [r.warm_start for r in through_run.records]
    if name == "network":
        assert any(record.warm_start for record in through_run.records)
        assert "trust_region_length" in through_run.records[-1].details
    if name == "turbo-network":
        assert any("restart_design" in record.details for record in through_run.records)
        assert through_run.proposer.segment_start > 0


def test_asking_again_proposes_new_points_and_keeps_every_asked_point_pending() -> None:
    optimizer = _optimizer("random")
    design = optimizer.ask()
    with pytest.raises(ValueError, match="initial design of n_initial = 4"):
        BayesianOptimizer([[0.0], [1.0]], proposer="random", n_initial=4).ask(2)
    # Random search needs no model: it may ask before any result is told.
    more = optimizer.ask(2)
    assert torch.equal(optimizer.pending, torch.cat([design, more]))
    assert optimizer.pending_ids.tolist() == [0, 1, 2, 3, 4, 5] and optimizer.step == 2
    optimizer.tell(design, torch.ones(4))
    assert torch.equal(optimizer.pending, more)


def _told(optimizer: BayesianOptimizer) -> tuple[torch.Tensor, torch.Tensor]:
    X = optimizer.ask()
    optimizer.tell(X, torch.arange(4.0, dtype=torch.float64))
    return X, optimizer.ask(3)


@pytest.mark.parametrize(
    ("rows", "outputs", "message"),
    [
        ([0, 1, 1], [1.0, 2.0, 3.0], r"Told rows \[2\] are not pending points"),
        ([0, 1, 2, 2], [1.0, 2.0, 3.0, 4.0], r"Told rows \[3\] are not pending points"),
        ([0, 1, 2], [1.0, float("nan"), 3.0], r"rows \[1\] hold NaN"),
        ([0, 1, 2], [1.0, 2.0], "Got 2 outputs for 3 points"),
    ],
)
def test_a_bad_tell_names_the_problem_and_changes_nothing(rows, outputs, message) -> None:
    optimizer = _optimizer("random")
    _, batch = _told(optimizer)
    before = (optimizer.X.clone(), optimizer.step, len(optimizer.records))
    with pytest.raises(ValueError, match=message):
        optimizer.tell(batch[rows], torch.tensor(outputs, dtype=torch.float64))
    assert torch.equal(optimizer.X, before[0])
    assert (optimizer.step, len(optimizer.records)) == before[1:]
    assert torch.equal(optimizer.pending, batch)


def test_told_rows_may_come_in_any_order_and_with_rounding() -> None:
    optimizer = _optimizer("random")
    _, batch = _told(optimizer)
    told = batch[[2, 0, 1]] + 1e-12
    record = optimizer.tell(told, torch.tensor([3.0, 1.0, 2.0], dtype=torch.float64))
    assert torch.equal(optimizer.X[-3:], batch)
    assert optimizer.values[-3:].tolist() == [1.0, 2.0, 3.0]
    assert record.step == 1 and record.value == 1.0 and record.num_evaluations == 7


def test_a_batch_cannot_be_told_twice_or_unasked() -> None:
    optimizer = _optimizer("random")
    _, batch = _told(optimizer)
    optimizer.tell(batch, torch.zeros(3, dtype=torch.float64))
    with pytest.raises(NotPendingError, match="are not pending points"):
        optimizer.tell(batch, torch.zeros(3, dtype=torch.float64))
    with pytest.raises(NotPendingError, match=r"Ids 4 \(told already\), 99 \(never asked\)"):
        optimizer.ask(3)
        optimizer.tell([4, 99], torch.zeros(2, dtype=torch.float64))


def test_evaluations_made_before_the_run_can_be_told_as_its_initial_design() -> None:
    optimizer = BayesianOptimizer([[0.0, 0.0], [1.0, 1.0]], surrogate="gp", proposer="logei")
    X = torch.tensor([[0.1, 0.2], [0.5, 0.5], [0.9, 0.3]], dtype=torch.float64)
    optimizer.tell(X, torch.tensor([3.0, 1.0, 2.0], dtype=torch.float64))
    assert optimizer.step == 1 and optimizer.best().index == 1
    assert optimizer.ask().shape == (1, 2)
    with pytest.raises(ValueError, match="lie inside the bounds"):
        BayesianOptimizer([[0.0], [1.0]]).tell(torch.tensor([[0.5], [2.0]]), torch.ones(2))


def test_objectives_rank_the_evaluations() -> None:
    X = torch.tensor([[0.1], [0.5], [0.9]], dtype=torch.float64)
    Y = torch.tensor([3.0, 1.0, 2.0], dtype=torch.float64)
    for objective, best in ((None, 1), (Maximize(), 0), (HitTarget(2.2), 2)):
        optimizer = BayesianOptimizer(
            [[0.0], [1.0]], objective=objective, proposer="random", n_initial=3
        )
        optimizer.tell(X, Y)
        assert optimizer.best().index == best
        assert optimizer.records[0].best_value == Y[best]


def test_a_composite_objective_models_the_outputs_and_ranks_by_g() -> None:
    target = torch.tensor([0.2, -0.1, 0.4], dtype=torch.float64)

    def h(X):
        return torch.stack([X.sum(-1), X[..., 0] - X[..., 1], X.prod(-1)], dim=-1)

    objective = Composite(lambda Y: (Y - target).square().sum(-1), num_outputs=3)
    problem = FunctionProblem(h, [[0.0, 0.0], [1.0, 1.0]], objective, vectorized=True)
    optimizer = BayesianOptimizer.for_problem(
        problem,
        surrogate="gp",
        proposer=AcquisitionProposer("qlogei", num_restarts=2, raw_samples=16),
        n_initial=4,
    )
    optimizer.run(problem, steps=2)
    assert optimizer.Y.shape == (6, 3) and optimizer.model.num_outputs == 3
    torch.testing.assert_close(optimizer.values, objective.values(optimizer.Y))
    with pytest.raises(ValueError, match="composite objective needs an MC acquisition"):
        BayesianOptimizer.for_problem(problem, proposer="logei")


def test_components_given_as_code_are_passed_again_to_load(tmp_path) -> None:
    spec = get_surrogate("gp")
    custom = AcquisitionProposer(
        lambda model, context: LogExpectedImprovement(model, best_f=context.train_Y.max()),
        num_restarts=2,
        raw_samples=16,
    )
    problem = registered_problem(*PROBLEM)
    optimizer = BayesianOptimizer.for_problem(problem, surrogate=spec, proposer=custom, n_initial=4)
    optimizer.run(problem, steps=1)
    path = tmp_path / "custom.state"
    optimizer.save(path)
    with pytest.raises(ValueError, match="pass proposer=... to load it"):
        BayesianOptimizer.load(path)
    loaded = BayesianOptimizer.load(path, proposer=custom)
    assert torch.equal(loaded.X, optimizer.X)
    with pytest.raises(ValueError, match="saved with surrogate 'gp'; got 'deep-ensemble'"):
        BayesianOptimizer.load(path, proposer=custom, surrogate="deep-ensemble")
    with pytest.raises(ValueError, match="saved with fit policy"):
        BayesianOptimizer.load(path, proposer=custom, fit_policy=ContinualFit())


def test_bad_configurations_are_refused() -> None:
    bounds = [[0.0, 0.0], [1.0, 1.0]]
    with pytest.raises(ValueError, match="needs a target value"):
        BayesianOptimizer(bounds, proposer="robust-ei")
    with pytest.raises(ValueError, match="does not take a target value"):
        BayesianOptimizer(bounds, objective=HitTarget(1.0), proposer="logei")
    with pytest.raises(ValueError, match="does not support warm-started refits"):
        BayesianOptimizer(bounds, surrogate="gp", fit_policy=ContinualFit())
    with pytest.raises(ValueError, match="lower bound must be below"):
        BayesianOptimizer([[0.0, 1.0], [1.0, 1.0]])
    with pytest.raises(ValueError, match="n_initial must be an integer of at least 2"):
        BayesianOptimizer(bounds, n_initial=1)
    with pytest.raises(ValueError, match="seed must be a non-negative integer"):
        BayesianOptimizer(bounds, seed=-1)
    with pytest.raises(ValueError, match="Unknown acquisition"):
        BayesianOptimizer(bounds, proposer="nope")
    optimizer = BayesianOptimizer(bounds, proposer="logei", n_initial=2)
    optimizer.tell(optimizer.ask(), torch.tensor([1.0, 2.0], dtype=torch.float64))
    with pytest.raises(ValueError, match="proposes one point per step"):
        optimizer.ask(2)
    with pytest.raises(ValueError, match="takes no trust region"):
        TrustRegionProposer(RandomProposer())


def test_the_cold_policy_is_the_default_and_time_budget_stops_a_run() -> None:
    problem = registered_problem(*PROBLEM)
    optimizer = _optimizer("gp")
    assert isinstance(optimizer.fit_policy, ColdFit)
    records = optimizer.run(problem, steps=50, q=1, time_budget=1e-9)
    assert len(records) == 2 and optimizer.step == 2


def test_a_cpu_budget_stops_a_run_after_the_step_that_passes_it() -> None:
    problem = registered_problem(*PROBLEM)
    capped = _optimizer("gp")
    records = capped.run(problem, steps=50, q=1, cpu_budget=1e-9)
    assert len(records) == 2 and capped.step == 2 and records[-1].cpu_seconds > 0
    generous = _optimizer("gp")
    assert len(generous.run(problem, steps=3, q=1, cpu_budget=1e6)) == 4
    for budget in ("time_budget", "cpu_budget"):
        with pytest.raises(ValueError, match=f"{budget} must be positive"):
            _optimizer("gp").run(problem, steps=1, **{budget: 0.0})


def test_a_batch_that_asks_for_one_point_twice_is_told_twice() -> None:
    class Twice(RandomProposer):
        def propose(self, model, context, q, random):
            proposal = super().propose(model, context, 1, random)
            return type(proposal)(proposal.X.expand(q, -1).clone())

    optimizer = BayesianOptimizer([[0.0], [1.0]], proposer=Twice(), n_initial=2)
    optimizer.tell(optimizer.ask(), torch.tensor([1.0, 2.0], dtype=torch.float64))
    batch = optimizer.ask(3)
    assert optimizer.records[-1].step == 0
    optimizer.tell(batch.flip(0), torch.tensor([3.0, 4.0, 5.0], dtype=torch.float64))
    assert torch.equal(optimizer.X[-3:], batch) and optimizer.values[-3:].tolist() == [3, 4, 5]
    optimizer.ask(3)
    with pytest.raises(NotPendingError, match=r"Told rows \[3\] are not pending points"):
        optimizer.tell(optimizer.pending[[0, 0, 0, 0]], torch.zeros(4, dtype=torch.float64))


def test_records_count_the_cpu_seconds_of_each_ask(tmp_path) -> None:
    problem = registered_problem(*PROBLEM)
    optimizer = _optimizer("gp")
    records = optimizer.run(problem, steps=2, q=2)
    assert records[0].cpu_seconds == 0.0
    assert all(record.cpu_seconds > 0 for record in records[1:])
    optimizer.save(tmp_path / "run.state")
    loaded = BayesianOptimizer.load(tmp_path / "run.state")
    assert [r.cpu_seconds for r in loaded.records] == [r.cpu_seconds for r in records]


class _ChangingProblem:
    r"""A problem that clamps the points it is given in place (as a user's code may) and
    returns ``outputs(X)`` (default: the sphere around 0.3 of the clamped points)."""

    def __init__(self, outputs=None) -> None:
        self.name, self.objective = "changing", FunctionProblem(abs, [[0.0], [1.0]]).objective
        self.bounds = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
        self.outputs = outputs
        self.given: list[torch.Tensor] = []

    def evaluate(self, X: torch.Tensor) -> torch.Tensor:
        self.given.append(X)
        X.clamp_(0.0, 0.5)
        if self.outputs is not None:
            return self.outputs(X)
        return (X - 0.3).square().sum(-1)


def test_run_tells_the_asked_points_whatever_the_problem_does_to_its_input() -> None:
    problem = _ChangingProblem()
    optimizer = BayesianOptimizer.for_problem(problem, proposer="random", n_initial=4)
    told = []
    records = optimizer.run(problem, steps=2, q=3, callback=lambda r, X, Y: told.append(X))
    assert len(records) == 3 and optimizer.X.shape == (10, 2)
    assert torch.equal(torch.cat(told), optimizer.X)
    # The stored points are the asked ones, not the clamped copies the problem changed.
    assert (optimizer.X > 0.5).any()
    assert all(not torch.equal(given, X) for given, X in zip(problem.given, told, strict=True))


def test_outputs_that_tell_refuses_after_the_evaluation_are_not_lost() -> None:
    problem = _ChangingProblem(lambda X: torch.ones(X.shape[0], 2, dtype=X.dtype))
    optimizer = BayesianOptimizer.for_problem(problem, proposer="random", n_initial=4)
    with pytest.raises(EvaluationsNotToldError, match="were evaluated but not told") as error:
        optimizer.run(problem, steps=1)
    assert "expects 1 output(s) per evaluation; got 2" in str(error.value)
    assert isinstance(error.value, ValueError)
    # The batch is still pending, and the error holds the points and their outputs.
    assert optimizer.step == 1 and torch.equal(optimizer.pending, error.value.X)
    assert torch.equal(error.value.Y, torch.ones(4, 2, dtype=torch.float64))
    optimizer.tell(error.value.X, error.value.Y[:, 0])
    assert optimizer.X.shape == (4, 2)


def test_tell_refuses_complex_values_and_detaches_the_outputs() -> None:
    optimizer = _optimizer("random")
    X = optimizer.ask()
    for inputs, outputs, message in (
        (X, torch.ones(4, dtype=torch.complex128), r"outputs must be real .*\(torch.complex128"),
        (X, [1.0, 2.0, 3.0 + 1j, 4.0], "Told outputs must be real numbers; got complex"),
        (X.to(torch.complex128), torch.ones(4), "Told inputs must be real numbers; got complex"),
    ):
        with pytest.raises(ValueError, match=message):
            optimizer.tell(inputs, outputs)
        assert optimizer.step == 1 and optimizer.X.shape[0] == 0
    outputs = torch.ones(4, dtype=torch.float64, requires_grad=True)
    optimizer.tell(X, outputs * 2)
    assert not optimizer.Y.requires_grad and not optimizer.values.requires_grad
