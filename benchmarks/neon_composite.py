"""Protocol 3 (NEON composite problems): composite BO on function-valued outputs.

For each problem (``pollutants``, ``brusselator``) and seed, side by side on the same
uniformly random initial design:

- ``neon+q-leaky-ei``: NEON on the function-valued output ``h`` (the authors' preset for
  the problem, re-initialised at every iteration with a step budget that grows with the
  iteration as in their code), q-leaky EI of the composite objective ``-g(h)`` over the
  model's fixed bank of indices (q = 1, so it is leaky EI averaged over the bank);
- ``gp+logei``: BoTorch's ``SingleTaskGP`` on the scalar ``g`` (Normalize, Standardize)
  with LogEI, the baseline a BoTorch user would try first;
- ``random``: uniform random search.

Writes ``runs.csv`` (best ``g`` so far per evaluation), ``summary.md`` (median and mean
``log10`` of the final best ``g`` with standard errors, seconds per iteration and NEON's
trainable parameter count) and one best-so-far plot per problem into ``--out``. Finished
runs are stored in ``--out/runs/`` and loaded again by a repeated command; an unfinished run
is checkpointed after every iteration and continues from there. ``--device cuda`` trains
and optimises on a GPU (the problems are evaluated there too); the random initial designs
and NEON's seeds are drawn on the CPU, so a run proposes from the same data on any device.

Examples:
    python benchmarks/neon_composite.py --problems pollutants --seeds 10 --jobs 2
    python benchmarks/neon_composite.py --problems brusselator --seeds 5 --iterations 30
    python benchmarks/neon_composite.py --problems pollutants --seeds 10 --device cuda --jobs 4
    python benchmarks/neon_composite.py --problems pollutants --first-seed 5 --seeds 5
    python benchmarks/neon_composite.py --smoke
"""

from __future__ import annotations

import math
import statistics
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import torch
from botorch.acquisition import LogExpectedImprovement
from botorch.models import SingleTaskGP
from botorch.models.transforms import Normalize, Standardize
from botorch.optim import optimize_acqf
from botorch.utils.sampling import manual_seed
from common import (
    add_jobs_option,
    add_seed_options,
    mean_and_standard_error,
    plot_best_so_far,
    run_jobs,
    runner_parser,
    seed_range,
    stored_run,
    summary_header,
    use_threads,
)
from torch import Tensor

from botorch_nn_uq.acquisition import qLeakyExpectedImprovement
from botorch_nn_uq.bo.loop import save_atomically, write_rows_csv
from botorch_nn_uq.fit import fit_model
from botorch_nn_uq.models import NEON
from botorch_nn_uq.nn import count_parameters
from botorch_nn_uq.posteriors import EnsembleIndexSampler
from botorch_nn_uq.problems import Brusselator, CompositeProblem, Pollutants

PROBLEMS = {"pollutants": Pollutants, "brusselator": Brusselator}
METHODS = ("neon+q-leaky-ei", "gp+logei", "random")
#: The protocol's budgets: initial points and iterations.
BUDGETS = {"pollutants": (5, 35), "brusselator": (5, 30)}


@dataclass(frozen=True)
class RunSpec:
    r"""One BO run of the benchmark."""

    problem: str
    method: str
    seed: int
    n_initial: int
    iterations: int
    steps: int
    num_restarts: int
    raw_samples: int

    @property
    def key(self) -> str:
        r"""A file-name-safe identifier of the run and its budget."""
        return (
            f"{self.problem}_{self.method}_seed{self.seed}_init{self.n_initial}_it"
            f"{self.iterations}_steps{self.steps}_r{self.num_restarts}_raw{self.raw_samples}"
        )


@dataclass
class RunResult:
    r"""Best ``g`` so far after each evaluation and seconds per iteration."""

    spec: RunSpec
    best_so_far: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    num_parameters: int | None = None


def fit_neon(problem: CompositeProblem, U: Tensor, H: Tensor, steps: int, seed: int) -> NEON:
    r"""NEON with the problem's preset on ``(U, flatten(H))``, trained ``steps`` steps."""
    model = NEON(
        U,
        problem.flatten(H),
        output_grid=problem.grid,
        num_channels=problem.num_channels,
        input_transform=Normalize(problem.dim, bounds=problem.bounds.to(U)),
        outcome_transform=Standardize(problem.num_outputs),
        preset=problem.name,
        epochs=steps,
    )
    return model.fit(seed=seed)


def propose(
    spec: RunSpec, problem: CompositeProblem, U: Tensor, H: Tensor, values: Tensor, it: int
) -> tuple[Tensor, int | None]:
    r"""The next point of a model-based method, and NEON's parameter count."""
    bounds = problem.bounds.to(U)
    if spec.method == "gp+logei":
        model = fit_model(
            SingleTaskGP(
                U,
                -values.unsqueeze(-1),
                input_transform=Normalize(problem.dim, bounds=bounds),
                outcome_transform=Standardize(1),
            )
        )
        acquisition = LogExpectedImprovement(model, best_f=(-values).max())
        parameters = None
    else:
        # The authors grow the step budget with the iteration: steps * (1 + 2 it / N).
        steps = round(spec.steps * (1 + 2 * it / max(spec.iterations, 1)))
        model = fit_neon(problem, U, H, steps, seed=spec.seed * 1000 + it)
        bank = model.hyperparameters.num_epistemic_samples
        acquisition = qLeakyExpectedImprovement(
            model,
            best_f=(-values).max(),
            sampler=EnsembleIndexSampler(torch.Size([bank]), seed=0),
            objective=problem.objective(),
        )
        parameters = count_parameters(model.network)
    # Seeding torch's global generator too fixes optimize_acqf's choice of restarts.
    seed = spec.seed * 1000 + it
    with manual_seed(seed):
        candidate, _ = optimize_acqf(
            acquisition,
            bounds=bounds,
            q=1,
            num_restarts=spec.num_restarts,
            raw_samples=spec.raw_samples,
            options={"seed": seed},
        )
    return candidate.detach(), parameters


def execute(spec: RunSpec, store: Path, device: str = "cpu") -> RunResult:
    r"""One BO run on ``device``, stored in ``store``, or the run an earlier invocation
    stored there.

    After every iteration the unfinished run's state (data, result so far, random state of
    the design) is checkpointed in ``store``, and a repeated call continues from the
    checkpoint.
    """
    checkpoint = store / f"{spec.key}.checkpoint"
    result = stored_run(spec, store, partial(run, checkpoint=checkpoint, device=device))
    checkpoint.unlink(missing_ok=True)
    return result


def run(spec: RunSpec, checkpoint: Path, device: str) -> RunResult:
    r"""One BO run on ``device`` and this process's torch threads (``--threads``), from
    ``checkpoint`` if there is one, checkpointed there after every iteration."""
    problem = PROBLEMS[spec.problem]()
    bounds = problem.bounds.to(device)
    generator = torch.Generator().manual_seed(spec.seed)

    def uniform(n: int) -> Tensor:
        unit = torch.rand(n, problem.dim, generator=generator, dtype=torch.float64)
        return bounds[0] + (bounds[1] - bounds[0]) * unit.to(device)

    if checkpoint.exists():
        state = torch.load(checkpoint, weights_only=False)
        U, H, values = (state[name].to(device) for name in ("U", "H", "values"))
        result = state["result"]
        generator.set_state(state["generator"])
    else:
        U = uniform(spec.n_initial)
        H = problem.h(U)
        values = problem.g(H)
        result = RunResult(spec, best_so_far=[float(values.min())])
    for it in range(len(result.seconds), spec.iterations):
        start = time.perf_counter()
        if spec.method == "random":
            candidate, parameters = uniform(1), None
        else:
            candidate, parameters = propose(spec, problem, U, H, values, it)
        result.seconds.append(time.perf_counter() - start)
        result.num_parameters = parameters or result.num_parameters
        new_H = problem.h(candidate)
        U, H = torch.cat([U, candidate]), torch.cat([H, new_H])
        values = torch.cat([values, problem.g(new_H)])
        result.best_so_far.append(float(values.min()))
        state = {"U": U.cpu(), "H": H.cpu(), "values": values.cpu(), "result": result}
        save_atomically(state | {"generator": generator.get_state()}, checkpoint)
    return result


def progress_line(spec: RunSpec, result: RunResult) -> str:
    r"""What the progress output says of a finished run."""
    return f"{spec.problem} {spec.method} seed {spec.seed}: best g {result.best_so_far[-1]:.3e}"


def summary_table(results: Sequence[RunResult]) -> str:
    r"""Markdown table: final log10 best ``g`` (median, mean ± s.e.), seconds per
    iteration, NEON's parameter count."""
    groups: dict[tuple[str, str], list[RunResult]] = defaultdict(list)
    for result in results:
        groups[(result.spec.problem, result.spec.method)].append(result)
    lines = [
        "| problem | method | seeds | evaluations | median best g | median log10 best g "
        "| mean log10 best g (± s.e.) | seconds / iteration | parameters |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for (problem, method), runs in sorted(groups.items()):
        finals = [run.best_so_far[-1] for run in runs]
        logs = [math.log10(max(value, 1e-300)) for value in finals]
        mean_log, error = mean_and_standard_error(logs)
        seconds = [s for run in runs for s in run.seconds]
        per_iteration = f"{statistics.fmean(seconds):.2f}" if method != "random" else "-"
        parameters = runs[0].num_parameters
        evaluations = len(runs[0].best_so_far) - 1 + runs[0].spec.n_initial
        lines.append(
            f"| {problem} | {method} | {len(runs)} | {evaluations} "
            f"| {statistics.median(finals):.3e} | {statistics.median(logs):.2f} "
            f"| {mean_log:.2f} ± {error:.2f} | {per_iteration} "
            f"| {parameters if parameters is not None else '-'} |"
        )
    return "\n".join(lines) + "\n"


def best_g_curves(
    results: Sequence[RunResult],
) -> dict[str, dict[str, tuple[torch.Tensor, torch.Tensor]]]:
    r"""``problem -> method -> (evaluations, runs x evaluations best g)`` for
    :func:`~common.plot_best_so_far`, problems sorted, methods in the order of ``METHODS``."""
    curves: dict[str, dict[str, tuple[torch.Tensor, torch.Tensor]]] = {}
    for problem in sorted({result.spec.problem for result in results}):
        curves[problem] = {}
        for method in METHODS:
            runs = [r for r in results if r.spec.problem == problem and r.spec.method == method]
            if runs:
                best = torch.tensor([run.best_so_far for run in runs], dtype=torch.float64)
                evaluations = torch.arange(best.shape[1]) + runs[0].spec.n_initial
                curves[problem][method] = (evaluations, best)
    return curves


def main(argv: Sequence[str] | None = None) -> Path:
    r"""Run the benchmark; returns the path of the markdown summary."""
    parser = runner_parser(__doc__, out=Path("benchmarks/results/neon_composite"))
    parser.add_argument("--problems", nargs="+", default=list(PROBLEMS), choices=list(PROBLEMS))
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    add_seed_options(parser, default=10)
    parser.add_argument("--iterations", type=int, help="override the protocol's iterations")
    parser.add_argument("--steps", type=int, default=2000, help="NEON's first-iteration steps")
    parser.add_argument("--num-restarts", type=int, default=10)
    parser.add_argument("--raw-samples", type=int, default=256)
    add_jobs_option(parser)
    parser.add_argument("--device", default="cpu", help="torch device for models and problems")
    args = parser.parse_args(argv)
    use_threads(args.threads)
    if args.smoke:
        args.problems, args.seeds, args.iterations, args.steps = ["pollutants"], 1, 2, 20
        args.num_restarts, args.raw_samples = 2, 16
    specs = [
        RunSpec(
            problem=problem,
            method=method,
            seed=seed,
            n_initial=BUDGETS[problem][0],
            iterations=args.iterations or BUDGETS[problem][1],
            steps=args.steps,
            num_restarts=args.num_restarts,
            raw_samples=args.raw_samples,
        )
        for seed in seed_range(args)
        for problem in args.problems
        for method in args.methods
    ]
    store = args.out / "runs"
    start = time.perf_counter()
    job = partial(execute, store=store, device=args.device)
    results = run_jobs(job, specs, args.jobs, args.threads, progress_line)
    args.out.mkdir(parents=True, exist_ok=True)
    write_rows_csv(
        [
            {
                "problem": r.spec.problem,
                "method": r.spec.method,
                "seed": r.spec.seed,
                "evaluations": r.spec.n_initial + index,
                "best_g": value,
            }
            for r in results
            for index, value in enumerate(r.best_so_far)
        ],
        args.out / "runs.csv",
    )
    summary = args.out / "summary.md"
    summary.write_text(
        f"{summary_header(__file__, argv, args.threads)}\n\n{len(specs)} runs, "
        f"{time.perf_counter() - start:.0f} s wall-clock in this invocation.\n\n"
        + summary_table(results)
    )
    plot_best_so_far(
        best_g_curves(results), args.out, "best g so far (median, quartiles)", centre="median"
    )
    print(summary.read_text())
    return summary


if __name__ == "__main__":
    main()
