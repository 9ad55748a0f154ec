"""The searched ensembles as BoTorch models: NES-RS, NES-RE and AutoDEUQ. Shapes,
transforms and acquisitions are covered by the conformance kit
(``tests/models/test_conformance.py``); these tests cover what the search adds."""

import math

import pytest
import torch

from botorch_nn_uq.ensembles.architecture_space import ArchitectureSpace
from botorch_nn_uq.ensembles.history import SearchHistory, ensemble_diagnostics
from botorch_nn_uq.ensembles.hyperparameter_space import HyperparameterSpace
from botorch_nn_uq.ensembles.selection import ensemble_nll
from botorch_nn_uq.models import AutoDEUQ, MemberEnsemble, NESRandomSearch, NESRegularizedEvolution
from botorch_nn_uq.posteriors import FunctionEnsemblePosterior, MixtureOfGaussiansPosterior
from tests.ensembles.ray_cluster import local_ray_executor
from tests.testing import allow_single_member_warning

DTYPE = torch.float64
SPACE = ArchitectureSpace(num_nodes=2, units=(4, 8), activations=("relu", "tanh"))
NES = {
    "ensemble_size": 3,
    "epochs": 20,
    "architecture_space": SPACE,
    "learning_rate": 1e-2,
    "batch_size": 16,
    "lr_reduction_patience": 5,
    "early_stopping_patience": 10,
}
MODELS = {
    "nes-rs": (NESRandomSearch, {**NES, "pool_size": 5}),
    "nes-re": (
        NESRegularizedEvolution,
        {**NES, "pool_size": 6, "population_size": 3, "num_parents": 2},
    ),
    "autodeuq": (
        AutoDEUQ,
        {
            "ensemble_size": 3,
            "epochs": 20,
            "architecture_space": SPACE,
            "pool_size": 6,
            "population_size": 3,
            "generation_size": 3,
            "num_initial_random": 3,  # the second generation comes from the GP
            "num_acquisition_candidates": 32,
            "hyperparameter_space": HyperparameterSpace(
                learning_rate=(3e-3, 3e-2),
                batch_size=(8, 32),
                optimizers=("adam", "rmsprop"),
                lr_reduction_patience=(3, 5),
                early_stopping_patience=(6, 10),
            ),
        },
    ),
}


@pytest.fixture(autouse=True)
def _one_thread():
    r"""Tiny networks and GPs train fastest on one thread on a busy machine."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def _data(n: int = 36, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    X = torch.rand(n, 2, generator=generator, dtype=DTYPE)
    Y = (3 * X).sin().sum(-1, keepdim=True) + 0.1 * torch.randn(
        n, 1, generator=generator, dtype=DTYPE
    )
    return X, (Y - Y.mean()) / Y.std()


def _fit(name: str, seed: int = 0, **kwargs):
    r"""The named model on standardised data without an outcome transform, so that its
    posterior is in the units of its networks' outputs."""
    model_class, options = MODELS[name]
    X, Y = _data()
    return model_class(X, Y, **{"outcome_transform": None, **options, **kwargs}).fit(seed=seed)


@pytest.fixture(scope="module")
def fitted():
    cache = {}

    def get(name: str):
        if name not in cache:
            cache[name] = _fit(name)
        return cache[name]

    return get


def _test_points() -> torch.Tensor:
    return torch.rand(6, 1, 2, generator=torch.Generator().manual_seed(5), dtype=DTYPE)


def _timeless(records: list[dict]) -> list[dict]:
    return [{key: value for key, value in r.items() if key != "seconds"} for r in records]


def _assert_same_model(a, b) -> None:
    state_a, state_b = a.state_dict(), b.state_dict()
    assert state_a.keys() == state_b.keys()
    assert all(torch.equal(state_a[name], state_b[name]) for name in state_a)
    # Every record but the training time, which is measured.
    assert _timeless(a.search_history.records()) == _timeless(b.search_history.records())
    with torch.no_grad():
        assert torch.equal(a.posterior(_test_points()).mean, b.posterior(_test_points()).mean)


# ------------------------------------------------------------------------------------
# The fitted ensemble
# ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(MODELS))
def test_the_fit_serves_the_selected_candidates_as_a_member_ensemble(fitted, name: str) -> None:
    model = fitted(name)
    model_class, options = MODELS[name]
    assert isinstance(model, MemberEnsemble) and model.is_fitted
    history = model.search_history
    assert history.method == model_class.method == name
    assert len(history.candidates) == options["pool_size"]
    assert [c.spec.candidate_id for c in history.candidates] == list(range(options["pool_size"]))
    selected = [history.candidates[i] for i in history.selected_ids]
    assert 1 <= len(selected) <= options["ensemble_size"]
    assert not any(c.failed for c in selected)
    # One member per selected candidate, one group per distinct architecture.
    assert model.network.num_members == len(selected)
    assert len(model.network.groups) == len({c.spec.architecture for c in selected})
    assert model.member_weights.sum().item() == pytest.approx(1.0, abs=1e-12)
    assert sorted(model.member_weights.tolist()) == pytest.approx(sorted(history.selected_weights))
    # The members are the candidates' networks: their seeds, grouped by architecture.
    seeds = sorted(seed for group in model.network.groups for seed in group.member_seeds)
    assert seeds == sorted(c.spec.seed for c in selected)


@pytest.mark.parametrize("name", ["nes-rs", "nes-re"])
def test_nes_members_differ_in_architecture(fitted, name: str) -> None:
    model = fitted(name)
    assert model.network.num_members == 3
    assert len(model.network.groups) >= 2
    # ForwardSelect: distinct members with uniform weights.
    torch.testing.assert_close(model.member_weights, torch.full((3,), 1 / 3, dtype=DTYPE))


def test_autodeuq_searches_training_hyperparameters(fitted) -> None:
    model = fitted("autodeuq")
    space = MODELS["autodeuq"][1]["hyperparameter_space"]
    configurations = [c.spec.hyperparameters for c in model.search_history.candidates]
    assert all(space.contains(h) for h in configurations)
    assert len(set(configurations)) == len(configurations)
    # Caruana weights are multiplicities over the number of additions.
    weights = torch.tensor(model.search_history.selected_weights, dtype=DTYPE)
    assert any(
        torch.allclose(weights * additions, (weights * additions).round())
        for additions in range(1, 10 * 3 + 1)  # the default cap: 10 additions per member
    )


@pytest.mark.parametrize("name", list(MODELS))
def test_the_search_history_reports_the_ensemble_diagnostics(fitted, name: str) -> None:
    history = fitted(name).search_history
    diagnostics = history.diagnostics
    values = (diagnostics.ensemble_nll, diagnostics.average_member_nll, diagnostics.oracle_nll)
    assert all(math.isfinite(value) for value in values)
    # The best member per point beats the mixture, which beats its members on average.
    assert diagnostics.oracle_nll <= diagnostics.ensemble_nll + 1e-12
    assert diagnostics.oracle_nll <= diagnostics.average_member_nll + 1e-12
    assert diagnostics.ensemble_nll <= diagnostics.average_member_nll + 1e-12
    rows = torch.stack(
        [history.candidates[i].validation_log_likelihoods for i in history.selected_ids]
    )
    weights = torch.tensor(history.selected_weights, dtype=DTYPE)
    assert diagnostics == pytest.approx(ensemble_diagnostics(rows, weights))
    assert diagnostics.ensemble_nll == pytest.approx(float(ensemble_nll(rows, weights)))


@pytest.mark.parametrize("name", list(MODELS))
def test_search_summary_has_one_row_per_candidate(fitted, name: str) -> None:
    model = fitted(name)
    rows = model.search_summary()
    assert len(rows) == MODELS[name][1]["pool_size"]
    assert [row["candidate_id"] for row in rows] == list(range(len(rows)))
    selected = set(model.search_history.selected_ids)
    assert {row["candidate_id"] for row in rows if row["selection_weight"] > 0} == selected
    assert sum(row["selection_weight"] for row in rows) == pytest.approx(1.0)
    for row in rows:
        assert isinstance(row["architecture"], str) and row["seconds"] >= 0
        assert (
            row["validation_nll"]
            == model.search_history.candidates[row["candidate_id"]].validation_nll
        )
        assert {"learning_rate", "batch_size", "optimizer", "seed", "error"} <= set(row)


# ------------------------------------------------------------------------------------
# Seeds
# ------------------------------------------------------------------------------------


@allow_single_member_warning
@pytest.mark.parametrize("name", list(MODELS))
def test_the_seed_determines_the_model(fitted, name: str) -> None:
    model = fitted(name)
    _assert_same_model(_fit(name, seed=0), model)
    other = _fit(name, seed=1)
    specs = [c.spec for c in model.search_history.candidates]
    assert [c.spec for c in other.search_history.candidates] != specs
    with torch.no_grad():
        assert not torch.allclose(
            other.posterior(_test_points()).mean, model.posterior(_test_points()).mean
        )


# ------------------------------------------------------------------------------------
# The posterior
# ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(MODELS))
def test_observation_noise_gives_the_mixture_with_its_uncertainty_split(fitted, name: str):
    model = fitted(name)
    X = _test_points()
    with torch.no_grad():
        epistemic = model.posterior(X)
        noisy = model.posterior(X, observation_noise=True)
        output = model.network(X)
    assert isinstance(epistemic, FunctionEnsemblePosterior)
    assert isinstance(noisy, MixtureOfGaussiansPosterior)
    weights = model.member_weights.view(-1, 1, 1)
    torch.testing.assert_close(noisy.mean, (weights * output.mean).sum(-3))
    torch.testing.assert_close(epistemic.mean, noisy.mean)
    torch.testing.assert_close(noisy.aleatoric_variance, (weights * output.std.pow(2)).sum(-3))
    torch.testing.assert_close(noisy.variance, noisy.aleatoric_variance + noisy.epistemic_variance)
    assert (noisy.aleatoric_variance > 0).all() and (noisy.epistemic_variance >= 0).all()
    decomposition = model.uncertainty_decomposition(X)
    torch.testing.assert_close(decomposition.mean, noisy.mean)
    torch.testing.assert_close(decomposition.epistemic_variance, noisy.epistemic_variance)


def test_mean_only_members_with_the_mse_likelihood() -> None:
    model = _fit("nes-rs", likelihood="mse", noise_variance=0.05)
    assert not model.network.gaussian_head
    selected = [model.search_history.candidates[i] for i in model.search_history.selected_ids]
    assert all(torch.isfinite(c.validation_log_likelihoods).all() for c in selected)
    with torch.no_grad():
        decomposition = model.uncertainty_decomposition(_test_points())
    torch.testing.assert_close(
        decomposition.aleatoric_variance, torch.full((6, 1, 1), 0.05, dtype=DTYPE)
    )


# ------------------------------------------------------------------------------------
# Options
# ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["nes-rs", "autodeuq"])
def test_warm_start_is_not_supported(fitted, name: str) -> None:
    model_class, options = MODELS[name]
    X, Y = _data()
    with pytest.raises(ValueError, match="does not support warm_start"):
        model_class(X, Y, **options).fit(seed=0, warm_start=fitted(name))


@pytest.mark.parametrize(
    ("model_class", "kwargs", "error", "match"),
    [
        (NESRandomSearch, {"pool_size": 0}, ValueError, "pool_size"),
        (NESRandomSearch, {"pool_size": 2.5}, ValueError, "pool_size"),
        (NESRandomSearch, {"ensemble_size": 0}, ValueError, "ensemble_size"),
        (NESRandomSearch, {"epochs": 0}, ValueError, "epochs"),
        (NESRandomSearch, {"validation_fraction": 0.0}, ValueError, "validation_fraction"),
        (NESRandomSearch, {"validation_fraction": 1.0}, ValueError, "validation_fraction"),
        (NESRandomSearch, {"likelihood": "poisson"}, ValueError, "likelihood"),
        (NESRandomSearch, {"min_std": 0.0}, ValueError, "min_std"),
        (NESRandomSearch, {"lr_reduction_factor": 1.0}, ValueError, "lr_reduction_factor"),
        (NESRandomSearch, {"noise_variance": 0.0}, ValueError, "noise_variance"),
        (NESRandomSearch, {"learning_rate": -1.0}, ValueError, "learning_rate"),
        (NESRandomSearch, {"optimizer": "lbfgs"}, ValueError, "optimizer"),
        (NESRegularizedEvolution, {"population_size": 0}, ValueError, "population_size"),
        (NESRegularizedEvolution, {"num_parents": 0}, ValueError, "num_parents"),
        (NESRegularizedEvolution, {"children_per_generation": 0}, ValueError, "children"),
        (AutoDEUQ, {"tournament_size": 0}, ValueError, "tournament_size"),
        (AutoDEUQ, {"population_size": 0}, ValueError, "population_size"),
        (AutoDEUQ, {"generation_size": 0}, ValueError, "generation_size"),
        (AutoDEUQ, {"num_initial_random": 0}, ValueError, "num_initial_random"),
        (AutoDEUQ, {"kappa": -0.1}, ValueError, "kappa"),
        (NESRandomSearch, {"max_steps": 0}, ValueError, "max_steps"),
        (AutoDEUQ, {"max_steps": 2.5}, ValueError, "max_steps"),
        (AutoDEUQ, {"kappa": math.nan}, ValueError, "kappa"),
        (AutoDEUQ, {"hyperparameter_space": {"learning_rate": (1e-3, 1e-2)}}, TypeError,
         "HyperparameterSpace"),
        (NESRandomSearch, {"architecture_space": {"num_nodes": 3}}, TypeError,
         "ArchitectureSpace"),
        (AutoDEUQ, {"architecture_space": HyperparameterSpace()}, TypeError, "ArchitectureSpace"),
        (NESRandomSearch, {"resume_from": "history.pt"}, TypeError, "SearchHistory"),
        (AutoDEUQ, {"resume_from": {"method": "autodeuq"}}, TypeError, "SearchHistory"),
        (NESRandomSearch, {"tournament_size": 3}, TypeError, "Unknown hyperparameter"),
    ],
)  # fmt: skip
def test_invalid_hyperparameters_raise(model_class, kwargs: dict, error, match: str) -> None:
    X, Y = _data()
    with pytest.raises(error, match=match):
        model_class(X, Y, **kwargs)


def test_resume_from_accepts_a_search_history() -> None:
    X, Y = _data()
    model = NESRandomSearch(X, Y, resume_from=SearchHistory("nes-rs"))
    assert isinstance(model.hyperparameters.resume_from, SearchHistory)


def test_nes_re_caps_the_population_at_the_pool_size() -> None:
    # population_size > pool_size is clipped by the model (the search itself rejects it).
    model = _fit("nes-re", pool_size=3, population_size=10)
    assert len(model.search_history.candidates) == 3


# ------------------------------------------------------------------------------------
# Ray
# ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_executor():
    yield from local_ray_executor()


@pytest.mark.slow
def test_the_ray_executor_gives_the_same_ensemble(fitted, ray_executor) -> None:
    in_process = fitted("nes-rs")
    on_ray = _fit("nes-rs", executor=ray_executor)
    assert len(on_ray.network.groups) >= 2  # several groups, several Ray tasks
    _assert_same_model(on_ray, in_process)


def test_checkpoint_resumes_an_interrupted_search(tmp_path, monkeypatch) -> None:
    from botorch_nn_uq.ensembles import history

    path = tmp_path / "search.pt"
    X, Y = _data()
    options = {**NES, "pool_size": 6, "population_size": 3, "children_per_generation": 1}
    complete = NESRegularizedEvolution(X, Y, **options).fit(seed=0)
    train_pool = history.train_pool
    calls = []

    def interrupted(specs, *args, **kwargs):
        calls.append(len(specs))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return train_pool(specs, *args, **kwargs)

    monkeypatch.setattr(history, "train_pool", interrupted)
    with pytest.raises(KeyboardInterrupt):
        NESRegularizedEvolution(X, Y, checkpoint_path=path, **options).fit(seed=0)
    saved = SearchHistory.load(path)
    assert len(saved.candidates) == 4  # the population of 3 and one child
    monkeypatch.setattr(history, "train_pool", train_pool)
    resumed = NESRegularizedEvolution(X, Y, resume_from=saved, **options).fit(seed=0)
    assert resumed.search_history.selected_ids == complete.search_history.selected_ids
    test_X = torch.rand(5, X.shape[-1], dtype=X.dtype)
    torch.testing.assert_close(resumed.posterior(test_X).mean, complete.posterior(test_X).mean)


@allow_single_member_warning
@pytest.mark.parametrize("name", list(MODELS))
def test_a_step_budget_bounds_every_candidate_whatever_the_data_size(name: str) -> None:
    model_class, options = MODELS[name]
    for num_data in (40, 400):
        X, Y = _data(num_data)
        model = model_class(X, Y, **{**options, "epochs": 10_000, "max_steps": 15}).fit(seed=0)
        steps = [record["steps"] for record in model.search_history.records()]
        assert all(0 < count <= 15 for count in steps)
        # Early stopping may end a group sooner; the budget ends the others.
        assert max(steps) == 15
