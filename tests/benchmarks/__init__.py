"""Tests of the benchmarks (``benchmarks/``): smoke runs of every runner, their shared
helpers and the UCI loader; and a writer of tiny data sets in the UCI format."""

import csv
import math
from pathlib import Path

import pytest
import torch

from benchmarks.uci import UCI_DIR_VARIABLE, available_uci_datasets, default_uci_dir

#: Columns of the fake data set: the target sits between features on purpose.
FAKE_FEATURES = (0, 2, 3)
FAKE_TARGET = 1


def write_fake_uci_dataset(
    data_dir: Path, name: str = "toy", num_rows: int = 40, num_splits: int = 2
) -> Path:
    r"""Write a ``num_rows x 4`` data set in the UCI format to ``data_dir/name``.

    Feature ``j`` of row ``i`` is ``i + j / 10`` (so that loaded rows and columns can be
    identified) and the target is ``sum_j sin(x_j / 10)``. Split ``K`` tests on every
    fourth row starting at row ``K`` and trains on the others.
    """
    folder = data_dir / name
    folder.mkdir(parents=True)
    table = torch.arange(num_rows, dtype=torch.float64).unsqueeze(-1) + torch.arange(4) / 10
    table[:, FAKE_TARGET] = (table[:, list(FAKE_FEATURES)] / 10).sin().sum(-1)
    # Tabs, trailing spaces and a blank last line, as in some of the published files.
    lines = ["\t".join(f"{value:.6f} " for value in row.tolist()) for row in table]
    (folder / "data.txt").write_text("\n".join(lines) + "\n\n")
    (folder / "index_features.txt").write_text("\n".join(map(str, FAKE_FEATURES)) + "\n")
    (folder / "index_target.txt").write_text(f"{FAKE_TARGET}\n")
    (folder / "n_splits.txt").write_text(f"{num_splits}\n")
    for split in range(num_splits):
        test = [row for row in range(num_rows) if row % 4 == split % 4]
        train = [row for row in range(num_rows) if row % 4 != split % 4]
        (folder / f"index_train_{split}.txt").write_text("\n".join(map(str, train)) + "\n")
        (folder / f"index_test_{split}.txt").write_text("\n".join(map(str, test)) + "\n")
    return folder


def require_uci_dataset(name: str) -> Path:
    r"""The folder of real UCI data sets (:func:`default_uci_dir`) if it holds ``name``;
    otherwise skip the test, naming the variable that points at the data."""
    data_dir = default_uci_dir()
    if not data_dir.is_dir() or name not in available_uci_datasets(data_dir):
        pytest.skip(
            f"UCI data set {name!r} not found in {data_dir}; the data are not shipped with the "
            f"package: set {UCI_DIR_VARIABLE} to a folder of UCI data sets "
            "(docs/guide/tutorials-and-benchmarks.md, 'Data')"
        )
    return data_dir


def read_runs_csv(out: Path) -> list[dict[str, str]]:
    r"""The rows of a runner's ``runs.csv`` in ``out``."""
    with (out / "runs.csv").open() as handle:
        return list(csv.DictReader(handle))


def check_shift_scores(run: dict[str, str], searches: tuple[str, ...]) -> None:
    r"""Assert what every row of protocol 10 (``nes_shift``, ``nes_shift_bo``) holds: a
    finite NLL, a positive RMSE, coverages in [0, 1], and for a search (a method in
    ``searches``) the paper's Proposition 3.1, oracle <= ensemble <= average member in
    NLL; a reference has no members to look at through the diversity lens (NaN)."""
    nll, average, oracle = (
        float(run[key]) for key in ("test_nll", "average_member_nll", "oracle_nll")
    )
    assert math.isfinite(nll) and float(run["test_rmse"]) > 0
    if run["method"] in searches:
        assert oracle <= nll <= average
    else:
        assert math.isnan(average) and math.isnan(oracle)
    assert all(0 <= float(run[f"coverage_{level}"]) <= 1 for level in (50, 80, 95))
