"""Fit policies: cold refits, and continual (warm-started) refits that fall back to a
cold refit when a warm start diverges."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from botorch_nn_uq.bo import ColdFit, ContinualFit, ContinualTraining
from botorch_nn_uq.bo.fitting import FitData
from botorch_nn_uq.bo.surrogates import get_surrogate
from botorch_nn_uq.models.input_transforms import InputCoordinatesError
from botorch_nn_uq.training import NonFiniteLossError


def _data(n: int, num_new: int) -> FitData:
    generator = torch.Generator().manual_seed(0)
    train_X = torch.rand(n, 2, generator=generator, dtype=torch.float64)
    train_Y = -(train_X - 0.3).square().sum(-1, keepdim=True)
    bounds = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
    return FitData(train_X, train_Y, bounds, seed=n, num_new=num_new)


@pytest.mark.parametrize(
    "failure",
    [NonFiniteLossError("diverged"), InputCoordinatesError("normalised to another box")],
    ids=["diverged", "other-coordinates"],
)
def test_a_failed_warm_start_is_replaced_by_a_cold_refit_of_the_step(failure) -> None:
    spec = get_surrogate("deep-ensemble")
    calls = []

    def build(train_X, train_Y, bounds, seed, warm_start=None, **overrides):
        calls.append(warm_start is not None)
        if warm_start is not None:
            raise failure
        return spec.build(train_X, train_Y, bounds, seed, max_steps=20)

    diverging = dataclasses.replace(spec, build=build)
    policy = ContinualFit(ContinualTraining(warm_start_steps=10, cold_refit_every=5))
    first = policy.fit(diverging, _data(8, 0), None)
    assert calls == [False] and not policy.last_fit_was_warm
    second = policy.fit(diverging, _data(10, 2), first)
    # The warm start was tried, failed, and the step got a cold fit on all the data.
    assert calls == [False, True, False] and not policy.last_fit_was_warm
    assert second is not first and second.train_X.shape[0] == 10
    assert policy.state_dict()["fits_since_cold"] == 0


def test_the_cold_policy_refits_from_scratch_every_step() -> None:
    spec = get_surrogate("gp")
    policy = ColdFit()
    model = policy.fit(spec, _data(8, 0), None)
    assert not policy.last_fit_was_warm and model.train_inputs[0].shape[0] == 8
