r"""The registry of acquisition functions, by the names the CLI and the benchmarks use.

Every acquisition of the package is registered centrally, below in this module (the
surrogates are in :mod:`botorch_nn_uq.bo.surrogates`). To add an acquisition function,
register an :class:`AcquisitionSpec` naming its class and the options it reads; the
class needs a BoTorch input constructor
(``botorch.acquisition.input_constructors.acqf_input_constructor``, as
:mod:`botorch_nn_uq.acquisition.input_constructors` does for the package's classes),
through which every acquisition is built. A strategy that proposes a batch itself
(batch Thompson sampling) registers a ``propose`` function instead. Code outside the
package adds entries with :func:`register_acquisition`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from botorch.acquisition import (
    AcquisitionFunction,
    ExpectedImprovement,
    LogExpectedImprovement,
    MCAcquisitionFunction,
    ProbabilityOfImprovement,
    UpperConfidenceBound,
    qLogExpectedImprovement,
    qLogNoisyExpectedImprovement,
    qUpperConfidenceBound,
)
from botorch.acquisition.analytic import AnalyticAcquisitionFunction
from botorch.acquisition.input_constructors import get_acqf_input_constructor
from botorch.acquisition.objective import MCAcquisitionObjective
from botorch.models.model import Model
from botorch.sampling.base import MCSampler
from botorch.sampling.get_sampler import get_sampler
from botorch.utils.datasets import SupervisedDataset
from torch import Tensor

from botorch_nn_uq.acquisition import (
    LeakyExpectedImprovement,
    LogRobustTargetProbabilityOfImprovement,
    RobustTargetExpectedImprovement,
    RobustTargetLowerConfidenceBound,
    RobustTargetProbabilityOfImprovement,
    qLeakyExpectedImprovement,
    qRobustTargetExpectedImprovement,
)
from botorch_nn_uq.generation import batch_thompson_sampling
from botorch_nn_uq.models.function_bank import ResizableFunctionBank


@dataclass(frozen=True)
class AcquisitionContext:
    r"""What an acquisition builder may use.

    Attributes:
        train_X: ``n x d`` inputs evaluated so far (problem units).
        train_Y: ``n x k`` model targets (to maximise): ``-f`` (or ``f``) of a scalar
            objective, the outputs of ``h`` of a composite one.
        bounds: ``2 x d`` search box.
        seed: Seed for MC samplers.
        options: Extra named options from the caller (e.g. a target value).
        search_bounds: The ``2 x d`` box where this step's proposals go (a trust region
            around ``center``); ``None``: the whole ``bounds``.
        center: The ``d``-vector around which a trust region is drawn (the best point).
        objective: The MC objective of the model's samples (``-g`` of a composite
            objective), or ``None`` for the model's single output.
        step: The BO step (1, 2, ...).
        X_pending: ``p x d`` points asked and not yet told, or ``None``: an MC
            acquisition takes them as BoTorch's ``X_pending``, Thompson sampling leaves
            them out of its candidates.
        X_failed: ``f x d`` points whose evaluation failed, or ``None``: never fitted,
            avoided as the pending ones are (see :attr:`X_avoid`).
    """

    train_X: Tensor
    train_Y: Tensor
    bounds: Tensor
    seed: int
    options: Mapping[str, Any] = field(default_factory=dict)
    search_bounds: Tensor | None = None
    center: Tensor | None = None
    objective: MCAcquisitionObjective | None = None
    step: int = 1
    X_pending: Tensor | None = None
    X_failed: Tensor | None = None

    @property
    def X_avoid(self) -> Tensor | None:
        r"""The pending and the failed points (``(p + f) x d``): those a proposer keeps
        out of its proposals; ``None`` when there are none."""
        avoided = [X for X in (self.X_pending, self.X_failed) if X is not None]
        return torch.cat(avoided) if avoided else None

    @property
    def proposal_bounds(self) -> Tensor:
        r"""``search_bounds`` if given, else ``bounds``."""
        return self.bounds if self.search_bounds is None else self.search_bounds

    @property
    def training_data(self) -> SupervisedDataset:
        r"""``train_X`` and ``train_Y`` as the dataset BoTorch's input constructors take."""
        return SupervisedDataset(
            self.train_X,
            self.train_Y,
            feature_names=[f"x{i}" for i in range(self.train_X.shape[-1])],
            outcome_names=(
                ["y"]
                if self.train_Y.shape[-1] == 1
                else [f"y{i}" for i in range(self.train_Y.shape[-1])]
            ),
        )


def _mc_sampler(model: Model, context: AcquisitionContext) -> MCSampler:
    r"""A sampler of 128 samples seeded with ``context.seed``, of the type BoTorch
    registers for the model's posterior."""
    posterior = model.posterior(context.train_X[:1])
    return get_sampler(posterior, torch.Size([128]), seed=context.seed)


@dataclass(frozen=True)
class AcquisitionSpec:
    r"""A named acquisition function, or a strategy that proposes a batch directly.

    Exactly one of ``acqf_class`` and ``propose`` is given. An acquisition function is
    built as Ax builds one: ``acqf_class(**get_acqf_input_constructor(acqf_class)(
    model=model, training_data=context.training_data, **inputs))``, so incumbents
    (``best_f``, ``E_min``) and baselines come from the training data as BoTorch's
    input constructors compute them.

    Args:
        name: The registry key (e.g. ``"logei"``).
        description: One line for ``--help`` and listings.
        acqf_class: The ``AcquisitionFunction`` class, maximised with
            ``optimize_acqf``; it needs a registered BoTorch input constructor.
        options: The caller's options (``context.options``) this acquisition passes to
            its input constructor, each with its default (e.g. ``{"beta": 4.0}``).
        requires_target: Whether it is a target-value acquisition, which also passes
            ``context.options["target"]`` (the target in the model's outcome units).
        propose: ``propose(model, context, q) -> q x d`` proposals (problem units) for
            strategies without an acquisition function to maximise (batch Thompson
            sampling).
        check_batch_size: For a ``propose`` strategy, ``check_batch_size(q, d,
            options)`` raises a ``ValueError`` naming the limit if the strategy cannot
            propose ``q`` points in ``d`` dimensions with the proposer's ``options``
            (e.g. more points than candidates); ``None``: no limit.
    """

    name: str
    description: str
    acqf_class: type[AcquisitionFunction] | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    requires_target: bool = False
    propose: Callable[[Model, AcquisitionContext, int], Tensor] | None = None
    check_batch_size: Callable[[int, int, Mapping[str, Any]], None] | None = None

    @property
    def proposes_batches(self) -> bool:
        r"""Whether it proposes a batch of several points per step: a strategy or an MC
        acquisition (an analytic acquisition function scores one point, ``q = 1``)."""
        return self.propose is not None or not issubclass(
            self.acqf_class, AnalyticAcquisitionFunction
        )

    def __post_init__(self) -> None:
        if (self.acqf_class is None) == (self.propose is None):
            raise ValueError(
                f"Acquisition {self.name!r} needs exactly one of acqf_class and propose."
            )
        if self.acqf_class is not None:
            # A class without an input constructor fails here, not at the first BO step.
            get_acqf_input_constructor(self.acqf_class)

    def build(self, model: Model, context: AcquisitionContext) -> AcquisitionFunction:
        r"""The acquisition function on ``model`` at one BO step.

        A Monte Carlo acquisition gets 128 samples from a sampler seeded with
        ``context.seed``, of the type BoTorch registers for the model's posterior.

        Args:
            model: The fitted surrogate.
            context: The step's data, seed and options.

        Returns:
            An ``acqf_class`` instance.
        """
        if self.acqf_class is None:
            raise TypeError(
                f"Acquisition {self.name!r} proposes batches itself; it has no acquisition "
                "function to build."
            )
        inputs = {
            name: context.options.get(name, default) for name, default in self.options.items()
        }
        if self.requires_target:
            inputs["target"] = context.options["target"]
        if issubclass(self.acqf_class, MCAcquisitionFunction):
            inputs["sampler"] = _mc_sampler(model, context)
            if context.objective is not None:
                inputs["objective"] = context.objective
        elif context.objective is not None:
            raise ValueError(
                f"Acquisition {self.name!r} is analytic: it scores the model's single output "
                "and takes no objective of several outputs; use an MC acquisition (e.g. "
                "qlogei)."
            )
        construct_inputs = get_acqf_input_constructor(self.acqf_class)
        return self.acqf_class(
            **construct_inputs(model=model, training_data=context.training_data, **inputs)
        )


ACQUISITIONS: dict[str, AcquisitionSpec] = {}


def register_acquisition(spec: AcquisitionSpec) -> AcquisitionSpec:
    r"""Add ``spec`` to ``ACQUISITIONS`` (a name may be registered once)."""
    if spec.name in ACQUISITIONS:
        raise ValueError(f"An acquisition named {spec.name!r} is already registered.")
    ACQUISITIONS[spec.name] = spec
    return spec


def get_acquisition(name: str) -> AcquisitionSpec:
    r"""The registered acquisition ``name``; a clear error lists the valid names."""
    if name not in ACQUISITIONS:
        valid = ", ".join(sorted(ACQUISITIONS))
        raise ValueError(f"Unknown acquisition {name!r}; valid acquisitions: {valid}.")
    return ACQUISITIONS[name]


register_acquisition(
    AcquisitionSpec("logei", "analytic LogExpectedImprovement", LogExpectedImprovement)
)
register_acquisition(AcquisitionSpec("ei", "analytic ExpectedImprovement", ExpectedImprovement))
register_acquisition(
    AcquisitionSpec("pi", "analytic ProbabilityOfImprovement", ProbabilityOfImprovement)
)
register_acquisition(
    AcquisitionSpec(
        "ucb",
        "analytic UpperConfidenceBound (beta = option 'beta', default 4)",
        UpperConfidenceBound,
        options={"beta": 4.0},
    )
)
register_acquisition(
    AcquisitionSpec("qlogei", "MC qLogExpectedImprovement", qLogExpectedImprovement)
)
register_acquisition(
    AcquisitionSpec("qlognei", "MC qLogNoisyExpectedImprovement", qLogNoisyExpectedImprovement)
)
register_acquisition(
    AcquisitionSpec(
        "qucb",
        "MC qUpperConfidenceBound (beta = option 'beta', default 4)",
        qUpperConfidenceBound,
        options={"beta": 4.0},
    )
)
register_acquisition(
    AcquisitionSpec(
        "leaky-ei",
        "analytic leaky EI (negative slope = option 'negative_slope', default 0.01)",
        LeakyExpectedImprovement,
        options={"negative_slope": 0.01},
    )
)
register_acquisition(
    AcquisitionSpec(
        "q-leaky-ei",
        "MC q-leaky EI (negative slope = option 'negative_slope', default 0.01)",
        qLeakyExpectedImprovement,
        options={"negative_slope": 0.01},
    )
)
for _name, _description, _class, _options in (
    (
        "robust-ei",
        "robust target-value EI (noncentral chi-square; needs --target)",
        RobustTargetExpectedImprovement,
        {},
    ),
    (
        "robust-pi",
        "robust target-value probability of improvement (needs --target)",
        RobustTargetProbabilityOfImprovement,
        {},
    ),
    (
        "robust-log-pi",
        "log of the robust target-value probability of improvement (needs --target)",
        LogRobustTargetProbabilityOfImprovement,
        {},
    ),
    (
        "robust-lcb",
        "robust target-value lower confidence bound (quantile = option 'quantile', "
        "default 0.1; needs --target)",
        RobustTargetLowerConfidenceBound,
        {"quantile": 0.1},
    ),
    (
        "q-robust-ei",
        "MC robust target-value EI (needs --target)",
        qRobustTargetExpectedImprovement,
        {},
    ),
):
    # Observations are treated as noise-free means: the input constructors compute the
    # incumbent E_min from them.
    register_acquisition(
        AcquisitionSpec(
            _name,
            _description,
            _class,
            options={"aleatoric_variance": 0.0, **_options},
            requires_target=True,
        )
    )


#: The candidates batch Thompson sampling (``"ts"``) scores unless the option
#: ``num_candidates`` says otherwise.
THOMPSON_NUM_CANDIDATES = 4096


def _propose_thompson(model: Model, context: AcquisitionContext, q: int) -> Tensor:
    r"""Batch Thompson sampling (``botorch_nn_uq.generation``) around the five best
    observations, or inside the trust region; a model whose function bank can grow gets
    at least ``2 q`` functions. Pending and failed points are excluded like evaluated
    ones: no candidate within the exclusion radius of one is proposed."""
    if isinstance(model, ResizableFunctionBank):
        bank_size = model.posterior(context.train_X[:1]).values.shape[-3]
        if bank_size < 2 * q:
            model.resample_function_bank(2 * q, seed=context.seed)
    if context.search_bounds is None:
        best = context.train_Y.squeeze(-1).topk(min(5, context.train_Y.shape[0])).indices
        centers, local = context.train_X[best], {}
    else:
        # All candidates inside the trust region, spread over its whole extent.
        centers, local = context.center.unsqueeze(0), {"local_fraction": 1.0, "scale": 0.5}
    avoid = context.X_avoid
    return batch_thompson_sampling(
        model,
        context.proposal_bounds,
        q,
        X_baseline=context.train_X if avoid is None else torch.cat([context.train_X, avoid]),
        centers=centers,
        num_candidates=context.options.get("num_candidates", THOMPSON_NUM_CANDIDATES),
        local_fraction=local.get("local_fraction", 0.5),
        perturbation_scale=local.get("scale", 0.2),
        seed=context.seed,
    )


def _check_thompson_batch_size(q: int, dim: int, options: Mapping[str, Any]) -> None:
    r"""Refuse more points than batch Thompson sampling has candidates (every point of
    its batch is a distinct candidate)."""
    num_candidates = options.get("num_candidates", THOMPSON_NUM_CANDIDATES)
    if q > num_candidates:
        raise ValueError(
            f"ts cannot propose q = {q} points from its {num_candidates} candidates (each "
            f"point is a distinct candidate); raise the option num_candidates to at least "
            f"{q}, or ask for fewer points."
        )


register_acquisition(
    AcquisitionSpec(
        "ts",
        "batch Thompson sampling over the model's functions, distinct proposals for any q "
        f"up to the candidates (option 'num_candidates', default {THOMPSON_NUM_CANDIDATES})",
        propose=_propose_thompson,
        check_batch_size=_check_thompson_batch_size,
    )
)

#: The names of the acquisitions the package itself registers, in order (code outside the
#: package, a benchmark's peer say, may add entries to :data:`ACQUISITIONS`).
PACKAGE_ACQUISITIONS: tuple[str, ...] = tuple(ACQUISITIONS)
