"""Tests of the argument checks shared by the package's entry points
(botorch_nn_uq/checks.py)."""

import pytest
import torch

from botorch_nn_uq.checks import Interval, check_device, check_real_number


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
