"""The lunar lander: the 12-constant controller is gymnasium's heuristic at the default
constants, its value is the mean episode reward over the fixed seeds, deterministic, and
the registry's reference extrema."""

from __future__ import annotations

import importlib
from types import ModuleType

import numpy as np
import pytest
import torch

from botorch_nn_uq.problems import LunarLander, get_bo_problem
from botorch_nn_uq.problems.lunar import DEFAULT_HEURISTIC_WEIGHTS, heuristic_action

pytest.importorskip("gymnasium", reason="the lunar lander needs the lunar extra (gymnasium)")


@pytest.fixture(scope="module")
def gymnasium_lander() -> ModuleType:
    r"""gymnasium's lunar lander module, imported after a LunarLander has imported Box2D
    (whose import warnings, errors under the test suite's filters, it silences)."""
    LunarLander(episode_seeds=(0,))
    return importlib.import_module("gymnasium.envs.box2d.lunar_lander")


DEFAULT = torch.tensor([DEFAULT_HEURISTIC_WEIGHTS], dtype=torch.float64)


def test_the_default_constants_act_as_gymnasiums_heuristic(gymnasium_lander) -> None:
    lander = LunarLander()
    weights = np.asarray(DEFAULT_HEURISTIC_WEIGHTS)
    environment = lander.environment
    for seed in range(3):
        state, _ = environment.reset(seed=seed)
        done = False
        while not done:
            action = gymnasium_lander.heuristic(environment.unwrapped, state)
            assert heuristic_action(state, weights) == action
            state, _, terminated, truncated, _ = environment.step(action)
            done = terminated or truncated


def test_the_value_is_minus_the_mean_reward_over_the_seeds(gymnasium_lander) -> None:
    lander = LunarLander(episode_seeds=(0, 1, 2))
    environment = lander.environment.unwrapped
    rewards = [gymnasium_lander.demo_heuristic_lander(environment, seed=s) for s in range(3)]
    assert lander(DEFAULT).item() == pytest.approx(-np.mean(rewards), rel=1e-12)
    # Measured on the ten default seeds: the heuristic lands every time.
    assert LunarLander()(DEFAULT).item() == pytest.approx(-265.417, abs=1e-3)


def test_values_are_deterministic_and_batches_keep_their_shape() -> None:
    lander = LunarLander(episode_seeds=(5, 6))
    X = 2 * torch.rand(2, 2, 12, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    values = lander(X)
    assert values.shape == (2, 2)
    assert torch.equal(values, LunarLander(episode_seeds=(5, 6))(X))
    assert not torch.equal(values, LunarLander(episode_seeds=(7, 8))(X))
    with pytest.raises(ValueError, match="at least one episode seed"):
        LunarLander(episode_seeds=())


def test_the_registry_measures_regret_from_the_heuristic() -> None:
    problem = get_bo_problem("lunar-lander", 12)
    assert problem.dim == 12 and not problem.optimum_known
    assert problem.min_value == pytest.approx(-265.417, abs=1e-3)
    assert problem.normalized_regret(problem.min_value) == 0.0
    assert problem.evaluate(problem.maximizer.unsqueeze(0)).item() == problem.max_value
    assert problem.max_value > problem.min_value
    torch.testing.assert_close(problem.bounds, torch.tensor([[0.0] * 12, [2.0] * 12]).double())
