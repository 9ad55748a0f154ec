"""How close ``condition_on_observations`` (the closed-form last-layer conditioning of
``botorch_nn_uq.models.last_layer``) comes to a full refit on the augmented data, and
what a fantasy model costs.

For each problem, model and replicate the script fits a model (seed 0) on ``n`` random
points, then conditions it on ``k`` new points (true function values), and refits it
from scratch on the ``n + k`` points with seed 0 (the target) and seed 1. It reports the
RMSE of posterior means on 256 uniform test points, divided by the standard deviation of
the augmented targets:

- ``parent``: the model before conditioning, against the full refit (what conditioning
  has to close);
- ``conditioned``: the conditioned model against the full refit;
- ``floor``: the full refit with seed 1 against the one with seed 0 (two equally good
  fits differ by this much; no conditioning can be expected to come closer);

and the misfit at the new points (RMSE of the posterior mean against the new
observations, same scale) of the parent, the conditioned model and the full refit: how
much of the new information each holds. All are averaged over the replicates, with the
seconds of one conditioning (with a posterior evaluation), of one full refit, and of one
``qKnowledgeGradient`` evaluation with its gradient (8 fantasies at 32 one-shot
candidates, ``b = 32``).

``--device`` runs the models on a torch device (default the CPU; the points and their
values are drawn and computed on the CPU and moved, so a seed gives the same data on
every device); the table of another device goes to ``--out`` with the device's name
before its suffix (``conditioning_cuda.md``).

Examples:
    python -m benchmarks.conditioning
    python -m benchmarks.conditioning --models deep-ensemble --replicates 10
    python -m benchmarks.conditioning --smoke
    python -m benchmarks.conditioning --device cuda
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from botorch.acquisition import qKnowledgeGradient
from botorch.models.transforms import Normalize, Standardize
from botorch.sampling import SobolQMCNormalSampler
from botorch.test_functions import Branin, Hartmann

from benchmarks.common import (
    PrintedTable,
    add_device_option,
    device_path,
    device_seconds,
    runner_parser,
    use_threads,
    write_text,
)
from botorch_nn_uq.models import NEON, NOMU, DeepEnsemble, MCDropout

PROBLEMS: dict[str, Callable[[], object]] = {
    "branin-2d": lambda: Branin(),
    "hartmann-6d": lambda: Hartmann(dim=6),
}
MODELS: dict[str, tuple[type, dict]] = {
    "deep-ensemble": (DeepEnsemble, {}),
    "mc-dropout": (MCDropout, {}),
    "neon": (NEON, {}),
    "nomu": (NOMU, {}),
}
#: Fantasies and one-shot candidates of the timed ``qKnowledgeGradient`` evaluation.
KG_FANTASIES, KG_CANDIDATES = 8, 32


def relative_rmse(first: torch.Tensor, second: torch.Tensor, scale: torch.Tensor) -> float:
    return float((first - second).pow(2).mean().sqrt() / scale)


def replicate(
    problem_name: str,
    model_name: str,
    seed: int,
    num_points: int,
    num_new: int,
    hyperparameters: dict,
    device: str = "cpu",
) -> dict[str, float]:
    r"""One replicate: the distances (and seconds) of one data set, the models on
    ``device``."""
    problem = PROBLEMS[problem_name]()
    cpu_bounds = problem.bounds.to(torch.float64)
    generator = torch.Generator().manual_seed(seed)
    dim = cpu_bounds.shape[-1]

    def draw(n: int) -> torch.Tensor:
        unit = torch.rand(n, dim, generator=generator, dtype=torch.float64)
        return cpu_bounds[0] + (cpu_bounds[1] - cpu_bounds[0]) * unit

    train_X, new_X, test_X = draw(num_points), draw(num_new), draw(256)
    train_Y, new_Y = problem(train_X).unsqueeze(-1), problem(new_X).unsqueeze(-1)
    bounds, train_X, new_X, test_X, train_Y, new_Y = (
        tensor.to(device) for tensor in (cpu_bounds, train_X, new_X, test_X, train_Y, new_Y)
    )
    model_class, defaults = MODELS[model_name]

    def fit(X: torch.Tensor, Y: torch.Tensor, fit_seed: int):
        box = {"bounds": bounds} if model_class is NOMU else {}
        model = model_class(
            X,
            Y,
            input_transform=Normalize(dim, bounds=bounds),
            outcome_transform=Standardize(1),
            **{**defaults, **box, **hyperparameters},
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
    start = device_seconds(device)
    target = fit(all_X, all_Y, 0)
    result = {"refit seconds": device_seconds(device) - start}
    result["parent"] = relative_rmse(mean(parent), mean(target), scale)
    result["floor"] = relative_rmse(mean(fit(all_X, all_Y, 1)), mean(target), scale)
    result["parent misfit"], result["refit misfit"] = misfit(parent), misfit(target)
    start = device_seconds(device)
    conditioned = parent.condition_on_observations(new_X, new_Y)
    conditioned_mean = mean(conditioned)
    result["conditioning seconds"] = device_seconds(device) - start
    result["conditioned"] = relative_rmse(conditioned_mean, mean(target), scale)
    result["conditioned misfit"] = misfit(conditioned)
    knowledge_gradient = qKnowledgeGradient(
        parent,
        num_fantasies=KG_FANTASIES,
        sampler=SobolQMCNormalSampler(torch.Size([KG_FANTASIES]), seed=seed),
    )
    candidates = draw(KG_CANDIDATES * (1 + KG_FANTASIES)).reshape(KG_CANDIDATES, -1, dim)
    candidates = candidates.to(device).requires_grad_(True)
    start = device_seconds(device)
    knowledge_gradient(candidates).sum().backward()
    result["kg seconds"] = device_seconds(device) - start
    return result


def run(
    problems: Sequence[str],
    models: Sequence[str],
    replicates: int,
    num_points: int,
    new_points: Sequence[int],
    hyperparameters: dict,
    device: str = "cpu",
) -> str:
    r"""Every combination, the models on ``device``; returns a markdown table."""
    table = PrintedTable(
        [
            "problem",
            "model",
            "n + k",
            "parent",
            "conditioned",
            "floor",
            "misfit: parent",
            "conditioned",
            "refit",
            "conditioning (s)",
            "full refit (s)",
            f"qKG, {KG_FANTASIES} fantasies x {KG_CANDIDATES} (s)",
        ]
    )
    for problem in problems:
        for model in models:
            for num_new in new_points:
                results = [
                    replicate(problem, model, seed, num_points, num_new, hyperparameters, device)
                    for seed in range(replicates)
                ]

                def average(key: str, results=results) -> float:
                    return statistics.fmean(result[key] for result in results)

                table.add_row(
                    [
                        problem,
                        model,
                        f"{num_points} + {num_new}",
                        f"{average('parent'):.3f}",
                        f"{average('conditioned'):.3f}",
                        f"{average('floor'):.3f}",
                        f"{average('parent misfit'):.3f}",
                        f"{average('conditioned misfit'):.3f}",
                        f"{average('refit misfit'):.3f}",
                        f"{average('conditioning seconds'):.3f}",
                        f"{average('refit seconds'):.2f}",
                        f"{average('kg seconds'):.3f}",
                    ]
                )
    return table.markdown()


def main(argv: Sequence[str] | None = None) -> str:
    r"""Run the benchmark; returns the markdown table (also written to ``--out``)."""
    parser = runner_parser(__doc__, out=Path("benchmarks/results/conditioning.md"))
    parser.add_argument("--problems", nargs="+", choices=PROBLEMS, default=list(PROBLEMS))
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--replicates", type=int, default=5)
    parser.add_argument("--points", type=int, default=24, help="training points n")
    parser.add_argument("--new-points", nargs="+", type=int, default=[1, 4])
    add_device_option(parser)
    args = parser.parse_args(argv)
    use_threads(args.threads)
    hyperparameters: dict = {}
    if args.smoke:
        args.problems, args.models, args.replicates = ["branin-2d"], ["mc-dropout"], 1
        args.new_points = [1]
        hyperparameters = {"hidden_widths": (8,), "epochs": 5, "num_masks": 4}
    table = run(
        args.problems,
        args.models,
        args.replicates,
        args.points,
        args.new_points,
        hyperparameters,
        args.device,
    )
    return write_text(device_path(args.out, args.device), table)


if __name__ == "__main__":
    main()
