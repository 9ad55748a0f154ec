"""Search histories: records, saving and loading, ensemble diagnostics, and resuming an
interrupted search from its saved history."""

import hashlib
import io
import math
import os
import pathlib
import pickle
import signal
import subprocess
import sys
import time

import pytest
import torch

from botorch_nn_uq.ensembles import history as history_module
from botorch_nn_uq.ensembles import pool as pool_module
from botorch_nn_uq.ensembles.architecture_space import Architecture, ArchitectureSpace, Node
from botorch_nn_uq.ensembles.history import (
    CandidateTrainer,
    EnsembleDiagnostics,
    SearchHistory,
    ensemble_diagnostics,
    pool_fingerprint,
)
from botorch_nn_uq.ensembles.hyperparameter_space import TrainingHyperparameters
from botorch_nn_uq.ensembles.pool import CandidateSpec, PoolData, PoolSettings, TrainedCandidate
from botorch_nn_uq.models import AutoDEUQ, NESRandomSearch, NESRegularizedEvolution
from tests.testing import allow_single_member_warning, saved_as_if_on_cuda

DTYPE = torch.float64
HYPERPARAMETERS = TrainingHyperparameters(
    learning_rate=1e-2,
    batch_size=16,
    optimizer="adam",
    lr_reduction_patience=5,
    early_stopping_patience=10,
)
ARCHITECTURE = Architecture((Node(8, "relu"), Node(), Node(4, "tanh", (-1,))))


def _spec(candidate_id: int, seed: int | None = None) -> CandidateSpec:
    return CandidateSpec(
        candidate_id=candidate_id,
        architecture=ARCHITECTURE,
        hyperparameters=HYPERPARAMETERS,
        seed=10 + candidate_id if seed is None else seed,
    )


def _candidate(candidate_id: int, row: list[float] | None, seconds: float = 0.5):
    if row is None:
        return TrainedCandidate(
            spec=_spec(candidate_id),
            validation_log_likelihoods=torch.full((3,), -math.inf, dtype=DTYPE),
            validation_nll=math.inf,
            state=None,
            seconds=seconds,
            error="The training loss became nan at epoch 0.",
        )
    scores = torch.tensor(row, dtype=DTYPE)
    return TrainedCandidate(
        spec=_spec(candidate_id),
        validation_log_likelihoods=scores,
        validation_nll=float(-scores.mean()),
        state={
            "weights.0": torch.full((1, 2, 8), float(candidate_id), dtype=DTYPE),
            "biases.0": torch.arange(8, dtype=DTYPE).view(1, 1, 8),
        },
        seconds=seconds,
        steps=20 + candidate_id,
    )


def _history() -> SearchHistory:
    return SearchHistory(
        method="nes-rs",
        fingerprint=pool_fingerprint(_pool_data(), PoolSettings()),
        candidates=[
            _candidate(0, [-1.0, -2.0, -0.5]),
            _candidate(1, None),
            _candidate(2, [-0.3, -4.0, -1.5], seconds=1.25),
        ],
        selected_ids=[2, 0],
        selected_weights=[0.75, 0.25],
        diagnostics=EnsembleDiagnostics(ensemble_nll=1.0, average_member_nll=1.5, oracle_nll=0.5),
    )


def _assert_same_candidates(a: list[TrainedCandidate], b: list[TrainedCandidate]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.spec == y.spec
        assert torch.equal(x.validation_log_likelihoods, y.validation_log_likelihoods)
        assert x.validation_nll == y.validation_nll
        assert x.seconds == y.seconds and x.error == y.error and x.steps == y.steps
        if x.state is None:
            assert y.state is None
        else:
            assert x.state.keys() == y.state.keys()
            assert all(torch.equal(x.state[name], y.state[name]) for name in x.state)


# ------------------------------------------------------------------------------------
# Records, saving and diagnostics
# ------------------------------------------------------------------------------------


def test_records_have_one_row_per_candidate_with_its_selection_weight() -> None:
    records = _history().records()
    assert [r["candidate_id"] for r in records] == [0, 1, 2]
    assert set(records[0]) == {
        "candidate_id",
        "architecture",
        "learning_rate",
        "batch_size",
        "optimizer",
        "lr_reduction_patience",
        "early_stopping_patience",
        "seed",
        "validation_nll",
        "seconds",
        "steps",
        "error",
        "selection_weight",
        "architecture_dict",
    }
    assert records[0]["architecture"] == str(ARCHITECTURE) == "8-relu | - | 4-tanh +[-1]"
    assert records[0]["architecture_dict"] == ARCHITECTURE.to_dict()
    assert records[0]["learning_rate"] == 1e-2 and records[0]["optimizer"] == "adam"
    assert records[0]["batch_size"] == 16 and records[0]["seed"] == 10
    assert [r["selection_weight"] for r in records] == [0.25, 0.0, 0.75]
    assert records[1]["validation_nll"] == math.inf and "nan" in records[1]["error"]
    assert records[2]["seconds"] == 1.25 and records[2]["error"] is None
    assert records[0]["validation_nll"] == pytest.approx(3.5 / 3)


def test_save_and_load_round_trip(tmp_path) -> None:
    original = _history()
    path = tmp_path / "history.pt"
    original.save(path)
    loaded = SearchHistory.load(str(path))  # str and Path both work
    assert loaded.method == "nes-rs"
    _assert_same_candidates(loaded.candidates, original.candidates)
    assert loaded.candidates[1].failed and loaded.candidates[1].state is None
    assert loaded.selected_ids == [2, 0] and loaded.selected_weights == [0.75, 0.25]
    assert loaded.diagnostics == original.diagnostics
    assert loaded.records() == original.records()


def test_save_and_load_without_diagnostics(tmp_path) -> None:
    empty = SearchHistory(method="autodeuq")
    empty.save(tmp_path / "empty.pt")
    loaded = SearchHistory.load(tmp_path / "empty.pt")
    assert loaded.method == "autodeuq" and loaded.candidates == []
    assert loaded.diagnostics is None and loaded.records() == []


def test_a_history_saved_on_a_gpu_loads_onto_the_cpu(tmp_path) -> None:
    original = _history()
    path = tmp_path / "history.pt"
    with saved_as_if_on_cuda():
        original.save(path)
    loaded = SearchHistory.load(path)
    _assert_same_candidates(loaded.candidates, original.candidates)
    tensors = [
        loaded.candidates[0].validation_log_likelihoods,
        *loaded.candidates[0].state.values(),
    ]
    assert {tensor.device.type for tensor in tensors} == {"cpu"}


def test_a_saved_history_loads_with_weights_only(tmp_path) -> None:
    path = tmp_path / "history.pt"
    _history().save(path)
    content = path.read_bytes()
    header, digest, payload = content.split(b"\n", 2)
    assert header == b"botorch-nn-uq search history 1" and len(digest) == 64
    data = torch.load(io.BytesIO(payload), weights_only=True)
    assert data["method"] == "nes-rs" and len(data["candidates"]) == 3


def _partial_save(real_save):
    r"""A ``torch.save`` that writes half of its output, then fails like a full disk."""

    def save(obj, f, *args, **kwargs):
        buffer = io.BytesIO()
        real_save(obj, buffer, *args, **kwargs)
        half = buffer.getvalue()[: len(buffer.getvalue()) // 2]
        if isinstance(f, (str, os.PathLike)):
            pathlib.Path(f).write_bytes(half)
        else:
            f.write(half)
        raise OSError(28, "No space left on device")

    return save


def test_a_save_that_fails_while_writing_keeps_the_previous_file(tmp_path, monkeypatch) -> None:
    path = tmp_path / "history.pt"
    previous = _history()
    previous.save(path)
    content = path.read_bytes()
    newer = _history()
    newer.candidates.append(_candidate(3, [-0.1, -0.2, -0.3]))
    # The disk fills while the payload is serialised, then while the file is written.
    for target, name, failure in [
        (torch, "save", _partial_save(torch.save)),
        (os, "fsync", _raise_disk_full),
    ]:
        with monkeypatch.context() as patch:
            patch.setattr(target, name, failure)
            with pytest.raises(OSError, match="No space left"):
                newer.save(path)
        assert path.read_bytes() == content, name
        assert sorted(p.name for p in tmp_path.iterdir()) == ["history.pt"]  # no leftovers
    _assert_same_candidates(SearchHistory.load(path).candidates, previous.candidates)


def _raise_disk_full(descriptor: int) -> None:
    raise OSError(28, "No space left on device")


class _Exploit:
    r"""A pickle payload that creates ``marker`` when unpickled with full pickle."""

    def __init__(self, marker: pathlib.Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.touch, (self.marker,))


def test_a_crafted_pickle_is_refused_without_running_its_code(tmp_path) -> None:
    marker = tmp_path / "exploited"
    crafted = {
        "plain pickle": pickle.dumps({"method": _Exploit(marker)}),
        "torch.save": _torch_save_bytes({"method": _Exploit(marker)}),
    }
    # A crafted payload behind a valid header and checksum: weights_only refuses it.
    payload = _torch_save_bytes({"method": "nes-rs", "candidates": [_Exploit(marker)]})
    digest = hashlib.sha256(payload).hexdigest().encode()
    crafted["valid checksum"] = b"botorch-nn-uq search history 1\n" + digest + b"\n" + payload
    for name, content in crafted.items():
        path = tmp_path / f"{name}.pt"
        path.write_bytes(content)
        with pytest.raises(ValueError, match="not a (valid )?search history") as error:
            SearchHistory.load(path)
        assert str(path) in str(error.value)
        assert not marker.exists(), name


def _torch_save_bytes(obj) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def _history_with_weights() -> SearchHistory:
    history = _history()
    for candidate in history.candidates:
        if candidate.state is not None:
            candidate.state["weights.1"] = torch.randn(1, 64, 64, dtype=DTYPE)
    return history


@pytest.mark.parametrize("where", [0.5, 0.9])
def test_corrupted_bytes_give_a_clear_error(tmp_path, where: float) -> None:
    path = tmp_path / "history.pt"
    _history_with_weights().save(path)
    content = bytearray(path.read_bytes())
    start = int(where * len(content))
    content[start : start + 64] = bytes(255 - byte for byte in content[start : start + 64])
    path.write_bytes(bytes(content))
    with pytest.raises(ValueError, match="corrupt or truncated") as error:
        SearchHistory.load(path)
    assert str(path) in str(error.value)


def test_truncated_empty_and_foreign_files_give_a_clear_error(tmp_path) -> None:
    path = tmp_path / "history.pt"
    _history_with_weights().save(path)
    content = path.read_bytes()
    for cut, message in [
        (len(content) // 2, "corrupt or truncated"),
        (60, "not a search history"),
        (0, "not a search history"),
    ]:
        path.write_bytes(content[:cut])
        with pytest.raises(ValueError, match=message) as error:
            SearchHistory.load(path)
        assert str(path) in str(error.value)
    torch.save({"method": "nes-rs", "candidates": []}, path)
    with pytest.raises(ValueError, match="not a search history"):
        SearchHistory.load(path)


def test_ensemble_diagnostics_on_a_crafted_matrix() -> None:
    log_likelihoods = torch.tensor(
        [[-1.0, -3.0, -0.5, -2.0], [-2.0, -0.5, -1.0, -4.0], [-0.2, -5.0, -3.0, -1.0]],
        dtype=DTYPE,
    )
    weights = torch.tensor([1.0, 2.0, 1.0], dtype=DTYPE)  # normalised to 1/4, 1/2, 1/4
    diagnostics = ensemble_diagnostics(log_likelihoods, weights)
    w = [0.25, 0.5, 0.25]
    mixture = [
        -math.log(sum(w[k] * math.exp(log_likelihoods[k, n].item()) for k in range(3)))
        for n in range(4)
    ]
    assert diagnostics.ensemble_nll == pytest.approx(sum(mixture) / 4, rel=1e-12)
    member_nll = [-log_likelihoods[k].mean().item() for k in range(3)]
    assert diagnostics.average_member_nll == pytest.approx(
        sum(wk * nll for wk, nll in zip(w, member_nll, strict=True)), rel=1e-12
    )
    # The best member per point: -0.2, -0.5, -0.5, -1.0.
    assert diagnostics.oracle_nll == pytest.approx((0.2 + 0.5 + 0.5 + 1.0) / 4, rel=1e-12)
    assert diagnostics.oracle_nll <= diagnostics.ensemble_nll <= diagnostics.average_member_nll
    # Only relative weights matter.
    assert ensemble_diagnostics(log_likelihoods, 3 * weights) == pytest.approx(diagnostics)


def test_ensemble_diagnostics_of_one_member() -> None:
    row = torch.tensor([[-1.0, -2.0, -0.5]], dtype=DTYPE)
    diagnostics = ensemble_diagnostics(row, torch.ones(1, dtype=DTYPE))
    assert diagnostics.ensemble_nll == pytest.approx(3.5 / 3)
    assert diagnostics.average_member_nll == pytest.approx(3.5 / 3)
    assert diagnostics.oracle_nll == pytest.approx(3.5 / 3)


# ------------------------------------------------------------------------------------
# The candidate trainer's cache
# ------------------------------------------------------------------------------------


def _pool_data() -> PoolData:
    X = torch.rand(8, 2, generator=torch.Generator().manual_seed(0), dtype=DTYPE)
    return PoolData(X[:6], X[:6, :1], X[6:], X[6:, :1])


class _FakePool:
    r"""Replaces ``train_pool``: records the specs it is asked to train."""

    def __init__(self) -> None:
        self.calls: list[list[int]] = []

    def __call__(self, specs, data, settings, executor=None, on_group_done=None):
        self.calls.append([spec.candidate_id for spec in specs])
        outcomes = [_candidate(spec.candidate_id, [-1.0, -1.0, -1.0]) for spec in specs]
        if on_group_done is not None:
            on_group_done(outcomes)
        return outcomes


def test_the_trainer_trains_only_candidates_missing_from_the_history(monkeypatch) -> None:
    fake = _FakePool()
    monkeypatch.setattr(history_module, "train_pool", fake)
    saved = _history()
    trainer = CandidateTrainer("nes-rs", _pool_data(), PoolSettings(), resume_from=saved)
    outcomes = trainer.train([_spec(0), _spec(1)])
    assert fake.calls == []  # both cached, the failed one included
    assert outcomes == saved.candidates[:2]
    outcomes = trainer.train([_spec(2), _spec(3), _spec(4)])
    assert fake.calls == [[3, 4]]
    assert outcomes[0] is saved.candidates[2]
    assert [c.spec.candidate_id for c in trainer.history.candidates] == [0, 1, 2, 3, 4]
    assert trainer.next_id == 5


def test_the_trainer_numbers_candidates_consecutively(monkeypatch) -> None:
    monkeypatch.setattr(history_module, "train_pool", _FakePool())
    trainer = CandidateTrainer("nes-rs", _pool_data(), PoolSettings())
    with pytest.raises(ValueError, match="consecutively"):
        trainer.train([_spec(1)])
    trainer.train([_spec(0)])
    with pytest.raises(ValueError, match="consecutively"):
        trainer.train([_spec(1), _spec(3)])


def test_the_trainer_rejects_a_history_that_does_not_match(monkeypatch) -> None:
    fake = _FakePool()
    monkeypatch.setattr(history_module, "train_pool", fake)
    with pytest.raises(ValueError, match="Cannot resume a nes-re search from a nes-rs history"):
        CandidateTrainer("nes-re", _pool_data(), PoolSettings(), resume_from=_history())
    trainer = CandidateTrainer("nes-rs", _pool_data(), PoolSettings(), resume_from=_history())
    with pytest.raises(ValueError, match="differs from the one this search proposes"):
        trainer.train([_spec(0), _spec(1, seed=99)])
    assert fake.calls == [] and trainer.history.candidates == []


# ------------------------------------------------------------------------------------
# Resuming a real search
# ------------------------------------------------------------------------------------

SPACE = ArchitectureSpace(num_nodes=2, units=(4, 8), activations=("relu", "tanh"))
OPTIONS = {
    "ensemble_size": 3,
    "pool_size": 8,
    "epochs": 20,
    "population_size": 4,
    "num_parents": 2,
    "children_per_generation": 2,
    "architecture_space": SPACE,
    "batch_size": 8,
    "lr_reduction_patience": 3,
    "early_stopping_patience": 6,
}


def _data(n: int = 30) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    X = torch.rand(n, 2, generator=generator, dtype=DTYPE)
    Y = (3 * X).sin().sum(-1, keepdim=True) + 0.1 * torch.randn(
        n, 1, generator=generator, dtype=DTYPE
    )
    return X, Y


def _fit(seed: int = 0, model_class=NESRegularizedEvolution, **kwargs):
    X, Y = _data()
    return model_class(X, Y, **{**OPTIONS, **kwargs}).fit(seed=seed)


@pytest.fixture(scope="module")
def original():
    return _fit()


def _assert_same_model(a, b, atol: float = 0.0) -> None:
    state_a, state_b = a.state_dict(), b.state_dict()
    assert state_a.keys() == state_b.keys()
    for name in state_a:
        torch.testing.assert_close(state_a[name], state_b[name], rtol=0, atol=atol)
    assert a.search_history.selected_ids == b.search_history.selected_ids
    X = torch.rand(5, 2, generator=torch.Generator().manual_seed(3), dtype=DTYPE)
    with torch.no_grad():
        torch.testing.assert_close(
            a.posterior(X).mean, b.posterior(X).mean, rtol=0, atol=max(atol, 1e-14)
        )


class _GuardedPool:
    r"""Wraps the real ``train_pool`` and fails for candidates the history holds."""

    def __init__(self, cached_ids: set[int]) -> None:
        self.cached_ids = cached_ids
        self.trained: list[int] = []
        self._train_pool = history_module.train_pool

    def __call__(self, specs, *args, **kwargs):
        ids = [spec.candidate_id for spec in specs]
        assert not set(ids) & self.cached_ids, f"retrained cached candidates {ids}"
        self.trained += ids
        return self._train_pool(specs, *args, **kwargs)


def test_resuming_from_a_complete_history_trains_nothing(original, tmp_path, monkeypatch):
    path = tmp_path / "search.pt"
    original.search_history.save(path)
    guard = _GuardedPool(set(range(OPTIONS["pool_size"])))
    monkeypatch.setattr(history_module, "train_pool", guard)
    resumed = _fit(resume_from=SearchHistory.load(path))
    assert guard.trained == []
    _assert_same_model(resumed, original)
    assert resumed.search_history.records() == original.search_history.records()
    assert resumed.search_history.diagnostics == original.search_history.diagnostics


@pytest.mark.parametrize("num_cached", [3, 4, 5])
def test_resuming_from_a_partial_history_trains_only_the_rest(
    original, tmp_path, monkeypatch, num_cached: int
) -> None:
    path = tmp_path / "partial.pt"
    original.search_history.save(path)
    partial = SearchHistory.load(path)
    # An interrupted search has recorded its first candidates only.
    partial.candidates = partial.candidates[:num_cached]
    partial.selected_ids, partial.selected_weights, partial.diagnostics = [], [], None
    guard = _GuardedPool(set(range(num_cached)))
    monkeypatch.setattr(history_module, "train_pool", guard)
    resumed = _fit(resume_from=partial)
    assert sorted(guard.trained) == list(range(num_cached, OPTIONS["pool_size"]))
    # A generation cut by the interruption may regroup its candidates: equal up to
    # floating-point summation order.
    _assert_same_model(resumed, original, atol=1e-10)
    for a, b in zip(
        resumed.search_history.candidates, original.search_history.candidates, strict=True
    ):
        assert a.spec == b.spec
        assert a.validation_nll == pytest.approx(b.validation_nll, rel=1e-10, abs=1e-10)


def test_resuming_from_another_methods_history_raises(original) -> None:
    with pytest.raises(ValueError, match="Cannot resume a nes-rs search from a nes-re history"):
        _fit(model_class=NESRandomSearch, resume_from=original.search_history)


@pytest.mark.parametrize(
    "change",
    [{"seed": 1}, {"learning_rate": 3e-2}, {"batch_size": 4}],
    ids=["seed", "learning_rate", "batch_size"],
)
def test_resuming_with_a_mismatching_search_raises(original, monkeypatch, change: dict):
    guard = _GuardedPool(set(range(OPTIONS["pool_size"])))
    monkeypatch.setattr(history_module, "train_pool", guard)
    change = dict(change)
    seed = change.pop("seed", 0)
    # Another seed also draws another validation split, which the fingerprint catches.
    with pytest.raises(ValueError, match="differs from the one this search|other data"):
        _fit(seed=seed, resume_from=original.search_history, **change)
    assert guard.trained == []


def test_the_trainer_rejects_a_history_of_other_data_or_settings() -> None:
    saved = _history()
    with pytest.raises(ValueError, match="other data or pool settings"):
        CandidateTrainer("nes-rs", _pool_data(), PoolSettings(epochs=7), resume_from=saved)
    other = _pool_data()
    other = type(other)(other.train_X + 1, other.train_Y, other.validation_X, other.validation_Y)
    with pytest.raises(ValueError, match="other data or pool settings"):
        CandidateTrainer("nes-rs", other, PoolSettings(), resume_from=saved)


# ------------------------------------------------------------------------------------
# Checkpoints of an interrupted search
# ------------------------------------------------------------------------------------

#: Each search's model, options and size of its first batch of candidates (NES-RS:
#: the pool; NES-RE: the initial population; AutoDEUQ: a generation).
SEARCHES = {
    "nes-rs": (NESRandomSearch, OPTIONS, OPTIONS["pool_size"]),
    "nes-re": (NESRegularizedEvolution, OPTIONS, OPTIONS["population_size"]),
    "autodeuq": (
        AutoDEUQ,
        {
            "ensemble_size": 3,
            "pool_size": 8,
            "epochs": 20,
            "population_size": 4,
            "tournament_size": 2,
            "generation_size": 4,
            "architecture_space": SPACE,
        },
        4,
    ),
}


class _InterruptedTraining:
    r"""Wraps ``train_candidate_group``: trains ``num_groups`` groups, then raises
    ``KeyboardInterrupt`` as Ctrl-C would."""

    def __init__(self, num_groups: int) -> None:
        self.num_groups = num_groups
        self.trained: list[int] = []
        self._train = pool_module.train_candidate_group

    def __call__(self, specs, *args):
        if self.num_groups == 0:
            raise KeyboardInterrupt
        self.num_groups -= 1
        outcomes = self._train(specs, *args)
        self.trained += [spec.candidate_id for spec in specs]
        return outcomes


@allow_single_member_warning
@pytest.mark.parametrize("method", list(SEARCHES))
def test_an_interrupted_search_keeps_its_trained_groups_and_resumes_exactly(
    method: str, tmp_path, monkeypatch
) -> None:
    model_class, options, first_batch = SEARCHES[method]
    X, Y = _data()
    uninterrupted = model_class(X, Y, **options).fit(seed=0)
    path = tmp_path / "search.pt"
    interruption = _InterruptedTraining(num_groups=1)
    with monkeypatch.context() as patch:
        patch.setattr(pool_module, "train_candidate_group", interruption)
        with pytest.raises(KeyboardInterrupt):
            model_class(X, Y, checkpoint_path=path, **options).fit(seed=0)
    # The interruption came inside the first batch, after its first group.
    assert 0 < len(interruption.trained) < first_batch
    checkpoint = SearchHistory.load(path)
    assert [c.spec.candidate_id for c in checkpoint.candidates] == sorted(interruption.trained)
    guard = _GuardedPool(set(interruption.trained))
    monkeypatch.setattr(history_module, "train_pool", guard)
    resumed = model_class(X, Y, resume_from=checkpoint, checkpoint_path=path, **options)
    resumed.fit(seed=0)
    assert sorted(guard.trained + interruption.trained) == list(range(options["pool_size"]))
    # Whole groups were kept, so the rest trains in the same groups: bit-identical.
    _assert_same_model(resumed, uninterrupted)
    assert SearchHistory.load(path).records() == resumed.search_history.records()


def test_the_trainer_checkpoints_after_every_group(tmp_path, monkeypatch) -> None:
    saved: list[list[int]] = []
    save = SearchHistory.save

    def recording_save(history, path):
        saved.append([c.spec.candidate_id for c in history.candidates])
        save(history, path)

    monkeypatch.setattr(SearchHistory, "save", recording_save)
    other = Architecture((Node(4, "tanh"), Node(), Node()))
    specs = [_spec(0), _spec(1), _spec(2), _spec(3)]
    specs[1] = CandidateSpec(1, other, HYPERPARAMETERS, seed=11)
    resumed = SearchHistory("nes-rs", pool_fingerprint(_pool_data(), PoolSettings(epochs=2)))
    resumed.candidates = [_candidate(2, [-1.0, -1.0, -1.0])]
    trainer = CandidateTrainer(
        "nes-rs",
        _pool_data(),
        PoolSettings(epochs=2),
        resume_from=resumed,
        checkpoint_path=tmp_path / "search.pt",
    )
    trainer.train(specs)
    # Two groups train (0 and 3 share an architecture; 1 has its own); the cached
    # candidate 2 is in every checkpoint.
    assert saved == [[0, 2, 3], [0, 1, 2, 3]]
    trainer.train([_spec(4)])
    assert saved[-1] == [0, 1, 2, 3, 4]
    checkpoint = SearchHistory.load(tmp_path / "search.pt")
    assert [c.spec.candidate_id for c in checkpoint.candidates] == [0, 1, 2, 3, 4]


# A search long enough (8 groups of 200 epochs) to be killed while it runs.
_LONG_SEARCH = {**OPTIONS, "pool_size": 8, "epochs": 200, "early_stopping_patience": 200}
_KILLED_SEARCH = """
import sys
from tests.ensembles.test_history import _LONG_SEARCH, _data
from botorch_nn_uq.models import NESRandomSearch

NESRandomSearch(*_data(), checkpoint_path=sys.argv[1], **_LONG_SEARCH).fit(seed=0)
"""


def test_a_search_killed_with_sigkill_keeps_its_finished_candidates(tmp_path) -> None:
    path = tmp_path / "search.pt"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(
        [sys.executable, "-c", _KILLED_SEARCH, str(path)],
        cwd=pathlib.Path(__file__).resolve().parents[2],
        env=env,
    )
    try:
        deadline = time.monotonic() + 120
        while not path.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert process.poll() is None, "the search ended before it could be killed"
        process.send_signal(signal.SIGKILL)
    finally:
        process.wait()
    checkpoint = SearchHistory.load(path)
    assert 0 < len(checkpoint.candidates) < _LONG_SEARCH["pool_size"]
    X, Y = _data()
    resumed = NESRandomSearch(X, Y, resume_from=checkpoint, **_LONG_SEARCH).fit(seed=0)
    uninterrupted = NESRandomSearch(X, Y, **_LONG_SEARCH).fit(seed=0)
    _assert_same_model(resumed, uninterrupted)


def test_a_re_signed_history_with_non_finite_weights_is_refused(tmp_path) -> None:
    path = tmp_path / "history.pt"
    history = _history_with_weights()
    trained = next(c for c in history.candidates if c.state is not None and c.error is None)
    trained.state["weights.1"][0, 0, 0] = float("nan")
    # Written with a valid checksum, as a tampering tool that re-signs the file would.
    history.save(path)
    with pytest.raises(ValueError, match="non-finite or complex weights") as error:
        SearchHistory.load(path)
    assert str(path) in str(error.value)


def test_a_save_removes_the_temporary_file_of_a_killed_save(tmp_path) -> None:
    path = tmp_path / "history.pt"
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True
    )
    dead_pid = int(dead.stdout)
    stale = tmp_path / f".history.pt.{dead_pid}-0a1b2c3d.tmp"
    stale.write_bytes(b"x" * 1000)
    alive = tmp_path / f".history.pt.{os.getppid()}-0a1b2c3d.tmp"
    alive.write_bytes(b"y")
    _history().save(path)
    assert not stale.exists()
    # A save of another process that is still running keeps its temporary file.
    assert alive.exists()
    SearchHistory.load(path)
