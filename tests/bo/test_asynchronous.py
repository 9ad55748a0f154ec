"""Asynchronous BO in the core: points pending with ids, asked while others are pending,
told in any order or as failed; the proposers see the pending points; the state file
holds them (and a format-2 file is converted); StreamingFit's refits follow results."""

import math
import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from botorch.acquisition import qLogExpectedImprovement

import botorch_nn_uq.bo.fitting as fitting
import botorch_nn_uq.bo.proposers as proposers
from botorch_nn_uq.bo import (
    AcquisitionContext,
    AcquisitionProposer,
    BayesianOptimizer,
    NotPendingError,
    StateFileError,
    StreamingFit,
    TurboProposer,
    get_surrogate,
)
from botorch_nn_uq.bo.state import StepCost

BOUNDS = [[0.0, 0.0], [1.0, 1.0]]
DATA = Path(__file__).parent / "data"
GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "ask-tell.md"


def _f(X: torch.Tensor) -> torch.Tensor:
    return ((X - 0.3) ** 2).sum(-1)


class _Recorded:
    r"""A qLogEI builder that keeps every acquisition it built (to read its
    ``X_pending`` after the proposal)."""

    def __init__(self) -> None:
        self.built: list[qLogExpectedImprovement] = []

    def __call__(self, model, context: AcquisitionContext) -> qLogExpectedImprovement:
        self.built.append(qLogExpectedImprovement(model, best_f=context.train_Y.max()))
        return self.built[-1]


def _tell_design(optimizer: BayesianOptimizer) -> None:
    X = optimizer.ask()
    optimizer.tell(X, _f(X))


def _simulate(seed: int = 0) -> tuple[BayesianOptimizer, dict]:
    r"""Three workers on a seeded event queue: each result is told when its worker
    finishes (out of the order asked), one evaluation fails, one result comes twice."""
    recorded = _Recorded()
    optimizer = BayesianOptimizer(
        BOUNDS,
        surrogate="gp",
        proposer=AcquisitionProposer(recorded, num_restarts=2, raw_samples=16),
        n_initial=4,
        seed=seed,
    )
    ids, X, _ = optimizer.ask_trials()
    optimizer.tell(ids, _f(X))
    log = {"asked": [], "told": {}, "pending_seen": [], "duplicate_refused": False}
    durations = iter([3.0, 1.0, 2.0, 0.5, 4.0, 1.5, 0.7, 2.5, 1.2, 0.9])
    in_flight: list[tuple[float, int, torch.Tensor]] = []
    clock = 0.0

    def submit() -> None:
        pending = optimizer.pending
        trial_ids, trial_X, _ = optimizer.ask_trials(1)
        # The acquisition of this ask was told every point pending before it.
        seen = recorded.built[-1].X_pending
        assert (seen is None) == (pending is None)
        assert pending is None or torch.equal(seen, torch.cat([pending, optimizer.failed.X]))
        log["pending_seen"].append(0 if pending is None else pending.shape[0])
        log["asked"].append(int(trial_ids[0]))
        in_flight.append((clock + next(durations), int(trial_ids[0]), trial_X))

    for _ in range(3):
        submit()
    for event in range(7):
        in_flight.sort(key=lambda item: item[0])
        clock, trial_id, x = in_flight.pop(0)
        if event == 2:
            optimizer.tell_failed([trial_id], "worker lost")
        else:
            value = _f(x)
            optimizer.tell([trial_id], value)
            log["told"][trial_id] = float(value)
            if event == 3:
                # A retried evaluation reports the same point again: refused, nothing changes.
                before = optimizer.X.clone()
                with pytest.raises(NotPendingError, match=rf"Ids {trial_id} \(told already\)"):
                    optimizer.tell([trial_id], value)
                log["duplicate_refused"] = torch.equal(optimizer.X, before)
        submit()
    return optimizer, log


def test_an_asynchronous_run_loses_nothing_asks_nothing_twice_and_repeats() -> None:
    optimizer, log = _simulate()
    told = optimizer.state.ids[4:].tolist()
    # Told out of the order asked, each told result stored once under its id.
    assert told != sorted(told) and sorted(told) == sorted(log["told"])
    assert [float(v) for v in optimizer.values[4:]] == [log["told"][i] for i in told]
    assert log["duplicate_refused"]
    # No id, and no point, asked twice; the failed point left pending and was not fitted.
    asked = torch.cat([optimizer.X, optimizer.failed.X, optimizer.pending])
    every_id = torch.cat([optimizer.state.ids, optimizer.failed.ids, optimizer.pending_ids])
    assert every_id.unique().numel() == every_id.numel() == optimizer.state.next_id == 14
    assert torch.pdist(asked).min() > 0
    (failed_id,) = optimizer.failed.ids.tolist()
    assert optimizer.failed.reasons == ["worker lost"]
    assert failed_id not in told and failed_id not in optimizer.pending_ids.tolist()
    # Three workers: every ask after the first saw the other two points in flight.
    assert log["pending_seen"] == [0, 1, 2, *[2] * 7] and len(optimizer.pending) == 3
    # Same seed, same run.
    again, _ = _simulate()
    assert torch.equal(again.X, optimizer.X) and torch.equal(again.pending, optimizer.pending)


def test_a_tell_names_points_by_id_or_row_and_refuses_what_is_not_pending() -> None:
    optimizer = BayesianOptimizer(BOUNDS, proposer="random", n_initial=3)
    design = optimizer.ask_trials()
    assert design.ids.tolist() == [0, 1, 2] and design.step == 0
    record = optimizer.tell(design.X[[2, 0]], _f(design.X[[2, 0]]))
    # Stored in the order asked; the ask's cost goes with its first results only.
    assert torch.equal(optimizer.X, design.X[[0, 2]]) and record.step == 0
    assert optimizer.tell(torch.tensor([1]), _f(design.X[1:2])).cost == StepCost()
    first, second = optimizer.ask_trials(2), optimizer.ask_trials(1)
    record = optimizer.tell([int(second.ids[0]), int(first.ids[1])], torch.ones(2))
    assert record.step == 2 and record.num_evaluations == 5
    with pytest.raises(NotPendingError, match="named more than once"):
        optimizer.tell([3, 3], torch.ones(2))
    with pytest.raises(NotPendingError, match=r"Ids 0 \(told already\)"):
        optimizer.tell_failed([0], "too late")
    optimizer.tell_failed(first.X[:1], "crashed")
    with pytest.raises(NotPendingError, match=r"Ids 3 \(told as failed\)"):
        optimizer.tell(3, torch.ones(1))
    with pytest.raises(ValueError, match="one per failed point"):
        optimizer.tell_failed(optimizer.ask_trials(2).ids, ["a"])
    with pytest.raises(ValueError, match="q ids or a q x 2 tensor"):
        optimizer.tell(torch.ones(2), torch.ones(2))
    with pytest.raises(ValueError, match="got no id"):
        optimizer.tell(torch.tensor([], dtype=torch.long), torch.ones(0))
    assert optimizer.failed.ids.tolist() == [3] and len(optimizer.pending) == 2


def test_a_failure_told_with_a_penalty_is_also_an_evaluation(tmp_path) -> None:
    optimizer = BayesianOptimizer(BOUNDS, proposer="random", n_initial=3)
    design = optimizer.ask_trials()
    optimizer.tell(design.ids[:2], _f(design.X[:2]))
    with pytest.raises(ValueError, match="NaN"):
        optimizer.tell_failed(design.ids[2:], "diverged", penalty=math.nan)
    assert optimizer.pending_ids.tolist() == [2] and len(optimizer.failed) == 0
    record = optimizer.tell_failed(design.ids[2:], "diverged", penalty=10.0)
    assert record.num_evaluations == 3 and optimizer.values[-1] == 10.0
    assert optimizer.failed.ids.tolist() == [2] and optimizer.state.ids.tolist() == [0, 1, 2]
    with pytest.raises(NotPendingError, match=r"Ids 2 \(told as failed\)"):
        optimizer.tell([2], torch.ones(1))
    path = tmp_path / "run.state"
    optimizer.save(path)
    assert BayesianOptimizer.load(path).failed.reasons == ["diverged"]


def test_an_analytic_acquisition_refuses_to_ask_while_points_are_pending() -> None:
    optimizer = BayesianOptimizer(
        BOUNDS, proposer=AcquisitionProposer("logei", num_restarts=2, raw_samples=16), n_initial=3
    )
    _tell_design(optimizer)
    optimizer.tell_failed(optimizer.ask_trials().ids, "diverged")
    # Failed points alone: an analytic acquisition ignores them.
    trial = optimizer.ask_trials()
    with pytest.raises(ValueError, match="analytic and cannot account for the 1 pending"):
        optimizer.ask()
    optimizer.tell(trial.ids, _f(trial.X))
    assert optimizer.ask().shape == (1, 2)


def test_a_model_step_needs_a_told_result() -> None:
    optimizer = BayesianOptimizer(BOUNDS, proposer="qlogei", n_initial=3)
    optimizer.ask()
    with pytest.raises(
        ValueError, match=r"no told result to fit a model on \(3 points are pending\)"
    ):
        optimizer.ask(2)


def _gp_context(pending: torch.Tensor | None) -> tuple:
    bounds = torch.tensor(BOUNDS, dtype=torch.float64)
    train_X = torch.rand(6, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    train_Y = -_f(train_X).unsqueeze(-1)
    model = get_surrogate("gp").build(train_X, train_Y, bounds, 0)
    context = AcquisitionContext(
        train_X, train_Y, bounds, seed=3, center=train_X[train_Y.argmax()], X_pending=pending
    )
    return model, context


def _away(X: torch.Tensor, avoided: torch.Tensor) -> bool:
    return bool(torch.cdist(X, avoided).min() > 0.01 * math.sqrt(2))


def test_a_registered_mc_acquisition_gets_the_pending_and_failed_points(monkeypatch) -> None:
    seen = []

    def optimize_acqf(acquisition, bounds, q, **options):
        seen.append(acquisition.X_pending)
        return bounds[:1].clone(), None

    monkeypatch.setattr(proposers, "optimize_acqf", optimize_acqf)
    model, context = _gp_context(torch.full((2, 2), 0.5, dtype=torch.float64))
    context = replace(context, X_failed=torch.full((1, 2), 0.25, dtype=torch.float64))
    AcquisitionProposer("qlogei").propose(model, context, 1, torch.Generator())
    assert torch.equal(seen[0], torch.cat([context.X_pending, context.X_failed]))


def test_thompson_sampling_leaves_pending_points_out_of_its_candidates() -> None:
    proposer = AcquisitionProposer("ts", options={"num_candidates": 64})
    model, context = _gp_context(None)
    alone = proposer.propose(model, context, 4, torch.Generator()).X
    _, with_pending = _gp_context(alone)
    # The same step with its own proposals pending proposes none of them again.
    again = proposer.propose(model, with_pending, 4, torch.Generator()).X
    assert _away(again, alone)


def test_turbo_leaves_pending_points_out_and_keeps_its_restart_design_size() -> None:
    proposer = TurboProposer(num_candidates=64)
    proposer.start(6)
    model, context = _gp_context(None)
    # The initial design told in two parts is still a design of 6.
    proposer.observe(context.train_X[:2], _f(context.train_X[:2]), _f(context.train_X[:2]))
    proposer.observe(context.train_X[2:], _f(context.train_X[2:]), _f(context.train_X[2:]))
    assert proposer.n_initial == 6 and proposer.num_told == 6
    alone = proposer.propose(model, context, 3, torch.Generator()).X
    _, with_pending = _gp_context(alone)
    assert _away(proposer.propose(model, with_pending, 3, torch.Generator()).X, alone)


def test_the_state_file_holds_pending_and_failed_points_mid_run(tmp_path) -> None:
    optimizer, _ = _simulate()
    path = tmp_path / "run.state"
    optimizer.save(path)
    loaded = BayesianOptimizer.load(path, proposer=optimizer.proposer)
    for name in ("ids", "X", "Y"):
        assert torch.equal(getattr(loaded.state, name), getattr(optimizer.state, name))
    for field in ("ids", "X", "steps", "asked_at"):
        assert torch.equal(
            getattr(loaded.state.pending, field), getattr(optimizer.state.pending, field)
        )
    assert loaded.failed.reasons == ["worker lost"]
    assert torch.equal(loaded.failed.X, optimizer.failed.X)
    assert loaded.state.ask_costs == optimizer.state.ask_costs
    assert (loaded.step, loaded.state.next_id) == (optimizer.step, optimizer.state.next_id)
    # Both continue alike: a result of a pending point, then an ask.
    for run in (optimizer, loaded):
        run.tell(run.pending_ids[1:2], torch.zeros(1, dtype=torch.float64))
    assert torch.equal(loaded.ask(), optimizer.ask())


def test_a_format_2_file_is_converted_and_other_versions_are_refused(tmp_path) -> None:
    r"""``format-2-pending.state`` was written by the release before format 3: a random
    search on a 2-D box (3 initial points, a told batch of 2, a pending batch of 2)."""
    old = DATA / "format-2-pending.state"
    optimizer = BayesianOptimizer.load(old)
    assert optimizer.X.shape == (5, 2) and optimizer.step == 3
    assert optimizer.pending_ids.tolist() == [5, 6] and optimizer.state.next_id == 7
    assert optimizer.state.pending.asked_at.isnan().all()
    assert optimizer.state.ids.tolist() == [0, 1, 2, 3, 4]
    optimizer.tell(optimizer.pending_ids, _f(optimizer.pending))
    # The next batch is the one the old release proposed after the same tell.
    expected = [[0.2878662426893793, 0.93640777724237], [0.4332178253336201, 1.343016969317702]]
    # (the file's box is [0, 1] x [0, 2])
    assert optimizer.ask(2).tolist() == expected
    # A converted run saves in format 3, replacing the file it was loaded from.
    copy = tmp_path / "run.state"
    copy.write_bytes(old.read_bytes())
    converted = BayesianOptimizer.load(copy)
    converted.save(copy)
    assert copy.read_bytes().startswith(b"botorch-nn-uq run state 3\n")
    copy.write_bytes(old.read_bytes().replace(b"state 2\n", b"state 1\n", 1))
    with pytest.raises(StateFileError, match="of format '1'; .* reads formats 2, 3 only"):
        BayesianOptimizer.load(copy)


def test_streaming_fit_refits_after_k_results_once_on_all_of_them(tmp_path) -> None:
    policy = StreamingFit(every=2, warm_start=False)
    optimizer = BayesianOptimizer(
        BOUNDS,
        proposer=AcquisitionProposer("qlogei", num_restarts=2, raw_samples=16),
        fit_policy=policy,
        n_initial=3,
    )
    _tell_design(optimizer)
    trials = [optimizer.ask_trials() for _ in range(3)]
    # The first ask fits; the two asks without a new result reuse its model.
    assert policy.fits == 1
    optimizer.tell(trials[0].ids, _f(trials[0].X))
    optimizer.ask()
    cost = optimizer.state.ask_costs[optimizer.step - 1]
    assert policy.fits == 1 and cost.fit_points == 3 and cost.fit_seconds == 0
    optimizer.tell(trials[1].ids, _f(trials[1].X))
    optimizer.tell(trials[2].ids, _f(trials[2].X))
    optimizer.ask()
    # Three new results: one fit, on all six.
    assert policy.fits == 2 and optimizer.state.model_num_points == 6
    path = tmp_path / "run.state"
    optimizer.save(path)
    loaded = BayesianOptimizer.load(path)
    assert loaded.fit_policy.fits == 2 and loaded.model is not None
    assert torch.equal(loaded.ask(), optimizer.ask()) and loaded.fit_policy.fits == 2


def test_streaming_fit_refits_after_t_seconds_with_a_new_result(monkeypatch) -> None:
    now = [100.0]
    monkeypatch.setattr(fitting.time, "time", lambda: now[0])
    policy = StreamingFit(every=10, seconds=30.0)
    policy.last_fit_time = 100.0
    assert not policy.refit_due(3)
    now[0] = 131.0
    assert policy.refit_due(1) and not policy.refit_due(0) and policy.refit_due(10)
    with pytest.raises(ValueError, match="every must be a positive integer"):
        StreamingFit(every=0)
    assert fitting.fit_policy_from_config(policy.to_config()).to_config() == policy.to_config()


def test_the_guide_s_asynchronous_example_runs() -> None:
    (example,) = re.findall(r"```py\n(.*?)```", GUIDE.read_text(encoding="utf-8"), re.DOTALL)
    exec(compile(example, str(GUIDE), "exec"), {})
