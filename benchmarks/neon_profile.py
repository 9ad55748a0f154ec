"""NEON at PDE scale: where one Brusselator BO iteration spends its time, and what each
speed-up costs and changes.

One Brusselator iteration (2 x 64 x 64 outputs, a bank of 128 indices) is a fit and an
acquisition. The profile's stages measure them side by side in one process with the same
threads, at the protocol's first and last data sizes (5 and 34 evaluations):

1. ``posterior``: seconds per candidate of the full-bank posterior (128 indices x 4,096 grid
   points = 524,288 EpiNet rows), without gradients (raw-sample scoring) and with them
   (an L-BFGS step), in float64 and float32, with the whole candidate at once and in chunks
   of ``evaluation_chunk_rows``; and what ``torch.compile`` of the network costs (the
   compilation) and saves (per candidate).
2. ``fit``: seconds per training step and per fit: the authors' schedule (a cold full-batch
   fit at every iteration, float64, 2,000 steps growing to 6,000 by the last iteration;
   per-step time measured on a few steps) against the runner's (float32, mini-batches of
   1,024 rows, a cold fit and a warm-started refit of 500 steps, both measured in full).
   The held-out error on 10 further evaluations shows what each fit has learnt.
3. ``acquisition``: on one fitted model per size (float32), BoTorch's ``optimize_acqf`` with
   the full bank against ``optimize_acqf_screened`` (raw samples screened with 16
   indices, the best rescored with 128, L-BFGS-B on the 16-index acquisition or on the
   full one). For each: seconds, the acquisition's forward seconds without and with
   gradients, and the FULL-bank leaky EI of the proposed point (higher is better), so the
   effect of each trick on the chosen point is measured, not assumed. The same trained
   network in float64 shows what float32 changes in the acquisition values.
4. ``iteration``: the protocol-3 runner's own code (``neon_composite.py``'s surrogate and
   proposer with its Brusselator settings) for the last two iterations of a run: a cold
   fit at 33 evaluations, then a warm start from it at 34, each with its acquisition. Run
   it with ``--threads 2`` on an otherwise idle 2-core machine for the laptop figure.

Writes ``summary.md`` into ``--out``. The Brusselator's solutions are cached in
``--out/data.pt`` (the solver takes about 1.5 s per evaluation). ``--device`` profiles
the models on a torch device (default the CPU; the solutions are computed and cached on
the CPU and moved, and every clock waits for the device's last kernel); the summary of
another device is ``summary_<device>.md`` (``summary_cuda.md``).

Examples:
    python -m benchmarks.neon_profile
    python -m benchmarks.neon_profile --stages posterior fit
    python -m benchmarks.neon_profile --stages iteration --threads 2
    python -m benchmarks.neon_profile --smoke
    python -m benchmarks.neon_profile --stages posterior fit --device cuda
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
from botorch.acquisition import AcquisitionFunction
from botorch.optim import optimize_acqf
from botorch.utils.sampling import manual_seed
from torch import Tensor

from benchmarks.common import (
    add_device_option,
    device_path,
    runner_parser,
    summary_header,
    use_threads,
    write_text,
)
from benchmarks.neon_composite import (
    NEON_DEFAULTS,
    RunSpec,
    build_neon,
    cold_steps,
    components,
)
from botorch_nn_uq.acquisition import qLeakyExpectedImprovement
from botorch_nn_uq.bo import AcquisitionContext, composite_problem, step_seed
from botorch_nn_uq.generation import optimize_acqf_screened
from botorch_nn_uq.models import NEON
from botorch_nn_uq.nn import count_parameters
from botorch_nn_uq.posteriors import EnsembleIndexSampler
from botorch_nn_uq.problems import Brusselator

STAGES = ("posterior", "fit", "acquisition", "iteration")


@dataclass(frozen=True)
class Budget:
    r"""The profile's sizes and budgets (the protocol's, or the smoke test's)."""

    sizes: tuple[int, ...] = (5, 34)
    held_out: int = 10
    cold_steps: int = 2000
    warm_steps: int = 500
    batch_size: int = 1024
    full_batch_steps_timed: int = 2
    iterations: int = 30
    raw_samples: int = 256
    num_restarts: int = 10
    screening_indices: int = 16


SMOKE = Budget(
    sizes=(5, 8),
    held_out=2,
    cold_steps=20,
    warm_steps=5,
    batch_size=64,
    full_batch_steps_timed=1,
    raw_samples=16,
    num_restarts=2,
    screening_indices=4,
)


def brusselator_data(problem: Brusselator, n: int, path: Path) -> tuple[Tensor, Tensor]:
    r"""``n`` uniformly random inputs (seed 0) and their solutions (CPU tensors), cached
    in ``path``."""
    if path.exists():
        data = torch.load(path, map_location="cpu")
        if data["U"].shape[0] >= n:
            return data["U"][:n], data["H"][:n]
    unit = torch.rand(
        n, problem.dim, generator=torch.Generator().manual_seed(0), dtype=torch.float64
    )
    U = problem.bounds[0] + (problem.bounds[1] - problem.bounds[0]) * unit
    H = problem.h(U)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"U": U, "H": H}, path)
    return U, H


def now() -> float:
    r"""``time.perf_counter()`` once every queued GPU kernel has run (a GPU computes
    asynchronously); the clock itself where CUDA was never used."""
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()
    return time.perf_counter()


class Stopwatch:
    r"""``with Stopwatch() as watch: ...`` leaves the block's wall-clock seconds, up to
    its last GPU kernel, in ``watch.seconds``."""

    def __enter__(self) -> Stopwatch:
        self.start = now()
        return self

    def __exit__(self, *exception: object) -> None:
        self.seconds = now() - self.start


def held_out_error(model: NEON, problem: Brusselator, U: Tensor, H: Tensor) -> float:
    r"""RMSE of the posterior mean on held-out solutions over their standard deviation."""
    with torch.no_grad():
        mean = model.posterior(U.to(model.train_X).unsqueeze(-2)).mean.squeeze(-2)
    target = problem.flatten(H).to(mean)
    return float((mean - target).pow(2).mean().sqrt() / target.std())


def posterior_stage(problem: Brusselator, U: Tensor, H: Tensor, budget: Budget) -> str:
    r"""Seconds per candidate of the full-bank posterior, by precision and chunking."""
    lines = [
        "| dtype | chunk | no gradient (s / candidate) | with gradient (s / candidate) |",
        "| --- | --- | --- | --- |",
    ]
    rows_per_candidate = problem.num_grid_points * 128
    for dtype in (torch.float64, torch.float32):
        for label, chunk_rows in (
            ("whole candidate", rows_per_candidate),
            ("2^17 rows (default)", 2**17),
        ):
            model = build_neon(problem, U, H, dtype, epochs=1, evaluation_chunk_rows=chunk_rows)
            model.fit(seed=0)
            X = torch.rand(4, 1, problem.dim, generator=torch.Generator().manual_seed(1))
            X = X.to(dtype=dtype, device=U.device)
            with torch.no_grad():
                model.posterior(X[:1])  # the first call's one-off costs are not timed
                with Stopwatch() as plain:
                    model.posterior(X)
            X.requires_grad_(True)
            with Stopwatch() as gradient:
                model.posterior(X).mean.pow(2).sum().backward()
            lines.append(
                f"| {str(dtype).removeprefix('torch.')} | {label} | {plain.seconds / 4:.3f} "
                f"| {gradient.seconds / 4:.3f} |"
            )
    return "\n".join(lines) + "\n\n" + compiled_effect(model, X.detach()) + "\n"


def compiled(function: Callable[..., Tensor]) -> Callable[..., Tensor]:
    r"""``torch.compile(function)`` (default mode), without the warnings of torch's own
    internals: inductor imports ``torch.utils.mkldnn`` (deprecated ``torch.jit``
    decorators), and dynamo's tracing reads ``.grad`` of non-leaf tensors."""

    def quietly(call: Callable[..., Tensor], *args: Any, **kwargs: Any) -> Any:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "`torch.jit.script_method` is deprecated")
            warnings.filterwarnings("ignore", "The .grad attribute of a Tensor that is not")
            return call(*args, **kwargs)

    compiled_function = quietly(torch.compile, function)
    return partial(quietly, compiled_function)


def compiled_effect(model: NEON, X: Tensor) -> str:
    r"""What ``torch.compile`` of the whole network (default mode) costs and saves on
    the full-bank posterior of the ``b x 1 x d`` candidates ``X``, against the same
    ``model`` in eager mode."""
    seconds = {}
    means = {}
    for mode in ("eager", "compiled"):
        if mode == "compiled":
            model.network.forward = compiled(model.network.forward)
        # Compilation happens at the first calls of each shape, so these are untimed.
        with Stopwatch() as first:
            with torch.no_grad():
                model.posterior(X)
            model.posterior(X.clone().requires_grad_(True)).mean.pow(2).sum().backward()
        with torch.no_grad(), Stopwatch() as plain:
            means[mode] = model.posterior(X).mean
        with Stopwatch() as gradient:
            model.posterior(X.clone().requires_grad_(True)).mean.pow(2).sum().backward()
        seconds[mode] = (first.seconds, plain.seconds / len(X), gradient.seconds / len(X))
    del model.network.forward
    change = (means["compiled"] - means["eager"]).abs().max() / means["eager"].abs().max()
    (eager_first, eager_plain, eager_gradient), (compiling, plain, gradient) = seconds.values()
    return (
        f"Compiling the network (`torch.compile`, {str(X.dtype).removeprefix('torch.')}, "
        f"default chunks): the first calls without and with gradient (compilation) take "
        f"{compiling:.0f} s (eager {eager_first:.1f} s); "
        f"then {plain:.3f} s / candidate without gradient (eager {eager_plain:.3f}) and "
        f"{gradient:.3f} s with it (eager {eager_gradient:.3f}); the posterior mean changes "
        f"by at most {float(change):.1e} (relative)."
    )


def runner_spec(budget: Budget) -> RunSpec:
    r"""The protocol-3 runner's Brusselator run (``neon_composite.NEON_DEFAULTS``) with the
    budget's sizes and step budgets."""
    return RunSpec(
        "brusselator",
        "neon+q-leaky-ei",
        seed=0,
        n_initial=budget.sizes[0],
        iterations=budget.iterations,
        steps=budget.cold_steps,
        num_restarts=budget.num_restarts,
        raw_samples=budget.raw_samples,
        **NEON_DEFAULTS["brusselator"]
        | {
            "batch_size": budget.batch_size,
            "warm_steps": budget.warm_steps,
            "screening_indices": budget.screening_indices,
        },
    )


def fit_stage(problem: Brusselator, data: tuple[Tensor, Tensor], budget: Budget) -> str:
    r"""Seconds of the authors' and of the runner's fits at each data size."""
    U_all, H_all = data
    U_test, H_test = U_all[-budget.held_out :], H_all[-budget.held_out :]
    lines = [
        "| evaluations | fit | steps | s / step | s / fit | held-out error |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for n in budget.sizes:
        U, H = U_all[:n], H_all[:n]
        iteration = n - budget.sizes[0]
        authors_steps = cold_steps(runner_spec(budget), iteration)
        timed_steps = budget.full_batch_steps_timed
        full_batch = build_neon(problem, U, H, torch.float64, epochs=timed_steps)
        with Stopwatch() as watch:
            full_batch.fit(seed=0)
        per_step = watch.seconds / timed_steps
        lines.append(
            f"| {n} | authors: full batch, float64 (extrapolated from {timed_steps} steps) "
            f"| {authors_steps} | {per_step:.2f} | {per_step * authors_steps:.0f} | - |"
        )
        mini_batch = {"batch_size": budget.batch_size}
        # The cold fit is the one of the iteration before (without the last point); the
        # warm start continues from it on all n points, as in a run.
        cold = build_neon(
            problem,
            U[:-1],
            H[:-1],
            torch.float32,
            epochs=authors_steps,
            max_steps=authors_steps,
            **mini_batch,
        )
        with Stopwatch() as watch:
            cold.fit(seed=0)
        lines.append(
            f"| {n - 1} | cold: {budget.batch_size}-row batches, float32 | {authors_steps} "
            f"| {watch.seconds / authors_steps:.3f} | {watch.seconds:.0f} "
            f"| {held_out_error(cold, problem, U_test, H_test):.3f} |"
        )
        warm = build_neon(
            problem,
            U,
            H,
            torch.float32,
            epochs=budget.warm_steps,
            max_steps=budget.warm_steps,
            **mini_batch,
        )
        with Stopwatch() as watch:
            warm.fit(seed=0, warm_start=cold)
        lines.append(
            f"| {n} | warm start from the cold fit, float32 "
            f"| {budget.warm_steps} | {watch.seconds / budget.warm_steps:.3f} "
            f"| {watch.seconds:.0f} "
            f"| {held_out_error(warm, problem, U_test, H_test):.3f} |"
        )
    return "\n".join(lines) + "\n"


class ForwardClock:
    r"""Counts the forward seconds and points of an acquisition function, split by whether
    gradients were recorded (L-BFGS) or not (scoring)."""

    def __init__(self, acquisition: AcquisitionFunction) -> None:
        self.seconds = {True: 0.0, False: 0.0}
        self.points = {True: 0, False: 0}
        forward = acquisition.forward

        def clocked(X: Tensor) -> Tensor:
            start = now()
            values = forward(X)
            gradient = torch.is_grad_enabled() and X.requires_grad
            self.seconds[gradient] += now() - start
            self.points[gradient] += math.prod(X.shape[:-2])
            return values

        acquisition.forward = clocked

    def describe(self) -> str:
        r"""``seconds (points)`` without and with gradients."""
        return " | ".join(f"{self.seconds[g]:.1f} ({self.points[g]})" for g in (False, True))


def leaky_ei(model: NEON, problem: Brusselator, best_f: Tensor) -> qLeakyExpectedImprovement:
    r"""The runner's acquisition: q-leaky EI of ``-g`` over the model's whole bank."""
    return qLeakyExpectedImprovement(
        model,
        best_f=best_f,
        sampler=EnsembleIndexSampler(torch.Size([model.function_bank_size]), seed=0),
        objective=problem.objective(),
    )


def timed_proposal(
    model: NEON, problem: Brusselator, best_f: Tensor, budget: Budget, optimize_on: str | None
) -> tuple[Tensor, ForwardClock, ForwardClock | None]:
    r"""A proposal of BoTorch's ``optimize_acqf`` (``optimize_on=None``) or of
    ``optimize_acqf_screened``, and the clocks of the full-bank and of the screening
    acquisition (``None`` without screening)."""
    full = leaky_ei(model, problem, best_f)
    clock, screening_clock = ForwardClock(full), None
    bounds = problem.bounds.to(best_f)
    settings = {"q": 1, "num_restarts": budget.num_restarts, "raw_samples": budget.raw_samples}
    with manual_seed(0):
        if optimize_on is None:
            candidate, _ = optimize_acqf(full, bounds=bounds, options={"seed": 0}, **settings)
        else:
            screening_model = model.function_bank_subset(budget.screening_indices)
            screening = leaky_ei(screening_model, problem, best_f)
            screening_clock = ForwardClock(screening)
            candidate, _ = optimize_acqf_screened(
                full, screening, bounds=bounds, optimize_on=optimize_on, seed=0, **settings
            )
    return candidate, clock, screening_clock


def acquisition_stage(problem: Brusselator, data: tuple[Tensor, Tensor], budget: Budget) -> str:
    r"""Seconds and the chosen point's full-bank value of each acquisition optimiser."""
    lines = [
        "| evaluations | optimiser | seconds | 128 indices: forward s, no gradient (points) "
        "| 128 indices: forward s, gradient (points) | screening: forward s, no gradient "
        "(points) | screening: forward s, gradient (points) "
        "| full-bank leaky EI of the proposal |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    precision = []
    for n in budget.sizes:
        U, H = data[0][:n], data[1][:n]
        best_f = -problem.g(H).min()
        model = build_neon(
            problem,
            U,
            H,
            torch.float32,
            epochs=budget.cold_steps,
            max_steps=budget.cold_steps,
            batch_size=budget.batch_size,
        ).fit(seed=0)
        referee = leaky_ei(model, problem, best_f.float())
        for optimize_on, label in (
            (None, "BoTorch optimize_acqf, 128 indices throughout"),
            ("full", f"screened ({budget.screening_indices}), L-BFGS on 128 indices"),
            ("screening", f"screened, L-BFGS on {budget.screening_indices} indices"),
        ):
            with Stopwatch() as watch:
                candidate, clock, screening = timed_proposal(
                    model, problem, best_f.float(), budget, optimize_on
                )
            with torch.no_grad():
                value = float(referee(candidate.unsqueeze(0)))
            screened = "- | -" if screening is None else screening.describe()
            lines.append(
                f"| {n} | {label} | {watch.seconds:.0f} | {clock.describe()} | {screened} "
                f"| {value:.4e} |"
            )
        precision.append(float64_effect(model, problem, U, H, best_f))
    return "\n".join(lines) + "\n\n" + "\n".join(precision) + "\n"


def float64_effect(model: NEON, problem: Brusselator, U: Tensor, H: Tensor, best_f: Tensor) -> str:
    r"""The largest relative change of the full-bank leaky EI on 64 random candidates when
    the same trained network (fitted in float32 on ``U``, ``H``) evaluates in float64."""
    double = build_neon(problem, U, H, torch.float64, epochs=1)
    state = model.state_dict()
    double.load_state_dict(
        {
            name: value.double() if value.is_floating_point() else value
            for name, value in state.items()
        }
    )
    X = torch.rand(
        64, 1, problem.dim, generator=torch.Generator().manual_seed(2), dtype=torch.float64
    ).to(U.device)
    bounds = problem.bounds.to(X)
    X = bounds[0] + (bounds[1] - bounds[0]) * X
    with torch.no_grad():
        single = leaky_ei(model, problem, best_f.float())(X.float()).double()
        exact = leaky_ei(double, problem, best_f)(X)
    change = ((single - exact).abs() / exact.abs().clamp_min(1e-30)).max()
    same_best = bool(single.argmax() == exact.argmax())
    return (
        f"- {U.shape[0]} evaluations: float32 against float64 on 64 random candidates: "
        f"largest relative change of the leaky EI {float(change):.1e}; the same best "
        f"candidate: {same_best}."
    )


def iteration_stage(problem: Brusselator, data: tuple[Tensor, Tensor], budget: Budget) -> str:
    r"""The protocol-3 runner's own iterations at the last two data sizes, end to end
    (the surrogate and proposer of ``neon_composite.py`` with its Brusselator settings,
    seeded as the BO core seeds those steps): the first with a cold fit, the second
    warm-started from it, each timed as fit plus acquisition."""
    spec = runner_spec(budget)
    parts = components(spec, problem)
    objective = composite_problem(problem).objective
    last = budget.sizes[-1] - budget.sizes[0]
    lines = [
        "| iteration | evaluations | fit | steps | fit (s) | acquisition (s) | iteration (s) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    previous = None
    bounds = problem.bounds.to(data[0])
    for it in (last - 1, last):
        n = spec.n_initial + it
        U, Y = data[0][:n], problem.flatten(data[1][:n])
        seed = step_seed(spec.seed, it + 1)
        with Stopwatch() as fit_watch:
            model = parts["surrogate"].build(U, Y, bounds, seed, warm_start=previous)
        context = AcquisitionContext(
            U, Y, bounds, seed, objective=objective.mc_objective, step=it + 1
        )
        with Stopwatch() as acquisition_watch:
            parts["proposer"].propose(model, context, 1, torch.Generator())
        if previous is None:
            fit, steps = "cold", cold_steps(spec, it)
        else:
            fit, steps = "warm start", spec.warm_steps
        seconds = fit_watch.seconds + acquisition_watch.seconds
        lines.append(
            f"| {it} | {n} | {fit} | {steps} | {fit_watch.seconds:.0f} "
            f"| {acquisition_watch.seconds:.0f} | {seconds:.0f} |"
        )
        previous = model
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> Path:
    r"""Run the profile; returns the path of the markdown summary."""
    parser = runner_parser(__doc__, out=Path("benchmarks/results/neon_profile"))
    parser.add_argument("--stages", nargs="+", default=list(STAGES), choices=STAGES)
    add_device_option(parser)
    args = parser.parse_args(argv)
    use_threads(args.threads)
    budget = SMOKE if args.smoke else Budget()
    problem = Brusselator(grid_size=8, t_final=1.0, dt=0.05) if args.smoke else Brusselator()
    data = brusselator_data(problem, max(budget.sizes) + budget.held_out, args.out / "data.pt")
    data = tuple(tensor.to(args.device) for tensor in data)
    first = (data[0][: budget.sizes[0]], data[1][: budget.sizes[0]])
    parameters = count_parameters(
        build_neon(problem, *first, torch.float32, epochs=1).fit(seed=0).network
    )
    sections = [
        summary_header(__file__, argv, args.threads),
        f"NEON (Brusselator preset): {parameters:,} trainable parameters (the paper: 38,820).",
    ]
    stages = {
        "posterior": lambda: posterior_stage(problem, *first, budget),
        "fit": lambda: fit_stage(problem, data, budget),
        "acquisition": lambda: acquisition_stage(problem, data, budget),
        "iteration": lambda: iteration_stage(problem, data, budget),
    }
    for stage in args.stages:
        with Stopwatch() as watch:
            text = stages[stage]()
        sections.append(f"## {stage} ({watch.seconds:.0f} s)\n\n{text}")
    summary = device_path(args.out / "summary.md", args.device)
    print(write_text(summary, "\n\n".join(sections)))
    return summary


if __name__ == "__main__":
    main()
