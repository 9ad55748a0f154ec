"""Cost of batched ensemble training: wall-clock of K members trained as one batched
computation versus one member, and versus K members trained one after another.

For each setting (a BO-sized and a UCI-sized problem) the script times, side by side in
one run and with the same data, architecture and epochs:

- ``K = 1``: one member (``fit_members`` on a one-member ``BatchedMLP``);
- ``K batched``: ``K`` members as one batched computation;
- ``K sequential``: ``K`` one-member trainings in a Python loop;

and reports the medians over ``--repeats`` runs with the ratios ``batched / one`` (the
target is at most 1.5 for K = 5) and ``sequential / batched``. The members train on the
process's ``--threads`` torch threads; one run per thread count compares thread counts.
``--device`` trains on a torch device (default the CPU; the data are drawn on the CPU and
moved), timed up to the device's last kernel; the table of another device goes to
``--out`` with the device's name before its suffix (``ensemble_cost_cuda.md``).

Examples:
    python -m benchmarks.ensemble_training_cost
    python -m benchmarks.ensemble_training_cost --members 5 10 --threads 2 --repeats 5
    python -m benchmarks.ensemble_training_cost --smoke
    python -m benchmarks.ensemble_training_cost --device cuda --members 5 20
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from benchmarks.common import (
    PrintedTable,
    add_device_option,
    device_path,
    device_seconds,
    runner_parser,
    use_threads,
    write_text,
)
from botorch_nn_uq.nn import BatchedMLP
from botorch_nn_uq.training import TrainingConfig, fit_members


@dataclass(frozen=True)
class Setting:
    r"""One problem size: data shape, architecture and training budget."""

    name: str
    num_data: int
    input_dim: int
    hidden_widths: tuple[int, ...]
    epochs: int
    batch_size: int | None


SETTINGS = (
    Setting("BO (n=72, d=5, 2x64, full batch)", 72, 5, (64, 64), 500, None),
    Setting("UCI (n=455, d=13, 1x50, batch 32)", 455, 13, (50,), 40, 32),
)


def time_training(
    setting: Setting, seeds: Sequence[int], sequential: bool, device: str = "cpu"
) -> float:
    r"""Seconds to train members with ``seeds`` (batched, or one at a time) on ``device``
    and the process's torch threads (``--threads``)."""
    generator = torch.Generator().manual_seed(0)
    X = torch.rand(setting.num_data, setting.input_dim, generator=generator, dtype=torch.float64)
    X = X.to(device)
    Y = X.sin().sum(-1, keepdim=True)
    config = TrainingConfig(
        epochs=setting.epochs, learning_rate=1e-3, batch_size=setting.batch_size
    )
    groups = [[seed] for seed in seeds] if sequential else [list(seeds)]
    start = device_seconds(device)
    for group in groups:
        network = BatchedMLP(
            setting.input_dim, 1, setting.hidden_widths, group, gaussian_head=True
        ).to(X)
        fit_members(network, X, Y, config)
    return device_seconds(device) - start


def run(
    settings: Sequence[Setting],
    member_counts: Sequence[int],
    num_threads: int,
    repeats: int,
    device: str = "cpu",
) -> str:
    r"""Time every combination on ``device``; ``num_threads`` (the process's torch threads,
    set by ``main``) labels the rows. Returns a markdown table."""
    table = PrintedTable(
        [
            "setting",
            "threads",
            "K",
            "one member (s)",
            "K batched (s)",
            "K sequential (s)",
            "batched / one",
            "sequential / batched",
        ]
    )
    for setting in settings:
        for members in member_counts:
            seeds = list(range(members))
            # One untimed fit first: the first training of a process pays one-off costs
            # (allocator, kernel selection) that would be charged to one member alone.
            time_training(setting, [0], False, device)
            samples = {"one": [], "batched": [], "sequential": []}
            # Interleaved repeats, so slow drifts of the machine hit all three alike.
            for _ in range(repeats):
                samples["one"].append(time_training(setting, [0], False, device))
                samples["batched"].append(time_training(setting, seeds, False, device))
                samples["sequential"].append(time_training(setting, seeds, True, device))
            one, batched, sequential = (statistics.median(samples[k]) for k in samples)
            table.add_row(
                [
                    setting.name,
                    num_threads,
                    members,
                    f"{one:.2f}",
                    f"{batched:.2f}",
                    f"{sequential:.2f}",
                    f"{batched / one:.2f}",
                    f"{sequential / batched:.2f}",
                ]
            )
    return table.markdown()


def main(argv: Sequence[str] | None = None) -> str:
    r"""Run the benchmark; returns the markdown table (also written to ``--out``)."""
    parser = runner_parser(__doc__, out=Path("benchmarks/results/ensemble_cost.md"))
    parser.add_argument("--members", nargs="+", type=int, default=[5])
    parser.add_argument("--repeats", type=int, default=3)
    add_device_option(parser)
    args = parser.parse_args(argv)
    use_threads(args.threads)
    settings = SETTINGS
    if args.smoke:
        settings = [
            Setting(s.name, s.num_data, s.input_dim, s.hidden_widths, 2, s.batch_size)
            for s in SETTINGS
        ]
        args.members, args.repeats = [2], 1
    table = run(settings, args.members, args.threads, args.repeats, args.device)
    return write_text(device_path(args.out, args.device), table)


if __name__ == "__main__":
    main()
