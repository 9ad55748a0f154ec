r"""Proposers rebuilt from their configurations (:meth:`Proposer.to_config
<botorch_nn_uq.bo.proposers.Proposer.to_config>`), as a saved run's state file holds
them; above both proposer modules, so that neither imports the other's."""

from __future__ import annotations

from typing import Any

from botorch_nn_uq.bo.proposers import (
    AcquisitionProposer,
    DynamicCalibrationProposer,
    Proposer,
    RandomProposer,
    TrustRegionProposer,
)
from botorch_nn_uq.bo.turbo import TurboProposer


def proposer_from_config(config: dict[str, Any]) -> Proposer:
    r"""The proposer a :meth:`~botorch_nn_uq.bo.proposers.Proposer.to_config` describes
    (in its initial state).

    Args:
        config: The configuration (JSON values).

    Raises:
        ValueError: If it describes no known proposer.

    Example:
        >>> proposer_from_config({"type": "random"})
    """
    options = dict(config)
    kind = options.pop("type", None)
    if kind == "acquisition":
        return AcquisitionProposer(options.pop("acquisition"), **options)
    if kind == "trust-region":
        inner = proposer_from_config(options["inner"])
        return TrustRegionProposer(inner, local_fit=options["local_fit"], **options["region"])
    if kind == "random" and not options:
        return RandomProposer()
    if kind == "turbo":
        return TurboProposer(**options)
    if kind == "dynamic-c":
        return DynamicCalibrationProposer(
            options["horizon"],
            options["mw_factor"],
            num_restarts=options["num_restarts"],
            raw_samples=options["raw_samples"],
        )
    raise ValueError(f"Unknown proposer {config!r}.")
