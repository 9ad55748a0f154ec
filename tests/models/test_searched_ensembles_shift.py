"""The NES models' adaptation to dataset shift: selection on a shifted validation set
(``validation_shift_severity``), NES-RE-0 (``evolve_on_plain_validation``) and
reselection from the trained pool for another severity (``reselect``)."""

import pytest
import torch

from botorch_nn_uq.ensembles import CandidateScorer, forward_select, shift_validation_set
from botorch_nn_uq.ensembles.history import stack_log_likelihoods, usable_candidates
from botorch_nn_uq.models import NESRandomSearch, NESRegularizedEvolution, searched_ensembles
from botorch_nn_uq.training import loop
from tests.models.test_searched_ensembles import MODELS, _assert_same_model, _data

NES_MODELS = {name: MODELS[name] for name in ("nes-rs", "nes-re")}


@pytest.fixture(autouse=True)
def _one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def _fit(name: str, seed: int = 0, **kwargs):
    model_class, options = NES_MODELS[name]
    X, Y = _data()
    return model_class(X, Y, **{"outcome_transform": None, **options, **kwargs}).fit(seed=seed)


@pytest.fixture(scope="module")
def fitted():
    cache = {}

    def get(name: str, **kwargs):
        key = (name, *sorted(kwargs.items()))
        if key not in cache:
            cache[key] = _fit(name, **kwargs)
        return cache[key]

    return get


def _selected_ids(model) -> list[int]:
    return model.search_history.selected_ids


def test_nes_rs_selects_on_the_shifted_validation_set_it_builds(fitted) -> None:
    model = fitted("nes-rs", validation_shift_severity=5)
    data = model.pool_data
    X_shift, Y_shift = shift_validation_set(
        data.validation_X,
        data.validation_Y,
        5,
        torch.Generator().manual_seed(model.fit_seed),
        reference=data.train_X,
    )
    usable = usable_candidates(model.search_history.candidates)
    scores = CandidateScorer(X_shift, Y_shift, model.hyperparameters.pool_settings())(usable)
    expected = forward_select(scores, model.hyperparameters.ensemble_size)
    assert _selected_ids(model) == [usable[i].spec.candidate_id for i in expected.indices]
    # The selection scored the shifted rows, not the plain ones.
    assert not torch.equal(X_shift, data.validation_X)
    assert not torch.allclose(scores, stack_log_likelihoods(usable))


@pytest.mark.parametrize("name", list(NES_MODELS))
def test_reselection_on_the_plain_set_reproduces_the_plain_fit(fitted, name: str) -> None:
    # NES-RS trains the same pool whatever the selection's set, and NES-RE-0 evolves
    # on the plain set: a fit adapted to severity 5 reselected at 0 is the plain fit.
    options = {"validation_shift_severity": 5}
    if name == "nes-re":
        options["evolve_on_plain_validation"] = True
    adapted = fitted(name, **options)
    _assert_same_model(adapted.reselect(0), fitted(name))


def test_reselection_trains_nothing_and_leaves_the_model_as_it_is(fitted, monkeypatch) -> None:
    model = fitted("nes-re", validation_shift_severity=5)
    before = {name: value.clone() for name, value in model.state_dict().items()}

    def fail(*args, **kwargs):
        raise AssertionError("reselection trained a network")

    monkeypatch.setattr(loop, "_train", fail)
    by_severity = {severity: model.reselect(severity) for severity in range(6)}
    assert all(torch.equal(before[name], model.state_dict()[name]) for name in before)
    _assert_same_model(by_severity[5], model)
    for severity, reselected in by_severity.items():
        assert reselected.hyperparameters.validation_shift_severity == severity
        # The pool is shared, not copied; only the selection is the copy's own.
        assert reselected.search_history.candidates is model.search_history.candidates
        assert len(_selected_ids(reselected)) == model.hyperparameters.ensemble_size
    assert len({tuple(_selected_ids(r)) for r in by_severity.values()}) > 1
    test_X = torch.rand(4, 1, 2, dtype=torch.float64)
    with torch.no_grad():
        assert by_severity[2].posterior(test_X).mean.shape == (4, 1, 1)


@pytest.mark.parametrize("plain_evolution", [False, True])
def test_nes_re_evolves_with_the_shifted_set_unless_it_is_nes_re_0(
    monkeypatch, plain_evolution: bool
) -> None:
    seen = {}
    search = searched_ensembles.nes_regularized_evolution

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return search(*args, **kwargs)

    monkeypatch.setattr(searched_ensembles, "nes_regularized_evolution", spy)
    model = _fit("nes-re", validation_shift_severity=4, evolve_on_plain_validation=plain_evolution)
    assert seen["evolve_on_plain_validation"] is plain_evolution
    scorer = seen["shifted_validation"]
    assert torch.equal(scorer.X, model.shifted_validation(4).X)
    assert not torch.equal(scorer.X, model.pool_data.validation_X)


def test_known_noise_scores_the_shifted_rows_with_their_variances() -> None:
    X, Y = _data()
    Yvar = torch.full_like(Y, 0.05)
    model_class, options = NES_MODELS["nes-rs"]
    model = model_class(
        X, Y, Yvar, outcome_transform=None, **options, validation_shift_severity=3
    ).fit(seed=1)
    scorer = model.shifted_validation(3)
    assert torch.equal(scorer.Yvar, model.pool_data.validation_Yvar)
    assert len(_selected_ids(model.reselect(1))) == model.hyperparameters.ensemble_size


@pytest.mark.parametrize("severity", [-1, 6, 2.5, True, "5"])
def test_an_invalid_severity_is_refused(severity) -> None:
    X, Y = _data()
    with pytest.raises(ValueError, match="validation_shift_severity must be an integer"):
        NESRandomSearch(X, Y, validation_shift_severity=severity)


def test_reselect_refuses_an_invalid_severity_and_an_unfitted_model(fitted) -> None:
    with pytest.raises(ValueError, match="validation_shift_severity"):
        fitted("nes-rs").reselect(6)
    X, Y = _data()
    with pytest.raises(RuntimeError, match="no trained pool"):
        NESRegularizedEvolution(X, Y).reselect(1)


def test_nes_re_0_is_refused_for_nes_rs_and_the_flag_must_be_a_boolean() -> None:
    X, Y = _data()
    with pytest.raises(ValueError, match="evolve_on_plain_validation"):
        NESRegularizedEvolution(X, Y, evolve_on_plain_validation="yes")
    model = NESRandomSearch(X, Y, evolve_on_plain_validation=True, pool_size=2, epochs=2)
    with pytest.raises(ValueError, match="NES-RE's"):
        model.fit(seed=0)
