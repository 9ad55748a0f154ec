"""Normal base samples for BoTorch's PosteriorList (botorch_nn_uq.posteriors.posterior_list)."""

import pytest
import torch
from botorch.acquisition.multi_objective import qLogNoisyExpectedHypervolumeImprovement
from botorch.exceptions.errors import UnsupportedError
from botorch.models import ModelList, SingleTaskGP
from botorch.posteriors import GPyTorchPosterior
from botorch.posteriors.fully_bayesian import GaussianMixturePosterior
from botorch.posteriors.posterior_list import PosteriorList
from botorch.sampling import IIDNormalSampler, SobolQMCNormalSampler
from gpytorch.distributions import MultivariateNormal

from botorch_nn_uq.posteriors import FunctionEnsemblePosterior, MixtureOfGaussiansPosterior
from botorch_nn_uq.posteriors.posterior_list import install_posterior_list_base_samples

F64 = {"dtype": torch.float64}


def _gaussian(batch: tuple[int, ...], q: int, seed: int) -> GPyTorchPosterior:
    generator = torch.Generator().manual_seed(seed)
    mean = torch.randn(*batch, q, generator=generator, **F64)
    return GPyTorchPosterior(MultivariateNormal(mean, torch.eye(q, **F64).expand(*batch, q, q)))


def _posteriors(batch=(3,), q=4):
    generator = torch.Generator().manual_seed(0)
    functions = FunctionEnsemblePosterior(torch.randn(*batch, 5, q, 1, generator=generator, **F64))
    mixture = MixtureOfGaussiansPosterior(
        torch.randn(*batch, 4, q, 2, generator=generator, **F64),
        torch.rand(*batch, 4, q, 2, generator=generator, **F64),
    )
    return [_gaussian(batch, q, 1), functions, mixture]


def test_base_samples_are_the_posteriors_side_by_side_point_by_point() -> None:
    posteriors = _posteriors()
    posterior_list = PosteriorList(*posteriors)
    # Per point: 1 (Gaussian) + 1 (function index) + 1 + 2 (mixture member and noise).
    assert posterior_list.base_sample_shape == (3, 4, 5)
    assert posterior_list.batch_range == (0, -2)
    assert posterior_list.batch_shape == (3,)
    base = torch.randn(7, 3, 4, 5, generator=torch.Generator().manual_seed(2), **F64)
    samples = posterior_list.rsample_from_base_samples(torch.Size([7]), base)
    assert samples.shape == (7, 3, 4, 4)
    columns = base.split([1, 1, 3], dim=-1)
    expected = [
        posteriors[0].rsample_from_base_samples(torch.Size([7]), columns[0].squeeze(-1)),
        posteriors[1].rsample_from_base_samples(torch.Size([7]), columns[1]),
        posteriors[2].rsample_from_base_samples(torch.Size([7]), columns[2]),
    ]
    torch.testing.assert_close(samples, torch.cat(expected, dim=-1))


@pytest.mark.parametrize("sampler_class", [SobolQMCNormalSampler, IIDNormalSampler])
def test_normal_samplers_draw_from_a_posterior_list(sampler_class) -> None:
    posterior_list = PosteriorList(*_posteriors())
    sampler = sampler_class(torch.Size([16]), seed=0)
    samples = sampler(posterior_list)
    assert samples.shape == (16, 3, 4, 4)
    torch.testing.assert_close(samples, sampler_class(torch.Size([16]), seed=0)(posterior_list))


def test_model_lists_of_gps_take_explicit_normal_samplers_and_cache_baselines() -> None:
    generator = torch.Generator().manual_seed(0)
    X = torch.rand(10, 2, generator=generator, **F64)
    Y = torch.stack([X.sin().sum(-1), X.cos().sum(-1)], -1)
    models = ModelList(*[SingleTaskGP(X, Y[:, [i]]) for i in range(2)])
    acquisition = qLogNoisyExpectedHypervolumeImprovement(
        models,
        ref_point=Y.min(0).values - 0.1,
        X_baseline=X,
        sampler=SobolQMCNormalSampler(torch.Size([8]), seed=0),
        prune_baseline=False,
    )
    values = acquisition(torch.rand(3, 2, 2, generator=generator, **F64))
    assert values.shape == (3,) and values.isfinite().all()
    # The baseline keeps its base samples when candidates are added (point-major layout).
    baseline = acquisition.base_sampler.base_samples
    kept = acquisition.sampler.base_samples[..., :10, :]
    assert torch.equal(kept.reshape(baseline.shape), baseline)


def test_fully_bayesian_members_need_a_list_sampler() -> None:
    mixture = GaussianMixturePosterior(
        MultivariateNormal(torch.zeros(2, 3, **F64), torch.eye(3, **F64).expand(2, 3, 3))
    )
    posterior_list = PosteriorList(mixture, _gaussian((), 3, 0))
    with pytest.raises(UnsupportedError, match="ListSampler"):
        SobolQMCNormalSampler(torch.Size([4]))(posterior_list)


def test_posteriors_without_base_samples_per_point_need_a_list_sampler() -> None:
    class OneDraw(FunctionEnsemblePosterior):
        @property
        def base_sample_shape(self) -> torch.Size:
            return self.batch_shape + torch.Size([1])

    posterior = OneDraw(torch.randn(5, 4, 1, **F64))
    posterior_list = PosteriorList(posterior, _gaussian((), 4, 0))
    with pytest.raises(UnsupportedError, match="no base samples per point"):
        SobolQMCNormalSampler(torch.Size([4]))(posterior_list)


def test_installing_again_changes_nothing() -> None:
    before = PosteriorList.base_sample_shape
    install_posterior_list_base_samples()
    assert PosteriorList.base_sample_shape is before
