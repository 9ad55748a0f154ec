"""Larger deep ensembles for protocol 7: ``deep-ensemble-10`` and ``deep-ensemble-20``.

The registered ``deep-ensemble`` (5 members, 500 steps on batches of 256) with 10 or 20
members, everything else unchanged: its card with another ``ensemble_size``, registered
through :func:`botorch_nn_uq.bo.surrogate_from_card`. The members still train as one
batched computation, so a fit costs less than members × one member's.

Example:
    >>> import benchmarks.ensemble_variants  # noqa: F401  (registers the variants)
    >>> from botorch_nn_uq.bo import get_surrogate
    >>> get_surrogate("deep-ensemble-10").name
    'deep-ensemble-10'
"""

from __future__ import annotations

import dataclasses

from botorch_nn_uq.bo import SURROGATES, register_surrogate, surrogate_from_card
from botorch_nn_uq.models import MODEL_CARDS, ModelCard

#: The member counts registered, as ``deep-ensemble-<members>``.
LARGER_ENSEMBLE_SIZES = (10, 20)


def larger_ensemble_card(members: int) -> ModelCard:
    r"""The deep ensemble's card with ``members`` members, named
    ``deep-ensemble-<members>``.

    Args:
        members: The ensemble size, at least 2.
    """
    if isinstance(members, bool) or not isinstance(members, int) or members < 2:
        raise ValueError(f"members must be an integer of at least 2; got {members!r}.")
    card = next(card for card in MODEL_CARDS if card.name == "deep-ensemble")
    options = {**card.bo.constructor_options, "ensemble_size": members}
    return dataclasses.replace(
        card,
        name=f"{card.name}-{members}",
        description=card.description.replace("5 Gaussian-head", f"{members} Gaussian-head"),
        bo=dataclasses.replace(card.bo, constructor_options=options),
    )


def register() -> None:
    r"""Register ``deep-ensemble-10`` and ``deep-ensemble-20`` (once per process)."""
    for members in LARGER_ENSEMBLE_SIZES:
        card = larger_ensemble_card(members)
        if card.name not in SURROGATES:
            register_surrogate(surrogate_from_card(card))


register()
