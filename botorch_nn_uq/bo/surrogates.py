r"""The registry of surrogates: named ways to build and fit a model on BO data.

A :class:`SurrogateSpec` says how to fit a model on the data of a BO step (with its
input and outcome transforms) and how to rebuild a fitted one from its ``state_dict``;
the BO core (:mod:`botorch_nn_uq.bo.optimizer`) fits one at every step, warm-started
from the previous step's model where the fit policy says so, and rebuilds a saved
run's last model with :attr:`SurrogateSpec.restore`. Code outside the
package (e.g. a benchmark's peer model) adds entries with :func:`register_surrogate`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from botorch.models import SingleTaskGP
from botorch.models.model import Model
from botorch.models.transforms import Normalize, Standardize
from torch import Tensor

from botorch_nn_uq.fit import fit_model
from botorch_nn_uq.models import (
    NEON,
    NOMU,
    AutoDEUQ,
    DeepEnsemble,
    HyperDeepEnsemble,
    MCDropout,
    NESRandomSearch,
    NESRegularizedEvolution,
)


@dataclass(frozen=True)
class SurrogateSpec:
    r"""A named way to build and fit a surrogate on BO data.

    Most specs are made by :meth:`from_constructor` from a model constructor; a spec
    for a model that fits differently (e.g. a peer model with its own training API)
    gives ``build`` and ``restore`` itself.

    Args:
        name: The registry key (e.g. ``"mc-dropout"``).
        description: One line for ``--help`` and listings.
        build: ``build(train_X, train_Y, bounds, seed, warm_start=None, **overrides) ->
            fitted Model`` with ``train_X`` ``n x d`` in problem units, ``train_Y``
            ``n x m`` (to maximise), ``bounds`` ``2 x d``; the model normalises inputs
            to the bounds and standardises outcomes. ``warm_start`` (a fitted model this
            spec built before) initialises the fit from its weights, and ``overrides``
            are hyperparameters of this fit (e.g. a short ``max_steps`` for a
            warm-started refit).
        supports_warm_start: Whether ``build`` accepts ``warm_start`` and a
            ``max_steps`` override (the continual fit policy needs both).
        restore: ``restore(train_X, train_Y, bounds, state_dict) -> fitted Model``: a
            model this spec fitted on ``train_X``, ``train_Y``, rebuilt from its
            ``state_dict`` (a saved BO run's last model, to warm-start from after
            loading); ``None`` when the spec cannot (its runs are saved without their
            last model).

    Example:
        >>> spec = get_surrogate("deep-ensemble")
        >>> model = spec.build(train_X, train_Y, bounds, seed=0)
    """

    name: str
    description: str
    build: Callable[..., Model]
    supports_warm_start: bool = False
    restore: Callable[[Tensor, Tensor, Tensor, Mapping[str, Tensor]], Model] | None = None

    @classmethod
    def from_constructor(
        cls,
        name: str,
        description: str,
        construct: Callable[[Tensor, Tensor, Tensor], Model],
        *,
        fit_options: Mapping[str, Any] | None = None,
        supports_warm_start: bool = False,
        after_fit: Callable[[Model, Tensor], None] | None = None,
    ) -> SurrogateSpec:
        r"""A spec that constructs a model with ``construct`` and fits it with
        :func:`~botorch_nn_uq.fit.fit_model` (``model.fit(warm_start=...)`` for a
        warm-started fit).

        Args:
            name: The registry key.
            description: One line for listings.
            construct: ``construct(train_X, train_Y, bounds) -> Model``, the unfitted
                model with its transforms.
            fit_options: Hyperparameter overrides of every fit (the model's own
                hyperparameters are set by ``construct``).
            supports_warm_start: Whether the model's ``fit`` takes ``warm_start``.
            after_fit: ``after_fit(model, train_Y)``, called after every fit (e.g.
                NOMU's MW scaling of its calibration constant to the data's spread).

        Returns:
            The spec; its ``restore`` constructs the model and loads the state dict.
        """
        options = dict(fit_options or {})

        def build(
            train_X: Tensor,
            train_Y: Tensor,
            bounds: Tensor,
            seed: int,
            warm_start: Model | None = None,
            **overrides: Any,
        ) -> Model:
            model = construct(train_X, train_Y, bounds)
            fit_options = {**options, **overrides}
            if warm_start is not None:
                model.fit(seed=seed, warm_start=warm_start, **fit_options)
            else:
                fit_model(model, seed=seed, **fit_options)
            if after_fit is not None:
                after_fit(model, train_Y)
            return model

        def restore(
            train_X: Tensor, train_Y: Tensor, bounds: Tensor, state: Mapping[str, Tensor]
        ) -> Model:
            model = construct(train_X, train_Y, bounds)
            model.load_state_dict(state)
            return model.eval()

        return cls(name, description, build, supports_warm_start, restore)


SURROGATES: dict[str, SurrogateSpec] = {}
#: The name of the strategy that evaluates uniformly random points (no surrogate).
RANDOM_SEARCH = "random"


def register_surrogate(spec: SurrogateSpec) -> SurrogateSpec:
    r"""Add ``spec`` to ``SURROGATES`` (a name may be registered once)."""
    if spec.name in SURROGATES or spec.name == RANDOM_SEARCH:
        raise ValueError(f"A surrogate named {spec.name!r} is already registered.")
    SURROGATES[spec.name] = spec
    return spec


def get_surrogate(name: str) -> SurrogateSpec:
    r"""The registered surrogate ``name``; a clear error lists the valid names."""
    if name not in SURROGATES:
        valid = ", ".join(sorted([*SURROGATES, RANDOM_SEARCH]))
        raise ValueError(f"Unknown model {name!r}; valid models: {valid}.")
    return SURROGATES[name]


def _constructor(model_class: type, **options: Any) -> Callable[[Tensor, Tensor, Tensor], Model]:
    r"""``construct`` of a :class:`SurrogateSpec`: ``model_class(train_X, train_Y,
    **options)`` with inputs normalised to the bounds and standardised outcomes."""

    def construct(train_X: Tensor, train_Y: Tensor, bounds: Tensor) -> Model:
        return model_class(
            train_X,
            train_Y,
            input_transform=Normalize(bounds.shape[-1], bounds=bounds),
            outcome_transform=Standardize(train_Y.shape[-1]),
            **options,
        )

    return construct


def _nomu_constructor(train_X: Tensor, train_Y: Tensor, bounds: Tensor) -> Model:
    return _constructor(NOMU, bounds=bounds)(train_X, train_Y, bounds)


def _narrow_mean_width(model: Model, train_Y: Tensor) -> None:
    # MW scaling to the paper's narrow target (0.05 for outputs in [-1, 1], i.e. a tenth
    # of the data's standard deviation); c is set after every fit. With LogEI on the
    # protocol-1 suite the wide target (one standard deviation) explored at random and a
    # third of the narrow one exploited too early (benchmarks/README.md, "NOMU under
    # LogEI: the width of the MW scaling").
    model.calibrate_mean_width(target_width=0.1 * train_Y.std())


# Registered networks train on mini-batches of at most this many rows for a budget of
# optimizer steps, so a fit costs the same at n = 500 and n = 10,000. Up to 256 points
# a mini-batch is the whole data set and the fit is exactly the full-batch fit of the
# class defaults (500 epochs = 500 steps), as in every protocol-1 result.
_SCALABLE_BATCH = {"batch_size": 256}

register_surrogate(
    SurrogateSpec.from_constructor(
        "gp",
        "BoTorch SingleTaskGP (Normalize + Standardize, MLL fit)",
        _constructor(SingleTaskGP),
    )
)
register_surrogate(
    SurrogateSpec.from_constructor(
        "mc-dropout",
        "MC dropout network with a fixed bank of masks (500 steps on batches of 256)",
        _constructor(MCDropout, max_steps=500, **_SCALABLE_BATCH),
        supports_warm_start=True,
    )
)
register_surrogate(
    SurrogateSpec.from_constructor(
        "deep-ensemble",
        "deep ensemble of 5 Gaussian-head networks trained as one batched computation "
        "(500 steps on batches of 256)",
        _constructor(DeepEnsemble, max_steps=500, **_SCALABLE_BATCH),
        supports_warm_start=True,
    )
)
register_surrogate(
    SurrogateSpec.from_constructor(
        "hyper-deep-ensemble",
        "hyper-deep ensemble (20 random L2/dropout/learning-rate configurations, 3-fold "
        "out-of-fold greedy selection, stratification, 300 steps on batches of 256, "
        "single-precision training)",
        # A search at every BO step: 3 folds, 300 epochs and float32 training keep a step to
        # seconds (benchmarks/README.md, "Hyper-deep search in single precision").
        _constructor(
            HyperDeepEnsemble,
            num_folds=3,
            epochs=300,
            max_steps=300,
            training_dtype=torch.float32,
            **_SCALABLE_BATCH,
        ),
    )
)
# The searched ensembles keep their own mini-batches (NES: 32 rows; AutoDEUQ searches
# 16 to 256) and get step budgets that equal 300 epochs up to 80 points (two batches of
# 32, or four of 16, per epoch), so small-data searches are unchanged.
for _name, _class, _max_steps, _description in (
    (
        "nes-rs",
        NESRandomSearch,
        600,
        "Neural Ensemble Search, random search over 20 architectures (at most 600 steps)",
    ),
    (
        "nes-re",
        NESRegularizedEvolution,
        600,
        "Neural Ensemble Search, regularised evolution (at most 600 steps)",
    ),
    (
        "autodeuq",
        AutoDEUQ,
        1200,
        "AutoDEUQ: joint architecture and hyperparameter search (at most 1200 steps)",
    ),
):
    register_surrogate(
        SurrogateSpec.from_constructor(
            _name, _description, _constructor(_class, max_steps=_max_steps)
        )
    )
register_surrogate(
    SurrogateSpec.from_constructor(
        "neon",
        "NEON epistemic neural network (MLP backbone + EpiNet, 128 fixed indices; 2000 steps "
        "on batches of 256)",
        _constructor(NEON, max_steps=2000, **_SCALABLE_BATCH),
        supports_warm_start=True,
    )
)
register_surrogate(
    SurrogateSpec.from_constructor(
        "nomu",
        "NOMU network (fast default, MW-scaled to a tenth of the data std; 1024 steps on "
        "batches of 256)",
        _nomu_constructor,
        fit_options={"max_steps": 1024, **_SCALABLE_BATCH},
        supports_warm_start=True,
        after_fit=_narrow_mean_width,
    )
)
