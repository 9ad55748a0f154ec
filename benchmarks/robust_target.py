"""Protocol 4 (robust target-value optimisation): robust noncentral-χ² EI / LCB versus
the non-robust baselines on Experiments 1 and 2 of Hoffer, Ranftl & Geiger.

Goal: find ``x`` minimising ``E(x) = (m(x) − y•)² + σ_a²(x)`` with target ``y• = 0``.

- Experiment 1 (output noise): ``y = sin(x) + η``, ``x ∈ [−π/2, π/2]``,
  ``η ~ N(0, σ_a²)``, ``σ_a ∈ {0.01, 0.1, 0.5}``; ``E(x) = sin²(x) + σ_a²``.
- Experiment 2 (input noise): ``y = f(x + η)``, ``η ~ N(0, σ_u²)``,
  ``f(x) = 50(x − 2)³ − 1/((x − 3)² + 0.01) + 2x − 3.5`` on ``[1.8, 2.5]``,
  ``σ_u ∈ {0.05, 0.075}·Δ`` (``Δ = 0.7``); ``m`` and ``σ_a²`` of the metric by
  Gauss–Hermite quadrature. The robust optimum lies left of the root ``x ≈ 2.2448``.

Methods (each a ``SingleTaskGP`` with ``Normalize`` / ``Standardize``, RBF kernel,
refitted every iteration; acquisitions maximised over a 100-point grid without
re-evaluating grid points, ties broken at random):

- ``robust-ei`` / ``robust-lcb``: GP on noise-free observations of the mean (fixed
  noise 1e-10), ``σ_a²`` known (Exp. 1) or estimated by first-order propagation of the
  input noise through the GP mean (Exp. 2), robust EI / LCB (quantile 0.1).
- ``nc-ei`` / ``nc-lcb`` (``σ_a := 0``, Uhrenholt & Jensen): Exp. 1 trains on noisy
  observations with fixed noise ``σ_a²`` and takes ``E_min`` from the posterior mean;
  Exp. 2 uses the noise-free GP and ignores the aleatoric variance.
- ``naive-ei`` / ``naive-lcb``: the noise-free GP with the aleatoric variance added to
  the epistemic one (predictive ``N(μ, σ_e² + σ_a²)``) and no offset.
- ``random``: uniformly random grid points.

Each method is a configuration of the BO core: a ``BayesianOptimizer`` with the
``HitTarget(0)`` objective (the GP models ``-y``), the method's GP as its surrogate and a
``CandidateSetProposer`` over the grid; ties are broken from the run's random stream, and
the noise of the observations is drawn from the repetition's own stream.

All methods share the two random initial points of a repetition. The metric is
``E_min`` = min over evaluated points of the true ``E(x_i)``.

Writes ``runs.csv`` (one row per method, repetition and iteration), ``summary.md``
(mean ± standard error of ``E_min`` after 5, 10 and 20 iterations, and seconds per
iteration) and ``e_min.png`` into ``--out``.

Examples:
    python -m benchmarks.robust_target --repetitions 20 --iterations 20
    python -m benchmarks.robust_target --smoke
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
import warnings
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import gpytorch
import numpy as np
import torch
from botorch.acquisition import AcquisitionFunction
from botorch.exceptions.errors import ModelFittingError
from botorch.exceptions.warnings import OptimizationWarning
from botorch.fit import fit_gpytorch_mll
from botorch.models import SingleTaskGP
from botorch.models.model import Model
from botorch.models.transforms import Normalize, Standardize
from botorch.posteriors import GPyTorchPosterior
from gpytorch.distributions import MultivariateNormal
from gpytorch.mlls import ExactMarginalLogLikelihood
from gpytorch.utils.warnings import NumericalWarning
from torch import Tensor

from benchmarks.common import (
    add_device_option,
    draw_band,
    mean_and_standard_error,
    pyplot,
    runner_parser,
    save_figure,
    use_threads,
)
from botorch_nn_uq.acquisition import (
    AleatoricVariance,
    RobustTargetExpectedImprovement,
    RobustTargetLowerConfidenceBound,
    compute_e_min,
    first_order_input_noise_variance,
)
from botorch_nn_uq.bo import (
    AcquisitionContext,
    BayesianOptimizer,
    CandidateSetProposer,
    HitTarget,
    SurrogateSpec,
    write_rows_csv,
)

DTYPE = torch.float64
TARGET = 0.0
GRID_SIZE = 100
INITIAL_POINTS = 2
NOISE_FREE_VARIANCE = 1e-10
MAX_NOISE_FREE_VARIANCE = 1e-6
LCB_QUANTILE = 0.1
MILESTONES = (5, 10, 20)
METHODS = ("robust-ei", "robust-lcb", "nc-ei", "nc-lcb", "naive-ei", "naive-lcb", "random")
EXPERIMENT_1_NOISE = (0.01, 0.1, 0.5)
EXPERIMENT_2_DOMAIN = (1.8, 2.5)
EXPERIMENT_2_RELATIVE_NOISE = (0.05, 0.075)
_HERMITE_NODES, _HERMITE_WEIGHTS = np.polynomial.hermite_e.hermegauss(80)


class TargetProblem:
    r"""A one-dimensional stochastic black box with a target value of 0."""

    experiment: str
    setting: str
    bounds: Tensor
    #: Whether the non-robust ``σ_a := 0`` baseline is trained on noisy observations.
    baseline_observes_noise: bool
    #: The (fixed) noise variance of those noisy observations.
    observation_noise_variance: float = 0.0

    def observe(self, X: Tensor, noisy: bool, generator: torch.Generator) -> Tensor:
        r"""Observations ``n x 1`` at ``X`` (``n x 1``): of the mean, or noisy outputs."""
        raise NotImplementedError

    def expected_squared_error(self, X: Tensor) -> Tensor:
        r"""The true ``E(x)`` at ``X`` (``n x 1``), shape ``n``."""
        raise NotImplementedError

    def aleatoric_variance(self, model: Model) -> AleatoricVariance:
        r"""The aleatoric variance the robust methods use (known or estimated)."""
        raise NotImplementedError


class OutputNoiseProblem(TargetProblem):
    r"""Experiment 1: ``y = sin(x) + η``, ``η ~ N(0, σ_a²)``, on ``[−π/2, π/2]``."""

    experiment = "Exp. 1"
    baseline_observes_noise = True

    def __init__(self, noise_std: float) -> None:
        self.noise_std = noise_std
        self.observation_noise_variance = noise_std**2
        self.setting = f"σ_a = {noise_std}"
        self.bounds = torch.tensor([[-math.pi / 2], [math.pi / 2]], dtype=DTYPE)

    def observe(self, X: Tensor, noisy: bool, generator: torch.Generator) -> Tensor:
        Y = torch.sin(X)
        if noisy:
            noise = torch.randn(Y.shape, generator=generator, dtype=DTYPE).to(Y)
            Y = Y + self.noise_std * noise
        return Y

    def expected_squared_error(self, X: Tensor) -> Tensor:
        return (torch.sin(X) - TARGET).square().squeeze(-1) + self.noise_std**2

    def aleatoric_variance(self, model: Model) -> AleatoricVariance:
        return self.noise_std**2


def steep_test_function(X: Tensor) -> Tensor:
    r"""``f(x) = 50(x − 2)³ − 1/((x − 3)² + 0.01) + 2x − 3.5`` (flat near a steep root)."""
    return 50 * (X - 2) ** 3 - 1 / ((X - 3).square() + 0.01) + 2 * X - 3.5


class InputNoiseProblem(TargetProblem):
    r"""Experiment 2: ``y = f(x + η)``, ``η ~ N(0, σ_u²)``, on ``[1.8, 2.5]``."""

    experiment = "Exp. 2"
    baseline_observes_noise = False

    def __init__(self, relative_noise: float) -> None:
        lower, upper = EXPERIMENT_2_DOMAIN
        self.input_std = relative_noise * (upper - lower)
        self.setting = f"σ_u = {relative_noise}·Δ"
        self.bounds = torch.tensor([[lower], [upper]], dtype=DTYPE)

    def observe(self, X: Tensor, noisy: bool, generator: torch.Generator) -> Tensor:
        return steep_test_function(X)

    def expected_squared_error(self, X: Tensor) -> Tensor:
        nodes = torch.as_tensor(_HERMITE_NODES, dtype=DTYPE, device=X.device)
        weights = torch.as_tensor(
            _HERMITE_WEIGHTS / _HERMITE_WEIGHTS.sum(), dtype=DTYPE, device=X.device
        )
        outputs = steep_test_function(X + self.input_std * nodes)  # n x nodes
        mean = outputs @ weights
        variance = (outputs - mean.unsqueeze(-1)).square() @ weights
        return (mean - TARGET).square() + variance

    def aleatoric_variance(self, model: Model) -> AleatoricVariance:
        return first_order_input_noise_variance(model, self.input_std**2)


class EpistemicPlusAleatoricModel(Model):
    r"""The naive baseline's predictive ``N(μ, σ_e² + σ_a²)`` (aleatoric treated as epistemic)."""

    def __init__(self, model: Model, aleatoric_variance: AleatoricVariance) -> None:
        super().__init__()
        self.model = model
        self.aleatoric_variance = aleatoric_variance

    @property
    def num_outputs(self) -> int:
        return 1

    def posterior(self, X: Tensor, *args, **kwargs) -> GPyTorchPosterior:
        posterior = self.model.posterior(X)
        variance = self.aleatoric_variance
        if callable(variance):
            variance = variance(X)
        total = posterior.variance.squeeze(-1) + variance
        return GPyTorchPosterior(
            MultivariateNormal(posterior.mean.squeeze(-1), torch.diag_embed(total))
        )


def fit_gp(train_X: Tensor, train_Y: Tensor, noise_variance: float, bounds: Tensor) -> SingleTaskGP:
    r"""A GP with fixed observation noise and fitted RBF hyperparameters.

    With (nearly) noise-free data the kernel matrix can be numerically singular for
    every hyperparameter the fit tries; the noise is then raised a hundredfold, up to
    ``MAX_NOISE_FREE_VARIANCE``, until the fit succeeds.
    """
    while True:
        with gpytorch.settings.min_fixed_noise(double_value=NOISE_FREE_VARIANCE / 100):
            model = SingleTaskGP(
                train_X,
                train_Y,
                train_Yvar=torch.full_like(train_Y, noise_variance),
                input_transform=Normalize(1, bounds=bounds),
                outcome_transform=Standardize(1),
            )
        try:
            fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
        except ModelFittingError:
            if noise_variance >= MAX_NOISE_FREE_VARIANCE:
                raise
            noise_variance *= 100
        else:
            return model


def uses_noisy_observations(method: str, problem: TargetProblem) -> bool:
    r"""Whether ``method`` observes noisy outputs (the ``σ_a := 0`` baseline of Exp. 1)."""
    return method.startswith("nc-") and problem.baseline_observes_noise


def target_gp(noise_variance: float) -> SurrogateSpec:
    r"""The methods' surrogate: :func:`fit_gp` with a fixed noise variance."""

    def build(train_X: Tensor, train_Y: Tensor, bounds: Tensor, seed: int) -> SingleTaskGP:
        return fit_gp(train_X, train_Y, noise_variance, bounds)

    return SurrogateSpec(
        f"gp-fixed-noise-{noise_variance:g}",
        f"SingleTaskGP (RBF) with fixed noise variance {noise_variance:g}",
        build,
    )


def acquisition_builder(
    method: str, problem: TargetProblem
) -> Callable[[Model, AcquisitionContext], AcquisitionFunction]:
    r"""``builder(model, context)``: the acquisition function of ``method`` on its
    fitted GP, in the model's units (the GP models ``-y`` and the target is ``-y•``;
    ``E`` is the same either way)."""
    noisy = uses_noisy_observations(method, problem)
    family, acquisition = method.split("-")

    def build(model: Model, context: AcquisitionContext) -> AcquisitionFunction:
        target, train_X, train_Y = context.options["target"], context.train_X, context.train_Y
        if family == "robust":
            aleatoric: AleatoricVariance = problem.aleatoric_variance(model)
            observed = aleatoric(train_X.unsqueeze(-2)) if callable(aleatoric) else aleatoric
            e_min = compute_e_min(train_Y, target, observed)
        elif family == "nc":
            aleatoric = 0.0
            if noisy:
                with torch.no_grad():
                    train_Y = model.posterior(train_X).mean
            e_min = compute_e_min(train_Y, target, 0.0)
        else:
            model = EpistemicPlusAleatoricModel(model, problem.aleatoric_variance(model))
            aleatoric = 0.0
            e_min = compute_e_min(train_Y, target, 0.0)
        if acquisition == "ei":
            return RobustTargetExpectedImprovement(model, target, e_min, aleatoric)
        return RobustTargetLowerConfidenceBound(model, target, aleatoric, quantile=LCB_QUANTILE)

    return build


class Observations:
    r"""A :class:`~botorch_nn_uq.bo.Problem`: what ``method`` observes of ``problem``
    (noisy outputs or the mean), the noise drawn from the repetition's own stream.

    Args:
        problem: The target problem.
        noisy: Whether the observations are noisy.
        repetition: Seeds the noise (``10_000 + repetition``).
    """

    objective = HitTarget(TARGET)

    def __init__(self, problem: TargetProblem, noisy: bool, repetition: int) -> None:
        self.name = f"{problem.experiment}, {problem.setting}"
        self.bounds = problem.bounds
        self.problem = problem
        self.noisy = noisy
        self.generator = torch.Generator().manual_seed(10_000 + repetition)

    def evaluate(self, X: Tensor) -> Tensor:
        return self.problem.observe(X, self.noisy, self.generator)


@dataclass(frozen=True)
class RunResult:
    r"""``E_min`` after each iteration (index 0: initial design) and the time per iteration."""

    e_min: list[float]
    seconds_per_iteration: float


def make_optimizer(
    problem: TargetProblem, method: str, repetition: int, device: str = "cpu"
) -> BayesianOptimizer:
    r"""``method`` as a BO configuration on ``device``: its GP and acquisition over the
    candidate grid (one point per step, never a grid point twice, ties broken from the
    run's random stream), ``INITIAL_POINTS`` uniform initial points seeded by the
    repetition."""
    grid = candidate_grid(problem, device)
    if method == "random":
        surrogate, proposer = None, CandidateSetProposer(grid)
    else:
        noisy = uses_noisy_observations(method, problem)
        noise_variance = problem.observation_noise_variance if noisy else NOISE_FREE_VARIANCE
        surrogate = target_gp(noise_variance)
        proposer = CandidateSetProposer(grid, acquisition_builder(method, problem))
    return BayesianOptimizer(
        problem.bounds.to(device),
        surrogate=surrogate,
        proposer=proposer,
        objective=HitTarget(TARGET),
        seed=repetition,
        n_initial=INITIAL_POINTS,
    )


def run(
    problem: TargetProblem, method: str, repetition: int, iterations: int, device: str = "cpu"
) -> RunResult:
    r"""One optimisation run on ``device``; the initial design and the observation noise
    depend only on the repetition (drawn on the CPU, the same on every device)."""
    optimizer = make_optimizer(problem, method, repetition, device)
    observations = Observations(problem, uses_noisy_observations(method, problem), repetition)
    start = time.perf_counter()
    optimizer.run(observations, steps=iterations)
    seconds = (time.perf_counter() - start) / iterations
    errors = problem.expected_squared_error(optimizer.X).cummin(0).values
    e_min = errors[INITIAL_POINTS - 1 :].tolist()
    return RunResult(e_min=e_min, seconds_per_iteration=seconds)


def candidate_grid(problem: TargetProblem, device: str = "cpu") -> Tensor:
    r"""The ``GRID_SIZE x 1`` equispaced candidates of the acquisition's grid search, on
    ``device``."""
    lower, upper = problem.bounds[0, 0].item(), problem.bounds[1, 0].item()
    return torch.linspace(lower, upper, GRID_SIZE, dtype=DTYPE, device=device).unsqueeze(-1)


def best_on_grid(problem: TargetProblem) -> float:
    r"""``min E`` over the candidate grid (what the metric converges to)."""
    return problem.expected_squared_error(candidate_grid(problem)).min().item()


def summary_table(
    problems: Sequence[TargetProblem],
    results: dict[tuple[str, str, str], list[RunResult]],
    milestones: Sequence[int],
) -> str:
    r"""Markdown tables of mean ± standard error of ``E_min`` at the milestones."""
    lines = []
    for problem in problems:
        lines += [
            f"**{problem.experiment}, {problem.setting}** "
            f"(best E on the grid: {best_on_grid(problem):.4g})",
            "",
            "| method | " + " | ".join(f"E_min after {t} it." for t in milestones) + " | s / it. |",
            "| --- |" + " --- |" * (len(milestones) + 1),
        ]
        for method in METHODS:
            runs = results[(problem.experiment, problem.setting, method)]
            cells = []
            for t in milestones:
                mean, error = mean_and_standard_error([r.e_min[t] for r in runs])
                cells.append(f"{mean:.4g} ± {error:.2g}")
            seconds = statistics.fmean(r.seconds_per_iteration for r in runs)
            lines.append(f"| {method} | " + " | ".join(cells) + f" | {seconds:.2f} |")
        lines.append("")
    return "\n".join(lines)


def write_runs_csv(path: Path, results: dict[tuple[str, str, str], list[RunResult]]) -> None:
    r"""One row per method, repetition and iteration: ``E_min`` and seconds per iteration."""
    write_rows_csv(
        [
            {
                "experiment": experiment,
                "setting": setting,
                "method": method,
                "repetition": repetition,
                "iteration": iteration,
                "e_min": f"{value:.8g}",
                "seconds_per_iteration": f"{result.seconds_per_iteration:.4f}",
            }
            for (experiment, setting, method), runs in results.items()
            for repetition, result in enumerate(runs)
            for iteration, value in enumerate(result.e_min)
        ],
        path,
    )


def plot_e_min(
    path: Path,
    problems: Sequence[TargetProblem],
    results: dict[tuple[str, str, str], list[RunResult]],
) -> None:
    r"""Mean ± standard error of ``E_min`` versus iteration, one panel per setting."""
    plt = pyplot()
    figure, axes = plt.subplots(1, len(problems), figsize=(4.2 * len(problems), 3.6), squeeze=False)
    for axis, problem in zip(axes[0], problems, strict=True):
        for method in METHODS:
            runs = torch.tensor(
                [r.e_min for r in results[(problem.experiment, problem.setting, method)]],
                dtype=DTYPE,
            )
            draw_band(axis, torch.arange(runs.shape[1]), runs, method)
        axis.axhline(best_on_grid(problem), color="black", linestyle=":", linewidth=1)
        axis.set_yscale("log")
        axis.set_title(f"{problem.experiment}, {problem.setting}")
        axis.set_xlabel("iteration")
        axis.set_ylabel("E_min")
    axes[0, -1].legend(fontsize="small")
    save_figure(figure, path, dpi=120)


def make_problems(smoke: bool) -> list[TargetProblem]:
    noise_levels = EXPERIMENT_1_NOISE[1:2] if smoke else EXPERIMENT_1_NOISE
    relative_noise = EXPERIMENT_2_RELATIVE_NOISE[:1] if smoke else EXPERIMENT_2_RELATIVE_NOISE
    return [OutputNoiseProblem(s) for s in noise_levels] + [
        InputNoiseProblem(s) for s in relative_noise
    ]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = runner_parser(
        __doc__,
        out=Path("benchmarks/results/robust_target"),
        smoke="one setting per experiment, 1 repetition, 2 iterations (a quick check)",
    )
    parser.add_argument("--repetitions", type=int, default=20)
    parser.add_argument("--iterations", type=int, default=20)
    add_device_option(parser)
    args = parser.parse_args(argv)
    if args.smoke:
        args.repetitions, args.iterations = 1, 2
    if args.repetitions < 1 or args.iterations < 1:
        parser.error("--repetitions and --iterations must be positive")
    return args


def main(argv: Sequence[str] | None = None) -> Path:
    r"""Run the benchmark; returns the output directory."""
    args = parse_args(argv)
    use_threads(args.threads)
    problems = make_problems(args.smoke)
    milestones = [t for t in MILESTONES if t <= args.iterations] or [args.iterations]
    results: dict[tuple[str, str, str], list[RunResult]] = defaultdict(list)
    with warnings.catch_warnings():
        # Near-duplicate inputs under 1e-10 noise make GPyTorch add Cholesky jitter, and
        # L-BFGS on such nearly singular likelihoods often stops "abnormally" at a good
        # point; neither affects the comparison.
        warnings.simplefilter("ignore", NumericalWarning)
        warnings.simplefilter("ignore", OptimizationWarning)
        for problem in problems:
            for method in METHODS:
                runs = results[(problem.experiment, problem.setting, method)]
                for repetition in range(args.repetitions):
                    runs.append(run(problem, method, repetition, args.iterations, args.device))
                final = statistics.fmean(r.e_min[-1] for r in runs)
                print(f"{problem.experiment}, {problem.setting}, {method}: {final:.4f}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    write_runs_csv(args.out / "runs.csv", results)
    table = summary_table(problems, results, milestones)
    (args.out / "summary.md").write_text(table)
    plot_e_min(args.out / "e_min.png", problems, results)
    print(table)
    return args.out


if __name__ == "__main__":
    main()
