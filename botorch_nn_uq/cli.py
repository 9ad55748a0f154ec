"""The ``botorch-nn-uq`` command line (also ``python -m botorch_nn_uq``).

``botorch-nn-uq optimize`` runs a Bayesian-optimisation loop on a built-in problem with
a chosen surrogate and acquisition; ``botorch-nn-uq list`` shows what is registered.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

from botorch_nn_uq.bo.continual import ContinualTraining
from botorch_nn_uq.bo.loop import BOIterationRecord, BOResult, run_bo
from botorch_nn_uq.bo.registry import ACQUISITIONS, RANDOM_SEARCH, SURROGATES
from botorch_nn_uq.problems import BO_PROBLEM_NAMES, get_bo_problem


def _choice(valid: Sequence[str], kind: str):
    def parse(value: str) -> str:
        if value not in valid:
            raise argparse.ArgumentTypeError(
                f"unknown {kind} {value!r}; valid {kind}s: {', '.join(valid)}"
            )
        return value

    return parse


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="botorch-nn-uq",
        description="Neural-network surrogates with uncertainty for BoTorch.",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    models = [*SURROGATES, RANDOM_SEARCH]
    optimize = commands.add_parser(
        "optimize",
        help="run a Bayesian-optimisation loop on a built-in problem",
        description=(
            "Minimise a built-in test problem with Bayesian optimisation: uniform random "
            "initial points, then per iteration one surrogate fit and a batch of --batch-size "
            "proposals (optimize_acqf, or Thompson sampling with ts). Prints one line per "
            "iteration (best value so far, normalised regret, seconds) and a summary."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    optimize.add_argument(
        "--problem",
        type=_choice(BO_PROBLEM_NAMES, "problem"),
        default="levy",
        help=f"test problem ({', '.join(BO_PROBLEM_NAMES)})",
    )
    optimize.add_argument("--dim", type=int, default=5, help="input dimension of the problem")
    optimize.add_argument(
        "--problem-seed",
        type=int,
        help="seed of the random network of nn-draw (default 0; other problems take none)",
    )
    optimize.add_argument(
        "--model",
        type=_choice(models, "model"),
        default="mc-dropout",
        help="surrogate: "
        + "; ".join(f"{name} = {spec.description}" for name, spec in SURROGATES.items())
        + f"; {RANDOM_SEARCH} = uniform random search (no surrogate)",
    )
    optimize.add_argument(
        "--acquisition",
        type=_choice(list(ACQUISITIONS), "acquisition"),
        default="logei",
        help="acquisition function: "
        + "; ".join(f"{name} = {spec.description}" for name, spec in ACQUISITIONS.items()),
    )
    optimize.add_argument("--iterations", type=int, default=30, help="BO iterations")
    optimize.add_argument("--n-initial", type=int, default=8, help="initial random points")
    optimize.add_argument("--seed", type=int, default=0, help="seed of the whole run")
    optimize.add_argument("--num-restarts", type=int, default=10, help="optimize_acqf restarts")
    optimize.add_argument("--raw-samples", type=int, default=512, help="optimize_acqf raw samples")
    optimize.add_argument(
        "--beta", type=float, default=4.0, help="exploration weight of ucb / qucb"
    )
    optimize.add_argument(
        "--negative-slope", type=float, default=0.01, help="slope delta of leaky-ei / q-leaky-ei"
    )
    optimize.add_argument(
        "--target",
        type=float,
        help="target value of the objective: hit it instead of minimising (target-value "
        "optimisation; needs a robust-* or q-robust-ei acquisition)",
    )
    optimize.add_argument(
        "--aleatoric-variance",
        type=float,
        default=0.0,
        help="known aleatoric variance of the outputs for the target-value acquisitions",
    )
    optimize.add_argument(
        "--quantile", type=float, default=0.1, help="quantile q of robust-lcb (small = optimistic)"
    )
    optimize.add_argument(
        "--batch-size",
        type=int,
        default=1,
        help="evaluations per iteration (q); with ts the batch comes from Thompson sampling, "
        "with a q-acquisition (qlogei, ...) from optimize_acqf",
    )
    optimize.add_argument(
        "--sequential",
        action="store_true",
        help="optimise a q-acquisition greedily point by point instead of jointly",
    )
    optimize.add_argument(
        "--num-candidates",
        type=int,
        default=4096,
        help="candidates scored by every function of the bank for ts",
    )
    optimize.add_argument(
        "--continual",
        action="store_true",
        help="warm-start each refit from the previous iteration's network (mc-dropout, "
        "deep-ensemble, neon), with a cold refit every --cold-refit-every iterations or when "
        "the error on the newest points doubles",
    )
    optimize.add_argument(
        "--warm-start-steps",
        type=int,
        default=100,
        help="optimizer steps of a warm-started refit (with --continual)",
    )
    optimize.add_argument(
        "--cold-refit-every",
        type=int,
        default=10,
        help="a refit from scratch every this many iterations (with --continual)",
    )
    optimize.add_argument(
        "--trust-region",
        action="store_true",
        help="propose inside a TuRBO-style trust region around the best point (any model)",
    )
    optimize.add_argument("--csv", type=Path, help="write one row per evaluation to this CSV")
    optimize.add_argument(
        "--plot", type=Path, help="save a best-so-far plot (needs matplotlib) to this file"
    )
    optimize.add_argument(
        "--quiet", action="store_true", help="print only the summary, not every iteration"
    )

    commands.add_parser("list", help="list the registered problems, models and acquisitions")
    return parser


def _print_record(record: BOIterationRecord) -> None:
    label = "init" if record.iteration == 0 else f"{record.iteration:4d}"
    print(
        f"iter {label} | evals {record.num_evaluations:4d} | value {record.value:12.5g} | "
        f"best {record.best_value:12.5g} | regret {record.regret:10.4e} | "
        f"{record.seconds:6.2f} s",
        flush=True,
    )


def plot_best_so_far(results: Sequence[BOResult], path: Path) -> None:
    r"""Save a plot of normalised regret of the best point versus evaluations.

    Args:
        results: BO runs to draw, one line each.
        path: The image file to write (format from its suffix).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise SystemExit("--plot needs matplotlib: pip install 'botorch-nn-uq[plots]'") from error
    figure, axis = plt.subplots(figsize=(6, 4))
    for result in results:
        evaluations = [record.num_evaluations for record in result.records]
        regrets = [max(record.regret, 1e-12) for record in result.records]
        axis.step(evaluations, regrets, where="post", label=f"{result.model} {result.acquisition}")
    axis.set_yscale("log")
    axis.set_xlabel("evaluations")
    axis.set_ylabel("normalised regret of best point")
    axis.set_title(results[0].problem)
    axis.legend()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)


def _optimize(args: argparse.Namespace) -> int:
    # L-BFGS-B often stops "abnormally" on the piecewise-linear acquisition surfaces of
    # ReLU networks; optimize_acqf then retries by itself, so the warning is only noise here.
    warnings.filterwarnings("ignore", message="Optimization failed", category=RuntimeWarning)
    problem = get_bo_problem(args.problem, args.dim, problem_seed=args.problem_seed)
    goal = "minimise" if args.target is None else f"target {args.target:g}"
    print(
        f"{problem.name}-{problem.dim}d ({goal}) | model {args.model} | acquisition "
        f"{args.acquisition if args.model != RANDOM_SEARCH else '-'} | {args.n_initial} initial "
        f"points + {args.iterations} iterations | seed {args.seed}",
        flush=True,
    )
    start = time.perf_counter()
    result = run_bo(
        problem,
        args.model,
        args.acquisition,
        iterations=args.iterations,
        n_initial=args.n_initial,
        seed=args.seed,
        num_restarts=args.num_restarts,
        raw_samples=args.raw_samples,
        acquisition_options={
            "beta": args.beta,
            "negative_slope": args.negative_slope,
            "aleatoric_variance": args.aleatoric_variance,
            "quantile": args.quantile,
            "num_candidates": args.num_candidates,
        },
        target=args.target,
        callback=None if args.quiet else _print_record,
        batch_size=args.batch_size,
        sequential=args.sequential,
        continual=(
            ContinualTraining(
                warm_start_steps=args.warm_start_steps, cold_refit_every=args.cold_refit_every
            )
            if args.continual
            else None
        ),
        trust_region=args.trust_region,
    )
    total = time.perf_counter() - start
    print(
        f"summary | best value {result.records[-1].best_value:.6g} ("
        + (f"minimum {problem.min_value:.6g}" if args.target is None else f"target {args.target:g}")
        + f") | normalised regret {result.final_regret:.4e} | "
        f"{result.values.numel()} evaluations | {total:.1f} s total, "
        f"{result.seconds_per_iteration:.2f} s per iteration"
    )
    if args.csv is not None:
        result.write_csv(args.csv)
        print(f"wrote {args.csv}")
    if args.plot is not None:
        plot_best_so_far([result], args.plot)
        print(f"wrote {args.plot}")
    return 0


def _list() -> int:
    print("problems:     " + ", ".join(BO_PROBLEM_NAMES))
    print("models:")
    for name, spec in SURROGATES.items():
        print(f"  {name:14s} {spec.description}")
    print(f"  {RANDOM_SEARCH:14s} uniform random search (no surrogate)")
    print("acquisitions:")
    for name, spec in ACQUISITIONS.items():
        print(f"  {name:14s} {spec.description}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    r"""Run the command line with ``argv`` (default: ``sys.argv[1:]``); returns the exit
    code."""
    args = _build_parser().parse_args(argv)
    if args.command == "list":
        return _list()
    if args.dim < 2:
        print(f"error: --dim must be at least 2; got {args.dim}", file=sys.stderr)
        return 2
    if args.iterations < 0 or args.n_initial < 2:
        print("error: --iterations must be >= 0 and --n-initial >= 2", file=sys.stderr)
        return 2
    if args.trust_region and args.model == RANDOM_SEARCH:
        print("error: --trust-region needs a surrogate (not random search)", file=sys.stderr)
        return 2
    if args.problem_seed is not None and args.problem != "nn-draw":
        print("error: --problem-seed applies to nn-draw only", file=sys.stderr)
        return 2
    for option in ("batch_size", "num_candidates", "warm_start_steps", "cold_refit_every"):
        if getattr(args, option) < 1:
            name = "--" + option.replace("_", "-")
            print(f"error: {name} must be at least 1; got {getattr(args, option)}", file=sys.stderr)
            return 2
    if (
        args.continual
        and args.model in SURROGATES
        and not SURROGATES[args.model].supports_warm_start
    ):
        warm = ", ".join(name for name, spec in SURROGATES.items() if spec.supports_warm_start)
        print(f"error: --continual needs a warm-startable model ({warm})", file=sys.stderr)
        return 2
    if args.model != RANDOM_SEARCH:
        requires_target = ACQUISITIONS[args.acquisition].requires_target
        if requires_target and args.target is None:
            print(f"error: --acquisition {args.acquisition} needs --target", file=sys.stderr)
            return 2
        if args.target is not None and not requires_target:
            targeted = [name for name, spec in ACQUISITIONS.items() if spec.requires_target]
            print(
                f"error: --target needs a target-value acquisition ({', '.join(targeted)})",
                file=sys.stderr,
            )
            return 2
    return _optimize(args)
