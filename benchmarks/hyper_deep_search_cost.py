"""Cost of a hyper-deep ensemble fit in BO: the registered surrogate's search (20
configurations, 3-fold out-of-fold selection, stratification, refit; 300 epochs) trained
in float64 versus float32, side by side in one run, on the same data and seed.

For each number of BO points ``n`` (inputs uniform in ``[0, 1]^5``, a smooth objective) the
script fits the model in both precisions, interleaved over ``--repeats`` runs, and reports
the median wall-clock and CPU seconds, the ratio float64 / float32 and the ensemble's
out-of-fold validation NLL of each (so a speed-up that costs fit quality would show).
``--device`` fits on a torch device (default the CPU; the data are drawn on the CPU and
moved), the wall-clock taken up to the device's last kernel; the table of another device
goes to ``--out`` with the device's name before its suffix
(``hyper_deep_search_cost_cuda.md``).

Examples:
    python -m benchmarks.hyper_deep_search_cost
    python -m benchmarks.hyper_deep_search_cost --points 40 72 --repeats 5
    python -m benchmarks.hyper_deep_search_cost --smoke
    python -m benchmarks.hyper_deep_search_cost --device cuda
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from botorch.models.transforms import Normalize, Standardize

from benchmarks.common import (
    PrintedTable,
    add_device_option,
    device_path,
    device_seconds,
    runner_parser,
    use_threads,
    write_text,
)
from botorch_nn_uq.models import HyperDeepEnsemble

#: The registered BO surrogate's settings (``botorch_nn_uq.bo.acquisitions``).
BO_SEARCH = {"num_folds": 3, "epochs": 300}
PRECISIONS = {"float64": None, "float32": torch.float32}


def time_fit(
    num_points: int, training_dtype: torch.dtype | None, options: dict, device: str = "cpu"
) -> tuple[float, float, float]:
    r"""Wall-clock seconds, CPU seconds and validation NLL of one fit on ``num_points``
    on ``device``."""
    generator = torch.Generator().manual_seed(num_points)
    X = torch.rand(num_points, 5, generator=generator, dtype=torch.float64).to(device)
    Y = -(X - 0.3).pow(2).sum(-1, keepdim=True) + (6 * X[:, :1]).sin()
    model = HyperDeepEnsemble(
        X,
        Y,
        input_transform=Normalize(5),
        outcome_transform=Standardize(1),
        training_dtype=training_dtype,
        **options,
    )
    wall, cpu = device_seconds(device), time.process_time()
    model.fit(seed=0)
    wall = device_seconds(device) - wall
    return wall, time.process_time() - cpu, model.ensemble_validation_nll


def run(points: Sequence[int], repeats: int, options: dict, device: str = "cpu") -> str:
    r"""Time both precisions for every ``n`` on ``device`` and return a markdown table."""
    table = PrintedTable(
        [
            "n",
            "float64 wall (s)",
            "float32 wall (s)",
            "float64 / float32 (wall)",
            "float64 / float32 (CPU)",
            "validation NLL float64",
            "validation NLL float32",
        ]
    )
    for num_points in points:
        samples = {name: [] for name in PRECISIONS}
        # Interleaved repeats, so slow drifts of the machine hit both precisions alike.
        for _ in range(repeats):
            for name, dtype in PRECISIONS.items():
                samples[name].append(time_fit(num_points, dtype, options, device))
        wall = {name: statistics.median(s[0] for s in runs) for name, runs in samples.items()}
        cpu = {name: statistics.median(s[1] for s in runs) for name, runs in samples.items()}
        nll = {name: runs[0][2] for name, runs in samples.items()}
        table.add_row(
            [
                num_points,
                f"{wall['float64']:.2f}",
                f"{wall['float32']:.2f}",
                f"{wall['float64'] / wall['float32']:.2f}",
                f"{cpu['float64'] / cpu['float32']:.2f}",
                f"{nll['float64']:.3f}",
                f"{nll['float32']:.3f}",
            ]
        )
    return table.markdown()


def main(argv: Sequence[str] | None = None) -> str:
    r"""Run the benchmark; returns the markdown table (also written to ``--out``)."""
    parser = runner_parser(__doc__, out=Path("benchmarks/results/hyper_deep_search_cost.md"))
    parser.add_argument("--points", nargs="+", type=int, default=[40, 72])
    parser.add_argument("--repeats", type=int, default=3)
    add_device_option(parser)
    args = parser.parse_args(argv)
    use_threads(args.threads)
    options = dict(BO_SEARCH)
    if args.smoke:
        args.points, args.repeats = [12], 1
        options.update(epochs=3, num_candidates=3, hidden_widths=(8,))
    if min(args.points) < 6 or args.repeats < 1:
        parser.error("--points must be at least 6 (3 folds) and --repeats positive.")
    table = run(args.points, args.repeats, options, args.device)
    return write_text(device_path(args.out, args.device), table)


if __name__ == "__main__":
    main()
