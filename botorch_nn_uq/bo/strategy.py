r"""A BO strategy as one object with one spelling.

A :class:`Strategy` says what a run fits (a registered surrogate, with hyperparameter
overrides), how it proposes (a registered acquisition or Thompson sampling, in a trust
region or TuRBO-1's loop, with region-local fits) and how it refits (from scratch or
warm-started). It is spelled

.. code-block:: text

    MODEL[(KEY=VALUE,...)][:ACQUISITION[(KEY=VALUE,...)][+OPTION[(ARGUMENTS)]]...]

for example ``deep-ensemble(max_steps=200):ts+turbo+bts+local(4)``, and
:meth:`Strategy.parse` and ``str(strategy)`` read and write that spelling (``str``
writes the canonical one: options in a fixed order, arguments sorted, defaults left
out). The options are

- ``tr[(REGION OPTIONS)]``: a TuRBO-style trust region around the best point
  (:class:`~botorch_nn_uq.bo.proposers.TrustRegionProposer`);
- ``turbo[(REGION OPTIONS)]``: TuRBO-1
  (:class:`~botorch_nn_uq.bo.turbo.TurboProposer`, Thompson sampling on TuRBO's
  candidates; the acquisition is ``ts``, whose ``num_candidates`` are TuRBO's);
- ``bts``: with ``turbo``, the package's batch Thompson sampling chooses each batch;
- ``local[(FACTOR)]``: with ``tr`` or ``turbo``, fit region-locally, the inputs
  normalised to the region grown ``FACTOR`` times (default 4);
- ``continual[(SCHEDULE)]``: warm-started refits
  (:class:`~botorch_nn_uq.bo.continual.ContinualTraining`);
- ``seq``: optimise a q-acquisition point by point.

The acquisition's arguments are its options (``beta``, ``num_candidates``, ...) and
``optimize_acqf``'s ``num_restarts`` and ``raw_samples``. ``random`` is random search.
This module is the only translation of strategy names into components: the ask/tell
optimizer, ``run_bo``, the command line and the benchmarks build through it.

Example:
    >>> strategy = Strategy.parse("deep-ensemble(max_steps=200):ts+turbo+bts+local")
    >>> str(strategy)
    'deep-ensemble(max_steps=200):ts+turbo+bts+local(4)'
    >>> optimizer = BayesianOptimizer(bounds, strategy=strategy, n_initial=20)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from botorch_nn_uq.bo.acquisitions import ACQUISITIONS, get_acquisition
from botorch_nn_uq.bo.continual import ContinualTraining
from botorch_nn_uq.bo.fitting import ColdFit, ContinualFit, FitPolicy
from botorch_nn_uq.bo.objectives import Objective
from botorch_nn_uq.bo.proposers import (
    AcquisitionProposer,
    Proposer,
    RandomProposer,
    TrustRegionProposer,
)
from botorch_nn_uq.bo.spelling import (
    SpellingError,
    Value,
    format_part,
    parse_part,
    split_top_level,
)
from botorch_nn_uq.bo.surrogates import RANDOM_SEARCH, SURROGATES, SurrogateSpec, get_surrogate
from botorch_nn_uq.bo.turbo import TurboProposer
from botorch_nn_uq.checks import is_int_in_range

#: The options of a strategy, in the order the canonical spelling writes them.
OPTIONS = ("tr", "turbo", "bts", "local", "continual", "seq")
#: The factor of ``local`` without an argument.
DEFAULT_LOCAL_FIT = 4.0
#: The acquisition arguments that configure ``optimize_acqf`` (the others are the
#: acquisition's options).
OPTIMIZER_ARGUMENTS = {"num_restarts": 10, "raw_samples": 512}
#: The keyword arguments of ``tr`` and ``turbo``.
REGION_ARGUMENTS = ("success_tolerance", "failure_tolerance", "length_init", "length_min")
REGION_ARGUMENTS += ("length_max",)

Arguments = tuple[tuple[str, Value], ...]

#: The strategies the README recommends, with the regime each was measured best in
#: (``benchmarks/README.md`` has the evidence); ``botorch-nn-uq list`` prints them.
RECOMMENDED_STRATEGIES: tuple[tuple[str, str], ...] = (
    ("gp:logei", "few points (up to about 100), smooth, one point per step"),
    ("neon:q-leaky-ei", "function-valued outputs of a composite objective g(h(x))"),
    (
        "deep-ensemble:ts+tr+local(4)+continual",
        "thousands of points, batches of 100, on a CPU budget",
    ),
    (
        "deep-ensemble(max_steps=200):ts+turbo+bts+local(4)",
        "rugged, about 10-D, small batches",
    ),
    ("deep-ensemble:ts+turbo+bts+local(4)", "controller tuning, about 12-D, batches of 50"),
    ("deep-ensemble:ts+turbo+bts+continual", "trajectories, about 60-D, batches of 100"),
    ("gp:ts+turbo", "non-stationary, about 6-D, a few hundred evaluations (GP in TuRBO-1)"),
)


@dataclass(frozen=True)
class Strategy:
    r"""What a BO run fits, how it proposes and how it refits.

    Build one with :meth:`parse` (or the constructor); ``str(strategy)`` is its
    canonical spelling. Every field is checked on construction.

    Attributes:
        model: A registered surrogate name (``"gp"``, ``"deep-ensemble"``, ...) or
            ``"random"``.
        model_options: Hyperparameter overrides of every fit (e.g. ``max_steps``), as
            sorted ``(name, value)`` pairs.
        acquisition: A registered acquisition name (``"logei"``, ``"qlogei"``,
            ``"ts"``, ...); ``"ts"`` with ``turbo``; ``""`` for random search.
        acquisition_options: The acquisition's options and ``num_restarts`` /
            ``raw_samples``, as sorted pairs.
        trust_region: Propose in a trust region (``tr``), with ``region_options``.
        turbo: TuRBO-1 (``turbo``), with ``region_options``.
        region_options: The ``tr`` or ``turbo`` arguments, as sorted pairs.
        batch_thompson: With ``turbo``: batch Thompson sampling chooses the batch.
        local_fit: With ``tr`` or ``turbo``: the region-local fit's factor, or ``None``.
        continual: The warm-start schedule (``continual``), or ``None`` for cold fits.
        sequential: Optimise a q-acquisition point by point (``seq``).

    Example:
        >>> Strategy.parse("gp:qlogei(raw_samples=256)+seq").proposer()
    """

    model: str
    acquisition: str = "logei"
    model_options: Arguments = ()
    acquisition_options: Arguments = ()
    trust_region: bool = False
    turbo: bool = False
    region_options: Arguments = ()
    batch_thompson: bool = False
    local_fit: float | None = None
    continual: ContinualTraining | None = None
    sequential: bool = False

    def __post_init__(self) -> None:
        random_search = self.model == RANDOM_SEARCH
        if not random_search and self.model not in SURROGATES:
            valid = ", ".join([*SURROGATES, RANDOM_SEARCH])
            raise ValueError(f"Unknown model {self.model!r}; valid models: {valid}.")
        if random_search:
            if self.acquisition or self.model_options or self.acquisition_options:
                raise ValueError("random search takes no acquisition and no options.")
            if self.trust_region or self.turbo or self.continual or self.sequential:
                raise ValueError("random search takes no options (it has no surrogate).")
            return
        accepted = acquisition_arguments(self.acquisition)
        unknown = [name for name, _ in self.acquisition_options if name not in accepted]
        if unknown:
            raise ValueError(
                f"{self.acquisition} takes {', '.join(accepted) or 'no arguments'}; got "
                f"{', '.join(unknown)}."
            )
        for name, value in self.acquisition_options:
            if name in OPTIMIZER_ARGUMENTS and not is_int_in_range(value, minimum=1):
                raise ValueError(f"{name} must be a positive integer; got {value!r}.")
        if self.turbo and self.trust_region:
            raise ValueError("turbo has its own trust region (not with tr).")
        if self.turbo and self.acquisition != "ts":
            raise ValueError(
                f"turbo proposes by Thompson sampling: spell it {self.model}:ts+turbo; got "
                f"acquisition {self.acquisition!r}."
            )
        if self.batch_thompson and not self.turbo:
            raise ValueError("bts (batch Thompson sampling) applies to turbo only.")
        if self.local_fit is not None and not (self.trust_region or self.turbo):
            raise ValueError("local needs a trust region (tr or turbo).")
        if self.local_fit is not None and not (
            math.isfinite(self.local_fit) and self.local_fit >= 1
        ):
            raise ValueError(f"local's factor must be a finite number >= 1; got {self.local_fit}.")
        unknown = [name for name, _ in self.region_options if name not in REGION_ARGUMENTS]
        if unknown or (self.region_options and not (self.trust_region or self.turbo)):
            option = "turbo" if self.turbo else "tr"
            raise ValueError(f"{option} takes {', '.join(REGION_ARGUMENTS)}; got {unknown}.")
        if self.continual is not None and not SURROGATES[self.model].supports_warm_start:
            warm = ", ".join(name for name, spec in SURROGATES.items() if spec.supports_warm_start)
            raise ValueError(f"continual needs a warm-startable model ({warm}); got {self.model}.")
        # Builds the components once, so unknown hyperparameters and inconsistent
        # optimizer settings fail here, not at a fit.
        self.surrogate()
        self.proposer()

    # Spelling ---------------------------------------------------------------------------

    @classmethod
    def parse(cls, text: str) -> Strategy:
        r"""The strategy ``text`` spells (see the module's grammar).

        Raises:
            ValueError: If ``text`` does not spell a valid strategy; the message names
                the part and what is wrong.
        """
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"A strategy is spelled MODEL:ACQUISITION+OPTIONS; got {text!r}.")
        try:
            head, *rest = split_top_level(text.strip(), ":")
            if len(rest) > 1:
                raise SpellingError(f"{text!r} has more than one ':'")
            model, positional, model_options = parse_part(head)
            if positional:
                raise SpellingError(f"{head!r}: a model takes keyword arguments only")
            if not rest:
                acquisition_part, option_parts = ("" if model == RANDOM_SEARCH else "logei"), []
            else:
                acquisition_part, *option_parts = split_top_level(rest[0], "+")
            fields: dict[str, Any] = {"model": model, "model_options": _pairs(model_options)}
            if acquisition_part:
                acquisition, positional, options = parse_part(acquisition_part)
                if positional:
                    raise SpellingError(f"{acquisition_part!r}: keyword arguments only")
                fields["acquisition"] = acquisition
                fields["acquisition_options"] = _pairs(options)
            else:
                fields["acquisition"] = ""
            seen: list[str] = []
            for part in option_parts:
                name, positional, keywords = parse_part(part)
                if name not in OPTIONS:
                    raise SpellingError(f"unknown option {name!r}; options: {', '.join(OPTIONS)}")
                if name in seen:
                    raise SpellingError(f"option {name!r} is given twice")
                seen.append(name)
                fields.update(_option_fields(name, positional, keywords))
        except SpellingError as error:
            raise ValueError(f"Cannot read the strategy {text!r}: {error}.") from None
        try:
            return cls(**fields)
        except (ValueError, TypeError) as error:
            raise ValueError(f"The strategy {text!r} is not valid: {error}") from None

    def __str__(self) -> str:
        if self.model == RANDOM_SEARCH:
            return RANDOM_SEARCH
        text = format_part(self.model, **dict(self.model_options))
        text += ":" + format_part(self.acquisition, **dict(self.acquisition_options))
        region = dict(self.region_options)
        if self.trust_region:
            text += "+" + format_part("tr", **region)
        if self.turbo:
            text += "+" + format_part("turbo", **region)
        if self.batch_thompson:
            text += "+bts"
        if self.local_fit is not None:
            text += "+" + format_part("local", self.local_fit)
        if self.continual is not None:
            defaults = ContinualTraining()
            changed = {
                field.name: getattr(self.continual, field.name)
                for field in dataclasses.fields(ContinualTraining)
                if getattr(self.continual, field.name) != getattr(defaults, field.name)
            }
            text += "+" + format_part("continual", **changed)
        if self.sequential:
            text += "+seq"
        return text

    # Components -------------------------------------------------------------------------

    @property
    def uses_model(self) -> bool:
        r"""Whether the strategy fits a surrogate (not random search)."""
        return self.model != RANDOM_SEARCH

    @property
    def uses_optimize_acqf(self) -> bool:
        r"""Whether the acquisition is maximised with ``optimize_acqf`` (it then takes
        ``num_restarts`` and ``raw_samples``), not Thompson sampling or random search."""
        return (
            self.uses_model
            and not self.turbo
            and "num_restarts" in acquisition_arguments(self.acquisition)
        )

    def surrogate(self) -> SurrogateSpec | None:
        r"""The surrogate to fit (``None`` for random search): the registered one, or
        with ``model_options`` one that passes them to every fit."""
        if not self.uses_model:
            return None
        return get_surrogate(format_part(self.model, **dict(self.model_options)))

    def proposer(self) -> Proposer:
        r"""The proposer (in its initial state). A trust region's tolerances and TuRBO's
        restart design follow the run: the batch size its ``ask`` uses and the size of
        its initial design."""
        if not self.uses_model:
            return RandomProposer()
        region = dict(self.region_options)
        if self.turbo:
            # Thompson sampling's candidates are TuRBO's: ts(num_candidates=N)+turbo.
            return TurboProposer(
                batch_thompson=self.batch_thompson,
                local_fit=self.local_fit,
                **dict(self.acquisition_options),
                **region,
            )
        options = dict(self.acquisition_options)
        optimizer = {
            name: options.pop(name, default) for name, default in OPTIMIZER_ARGUMENTS.items()
        }
        proposer: Proposer = AcquisitionProposer(
            self.acquisition, sequential=self.sequential, options=options, **optimizer
        )
        if self.trust_region:
            proposer = TrustRegionProposer(proposer, local_fit=self.local_fit, **region)
        return proposer

    def fit_policy(self) -> FitPolicy:
        r"""How the surrogate is refitted: from scratch, or warm-started."""
        return ColdFit() if self.continual is None else ContinualFit(self.continual)

    def check(self, objective: Objective) -> None:
        r"""Raise a clear error if the strategy cannot serve ``objective`` (e.g. a
        target-value acquisition without a target, TuRBO with one)."""
        if not self.uses_model:
            return
        spec = ACQUISITIONS[self.acquisition]
        if self.turbo and objective.requires_target:
            raise ValueError("turbo minimises or maximises (not with a target value).")
        if spec.requires_target and not objective.requires_target:
            raise ValueError(f"{self.acquisition} needs a target value (HitTarget, --target).")
        if objective.requires_target and not spec.requires_target:
            targeted = ", ".join(
                name for name, other in ACQUISITIONS.items() if other.requires_target
            )
            raise ValueError(f"A target value needs a target-value acquisition ({targeted}).")


def acquisition_arguments(acquisition: str) -> tuple[str, ...]:
    r"""The arguments a strategy's acquisition takes: its registered options and
    ``optimize_acqf``'s ``num_restarts`` and ``raw_samples``, or for a strategy that
    proposes batches itself (Thompson sampling) the candidates it scores."""
    spec = get_acquisition(acquisition)
    if spec.propose is not None:
        return ("num_candidates",)
    return (*spec.options, *OPTIMIZER_ARGUMENTS)


def as_strategy(strategy: Strategy | str) -> Strategy:
    r"""``strategy``, parsed if it is a spelling."""
    return Strategy.parse(strategy) if isinstance(strategy, str) else strategy


def _pairs(keywords: Mapping[str, Value]) -> Arguments:
    return tuple(sorted(keywords.items()))


def _option_fields(name: str, positional: list[Value], keywords: dict[str, Value]) -> dict:
    r"""The :class:`Strategy` fields that option ``name`` with its arguments sets."""
    if name == "local":
        if keywords or len(positional) > 1:
            raise SpellingError("local takes one factor, e.g. local(4)")
        factor = positional[0] if positional else DEFAULT_LOCAL_FIT
        if isinstance(factor, bool) or not isinstance(factor, (int, float)):
            raise SpellingError(f"local's factor must be a number; got {factor!r}")
        return {"local_fit": float(factor)}
    if positional:
        raise SpellingError(f"{name} takes keyword arguments only")
    if name in ("tr", "turbo"):
        return {
            "trust_region" if name == "tr" else "turbo": True,
            "region_options": _pairs(keywords),
        }
    if name == "continual":
        try:
            return {"continual": ContinualTraining(**keywords)}
        except TypeError as error:
            raise SpellingError(f"continual: {error}") from None
    if keywords:
        raise SpellingError(f"{name} takes no arguments")
    return {"batch_thompson": True} if name == "bts" else {"sequential": True}
