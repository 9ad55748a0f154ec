"""Tests of systematic member resampling and the staleness check of index samplers."""

import math

import pytest
import torch
from botorch.sampling.base import MCSampler

from botorch_nn_uq.posteriors.member_indices import (
    base_samples_are_stale,
    systematic_member_indices,
)

DTYPE = torch.float64


# ---------------------------------------------------------------------------
# systematic_member_indices


@pytest.mark.parametrize(("num_members", "num_draws"), [(4, 4), (4, 32), (5, 100), (1, 7)])
def test_systematic_indices_with_uniform_weights_are_balanced(num_members, num_draws):
    weights = torch.ones(num_members, dtype=DTYPE)
    indices = systematic_member_indices(weights, torch.Size([num_draws]), seed=3)
    assert indices.dtype == torch.long
    counts = torch.bincount(indices, minlength=num_members)
    assert counts.tolist() == [num_draws // num_members] * num_members


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("num_draws", [7, 10, 64, 101])
def test_systematic_indices_counts_are_floor_or_ceil_of_expected(seed, num_draws):
    weights = torch.tensor([3.0, 1.0, 0.5, 0.0, 2.5], dtype=DTYPE)
    indices = systematic_member_indices(weights, torch.Size([num_draws]), seed=seed)
    counts = torch.bincount(indices, minlength=5)
    expected = num_draws * weights / weights.sum()
    assert counts.sum().item() == num_draws
    for count, target in zip(counts.tolist(), expected.tolist(), strict=True):
        assert count in (math.floor(target), math.ceil(target))
    # A member with zero weight is never drawn.
    assert counts[3].item() == 0


def test_systematic_indices_are_deterministic_for_a_seed_and_differ_across_seeds():
    weights = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=DTYPE)
    shape = torch.Size([40])
    first = systematic_member_indices(weights, shape, seed=11)
    second = systematic_member_indices(weights, shape, seed=11)
    other = systematic_member_indices(weights, shape, seed=12)
    assert torch.equal(first, second)
    assert not torch.equal(first, other)
    # Same counts, different order.
    assert torch.equal(torch.bincount(first, minlength=4), torch.bincount(other, minlength=4))


def test_systematic_indices_do_not_touch_or_depend_on_the_global_rng_when_seeded():
    weights = torch.ones(3, dtype=DTYPE)
    torch.manual_seed(0)
    first = systematic_member_indices(weights, torch.Size([30]), seed=5)
    after_first = torch.rand(1)
    torch.manual_seed(1)
    second = systematic_member_indices(weights, torch.Size([30]), seed=5)
    assert torch.equal(first, second)
    torch.manual_seed(0)
    assert torch.equal(torch.rand(1), after_first)


@pytest.mark.parametrize("shape", [(6,), (2, 3), (2, 3, 4)])
def test_systematic_indices_have_the_sample_shape(shape):
    weights = torch.ones(3, dtype=DTYPE)
    indices = systematic_member_indices(weights, torch.Size(shape), seed=0)
    assert indices.shape == torch.Size(shape)
    counts = torch.bincount(indices.reshape(-1), minlength=3)
    assert counts.tolist() == [math.prod(shape) // 3] * 3


# ---------------------------------------------------------------------------
# base_samples_are_stale


class _StoredIndicesSampler(MCSampler):
    def forward(self, posterior):
        raise NotImplementedError

    def store(self, indices, weights):
        self.register_buffer("base_samples", indices)
        self.register_buffer("_base_weights", weights.clone())


def test_base_samples_are_stale_until_drawn_and_when_the_shape_or_weights_change():
    weights = torch.tensor([1.0, 2.0, 3.0], dtype=DTYPE)
    shape = torch.Size([6])
    sampler = _StoredIndicesSampler(sample_shape=shape)
    assert base_samples_are_stale(sampler, shape, weights)
    sampler.store(systematic_member_indices(weights, shape, seed=0), weights)
    assert not base_samples_are_stale(sampler, shape, weights)
    assert base_samples_are_stale(sampler, torch.Size([7]), weights)
    assert base_samples_are_stale(sampler, shape, torch.tensor([1.0, 2.0, 4.0], dtype=DTYPE))
    assert base_samples_are_stale(sampler, shape, torch.ones(4, dtype=DTYPE))
