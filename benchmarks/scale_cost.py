"""Protocol 6, cost part: seconds and memory of one BO step as the data grow.

For every n (default 500, 1,000, 2,000, 5,000, 10,000) and every method, on ``n``
uniform points of Ackley-20 (the large-n problem of protocol 6), it measures the steady
state, what every step of a BO loop pays:

- a warm-up, untimed: the same method fitted on the data's first 32 points (networks: 10
  optimizer steps), refitted warm, and every proposal below made once on that model (at
  most 2 points, 64 candidates, 2 restarts), so the process's imports and first calls
  (BoTorch's ``Normalize`` pulls in ``torch._refs``, sympy and ``torch._dynamo``, about
  1.1-1.5 s on a CPU and 5 s on a GPU) are paid before any clock starts;
- ``first_fit``: the first fit from scratch at full size (the registered surrogate; the
  GP maximises its exact marginal likelihood), which still pays what the tiny warm-up
  did not (the allocator growing to n rows, kernels for the larger shapes);
- ``fit``: the same fit again (same data and seed), the steady state: the steps below
  add this one;
- ``warm``: one refit after adding 100 points, warm-started from the fit (the package's
  networks continue for ``--warm-start-steps`` steps; VBLL from its parameters with the
  same step cap; the GP starts its marginal-likelihood optimisation from the previous
  hyperparameters; the searched ensembles, which search anew at every fit, have none);
- ``q1``: one ``optimize_acqf`` call for q = 1 (LogEI on the GP, qLogEI on the networks,
  10 restarts, 512 raw samples; VBLL: one ``BLLMaxPosteriorSampling`` draw);
- ``q100``: one batch of q = 100 (batch Thompson sampling over 4,096 candidates for the
  GP and the package's networks; ``BLLMaxPosteriorSampling`` for VBLL);
- with ``--large-batch Q``, ``qQ``: one batch of q = Q the same way, over
  ``max(4096, 10 Q)`` candidates (q = 1,000: 10,000 candidates);
- ``peak MB``: the growth of the process's peak resident memory over the measurement
  after the warm-up (on a GPU also ``device peak MB``, the peak of torch's allocations
  there after the warm-up).

Every (method, n) is measured in a fresh process with ``--threads`` torch threads (default
one; the same setting for all methods), so peak memory belongs to that measurement alone.
Times are the process's CPU seconds: with one thread they equal the wall-clock seconds on
an idle core, and unlike wall-clock they do not grow when other jobs share the machine.
With ``--device cuda`` the data, models and proposals live on the GPU and times are
wall-clock seconds up to the GPU's last kernel (``torch.cuda.synchronize``), since the
GPU's work is not the process's CPU time; the device's one-off start-up (its context, the
linear-algebra libraries' handles) and the warm-up are paid before the clock starts; those
measurements are stored apart (their files end in the device's name). Besides the
registered surrogates, ``gp-turbo`` is GP-TuRBO-1's GP (``benchmarks.gp_peers``:
Matern-5/2 ARD with TuRBO's constraints, exact Cholesky factorisations at every n), which
TuRBO-1 refits from scratch at every step (no warm refit). A measurement that runs past
``--timeout`` seconds (two full fits included) is reported as such, with the n it could
not reach. Results are stored per measurement in ``--out/runs/`` (an interrupted benchmark
resumes), and ``--out`` receives ``cost.csv``, ``cost.md`` and ``cost.png`` (seconds
against n, log-log). Rows stored by versions before the warm-up load as they are: they
have no ``first_fit`` ("n/a" in the table), and their ``fit`` is the first of a fresh
process, imports and first calls included.

Examples:
    python -m benchmarks.scale_cost
    python -m benchmarks.scale_cost --methods gp deep-ensemble --points 500 5000
    python -m benchmarks.scale_cost --methods hyper-deep-ensemble nes-rs autodeuq \
        --points 500 5000
    python -m benchmarks.scale_cost --device cuda --methods gp deep-ensemble --points 500 5000
    python -m benchmarks.scale_cost --device cuda --methods deep-ensemble gp-turbo \
        --points 10000 --large-batch 1000
    python -m benchmarks.scale_cost --smoke
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from benchmarks.common import (
    add_device_option,
    device_path,
    device_seconds,
    ignore_optimizer_retry_warnings,
    integer_argument,
    pyplot,
    runner_parser,
    save_figure,
    summary_header,
    use_threads,
    write_json_atomically,
)
from botorch_nn_uq.bo import write_rows_csv

if TYPE_CHECKING:
    from botorch.models.model import Model

    from botorch_nn_uq.bo import AcquisitionContext

METHODS = ("gp", "deep-ensemble", "mc-dropout", "neon", "vbll")
# Exact GPs, measured up to --gp-max-points: GP-TuRBO-1's GP is measured on request.
GP_METHODS = ("gp", "gp-turbo")
# Searched ensembles: a whole search per fit, measured on request.
SEARCHED_METHODS = ("hyper-deep-ensemble", "nes-rs", "nes-re", "autodeuq")
# What proposes the q = 1 point and the q = 100 batch for each method.
Q1_ACQUISITION = {"gp": "logei", "gp-turbo": "logei", "vbll": "vbll-ts"}
Q100_ACQUISITION = {"vbll": "vbll-ts"}
PHASES = ("first_fit", "fit", "warm", "q1", "q100")
#: The warm-up before the clock: a fit on this many of the data's points (networks:
#: this many optimizer steps), a warm refit of as many steps, and each timed proposal
#: once with at most this q, over this many Thompson-sampling candidates.
WARM_UP_POINTS = 32
WARM_UP_STEPS = 10
WARM_UP_Q = 2
WARM_UP_CANDIDATES = 64


def batch_candidates(q: int) -> int:
    r"""The Thompson-sampling candidates of a batch of ``q``: ``max(4096, 10 q)`` (q = 100
    keeps protocol 6's 4,096)."""
    return max(4096, 10 * q)


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _clock(device: torch.device) -> Callable[[], float]:
    r"""The clock of a measurement on ``device``: the process's CPU seconds on the CPU;
    elsewhere wall-clock seconds once the device's queued work is done (a GPU's kernels
    run asynchronously and cost no CPU time)."""
    if device.type == "cpu":
        return time.process_time
    return lambda: device_seconds(str(device))


def _start_device(device: torch.device) -> None:
    r"""Pay ``device``'s one-off start-up (context, cuBLAS and cuSOLVER handles, the
    kernels of both precisions) before any clock runs, so the first measured phase does
    not carry it."""
    if device.type == "cpu":
        return
    for dtype in (torch.float32, torch.float64):
        matrix = torch.rand(64, 64, dtype=dtype, device=device)
        spd = matrix @ matrix.T + 64 * torch.eye(64, dtype=dtype, device=device)
        torch.linalg.solve_triangular(torch.linalg.cholesky(spd), matrix, upper=False)
    device_seconds(str(device))


def measure(
    method: str,
    n: int,
    dim: int,
    seed: int,
    warm_start_steps: int,
    threads: int,
    device: str = "cpu",
    large_batch: int | None = None,
) -> dict:
    r"""Time one method at one n, in the calling process (see the module docstring), which
    it runs on ``threads`` torch threads: it is the process of this measurement alone.

    Args:
        method: A registered surrogate (``vbll`` included).
        n: The number of training points.
        dim: The input dimension of Ackley.
        seed: Seed of the data, the fits and the proposals.
        warm_start_steps: Optimizer steps of the warm-started refit.
        threads: Torch's intra-op threads.
        device: The torch device of the data, the models and the proposals (the data
            are drawn on the CPU and moved, so every device measures the same points).
        large_batch: If given, a further batch of this q is timed as phase ``q<q>``.

    Returns:
        A dict with the seconds of every phase (CPU seconds on the CPU, wall-clock
        seconds elsewhere; ``first_fit`` and ``fit`` are the first and the second fit
        after the warm-up, ``warm`` is ``None`` for a method without a warm refit) and
        the peak-memory growth of the process in MB after the warm-up.
    """
    import benchmarks.vbll_peer  # noqa: F401  (registers the VBLL peer)
    from benchmarks.gp_peers import register as register_gp_peers
    from botorch_nn_uq.bo import get_surrogate
    from botorch_nn_uq.problems import get_bo_problem

    use_threads(threads)
    register_gp_peers()
    ignore_optimizer_retry_warnings()
    device = torch.device(device)
    _start_device(device)
    clock = _clock(device)
    problem = get_bo_problem("ackley", dim)
    bounds = problem.bounds.to(device)
    generator = torch.Generator().manual_seed(seed)
    unit = torch.rand(n + 100, dim, generator=generator, dtype=torch.float64).to(device)
    X = bounds[0] + (bounds[1] - bounds[0]) * unit
    Y = -problem.evaluate(X).unsqueeze(-1)
    surrogate = get_surrogate(method)
    batches = [
        ("q1", 1, Q1_ACQUISITION.get(method, "qlogei")),
        ("q100", 100, Q100_ACQUISITION.get(method, "ts")),
    ]
    if large_batch is not None:
        batches.append((f"q{large_batch}", large_batch, Q100_ACQUISITION.get(method, "ts")))
    _warm_up(method, X[:WARM_UP_POINTS], Y[:WARM_UP_POINTS], bounds, seed, batches)
    # Memory is measured from here, so the peaks are the measurement's own and not the
    # imports' and first calls'.
    baseline_mb = _peak_rss_mb()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    seconds = {}

    # The same fit twice: the first still pays what the tiny warm-up did not reach (memory
    # the allocator grows to n rows, kernels chosen for the larger shapes); the second is
    # what every later fit of a BO loop costs.
    for phase in ("first_fit", "fit"):
        start = clock()
        model = surrogate.build(X[:n], Y[:n], bounds, seed)
        seconds[phase] = clock() - start

    seconds["warm"] = None
    if _has_warm_refit(method):
        start = clock()
        _refit(method, model, X, Y, bounds, seed, warm_start_steps)
        seconds["warm"] = clock() - start

    for phase, q, acquisition in batches:
        context = _context(X[:n], Y[:n], bounds, seed, batch_candidates(q))
        start = clock()
        _propose(acquisition, model, context, q, num_restarts=10, raw_samples=512)
        seconds[phase] = clock() - start
    peaks = {"peak_mb": _peak_rss_mb() - baseline_mb}
    if device.type == "cuda":
        peaks["device_peak_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    return {**seconds, **peaks}


def _warm_up(
    method: str,
    X: Tensor,
    Y: Tensor,
    bounds: Tensor,
    seed: int,
    batches: Sequence[tuple[str, int, str]],
) -> None:
    r"""Run every phase of a measurement once on a tiny problem, untimed, so that the
    imports and first calls (BoTorch's ``Normalize`` pulls in ``torch._refs``, sympy and
    ``torch._dynamo``; a GPU loads its kernels) are paid before any clock starts.

    Args:
        method: The registered surrogate.
        X: The warm-up's inputs (the first :data:`WARM_UP_POINTS` points of the data).
        Y: Their observations.
        bounds: The problem's ``2 x d`` box.
        seed: Seed of the fits and the proposals.
        batches: ``(phase, q, acquisition)`` of every timed proposal: each acquisition
            proposes once, with at most :data:`WARM_UP_Q` points, from
            :data:`WARM_UP_CANDIDATES` candidates or few restarts.
    """
    from botorch_nn_uq.bo import get_surrogate

    surrogate = get_surrogate(method)
    # A network's first steps make all its first calls; the remaining steps would only
    # cost time. The other methods (the GPs, the searched ensembles) take no step cap.
    cap = {"max_steps": WARM_UP_STEPS} if surrogate.supports_warm_start else {}
    model = surrogate.build(X, Y, bounds, seed, **cap)
    if _has_warm_refit(method):
        _refit(method, model, X, Y, bounds, seed, WARM_UP_STEPS)
    context = _context(X, Y, bounds, seed, WARM_UP_CANDIDATES)
    for _, q, acquisition in batches:
        _propose(acquisition, model, context, min(q, WARM_UP_Q), num_restarts=2, raw_samples=32)


def _has_warm_refit(method: str) -> bool:
    r"""Whether ``method`` has a warm refit: the GP (from its hyperparameters) and the
    surrogates that warm-start from their weights."""
    from botorch_nn_uq.bo import get_surrogate

    return method == "gp" or get_surrogate(method).supports_warm_start


def _context(
    X: Tensor, Y: Tensor, bounds: Tensor, seed: int, candidates: int
) -> AcquisitionContext:
    r"""The ``AcquisitionContext`` of a proposal on ``X, Y`` in ``bounds``, with
    ``candidates`` Thompson-sampling candidates for a batch."""
    from botorch_nn_uq.bo import AcquisitionContext

    return AcquisitionContext(
        train_X=X, train_Y=Y, bounds=bounds, seed=seed, options={"num_candidates": candidates}
    )


def _refit(
    method: str, model: Model, X: Tensor, Y: Tensor, bounds: Tensor, seed: int, max_steps: int
) -> None:
    r"""The warm refit of ``model`` on ``X, Y``: the GP from its hyperparameters, a
    network from its weights for ``max_steps`` optimizer steps."""
    from botorch_nn_uq.bo import get_surrogate

    if method == "gp":
        _refit_gp_from(model, X, Y, bounds, seed)
    else:
        get_surrogate(method).build(X, Y, bounds, seed, warm_start=model, max_steps=max_steps)


def _propose(
    acquisition: str,
    model: Model,
    context: AcquisitionContext,
    q: int,
    num_restarts: int,
    raw_samples: int,
) -> None:
    r"""One proposal of ``q`` points with the registered ``acquisition``: its own
    proposer (Thompson sampling), else ``optimize_acqf`` of its acquisition function
    with ``num_restarts`` restarts from the best of ``raw_samples`` raw samples."""
    from botorch.optim import optimize_acqf
    from botorch.utils.sampling import manual_seed

    from botorch_nn_uq.bo import get_acquisition

    spec = get_acquisition(acquisition)
    if spec.propose is not None:
        spec.propose(model, context, q)
        return
    with manual_seed(context.seed):
        optimize_acqf(
            spec.build(model, context),
            context.bounds,
            q=q,
            num_restarts=num_restarts,
            raw_samples=raw_samples,
            options={"seed": context.seed},
        )


def _refit_gp_from(model, X, Y, bounds, seed) -> None:
    r"""Refit a ``SingleTaskGP`` on ``X, Y`` starting from ``model``'s hyperparameters."""
    from botorch.models import SingleTaskGP
    from botorch.models.transforms import Normalize, Standardize

    from botorch_nn_uq.fit import fit_model

    refit = SingleTaskGP(
        X,
        Y,
        input_transform=Normalize(X.shape[-1], bounds=bounds),
        outcome_transform=Standardize(1),
    )
    hyperparameters = {
        name: value for name, value in model.state_dict().items() if "transform" not in name
    }
    refit.load_state_dict(hyperparameters, strict=False)
    fit_model(refit, seed=seed)


def _worker(arguments: tuple, queue: multiprocessing.Queue) -> None:
    queue.put(measure(*arguments))


def run_isolated(arguments: tuple, timeout: float) -> dict | None:
    r"""``measure(*arguments)`` in a fresh process; ``None`` past ``timeout`` seconds."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_worker, args=(arguments, queue))
    process.start()
    process.join(timeout)
    if process.is_alive():
        process.kill()
        process.join()
        return None
    if process.exitcode != 0:
        raise RuntimeError(f"measurement {arguments} failed with exit code {process.exitcode}")
    return queue.get()


def _phases(large_batch: int | None) -> tuple[str, ...]:
    r"""The timed phases, with ``q<large_batch>`` if given."""
    return PHASES if large_batch is None else (*PHASES, f"q{large_batch}")


def csv_rows(rows: Sequence[dict], large_batch: int | None = None) -> list[dict]:
    r"""``rows`` with the same columns each, as a CSV file needs: ``None`` where a row
    has no value (a measurement that timed out, a row stored before its phase was
    timed)."""
    columns = ["method", "n", "timed_out", "timeout", *_phases(large_batch), "peak_mb"]
    if any("device_peak_mb" in row for row in rows):
        columns.append("device_peak_mb")
    return [{column: row.get(column) for column in columns} for row in rows]


def table(
    rows: Sequence[dict],
    methods: Sequence[str],
    points: Sequence[int],
    large_batch: int | None = None,
) -> str:
    r"""A markdown table: one row per (n, method), the seconds of each phase (and of the
    batch of ``large_batch`` with its step, if given), and the peak memory (on a GPU also
    the device's). The steps add the steady-state fit. A row stored before the first fit
    was timed apart has none ("n/a"); its fit is then its process's first."""
    phases = _phases(large_batch)
    on_device = any("device_peak_mb" in row for row in rows)
    headers = ["n", "method", "first fit s", "fit s", "warm refit s", "q = 1 s", "q = 100 s"]
    if large_batch is not None:
        headers.append(f"q = {large_batch:,} s")
    headers.append("step s (fit + q = 100)")
    if large_batch is not None:
        headers.append(f"step s (fit + q = {large_batch:,})")
    headers.append("peak MB")
    if on_device:
        headers.append("device peak MB")
    lines = ["| " + " | ".join(headers) + " |", "|" + " --- |" * len(headers)]
    lookup = {(row["method"], row["n"]): row for row in rows}
    for n in points:
        for method in methods:
            row = lookup.get((method, n))
            if row is None:
                continue
            if row["timed_out"]:
                blanks = " |" * (len(headers) - 3)
                lines.append(f"| {n} | {method} | past {row['timeout']:.0f} s |{blanks}")
                continue
            cells = ["n/a" if row.get(phase) is None else f"{row[phase]:.2f}" for phase in phases]
            cells.append(f"{row['fit'] + row['q100']:.2f}")
            if large_batch is not None:
                cells.append(f"{row['fit'] + row[f'q{large_batch}']:.2f}")
            cells.append(f"{row['peak_mb']:.0f}")
            if on_device:
                cells.append(f"{row['device_peak_mb']:.0f}")
            lines.append(f"| {n} | {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(
    rows: Sequence[dict], methods: Sequence[str], threads: int, path: Path, device: str = "cpu"
) -> None:
    r"""Seconds of a fit and of a whole q = 100 step against n, log-log (measured on
    ``device``)."""
    figure, axes = pyplot().subplots(1, 2, figsize=(10, 4), sharey=True)
    for method in methods:
        done = sorted(
            (row for row in rows if row["method"] == method and not row["timed_out"]),
            key=lambda row: row["n"],
        )
        if not done:
            continue
        n = [row["n"] for row in done]
        axes[0].plot(n, [row["fit"] for row in done], marker="o", label=method)
        axes[1].plot(n, [row["fit"] + row["q100"] for row in done], marker="o", label=method)
    for axis, title in zip(
        axes, ("fit from scratch (steady state)", "step: fit + batch of 100"), strict=True
    ):
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel("training points n")
        axis.set_title(title)
    axes[0].set_ylabel(f"{seconds_phrase(device)} ({threads_phrase(threads)})")
    axes[1].legend()
    save_figure(figure, path)


def seconds_phrase(device: str) -> str:
    r"""What the times measured on ``device`` are: ``"CPU seconds"`` on the CPU, else
    ``"wall-clock seconds on <device>"``."""
    return "CPU seconds" if device == "cpu" else f"wall-clock seconds on {device}"


def threads_phrase(threads: int) -> str:
    r"""``"one thread"`` or ``"<threads> threads"``."""
    return "one thread" if threads == 1 else f"{threads} threads"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = runner_parser(
        __doc__,
        out=Path("benchmarks/results/scale_cost"),
        smoke="tiny sizes (for the test suite): n = 40, GP and deep ensemble",
    )
    parser.add_argument(
        "--methods",
        nargs="+",
        default=list(METHODS),
        choices=METHODS + SEARCHED_METHODS + ("gp-turbo",),
    )
    parser.add_argument("--points", nargs="+", type=int, default=[500, 1000, 2000, 5000, 10000])
    parser.add_argument("--dim", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warm-start-steps", type=int, default=100)
    parser.add_argument(
        "--timeout", type=float, default=1200.0, help="seconds allowed per (method, n)"
    )
    parser.add_argument(
        "--stored-only",
        action="store_true",
        help="measure nothing: the table and figure of the rows stored by earlier runs",
    )
    parser.add_argument(
        "--large-batch",
        type=integer_argument(2),
        default=None,
        help="also time one batch of this q (Thompson sampling over max(4096, 10 q) "
        "candidates), e.g. 1000",
    )
    add_device_option(parser)
    parser.add_argument(
        "--gp-max-points",
        type=int,
        default=5000,
        help="the largest n measured for the exact GPs, gp and gp-turbo (a fit is O(n^3) in "
        "time and O(n^2) in memory: n = 10,000 costs eight times n = 5,000)",
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.points, args.dim, args.methods = [40], 3, ["gp", "deep-ensemble"]
    if min(args.points) < 2 or args.dim < 2:
        parser.error("--points must be at least 2 and --dim at least 2.")
    return args


def main(argv: Sequence[str] | None = None) -> Path:
    r"""Run the benchmark; returns the path of the markdown table."""
    args = parse_args(argv)
    use_threads(args.threads)
    store = args.out / "runs"
    store.mkdir(parents=True, exist_ok=True)
    rows = []
    for n in args.points:
        for method in args.methods:
            name = f"{method}_n{n}_d{args.dim}_seed{args.seed}_w{args.warm_start_steps}"
            if args.large_batch is not None:
                name += f"_q{args.large_batch}"
            path = device_path(store / f"{name}.json", args.device)
            if path.exists():
                rows.append(json.loads(path.read_text()))
                continue
            if args.stored_only or (method in GP_METHODS and n > args.gp_max_points):
                continue
            arguments = (
                method,
                n,
                args.dim,
                args.seed,
                args.warm_start_steps,
                args.threads,
                args.device,
                args.large_batch,
            )
            result = run_isolated(arguments, args.timeout)
            row = {"method": method, "n": n, "timed_out": result is None, "timeout": args.timeout}
            row.update(result or {})
            write_json_atomically(row, path)
            rows.append(row)
            shown = (
                "timed out"
                if result is None
                else ", ".join(
                    f"{key} {value:.2f}" for key, value in result.items() if value is not None
                )
            )
            print(f"n {n:6d} {method:14s} {shown}", flush=True)
    write_rows_csv(csv_rows(rows, args.large_batch), args.out / "cost.csv")
    markdown = args.out / "cost.md"
    markdown.write_text(
        f"{summary_header(__file__, argv, args.threads)}\n\nAckley-{args.dim}, torch on "
        f"{threads_phrase(args.threads)}, one fresh process per row, "
        f"{seconds_phrase(args.device)}. Each process first warms up, untimed (a fit on "
        f"{WARM_UP_POINTS} points and every proposal once); first fit is its first fit at "
        "full size, fit the second, the steady state, which the steps add.\n\n"
        + table(rows, args.methods, args.points, args.large_batch)
    )
    plot(rows, args.methods, args.threads, args.out / "cost.png", args.device)
    print(markdown.read_text())
    return markdown


if __name__ == "__main__":
    main()
