"""Loading is a transaction and untrusted checkpoints cannot hurt: a state_dict that
cannot be loaded raises ``Cannot load the state_dict ...`` and leaves the model exactly as
it was; crafted headers cannot make loading allocate what the tensors do not hold, nor
replace the training data; non-finite tensors are refused. A fit trains a private copy,
so predictions from other threads never see a half-trained network."""

import contextlib
import json
import threading

import pytest
import torch
from botorch.models.transforms import Normalize, Standardize
from hypothesis import given, settings
from hypothesis import strategies as st

from botorch_nn_uq.models.checkpoint import HEADER_KEY, encode_header
from tests.cards import NEURAL_REPRESENTATIVES, smallest
from tests.models.conformance import training_interrupted_after

DTYPE = torch.float64
BOUNDS = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=DTYPE)
#: One model card per family (its first), by name.
FAMILIES = {card.name: card for card in NEURAL_REPRESENTATIVES}


def _data(seed: int = 0):
    X = torch.rand(30, 2, generator=torch.Generator().manual_seed(seed), dtype=DTYPE)
    return X, X.sin().sum(-1, keepdim=True)


def _model(family: str, seed: int = 0):
    card = FAMILIES[family]
    transforms = {
        "input_transform": Normalize(2, bounds=BOUNDS),
        "outcome_transform": Standardize(1),
    }
    options = card.fast_options(BOUNDS, **smallest(card.fast.hyperparameters, epochs=30))
    return card.model_class(*_data(seed), **transforms, **options)


_FITTED: dict = {}


def _fitted(family: str, seed: int):
    if (family, seed) not in _FITTED:
        _FITTED[family, seed] = _model(family, seed).fit(seed=seed)
    return _FITTED[family, seed]


X_TEST = torch.rand(4, 1, 2, generator=torch.Generator().manual_seed(9), dtype=DTYPE)


def _predictions(model):
    if not model.is_fitted:
        return None
    with torch.no_grad():
        posterior = model.posterior(X_TEST, observation_noise=True)
        return posterior.mean.clone(), posterior.variance.clone()


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def _header(state: dict) -> dict:
    return json.loads(bytes(state[HEADER_KEY].tolist()).decode())


def _with_header(state: dict, header) -> dict:
    return {**state, HEADER_KEY: encode_header(header)}


def _assert_refused_and_unchanged(victim, state, message: str = "Cannot load the state_dict"):
    before = _predictions(victim)
    fitted, seed = victim.is_fitted, victim.fit_seed
    with pytest.raises(RuntimeError, match=message):
        victim.load_state_dict(state)
    assert victim.is_fitted == fitted and victim.fit_seed == seed
    assert _same(_predictions(victim), before)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_an_extra_key_is_refused_and_the_model_keeps_serving_its_fit(family) -> None:
    source, victim = _fitted(family, 0), _model(family, 1).fit(seed=1)
    state = {**source.state_dict(), "key_from_a_newer_version": torch.zeros(1)}
    _assert_refused_and_unchanged(victim, state, "Unexpected key")


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_header_without_its_fit_seed_is_refused(family) -> None:
    state = dict(_fitted(family, 0).state_dict())
    header = _header(state)
    del header["fit_seed"]
    victim = _model(family, 1)
    _assert_refused_and_unchanged(victim, _with_header(state, header), "fit_seed is missing")
    assert not victim.is_fitted


@pytest.mark.parametrize("family", list(FAMILIES))
def test_only_the_buffers_the_class_declares_load(family) -> None:
    source = _fitted(family, 0)
    state = dict(source.state_dict())
    header = _header(state)
    header["fitted_buffers"] = [*header["fitted_buffers"], "train_X"]
    state["train_X"] = torch.zeros(3, 2, dtype=DTYPE)
    victim = _model(family, 1).fit(seed=1)
    train_X = victim.train_X.clone()
    _assert_refused_and_unchanged(victim, _with_header(state, header), "never has")
    assert torch.equal(victim.train_X, train_X)


def test_a_crafted_ensemble_header_is_checked_against_the_tensors_before_building() -> None:
    state = dict(_fitted("deep-ensemble", 0).state_dict())
    header = _header(state)
    header["network"][0]["hidden_widths"] = [20000, 20000]
    victim = _model("deep-ensemble", 1).fit(seed=1)
    _assert_refused_and_unchanged(victim, _with_header(state, header), "does not match its tensors")


@pytest.mark.parametrize("family", list(FAMILIES))
def test_non_finite_tensors_are_refused(family) -> None:
    state = dict(_fitted(family, 0).state_dict())
    names = [
        name for name, value in state.items() if name != HEADER_KEY and value.is_floating_point()
    ]
    victim = _model(family, 1).fit(seed=1)
    for name in names:
        tampered = {**state, name: torch.full_like(state[name], float("nan"))}
        _assert_refused_and_unchanged(victim, tampered, "NaN or infinite")


@pytest.mark.parametrize(
    ("tamper", "message"),
    [
        (
            lambda state: {
                **state,
                HEADER_KEY: torch.tensor(list(b"{not json"), dtype=torch.uint8),
            },
            "not valid JSON",
        ),
        (lambda state: _with_header(state, [1, 2]), "JSON list"),
        (lambda state: _with_header(state, {**_header(state), "fitted_buffers": "x"}), "malformed"),
        (lambda state: _with_header(state, {**_header(state), "fit_seed": -3}), "negative"),
        (lambda state: _with_header(state, {**_header(state), "network": [7]}), "member group 0"),
        (
            lambda state: {**state, "member_weights": state["member_weights"].to(torch.complex128)},
            "complex",
        ),
        (lambda state: {**state, "member_weights": torch.ones(7, dtype=DTYPE)}, "does not predict"),
        (lambda state: {**state, HEADER_KEY: torch.zeros(2, 2)}, "not the header"),
        (lambda state: {**state, "network.groups.0.weights.0": [1.0]}, "not a tensor"),
    ],
    ids=["json", "list", "buffers", "seed", "group", "complex", "size", "header-tensor", "object"],
)
def test_header_and_tensor_errors_name_the_checkpoint(tamper, message) -> None:
    state = dict(_fitted("deep-ensemble", 0).state_dict())
    victim = _model("deep-ensemble", 1).fit(seed=1)
    _assert_refused_and_unchanged(victim, tamper(state), message)


TAMPERINGS = (
    "extra-key",
    "missing-key",
    "nan",
    "inf",
    "header-field",
    "header-type",
    "buffer-name",
)


@settings(max_examples=30)
@given(
    family=st.sampled_from(list(FAMILIES)),
    tampering=st.sampled_from(TAMPERINGS),
    position=st.integers(0, 10**6),
    fitted_victim=st.booleans(),
)
def test_a_tampered_checkpoint_loads_completely_or_changes_nothing(
    family, tampering, position, fitted_victim
) -> None:
    source = _fitted(family, 0)
    state = dict(source.state_dict())
    tensors = sorted(name for name in state if name != HEADER_KEY)
    name = tensors[position % len(tensors)]
    header = _header(state)
    if tampering == "extra-key":
        state[f"unexpected_{position}"] = torch.zeros(1)
    elif tampering == "missing-key":
        del state[name]
    elif tampering in ("nan", "inf") and state[name].is_floating_point():
        value = float("nan") if tampering == "nan" else float("inf")
        flat = state[name].clone().reshape(-1)
        flat[position % flat.numel()] = value
        state[name] = flat.reshape(state[name].shape)
    elif tampering == "header-field":
        del header[sorted(header)[position % len(header)]]
    elif tampering == "header-type":
        header[sorted(header)[position % len(header)]] = "tampered"
    elif tampering == "buffer-name":
        header["fitted_buffers"] = [*header["fitted_buffers"], f"buffer_{position}"]
    elif tampering == "sizes":
        # Widths (or, for networks built from the hyperparameters, the hyperparameters)
        # far larger than the tensors: refused before anything is allocated.
        if header["network"] is not None:
            header["network"][0]["hidden_widths"] = [20000 + position % 7, 20000]
        else:
            widths = [name for name in header["hyperparameters"] if name.endswith("widths")]
            header["hyperparameters"][widths[position % len(widths)]] = [20000, 20000]
    elif tampering == "json":
        text = bytes(state[HEADER_KEY].tolist())
        cut = position % len(text)
        state[HEADER_KEY] = torch.tensor(
            list(text[:cut] + b"\x00{" + text[cut:]), dtype=torch.uint8
        )
    if tampering.startswith(("header", "buffer", "sizes")):
        state = _with_header(state, header)
    victim = _model(family, 1)
    if fitted_victim:
        victim = victim.fit(seed=1)
    before = _predictions(victim)
    try:
        victim.load_state_dict(state)
    except RuntimeError as error:
        assert "Cannot load the state_dict" in str(error) or "state_dict" in str(error)
        assert _same(_predictions(victim), before)
    else:
        # Only harmless tamperings load (an integer tensor given a NaN stays as it was).
        assert _same(_predictions(victim), _predictions(source))


@contextlib.contextmanager
def _reading(model):
    r"""Inside the block, another thread keeps predicting with ``model``; yields the list
    of its predictions (complete once the block has ended)."""
    reads, stop = [], threading.Event()

    def reader() -> None:
        while not stop.is_set():
            reads.append(_predictions(model))

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        yield reads
    finally:
        stop.set()
        thread.join()


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_refit_never_serves_a_half_trained_network_to_other_threads(family) -> None:
    model = _model(family, 0).fit(seed=0)
    old = _predictions(model)
    new = _predictions(_model(family, 0).fit(seed=1, epochs=60))
    with _reading(model) as reads:
        model.fit(seed=1, epochs=60)
    assert reads and all(_same(read, old) or _same(read, new) for read in reads)
    # The readers' predictions (which put the model in eval mode) did not switch dropout
    # off in the network being trained: the fit equals one without readers.
    assert _same(_predictions(model), new)


@settings(max_examples=8)
@given(
    family=st.sampled_from(list(FAMILIES)),
    seed=st.integers(0, 3),
    fails_after=st.one_of(st.none(), st.integers(1, 30)),
)
def test_readers_during_any_fit_see_a_whole_fit(family, seed, fails_after) -> None:
    model = _fitted(family, 0)
    old = _predictions(model)
    with _reading(model) as reads:
        if fails_after is None:
            model.fit(seed=seed + 1)
        else:
            failure = training_interrupted_after(fails_after, RuntimeError("boom"))
            with failure, pytest.raises(RuntimeError):
                model.fit(seed=seed + 1)
    new = _predictions(model)
    assert reads and all(_same(read, old) or _same(read, new) for read in reads)
    if fails_after is not None:
        assert _same(new, old)
    # The shared fixture serves its original fit again for the other examples.
    _FITTED.pop((family, 0))
