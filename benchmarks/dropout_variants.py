"""Variants of the registered MC dropout network for protocol 1.

``mc-dropout-smelu`` is the registered ``mc-dropout`` (500 steps on batches of 256, ReLU
units) with SmeLU units (:class:`~botorch_nn_uq.nn.mlp.SmeLU`, ReLU with its kink rounded
off): the same network to within 0.005 per unit, on whose surface ``optimize_acqf``
converges in a fraction of a ReLU network's evaluations. ``mc-dropout-continuous`` is the
registered ``mc-dropout`` with continuous MC samples, the Gaussian of the masks' moments
(``joint_samples="continuous"``), where the registered one samples one mask per MC sample.

Example:
    >>> import benchmarks.dropout_variants  # noqa: F401  (registers the variants)
    >>> from botorch_nn_uq.bo import get_surrogate
    >>> get_surrogate("mc-dropout-smelu").name
    'mc-dropout-smelu'
"""

from __future__ import annotations

import dataclasses
from typing import Any

from botorch_nn_uq.bo import SURROGATES, register_surrogate, surrogate_from_card
from botorch_nn_uq.models import MODEL_CARDS, ModelCard


def _variant(suffix: str, description: str, **options: Any) -> ModelCard:
    r"""The registered MC dropout card named ``mc-dropout-<suffix>``, with ``options``
    over its BO constructor options and ``description`` in place of "MC dropout network"
    in its description."""
    card = next(card for card in MODEL_CARDS if card.name == "mc-dropout")
    return dataclasses.replace(
        card,
        name=f"mc-dropout-{suffix}",
        description=card.description.replace("MC dropout network", description),
        bo=dataclasses.replace(
            card.bo, constructor_options={**card.bo.constructor_options, **options}
        ),
    )


def smelu_card() -> ModelCard:
    r"""The MC dropout network's card with SmeLU units, named ``mc-dropout-smelu``."""
    return _variant("smelu", "MC dropout SmeLU network", activation="smelu")


def continuous_samples_card() -> ModelCard:
    r"""The MC dropout network's card with continuous MC samples, the Gaussian with the
    masks' mean and joint covariance, named ``mc-dropout-continuous``."""
    return _variant(
        "continuous",
        "MC dropout network (continuous joint samples)",
        joint_samples="continuous",
    )


def register() -> None:
    r"""Register the variants (once per process)."""
    for card in (smelu_card(), continuous_samples_card()):
        if card.name not in SURROGATES:
            register_surrogate(surrogate_from_card(card))


register()
