"""Variants of the registered MC dropout network for protocol 1.

``mc-dropout-smelu`` is the registered ``mc-dropout`` (500 steps on batches of 256, ReLU
units) with SmeLU units (:class:`~botorch_nn_uq.nn.mlp.SmeLU`, ReLU with its kink rounded
off): the same network to within 0.005 per unit, on whose surface ``optimize_acqf``
converges in a fraction of a ReLU network's evaluations.

Example:
    >>> import benchmarks.dropout_variants  # noqa: F401  (registers the variants)
    >>> from botorch_nn_uq.bo import get_surrogate
    >>> get_surrogate("mc-dropout-smelu").name
    'mc-dropout-smelu'
"""

from __future__ import annotations

import dataclasses

from botorch_nn_uq.bo import SURROGATES, register_surrogate, surrogate_from_card
from botorch_nn_uq.models import MODEL_CARDS, ModelCard


def smelu_card() -> ModelCard:
    r"""The MC dropout network's card with SmeLU units, named ``mc-dropout-smelu``."""
    card = next(card for card in MODEL_CARDS if card.name == "mc-dropout")
    options = {**card.bo.constructor_options, "activation": "smelu"}
    return dataclasses.replace(
        card,
        name="mc-dropout-smelu",
        description=card.description.replace("MC dropout network", "MC dropout SmeLU network"),
        bo=dataclasses.replace(card.bo, constructor_options=options),
    )


def register() -> None:
    r"""Register the variants (once per process)."""
    card = smelu_card()
    if card.name not in SURROGATES:
        register_surrogate(surrogate_from_card(card))


register()
