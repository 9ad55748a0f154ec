r"""The rover trajectory problem of Wang et al. (AISTATS 2018), 60-D, as in TuRBO's paper.

A rover drives from ``start = (0.05, 0.05)`` to ``goal = (0.95, 0.95)`` through a forest
of 113 square trees in the unit square. The 60 inputs are 30 control points ``(x, y)`` in
``[-0.1, 1.1]^2`` (each coordinate scaled from ``[0, 1]``); the trajectory is the cubic
B-spline that FITPACK's ``splprep`` fits to them with its default smoothing
(``s = m - sqrt(2 m)`` for ``m = 30`` points, so most trajectories are a single cubic
curve). Its cost is the integral along the trajectory of ``0.05`` plus ``20`` wherever
the rover is inside a tree or outside the unit square (the trapezoidal rule on 1,000
points evenly spaced in the spline's parameter), plus ``10`` times the L1 distance from
the trajectory's first point to ``start`` and from its last point to ``goal``. The reward
is ``5 - cost``, so the best reward is about 5; this module minimises ``f = cost - 5``.

The published code adds fresh ``N(0, 1e-4)`` noise to the inputs at every call (it keeps
FITPACK away from repeated control points); here one draw of that noise, from
``jitter_seed``, is added at every call, so the function is deterministic.
"""

from __future__ import annotations

import numpy as np
import torch
from botorch.test_functions.synthetic import SyntheticTestFunction
from scipy.interpolate import splev, splprep
from torch import Tensor

#: Centres of the 113 trees (side 0.05) of the large rover domain (Wang et al., 2018).
TREE_CENTRES = (
    (0.43143755, 0.20876147), (0.38485367, 0.39183579), (0.02985961, 0.22328303),
    (0.7803707, 0.3447003), (0.93685657, 0.56297285), (0.04194252, 0.23598362),
    (0.28049582, 0.40984475), (0.6756053, 0.70939481), (0.01926493, 0.86972335),
    (0.5993437, 0.63347932), (0.57807619, 0.40180792), (0.56824287, 0.75486851),
    (0.35403502, 0.38591056), (0.72492026, 0.59969313), (0.27618746, 0.64322757),
    (0.54029566, 0.25492943), (0.30903526, 0.60166842), (0.2913432, 0.29636879),
    (0.78512072, 0.62340245), (0.29592116, 0.08400595), (0.87548394, 0.04877622),
    (0.21714791, 0.9607346), (0.92624074, 0.53441687), (0.53639253, 0.45127928),
    (0.99892031, 0.79537837), (0.84621631, 0.41891986), (0.39432819, 0.06768617),
    (0.92365693, 0.72217512), (0.95520914, 0.73956575), (0.820383, 0.53880139),
    (0.22378049, 0.9971974), (0.34023233, 0.91014706), (0.64960636, 0.35661133),
    (0.29976464, 0.33578931), (0.43202238, 0.11563227), (0.66764947, 0.52086962),
    (0.45431078, 0.94582745), (0.12819915, 0.33555344), (0.19287232, 0.8112075),
    (0.61214791, 0.71940626), (0.4522542, 0.47352186), (0.95623345, 0.74174186),
    (0.17340293, 0.89136853), (0.04600255, 0.53040724), (0.42493468, 0.41006649),
    (0.37631485, 0.88033853), (0.66951947, 0.29905739), (0.4151516, 0.77308712),
    (0.55762991, 0.26400156), (0.6280609, 0.53201974), (0.92727447, 0.61054975),
    (0.93206587, 0.42107549), (0.63885574, 0.37540613), (0.15303425, 0.57377797),
    (0.8208471, 0.16566631), (0.14889043, 0.35157346), (0.71724622, 0.57110725),
    (0.32866327, 0.8929578), (0.74435871, 0.47464421), (0.9252026, 0.21034329),
    (0.57039306, 0.54356078), (0.56611551, 0.02531317), (0.84830056, 0.01180542),
    (0.51282028, 0.73916524), (0.58795481, 0.46527371), (0.83259048, 0.98598188),
    (0.00242488, 0.83734691), (0.72505789, 0.04846931), (0.07312971, 0.30147979),
    (0.55250344, 0.23891255), (0.51161315, 0.46466442), (0.802125, 0.93440495),
    (0.9157825, 0.32441602), (0.44927665, 0.53380074), (0.67708372, 0.67527231),
    (0.81868924, 0.88356194), (0.48228814, 0.88668497), (0.39805433, 0.99341196),
    (0.86671752, 0.79016975), (0.01115417, 0.6924913), (0.34272199, 0.89543756),
    (0.40721675, 0.86164495), (0.26317679, 0.37334193), (0.74446787, 0.84782643),
    (0.55560143, 0.46405104), (0.73567977, 0.12776233), (0.28080322, 0.26036748),
    (0.17507419, 0.95540673), (0.54233783, 0.1196808), (0.76670967, 0.88396285),
    (0.61297539, 0.79057776), (0.9344029, 0.86252764), (0.48746839, 0.74942784),
    (0.18657635, 0.58127321), (0.10377802, 0.71463978), (0.7771771, 0.01463505),
    (0.7635042, 0.45498358), (0.83345861, 0.34749363), (0.38273809, 0.51890558),
    (0.33887574, 0.82842507), (0.02073685, 0.41776737), (0.68754547, 0.96430979),
    (0.4704215, 0.92717361), (0.72666234, 0.63241306), (0.48494401, 0.72003268),
    (0.52601215, 0.81641253), (0.71426732, 0.47077212), (0.00258906, 0.30377501),
    (0.35495269, 0.98585155), (0.65507544, 0.03458909), (0.10550588, 0.62032937),
    (0.60259145, 0.87110846), (0.04959159, 0.535785),
)  # fmt: skip
TREE_HALF_SIDE = 0.025
START = (0.05, 0.05)
GOAL = (0.95, 0.95)
#: Cost per unit length inside a tree or outside the unit square, and everywhere.
COLLISION_COST = 20.0
TRAVEL_COST = 0.05
#: Cost per unit of L1 distance between the trajectory's ends and the start and goal.
MISS_COST = 10.0
REWARD_OFFSET = 5.0
#: The control points' box ``[-0.1, 1.1]^2`` that the unit-cube inputs are scaled to.
CONTROL_LOWER, CONTROL_UPPER = -0.1, 1.1
NUM_CONTROL_POINTS = 30
NUM_TRAJECTORY_POINTS = 1000
JITTER_STD = 1e-4


def trajectory_cost(points: np.ndarray) -> float:
    r"""The cost of a trajectory given by ``n x 2`` points evenly spaced in its parameter:
    the trapezoidal integral of the cost rate along it plus the start and goal misses."""
    trees = np.asarray(TREE_CENTRES)
    inside_tree = (
        (
            (points[:, None, :] >= trees - TREE_HALF_SIDE)
            & (points[:, None, :] < trees + TREE_HALF_SIDE)
        )
        .all(-1)
        .any(-1)
    )
    outside_square = ~((points >= 0.0) & (points < 1.0)).all(-1)
    rate = TRAVEL_COST + COLLISION_COST * (inside_tree | outside_square)
    lengths = np.linalg.norm(np.diff(points, axis=0), axis=-1)
    integral = float(np.sum(lengths * 0.5 * (rate[:-1] + rate[1:])))
    start_miss = np.abs(points[0] - np.asarray(START)).sum()
    goal_miss = np.abs(points[-1] - np.asarray(GOAL)).sum()
    return integral + MISS_COST * float(start_miss + goal_miss)


class RoverTrajectory(SyntheticTestFunction):
    r"""The rover trajectory cost minus 5 (the negated reward) on ``[0, 1]^60``, minimised.

    See the module docstring for the definition. The smallest value is above ``-5``
    (a trajectory has length at least ``0.9 sqrt(2)``, which costs ``0.064``); the
    minimiser is not known.

    Args:
        jitter_seed: Seeds the one draw of the ``N(0, 1e-4)`` input noise added at every
            call (see the module docstring).
        dtype: The dtype of the bounds.

    Example:
        >>> rover = RoverTrajectory()
        >>> rover(torch.rand(4, 60, dtype=torch.double))  # 4 values, cost - 5
    """

    dim = 2 * NUM_CONTROL_POINTS
    continuous_inds = list(range(dim))
    _bounds = [(0.0, 1.0)] * dim

    def __init__(self, jitter_seed: int = 0, dtype: torch.dtype = torch.double) -> None:
        super().__init__(dtype=dtype)
        self.jitter = np.random.default_rng(jitter_seed).normal(0.0, JITTER_STD, self.dim)

    def control_points(self, x: np.ndarray) -> np.ndarray:
        r"""The ``30 x 2`` control points of one input ``x`` (a ``60`` array in the unit
        cube), noise included."""
        scaled = CONTROL_LOWER + (CONTROL_UPPER - CONTROL_LOWER) * x + self.jitter
        return scaled.reshape(NUM_CONTROL_POINTS, 2)

    def trajectory(self, x: np.ndarray) -> np.ndarray:
        r"""The ``1000 x 2`` points of the trajectory of one input ``x`` (a ``60`` array)."""
        spline, _ = splprep(self.control_points(x).T, k=3)
        return np.stack(splev(np.linspace(0.0, 1.0, NUM_TRAJECTORY_POINTS), spline), axis=-1)

    def _evaluate_true(self, X: Tensor) -> Tensor:
        r"""``cost - 5`` of every trajectory of ``X`` (``batch_shape x 60``); returns
        ``batch_shape``. FITPACK fits one spline at a time, so this loops over points."""
        flat = X.detach().reshape(-1, self.dim).cpu().double().numpy()
        costs = [trajectory_cost(self.trajectory(x)) - REWARD_OFFSET for x in flat]
        return torch.tensor(costs, dtype=X.dtype, device=X.device).reshape(X.shape[:-1])
