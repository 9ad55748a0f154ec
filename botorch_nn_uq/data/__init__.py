"""Loaders of benchmark data sets (not shipped with the package)."""

from botorch_nn_uq.data.uci import (
    REQUIRED_FILES,
    UCI_FORMAT,
    UCISplit,
    available_uci_datasets,
    load_uci_split,
    uci_num_splits,
)

__all__ = [
    "REQUIRED_FILES",
    "UCISplit",
    "UCI_FORMAT",
    "available_uci_datasets",
    "load_uci_split",
    "uci_num_splits",
]
