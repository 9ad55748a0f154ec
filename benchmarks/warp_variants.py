"""Input-warped variants of the registered neural surrogates, for protocol 7's warped
Hartmann-6.

``deep-ensemble-warp`` and ``nomu-warp`` are the registry's ``deep-ensemble`` and
``nomu`` (the same constructor and fit options, warm starts and after-fit calibration)
with BoTorch's ``Warp`` in place of ``Normalize``: each input scaled to the box, then
through a Kumaraswamy CDF whose concentrations (initially one, the identity) train with
the network; the deep ensemble's members share one warp. ``gp-warp``
(``benchmarks/gp_peers.py``) is the GP with the same transform. The GP's warp carries
BoTorch tutorial's log-normal priors on the concentrations, which its marginal
likelihood adds; a network's loss has no prior term, so these warps carry none.

Example:
    >>> from botorch_nn_uq.bo import get_surrogate
    >>> get_surrogate("deep-ensemble-warp").name
    'deep-ensemble-warp'
"""

from __future__ import annotations

import dataclasses

from botorch.models.model import Model
from botorch.models.transforms import Standardize
from botorch.models.transforms.input import Warp
from torch import Tensor

from botorch_nn_uq.bo import SURROGATES, SurrogateSpec, register_surrogate
from botorch_nn_uq.models import MODEL_CARDS, ModelCard

#: The cards that get a warped variant, as ``<card>-warp``.
WARPED_CARDS = ("deep-ensemble", "nomu")


def warped_spec(card: ModelCard) -> SurrogateSpec:
    r"""``card``'s registry spec with a learnable ``Warp`` input transform to the box,
    named ``<card>-warp``.

    Args:
        card: A model card whose model trains learnable input transforms.

    Returns:
        The spec, built as :func:`~botorch_nn_uq.bo.surrogate_from_card` builds the
        card's own, with ``Warp(d, indices=range(d), bounds=bounds)`` for ``Normalize``.
    """

    def construct(train_X: Tensor, train_Y: Tensor, bounds: Tensor) -> Model:
        dim = bounds.shape[-1]
        return card.model_class(
            train_X,
            train_Y,
            input_transform=Warp(dim, indices=list(range(dim)), bounds=bounds),
            outcome_transform=Standardize(train_Y.shape[-1]),
            **card.constructor_options(bounds),
        )

    spec = SurrogateSpec.from_constructor(
        f"{card.name}-warp",
        f"{card.description}, inputs through a learnable Warp",
        construct,
        fit_options=card.bo.fit_options,
        supports_warm_start=card.bo.supports_warm_start,
        after_fit=card.bo.after_fit,
    )
    return dataclasses.replace(spec, hyperparameter_class=card.model_class.hyperparameter_class)


def register() -> None:
    r"""Register the warped variants (once per process)."""
    for card in MODEL_CARDS:
        if card.name in WARPED_CARDS and f"{card.name}-warp" not in SURROGATES:
            register_surrogate(warped_spec(card))


register()
