"""The package's models in Ax: ``ModelConfig(botorch_model_class=...)`` in a real
``ax.api.Client`` loop trains the model on every BoTorch trial, and Ax's best point,
predictions and (honest) cross-validation work."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

pytest.importorskip("ax", reason="the Ax integration needs ax-platform (botorch-nn-uq[ax])")

import numpy as np
import torch
from ax.adapter.cross_validation import cross_validate
from ax.adapter.registry import Generators
from ax.api.client import Client
from ax.api.configs import RangeParameterConfig
from ax.generation_strategy.generation_node import GenerationNode
from ax.generation_strategy.generation_strategy import GenerationStrategy
from ax.generation_strategy.generator_spec import GeneratorSpec
from ax.generation_strategy.transition_criterion import MinTrials
from ax.generators.torch.botorch_modular.surrogate import SurrogateSpec
from ax.generators.torch.botorch_modular.utils import ModelConfig, fit_botorch_model
from botorch.models import SingleTaskGP
from gpytorch.likelihoods import FixedNoiseGaussianLikelihood

from botorch_nn_uq.integrations.ax import GaussianMomentsModel, fit_neural_surrogate
from botorch_nn_uq.models import NOMU, DeepEnsemble, NESRandomSearch, NeuralSurrogateModel
from tests.cards import NEURAL_CARDS, NEURAL_REPRESENTATIVES, smallest
from tests.testing import allow_single_member_warning

NUM_SOBOL = 3
NUM_BOTORCH = 2

# Every model card's fast settings with 10 epochs and the smallest searches: the tests
# check the plumbing, not the fits' quality.
MODEL_OPTIONS: dict[type[NeuralSurrogateModel], dict[str, Any]] = {
    card.model_class: smallest(card.fast.hyperparameters, epochs=10) for card in NEURAL_CARDS
}
#: One model class per family.
FAMILY_CLASSES = [card.model_class for card in NEURAL_REPRESENTATIVES]


def _outcomes(parameters: dict[str, float], metrics: str) -> dict[str, float]:
    x0, x1 = parameters["x0"], parameters["x1"]
    values = {"y": (x0 - 0.3) ** 2 + x1**2, "z": (x0 + 0.5) ** 2 + (x1 - 0.2) ** 2}
    return {name: values[name] for name in metrics}


def _client(
    model_config: ModelConfig | list[ModelConfig],
    objective: str = "-y",
    seed: int = 0,
    num_sobol: int = NUM_SOBOL,
    **generator_kwargs: Any,
) -> Client:
    client = Client(random_seed=seed)
    client.configure_experiment(
        parameters=[
            RangeParameterConfig(name=name, parameter_type="float", bounds=(-1.0, 2.0))
            for name in ("x0", "x1")
        ]
    )
    client.configure_optimization(objective=objective)
    botorch_spec = GeneratorSpec(
        generator_enum=Generators.BOTORCH_MODULAR,
        generator_kwargs={
            "surrogate_spec": SurrogateSpec(
                model_configs=model_config if isinstance(model_config, list) else [model_config]
            ),
            **generator_kwargs,
        },
    )
    sobol = GenerationNode(
        name="Sobol",
        generator_specs=[GeneratorSpec(generator_enum=Generators.SOBOL)],
        transition_criteria=[MinTrials(threshold=num_sobol, transition_to="BoTorch")],
    )
    client.set_generation_strategy(
        GenerationStrategy(
            name="neural",
            nodes=[sobol, GenerationNode(name="BoTorch", generator_specs=[botorch_spec])],
        )
    )
    return client


def _run(client: Client, num_trials: int, metrics: str = "y") -> list[dict[str, float]]:
    r"""Run ``num_trials`` trials, reporting the ``metrics`` (each metric is modelled by
    a model of its own)."""
    parameters = []
    for _ in range(num_trials):
        for index, point in client.get_next_trials(max_trials=1).items():
            client.complete_trial(index, raw_data=_outcomes(point, metrics))
            parameters.append(point)
    return parameters


@pytest.fixture
def fits(monkeypatch: pytest.MonkeyPatch) -> list[tuple[NeuralSurrogateModel, int]]:
    r"""Every ``fit`` of a model of the package: the model and its number of points."""
    calls = []
    fit = NeuralSurrogateModel.fit

    def recording_fit(self, *args, **kwargs):
        calls.append((self, self.train_X.shape[0]))
        return fit(self, *args, **kwargs)

    monkeypatch.setattr(NeuralSurrogateModel, "fit", recording_fit)
    return calls


def test_importing_the_package_registers_with_ax_without_importing_it() -> None:
    code = (
        "import sys, botorch_nn_uq\n"
        "assert 'ax' not in sys.modules\n"
        "from ax.generators.torch.botorch_modular.utils import fit_botorch_model\n"
        "from botorch_nn_uq.models import DeepEnsemble\n"
        "print(fit_botorch_model.dispatch(DeepEnsemble).__module__)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "botorch_nn_uq.integrations.ax"


def test_ax_dispatches_fits_of_every_model_to_the_package() -> None:
    for model_class in MODEL_OPTIONS:
        assert fit_botorch_model.dispatch(model_class) is fit_neural_surrogate


# A searched ensemble on these few points may keep a single member, whose zero posterior
# variance makes the log-likelihood of Ax's best-point diagnostics divide by zero.
@allow_single_member_warning
@pytest.mark.filterwarnings("ignore:divide by zero encountered in divide:RuntimeWarning:scipy")
@pytest.mark.parametrize("model_class", list(MODEL_OPTIONS), ids=lambda cls: cls.__name__)
def test_a_client_loop_trains_the_model_on_every_botorch_trial(model_class, fits) -> None:
    options = MODEL_OPTIONS[model_class]
    # Enough initial points that the leave-one-out folds of the best-point check below
    # hold as many as the model needs.
    num_sobol = max(NUM_SOBOL, model_class.min_training_points + 1)
    client = _client(
        ModelConfig(botorch_model_class=model_class, model_options=options), num_sobol=num_sobol
    )
    _run(client, num_sobol + NUM_BOTORCH)

    # One fit per BoTorch trial, on all the data so far, with the model options.
    assert [n for _, n in fits] == list(range(num_sobol, num_sobol + NUM_BOTORCH))
    for model, _ in fits:
        assert type(model) is model_class
        assert model.is_fitted
        assert model.hyperparameters.epochs == options["epochs"]
    if model_class is NOMU:
        # The search space's box, not the training points' bounding box.
        expected = torch.tensor([[-1.0, -1.0], [2.0, 2.0]], dtype=torch.float64)
        assert all(torch.equal(model.bounds, expected) for model, _ in fits)

    prediction = client.predict([{"x0": 0.2, "x1": 0.1}])[0]
    assert np.isfinite(prediction["y"]).all()
    parameters, _, _, _ = client.get_best_parameterization()
    assert set(parameters) == {"x0", "x1"}


@allow_single_member_warning
@pytest.mark.filterwarnings("ignore:divide by zero encountered in divide:RuntimeWarning:scipy")
@pytest.mark.parametrize("model_class", FAMILY_CLASSES, ids=lambda cls: cls.__name__)
def test_a_client_loop_with_a_torch_device_trains_and_proposes_there(
    model_class, device, fits
) -> None:
    r"""Ax's ``torch_device`` puts the training data, hence the model, on that device
    (the CUDA case is the Ax path's GPU check)."""
    options = MODEL_OPTIONS[model_class]
    num_sobol = max(NUM_SOBOL, model_class.min_training_points + 1)
    client = _client(
        ModelConfig(botorch_model_class=model_class, model_options=options),
        num_sobol=num_sobol,
        torch_device=device,
    )
    parameters = _run(client, num_sobol + NUM_BOTORCH)

    assert len(fits) == NUM_BOTORCH
    for model, _ in fits:
        assert model.train_X.device.type == device.type
        assert all(parameter.device.type == device.type for parameter in model.parameters())
    assert all(-1.0 <= value <= 2.0 for point in parameters for value in point.values())
    prediction = client.predict([{"x0": 0.2, "x1": 0.1}])[0]
    assert np.isfinite(prediction["y"]).all()


# Ax advises objective thresholds for multi-objective runs; this one leaves them to Ax.
@pytest.mark.filterwarnings(
    "ignore:Encountered a `MultiObjective` without objective thresholds"
    ":ax.exceptions.core.AxOptimizationWarning"
)
def test_a_multi_objective_client_loop_trains_a_model_per_objective(fits) -> None:
    options = MODEL_OPTIONS[DeepEnsemble]
    client = _client(
        ModelConfig(botorch_model_class=DeepEnsemble, model_options=options), objective="-y, -z"
    )
    _run(client, NUM_SOBOL + NUM_BOTORCH, metrics="yz")

    sizes = [n for _, n in fits]
    assert sizes == [n for n in range(NUM_SOBOL, NUM_SOBOL + NUM_BOTORCH) for _ in "yz"]
    assert all(model.num_outputs == 1 for model, _ in fits)
    frontier = client.get_pareto_frontier()
    assert frontier and all(set(outcomes) == {"y", "z"} for _, outcomes, _, _ in frontier)

    # Cross-validation trains both objectives' models of every fold on the fold's points.
    fits.clear()
    num_points = NUM_SOBOL + NUM_BOTORCH  # get_pareto_frontier fitted them to all trials
    cross_validate(client._generation_strategy.adapter)
    assert [n for _, n in fits] == [num_points - 1] * (2 * num_points)


def test_a_seeded_client_proposes_the_same_trials() -> None:
    config = ModelConfig(
        botorch_model_class=DeepEnsemble, model_options=MODEL_OPTIONS[DeepEnsemble]
    )
    first, second = (_run(_client(config), NUM_SOBOL + NUM_BOTORCH) for _ in range(2))
    assert first == second


def _cross_validated_fold_sizes(fits, **model_options: Any) -> tuple[list[int], int]:
    options = {**MODEL_OPTIONS[DeepEnsemble], **model_options}
    client = _client(ModelConfig(botorch_model_class=DeepEnsemble, model_options=options))
    _run(client, NUM_SOBOL + 1)
    fits.clear()
    results = cross_validate(client._generation_strategy.adapter)
    return [n for _, n in fits], len(results)


def test_cross_validation_trains_every_fold_without_its_held_out_point(fits) -> None:
    sizes, num_folds = _cross_validated_fold_sizes(fits)
    # Ax's default refit_on_cv=False loads the all-data model into each fold's model,
    # which then trains on the fold's points.
    assert num_folds == NUM_SOBOL
    assert sizes == [NUM_SOBOL - 1] * NUM_SOBOL


def test_cross_validation_reuses_the_all_data_model_only_if_asked(fits) -> None:
    sizes, num_folds = _cross_validated_fold_sizes(fits, refit_on_load=False)
    assert num_folds == NUM_SOBOL
    assert sizes == []


def test_cross_validation_with_refit_on_cv_trains_each_fold_once(fits) -> None:
    options = MODEL_OPTIONS[DeepEnsemble]
    for warm_start_refit in (True, False):
        client = _client(
            ModelConfig(botorch_model_class=DeepEnsemble, model_options=options),
            refit_on_cv=True,
            warm_start_refit=warm_start_refit,
        )
        _run(client, NUM_SOBOL + 1)
        fits.clear()
        cross_validate(client._generation_strategy.adapter)
        assert [n for _, n in fits] == [NUM_SOBOL - 1] * NUM_SOBOL


def _botorch_generator(client: Client) -> Any:
    return client._generation_strategy._curr.generator_specs[0].fitted_adapter.generator


@pytest.mark.parametrize("model_class", FAMILY_CLASSES, ids=lambda cls: cls.__name__)
def test_ax_model_selection_scores_the_models_next_to_a_gp(model_class, fits) -> None:
    r"""With several ``model_configs``, Ax selects a model per outcome by leave-one-out
    cross-validation, which reads each fold's posterior mean and variance."""
    configs = [
        ModelConfig(botorch_model_class=SingleTaskGP, name="gp"),
        ModelConfig(
            botorch_model_class=model_class, model_options=MODEL_OPTIONS[model_class], name="nn"
        ),
    ]
    num_sobol = NUM_SOBOL + 1
    client = _client(configs, num_sobol=num_sobol)
    _run(client, num_sobol + 1)

    surrogate = _botorch_generator(client).surrogate
    scores = surrogate._model_name_to_eval["y"]
    assert set(scores) == {"gp", "nn"} and all(np.isfinite(list(scores.values())))
    # The all-data fit, then one fit per fold without the fold's point.
    assert [n for _, n in fits] == [num_sobol] + [num_sobol - 1] * num_sobol
    # Ax's default criterion, rank correlation, is maximised.
    models = surrogate._model_name_to_model["y"]
    chosen = [name for name, model in models.items() if model is surrogate.model]
    assert len(chosen) == 1 and scores[chosen[0]] == max(scores.values())
    assert not isinstance(surrogate.model, GaussianMomentsModel)


def test_gaussian_moments_model_serves_the_moments_of_the_model() -> None:
    X = torch.rand(6, 2, dtype=torch.float64)
    Y = (X**2).sum(-1, keepdim=True)
    model = DeepEnsemble(X, Y, **MODEL_OPTIONS[DeepEnsemble]).fit(seed=0)
    gaussian = GaussianMomentsModel(model)
    assert gaussian.num_outputs == 1
    test_X = torch.rand(3, 4, 2, dtype=torch.float64)
    for noise in (False, True):
        expected = model.posterior(test_X, observation_noise=noise)
        posterior = gaussian.posterior(test_X, observation_noise=noise)
        assert posterior.mean.shape == (3, 4, 1)
        torch.testing.assert_close(posterior.mean, expected.mean)
        torch.testing.assert_close(posterior.variance, expected.variance)
        assert not isinstance(expected, type(posterior))


@allow_single_member_warning
@pytest.mark.parametrize("model_class", list(MODEL_OPTIONS), ids=lambda cls: cls.__name__)
def test_a_json_snapshot_saves_loads_and_runs_more_trials(model_class, tmp_path) -> None:
    config = ModelConfig(botorch_model_class=model_class, model_options=MODEL_OPTIONS[model_class])
    client = _client(config, num_sobol=4)  # the searched ensembles need four points
    _run(client, 5)
    path = tmp_path / "snapshot.json"
    client.save_to_json_file(str(path))
    loaded = Client.load_from_json_file(str(path))
    _run(loaded, 1)
    assert len(loaded.summarize()) == 6
    # A second snapshot over the first replaces it.
    loaded.save_to_json_file(str(path))
    assert len(Client.load_from_json_file(str(path)).summarize()) == 6


def _run_with_standard_errors(client: Client, num_trials: int, sem: float) -> None:
    r"""Run ``num_trials`` trials, reporting ``y`` with the known standard error ``sem``."""
    for _ in range(num_trials):
        for index, point in client.get_next_trials(max_trials=1).items():
            client.complete_trial(index, raw_data={"y": (_outcomes(point, "y")["y"], sem)})


@pytest.mark.parametrize("model_class", FAMILY_CLASSES, ids=lambda cls: cls.__name__)
def test_known_standard_errors_reach_every_model_as_train_Yvar(model_class, fits) -> None:
    r"""Ax passes known standard errors on as ``Yvar``, which a GP takes as fixed noise and
    the package's models as ``train_Yvar``: in the all-data fit and in every fold of the
    model selection's cross-validation."""
    configs = [
        ModelConfig(botorch_model_class=SingleTaskGP, name="gp"),
        ModelConfig(
            botorch_model_class=model_class, model_options=MODEL_OPTIONS[model_class], name="nn"
        ),
    ]
    num_sobol = NUM_SOBOL + 1
    client = _client(configs, num_sobol=num_sobol)
    _run_with_standard_errors(client, num_sobol + 1, sem=0.1)

    surrogate = _botorch_generator(client).surrogate
    models = surrogate._model_name_to_model["y"]
    assert isinstance(models["gp"].likelihood, FixedNoiseGaussianLikelihood)
    assert [n for _, n in fits] == [num_sobol] + [num_sobol - 1] * num_sobol
    for model, n in fits:
        assert model.has_known_noise and model.train_Yvar.shape == (n, 1)
    # Ax standardises the outcomes and their variances alike: the GP and the model hold
    # the same transformed noise.
    torch.testing.assert_close(
        models["nn"].transformed_train_Yvar.squeeze(-1), models["gp"].likelihood.noise
    )
    prediction = client.predict([{"x0": 0.2, "x1": 0.1}])[0]
    assert np.isfinite(prediction["y"]).all()


def test_a_searched_ensemble_takes_known_standard_errors_as_train_Yvar(fits) -> None:
    options = MODEL_OPTIONS[NESRandomSearch]
    num_sobol = max(NUM_SOBOL, NESRandomSearch.min_training_points + 1)
    client = _client(
        ModelConfig(botorch_model_class=NESRandomSearch, model_options=options),
        num_sobol=num_sobol,
    )
    _run_with_standard_errors(client, num_sobol, sem=0.1)
    client.get_next_trials(max_trials=1)
    assert fits and all(model.has_known_noise for model, _ in fits)
    for model, n in fits:
        assert model.train_Yvar.shape == (n, 1)
