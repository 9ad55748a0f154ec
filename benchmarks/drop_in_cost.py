"""The cost a BoTorch user sees at small n: ``SingleTaskGP`` replaced by the package's
``DeepEnsemble``, both with their defaults, side by side in one process.

What a new user does: fit a model on ``n`` points and propose the next point with
analytic LogEI, first with BoTorch's GP, then with the deep ensemble in its place. On
``n`` uniform random points of Ackley (default d = 6, n = 100; maximising ``-f``, in
float64) the runner times, in CPU seconds (``time.process_time``) on ``--threads`` torch
threads (default one):

- ``gp_fit``: ``SingleTaskGP(X, Y, input_transform=Normalize(d),
  outcome_transform=Standardize(1))`` fitted by ``fit_gpytorch_mll`` on its
  ``ExactMarginalLogLikelihood``;
- ``ensemble_fit``: ``DeepEnsemble(X, Y, input_transform=Normalize(d),
  outcome_transform=Standardize(1)).fit(seed=seed)`` with its default hyperparameters
  (``--ensemble-epochs`` changes its epochs, for the smoke run; ``--neural-model
  mc-dropout`` puts ``MCDropout`` in its place, the ``ensemble_*`` fields then being its);
- ``gp_logei``, ``ensemble_logei``: ``optimize_acqf`` of ``LogExpectedImprovement(model,
  best_f=Y.max())`` on each, q = 1, 10 restarts, 512 raw samples, seeded, and
  ``gp_evaluations``, ``ensemble_evaluations``: how many times it called the acquisition
  function (each call a batch: the raw samples, then every restart still running; the
  restarts run until the slowest one ends, so this counts that restart's evaluations);
- the steady state: after a first, untimed fit and proposal of each model, the medians
  over ``--repeats`` repeats of every seed (the two models interleaved, so slow drifts
  of a shared machine hit both alike), and the ratios ensemble / GP;
- the first calls, which a new user pays once: the first fit and the first proposal of
  each model in a fresh process of its own (after the imports, which are the same for
  both), on the first seed's data. BoTorch's ``Normalize`` pulls in ``torch._refs``,
  sympy and ``torch._dynamo`` at its first call, so a process that had already run the
  other model would hide part of them.

``--out`` receives ``drop_in_cost.md`` (the tables), ``drop_in_cost.csv`` (one row per
n) and ``drop_in_cost.json`` (the rows with every timed sample).

Examples:
    python -m benchmarks.drop_in_cost
    python -m benchmarks.drop_in_cost --points 20 50 100 200 --seeds 5
    python -m benchmarks.drop_in_cost --ensemble-training-dtype float64 --ensemble-widths 64 64
    python -m benchmarks.drop_in_cost --ensemble-widths 32 32 --ensemble-activation swish
    python -m benchmarks.drop_in_cost --neural-model mc-dropout --ensemble-activation smelu
    python -m benchmarks.drop_in_cost --smoke
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import torch
from botorch.acquisition import LogExpectedImprovement
from botorch.fit import fit_gpytorch_mll
from botorch.models import SingleTaskGP
from botorch.models.model import Model
from botorch.models.transforms import Normalize, Standardize
from botorch.optim import optimize_acqf
from botorch.utils.sampling import manual_seed
from gpytorch.mlls import ExactMarginalLogLikelihood
from torch import Tensor

from benchmarks.common import (
    add_seed_options,
    ignore_optimizer_retry_warnings,
    integer_argument,
    runner_parser,
    seed_range,
    summary_header,
    use_threads,
    write_json_atomically,
    write_text,
)
from botorch_nn_uq.bo import write_rows_csv
from botorch_nn_uq.models import DeepEnsemble, MCDropout, NeuralSurrogateModel
from botorch_nn_uq.problems import get_bo_problem

Result = TypeVar("Result")

#: The two models, in the order of the tables, and their names there.
MODELS = {"gp": "GP", "ensemble": "ensemble"}
#: The neural models that can take the ensemble's place (``--neural-model``), with what the
#: tables call them; the rows' ``ensemble`` is then that model.
NEURAL_MODELS = {
    "deep-ensemble": (DeepEnsemble, "ensemble"),
    "mc-dropout": (MCDropout, "MC dropout"),
}
#: The deep ensemble's training precisions by name (``--ensemble-training-dtype``).
TRAINING_DTYPES = {"float32": torch.float32, "float64": torch.float64}
#: The acquisition optimiser's budget (as in BoTorch's tutorials and ``scale_cost.py``).
NUM_RESTARTS = 10
RAW_SAMPLES = 512


def problem_data(n: int, dim: int, seed: int) -> tuple[Tensor, Tensor, Tensor]:
    r"""``n`` uniform random points of Ackley-``dim`` in its box (drawn with ``seed``),
    their values to maximise (``-f``) and the box, in float64.

    Returns:
        ``X`` (``n x dim``), ``Y`` (``n x 1``) and the ``2 x dim`` bounds.
    """
    problem = get_bo_problem("ackley", dim)
    generator = torch.Generator().manual_seed(seed)
    unit = torch.rand(n, dim, generator=generator, dtype=torch.float64)
    X = problem.bounds[0] + (problem.bounds[1] - problem.bounds[0]) * unit
    return X, -problem.evaluate(X).unsqueeze(-1), problem.bounds


def fit(model: str, X: Tensor, Y: Tensor, seed: int, ensemble_options: dict[str, Any]) -> Model:
    r"""Fit ``model`` the way a BoTorch user does.

    Args:
        model: ``"gp"`` (``SingleTaskGP`` by ``fit_gpytorch_mll``) or ``"ensemble"``
            (the neural model's ``fit``).
        X: ``n x d`` inputs in problem units (``Normalize`` learns their box).
        Y: ``n x 1`` observations.
        seed: Seed of the fit (torch's global generator for the GP, whose fit draws
            only if it restarts).
        ensemble_options: The neural model's settings: ``"model"``, a key of
            :data:`NEURAL_MODELS` (default: the deep ensemble), and its hyperparameters
            (none: its defaults).

    Returns:
        The fitted model.
    """
    transforms = {"input_transform": Normalize(X.shape[-1]), "outcome_transform": Standardize(1)}
    if model == "ensemble":
        model_class, _, hyperparameters = neural_model(ensemble_options)
        return model_class(X, Y, **transforms, **hyperparameters).fit(seed=seed)
    gp = SingleTaskGP(X, Y, **transforms)
    with manual_seed(seed):
        fit_gpytorch_mll(ExactMarginalLogLikelihood(gp.likelihood, gp))
    return gp


def propose_log_ei(model: Model, Y: Tensor, bounds: Tensor, seed: int) -> tuple[Tensor, int]:
    r"""The next point by analytic LogEI over ``bounds`` (``optimize_acqf``, q = 1,
    :data:`NUM_RESTARTS` restarts from :data:`RAW_SAMPLES` raw samples, seeded).

    Returns:
        The ``1 x d`` candidate and how many times ``optimize_acqf`` called the
        acquisition function.
    """
    acquisition = LogExpectedImprovement(model, best_f=Y.max())
    calls = []
    acquisition.register_forward_hook(lambda module, inputs, output: calls.append(None))
    with manual_seed(seed):
        candidate, _ = optimize_acqf(
            acquisition,
            bounds,
            q=1,
            num_restarts=NUM_RESTARTS,
            raw_samples=RAW_SAMPLES,
            options={"seed": seed},
        )
    return candidate, len(calls)


def time_calls(
    model: str, X: Tensor, Y: Tensor, bounds: Tensor, seed: int, ensemble_options: dict[str, Any]
) -> tuple[float, float, int]:
    r"""CPU seconds of one fit of ``model`` (:func:`fit`) and of one LogEI proposal on the
    fitted model (:func:`propose_log_ei`), and the proposal's acquisition calls."""
    start = time.process_time()
    fitted = fit(model, X, Y, seed, ensemble_options)
    fit_seconds = time.process_time() - start
    start = time.process_time()
    _, evaluations = propose_log_ei(fitted, Y, bounds, seed)
    return fit_seconds, time.process_time() - start, evaluations


def first_calls(
    model: str, n: int, dim: int, seed: int, threads: int, ensemble_options: dict[str, Any]
) -> tuple[float, float]:
    r"""CPU seconds of the first fit and the first LogEI proposal of ``model`` in the
    calling process, which must be a fresh one (:func:`in_fresh_process`) that runs on
    ``threads`` torch threads; the arguments are those of :func:`problem_data` and
    :func:`fit`."""
    use_threads(threads)
    ignore_optimizer_retry_warnings()
    X, Y, bounds = problem_data(n, dim, seed)
    return time_calls(model, X, Y, bounds, seed, ensemble_options)[:2]


def in_fresh_process(function: Callable[..., Result], *arguments: Any) -> Result:
    r"""``function(*arguments)`` in a new, spawned process: none of this process's first
    calls carry over (a forked one would inherit them)."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        return pool.submit(function, *arguments).result()


def steady_samples(
    n: int, dim: int, seeds: Sequence[int], repeats: int, ensemble_options: dict[str, Any]
) -> dict[str, list[float]]:
    r"""CPU seconds of every timed fit and proposal in this process, after a first,
    untimed one of each model.

    Args:
        n: The number of points.
        dim: Ackley's dimension.
        seeds: Seeds of the data, the fits and the proposals.
        repeats: Timed repeats per seed.
        ensemble_options: Hyperparameters of the deep ensemble (empty: its defaults).

    Returns:
        ``{"<model>_fit": [...], "<model>_logei": [...], "<model>_evaluations": [...]}``
        for both models, the samples in the order seed by seed, repeat by repeat.
    """
    # The first call of each model pays its one-off costs, which first_calls reports.
    X, Y, bounds = problem_data(n, dim, seeds[0])
    for model in MODELS:
        time_calls(model, X, Y, bounds, seeds[0], ensemble_options)
    samples = {
        f"{model}_{call}": [] for model in MODELS for call in ("fit", "logei", "evaluations")
    }
    for seed in seeds:
        X, Y, bounds = problem_data(n, dim, seed)
        for _ in range(repeats):
            # Interleaved, so slow drifts of a shared machine hit both models alike.
            for model in MODELS:
                fit_seconds, logei_seconds, evaluations = time_calls(
                    model, X, Y, bounds, seed, ensemble_options
                )
                samples[f"{model}_fit"].append(fit_seconds)
                samples[f"{model}_logei"].append(logei_seconds)
                samples[f"{model}_evaluations"].append(evaluations)
    return samples


def summary_row(
    n: int, samples: dict[str, list[float]], first: dict[str, tuple[float, float]]
) -> dict[str, Any]:
    r"""One n's row: the medians of ``samples`` (:func:`steady_samples`), the ratios
    ensemble / GP, the first calls ``first`` (``model -> (fit, LogEI)`` seconds,
    :func:`first_calls`) and the samples themselves."""
    row: dict[str, Any] = {"n": n}
    for name, values in samples.items():
        row[name] = statistics.median(values)
    row["fit_ratio"] = row["ensemble_fit"] / row["gp_fit"]
    row["logei_ratio"] = row["ensemble_logei"] / row["gp_logei"]
    for model, (fit_seconds, logei_seconds) in first.items():
        row[f"{model}_first_fit"] = fit_seconds
        row[f"{model}_first_logei"] = logei_seconds
    row["samples"] = samples
    return row


def tables(rows: Sequence[dict[str, Any]], label: str = "ensemble") -> str:
    r"""The markdown tables: the steady state with the first calls per n, then the first
    calls of each model against its steady state (the one-off seconds a new user pays);
    the neural model is called ``label``."""
    lines = [
        f"| n | GP fit s | {label} fit s | {label} / GP | GP LogEI s | {label} LogEI s "
        f"| {label} / GP | GP LogEI evaluations | {label} LogEI evaluations "
        f"| GP first calls s | {label} first calls s |",
        "|" + " --- |" * 11,
    ]
    for row in rows:
        cells = [
            row["gp_fit"],
            row["ensemble_fit"],
            row["fit_ratio"],
            row["gp_logei"],
            row["ensemble_logei"],
            row["logei_ratio"],
        ]
        cells = [f"{cell:.2f}" for cell in cells]
        # Medians of counts: whole numbers or halves.
        cells += [f"{row['gp_evaluations']:g}", f"{row['ensemble_evaluations']:g}"]
        first_calls = [
            row["gp_first_fit"] + row["gp_first_logei"],
            row["ensemble_first_fit"] + row["ensemble_first_logei"],
        ]
        cells += [f"{cell:.2f}" for cell in first_calls]
        lines.append(f"| {row['n']} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "| n | model | first fit s | first LogEI s | fit s | LogEI s | one-off s |",
        "|" + " --- |" * 7,
    ]
    labels = {**MODELS, "ensemble": label}
    for row in rows:
        for model, model_label in labels.items():
            first = row[f"{model}_first_fit"] + row[f"{model}_first_logei"]
            steady = row[f"{model}_fit"] + row[f"{model}_logei"]
            cells = [
                row[f"{model}_first_fit"],
                row[f"{model}_first_logei"],
                row[f"{model}_fit"],
                row[f"{model}_logei"],
                first - steady,
            ]
            row_cells = " | ".join(f"{cell:.2f}" for cell in cells)
            lines.append(f"| {row['n']} | {model_label} | {row_cells} |")
    return "\n".join(lines) + "\n"


def description(
    dim: int, seeds: Sequence[int], repeats: int, threads: int, ensemble_options: dict[str, Any]
) -> str:
    r"""The paragraph above the tables: what was timed, and how (the arguments are
    those of :func:`steady_samples`, and the torch ``threads``)."""
    model_class, label, hyperparameters = neural_model(ensemble_options)
    hyperparameters = ", ".join(f"{key} = {value}" for key, value in hyperparameters.items())
    return (
        f"Ackley-{dim} (maximising -f), n uniform random points in its box, float64, torch "
        f"on {_count(threads, 'thread')}, CPU seconds. GP: `SingleTaskGP` with `Normalize` "
        f"and `Standardize`, fitted by `fit_gpytorch_mll`; {label}: "
        f"`{model_class.__name__}` with the same transforms and "
        f"{hyperparameters or 'its default hyperparameters'}. LogEI: "
        "`optimize_acqf` of `LogExpectedImprovement(model, best_f=Y.max())`, q = 1, "
        f"{NUM_RESTARTS} restarts, {RAW_SAMPLES} raw samples; its evaluations: the calls of "
        "the acquisition function (batches of the restarts still running). Fits and LogEI: "
        "medians of "
        f"{_count(repeats, 'repeat')} × {_count(len(seeds), 'seed')} in one process, after "
        "a first, untimed call of each model. First calls: the first fit and LogEI of each "
        f"model in a fresh process of its own (seed {seeds[0]}), after its imports; "
        "one-off: what they cost above the steady state."
    )


def neural_model(
    ensemble_options: dict[str, Any],
) -> tuple[type[NeuralSurrogateModel], str, dict[str, Any]]:
    r"""The neural model of ``ensemble_options`` (see :func:`fit`): its class, what the
    tables call it, and its hyperparameters."""
    hyperparameters = dict(ensemble_options)
    model_class, label = NEURAL_MODELS[hyperparameters.pop("model", "deep-ensemble")]
    return model_class, label, hyperparameters


def _count(number: int, noun: str) -> str:
    r"""``"1 seed"``, ``"3 seeds"``."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = runner_parser(
        __doc__,
        out=Path("benchmarks/results/drop_in_cost"),
        smoke="tiny sizes (for the test suite): n = 20, d = 2, one seed, one repeat, "
        "ensembles trained for 5 epochs",
    )
    parser.add_argument("--points", nargs="+", type=integer_argument(2), default=[100])
    parser.add_argument("--dim", type=integer_argument(2), default=6, help="Ackley's dimension")
    add_seed_options(parser, default=3, help="number of seeds (data, fits and proposals)")
    parser.add_argument(
        "--repeats",
        type=integer_argument(1),
        default=5,
        help="timed repeats per seed, after an untimed first call (the medians are reported)",
    )
    parser.add_argument(
        "--neural-model",
        choices=sorted(NEURAL_MODELS),
        default="deep-ensemble",
        help="the neural model in the GP's place; the --ensemble-* options set its hyperparameters",
    )
    parser.add_argument(
        "--ensemble-epochs",
        type=integer_argument(1),
        default=None,
        help="training epochs of the deep ensemble (default: DeepEnsemble's own)",
    )
    parser.add_argument(
        "--ensemble-widths",
        type=integer_argument(1),
        nargs="+",
        default=None,
        help="hidden widths of the deep ensemble's members (default: DeepEnsemble's own)",
    )
    parser.add_argument(
        "--ensemble-training-dtype",
        choices=sorted(TRAINING_DTYPES),
        default=None,
        help="precision the deep ensemble's members train in (default: DeepEnsemble's own)",
    )
    parser.add_argument(
        "--ensemble-activation",
        default=None,
        help="hidden activation of the neural model, e.g. relu, smelu, swish or gelu "
        "(default: the model's own)",
    )
    args = parser.parse_args(argv)
    model_class, _, hyperparameters = neural_model(ensemble_options(args))
    try:
        model_class.hyperparameter_class(**hyperparameters)
    except (TypeError, ValueError) as error:
        parser.error(str(error))
    if args.smoke:
        args.points, args.dim, args.seeds, args.repeats = [20], 2, 1, 1
        args.ensemble_epochs = 5
    return args


def ensemble_options(args: argparse.Namespace) -> dict[str, Any]:
    r"""The neural model's settings that the arguments change: ``"model"`` unless it is
    the deep ensemble, and the hyperparameters (empty: the deep ensemble's defaults)."""
    options: dict[str, Any] = {}
    if args.neural_model != "deep-ensemble":
        options["model"] = args.neural_model
    if args.ensemble_epochs is not None:
        options["epochs"] = args.ensemble_epochs
    if args.ensemble_widths is not None:
        options["hidden_widths"] = tuple(args.ensemble_widths)
    if args.ensemble_training_dtype is not None:
        options["training_dtype"] = TRAINING_DTYPES[args.ensemble_training_dtype]
    if args.ensemble_activation is not None:
        options["activation"] = args.ensemble_activation
    return options


def main(argv: Sequence[str] | None = None) -> Path:
    r"""Run the benchmark; returns the path of the markdown tables."""
    args = parse_args(argv)
    use_threads(args.threads)
    ignore_optimizer_retry_warnings()
    seeds = list(seed_range(args))
    options = ensemble_options(args)
    rows = []
    for n in args.points:
        first = {
            model: in_fresh_process(
                first_calls, model, n, args.dim, seeds[0], args.threads, options
            )
            for model in MODELS
        }
        row = summary_row(n, steady_samples(n, args.dim, seeds, args.repeats, options), first)
        rows.append(row)
        print(
            f"n {n}: fit {row['gp_fit']:.2f} s (GP) against {row['ensemble_fit']:.2f} s "
            f"(ensemble), LogEI {row['gp_logei']:.2f} s against {row['ensemble_logei']:.2f} s",
            flush=True,
        )
    settings = {
        "dim": args.dim,
        "seeds": seeds,
        "repeats": args.repeats,
        "threads": args.threads,
        # A dtype is written by its name (JSON has no dtype).
        "ensemble_options": {
            key: str(value) if isinstance(value, torch.dtype) else value
            for key, value in options.items()
        },
    }
    write_json_atomically({**settings, "rows": rows}, args.out / "drop_in_cost.json")
    write_rows_csv(
        [{key: value for key, value in row.items() if key != "samples"} for row in rows],
        args.out / "drop_in_cost.csv",
    )
    markdown = args.out / "drop_in_cost.md"
    write_text(
        markdown,
        f"{summary_header(__file__, argv, args.threads)}\n\n"
        f"{description(args.dim, seeds, args.repeats, args.threads, options)}\n\n"
        + tables(rows, neural_model(options)[1]),
    )
    print(markdown.read_text())
    return markdown


if __name__ == "__main__":
    main()
