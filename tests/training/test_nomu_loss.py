"""Tests of NOMU's loss terms, the artificial inputs and the box enlargement."""

import math

import pytest
import torch

from botorch_nn_uq.training.nomu_loss import (
    artificial_inputs,
    data_fit_loss,
    enlarge_box,
    exponential_barrier,
    nomu_loss,
    squared_or_huber,
)

DTYPE = torch.float64


def test_loss_terms_by_hand() -> None:
    mean = torch.tensor([[0.5], [-1.0]], dtype=DTYPE)
    train_Y = torch.tensor([[1.0], [-1.5]], dtype=DTYPE)
    raw_at_data = torch.tensor([[0.2], [-0.1]], dtype=DTYPE)
    raw_artificial = torch.tensor([[0.0], [0.1], [1.0]], dtype=DTYPE)
    pi_sqr, pi_exp, c_exp = 0.1, 0.01, 30.0
    fit = 0.5**2 + 0.5**2  # (a): a SUM over the training points
    in_sample = pi_sqr * (0.2**2 + 0.1**2)  # (b): a SUM over the training points
    out_of_sample = pi_exp * (1 + math.exp(-3.0) + math.exp(-30.0)) / 3  # (c): a MEAN
    loss = nomu_loss(mean, train_Y, raw_at_data, raw_artificial, pi_sqr, pi_exp, c_exp)
    assert loss.item() == pytest.approx(fit + in_sample + out_of_sample, rel=1e-12)
    without_fit = nomu_loss(None, train_Y, raw_at_data, raw_artificial, pi_sqr, pi_exp, c_exp)
    assert without_fit.item() == pytest.approx(in_sample + out_of_sample, rel=1e-12)


def test_outputs_are_summed_in_every_term() -> None:
    raw = torch.tensor([[0.3, -0.2]], dtype=DTYPE)
    artificial = torch.tensor([[0.1, 0.2], [0.3, 0.4]], dtype=DTYPE)
    zeros = torch.zeros(1, 2, dtype=DTYPE)
    loss = nomu_loss(zeros, zeros + 1.0, raw, artificial, 1.0, 1.0, 2.0)
    barrier = sum(math.exp(-2.0 * v) for v in (0.1, 0.2, 0.3, 0.4)) / 2
    assert loss.item() == pytest.approx(2.0 + 0.09 + 0.04 + barrier, rel=1e-12)


def test_stable_variant_equals_plain_in_normal_ranges() -> None:
    raw = torch.linspace(-1.0, 1.0, 41, dtype=DTYPE)
    torch.testing.assert_close(squared_or_huber(raw, True), squared_or_huber(raw, False))
    positive = torch.linspace(0.0, 3.0, 31, dtype=DTYPE)
    torch.testing.assert_close(
        exponential_barrier(positive, 30.0, True), exponential_barrier(positive, 30.0, False)
    )
    artificial = torch.rand(16, 1, generator=torch.Generator().manual_seed(0), dtype=DTYPE)
    data = 0.5 * torch.rand(4, 1, generator=torch.Generator().manual_seed(1), dtype=DTYPE)
    arguments = (data, data + 0.1, data, artificial, 0.1, 0.01, 30.0)
    torch.testing.assert_close(nomu_loss(*arguments, stable=True), nomu_loss(*arguments))


def test_stable_variant_is_linear_outside_and_has_bounded_gradients() -> None:
    raw = torch.tensor([-100.0, -2.0, 3.0], dtype=DTYPE, requires_grad=True)
    huber = squared_or_huber(raw, True)
    torch.testing.assert_close(huber, torch.tensor([199.0, 3.0, 5.0], dtype=DTYPE))
    barrier = exponential_barrier(raw, 30.0, True)
    torch.testing.assert_close(barrier[:2], torch.tensor([3001.0, 61.0], dtype=DTYPE))
    (huber.sum() + barrier.sum()).backward()
    assert raw.grad.isfinite().all() and raw.grad.abs().max() <= 30.0 + 2.0
    assert exponential_barrier(torch.tensor([-100.0], dtype=DTYPE), 30.0, False).isinf().all()


def test_noisy_loss_by_hand() -> None:
    mean = torch.tensor([[0.0], [1.0]], dtype=DTYPE)
    train_Y = torch.tensor([[0.2], [0.7]], dtype=DTYPE)
    noise_std = torch.tensor([[0.1], [0.5]], dtype=DTYPE)
    raw = torch.tensor([[0.3], [0.1]], dtype=DTYPE)
    artificial = torch.tensor([[0.2]], dtype=DTYPE)
    nll = (0.04 / 0.02 + math.log(0.1)) + (0.09 / 0.5 + math.log(0.5))
    assert data_fit_loss(mean, train_Y, noise_std).item() == pytest.approx(nll, rel=1e-12)
    in_sample = 2.0 * (0.09 / 0.02 + 0.01 / 0.5)
    out_of_sample = 0.5 * math.exp(-4.0 * 0.2)
    loss = nomu_loss(mean, train_Y, raw, artificial, 2.0, 0.5, 4.0, noise_std=noise_std)
    assert loss.item() == pytest.approx(nll + in_sample + out_of_sample, rel=1e-12)


def test_artificial_inputs_fill_the_box() -> None:
    box = torch.tensor([[-1.0, 2.0], [1.0, 5.0]], dtype=DTYPE)
    torch.manual_seed(0)
    points = artificial_inputs(box, 5000)
    assert points.shape == (5000, 2) and points.dtype == DTYPE
    assert ((points >= box[0]) & (points <= box[1])).all()
    torch.testing.assert_close(points.mean(0), box.mean(0), atol=0.05, rtol=0)
    assert not torch.equal(artificial_inputs(box, 5), artificial_inputs(box, 5))


def test_artificial_inputs_come_from_the_generator() -> None:
    box = torch.tensor([[-1.0, 2.0], [1.0, 5.0]], dtype=DTYPE)
    state = torch.random.get_rng_state()
    first = artificial_inputs(box, 5, torch.Generator().manual_seed(1))
    again = artificial_inputs(box, 5, torch.Generator().manual_seed(1))
    assert torch.equal(torch.random.get_rng_state(), state)
    assert torch.equal(first, again)
    assert not torch.equal(first, artificial_inputs(box, 5, torch.Generator().manual_seed(2)))


def test_enlarge_box() -> None:
    box = torch.tensor([[-1.0, 0.0], [1.0, 1.0]], dtype=DTYPE)
    enlarged = enlarge_box(box, 0.05)
    torch.testing.assert_close(enlarged, torch.tensor([[-1.1, -0.05], [1.1, 1.05]], dtype=DTYPE))
    torch.testing.assert_close(enlarge_box(box, 0.0), box)
    with pytest.raises(ValueError, match="enlargement"):
        enlarge_box(box, -0.1)


def test_known_noise_weighs_the_data_fit_and_in_sample_terms_by_hand() -> None:
    mean = torch.tensor([[0.0], [1.0]], dtype=DTYPE)
    train_Y = torch.tensor([[0.2], [0.7]], dtype=DTYPE)
    weights = torch.tensor([[1.5], [0.5]], dtype=DTYPE)
    raw = torch.tensor([[0.3], [0.1]], dtype=DTYPE)
    artificial = torch.tensor([[0.2]], dtype=DTYPE)
    fit = 1.5 * 0.04 + 0.5 * 0.09
    assert data_fit_loss(mean, train_Y, weights=weights).item() == pytest.approx(fit, rel=1e-12)
    in_sample = 2.0 * (1.5 * 0.09 + 0.5 * 0.01)
    out_of_sample = 0.5 * math.exp(-4.0 * 0.2)
    loss = nomu_loss(mean, train_Y, raw, artificial, 2.0, 0.5, 4.0, weights=weights)
    assert loss.item() == pytest.approx(fit + in_sample + out_of_sample, rel=1e-12)
    # Weights of one are the noiseless loss, exactly.
    ones = torch.ones_like(weights)
    arguments = (mean, train_Y, raw, artificial, 2.0, 0.5, 4.0)
    assert torch.equal(nomu_loss(*arguments, weights=ones), nomu_loss(*arguments))
    with pytest.raises(ValueError, match="not both"):
        nomu_loss(*arguments, noise_std=ones, weights=ones)
