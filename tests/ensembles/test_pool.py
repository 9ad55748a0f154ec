"""Training pools of NES / AutoDEUQ candidates: grouped training, failures, assembly and
the Ray executor."""

import math
import sys

import pytest
import torch

from botorch_nn_uq.ensembles.architecture_space import Architecture, Node
from botorch_nn_uq.ensembles.hyperparameter_space import TrainingHyperparameters
from botorch_nn_uq.ensembles.pool import (
    CandidateSpec,
    InProcessExecutor,
    PoolData,
    PoolSettings,
    TrainedCandidate,
    assemble_ensemble,
    build_members,
    train_candidate_group,
    train_pool,
)
from tests.ensembles.ray_cluster import local_ray_executor

DTYPE = torch.float64
SETTINGS = PoolSettings(epochs=20)
#: Two hidden layers, the second with skips from the input and the first layer.
SKIPS = Architecture((Node(8, "tanh"), Node(), Node(6, "relu", (-1, 0))))
SMALL = Architecture((Node(4, "relu"), Node(), Node()))
#: With plain SGD this learning rate makes the outputs so large after one step that the
#: loss, their square, overflows (in float64 too).
DIVERGING_LEARNING_RATE = 1e250


def _data(n: int = 40, num_validation: int = 10) -> PoolData:
    generator = torch.Generator().manual_seed(0)
    X = torch.rand(n, 2, generator=generator, dtype=DTYPE)
    Y = (3 * X).sin().sum(-1, keepdim=True) + 0.05 * torch.randn(
        n, 1, generator=generator, dtype=DTYPE
    )
    Y = (Y - Y.mean()) / Y.std()
    split = n - num_validation
    return PoolData(X[:split], Y[:split], X[split:], Y[split:])


def _hyperparameters(
    learning_rate: float = 1e-2,
    optimizer: str = "adam",
    batch_size: int = 8,
    lr_reduction_patience: int = 3,
    early_stopping_patience: int = 6,
) -> TrainingHyperparameters:
    return TrainingHyperparameters(
        learning_rate=learning_rate,
        batch_size=batch_size,
        optimizer=optimizer,
        lr_reduction_patience=lr_reduction_patience,
        early_stopping_patience=early_stopping_patience,
    )


def _spec(candidate_id: int, architecture: Architecture = SKIPS, seed: int | None = None, **kw):
    return CandidateSpec(
        candidate_id=candidate_id,
        architecture=architecture,
        hyperparameters=_hyperparameters(**kw),
        seed=100 + candidate_id if seed is None else seed,
    )


def _assert_same_candidate(
    a: TrainedCandidate, b: TrainedCandidate, atol: float = 1e-10, exact: bool = False
) -> None:
    assert a.spec == b.spec
    assert a.failed == b.failed and a.error == b.error
    if exact:
        assert torch.equal(a.validation_log_likelihoods, b.validation_log_likelihoods)
        assert a.validation_nll == b.validation_nll
    else:
        torch.testing.assert_close(
            a.validation_log_likelihoods, b.validation_log_likelihoods, rtol=0, atol=atol
        )
        assert math.isclose(a.validation_nll, b.validation_nll, rel_tol=0, abs_tol=atol)
    if a.state is None:
        assert b.state is None
        return
    assert a.state.keys() == b.state.keys()
    for name in a.state:
        if exact:
            assert torch.equal(a.state[name], b.state[name]), name
        else:
            torch.testing.assert_close(a.state[name], b.state[name], rtol=0, atol=atol)


# ------------------------------------------------------------------------------------
# Grouped training
# ------------------------------------------------------------------------------------


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_a_group_trains_each_candidate_as_if_alone(optimizer: str) -> None:
    data = _data()
    # One group key, but different learning rates, patiences and seeds.
    specs = [
        _spec(0, learning_rate=1e-2, optimizer=optimizer),
        _spec(1, learning_rate=3e-2, optimizer=optimizer, lr_reduction_patience=2,
              early_stopping_patience=4),
        _spec(2, learning_rate=1e-3, optimizer=optimizer, lr_reduction_patience=5,
              early_stopping_patience=30),
    ]  # fmt: skip
    assert len({spec.group_key for spec in specs}) == 1
    grouped = train_candidate_group(specs, data, SETTINGS)
    assert [outcome.spec for outcome in grouped] == specs
    for spec, outcome in zip(specs, grouped, strict=True):
        assert not outcome.failed and outcome.error is None and outcome.seconds > 0
        assert outcome.validation_log_likelihoods.shape == (data.validation_X.shape[0],)
        assert torch.isfinite(outcome.validation_log_likelihoods).all()
        assert outcome.validation_nll == pytest.approx(
            -outcome.validation_log_likelihoods.mean().item(), rel=1e-12
        )
        # The state is that of a one-member BatchedMLP of the candidate's architecture.
        alone_network = build_members(spec.architecture, [spec.seed], 2, 1, SETTINGS)
        assert outcome.state.keys() == alone_network.state_dict().keys()
        assert all(tensor.shape[0] == 1 for tensor in outcome.state.values())
        (alone,) = train_candidate_group([spec], data, SETTINGS)
        _assert_same_candidate(outcome, alone)
    # Different learning rates and seeds give different candidates.
    assert len({outcome.validation_nll for outcome in grouped}) == 3


def test_grouped_training_is_deterministic() -> None:
    data = _data()
    specs = [_spec(0), _spec(1, learning_rate=2e-2)]
    first = train_candidate_group(specs, data, SETTINGS)
    second = train_candidate_group(specs, data, SETTINGS)
    for a, b in zip(first, second, strict=True):
        _assert_same_candidate(a, b, exact=True)


@pytest.mark.parametrize("default_dtype", [torch.float32, torch.float64])
def test_grouped_training_does_not_depend_on_torchs_default_dtype(default_dtype) -> None:
    r"""Ray workers start with torch's float32 default; a session that set float64 (as
    the tutorials do) must train float64 data exactly as they do."""
    data = _data()
    specs = [_spec(0), _spec(1, learning_rate=3e-2)]
    previous = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float32)
        reference = train_candidate_group(specs, data, SETTINGS)
        torch.set_default_dtype(default_dtype)
        outcomes = train_candidate_group(specs, data, SETTINGS)
    finally:
        torch.set_default_dtype(previous)
    for a, b in zip(outcomes, reference, strict=True):
        _assert_same_candidate(a, b, exact=True)


@pytest.mark.parametrize(
    "other",
    [
        _spec(1, architecture=SMALL),
        _spec(1, batch_size=16),
        _spec(1, optimizer="sgd"),
    ],
    ids=["architecture", "batch_size", "optimizer"],
)
def test_a_group_with_mixed_keys_raises(other: CandidateSpec) -> None:
    with pytest.raises(ValueError, match="share architecture, batch size and optimizer"):
        train_candidate_group([_spec(0), other], _data(), SETTINGS)


class _RecordingExecutor(InProcessExecutor):
    def __init__(self) -> None:
        self.groups: list[list[CandidateSpec]] = []

    def map(self, function, arguments):
        self.groups.extend(list(args[0]) for args in arguments)
        return super().map(function, arguments)


def test_train_pool_groups_by_key_and_returns_results_in_spec_order() -> None:
    data = _data()
    # Interleaved groups, ids not in increasing order.
    specs = [
        _spec(4, SKIPS),
        _spec(0, SMALL),
        _spec(3, SKIPS, learning_rate=3e-2),
        _spec(1, SMALL, batch_size=16),
        _spec(2, SMALL, learning_rate=5e-3),
    ]
    executor = _RecordingExecutor()
    outcomes = train_pool(specs, data, SETTINGS, executor)
    assert [outcome.spec for outcome in outcomes] == specs
    # Three groups (SKIPS; SMALL with batch 8; SMALL with batch 16), each one task.
    assert sorted(sorted(s.candidate_id for s in group) for group in executor.groups) == [
        [0, 2],
        [1],
        [3, 4],
    ]
    for group in executor.groups:
        assert len({spec.group_key for spec in group}) == 1
        by_id = {outcome.spec.candidate_id: outcome for outcome in outcomes}
        for outcome in train_candidate_group(group, data, SETTINGS):
            _assert_same_candidate(by_id[outcome.spec.candidate_id], outcome, exact=True)
    # The default executor runs in-process with the same result.
    for a, b in zip(train_pool(specs, data, SETTINGS), outcomes, strict=True):
        _assert_same_candidate(a, b, exact=True)


# ------------------------------------------------------------------------------------
# Failures
# ------------------------------------------------------------------------------------


def _assert_failed(outcome: TrainedCandidate, num_validation: int) -> None:
    assert outcome.failed
    assert outcome.state is None
    assert outcome.validation_nll == math.inf
    assert isinstance(outcome.error, str) and outcome.error
    scores = outcome.validation_log_likelihoods
    assert scores.shape == (num_validation,) and scores.dtype == DTYPE
    assert (scores == -math.inf).all()


def test_a_diverging_candidate_is_recorded_as_failed_and_its_group_mates_train_normally() -> None:
    data = _data()
    specs = [
        _spec(0, optimizer="sgd", learning_rate=1e-2),
        _spec(1, optimizer="sgd", learning_rate=DIVERGING_LEARNING_RATE),
        _spec(2, optimizer="sgd", learning_rate=1e-3),
    ]
    outcomes = train_pool(specs, data, SETTINGS)
    assert [outcome.spec for outcome in outcomes] == specs  # recorded, never dropped
    _assert_failed(outcomes[1], data.validation_X.shape[0])
    for index in (0, 2):
        assert not outcomes[index].failed
        assert math.isfinite(outcomes[index].validation_nll)
        # Its mate's divergence does not touch it: it equals its training alone.
        (alone,) = train_candidate_group([specs[index]], data, SETTINGS)
        _assert_same_candidate(outcomes[index], alone)


def test_a_group_that_diverges_entirely_is_recorded_as_failed() -> None:
    data = _data()
    specs = [_spec(i, optimizer="sgd", learning_rate=DIVERGING_LEARNING_RATE) for i in range(2)]
    outcomes = train_candidate_group(specs, data, SETTINGS)
    assert len(outcomes) == 2
    for outcome in outcomes:
        _assert_failed(outcome, data.validation_X.shape[0])
        assert "non-finite" in outcome.error or "became" in outcome.error


def test_grouping_does_not_depend_on_the_first_candidates_learning_rate() -> None:
    # The group trains at its largest rate and scales the others down, so a tiny rate
    # first in the group does not swamp a mate's updates in rounding.
    data = _data()
    specs = [_spec(0, learning_rate=1e-16), _spec(1, learning_rate=1e-1)]
    grouped = train_candidate_group(specs, data, SETTINGS)
    (alone,) = train_candidate_group(specs[1:], data, SETTINGS)
    _assert_same_candidate(grouped[1], alone, atol=1e-8)


# ------------------------------------------------------------------------------------
# Assembling the ensemble
# ------------------------------------------------------------------------------------


def test_assemble_ensemble_groups_by_architecture_and_reorders_the_weights() -> None:
    data = _data()
    specs = [_spec(0, SKIPS), _spec(1, SMALL), _spec(2, SKIPS, learning_rate=2e-2)]
    candidates = train_pool(specs, data, SETTINGS)
    weights = torch.tensor([0.5, 0.2, 0.3], dtype=DTYPE)
    network, ordered = assemble_ensemble(candidates, weights, 2, 1, SETTINGS)
    assert len(network.groups) == 2 and network.num_members == 3
    assert [group.num_members for group in network.groups] == [2, 1]
    assert [group.member_seeds for group in network.groups] == [[100, 102], [101]]
    # Members in network order: candidates 0, 2 (SKIPS), then 1 (SMALL).
    torch.testing.assert_close(ordered, torch.tensor([0.5, 0.3, 0.2], dtype=DTYPE))
    network = network.to(data.validation_X)
    X = torch.rand(7, 2, generator=torch.Generator().manual_seed(1), dtype=DTYPE)
    with torch.no_grad():
        output = network(X)
        for member, index in enumerate([0, 2, 1]):
            candidate = candidates[index]
            own = build_members(candidate.spec.architecture, [candidate.spec.seed], 2, 1, SETTINGS)
            own.load_state_dict(candidate.state)
            own = own.to(X).eval()
            expected = own(X)
            torch.testing.assert_close(output.mean[member], expected.mean[0], rtol=0, atol=1e-12)
            torch.testing.assert_close(output.std[member], expected.std[0], rtol=0, atol=1e-12)
            # The weight that ends up with this member is the candidate's own weight.
            assert ordered[member] == weights[index]


def test_assemble_ensemble_rejects_failed_candidates() -> None:
    data = _data()
    specs = [
        _spec(0, optimizer="sgd"),
        _spec(1, optimizer="sgd", learning_rate=DIVERGING_LEARNING_RATE),
    ]
    candidates = train_pool(specs, data, SETTINGS)
    assert candidates[1].failed
    with pytest.raises(ValueError, match="Failed candidates"):
        assemble_ensemble(candidates, torch.ones(2, dtype=DTYPE), 2, 1, SETTINGS)


# ------------------------------------------------------------------------------------
# The Ray executor
# ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_executor():
    yield from local_ray_executor()


@pytest.mark.slow
def test_ray_executor_gives_the_same_results_as_in_process(ray_executor) -> None:
    data = _data()
    # One group (one Ray task) with a diverging member: a worker starts in seconds even
    # on a busy machine, and every code path of the group's training is exercised.
    specs = [
        _spec(2, SKIPS),
        _spec(0, SKIPS, learning_rate=3e-2),
        _spec(1, SKIPS, learning_rate=DIVERGING_LEARNING_RATE),
    ]
    on_ray = train_pool(specs, data, SETTINGS, ray_executor)
    in_process = train_pool(specs, data, SETTINGS, InProcessExecutor())
    assert [outcome.spec for outcome in on_ray] == specs
    assert [outcome.failed for outcome in on_ray] == [False, False, True]
    for a, b in zip(on_ray, in_process, strict=True):
        _assert_same_candidate(a, b, exact=True)


@pytest.mark.slow
def test_ray_tasks_run_on_the_executors_threads_and_leave_the_callers_alone(ray_executor):
    from botorch_nn_uq.ensembles.pool import RayExecutor

    # A nested function travels to the workers by value.
    def torch_threads() -> int:
        return torch.get_num_threads()

    callers_threads = torch.get_num_threads()
    assert ray_executor.map(torch_threads, [()]) == [1]
    assert RayExecutor(threads_per_task=2).map(torch_threads, [()]) == [2]
    assert torch.get_num_threads() == callers_threads


@pytest.mark.parametrize("threads", [0, 1.5, True])
def test_ray_executor_rejects_a_thread_count_that_is_not_a_positive_integer(threads):
    from botorch_nn_uq.ensembles.pool import RayExecutor

    with pytest.raises(ValueError, match="threads_per_task"):
        RayExecutor(threads_per_task=threads)


class _RecordingRay:
    r"""A stand-in for the ``ray`` module that runs tasks in this process and records
    the resources each remote function asks for."""

    def __init__(self) -> None:
        self.requests: list[dict] = []

    def is_initialized(self) -> bool:
        return True

    def remote(self, **options):
        self.requests.append(options)

        def wrap(function):
            class Remote:
                @staticmethod
                def remote(*args):
                    return function(*args)

            return Remote

        return wrap

    def get(self, results):
        return results


@pytest.mark.parametrize(("gpus", "expected"), [(0.0, None), (0.25, 0.25), (1, 1)])
def test_ray_tasks_reserve_gpus_only_when_asked(monkeypatch, gpus, expected) -> None:
    from botorch_nn_uq.ensembles.pool import RayExecutor

    ray = _RecordingRay()
    monkeypatch.setitem(sys.modules, "ray", ray)
    executor = RayExecutor(threads_per_task=2, gpus_per_task=gpus)
    assert executor.map(lambda value: value + 1, [(1,), (2,)]) == [2, 3]
    (request,) = ray.requests
    assert request["num_cpus"] == 2
    assert request.get("num_gpus") == expected
    assert request["runtime_env"] == {"env_vars": {"OMP_NUM_THREADS": "2"}}


@pytest.mark.parametrize("gpus", [-0.5, math.inf, math.nan, True, "1"])
def test_ray_executor_rejects_an_invalid_gpu_share(gpus) -> None:
    from botorch_nn_uq.ensembles.pool import RayExecutor

    with pytest.raises(ValueError, match="gpus_per_task"):
        RayExecutor(gpus_per_task=gpus)
