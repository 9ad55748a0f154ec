"""Protocol 3 (NEON composite problems): composite BO on function-valued outputs.

For each problem (``pollutants``, ``brusselator``) and seed, side by side on the same
uniformly random initial design:

- ``neon+q-leaky-ei``: NEON on the function-valued output ``h`` (the authors' preset for
  the problem), q-leaky EI of the composite objective ``-g(h)`` over the model's fixed
  bank of 128 indices (q = 1, so it is leaky EI averaged over the bank). How it trains and
  optimises is set per problem (``NEON_DEFAULTS``; every field has an option):

  - pollutants (12 outputs): the authors' schedule, a cold full-batch fit at every
    iteration with a step budget that grows with the iteration, in float64, and BoTorch's
    ``optimize_acqf`` with the full bank;
  - Brusselator (8,192 outputs): float32, mini-batches of 1,024 ``(u, y)`` rows, warm-started
    refits of ``--warm-steps`` steps with a cold fit every ``--cold-every`` iterations or
    when the held-out error degrades (``botorch_nn_uq.bo.continual``), and the acquisition
    optimised by ``optimize_acqf_screened``: raw samples screened with the first 16
    indices of the bank, the best rescored with all 128, L-BFGS-B on the 16-index
    acquisition, the end points scored with all 128 (the proposal is always the full
    bank's best). ``benchmarks/neon_profile.py`` measures what each of these choices costs
    and changes.
- ``gp+logei``: BoTorch's ``SingleTaskGP`` on the scalar ``g`` (Normalize, Standardize)
  with LogEI, the baseline a BoTorch user would try first;
- ``random``: uniform random search.

Writes ``runs.csv`` (best ``g`` so far per evaluation), ``summary.md`` (median and mean
``log10`` of the final best ``g`` with standard errors, the median gap to the best ``g``
known, seconds per iteration and NEON's trainable parameter count) and one plot per
problem of the gap to the best known ``g`` (``BEST_KNOWN_G``; on the pollutants, where it
is 0, the best ``g`` itself) into ``--out``. The Brusselator's ``g`` cannot fall below
about 8.6e-3, so its gaps, not its values, separate the methods. Finished
runs are stored in ``--out/runs/`` and loaded again by a repeated command; an unfinished run
is checkpointed after every iteration and continues from there. ``--device cuda`` trains
and optimises on a GPU (the problems are evaluated there too); the random initial designs
and NEON's seeds are drawn on the CPU, so a run proposes from the same data on any device.

Examples:
    python -m benchmarks.neon_composite --problems pollutants --seeds 10 --jobs 2
    python -m benchmarks.neon_composite --problems brusselator --seeds 5 --iterations 30
    python -m benchmarks.neon_composite --problems pollutants --seeds 10 --device cuda --jobs 4
    python -m benchmarks.neon_composite --problems pollutants --first-seed 5 --seeds 5
    python -m benchmarks.neon_composite --problems brusselator --screening-indices 0
    python -m benchmarks.neon_composite --smoke
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch
from botorch.models.transforms import Normalize, Standardize
from torch import Tensor

from benchmarks.common import (
    add_device_option,
    add_jobs_option,
    add_seed_options,
    integer_argument,
    mean_and_standard_error,
    plot_best_so_far,
    run_jobs,
    runner_parser,
    seed_range,
    stored_run,
    summary_header,
    use_threads,
)
from botorch_nn_uq.acquisition import qLeakyExpectedImprovement
from botorch_nn_uq.bo import (
    AcquisitionContext,
    AcquisitionProposer,
    BayesianOptimizer,
    ColdFit,
    ContinualFit,
    ContinualTraining,
    Minimize,
    Proposer,
    ScreenedProposer,
    Strategy,
    SurrogateSpec,
    composite_problem,
    write_rows_csv,
)
from botorch_nn_uq.models import NEON
from botorch_nn_uq.nn import count_parameters
from botorch_nn_uq.posteriors import EnsembleIndexSampler
from botorch_nn_uq.problems import Brusselator, CompositeProblem, Pollutants

PROBLEMS = {"pollutants": Pollutants, "brusselator": Brusselator}
METHODS = ("neon+q-leaky-ei", "gp+logei", "random")
#: The protocol's budgets: initial points and iterations.
BUDGETS = {"pollutants": (5, 35), "brusselator": (5, 30)}
#: How NEON trains and optimises on each problem (see the module docstring); ``None``
#: switches a mechanism off: full-batch steps, cold fits only, no screening.
NEON_DEFAULTS: dict[str, dict[str, str | int | None]] = {
    "pollutants": {
        "dtype": "float64",
        "batch_size": None,
        "warm_steps": None,
        "cold_every": 1,
        "screening_indices": None,
        "optimize_on": "full",
    },
    "brusselator": {
        "dtype": "float32",
        "batch_size": 1024,
        "warm_steps": 500,
        "cold_every": 10,
        "screening_indices": 16,
        "optimize_on": "screening",
    },
}
#: The lowest ``g`` known before any run. Pollutants: ``g(u_true) = 0``. Brusselator: a
#: homogeneous steady state ``(u, v) = (a, b / a)`` has ``g`` of at least 8.6208e-3, at
#: ``a = sqrt(0.1)``, ``b = 0.1`` (the two channels' weighted values balanced, ``b`` at its
#: lower bound); the solver's fields there (``D0 = D1 = 1``) give 8.61546e-3, the lowest of
#: a Powell search over ``(a, b, D0, D1)`` from that point (66 evaluations). The summary
#: measures each run's gap to the smaller of this and every run's best.
BEST_KNOWN_G = {"pollutants": 0.0, "brusselator": 8.615456747850846e-3}
#: Observation noise of NEON's fits: the simulators are deterministic, and a fixed value
#: spares the fit its noise estimate (a full-bank evaluation at every training input).
NOISE_VARIANCE = 1e-6


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
    dtype: str = "float64"
    batch_size: int | None = None
    warm_steps: int | None = None
    cold_every: int = 1
    screening_indices: int | None = None
    optimize_on: str = "full"

    @property
    def key(self) -> str:
        r"""A file-name-safe identifier of the run and its budget."""
        # "stepseeds": runs of the BO core's seeding rule (runs stored before it are not
        # reused).
        key = (
            f"{self.problem}_{self.method}_seed{self.seed}_init{self.n_initial}_it"
            f"{self.iterations}_steps{self.steps}_r{self.num_restarts}_raw{self.raw_samples}"
            "_stepseeds"
        )
        if self.method != "neon+q-leaky-ei":
            return key
        return (
            f"{key}_{self.dtype}_batch{self.batch_size}_warm{self.warm_steps}"
            f"every{self.cold_every}_screen{self.screening_indices}{self.optimize_on}"
        )


@dataclass
class RunResult:
    r"""Best ``g`` so far after each evaluation and seconds per iteration."""

    spec: RunSpec
    best_so_far: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    num_parameters: int | None = None
    fit_seconds: list[float] = field(default_factory=list)
    warm_fits: list[bool] = field(default_factory=list)


def build_neon(
    problem: CompositeProblem, U: Tensor, H: Tensor, dtype: torch.dtype, **hyperparameters: Any
) -> NEON:
    r"""An unfitted NEON with the problem's preset on ``(U, flatten(H))`` in ``dtype``.

    Args:
        problem: The composite problem; its name selects the preset.
        U: ``n x d`` evaluated inputs.
        H: ``n x num_channels x ...`` the simulator's outputs at ``U``.
        dtype: The model's dtype.
        **hyperparameters: Further ``NEON`` arguments (training budget, chunking).
    """
    U, H = U.to(dtype), H.to(dtype)
    return NEON(
        U,
        problem.flatten(H),
        output_grid=problem.grid.to(U),
        num_channels=problem.num_channels,
        input_transform=Normalize(problem.dim, bounds=problem.bounds.to(U)),
        outcome_transform=Standardize(problem.num_outputs),
        preset=problem.name,
        noise_variance=NOISE_VARIANCE,
        # The published runs sample one function of the bank per MC sample.
        joint_samples="functions",
        **hyperparameters,
    )


def neon_model(problem: CompositeProblem, U: Tensor, Y: Tensor, spec: RunSpec, steps: int) -> NEON:
    r"""An unfitted NEON in ``spec.dtype`` on ``U`` and the flat outputs ``Y``, trained
    for ``steps`` optimizer steps (full-batch, or mini-batches of ``spec.batch_size``
    rows)."""
    budget: dict[str, int] = {"epochs": steps}
    if spec.batch_size is not None:
        # Every epoch has at least one step, so the step budget ends training first.
        budget |= {"max_steps": steps, "batch_size": spec.batch_size}
    return build_neon(problem, U, problem.unflatten(Y), getattr(torch, spec.dtype), **budget)


def cold_steps(spec: RunSpec, it: int) -> int:
    r"""The step budget of a cold fit at iteration ``it`` (0 for the first BO step): the
    authors grow it with the iteration, ``steps * (1 + 2 it / N)``."""
    return round(spec.steps * (1 + 2 * it / max(spec.iterations, 1)))


def neon_surrogate(problem: CompositeProblem, spec: RunSpec) -> SurrogateSpec:
    r"""NEON as the BO core's surrogate of the flat outputs of ``h``: a cold fit of
    :func:`cold_steps` steps (the iteration is read off the number of points, one per
    iteration), or ``spec.warm_steps`` steps from a warm start."""

    def build(
        train_X: Tensor,
        train_Y: Tensor,
        bounds: Tensor,
        seed: int,
        warm_start: NEON | None = None,
        **overrides: Any,
    ) -> NEON:
        if warm_start is not None:
            model = neon_model(problem, train_X, train_Y, spec, spec.warm_steps)
            return model.fit(seed=seed, warm_start=warm_start, max_steps=spec.warm_steps)
        it = train_X.shape[0] - spec.n_initial
        return neon_model(problem, train_X, train_Y, spec, cold_steps(spec, it)).fit(seed=seed)

    def restore(train_X: Tensor, train_Y: Tensor, bounds: Tensor, state: dict[str, Tensor]) -> NEON:
        model = neon_model(problem, train_X, train_Y, spec, spec.steps)
        model.load_state_dict(state)
        return model

    return SurrogateSpec(
        "neon-composite",
        f"NEON with the {problem.name} preset",
        build,
        supports_warm_start=True,
        restore=restore,
    )


def leaky_ei(neon: NEON, context: AcquisitionContext) -> qLeakyExpectedImprovement:
    r"""q-leaky EI of ``-g`` over NEON's whole bank of indices (in the model's dtype),
    from the best ``-g`` observed so far."""
    dtype = next(neon.parameters()).dtype
    best_f = context.objective(context.train_Y).max()
    return qLeakyExpectedImprovement(
        neon,
        best_f=best_f.to(dtype),
        sampler=EnsembleIndexSampler(torch.Size([neon.function_bank_size]), seed=0),
        objective=context.objective,
    )


def components(spec: RunSpec, problem: CompositeProblem) -> dict[str, Any]:
    r"""The BO core's surrogate, proposer and fit policy of the run's method."""
    if spec.method == "random":
        return {"strategy": Strategy("random", acquisition="")}
    if spec.method == "gp+logei":
        options = (("num_restarts", spec.num_restarts), ("raw_samples", spec.raw_samples))
        return {"strategy": Strategy("gp", acquisition="logei", acquisition_options=options)}
    # NEON's surrogate and q-leaky EI over its bank of indices are given as code.
    dtype = getattr(torch, spec.dtype)
    proposer: Proposer
    if spec.screening_indices is None:
        proposer = AcquisitionProposer(
            leaky_ei, num_restarts=spec.num_restarts, raw_samples=spec.raw_samples, dtype=dtype
        )
    else:
        proposer = ScreenedProposer(
            leaky_ei,
            spec.screening_indices,
            num_restarts=spec.num_restarts,
            raw_samples=spec.raw_samples,
            optimize_on=spec.optimize_on,
            dtype=dtype,
        )
    fit_policy = (
        ColdFit()
        if spec.warm_steps is None
        else ContinualFit(
            ContinualTraining(warm_start_steps=spec.warm_steps, cold_refit_every=spec.cold_every)
        )
    )
    return {
        "surrogate": neon_surrogate(problem, spec),
        "proposer": proposer,
        "fit_policy": fit_policy,
    }


class ScalarObjective:
    r"""The composite problem as a scalar one, ``f = g(h(u))``, for the surrogates of
    ``g`` itself (the GP baseline and random search)."""

    def __init__(self, problem: CompositeProblem) -> None:
        self.problem = problem
        self.name, self.bounds, self.objective = problem.name, problem.bounds, Minimize()

    def evaluate(self, X: Tensor) -> Tensor:
        return self.problem.evaluate(X).unsqueeze(-1)


def execute(spec: RunSpec, store: Path, device: str = "cpu") -> RunResult:
    r"""One BO run on ``device``, stored in ``store``, or the run an earlier invocation
    stored there.

    After every iteration the unfinished run's state (the BO core's, with NEON's last
    model and continual-training state) is checkpointed in ``store``, and a repeated
    call continues from the checkpoint exactly as the uninterrupted run.
    """
    checkpoint = store / f"{spec.key}.checkpoint"
    result = stored_run(spec, store, partial(run, checkpoint=checkpoint, device=device))
    checkpoint.unlink(missing_ok=True)
    return result


def run(spec: RunSpec, checkpoint: Path, device: str) -> RunResult:
    r"""One BO run of the BO core on ``device`` and this process's torch threads
    (``--threads``), from ``checkpoint`` if there is one, checkpointed there after every
    iteration."""
    composite = PROBLEMS[spec.problem]()
    neon = spec.method == "neon+q-leaky-ei"
    problem = composite_problem(composite) if neon else ScalarObjective(composite)
    parts = components(spec, composite)
    if checkpoint.exists():
        optimizer = BayesianOptimizer.load(
            checkpoint,
            device=device,
            surrogate=parts.get("surrogate"),
            proposer=parts.get("proposer"),
            objective=problem.objective,
        )
    else:
        optimizer = BayesianOptimizer(
            problem.bounds.to(device),
            objective=problem.objective,
            seed=spec.seed,
            n_initial=spec.n_initial,
            **parts,
        )
    done = max(optimizer.step - 1, 0)
    optimizer.run(problem, spec.iterations - done, callback=lambda *_: optimizer.save(checkpoint))
    records = optimizer.records
    return RunResult(
        spec,
        best_so_far=[record.best_value for record in records],
        seconds=[record.seconds for record in records[1:]],
        num_parameters=count_parameters(optimizer.model.network) if neon else None,
        fit_seconds=[record.fit_seconds for record in records[1:]] if neon else [],
        warm_fits=[record.warm_start for record in records[1:]] if neon else [],
    )


def progress_line(spec: RunSpec, result: RunResult) -> str:
    r"""What the progress output says of a finished run."""
    return f"{spec.problem} {spec.method} seed {spec.seed}: best g {result.best_so_far[-1]:.3e}"


def best_known_g(results: Sequence[RunResult]) -> dict[str, float]:
    r"""``problem -> `` the smaller of ``BEST_KNOWN_G`` and every run's best ``g``."""
    best = dict(BEST_KNOWN_G)
    for result in results:
        problem = result.spec.problem
        best[problem] = min(best[problem], min(result.best_so_far))
    return best


def summary_table(results: Sequence[RunResult]) -> str:
    r"""Markdown table: final log10 best ``g`` (median, mean ± s.e.), the median gap to
    the best known ``g``, seconds per iteration, NEON's parameter count."""
    groups: dict[tuple[str, str], list[RunResult]] = defaultdict(list)
    for result in results:
        groups[(result.spec.problem, result.spec.method)].append(result)
    optimum = best_known_g(results)
    lines = [
        "| problem | method | seeds | evaluations | median best g | median gap to the best "
        "known g | median log10 best g | mean log10 best g (± s.e.) | seconds / iteration "
        "| parameters |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for (problem, method), runs in sorted(groups.items()):
        finals = [run.best_so_far[-1] for run in runs]
        gaps = [final - optimum[problem] for final in finals]
        logs = [math.log10(max(value, 1e-300)) for value in finals]
        mean_log, error = mean_and_standard_error(logs)
        seconds = [s for run in runs for s in run.seconds]
        per_iteration = f"{statistics.fmean(seconds):.2f}" if method != "random" else "-"
        parameters = runs[0].num_parameters
        evaluations = len(runs[0].best_so_far) - 1 + runs[0].spec.n_initial
        lines.append(
            f"| {problem} | {method} | {len(runs)} | {evaluations} "
            f"| {statistics.median(finals):.3e} | {statistics.median(gaps):.2e} "
            f"| {statistics.median(logs):.2f} | {mean_log:.2f} ± {error:.2f} | {per_iteration} "
            f"| {parameters if parameters is not None else '-'} |"
        )
    return "\n".join(lines) + "\n"


def best_g_curves(
    results: Sequence[RunResult],
) -> dict[str, dict[str, tuple[torch.Tensor, torch.Tensor]]]:
    r"""``problem -> method -> (evaluations, runs x evaluations gap to the best known g)``
    for :func:`~common.plot_best_so_far`, problems sorted, methods in the order of
    ``METHODS``. A run's gap at the best known ``g`` itself is drawn at the plot's floor."""
    optimum = best_known_g(results)
    curves: dict[str, dict[str, tuple[torch.Tensor, torch.Tensor]]] = {}
    for problem in sorted({result.spec.problem for result in results}):
        curves[problem] = {}
        for method in METHODS:
            runs = [r for r in results if r.spec.problem == problem and r.spec.method == method]
            if runs:
                best = torch.tensor([run.best_so_far for run in runs], dtype=torch.float64)
                evaluations = torch.arange(best.shape[1]) + runs[0].spec.n_initial
                curves[problem][method] = (evaluations, best - optimum[problem])
    return curves


def optional_count(text: str) -> int | None:
    r"""An argparse type: a positive integer, or 0 for ``None`` (the mechanism off)."""
    value = integer_argument(0)(text)
    return value or None


def add_neon_options(parser: argparse.ArgumentParser) -> None:
    r"""The options of NEON's training and acquisition optimisation; each defaults to the
    problem's entry of ``NEON_DEFAULTS``."""
    group = parser.add_argument_group(
        "NEON (default: the problem's entry of NEON_DEFAULTS)", argument_default=argparse.SUPPRESS
    )
    group.add_argument("--neon-dtype", dest="dtype", choices=["float32", "float64"])
    group.add_argument(
        "--batch-size", type=optional_count, help="rows per training step (0: full batch)"
    )
    group.add_argument(
        "--warm-steps", type=optional_count, help="steps of a warm-started refit (0: cold fits)"
    )
    group.add_argument("--cold-every", type=integer_argument(1), help="a cold fit every N fits")
    group.add_argument(
        "--screening-indices",
        type=optional_count,
        help="indices that screen the raw samples (0: BoTorch's optimize_acqf, full bank)",
    )
    group.add_argument("--optimize-on", choices=["screening", "full"])


def neon_settings(args: argparse.Namespace, problem: str) -> dict[str, str | int | None]:
    r"""NEON's settings for ``problem``: the given options over its ``NEON_DEFAULTS``."""
    return {name: getattr(args, name, default) for name, default in NEON_DEFAULTS[problem].items()}


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
    add_device_option(parser)
    add_neon_options(parser)
    args = parser.parse_args(argv)
    use_threads(args.threads)
    if args.smoke:
        args.problems, args.seeds, args.iterations, args.steps = ["pollutants"], 1, 2, 20
        args.num_restarts, args.raw_samples = 2, 16
        args.warm_steps, args.cold_every, args.screening_indices = 10, 2, 4
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
            **neon_settings(args, problem),
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
        best_g_curves(results),
        args.out,
        "best g so far minus the best known g\n(median and quartiles over seeds)",
        centre="median",
    )
    print(summary.read_text())
    return summary


if __name__ == "__main__":
    main()
