"""The deep ensemble's BO step on one device, in one process: where its time goes.

The short check of the design note ``fast_fit.md``, for the registered ``deep-ensemble``
on Ackley-20 (uniform points, the data of ``scale_cost.py``):

- ``fits``: at each n of ``--points``, the first fit in the process, a second fit of the
  same data and seed (the steady state) and one batch of q = 100 (batch Thompson sampling
  over 4,096 candidates), in seconds up to the device's last kernel;
- ``syncs``: the host synchronisations of fits of 50 and of 100 optimizer steps at the
  first n, counted by ``torch.cuda.set_sync_debug_mode("warn")`` (CUDA only): a step
  that waits for the host shows as a difference growing with the steps, the training
  loop's one read per epoch as one per epoch;
- ``operations``: device kernels (CUDA) or ATen operations (CPU) per optimizer step, from
  ``torch.profiler`` over fits of 20 and 40 steps (the difference, per step);
- ``graph``: 500 training steps of the registered members (5 networks of widths 64, 64,
  batches of 256) eager and replayed as a CUDA graph, their seconds and the largest
  weight difference (CUDA only).

Results go to ``--out/step_check.json`` and ``--out/step_check.md``.

Examples:
    python -m benchmarks.step_check --device cuda
    python -m benchmarks.step_check --points 10000
    python -m benchmarks.step_check --smoke
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from benchmarks.common import (
    add_device_option,
    device_seconds,
    ignore_optimizer_retry_warnings,
    runner_parser,
    summary_header,
    use_threads,
    write_json_atomically,
)

#: The registered deep ensemble's training, as ``fit_members`` runs it.
MEMBERS, WIDTHS, BATCH_SIZE, STEPS, LEARNING_RATE, L2 = 5, (64, 64), 256, 500, 5e-3, 1e-6


def _data(n: int, dim: int, seed: int, device: torch.device):
    from botorch_nn_uq.problems import get_bo_problem

    problem = get_bo_problem("ackley", dim)
    bounds = problem.bounds.to(device)
    generator = torch.Generator().manual_seed(seed)
    unit = torch.rand(n, dim, generator=generator, dtype=torch.float64).to(device)
    X = bounds[0] + (bounds[1] - bounds[0]) * unit
    return X, -problem.evaluate(X).unsqueeze(-1), bounds


def _timed(device: torch.device, work: Callable[[], object]) -> tuple[float, object]:
    start = device_seconds(str(device))
    result = work()
    return device_seconds(str(device)) - start, result


def measure_fits(n: int, dim: int, seed: int, device: torch.device) -> dict[str, float]:
    r"""The first and the second fit of the registered deep ensemble at ``n`` points, and
    one batch of q = 100, in seconds."""
    from botorch_nn_uq.bo import AcquisitionContext, get_acquisition, get_surrogate

    X, Y, bounds = _data(n, dim, seed, device)
    surrogate = get_surrogate("deep-ensemble")
    first, _ = _timed(device, lambda: surrogate.build(X, Y, bounds, seed))
    second, model = _timed(device, lambda: surrogate.build(X, Y, bounds, seed))
    context = AcquisitionContext(
        train_X=X, train_Y=Y, bounds=bounds, seed=seed, options={"num_candidates": 4096}
    )
    propose = get_acquisition("ts").propose
    batch, _ = _timed(device, lambda: propose(model, context, 100))
    return {"first_fit": first, "fit": second, "q100": batch, "step": second + batch}


def count_syncs(n: int, dim: int, seed: int, device: torch.device) -> dict[str, int] | None:
    r"""Host synchronisations of fits of 50 and of 100 optimizer steps (CUDA only), with
    the epochs each ran."""
    if device.type != "cuda":
        return None
    from botorch_nn_uq.bo import get_surrogate

    X, Y, bounds = _data(n, dim, seed, device)
    surrogate = get_surrogate("deep-ensemble")
    counts = {}
    for steps in (50, 100):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                model = surrogate.build(X, Y, bounds, seed, max_steps=steps)
            finally:
                torch.cuda.set_sync_debug_mode("default")
        counts[f"syncs_{steps}_steps"] = sum(
            "synchroniz" in str(warning.message) for warning in caught
        )
        counts[f"epochs_{steps}_steps"] = model.training_result.epochs_run
    return counts


def _members(dim: int, device: torch.device, dtype: torch.dtype):
    from botorch_nn_uq.nn import BatchedMLP

    seeds = list(range(MEMBERS))
    return BatchedMLP(dim, 1, WIDTHS, seeds, gaussian_head=True).to(device=device, dtype=dtype)


def _train(n: int, dim: int, seed: int, device: torch.device, steps: int, cuda_graphs: bool = True):
    from botorch_nn_uq.training import TrainingConfig, fit_members

    X, Y, _ = _data(n, dim, seed, device)
    Y = (Y - Y.mean()) / Y.std()
    X = (X - X.min(0).values) / (X.max(0).values - X.min(0).values)
    network = _members(dim, device, X.dtype)
    config = TrainingConfig(
        epochs=10**6,
        max_steps=steps,
        batch_size=BATCH_SIZE,
        learning_rate=LEARNING_RATE,
        cuda_graphs=cuda_graphs,
    )
    fit_members(network, X, Y, config, l2_regularization=L2)
    return network


def count_operations(n: int, dim: int, seed: int, device: torch.device) -> float:
    r"""Device kernels (CUDA) or ATen operations (CPU) per optimizer step."""
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]
    counts = []
    for steps in (20, 40):
        with profile(activities=activities) as profiler:
            _train(n, dim, seed, device, steps)
            device_seconds(str(device))
        events = profiler.events()
        if cuda:
            kernels = (event.device_type == torch.autograd.DeviceType.CUDA for event in events)
            counts.append(sum(kernels))
        else:
            # Operations the step calls, not those they call in turn.
            counts.append(sum(_top_level_aten(event) for event in events))
    return (counts[1] - counts[0]) / 20


def _top_level_aten(event) -> bool:
    parent = event.cpu_parent
    while parent is not None and not parent.name.startswith("aten::"):
        parent = parent.cpu_parent
    return event.name.startswith("aten::") and parent is None


def compare_graph_replay(n: int, dim: int, seed: int, device: torch.device) -> dict | None:
    r"""500 steps eager and replayed as a CUDA graph: seconds and the largest weight
    difference (CUDA only)."""
    if device.type != "cuda":
        return None
    results = {}
    networks = {}
    for name, cuda_graphs in (("graph", True), ("eager", False)):
        _train(n, dim, seed, device, 20, cuda_graphs)
        seconds, network = _timed(
            device, lambda graphs=cuda_graphs: _train(n, dim, seed, device, STEPS, graphs)
        )
        results[f"{name}_seconds"] = seconds
        networks[name] = network
    results["largest_weight_difference"] = max(
        (graphed - eager).abs().max().item()
        for graphed, eager in zip(
            networks["graph"].parameters(), networks["eager"].parameters(), strict=True
        )
    )
    return results


def table(results: dict) -> str:
    r"""The markdown summary of :func:`main`'s ``results``."""
    lines = [
        "| n | first fit s | fit s | q = 100 s | step s (fit + q = 100) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for n, row in results["fits"].items():
        lines.append(
            f"| {n} | {row['first_fit']:.3f} | {row['fit']:.3f} | {row['q100']:.3f} | "
            f"{row['step']:.3f} |"
        )
    unit = "kernels" if results["device"].startswith("cuda") else "ATen operations"
    lines += ["", f"- {unit} per optimizer step: {results['operations']:.1f}"]
    if results["syncs"] is not None:
        syncs = results["syncs"]
        lines.append(
            "- host synchronisations of a whole fit: "
            f"{syncs['syncs_50_steps']} at 50 steps ({syncs['epochs_50_steps']} epochs), "
            f"{syncs['syncs_100_steps']} at 100 steps ({syncs['epochs_100_steps']} epochs)"
        )
    if results["graph"] is not None:
        graph = results["graph"]
        lines.append(
            f"- {STEPS} steps: eager {graph['eager_seconds']:.3f} s, replayed as a CUDA graph "
            f"{graph['graph_seconds']:.3f} s; largest weight difference "
            f"{graph['largest_weight_difference']:.2e}"
        )
    return "\n".join(lines) + "\n"


def parse_args(argv: Sequence[str] | None):
    parser = runner_parser(
        __doc__,
        out=Path("benchmarks/results/step_check"),
        smoke="tiny sizes (for the test suite): n = 300, d = 3",
    )
    parser.add_argument("--points", nargs="+", type=int, default=[10_000, 100_000])
    parser.add_argument("--dim", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    add_device_option(parser)
    args = parser.parse_args(argv)
    if args.smoke:
        args.points, args.dim = [300], 3
    return args


def main(argv: Sequence[str] | None = None) -> Path:
    r"""Run the check; returns the path of the markdown summary."""
    args = parse_args(argv)
    use_threads(args.threads)
    ignore_optimizer_retry_warnings()
    device = torch.device(args.device)
    # The device's one-off start-up before any clock.
    device_seconds(str(torch.ones(1, device=device).device))
    first = args.points[0]
    results = {
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "fits": {},
    }
    for n in args.points:
        results["fits"][n] = measure_fits(n, args.dim, args.seed, device)
        print(f"n {n}: {results['fits'][n]}", flush=True)
    results["syncs"] = count_syncs(first, args.dim, args.seed, device)
    print(f"syncs: {results['syncs']}", flush=True)
    results["operations"] = count_operations(first, args.dim, args.seed, device)
    print(f"operations per step: {results['operations']}", flush=True)
    results["graph"] = compare_graph_replay(first, args.dim, args.seed, device)
    print(f"graph: {results['graph']}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    write_json_atomically(results, args.out / "step_check.json")
    markdown = args.out / "step_check.md"
    markdown.write_text(
        f"{summary_header(__file__, argv, args.threads)}\n\nAckley-{args.dim}, "
        f"{results['device_name']}, torch {results['torch']}.\n\n" + table(results)
    )
    print(markdown.read_text(), flush=True)
    return markdown


if __name__ == "__main__":
    main()
