"""The tabular dataset shifts: identity at severity 0, each kind's formula, growth with
severity, determinism from the seed, disjoint validation and test kinds, and data that
are never modified."""

import math

import pytest
import torch

from botorch_nn_uq.ensembles import (
    MAX_SEVERITY,
    TEST_SHIFTS,
    VALIDATION_SHIFTS,
    shift_test_set,
    shift_validation_set,
)

DTYPE = torch.float64
SEVERITIES = range(1, MAX_SEVERITY + 1)
SHIFTERS = {"validation": shift_validation_set, "test": shift_test_set}
KINDS = [("validation", kind) for kind in VALIDATION_SHIFTS] + [
    ("test", kind) for kind in TEST_SHIFTS
]


def _data(num_rows: int = 400, num_features: int = 3, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    X = (
        torch.randn(num_rows, num_features, generator=generator, dtype=DTYPE)
        * torch.tensor([1.0, 5.0, 0.2], dtype=DTYPE)[:num_features]
        + torch.tensor([0.0, 3.0, -1.0], dtype=DTYPE)[:num_features]
    )
    # The targets number the rows, so a selection of rows can be read off them.
    Y = torch.arange(num_rows, dtype=DTYPE).unsqueeze(-1)
    return X, Y


def _shift(split: str, kind: str, X, Y, severity: int, seed: int = 0, **kwargs):
    generator = torch.Generator().manual_seed(seed)
    return SHIFTERS[split](X, Y, severity, generator, kinds=(kind,), **kwargs)


def _statistics(reference: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return reference.mean(0), reference.std(0, correction=0)


def test_validation_and_test_kinds_are_disjoint() -> None:
    assert set(VALIDATION_SHIFTS).isdisjoint(TEST_SHIFTS)
    assert len(VALIDATION_SHIFTS) >= 2 and len(TEST_SHIFTS) >= 3


@pytest.mark.parametrize(("split", "kind"), KINDS)
def test_severity_zero_returns_copies_of_the_data(split: str, kind: str) -> None:
    X, Y = _data()
    X_shift, Y_shift = _shift(split, kind, X, Y, 0)
    assert torch.equal(X_shift, X) and torch.equal(Y_shift, Y)
    X_shift += 1.0
    Y_shift += 1.0
    assert torch.equal(X, _data()[0]) and torch.equal(Y, _data()[1])


@pytest.mark.parametrize(("split", "kind"), KINDS)
@pytest.mark.parametrize("severity", SEVERITIES)
def test_a_shift_never_modifies_its_inputs(split: str, kind: str, severity: int) -> None:
    X, Y = _data()
    training_X = _data(seed=1)[0]
    copies = [X.clone(), Y.clone(), training_X.clone()]
    _shift(split, kind, X, Y, severity, reference=training_X)
    assert all(torch.equal(a, b) for a, b in zip([X, Y, training_X], copies, strict=True))


@pytest.mark.parametrize(("split", "kind"), KINDS)
def test_a_seed_determines_the_shift(split: str, kind: str) -> None:
    X, Y = _data()
    first, again, other = (_shift(split, kind, X, Y, 3, seed=seed) for seed in (4, 4, 5))
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    if kind != "quantisation":  # the grid is deterministic
        assert not torch.equal(first[0], other[0])


def test_the_seed_is_the_only_source_of_randomness() -> None:
    X, Y = _data()
    torch.manual_seed(0)
    first = shift_test_set(X, Y, 4, torch.Generator().manual_seed(1))
    torch.manual_seed(1)
    again = shift_test_set(X, Y, 4, torch.Generator().manual_seed(1))
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))


def test_feature_noise_adds_scaled_gaussian_noise_nested_over_severities() -> None:
    X, Y = _data(num_rows=4000)
    _, scale = _statistics(X)
    unit = (_shift("validation", "feature_noise", X, Y, 1)[0] - X) / (0.1 * scale)
    assert abs(unit.mean().item()) < 0.05 and unit.std().item() == pytest.approx(1.0, abs=0.03)
    for severity in SEVERITIES:
        X_shift, Y_shift = _shift("validation", "feature_noise", X, Y, severity)
        # The same draws at every severity: x' - x = s (x'_1 - x).
        torch.testing.assert_close(X_shift - X, severity * 0.1 * scale * unit)
        assert torch.equal(Y_shift, Y)


def test_quantisation_rounds_to_a_grid_through_the_mean() -> None:
    X, Y = _data()
    location, scale = _statistics(X)
    errors = []
    for severity in SEVERITIES:
        step = 0.25 * severity * scale
        X_shift = _shift("validation", "quantisation", X, Y, severity)[0]
        positions = (X_shift - location) / step
        torch.testing.assert_close(positions, positions.round())
        assert ((X_shift - X).abs() <= step / 2 + 1e-12).all()
        errors.append((X_shift - X).abs().mean().item())
    assert errors == sorted(errors) and errors[0] > 0


def test_sensor_drift_is_a_gain_and_an_offset_per_feature() -> None:
    X, Y = _data()
    location, scale = _statistics(X)
    shifts = []
    for severity in SEVERITIES:
        X_shift = _shift("test", "sensor_drift", X, Y, severity)[0]
        # x' = mu + (1 + 0.1 s a)(x - mu) + 0.2 s b sigma with signs a, b per feature.
        gain = (X_shift[1:] - X_shift[:1]) / (X[1:] - X[:1])
        torch.testing.assert_close(gain, gain[:1].expand_as(gain))
        gain_error = (gain[0] - 1) / (0.1 * severity)
        torch.testing.assert_close(gain_error.abs(), torch.ones_like(gain_error))
        offset = (X_shift - location - gain[0] * (X - location))[0] / (0.2 * severity * scale)
        torch.testing.assert_close(offset.abs(), torch.ones_like(offset))
        shifts.append((X_shift - X).abs().mean().item())
    assert shifts == sorted(shifts)


def test_missing_features_are_imputed_with_the_reference_mean() -> None:
    X, Y = _data(num_rows=4000)
    reference = _data(seed=2)[0]
    location, _ = _statistics(reference)
    missing_before = torch.zeros_like(X, dtype=torch.bool)
    for severity in SEVERITIES:
        X_shift = _shift("test", "missing_features", X, Y, severity, reference=reference)[0]
        missing = X_shift != X
        assert torch.equal(X_shift[missing], location.expand_as(X)[missing])
        assert missing.double().mean().item() == pytest.approx(0.1 * severity, abs=0.02)
        assert (missing | ~missing_before).all()  # a superset of the missing entries
        missing_before = missing


def test_extreme_selection_keeps_the_rows_farthest_along_a_direction() -> None:
    # In one dimension every direction is the axis: the kept rows are the farthest
    # from the mean, in their original order, with their targets.
    X, Y = _data(num_features=1)
    kept_before = set(range(X.shape[0]))
    for severity in SEVERITIES:
        X_shift, Y_shift = _shift("test", "extreme_selection", X, Y, severity)
        rows = Y_shift.squeeze(-1).long()
        assert len(rows) == math.ceil(X.shape[0] * (20 - 3 * severity) / 20)
        assert torch.equal(rows, rows.sort().values) and torch.equal(X_shift, X[rows])
        distance = (X - X.mean()).abs().squeeze(-1)
        dropped = torch.ones(X.shape[0], dtype=torch.bool)
        dropped[rows] = False
        assert distance[rows].min() >= distance[dropped].max()
        assert set(rows.tolist()) <= kept_before  # nested: a subset of the rows
        kept_before = set(rows.tolist())


def test_the_test_shift_selects_rows_then_corrupts_each_with_one_kind() -> None:
    X, Y = _data()
    location, _ = _statistics(X)
    X_shift, Y_shift = shift_test_set(X, Y, 5, torch.Generator().manual_seed(0))
    rows = Y_shift.squeeze(-1).long()
    assert len(rows) == math.ceil(X.shape[0] * 0.25)
    imputed = ((X_shift == location) | (X_shift == X[rows])).all(-1)
    drifted = ~(X_shift == X[rows]).any(-1)
    assert 0 < int(imputed.sum()) < len(rows) and 0 < int(drifted.sum()) < len(rows)


def test_the_validation_shift_draws_one_kind_per_row() -> None:
    X, Y = _data()
    location, scale = _statistics(X)
    X_shift = shift_validation_set(X, Y, 4, torch.Generator().manual_seed(0))[0]
    positions = (X_shift - location) / (0.25 * 4 * scale)
    quantised = (positions - positions.round()).abs().max(-1).values < 1e-9
    assert 0.35 < quantised.double().mean().item() < 0.65


@pytest.mark.parametrize(("split", "kind"), KINDS)
def test_shifts_commute_with_affine_maps_of_the_features(split: str, kind: str) -> None:
    X, Y = _data()
    reference = _data(seed=3)[0]
    scale = torch.tensor([2.0, 0.5, 10.0], dtype=DTYPE)
    offset = torch.tensor([1.0, -4.0, 0.3], dtype=DTYPE)
    mapped = _shift(split, kind, X * scale + offset, Y, 5, reference=reference * scale + offset)
    shifted = _shift(split, kind, X, Y, 5, reference=reference)
    torch.testing.assert_close(mapped[0], shifted[0] * scale + offset)
    assert torch.equal(mapped[1], shifted[1])


@pytest.mark.parametrize(("split", "kind"), KINDS)
def test_a_constant_feature_keeps_its_value(split: str, kind: str) -> None:
    X, Y = _data()
    X[:, 1] = 2.0
    X_shift = _shift(split, kind, X, Y, 5)[0]
    assert (X_shift[:, 1] == 2.0).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_seed_shifts_alike_on_every_device(device: torch.device, dtype: torch.dtype) -> None:
    X, Y = _data()
    on_device = shift_test_set(
        X.to(device, dtype), Y.to(device, dtype), 5, torch.Generator().manual_seed(0)
    )
    on_cpu = shift_test_set(X.to(dtype), Y.to(dtype), 5, torch.Generator().manual_seed(0))
    assert on_device[0].device.type == device.type and on_device[0].dtype == dtype
    torch.testing.assert_close(on_device[0].cpu(), on_cpu[0])
    assert torch.equal(on_device[1].cpu(), on_cpu[1])


@pytest.mark.parametrize("severity", [-1, 6, 2.0, True, None])
def test_a_severity_outside_zero_to_five_is_refused(severity: object) -> None:
    X, Y = _data()
    with pytest.raises(ValueError, match=r"severity must be an integer from 0 \(no shift\) to 5"):
        shift_validation_set(X, Y, severity, torch.Generator())


@pytest.mark.parametrize("name", ["X", "Y", "reference"])
@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_non_finite_data_are_refused(name: str, value: float) -> None:
    X, Y = _data()
    data = {"X": X, "Y": Y, "reference": X.clone()}
    data[name][3, 0] = value
    with pytest.raises(ValueError, match=f"{name} must be finite"):
        shift_test_set(data["X"], data["Y"], 2, torch.Generator(), reference=data["reference"])


@pytest.mark.parametrize(
    ("shifter", "kinds", "match"),
    [
        (shift_validation_set, ("blur",), "Unknown shift kind 'blur'"),
        (shift_test_set, ("feature_noise",), "'feature_noise' is a validation shift.*disjoint"),
        (shift_validation_set, ("sensor_drift",), "'sensor_drift' is a test shift.*disjoint"),
        (shift_validation_set, "extreme_selection", "is a test shift"),
        (shift_test_set, (), "at least one test shift"),
    ],
)
def test_unknown_kinds_and_kinds_of_the_other_split_are_refused(
    shifter, kinds: object, match: str
) -> None:
    X, Y = _data()
    with pytest.raises(ValueError, match=match):
        shifter(X, Y, 2, torch.Generator(), kinds=kinds)


@pytest.mark.parametrize(
    ("X", "Y", "reference", "match"),
    [
        (torch.rand(5), torch.rand(5, 1), None, "X must be a 2-dim floating-point tensor"),
        (torch.rand(5, 2), torch.rand(4, 1), None, "Y must have one row per row of X"),
        (torch.zeros(5, 2, dtype=torch.long), torch.rand(5, 1), None, "floating-point"),
        (torch.rand(0, 2), torch.rand(0, 1), None, "at least one row"),
        (torch.rand(5, 2), torch.rand(5, 1), torch.rand(5, 3), "reference must be r x d"),
        ([[0.0, 1.0]], torch.rand(1, 1), None, "X must be a 2-dim"),
    ],
)
def test_malformed_data_are_refused(X: object, Y: object, reference: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        shift_validation_set(X, Y, 1, torch.Generator(), reference=reference)


def test_the_generator_must_be_a_torch_generator() -> None:
    X, Y = _data()
    with pytest.raises(TypeError, match="generator must be a torch.Generator"):
        shift_validation_set(X, Y, 1, 0)
