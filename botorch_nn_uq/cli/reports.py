r"""What the command line prints and draws: ``optimize``'s heading, a line per iteration,
its summary with a hint why a run was slow and a note when no proposal improved, the
best-so-far plot, and ``list``'s tables of what is registered.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from botorch_nn_uq.bo import (
    ACQUISITIONS,
    RANDOM_SEARCH,
    RECOMMENDED_STRATEGIES,
    SURROGATES,
    BayesianOptimizer,
    Problem,
    StepRecord,
    Strategy,
)
from botorch_nn_uq.problems import BO_PROBLEM_NAMES

#: A run shorter than this is not worth a hint about its speed (seconds).
_SLOW_RUN_SECONDS = 10.0


def print_heading(
    problem: Problem, strategy: Strategy, n_initial: int, iterations: int, seed: int
) -> None:
    r"""Print what a run of ``optimize`` is about to do.

    Args:
        problem: The problem to optimise.
        strategy: The run's strategy.
        n_initial: The points of the initial design.
        iterations: The BO iterations after it.
        seed: The run's seed.
    """
    print(
        f"{problem.name} ({problem.objective.describe()}) | strategy {strategy} | "
        f"{n_initial} initial "
        f"points + {iterations} iterations | seed {seed}",
        flush=True,
    )


def print_record(record: StepRecord, with_regret: bool) -> None:
    r"""Print the line of one step of a run: its evaluations, value, best value so far,
    regret and seconds.

    Args:
        record: The step's record (step 0: the initial design).
        with_regret: Whether the problem has a regret (a built-in problem) to print.
    """
    label = "init" if record.step == 0 else f"{record.step:4d}"
    regret = f" | regret {record.regret:10.4e}" if with_regret else ""
    print(
        f"iter {label} | evals {record.num_evaluations:4d} | value {record.value:12.5g} | "
        f"best {record.best_value:12.5g}{regret} | {record.seconds:6.2f} s",
        flush=True,
    )


def print_summary(
    problem: Problem,
    optimizer: BayesianOptimizer,
    records: Sequence[StepRecord],
    *,
    target: float | None,
    model: str,
    seconds: float,
    threads: int,
    cores: int,
    load: float | None,
) -> None:
    r"""Print a finished run's summary line, then the hint of :func:`slow_run_hint` and the
    note of :func:`no_improvement_note` where they apply.

    Args:
        problem: The problem run: a built-in one (its records hold the regret) or a
            user's function.
        optimizer: The run after its last step.
        records: The run's records, the initial design first.
        target: The target value of a built-in problem, or ``None`` where it is minimised.
        model: The surrogate's name (or ``"random"``).
        seconds: The run's wall-clock seconds (set-up, initial design and iterations).
        threads: torch's intra-op threads during the run.
        cores: The cores available to the process.
        load: The highest 1-minute load average seen during the run (``None`` where the
            platform has none).
    """
    best = optimizer.best()
    steps = [record.seconds for record in records if record.step > 0]
    if records[0].regret is not None:
        goal = (
            f"minimum {problem.problem.min_value:.6g}" if target is None else f"target {target:g}"
        )
        outcome = f"({goal}) | normalised regret {records[-1].regret:.4e}"
    else:
        point = ", ".join(f"{x:.6g}" for x in best.x.tolist())
        outcome = f"at x = [{point}]"
    print(
        f"summary | best value {best.value:.6g} {outcome} | {optimizer.X.shape[0]} evaluations | "
        f"{seconds:.1f} s total (set-up, initial design and {len(records) - 1} iterations), "
        f"{sum(steps) / max(len(steps), 1):.2f} s per iteration | torch threads {threads} "
        f"({cores} cores)",
        flush=True,
    )
    hint = slow_run_hint(seconds, threads, cores, load)
    if hint is not None:
        print(f"hint | {hint}", flush=True)
    note = no_improvement_note(records, model, problem.bounds.shape[-1])
    if note is not None:
        print(f"note | {note}", flush=True)


def slow_run_hint(seconds: float, threads: int, cores: int, load: float | None) -> str | None:
    r"""Why a run that took ``seconds`` was slow and what avoids it, or ``None``.

    A run of at least :data:`_SLOW_RUN_SECONDS` gets a hint when torch ran more than one
    intra-op thread and either more threads than cores or on a busy machine, whose load
    average ``load`` (this run's own threads included) was at least half a process above
    its cores: the threads then wait for each other on cores that other processes hold,
    and the small tensors of a BO step take many times longer than on one thread. A
    one-thread run on a busy machine gets a note that it shared its cores.

    Args:
        seconds: The run's wall-clock seconds.
        threads: torch's intra-op threads during the run.
        cores: The cores available to the process.
        load: The highest 1-minute load average seen during the run (``None`` where the
            platform has none).
    """
    if seconds < _SLOW_RUN_SECONDS:
        return None
    busy = load is not None and load >= cores + 0.5
    if threads > 1 and (threads > cores or busy):
        under = f" under load {load:.1f}" if busy else ""
        return (
            f"torch used {threads} threads on {cores} cores{under}; `OMP_NUM_THREADS=1` or "
            f"`--threads 1` avoids oversubscription (much faster on a busy machine)"
        )
    if busy:
        return (
            f"the machine was busy (load {load:.1f} on {cores} cores): the run shared its "
            f"cores with other processes and took longer than on an idle machine"
        )
    return None


def no_improvement_note(records: Sequence[StepRecord], model: str, dim: int) -> str | None:
    r"""A note when no BO iteration of a run improved on its initial design's best value
    (the proposals were all worse), with what to try instead; ``None`` otherwise or
    without iterations.

    Args:
        records: The run's records, the initial design first.
        model: The surrogate's name (or ``"random"``).
        dim: The input dimension.
    """
    iterations = len(records) - 1
    if iterations == 0 or records[-1].best_value != records[0].best_value:
        return None
    remedies = [f"more iterations (--iterations {max(30, 2 * iterations)})"]
    if model == RANDOM_SEARCH:
        remedies.append("a surrogate (--model gp)")
    elif model != "gp":
        remedies.append("a GP (--model gp)")
    proposals = "proposal" if model != RANDOM_SEARCH else "random point"
    return (
        f"no {proposals} improved on the best initial point in {iterations} "
        f"iteration{'s' if iterations > 1 else ''}: with {dim} dimensions, try "
        + " or ".join(remedies)
    )


def plot_best_so_far(records: Sequence[StepRecord], path: Path, title: str) -> None:
    r"""Save a plot of the best point's normalised regret (or, for a problem without
    one, its value) against evaluations.

    Args:
        records: The run's records (the initial design first).
        path: The image file to write (format from its suffix).
        title: The plot's title.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise SystemExit("--plot needs matplotlib: pip install 'botorch-nn-uq[plots]'") from error
    with_regret = records[0].regret is not None
    figure, axis = plt.subplots(figsize=(6, 4))
    evaluations = [record.num_evaluations for record in records]
    if with_regret:
        axis.step(evaluations, [max(r.regret, 1e-12) for r in records], where="post")
        axis.set_yscale("log")
        axis.set_ylabel("normalised regret of best point")
    else:
        axis.step(evaluations, [r.best_value for r in records], where="post")
        axis.set_ylabel("best value so far")
    axis.set_xlabel("evaluations")
    axis.set_title(title)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)


def list_registered() -> int:
    r"""Print ``list``: the registered problems, models and acquisitions with their
    descriptions, and the recommended strategies; returns the exit code, 0."""
    models = {name: spec.description for name, spec in SURROGATES.items()}
    models[RANDOM_SEARCH] = "uniform random search (no surrogate)"
    acquisitions = {name: spec.description for name, spec in ACQUISITIONS.items()}
    # One name column for both tables, as wide as the longest registered name, so the
    # descriptions line up whatever gets registered (e.g. "hyper-deep-ensemble").
    width = max(map(len, [*models, *acquisitions]))
    print("problems:  " + ", ".join(BO_PROBLEM_NAMES))
    for title, rows in (("models:", models), ("acquisitions:", acquisitions)):
        print(title)
        for name, description in rows.items():
            print(f"  {name:<{width}}  {description}")
    print("recommended strategies (--strategy SPELLING; evidence in benchmarks/README.md):")
    spelling_width = max(len(spelling) for spelling, _ in RECOMMENDED_STRATEGIES)
    for spelling, regime in RECOMMENDED_STRATEGIES:
        print(f"  {spelling:<{spelling_width}}  {regime}")
    return 0
