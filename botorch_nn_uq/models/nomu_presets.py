"""NOMU's presets: the paper's settings (Heiss et al., ICML 2022) and their rescaling
from the paper's coordinates to BoTorch's.

The paper tunes its values for inputs in ``[-1, 1]^d`` and outputs roughly in ``[-1,
1]``; BoTorch models see inputs in ``[0, 1]^d`` (``Normalize``) and standardised outputs
(``Standardize``). :func:`rescale_outputs` changes the loss's values so that the
uncertainty keeps its shape under such a change of output scale, and :func:`build_preset`
looks a preset up in either coordinates.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from botorch_nn_uq.models.nomu import NOMUHyperparameters

#: Standardised outcome units per unit of the paper's ``[-1, 1]`` output scaling: outputs
#: spread over ``[-1, 1]`` have a standard deviation of about 0.5, so ``Standardize``
#: doubles them. :func:`rescale_outputs` uses it to carry the paper's values over to
#: BoTorch's coordinates.
PAPER_TO_STANDARDIZED_OUTPUT_SCALE = 2.0

#: What the paper's toy-regression and BO settings share, in the paper's coordinates:
#: three hidden layers of 1024 units per branch, trained full-batch with Adam for 1024
#: epochs from a ``U[-0.05, 0.05]`` initialisation, with the plain loss.
_PAPER_LARGE_NETWORK_SETTINGS: dict[str, Any] = {
    "mean_widths": (1024, 1024, 1024),
    "uncertainty_widths": (1024, 1024, 1024),
    "pi_exp": 0.01,
    "c_exp": 30.0,
    "l2_regularization": 1e-8,
    "max_uncertainty": 2.0,
    "epochs": 1024,
    "learning_rate": 1e-3,
    "batch_size": None,
    "init_scale": 0.05,
    "stable_loss": False,
}

#: The paper's settings, in the paper's coordinates (inputs in ``[-1, 1]^d``, outputs
#: roughly in ``[-1, 1]``): toy regression (Section 4.1.1, App. B.2.2), Bayesian
#: optimisation (App. B.3.1) and UCI regression (App. B.2.7).
PAPER_SETTINGS: dict[str, dict[str, Any]] = {
    "toy-regression-1d": {
        **_PAPER_LARGE_NETWORK_SETTINGS,
        "pi_sqr": 0.1,
        "min_uncertainty": 1e-3,
        "num_artificial_points": 128,
        "box_enlargement": 0.05,
    },
    "bo": {
        **_PAPER_LARGE_NETWORK_SETTINGS,
        "pi_sqr": 1.0,
        "min_uncertainty": 1e-6,
        "num_artificial_points": 500,
        "box_enlargement": 0.0,
    },
    "uci": {
        "mean_widths": (50,),
        "uncertainty_widths": (50,),
        "pi_sqr": 0.1,
        "pi_exp": 0.01,
        "c_exp": 30.0,
        "l2_regularization": 1e-9,
        "uncertainty_l2_regularization": 1e-4,
        "min_uncertainty": 0.1,
        "max_uncertainty": 1.0,
        "num_artificial_points": 100,
        "box_enlargement": 0.0,
        "epochs": 400,
        "learning_rate": 1e-2,
        "batch_size": 100,
        "init_scale": 0.05,
        "stable_loss": True,
    },
}
PAPER_SETTINGS["toy-regression-2d"] = {
    **PAPER_SETTINGS["toy-regression-1d"],
    "num_artificial_points": 256,
}


def rescale_outputs(hyperparameters: NOMUHyperparameters, scale: float) -> NOMUHyperparameters:
    r"""The same uncertainty shape for outputs multiplied by ``scale``.

    If ``y' = scale * y`` and the network's outputs scale alike (``f' = scale * f``,
    ``r' = scale * r``), then the loss is multiplied by ``scale^2`` (so its minimiser is
    unchanged) when ``pi_exp`` and ``lambda`` are multiplied by ``scale^2``, ``c_exp`` is
    divided by ``scale``, and ``l_min``, ``l_max`` (output units) are multiplied by
    ``scale``; ``pi_sqr`` is unchanged. Inputs need no rescaling: term (c) is a mean
    over the box and the box enlargement is a fraction of its width, so mapping ``[-1,
    1]^d`` affinely to ``[0, 1]^d`` changes neither.

    Args:
        hyperparameters: The settings for the original outputs.
        scale: The positive output scale factor.

    Returns:
        A copy of ``hyperparameters`` with the rescaled values.
    """
    if not scale > 0:
        raise ValueError(f"scale must be positive; got {scale}.")
    uncertainty_l2 = hyperparameters.uncertainty_l2_regularization
    return dataclasses.replace(
        hyperparameters,
        pi_exp=hyperparameters.pi_exp * scale**2,
        c_exp=hyperparameters.c_exp / scale,
        l2_regularization=hyperparameters.l2_regularization * scale**2,
        uncertainty_l2_regularization=None if uncertainty_l2 is None else uncertainty_l2 * scale**2,
        min_uncertainty=hyperparameters.min_uncertainty * scale,
        max_uncertainty=hyperparameters.max_uncertainty * scale,
    )


def build_preset(
    hyperparameter_class: type[NOMUHyperparameters],
    name: str,
    coordinates: str = "botorch",
    **overrides: Any,
) -> NOMUHyperparameters:
    r"""The settings of a preset.

    Args:
        hyperparameter_class: The class to build (``NOMUHyperparameters``), whose
            defaults are the ``"fast-bo"`` preset in BoTorch's coordinates.
        name: A key of :data:`PAPER_SETTINGS` (the paper's networks: 3 x 1024 units per
            branch for all but ``"uci"``, minutes per fit on a CPU) or ``"fast-bo"``
            (the defaults).
        coordinates: ``"botorch"`` (inputs in ``[0, 1]^d``, standardised outputs: the
            paper's values rescaled by :data:`PAPER_TO_STANDARDIZED_OUTPUT_SCALE`) or
            ``"paper"`` (inputs in ``[-1, 1]^d``, outputs in ``[-1, 1]``: the printed
            values).
        **overrides: Fields to change on top of the preset.

    Returns:
        An instance of ``hyperparameter_class``.
    """
    if coordinates not in ("botorch", "paper"):
        raise ValueError(f"coordinates must be 'botorch' or 'paper'; got {coordinates!r}.")
    if name == "fast-bo":
        fast = hyperparameter_class()
        if coordinates == "paper":
            fast = rescale_outputs(fast, 1.0 / PAPER_TO_STANDARDIZED_OUTPUT_SCALE)
        return dataclasses.replace(fast, **overrides)
    if name not in PAPER_SETTINGS:
        valid = ", ".join([*PAPER_SETTINGS, "fast-bo"])
        raise ValueError(f"Unknown NOMU preset {name!r}; valid: {valid}.")
    settings = hyperparameter_class(**PAPER_SETTINGS[name])
    if coordinates == "botorch":
        settings = rescale_outputs(settings, PAPER_TO_STANDARDIZED_OUTPUT_SCALE)
    return dataclasses.replace(settings, **overrides)
