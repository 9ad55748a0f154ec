"""BoTorch's normal samplers on the function-bank and mixture posteriors: a normal draw
picks whole functions and members (botorch_nn_uq.posteriors.member_indices)."""

import pytest
import torch
from botorch.sampling import IIDNormalSampler, SobolQMCNormalSampler

from botorch_nn_uq.posteriors import FunctionEnsemblePosterior, MixtureOfGaussiansPosterior
from botorch_nn_uq.posteriors.member_indices import member_indices_from_normals

F64 = {"dtype": torch.float64}


def test_normals_pick_members_by_the_inverse_cdf_of_the_weights() -> None:
    weights = torch.tensor([1.0, 2.0, 1.0], **F64)
    quartiles = torch.tensor([-1.0, -0.5, 0.0, 0.5, 1.0], **F64)
    # Phi: 0.16, 0.31, 0.5, 0.69, 0.84 against the cumulative weights 0.25, 0.75, 1.
    assert member_indices_from_normals(weights, quartiles).tolist() == [0, 1, 1, 1, 2]
    draws = torch.randn(40_000, generator=torch.Generator().manual_seed(0), **F64)
    counts = member_indices_from_normals(weights, draws).bincount(minlength=3).to(draws) / 40_000
    torch.testing.assert_close(counts, weights / 4, atol=0.01, rtol=0)


@pytest.mark.parametrize("sampler_class", [SobolQMCNormalSampler, IIDNormalSampler])
def test_a_normal_sampler_draws_whole_functions_shared_across_the_batch(sampler_class) -> None:
    values = torch.randn(3, 6, 4, 2, generator=torch.Generator().manual_seed(0), **F64)
    posterior = FunctionEnsemblePosterior(values)
    assert posterior.base_sample_shape == (3, 4, 1) and posterior.batch_range == (0, -2)
    sampler = sampler_class(torch.Size([64]), seed=0)
    samples = sampler(posterior)
    assert samples.shape == (64, 3, 4, 2)
    assert torch.equal(samples, sampler_class(torch.Size([64]), seed=0)(posterior))
    matches = (samples.unsqueeze(2) == values.unsqueeze(0)).all(-1).all(-1)  # 64 x 3 x 6
    assert (matches.sum(-1) == 1).all()
    indices = matches.float().argmax(-1)
    assert (indices == indices[:, :1]).all()  # one function for every batch element
    if sampler_class is SobolQMCNormalSampler:
        # Stratified draws use every one of the six functions about equally often.
        counts = indices[:, 0].bincount(minlength=6)
        assert counts.min() >= 9 and counts.max() <= 12


def test_a_normal_sampler_draws_exact_mixture_samples() -> None:
    generator = torch.Generator().manual_seed(0)
    means = torch.randn(4, 3, 2, generator=generator, **F64)
    variances = torch.rand(4, 3, 2, generator=generator, **F64)
    posterior = MixtureOfGaussiansPosterior(means, variances)
    assert posterior.base_sample_shape == (3, 3) and posterior.batch_range == (0, -2)
    samples = SobolQMCNormalSampler(torch.Size([4096]), seed=0)(posterior)
    torch.testing.assert_close(samples.mean(0), posterior.mean, atol=0.05, rtol=0)
    torch.testing.assert_close(samples.var(0), posterior.variance, atol=0.05, rtol=0.05)
    # Each sample is one member at all points: its deviation from that member's mean is
    # noise of that member's variance.
    standardised = (samples.unsqueeze(1) - means) / variances.sqrt()  # 4096 x 4 x 3 x 2
    member = (standardised.abs() < 5).all(-1).all(-1)
    assert member.any(-1).all()


def test_an_empty_batch_of_points_has_empty_samples() -> None:
    posterior = FunctionEnsemblePosterior(torch.zeros(5, 0, 1, **F64))
    assert SobolQMCNormalSampler(torch.Size([3]), seed=0)(posterior).shape == (3, 0, 1)
    mixture = MixtureOfGaussiansPosterior(torch.zeros(5, 0, 1, **F64), torch.ones(5, 0, 1, **F64))
    assert IIDNormalSampler(torch.Size([3]), seed=0)(mixture).shape == (3, 0, 1)


def test_function_banks_offer_the_moment_matched_gaussian() -> None:
    values = torch.randn(2, 5, 3, 1, generator=torch.Generator().manual_seed(0), **F64)
    posterior = FunctionEnsemblePosterior(values)
    covariance = posterior.mvn.covariance_matrix
    deviations = (values - values.mean(-3, keepdim=True)).squeeze(-1)
    expected = deviations.transpose(-2, -1) @ deviations / 5
    torch.testing.assert_close(covariance, expected + 1e-10 * torch.eye(3, **F64))
    batched = posterior.output_batched_distribution()
    assert batched.mean.shape == (2, 3)
    torch.testing.assert_close(batched.covariance_matrix, covariance)
