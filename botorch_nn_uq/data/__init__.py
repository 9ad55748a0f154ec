"""Loaders of benchmark data sets (not shipped with the package)."""

from botorch_nn_uq.data.uci import (
    DATASET_FOLDERS,
    REQUIRED_FILES,
    UCI_DIR_VARIABLE,
    UCI_FORMAT,
    UCI_SOURCE,
    UCISplit,
    available_uci_datasets,
    default_uci_dir,
    load_uci_split,
    uci_num_splits,
)

__all__ = [
    "DATASET_FOLDERS",
    "REQUIRED_FILES",
    "UCISplit",
    "UCI_DIR_VARIABLE",
    "UCI_FORMAT",
    "UCI_SOURCE",
    "available_uci_datasets",
    "default_uci_dir",
    "load_uci_split",
    "uci_num_splits",
]
