"""How close ``condition_on_observations`` (a warm-started short refit) comes to a full
refit on the augmented data.

For each problem, model and replicate the script fits a model (seed 0) on ``n`` random
points, then conditions it on ``k`` new points (true function values) with every step
budget and learning rate asked for, and refits it from scratch on the ``n + k`` points
with seed 0 (the target) and seed 1. It reports the RMSE of posterior means on 256
uniform test points, divided by the standard deviation of the augmented targets:

- ``parent``: the model before conditioning, against the full refit (what conditioning
  has to close);
- ``conditioned``: the conditioned model against the full refit;
- ``floor``: the full refit with seed 1 against the one with seed 0 (two equally good
  fits differ by this much; no conditioning can be expected to come closer);

and the misfit at the new points (RMSE of the posterior mean against the new
observations, same scale) of the parent, the conditioned model and the full refit: how
much of the new information each holds. All are averaged over the replicates, with the
seconds of one conditioning and of one full refit.

Examples:
    python benchmarks/conditioning.py
    python benchmarks/conditioning.py --models deep-ensemble --steps 25 50 100 --replicates 10
    python benchmarks/conditioning.py --smoke
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from botorch.models.transforms import Normalize, Standardize
from botorch.test_functions import Branin, Hartmann
from common import runner_parser, use_threads, write_text

from botorch_nn_uq.models import DeepEnsemble, MCDropout

PROBLEMS: dict[str, Callable[[], object]] = {
    "branin-2d": lambda: Branin(),
    "hartmann-6d": lambda: Hartmann(dim=6),
}
MODELS: dict[str, tuple[type, dict]] = {
    "deep-ensemble": (DeepEnsemble, {}),
    "mc-dropout": (MCDropout, {}),
}


def relative_rmse(first: torch.Tensor, second: torch.Tensor, scale: torch.Tensor) -> float:
    return float((first - second).pow(2).mean().sqrt() / scale)


def replicate(
    problem_name: str,
    model_name: str,
    seed: int,
    num_points: int,
    num_new: int,
    budgets: Sequence[tuple[int, float | None]],
    hyperparameters: dict,
) -> dict[str, float]:
    r"""One replicate: the distances (and seconds) of one data set."""
    problem = PROBLEMS[problem_name]()
    bounds = problem.bounds.to(torch.float64)
    generator = torch.Generator().manual_seed(seed)
    dim = bounds.shape[-1]

    def draw(n: int) -> torch.Tensor:
        unit = torch.rand(n, dim, generator=generator, dtype=torch.float64)
        return bounds[0] + (bounds[1] - bounds[0]) * unit

    train_X, new_X, test_X = draw(num_points), draw(num_new), draw(256)
    train_Y, new_Y = problem(train_X).unsqueeze(-1), problem(new_X).unsqueeze(-1)
    model_class, defaults = MODELS[model_name]

    def fit(X: torch.Tensor, Y: torch.Tensor, fit_seed: int):
        model = model_class(
            X,
            Y,
            input_transform=Normalize(dim, bounds=bounds),
            outcome_transform=Standardize(1),
            **{**defaults, **hyperparameters},
        )
        return model.fit(seed=fit_seed)

    def mean(model, X: torch.Tensor = test_X) -> torch.Tensor:
        with torch.no_grad():
            return model.posterior(X.unsqueeze(-2)).mean.squeeze(-2)

    def misfit(model) -> float:
        return relative_rmse(mean(model, new_X), new_Y, scale)

    all_X, all_Y = torch.cat([train_X, new_X]), torch.cat([train_Y, new_Y])
    scale = all_Y.std()
    parent = fit(train_X, train_Y, 0)
    start = time.perf_counter()
    target = fit(all_X, all_Y, 0)
    result = {"refit seconds": time.perf_counter() - start}
    result["parent"] = relative_rmse(mean(parent), mean(target), scale)
    result["floor"] = relative_rmse(mean(fit(all_X, all_Y, 1)), mean(target), scale)
    result["parent misfit"], result["refit misfit"] = misfit(parent), misfit(target)
    for steps, learning_rate in budgets:
        start = time.perf_counter()
        conditioned = parent.condition_on_observations(
            new_X, new_Y, max_steps=steps, learning_rate=learning_rate
        )
        seconds = time.perf_counter() - start
        key = f"{steps} steps, lr {learning_rate or 'default'}"
        result[key] = relative_rmse(mean(conditioned), mean(target), scale)
        result[f"{key} misfit"] = misfit(conditioned)
        result[f"{key} seconds"] = seconds
    return result


def run(
    problems: Sequence[str],
    models: Sequence[str],
    replicates: int,
    num_points: int,
    new_points: Sequence[int],
    budgets: Sequence[tuple[int, float | None]],
    hyperparameters: dict,
) -> str:
    r"""Every combination; returns a markdown table."""
    lines = [
        "| problem | model | n + k | conditioning | parent | conditioned | floor "
        "| misfit: parent | conditioned | refit | conditioning (s) | full refit (s) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for problem in problems:
        for model in models:
            for num_new in new_points:
                results = [
                    replicate(problem, model, seed, num_points, num_new, budgets, hyperparameters)
                    for seed in range(replicates)
                ]

                def average(key: str, results=results) -> float:
                    return statistics.fmean(result[key] for result in results)

                for steps, learning_rate in budgets:
                    key = f"{steps} steps, lr {learning_rate or 'default'}"
                    lines.append(
                        f"| {problem} | {model} | {num_points} + {num_new} | {key} "
                        f"| {average('parent'):.3f} | {average(key):.3f} "
                        f"| {average('floor'):.3f} | {average('parent misfit'):.3f} "
                        f"| {average(f'{key} misfit'):.3f} | {average('refit misfit'):.3f} "
                        f"| {average(f'{key} seconds'):.2f} "
                        f"| {average('refit seconds'):.2f} |"
                    )
                    print(lines[-1], flush=True)
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> str:
    r"""Run the benchmark; returns the markdown table (also written to ``--out``)."""
    parser = runner_parser(__doc__, out=Path("benchmarks/results/conditioning.md"))
    parser.add_argument("--problems", nargs="+", choices=PROBLEMS, default=list(PROBLEMS))
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--replicates", type=int, default=5)
    parser.add_argument("--points", type=int, default=24, help="training points n")
    parser.add_argument("--new-points", nargs="+", type=int, default=[1, 4])
    parser.add_argument("--steps", nargs="+", type=int, default=[10, 25, 50, 100, 200])
    parser.add_argument(
        "--learning-rates",
        nargs="+",
        type=float,
        default=None,
        help="conditioning learning rates (default: the model's default only)",
    )
    args = parser.parse_args(argv)
    use_threads(args.threads)
    hyperparameters: dict = {}
    if args.smoke:
        args.problems, args.models, args.replicates = ["branin-2d"], ["mc-dropout"], 1
        args.new_points, args.steps = [1], [2]
        hyperparameters = {"hidden_widths": (8,), "epochs": 5, "num_masks": 4}
    learning_rates = args.learning_rates or [None]
    budgets = [(steps, lr) for lr in learning_rates for steps in args.steps]
    table = run(
        args.problems,
        args.models,
        args.replicates,
        args.points,
        args.new_points,
        budgets,
        hyperparameters,
    )
    return write_text(args.out, table)


if __name__ == "__main__":
    main()
