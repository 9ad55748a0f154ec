"""Tests of the seeding utilities."""

import pytest
import torch

from botorch_nn_uq.training.seeding import draw_seed, resolve_seed, seeded


def test_same_seed_gives_the_same_random_numbers():
    with seeded(3):
        first = (torch.rand(4), torch.randn(2, 2), torch.randperm(10))
    with seeded(3):
        second = (torch.rand(4), torch.randn(2, 2), torch.randperm(10))
    with seeded(4):
        other = torch.rand(4)
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a, b)
    assert not torch.equal(first[0], other)


def test_seeded_block_matches_manual_seed():
    with seeded(17):
        inside = torch.rand(3)
    torch.manual_seed(17)
    assert torch.equal(inside, torch.rand(3))


def test_seeded_does_not_depend_on_the_outer_state():
    torch.manual_seed(0)
    with seeded(5):
        first = torch.rand(3)
    torch.manual_seed(1)
    torch.rand(100)
    with seeded(5):
        second = torch.rand(3)
    assert torch.equal(first, second)


def test_global_rng_state_is_restored_after_the_block():
    torch.manual_seed(123)
    state = torch.get_rng_state()
    expected = torch.rand(5)
    torch.set_rng_state(state)
    with seeded(9):
        torch.rand(1000)
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(torch.rand(5), expected)


def test_global_rng_state_is_restored_after_an_exception():
    torch.manual_seed(7)
    state = torch.get_rng_state()
    with pytest.raises(RuntimeError, match="inside"), seeded(1):
        torch.rand(10)
        raise RuntimeError("inside")
    assert torch.equal(torch.get_rng_state(), state)


def test_resolve_seed_returns_a_given_seed():
    assert resolve_seed(0) == 0
    assert resolve_seed(12345) == 12345


def test_resolve_seed_none_is_deterministic_given_manual_seed():
    torch.manual_seed(42)
    first = resolve_seed(None)
    torch.manual_seed(42)
    second = resolve_seed(None)
    torch.manual_seed(43)
    other = resolve_seed(None)
    assert isinstance(first, int)
    assert first == second
    assert first != other
    assert 0 <= first < 2**31 - 1
    # A resolved seed is itself a valid seed.
    assert resolve_seed(first) == first


def test_resolve_seed_none_advances_the_global_rng():
    torch.manual_seed(0)
    draws = {resolve_seed(None) for _ in range(5)}
    assert len(draws) == 5


@pytest.mark.parametrize("seed", [-1, 1.5, "3", True, False, [1]])
def test_invalid_seeds_raise(seed):
    with pytest.raises(ValueError, match="seed"):
        resolve_seed(seed)


def test_seeds_are_the_ones_torch_accepts():
    assert resolve_seed(2**64 - 1) == 2**64 - 1
    with seeded(2**64 - 1):
        torch.rand(1)
    with pytest.raises(ValueError, match=r"seed must be an integer in \[0, 2\*\*64\)"):
        resolve_seed(2**64)


def test_draw_seed_comes_from_the_generator_alone():
    first = [draw_seed(torch.Generator().manual_seed(5)) for _ in range(2)]
    torch.rand(10)  # the global RNG plays no part
    generator = torch.Generator().manual_seed(5)
    draws = [draw_seed(generator) for _ in range(3)]
    assert first == [draws[0], draws[0]]
    assert len(set(draws)) == 3
    assert all(isinstance(seed, int) and 0 <= seed < 2**31 - 1 for seed in draws)
    assert resolve_seed(draws[0]) == draws[0]


def test_a_generator_draws_the_stream_of_the_global_generator_with_the_same_seed():
    # Fits draw from `torch.Generator().manual_seed(seed)` what they drew from the global
    # generator after `torch.manual_seed(seed)`: the same values for every kind of draw.
    def draws(generator):
        return [
            torch.rand(3, dtype=torch.float64, generator=generator),
            torch.randn(5, generator=generator),  # below 16: the scalar normal path
            torch.randn(40, generator=generator),
            torch.randint(0, 2**31 - 1, (4,), generator=generator),
            torch.randperm(30, generator=generator),
            torch.empty(7, 9).bernoulli_(0.7, generator=generator),
            torch.bernoulli(torch.full((3, 20), 0.9), generator=generator),
        ]

    torch.manual_seed(21)
    expected = draws(None)
    torch.randn(1)  # a cached normal sample in the global state must not leak
    for actual, wanted in zip(draws(torch.Generator().manual_seed(21)), expected, strict=True):
        assert torch.equal(actual, wanted)
