"""Variants of the registered deep ensemble for protocol 7.

``deep-ensemble-10`` and ``deep-ensemble-20`` are the registered ``deep-ensemble`` (5
members, 500 steps on batches of 256) with 10 or 20 members; ``deep-ensemble-200-steps``
is it with a budget of 200 optimizer steps (a cheaper fit, for problems where the fit's
CPU time decides); ``deep-ensemble-float64`` and ``deep-ensemble-200-steps-float64`` train
in double precision (the registered ensemble trains in single precision, served in the
data's); ``deep-ensemble-gelu-150`` has GELU activations and 150 full-batch steps at a
learning rate of 0.01, ``deep-ensemble-gelu-32`` GELU and ``deep-ensemble-silu-32``
SiLU activations in two hidden layers of 32 units (``deep-ensemble-silu-32-float64`` in
double precision), ``deep-ensemble-32`` ReLU members of that width and
``deep-ensemble-smelu-32`` members of that width whose ReLUs are rounded off at the
kink (``smelu``): the cheap fits of a few dozen points that protocol 1 compared.
``deep-ensemble-continuous`` draws its MC samples from the Gaussian of the members'
moments (``joint_samples="continuous"``) where the registered ensemble samples whole
members (``"functions"``).
Everything else is unchanged: the card with other constructor options,
registered through :func:`botorch_nn_uq.bo.surrogate_from_card`. The members still train
as one batched computation, so a fit costs less than members × one member's.

Example:
    >>> import benchmarks.ensemble_variants  # noqa: F401  (registers the variants)
    >>> from botorch_nn_uq.bo import get_surrogate
    >>> get_surrogate("deep-ensemble-10").name
    'deep-ensemble-10'
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from botorch_nn_uq.bo import SURROGATES, register_surrogate, surrogate_from_card
from botorch_nn_uq.models import MODEL_CARDS, ModelCard

#: The member counts registered, as ``deep-ensemble-<members>``.
LARGER_ENSEMBLE_SIZES = (10, 20)
#: The step budgets registered, as ``deep-ensemble-<steps>-steps``.
SHORTER_STEP_BUDGETS = (100, 200)


def _deep_ensemble_card() -> ModelCard:
    return next(card for card in MODEL_CARDS if card.name == "deep-ensemble")


def _variant(
    suffix: str,
    description: tuple[str, str],
    card: ModelCard | None = None,
    **options: Any,
) -> ModelCard:
    r"""The card named ``<card>-<suffix>`` (``card``: the deep ensemble's by default), with
    ``options`` over its BO constructor options and ``description[0]`` replaced by
    ``description[1]`` in its description."""
    card = _deep_ensemble_card() if card is None else card
    return dataclasses.replace(
        card,
        name=f"{card.name}-{suffix}",
        description=card.description.replace(*description),
        bo=dataclasses.replace(
            card.bo, constructor_options={**card.bo.constructor_options, **options}
        ),
    )


def larger_ensemble_card(members: int) -> ModelCard:
    r"""The deep ensemble's card with ``members`` members, named
    ``deep-ensemble-<members>``.

    Args:
        members: The ensemble size, at least 2.
    """
    if isinstance(members, bool) or not isinstance(members, int) or members < 2:
        raise ValueError(f"members must be an integer of at least 2; got {members!r}.")
    return _variant(
        str(members), ("5 Gaussian-head", f"{members} Gaussian-head"), ensemble_size=members
    )


def step_budget_card(steps: int) -> ModelCard:
    r"""The deep ensemble's card with a budget of ``steps`` optimizer steps, named
    ``deep-ensemble-<steps>-steps``.

    Args:
        steps: The fit's optimizer steps, at least 1.
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be an integer of at least 1; got {steps!r}.")
    return _variant(f"{steps}-steps", ("500 steps", f"{steps} steps"), max_steps=steps)


def double_precision_card(card: ModelCard) -> ModelCard:
    r"""``card`` (a deep ensemble's) training in double precision, named
    ``<card>-float64``."""
    return _variant("float64", ("float32", "float64"), card, training_dtype=torch.float64)


def smooth_short_card() -> ModelCard:
    r"""The deep ensemble with GELU activations and 150 full-batch steps at a learning rate
    of 0.01 (on up to 256 points), named ``deep-ensemble-gelu-150``: a fit of a few dozen
    points costs about twice a ``SingleTaskGP``'s, and ``optimize_acqf`` converges in a
    sixth of the evaluations a ReLU network needs (protocol 1 measured what it costs)."""
    card = _variant(
        "gelu-150",
        ("Gaussian-head networks", "Gaussian-head GELU networks"),
        activation="gelu",
        epochs=150,
        learning_rate=1e-2,
    )
    return dataclasses.replace(
        card,
        description=card.description.replace(
            "(500 steps", "(150 epochs at a learning rate of 0.01, at most 500 steps"
        ),
    )


def smooth_narrow_card() -> ModelCard:
    r"""The deep ensemble with GELU activations and two hidden layers of 32 units, named
    ``deep-ensemble-gelu-32``: the registered schedule (500 steps, float32 training) at
    about a third of the arithmetic per step, with the smooth surface on which
    ``optimize_acqf`` converges in a few dozen evaluations."""
    return _variant(
        "gelu-32",
        ("Gaussian-head networks", "Gaussian-head GELU networks of 2 x 32 units"),
        activation="gelu",
        hidden_widths=(32, 32),
    )


def smooth_cheap_card() -> ModelCard:
    r"""The deep ensemble with SiLU (swish) activations and two hidden layers of 32 units,
    named ``deep-ensemble-silu-32``: :func:`smooth_narrow_card` with the smooth activation
    whose derivative costs least on a CPU core (about a third of GELU's)."""
    return _variant(
        "silu-32",
        ("Gaussian-head networks", "Gaussian-head SiLU networks of 2 x 32 units"),
        activation="swish",
        hidden_widths=(32, 32),
    )


def narrow_card() -> ModelCard:
    r"""The deep ensemble with two hidden layers of 32 units, named
    ``deep-ensemble-32``: the narrower members alone, to separate their effect from
    the activation's."""
    return _variant(
        "32",
        ("Gaussian-head networks", "Gaussian-head networks of 2 x 32 units"),
        hidden_widths=(32, 32),
    )


def smelu_narrow_card() -> ModelCard:
    r"""The deep ensemble with two hidden layers of 32 units whose ReLUs are rounded off
    at the kink (:class:`~botorch_nn_uq.nn.mlp.SmeLU`), named ``deep-ensemble-smelu-32``:
    the network of ``deep-ensemble-32`` to within 0.005 per unit, with a surface that
    ``optimize_acqf`` converges on."""
    return _variant(
        "smelu-32",
        ("Gaussian-head networks", "Gaussian-head SmeLU networks of 2 x 32 units"),
        activation="smelu",
        hidden_widths=(32, 32),
    )


def continuous_samples_card() -> ModelCard:
    r"""The deep ensemble whose MC samples are continuous, the Gaussian with the members'
    mean and joint covariance (``joint_samples="continuous"``), named
    ``deep-ensemble-continuous``; the registered ensemble samples one member per MC
    sample."""
    return _variant(
        "continuous",
        ("deep ensemble of", "deep ensemble (continuous joint samples) of"),
        joint_samples="continuous",
    )


def register() -> None:
    r"""Register the variants (once per process)."""
    cards = [larger_ensemble_card(members) for members in LARGER_ENSEMBLE_SIZES]
    cards += [step_budget_card(steps) for steps in SHORTER_STEP_BUDGETS]
    cards += [
        double_precision_card(card) for card in (_deep_ensemble_card(), step_budget_card(200))
    ]
    cards += [smooth_short_card(), smooth_narrow_card(), smooth_cheap_card(), narrow_card()]
    cards.append(smelu_narrow_card())
    cards.append(double_precision_card(smooth_cheap_card()))
    cards.append(continuous_samples_card())
    for card in cards:
        if card.name not in SURROGATES:
            register_surrogate(surrogate_from_card(card))


register()
