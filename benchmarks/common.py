"""What the benchmark runners share: their common options, torch's threads, worker
processes, BO runs for storing, statistics, stored results (written atomically), markdown
and CSV tables and plots.

``benchmarks`` is a package of the repository, not of the installed library: a runner runs
as ``python -m benchmarks.<runner>`` from the repository's root and imports this module as
``benchmarks.common``. The runners use the library through its public API only (the names
in the ``__all__`` of ``botorch_nn_uq``'s parts, see ``tests/benchmarks/test_public_api.py``);
what only the benchmarks need (argument types, atomic saves, CSV rows) lives here.

Threads: the package's functions never change torch's process-wide thread setting; the
caller decides. A runner is a process of its own, so it decides once, first thing in its
``main``: :func:`use_threads` with its ``--threads`` (default 1, see
``benchmarks/docs/threads.md``), and :func:`run_jobs` gives every worker process
the same setting.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from botorch import settings
from botorch.models.transforms.input import InputStandardize
from botorch.models.transforms.outcome import Standardize
from torch import Tensor

from botorch_nn_uq.cli import integer_argument

if TYPE_CHECKING:
    from botorch_nn_uq.bo import BOResult, Strategy

Spec = TypeVar("Spec")
Result = TypeVar("Result")

#: Where log-scale plots floor their values (a regret of exactly zero has no logarithm).
LOG_PLOT_FLOOR = 1e-12


def runner_parser(
    doc: str, out: Path, smoke: str = "tiny budget (for the test suite)"
) -> argparse.ArgumentParser:
    r"""An argument parser with the options every runner has.

    Args:
        doc: The runner's module docstring; its first paragraph describes the runner.
        out: The default of ``--out`` (where the runner writes its results).
        smoke: The help of ``--smoke`` (what the runner's tiny budget is).

    Returns:
        A parser with ``--out``, ``--smoke`` and ``--threads``.
    """
    parser = argparse.ArgumentParser(
        description=doc.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=out)
    parser.add_argument("--smoke", action="store_true", help=smoke)
    parser.add_argument(
        "--threads",
        type=integer_argument(1),
        default=1,
        help="torch intra-op threads of this process and of every worker process (default "
        "1: several runs share few cores, and more threads than free cores are many times "
        "slower; see benchmarks/docs/threads.md)",
    )
    return parser


def add_seed_options(
    parser: argparse.ArgumentParser, default: int | None, help: str = "number of seeds"
) -> None:
    r"""Add ``--seeds`` (how many, at least 1; ``default``) and ``--first-seed`` (where they
    start, at least 0) to ``parser``; :func:`seed_range` lists the seeds."""
    parser.add_argument("--seeds", type=integer_argument(1), default=default, help=help)
    parser.add_argument(
        "--first-seed",
        type=integer_argument(0),
        default=0,
        help="seeds start here (so several processes or machines can share the seeds)",
    )


def seed_range(args: argparse.Namespace) -> range:
    r"""The seeds ``--first-seed``, ..., ``--first-seed + --seeds - 1``."""
    return range(args.first_seed, args.first_seed + args.seeds)


def add_nomu_suite_options(parser: argparse.ArgumentParser) -> None:
    r"""Add the problems and budget of protocol 1 (the NOMU BO suite) to ``parser``:
    ``--problems``, ``--dims``, ``--iterations``, ``--n-initial`` and the acquisition
    optimiser's ``--num-restarts`` and ``--raw-samples``."""
    from botorch_nn_uq.problems import NOMU_SUITE_NAMES

    parser.add_argument("--problems", nargs="+", default=list(NOMU_SUITE_NAMES))
    parser.add_argument("--dims", nargs="+", type=int, default=[5])
    parser.add_argument("--iterations", type=int, default=64)
    parser.add_argument("--n-initial", type=int, default=8)
    parser.add_argument("--num-restarts", type=int, default=10)
    parser.add_argument("--raw-samples", type=int, default=512)


def nomu_suite_run_key(spec: Any, label: str = "", suffix: str = "") -> str:
    r"""A file-name-safe identifier of a protocol-1 run and its budget, the name its
    stored result is found by (:func:`stored_run`).

    Args:
        spec: The run: its ``problem``, ``dim``, ``seed``, ``device`` and the budget of
            :func:`add_nomu_suite_options` (``iterations``, ``n_initial``,
            ``num_restarts``, ``raw_samples``).
        label: What tells the run from others of the same problem and seed (its
            method), after the problem; none for ``""``.
        suffix: Further settings of the run, after the budget.

    Returns:
        ``<problem>-<dim>d_``, ``<label>_`` for a label,
        ``seed<seed>_it<iterations>_init<n_initial>_r<num_restarts>_raw<raw_samples>``,
        the suffix and, on another device than the CPU, the device's name
        (:func:`device_suffix`).

    Example:
        >>> from types import SimpleNamespace
        >>> run = SimpleNamespace(problem="levy", dim=5, seed=0, iterations=64, n_initial=8,
        ...     num_restarts=10, raw_samples=512, device="cuda")
        >>> nomu_suite_run_key(run, label="gp+logei")
        'levy-5d_gp+logei_seed0_it64_init8_r10_raw512_cuda'
    """
    label = f"{label}_" if label else ""
    return (
        f"{spec.problem}-{spec.dim}d_{label}seed{spec.seed}_it{spec.iterations}"
        f"_init{spec.n_initial}_r{spec.num_restarts}_raw{spec.raw_samples}{suffix}"
        f"{device_suffix(spec.device)}"
    )


def add_jobs_option(parser: argparse.ArgumentParser) -> None:
    r"""Add ``--jobs``, the number of worker processes (:func:`run_jobs`), to ``parser``."""
    parser.add_argument(
        "--jobs", type=integer_argument(1), default=1, help="parallel worker processes"
    )


def device_argument(text: str) -> str:
    r"""An argparse type: the name of a torch device this machine can compute on
    (``cpu``, ``cuda``, ``cuda:1``; :func:`botorch_nn_uq.bo.check_device`), with an error
    that says why not (``cuda`` without CUDA).

    Example:
        >>> device_argument("cpu")
        'cpu'
    """
    from botorch_nn_uq.bo import check_device

    try:
        return str(check_device("device", text))
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error).removeprefix("device ")) from None


def add_device_option(parser: argparse.ArgumentParser) -> None:
    r"""Add ``--device`` (default ``cpu``), the torch device of a runner's models, problems
    and BO runs, to ``parser``; an unknown or unavailable device is refused before any
    work. Random draws are made on the CPU and moved, so a seed gives the same run on any
    device up to floating-point rounding."""
    parser.add_argument(
        "--device",
        type=device_argument,
        default="cpu",
        help="torch device of the models, problems and BO runs (cpu, cuda, cuda:1, ...)",
    )


def device_suffix(device: str) -> str:
    r"""What a result's name ends in on ``device``: nothing on the CPU (the names of the
    results stored before ``--device`` existed), else ``_`` and the device's name
    without its colon (``_cuda1`` for ``cuda:1``).

    Example:
        >>> device_suffix("cuda:1")
        '_cuda1'
    """
    return "" if device == "cpu" else f"_{device.replace(':', '')}"


def device_path(path: Path, device: str) -> Path:
    r"""Where a runner's results on ``device`` go: ``path`` itself on the CPU, else
    ``path`` with the device's name before its suffix (``cost.md`` on ``cuda:1`` is
    ``cost_cuda1.md``), so a GPU run never overwrites the CPU's results.

    Example:
        >>> device_path(Path("results/cost.md"), "cuda:1").name
        'cost_cuda1.md'
    """
    return path.with_name(f"{path.stem}{device_suffix(device)}{path.suffix}")


def device_seconds(device: str) -> float:
    r"""``time.perf_counter()`` once the work queued on ``device`` is done: a GPU's
    kernels run asynchronously, and a clock read without waiting for them would miss
    their time. On the CPU, ``time.perf_counter()`` itself."""
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)
    return time.perf_counter()


def add_uci_data_option(parser: argparse.ArgumentParser) -> None:
    r"""Add ``--data-dir``, the folder of the UCI data sets, to ``parser``."""
    from benchmarks.uci import UCI_DIR_VARIABLE, default_uci_dir

    parser.add_argument(
        "--data-dir",
        type=Path,
        default=default_uci_dir(),
        help=f"folder with one subfolder per data set (not shipped with the package; "
        f"default: ${UCI_DIR_VARIABLE}, else ../shared/data/uci)",
    )


def check_uci_selection(
    parser: argparse.ArgumentParser, data_dir: Path, datasets: Sequence[str], splits: int
) -> None:
    r"""Exit through ``parser.error`` unless every data set of ``datasets`` is in
    ``data_dir`` with at least ``splits`` splits, naming what is missing or short."""
    from benchmarks.uci import available_uci_datasets, uci_num_splits

    available = available_uci_datasets(data_dir)
    missing = [dataset for dataset in datasets if dataset not in available]
    if missing:
        parser.error(
            f"data set(s) {missing} not found in {data_dir}; available: "
            f"{', '.join(available) or 'none'}"
        )
    for dataset in datasets:
        num_splits = uci_num_splits(data_dir, dataset)
        if splits > num_splits:
            parser.error(f"--splits {splits} exceeds the {num_splits} splits of {dataset}")


def use_threads(threads: int) -> None:
    r"""Run torch on ``threads`` intra-op threads in this process.

    Called once at the top of a runner's ``main`` (or of a measurement's own process):
    the runner is the caller that decides the process's threads.
    """
    torch.set_num_threads(threads)


def run_jobs(
    job: Callable[[Spec], Result],
    specs: Sequence[Spec],
    jobs: int,
    threads: int,
    describe: Callable[[Spec, Result], str] | None = None,
) -> list[Result]:
    r"""``job(spec)`` for every spec, in order.

    Args:
        job: A picklable function of one spec (a module-level function, or a
            ``functools.partial`` of one).
        specs: The specs.
        jobs: With 1, the jobs run in this process; with more, in that many worker
            processes.
        threads: Torch's intra-op threads in every worker process.
        describe: If given, a line ``[index/len(specs)] <describe(spec, result)>
            (<seconds> s elapsed)`` is printed for every result, in the order of
            ``specs``, as soon as it and those before it are done.

    Returns:
        The results, in the order of ``specs``.
    """
    if jobs > 1:
        # A process forked from one that has touched CUDA cannot use CUDA itself, so on a
        # machine with CUDA the workers start fresh.
        start_method = "spawn" if torch.cuda.is_available() else None
        with ProcessPoolExecutor(
            max_workers=jobs,
            mp_context=multiprocessing.get_context(start_method),
            initializer=use_threads,
            initargs=(threads,),
        ) as pool:
            return _reported(specs, pool.map(job, specs), describe)
    return _reported(specs, map(job, specs), describe)


def _reported(
    specs: Sequence[Spec], results: Any, describe: Callable[[Spec, Result], str] | None
) -> list[Result]:
    start = time.perf_counter()
    done = []
    for index, (spec, result) in enumerate(zip(specs, results, strict=True), start=1):
        if describe is not None:
            elapsed = time.perf_counter() - start
            print(
                f"[{index}/{len(specs)}] {describe(spec, result)} ({elapsed:.0f} s elapsed)",
                flush=True,
            )
        done.append(result)
    return done


def ignore_optimizer_retry_warnings() -> None:
    r"""Silence ``optimize_acqf``'s "Optimization failed" notices in this process: L-BFGS
    restarts that stop early are part of its normal work (it has retried by the final
    notice), and the notices would bury a runner's results."""
    warnings.filterwarnings("ignore", message="Optimization failed", category=RuntimeWarning)


def run_bo_for_storing(problem: str, dim: int, strategy: Strategy, **options: Any) -> BOResult:
    r"""One BO run (:func:`botorch_nn_uq.bo.run_bo`) of a registered problem, without
    ``optimize_acqf``'s retry notices (:func:`ignore_optimizer_retry_warnings`), its
    result's tensors moved to the CPU for :func:`stored_run`.

    Args:
        problem: The name of a registered BO problem
            (:func:`botorch_nn_uq.problems.get_bo_problem`).
        dim: The problem's input dimension.
        strategy: The run's model and acquisition.
        **options: Further arguments of ``run_bo``: the budget, the seed, the device.
    """
    from botorch_nn_uq.bo import run_bo
    from botorch_nn_uq.problems import get_bo_problem

    ignore_optimizer_retry_warnings()
    result = run_bo(get_bo_problem(problem, dim), strategy, **options)
    result.X, result.values = result.X.cpu(), result.values.cpu()
    return result


def stored_run(spec: Any, store: Path, run: Callable[[Any], Result]) -> Result:
    r"""``run(spec)``, stored in ``store`` as ``<spec.key>.pt`` (atomically, with
    ``torch.save``), or the result an earlier invocation stored there: an interrupted
    benchmark resumes where it stopped. A stored result's tensors load on the CPU,
    whatever device the run was made on.

    Args:
        spec: A run's spec, with a ``key`` that names the run and its budget.
        store: The folder of the stored runs.
        run: The function that runs a spec.
    """
    path = store / f"{spec.key}.pt"
    if path.exists():
        # A run stored on a GPU loads on a machine without one.
        return torch.load(path, weights_only=False, map_location="cpu")
    result = run(spec)
    save_atomically(result, path)
    return result


def mean_and_standard_error(values: Sequence[float]) -> tuple[float, float]:
    r"""Mean and standard error of the mean (0 for a single value)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, 0.0
    return mean, statistics.stdev(values) / math.sqrt(len(values))


def summary_header(script: str, argv: Sequence[str] | None, threads: int) -> str:
    r"""The first line of a runner's summary: the command that made it and its threads.

    Args:
        script: The runner's ``__file__``.
        argv: The arguments ``main`` was given (``None``: the command line's).
        threads: The torch threads of each process.
    """
    arguments = " ".join(sys.argv[1:] if argv is None else argv)
    command = f"python -m benchmarks.{Path(script).stem} {arguments}".strip()
    return f"Command: `{command}` (torch threads per process: {threads})"


def save_atomically(obj: object, path: str | Path) -> None:
    r"""``torch.save`` ``obj`` to ``path`` through a temporary file and a rename, so a
    process killed while saving never leaves a torn file at ``path``; creates the folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    torch.save(obj, partial)
    partial.replace(path)


class PrintedTable:
    r"""A markdown table that prints every row as it is added, so a long measurement
    shows its progress; :meth:`markdown` is the whole table.

    Args:
        columns: The column headers.

    Example:
        >>> table = PrintedTable(["n", "seconds"])
        >>> table.add_row([40, "1.25"])
        | 40 | 1.25 |
        >>> print(table.markdown(), end="")
        | n | seconds |
        | --- | --- |
        | 40 | 1.25 |
    """

    def __init__(self, columns: Sequence[str]) -> None:
        self.lines = [_markdown_row(columns), "|" + " --- |" * len(columns)]

    def add_row(self, cells: Sequence[object]) -> None:
        r"""Append a row of ``cells`` (each written with ``str``) and print it."""
        self.lines.append(_markdown_row(cells))
        print(self.lines[-1], flush=True)

    def markdown(self) -> str:
        r"""The header, the separator and the rows, one line each."""
        return "\n".join(self.lines) + "\n"


def _markdown_row(cells: Sequence[object]) -> str:
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


def write_json_atomically(data: Any, path: Path) -> None:
    r"""Write ``data`` as JSON to ``path`` through a temporary file and a rename, so an
    interrupted write never leaves a torn file to be loaded; creates the folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(data, indent=1))
    partial.replace(path)


def write_text(path: Path, text: str) -> str:
    r"""Write ``text`` to ``path``, creating its folder; returns ``text``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return text


def pyplot() -> ModuleType:
    r"""``matplotlib.pyplot`` on the non-interactive Agg backend (the runners only write
    files; matplotlib is imported on first use, as the ``plots`` extra)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def draw_band(axis: Any, x: Tensor, runs: Tensor, label: str, centre: str = "mean") -> None:
    r"""Plot a curve of several runs with a shaded band on a log-scale ``axis``.

    Args:
        axis: A matplotlib axis.
        x: The ``L`` positions.
        runs: An ``r x L`` float64 tensor, one row per run.
        label: The curve's legend label.
        centre: ``"mean"`` (band: ± standard error, none for one run) or ``"median"``
            (band: the quartiles).
    """
    if centre == "mean":
        middle = runs.mean(0)
        error = runs.std(0) / math.sqrt(runs.shape[0]) if runs.shape[0] > 1 else 0 * middle
        lower, upper = middle - error, middle + error
    else:
        quantiles = torch.tensor([0.25, 0.5, 0.75], dtype=runs.dtype)
        lower, middle, upper = runs.quantile(quantiles, 0)
    axis.plot(x, middle.clamp_min(LOG_PLOT_FLOOR), label=label)
    axis.fill_between(
        x, lower.clamp_min(LOG_PLOT_FLOOR), upper.clamp_min(LOG_PLOT_FLOOR), alpha=0.2
    )


def save_figure(figure: Any, path: Path, dpi: int = 110) -> Path:
    r"""Lay out ``figure``, save it to ``path`` and close it; returns ``path``."""
    figure.tight_layout()
    figure.savefig(path, dpi=dpi)
    pyplot().close(figure)
    return path


def plot_best_so_far(
    curves: Mapping[str, Mapping[str, tuple[Tensor, Tensor]]],
    out: Path,
    ylabel: str,
    centre: str = "mean",
) -> list[Path]:
    r"""One log-scale plot per problem, ``out/best_so_far_<problem>.png``.

    Args:
        curves: ``problem -> method -> (evaluations, runs)``: the ``L`` evaluation counts
            and an ``r x L`` float64 tensor of the best value (or regret) so far of each
            run, in the order of the legend.
        out: The folder of the plots.
        ylabel: The label of the y-axis.
        centre: The curve of each method (:func:`draw_band`).

    Returns:
        The paths of the plots.
    """
    plt = pyplot()
    paths = []
    for problem, methods in curves.items():
        figure, axis = plt.subplots(figsize=(6, 4))
        for method, (evaluations, runs) in methods.items():
            draw_band(axis, evaluations, runs, method, centre)
        axis.set_yscale("log")
        axis.set_xlabel("evaluations")
        axis.set_ylabel(ylabel)
        axis.set_title(problem)
        axis.legend()
        paths.append(save_figure(figure, out / f"best_so_far_{problem}.png"))
    return paths


def uci_protocol_model(model_class: type, train_X: Tensor, train_Y: Tensor, **options: Any):
    r"""An unfitted ``model_class`` with the UCI protocol's standardisation of inputs and
    targets on the training part (``InputStandardize``, ``Standardize``).

    BoTorch's check that the transformed inputs lie in the unit cube does not apply to
    standardised inputs, so it is switched off while the model is built.

    Args:
        model_class: A model class of the package.
        train_X: ``n x d`` training inputs.
        train_Y: ``n x 1`` training targets.
        **options: Further constructor arguments (hyperparameters, executors).
    """
    with settings.validate_input_scaling(False):
        return model_class(
            train_X,
            train_Y,
            input_transform=InputStandardize(d=train_X.shape[-1]),
            outcome_transform=Standardize(m=1),
            **options,
        )
