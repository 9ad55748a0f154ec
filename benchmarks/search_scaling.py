"""Wall-clock of ensemble searches in-process versus on a local Ray instance.

Runs each search (NES-RS, NES-RE, AutoDEUQ) on one UCI split twice, side by side in one
run: with the default in-process pool training, and with ``RayExecutor`` on a local Ray
instance with ``--workers`` CPUs (Ray's start-up is timed separately). Checks that both
runs select the same ensemble (same candidate ids and weights) and writes a markdown
table.

``--data-dir`` defaults to ``$BOTORCH_NN_UQ_UCI_DIR``, else ``../shared/data/uci``
(``benchmarks.uci.default_uci_dir``). ``--threads`` sets the threads of this process
(the in-process search); the Ray workers are processes of their own. With ``--device
cuda`` the split's data and both searches are on the GPU, and every Ray task reserves
``1 / --workers`` of it (``RayExecutor(gpus_per_task=...)``: Ray hides the GPUs from tasks
that reserve none), so the workers share one GPU; times are wall-clock seconds either way.

Examples:
    python -m benchmarks.search_scaling --dataset boston
    python -m benchmarks.search_scaling --smoke --data-dir ../shared/data/uci
    python -m benchmarks.search_scaling --dataset boston --device cuda --workers 4
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.common import (
    PrintedTable,
    add_device_option,
    add_uci_data_option,
    runner_parser,
    uci_protocol_model,
    use_threads,
    write_text,
)
from benchmarks.uci import load_uci_split
from botorch_nn_uq.ensembles import ArchitectureSpace, RayExecutor
from botorch_nn_uq.models import AutoDEUQ, NESRandomSearch, NESRegularizedEvolution

SEARCHES = {
    "nes-rs": NESRandomSearch,
    "nes-re": NESRegularizedEvolution,
    "autodeuq": AutoDEUQ,
}


def run_search(name: str, data, budget: dict, executor) -> tuple[float, object]:
    r"""Fit one searched ensemble; returns (seconds, model)."""
    model = uci_protocol_model(
        SEARCHES[name], data.train_X, data.train_Y, executor=executor, **budget
    )
    start = time.perf_counter()
    model.fit(seed=0)
    return time.perf_counter() - start, model


def main(argv: Sequence[str] | None = None) -> str:
    r"""Run the comparison; returns the markdown table (also written to ``--out``)."""
    parser = runner_parser(__doc__, out=Path("benchmarks/results/search_scaling.md"))
    add_uci_data_option(parser)
    parser.add_argument("--dataset", default="boston")
    parser.add_argument("--split", type=int, default=0)
    parser.add_argument("--searches", nargs="+", default=list(SEARCHES), choices=list(SEARCHES))
    parser.add_argument("--pool-size", type=int, default=24)
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    add_device_option(parser)
    args = parser.parse_args(argv)
    use_threads(args.threads)
    if args.smoke:
        args.searches, args.pool_size, args.epochs = ["nes-rs"], 4, 3
    data = load_uci_split(args.data_dir, args.dataset, args.split).to(args.device)
    budget = {
        "pool_size": args.pool_size,
        "epochs": args.epochs,
        "population_size": max(2, args.pool_size // 3),
        "architecture_space": ArchitectureSpace(num_nodes=5),
    }
    start = time.perf_counter()
    ray_executor = RayExecutor(
        num_cpus=args.workers,
        init_kwargs={"include_dashboard": False, "log_to_driver": False},
        gpus_per_task=0.0 if args.device == "cpu" else 1 / args.workers,
    )
    ray_start = time.perf_counter() - start
    setting = (
        f"{args.dataset} split {args.split}, pool size {args.pool_size}, {args.epochs} epochs, "
        f"on {args.device}; Ray start-up {ray_start:.1f} s ({args.workers} workers)."
    )
    table = PrintedTable(["search", "in-process (s)", "Ray (s)", "speed-up", "same ensemble"])
    for name in args.searches:
        local_seconds, local = run_search(name, data, budget, None)
        ray_seconds, remote = run_search(name, data, budget, ray_executor)
        same = (
            local.search_history.selected_ids == remote.search_history.selected_ids
            and local.search_history.selected_weights == remote.search_history.selected_weights
        )
        table.add_row(
            [
                name,
                f"{local_seconds:.1f}",
                f"{ray_seconds:.1f}",
                f"{local_seconds / ray_seconds:.2f}",
                "yes" if same else "NO",
            ]
        )
    import ray

    ray.shutdown()
    return write_text(args.out, f"{setting}\n\n{table.markdown()}")


if __name__ == "__main__":
    main()
