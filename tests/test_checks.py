"""Tests of the argument checks shared by the package's entry points
(botorch_nn_uq/checks.py)."""

import math

import numpy as np
import pytest
import torch

from botorch_nn_uq.checks import (
    Interval,
    broadcasts_to,
    check_device,
    check_points_in_box,
    check_real_number,
    is_int_in_range,
    is_integer,
)


def test_the_cpu_is_always_a_device() -> None:
    assert check_device("device", "cpu") == torch.device("cpu")
    assert check_device("device", torch.device("cpu")) == torch.device("cpu")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("gpu", "device must be a device name such as 'cpu' or 'cuda'; got 'gpu'"),
        (0, "device must be a device name"),
        (None, "device must be a device name"),
        ("meta", "device must be a device that holds values; got 'meta'"),
    ],
)
def test_what_names_no_usable_device_is_refused_by_name(value, message) -> None:
    with pytest.raises(ValueError, match=message):
        check_device("device", value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
def test_cuda_without_cuda_is_refused_with_the_reason() -> None:
    for value in ("cuda", "cuda:1"):
        with pytest.raises(ValueError, match=f"got '{value}' \\(torch has no cuda device here\\)"):
            check_device("device", value)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_devices_beyond_the_machines_are_refused() -> None:
    assert check_device("device", "cuda").type == "cuda"
    beyond = f"cuda:{torch.cuda.device_count()}"
    with pytest.raises(ValueError, match=f"got '{beyond}' \\(torch sees"):
        check_device("device", beyond)


@pytest.mark.parametrize(
    ("interval", "text"),
    [
        (Interval(1.0), "a finite real number of at least 1"),
        (Interval(1.0, lower_closed=False), "a finite real number above 1"),
        (Interval(upper=-2.5), "a finite real number of at most -2.5"),
        (Interval(upper=-2.5, upper_closed=False), "a finite real number below -2.5"),
        (Interval(), "a finite real number"),
        (Interval(0.0), "non-negative and finite"),
        (Interval(0.0, lower_closed=False), "positive and finite"),
        (Interval(0.0, 1.0, upper_closed=False), "a real number in [0, 1)"),
    ],
)
def test_an_interval_says_which_numbers_it_accepts(interval, text) -> None:
    assert str(interval) == text


def test_infinity_is_refused_with_a_message_that_excludes_it() -> None:
    with pytest.raises(
        ValueError, match="local_fit must be a finite real number of at least 1; got inf"
    ):
        check_real_number("local_fit", float("inf"), Interval(1.0))


@pytest.mark.parametrize(
    ("value", "minimum", "maximum", "integer", "int_in_range"),
    [
        (0, 0, math.inf, True, True),
        (5, 1, 5, True, True),
        (6, 1, 5, False, False),
        (0, 1, math.inf, False, False),
        (2**70, 0, math.inf, True, True),
        (np.int64(3), 0, math.inf, True, False),  # JSON cannot store a NumPy integer
        (True, 0, math.inf, False, False),
        (3.0, 0, math.inf, False, False),
        ("3", 0, math.inf, False, False),
    ],
)
def test_integers_in_a_range(value, minimum, maximum, integer, int_in_range) -> None:
    assert is_integer(value, minimum, maximum) is integer
    assert is_int_in_range(value, minimum, maximum) is int_in_range


def test_a_shape_broadcasts_only_without_enlarging_the_target() -> None:
    assert broadcasts_to(torch.Size([3, 1]), torch.Size([2, 3, 4]))
    assert not broadcasts_to(torch.Size([2, 3, 4]), torch.Size([3, 1]))
    assert not broadcasts_to(torch.Size([5]), torch.Size([3]))


def test_points_outside_the_box_or_of_another_dimension_are_refused_by_name() -> None:
    bounds = torch.tensor([[0.0, -1.0], [1.0, 1.0]], dtype=torch.float64)
    check_points_in_box("levy", "X", torch.tensor([[0.0, 1.0], [0.5, -1.0]]), bounds)
    with pytest.raises(ValueError, match=r"levy: expected U of shape batch_shape x 2, got \(4"):
        check_points_in_box("levy", "U", torch.zeros(4, 3), bounds)
    with pytest.raises(ValueError, match="levy: X lies outside the bounds of the problem"):
        check_points_in_box("levy", "X", torch.tensor([[0.5, 1.5]]), bounds)
