"""Tests of the UCI data loader on a fake data set and, when present, the real data."""

import warnings
from pathlib import Path

import pytest
import torch

from botorch_nn_uq.data import available_uci_datasets, load_uci_split, uci_num_splits
from tests.data import FAKE_FEATURES, FAKE_TARGET, write_fake_uci_dataset

#: /work/shared/data/uci when the repository is /work/main.
SHARED_UCI = Path(__file__).resolve().parents[3] / "shared" / "data" / "uci"


def test_loads_a_split_in_the_standard_format(tmp_path) -> None:
    write_fake_uci_dataset(tmp_path, "toy", num_rows=40, num_splits=3)
    assert uci_num_splits(tmp_path, "toy") == 3
    data = load_uci_split(tmp_path, "toy", 1)
    assert (data.name, data.split) == ("toy", 1)
    assert data.train_X.shape == (30, 3) and data.train_Y.shape == (30, 1)
    assert data.test_X.shape == (10, 3) and data.test_Y.shape == (10, 1)
    for tensor in (data.train_X, data.train_Y, data.test_X, data.test_Y):
        assert tensor.dtype == torch.float64
    test_rows = torch.arange(1, 40, 4, dtype=torch.float64)
    train_rows = torch.tensor([i for i in range(40) if i % 4 != 1], dtype=torch.float64)
    # Feature j of row i is i + j / 10, in the order of index_features.txt.
    columns = torch.tensor(FAKE_FEATURES, dtype=torch.float64) / 10
    torch.testing.assert_close(data.test_X, test_rows.unsqueeze(-1) + columns)
    torch.testing.assert_close(data.train_X, train_rows.unsqueeze(-1) + columns)
    assert FAKE_TARGET not in FAKE_FEATURES
    # The file holds six decimals.
    expected_Y = (data.test_X / 10).sin().sum(-1, keepdim=True)
    torch.testing.assert_close(data.test_Y, expected_Y, rtol=0, atol=1e-6)


def test_available_datasets_are_the_complete_folders(tmp_path) -> None:
    write_fake_uci_dataset(tmp_path, "b")
    write_fake_uci_dataset(tmp_path, "a")
    (write_fake_uci_dataset(tmp_path, "incomplete") / "n_splits.txt").unlink()
    (tmp_path / "notes.txt").write_text("not a data set")
    assert available_uci_datasets(tmp_path) == ["a", "b"]
    with pytest.raises(FileNotFoundError, match="not shipped"):
        available_uci_datasets(tmp_path / "missing")


@pytest.mark.parametrize(
    "missing", ["data.txt", "index_features.txt", "index_target.txt", "index_test_0.txt"]
)
def test_a_missing_file_is_named_with_the_expected_format(tmp_path, missing) -> None:
    (write_fake_uci_dataset(tmp_path) / missing).unlink()
    with pytest.raises(FileNotFoundError, match=f"{missing} not found.*index_train_K.txt"):
        load_uci_split(tmp_path, "toy", 0)


def test_a_missing_data_set_or_split_count_is_named(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="n_splits.txt not found"):
        load_uci_split(tmp_path, "nothing", 0)


def test_invalid_contents_raise(tmp_path) -> None:
    folder = write_fake_uci_dataset(tmp_path, num_splits=2)
    with pytest.raises(ValueError, match=r"split must be in \[0, 2\)"):
        load_uci_split(tmp_path, "toy", 2)
    (folder / "index_test_0.txt").write_text("0\n40\n")
    with pytest.raises(ValueError, match="row indices outside"):
        load_uci_split(tmp_path, "toy", 0)
    (folder / "index_test_0.txt").write_text("0\n1\n")
    with pytest.raises(ValueError, match="both the training and the test part"):
        load_uci_split(tmp_path, "toy", 0)
    (folder / "index_target.txt").write_text("1\n2\n")
    with pytest.raises(ValueError, match="exactly one column index"):
        load_uci_split(tmp_path, "toy", 1)
    (folder / "index_target.txt").write_text("4\n")
    with pytest.raises(ValueError, match="column indices outside"):
        load_uci_split(tmp_path, "toy", 1)
    (folder / "n_splits.txt").write_text("0\n")
    with pytest.raises(ValueError, match="one positive number of splits"):
        uci_num_splits(tmp_path, "toy")
    (folder / "n_splits.txt").write_text("2\n")
    (folder / "index_target.txt").write_text("one\n")
    with pytest.raises(ValueError, match="Could not parse"):
        load_uci_split(tmp_path, "toy", 1)


def test_the_target_column_among_the_features_is_rejected(tmp_path) -> None:
    folder = write_fake_uci_dataset(tmp_path)
    (folder / "index_features.txt").write_text(f"0\n{FAKE_TARGET}\n2\n")
    with pytest.raises(ValueError, match=f"lists the target column {FAKE_TARGET} among"):
        load_uci_split(tmp_path, "toy", 0)


@pytest.mark.parametrize("bad", ["nan", "inf", "-inf"])
def test_non_finite_values_in_the_data_are_rejected(tmp_path, bad) -> None:
    folder = write_fake_uci_dataset(tmp_path, num_rows=8)
    rows = (folder / "data.txt").read_text().splitlines()
    cells = rows[5].split("\t")
    cells[2] = bad
    rows[5] = "\t".join(cells)
    (folder / "data.txt").write_text("\n".join(rows) + "\n")
    with pytest.raises(ValueError, match=r"data.txt holds NaN or infinite .* row 5, column 2"):
        load_uci_split(tmp_path, "toy", 0)


def test_an_empty_data_file_is_named(tmp_path) -> None:
    folder = write_fake_uci_dataset(tmp_path)
    (folder / "data.txt").write_text("\n")
    # The clear error replaces NumPy's warning about an empty file.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="data.txt holds no data"):
            load_uci_split(tmp_path, "toy", 0)


def test_real_boston_split() -> None:
    if not (SHARED_UCI / "boston").is_dir():
        pytest.skip(f"UCI data not found at {SHARED_UCI}; it is not shipped with the package")
    assert uci_num_splits(SHARED_UCI, "boston") == 20
    data = load_uci_split(SHARED_UCI, "boston", 0)
    assert data.train_X.shape[-1] == data.test_X.shape[-1] == 13
    num_train, num_test = data.train_X.shape[0], data.test_X.shape[0]
    assert num_train + num_test == 506
    assert 0.85 < num_train / 506 < 0.95
    assert data.train_Y.shape == (num_train, 1) and data.test_Y.shape == (num_test, 1)
    assert data.train_Y.dtype == torch.float64
