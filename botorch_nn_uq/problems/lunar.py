r"""Lunar lander, 12-D (TuRBO's problem): tune the 12 constants of gymnasium's heuristic
controller for ``LunarLander-v3`` (discrete actions).

The controller of :func:`heuristic_action` is gymnasium's heuristic with its constants
made parameters ``w`` in ``[0, 2]^12``; ``DEFAULT_HEURISTIC_WEIGHTS`` are gymnasium's own
constants, a reference value to beat. The objective is the mean total reward of an
episode (at most 1,000 steps, the environment's time limit) over a fixed set of
environment seeds (the terrain and the lander's initial push), maximised; this module
minimises its negative. More seeds mean less noise from the landing conditions and a
proportionally higher cost: 10 seeds by default (TuRBO's paper used 50 random
instances), which evaluates a controller in about 0.1 to 0.4 CPU seconds.

Needs ``gymnasium`` with its ``box2d`` extra: ``pip install "botorch-nn-uq[lunar]"``.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import torch
from botorch.test_functions.synthetic import SyntheticTestFunction
from torch import Tensor

#: gymnasium's heuristic controller's constants, in the order of :func:`heuristic_action`.
DEFAULT_HEURISTIC_WEIGHTS = (0.5, 1.0, 0.4, 0.55, 0.5, 1.0, 0.5, 0.5, 0.0, 0.5, 0.05, 0.05)
ENVIRONMENT_ID = "LunarLander-v3"
DEFAULT_EPISODES = 10


def heuristic_action(state: np.ndarray, weights: np.ndarray) -> int:
    r"""The discrete action (0 noop, 1 left engine, 2 main engine, 3 right engine) of the
    heuristic controller with constants ``weights`` (12) in ``state`` (8: position,
    velocity, angle, angular velocity and the two legs' ground contacts).

    ``weights[0:3]`` set the target angle from the horizontal position and velocity and
    cap it, ``weights[3]`` the target height, ``weights[4:8]`` the gains on the angle and
    height errors, ``weights[8:10]`` the commands once a leg touches the ground and
    ``weights[10:12]`` the thresholds that fire the engines.
    """
    angle_target = np.clip(state[0] * weights[0] + state[2] * weights[1], -weights[2], weights[2])
    hover_target = weights[3] * abs(state[0])
    angle_todo = (angle_target - state[4]) * weights[4] - state[5] * weights[5]
    hover_todo = (hover_target - state[1]) * weights[6] - state[3] * weights[7]
    if state[6] or state[7]:
        angle_todo = weights[8]
        hover_todo = -state[3] * weights[9]
    if hover_todo > abs(angle_todo) and hover_todo > weights[10]:
        return 2
    if angle_todo < -weights[11]:
        return 3
    if angle_todo > weights[11]:
        return 1
    return 0


class LunarLander(SyntheticTestFunction):
    r"""Minus the mean episode reward of the 12-constant heuristic controller on
    ``[0, 2]^12`` (see the module docstring), minimised.

    Args:
        episode_seeds: The environment seeds the reward is averaged over (default
            ``0, ..., 9``).
        dtype: The dtype of the bounds.

    Raises:
        ImportError: If gymnasium (with box2d) is not installed.
        ValueError: If ``episode_seeds`` is empty.

    Example:
        >>> lander = LunarLander()
        >>> lander(torch.tensor([DEFAULT_HEURISTIC_WEIGHTS]))  # gymnasium's heuristic
    """

    dim = 12
    continuous_inds = list(range(12))
    _bounds = [(0.0, 2.0)] * 12

    def __init__(
        self,
        episode_seeds: Sequence[int] = tuple(range(DEFAULT_EPISODES)),
        dtype: torch.dtype = torch.double,
    ) -> None:
        try:
            # Box2D's SWIG bindings warn while their extension initialises; a warning
            # turned into an error there (python -W error) crashes the interpreter.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                import Box2D  # noqa: F401
            import gymnasium
        except ImportError as error:
            raise ImportError(
                'The lunar lander needs gymnasium with box2d: pip install "botorch-nn-uq[lunar]".'
            ) from error
        if len(episode_seeds) == 0:
            raise ValueError("LunarLander needs at least one episode seed.")
        super().__init__(dtype=dtype)
        self.episode_seeds = tuple(int(seed) for seed in episode_seeds)
        self.environment = gymnasium.make(ENVIRONMENT_ID)

    def episode_reward(self, weights: np.ndarray, seed: int) -> float:
        r"""The total reward of one episode of the controller ``weights`` (12) on the
        environment seeded with ``seed``."""
        state, _ = self.environment.reset(seed=seed)
        total = 0.0
        while True:
            state, reward, terminated, truncated, _ = self.environment.step(
                heuristic_action(state, weights)
            )
            total += float(reward)
            if terminated or truncated:
                return total

    def mean_reward(self, weights: np.ndarray) -> float:
        r"""The mean total reward of the controller ``weights`` (12) over the episode seeds."""
        return float(np.mean([self.episode_reward(weights, s) for s in self.episode_seeds]))

    def _evaluate_true(self, X: Tensor) -> Tensor:
        r"""Minus the mean reward of every controller of ``X`` (``batch_shape x 12``);
        returns ``batch_shape``. Episodes are sequential simulations, so this loops."""
        flat = X.detach().reshape(-1, self.dim).cpu().double().numpy()
        values = [-self.mean_reward(weights) for weights in flat]
        return torch.tensor(values, dtype=X.dtype, device=X.device).reshape(X.shape[:-1])
