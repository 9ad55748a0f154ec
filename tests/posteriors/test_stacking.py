"""Tests of stack_posteriors."""

import pytest
import torch
from botorch.sampling.get_sampler import get_sampler

from botorch_nn_uq.posteriors import (
    FunctionEnsemblePosterior,
    GaussianMarginalPosterior,
    MixtureOfGaussiansPosterior,
)
from botorch_nn_uq.posteriors.stacking import stack_posteriors
from tests.testing import seeded_randn

BATCH = torch.Size([2, 3])


@pytest.mark.parametrize("dim", [0, 1])
def test_function_ensembles_stack_into_one(dim: int, tkwargs: dict) -> None:
    weights = torch.tensor([1.0, 2.0, 1.0], **tkwargs)
    parts = [
        FunctionEnsemblePosterior(seeded_randn(4, 3, 5, 2, seed=i, **tkwargs), weights)
        for i in range(6)
    ]
    stacked = stack_posteriors(parts, BATCH, dim=dim)
    assert isinstance(stacked, FunctionEnsemblePosterior)
    shape = (4, 2, 3, 5, 2) if dim == 1 else (2, 3, 4, 5, 2)
    assert stacked.mean.shape == stacked.variance.shape == shape
    position = (slice(None), 1, 2) if dim == 1 else (1, 2)
    torch.testing.assert_close(stacked.mean[position], parts[5].mean)
    torch.testing.assert_close(stacked.variance[position], parts[5].variance)
    # The same member index for every batch element: part 5's samples, stacked.
    sampler = get_sampler(stacked, torch.Size([8]), seed=0)
    samples = sampler(stacked)
    torch.testing.assert_close(samples[(slice(None), *position)], sampler(parts[5]))


def test_mixtures_and_gaussians_stay_in_their_family(tkwargs: dict) -> None:
    weights = torch.tensor([3.0, 1.0], **tkwargs)
    mixtures = [
        MixtureOfGaussiansPosterior(
            seeded_randn(2, 4, 1, seed=i, **tkwargs),
            seeded_randn(2, 4, 1, seed=i, **tkwargs).abs(),
            weights,
        )
        for i in range(6)
    ]
    stacked = stack_posteriors(mixtures, BATCH)
    assert isinstance(stacked, MixtureOfGaussiansPosterior) and stacked.batch_shape == BATCH
    torch.testing.assert_close(stacked.variance[1, 0], mixtures[3].variance)
    gaussians = [GaussianMarginalPosterior(p.mean, p.variance) for p in mixtures]
    stacked = stack_posteriors(gaussians, BATCH)
    assert isinstance(stacked, GaussianMarginalPosterior) and stacked.mean.shape == (2, 3, 4, 1)
    torch.testing.assert_close(stacked.mean[0, 2], gaussians[2].mean)


def test_mismatched_weights_or_families_give_the_moment_matched_gaussian(tkwargs: dict) -> None:
    parts = [
        FunctionEnsemblePosterior(seeded_randn(3, 4, 1, seed=0, **tkwargs)),
        FunctionEnsemblePosterior(
            seeded_randn(3, 4, 1, seed=1, **tkwargs), torch.tensor([1.0, 0.0, 1.0], **tkwargs)
        ),
    ]
    for posteriors in (
        parts,
        [parts[0], GaussianMarginalPosterior(parts[1].mean, parts[1].variance)],
    ):
        stacked = stack_posteriors(posteriors, torch.Size([2]))
        assert isinstance(stacked, GaussianMarginalPosterior)
        torch.testing.assert_close(stacked.mean[1], posteriors[1].mean)
        torch.testing.assert_close(stacked.variance[0], posteriors[0].variance)


def test_bad_stacks_raise(tkwargs: dict) -> None:
    part = GaussianMarginalPosterior(torch.zeros(4, 1, **tkwargs), torch.ones(4, 1, **tkwargs))
    with pytest.raises(ValueError, match="numel"):
        stack_posteriors([part] * 5, BATCH)
    with pytest.raises(ValueError, match="equal shapes"):
        other = GaussianMarginalPosterior(torch.zeros(3, 1, **tkwargs), torch.ones(3, 1, **tkwargs))
        stack_posteriors([part, other], torch.Size([2]))
    with pytest.raises(ValueError, match="dim"):
        stack_posteriors([part] * 2, torch.Size([2]), dim=1)
