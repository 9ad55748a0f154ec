r"""A run's strategy on the command line: ``--strategy SPELLING``, or the shorthand
options that spell its parts (``--model``, ``--acquisition``, ``--trust-region``, ...),
checked together before any work.

``optimize`` and ``ask`` (when it starts a run) call :func:`check_strategy`, which sets
``args.run_strategy`` to the run's :class:`~botorch_nn_uq.bo.Strategy`.
"""

from __future__ import annotations

import argparse

from botorch_nn_uq.bo import ACQUISITIONS, RANDOM_SEARCH, SURROGATES, ContinualTraining
from botorch_nn_uq.bo.strategy import Strategy, acquisition_arguments
from botorch_nn_uq.cli.objectives import objective_from_options
from botorch_nn_uq.cli.parsers import STRATEGY_DEFAULTS, option_flag

#: The options that are parts of a strategy (the others configure the run).
STRATEGY_FLAGS = tuple(
    name for name in STRATEGY_DEFAULTS if name not in ("seed", "n_initial", "target", "maximize")
)


def with_strategy_defaults(args: argparse.Namespace) -> argparse.Namespace:
    r"""``args`` with every strategy option that was not given set to its default
    (:data:`~botorch_nn_uq.cli.parsers.STRATEGY_DEFAULTS`): ``ask``'s strategy options
    default to ``None``, so that it can tell which were given.

    Args:
        args: The parsed command; changed in place.

    Returns:
        ``args``.
    """
    for name, default in STRATEGY_DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    return args


def check_strategy(args: argparse.Namespace, parser: argparse.ArgumentParser, q: int) -> None:
    r"""Reject combinations of strategy options that make no sense, before any work (each
    option alone was checked by its argparse type), and set ``args.run_strategy``: the
    :class:`~botorch_nn_uq.bo.Strategy` of ``--strategy``, or the one its shorthand
    options spell.

    Args:
        args: The parsed command, every strategy option given or set to its default.
        parser: The command's parser, whose error exits (code 2) naming the option.
        q: The batch size the run asks for.
    """
    if args.target is not None and args.maximize:
        parser.error("argument --maximize: not with --target (a target has no direction)")
    if args.strategy is not None:
        shorthands = [
            option_flag(name)
            for name in STRATEGY_FLAGS
            if getattr(args, name) not in (None, STRATEGY_DEFAULTS[name])
        ]
        if shorthands:
            parser.error(
                f"argument {shorthands[0]}: a part of the strategy; not with --strategy "
                "(spell it in the strategy)"
            )
        args.run_strategy = args.strategy
        try:
            args.strategy.check(objective_from_options(args))
        except ValueError as error:
            parser.error(f"argument --strategy: {error}")
    else:
        _check_shorthands(args, parser)
        try:
            args.run_strategy = _shorthand_strategy(args)
        except ValueError as error:
            parser.error(f"argument --model: {error}")
    _check_batch_size(args, parser, q)


def _shorthand_strategy(args: argparse.Namespace) -> Strategy:
    r"""The strategy that the shorthand options spell (``--model``, ``--acquisition``,
    ``--trust-region``, ...): each is a part of :class:`~botorch_nn_uq.bo.Strategy`'s
    spelling."""
    if args.model == RANDOM_SEARCH:
        return Strategy(RANDOM_SEARCH, acquisition="")
    acquisition = "ts" if args.turbo else args.acquisition
    accepted = () if args.turbo else acquisition_arguments(acquisition)
    options = {
        name: getattr(args, name)
        for name in accepted
        if getattr(args, name) != STRATEGY_DEFAULTS[name]
    }
    continual = ContinualTraining(
        warm_start_steps=args.warm_start_steps, cold_refit_every=args.cold_refit_every
    )
    return Strategy(
        args.model,
        acquisition=acquisition,
        acquisition_options=tuple(sorted(options.items())),
        trust_region=args.trust_region,
        turbo=args.turbo,
        batch_thompson=args.batch_thompson,
        local_fit=args.local_fit,
        continual=continual if args.continual else None,
        sequential=args.sequential,
    )


def _check_shorthands(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    r"""The checks of the shorthand strategy options, each error naming its option."""
    if args.model == RANDOM_SEARCH:
        if args.trust_region or args.turbo:
            option = "--trust-region" if args.trust_region else "--turbo"
            parser.error(f"argument {option}: needs a surrogate (not random search)")
        return
    if args.batch_thompson and not args.turbo:
        parser.error("argument --batch-thompson: applies to --turbo only")
    if args.local_fit is not None and not (args.trust_region or args.turbo):
        parser.error("argument --local-fit: needs a trust region (--trust-region or --turbo)")
    if args.turbo and args.trust_region:
        parser.error("argument --turbo: has its own trust region (not with --trust-region)")
    if args.turbo and args.target is not None:
        parser.error("argument --turbo: minimises or maximises (not with --target)")
    if args.continual and not SURROGATES[args.model].supports_warm_start:
        warm = ", ".join(name for name, spec in SURROGATES.items() if spec.supports_warm_start)
        parser.error(f"argument --continual: needs a warm-startable model ({warm})")
    spec = ACQUISITIONS[args.acquisition]
    if args.turbo:
        return
    if spec.requires_target and args.target is None:
        parser.error(f"argument --acquisition: {args.acquisition} needs --target")
    if args.target is not None and not spec.requires_target:
        targeted = [name for name, other in ACQUISITIONS.items() if other.requires_target]
        parser.error(f"argument --target: needs a target-value acquisition ({', '.join(targeted)})")
    # optimize_acqf starts its restarts from the best raw samples.
    if spec.propose is None and args.raw_samples < args.num_restarts:
        parser.error(
            f"argument --raw-samples: must be at least --num-restarts ({args.num_restarts}); "
            f"got {args.raw_samples}"
        )


def _check_batch_size(args: argparse.Namespace, parser: argparse.ArgumentParser, q: int) -> None:
    r"""Reject a batch size ``q`` the run's proposer cannot serve (a q-acquisition's batch
    that would not fit in memory, more points than Thompson sampling has candidates),
    which would otherwise fail after the initial design was evaluated."""
    # The input dimension: --dim, or one input per pair of --bounds.
    dim = args.dim if args.dim is not None else max(len(args.bounds or ()) // 2, 1)
    proposer = args.run_strategy.proposer()
    if q > 1 and not proposer.proposes_batches:
        batched = [name for name, other in ACQUISITIONS.items() if other.proposes_batches]
        parser.error(
            f"argument --batch-size: {args.run_strategy.acquisition} is an analytic "
            "acquisition, which proposes one point per step; for batches use one of "
            + ", ".join(batched)
        )
    try:
        proposer.check_batch_size(q, dim)
    except ValueError as error:
        parser.error(f"argument --batch-size: {error}")
