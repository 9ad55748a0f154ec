r"""The registry of surrogates: named ways to build and fit a model on BO data.

A :class:`SurrogateSpec` says how to fit a model on the data of a BO step (with its
input and outcome transforms) and how to rebuild a fitted one from its ``state_dict``;
the BO core (:mod:`botorch_nn_uq.bo.optimizer`) fits one at every step, warm-started
from the previous step's model where the fit policy says so, and rebuilds a saved
run's last model with :attr:`SurrogateSpec.restore`. The package's entries are derived
from the model cards (:data:`botorch_nn_uq.models.MODEL_CARDS`, by
:func:`surrogate_from_card`, in the cards' order); code outside the package (e.g. a
benchmark's peer model) adds entries with :func:`register_surrogate`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from botorch.models.model import Model
from botorch.models.transforms import Normalize, Standardize
from torch import Tensor

from botorch_nn_uq.bo.spelling import format_part, parse_part
from botorch_nn_uq.fit import fit_model
from botorch_nn_uq.models import MODEL_CARDS, ModelCard
from botorch_nn_uq.models.base import build_hyperparameters


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
    hyperparameter_class: type | None = None

    def with_options(self, **options: Any) -> SurrogateSpec:
        r"""This surrogate with hyperparameter overrides of every fit, named with them
        (``deep-ensemble(max_steps=200)``); an override that a fit passes (e.g. a warm
        start's ``max_steps``) takes precedence.

        Raises:
            ValueError: If the surrogate takes no hyperparameters or an option is not
                one of them (or has an invalid value).
        """
        if not options:
            return self
        if self.hyperparameter_class is None:
            raise ValueError(f"Model {self.name!r} takes no hyperparameter options.")
        try:
            build_hyperparameters(self.hyperparameter_class, options)
        except (TypeError, ValueError) as error:
            raise ValueError(f"{self.name}: {error}") from None
        build = self.build

        def build_with_options(*args: Any, **overrides: Any) -> Model:
            return build(*args, **{**options, **overrides})

        return dataclasses.replace(
            self, name=format_part(self.name, **options), build=build_with_options
        )

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
    r"""The registered surrogate ``name``, or with hyperparameter overrides spelled
    ``name(key=value, ...)`` (:meth:`SurrogateSpec.with_options`; one spec per spelling,
    so a saved run names it and loading rebuilds it); a clear error lists the valid
    names."""
    if name in SURROGATES:
        return SURROGATES[name]
    base = parse_part(name)[0] if "(" in name else name
    if base not in SURROGATES:
        valid = ", ".join(sorted([*SURROGATES, RANDOM_SEARCH]))
        raise ValueError(f"Unknown model {name!r}; valid models: {valid}.")
    return _with_options(name)


@functools.cache
def _with_options(spelled: str) -> SurrogateSpec:
    name, positional, options = parse_part(spelled)
    if positional:
        raise ValueError(f"{spelled!r}: a model takes keyword arguments only.")
    return SURROGATES[name].with_options(**options)


def surrogate_from_card(card: ModelCard) -> SurrogateSpec:
    r"""The registry's spec of a model card: its model with inputs normalised to the
    bounds and standardised outcomes, built and fitted with the card's
    :class:`~botorch_nn_uq.models.card.BODefaults`.

    Args:
        card: The model's card.

    Returns:
        The spec named ``card.name``, made by :meth:`SurrogateSpec.from_constructor`.
    """

    def construct(train_X: Tensor, train_Y: Tensor, bounds: Tensor) -> Model:
        return card.model_class(
            train_X,
            train_Y,
            input_transform=Normalize(bounds.shape[-1], bounds=bounds),
            outcome_transform=Standardize(train_Y.shape[-1]),
            **card.constructor_options(bounds),
        )

    spec = SurrogateSpec.from_constructor(
        card.name,
        card.description,
        construct,
        fit_options=card.bo.fit_options,
        supports_warm_start=card.bo.supports_warm_start,
        after_fit=card.bo.after_fit,
    )
    hyperparameter_class = getattr(card.model_class, "hyperparameter_class", None)
    return dataclasses.replace(spec, hyperparameter_class=hyperparameter_class)


for _card in MODEL_CARDS:
    register_surrogate(surrogate_from_card(_card))

#: The names of the surrogates the package itself registers (one per model card), in
#: order (code outside the package, a benchmark's peer say, may add entries to
#: :data:`SURROGATES`).
PACKAGE_SURROGATES: tuple[str, ...] = tuple(SURROGATES)
