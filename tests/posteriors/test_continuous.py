"""Tests of the continuous joint samples of a function bank (the Gaussian of its
moments) and of a mixture (its moment-matched Gaussian)."""

import pytest
import torch
from botorch.models.transforms.outcome import Standardize
from botorch.sampling import IIDNormalSampler, SobolQMCNormalSampler
from botorch.sampling.get_sampler import get_sampler
from torch.quasirandom import SobolEngine

from botorch_nn_uq.models import DeepEnsemble, MCDropout
from botorch_nn_uq.posteriors import (
    ContinuousFunctionPosterior,
    ContinuousMixturePosterior,
    EnsembleIndexSampler,
    FunctionEnsemblePosterior,
    MixtureOfGaussiansPosterior,
    MixtureSampler,
)
from botorch_nn_uq.posteriors.continuous import combine_functions, with_joint_samples
from tests.testing import seeded_rand, seeded_randn, tolerances

#: Sobol draws of the moment checks: the sample covariance of 2^14 stratified draws is
#: within a few percent of the exact one.
NUM_DRAWS = 2**14


def _weights(tkwargs) -> torch.Tensor:
    return torch.tensor([0.1, 0.3, 0.2, 0.4], **tkwargs)


def _sample_covariance(samples: torch.Tensor) -> torch.Tensor:
    r"""``batch x (q m) x (q m)`` covariance of ``N x batch x q x m`` samples."""
    flat = samples.flatten(-2)
    centred = flat - flat.mean(0)
    return torch.einsum("n...i,n...j->...ij", centred, centred) / (flat.shape[0] - 1)


def test_samples_have_the_banks_mean_and_joint_covariance(tkwargs) -> None:
    values = seeded_randn(2, 4, 3, 2, seed=0, **tkwargs)  # batch 2, s 4, q 3, m 2
    posterior = ContinuousFunctionPosterior(values, _weights(tkwargs))
    samples = SobolQMCNormalSampler(torch.Size([NUM_DRAWS]), seed=0)(posterior)
    assert samples.shape == (NUM_DRAWS, 2, 3, 2) and samples.dtype == tkwargs["dtype"]
    exact = posterior.moment_matched_posterior().distribution.covariance_matrix
    scale = exact.diagonal(dim1=-2, dim2=-1).max()
    torch.testing.assert_close(samples.mean(0), posterior.mean, atol=0.02 * scale.sqrt(), rtol=0)
    torch.testing.assert_close(_sample_covariance(samples), exact, atol=0.03 * scale, rtol=0)
    # Mean and variance are the finite set's: analytic acquisitions see the same model.
    finite = FunctionEnsemblePosterior(values, _weights(tkwargs))
    torch.testing.assert_close(posterior.mean, finite.mean, rtol=0, atol=0)
    torch.testing.assert_close(posterior.variance, finite.variance, rtol=0, atol=0)


def test_mixture_samples_are_its_moment_matched_gaussian(tkwargs) -> None:
    means = seeded_randn(4, 3, 2, seed=1, **tkwargs)
    variances = 0.2 * seeded_rand(4, 3, 2, seed=2, **tkwargs)
    posterior = ContinuousMixturePosterior(means, variances, _weights(tkwargs))
    assert posterior.base_sample_shape == (3, 4 + 2)
    samples = SobolQMCNormalSampler(torch.Size([NUM_DRAWS]), seed=0)(posterior)
    exact = posterior.distribution.covariance_matrix
    scale = exact.diagonal(dim1=-2, dim2=-1).max()
    torch.testing.assert_close(samples.mean(0), posterior.mean, atol=0.02 * scale.sqrt(), rtol=0)
    torch.testing.assert_close(_sample_covariance(samples), exact, atol=0.03 * scale, rtol=0)
    mixture = MixtureOfGaussiansPosterior(means, variances, _weights(tkwargs))
    torch.testing.assert_close(posterior.variance, mixture.variance, rtol=0, atol=0)


def test_samples_are_continuous_in_the_inputs(tkwargs) -> None:
    # Smooth functions of x: a sample at nearby points moves by about the slope times the
    # step, never by a jump between functions.
    x = torch.tensor([0.3, 0.3 + 1e-4], **tkwargs)
    phases = seeded_rand(6, seed=3, **tkwargs)
    values = torch.sin(4 * x + 6 * phases[:, None])[..., None]  # 6 x 2 x 1
    samples = IIDNormalSampler(torch.Size([256]), seed=0)(ContinuousFunctionPosterior(values))
    # Slopes are at most 4 and |sum_k sqrt(w_k) z_k| is below 6 for these draws.
    assert (samples[:, 1] - samples[:, 0]).abs().max() < 4 * 6 * 1e-4 * 1.01


def test_samples_are_linear_and_continuous_in_the_base_samples(tkwargs) -> None:
    posterior = ContinuousFunctionPosterior(seeded_randn(5, 3, 1, seed=4, **tkwargs))
    base = seeded_randn(2, 3, 5, seed=5, **tkwargs)
    samples = posterior.rsample_from_base_samples(torch.Size([2]), base)
    middle = posterior.rsample_from_base_samples(torch.Size([1]), base.mean(0, keepdim=True))
    torch.testing.assert_close(middle[0], samples.mean(0), **tolerances(tkwargs["dtype"]))
    nudged = posterior.rsample_from_base_samples(torch.Size([2]), base + 1e-3)
    assert (nudged - samples).abs().max() < 1e-2
    # Only the first point's normals are z: the others' do not change the samples.
    other_points = base.clone()
    other_points[:, 1:] = 0.0
    torch.testing.assert_close(
        posterior.rsample_from_base_samples(torch.Size([2]), other_points), samples
    )


def test_appending_points_keeps_the_samples_at_the_first_points(tkwargs) -> None:
    # BoTorch's samplers keep the base samples of earlier points when points are added
    # (qLogNoisyExpectedImprovement's baseline): the first point carries z.
    values = seeded_randn(4, 3, 1, seed=6, **tkwargs)
    short = ContinuousFunctionPosterior(values[:, :2])
    full = ContinuousFunctionPosterior(values)
    base = seeded_randn(8, 3, 4, seed=7, **tkwargs)
    torch.testing.assert_close(
        short.rsample_from_base_samples(torch.Size([8]), base[:, :2]),
        full.rsample_from_base_samples(torch.Size([8]), base)[:, :2],
    )


@pytest.mark.parametrize("sampler_class", [SobolQMCNormalSampler, IIDNormalSampler])
def test_samplers_share_z_across_the_batch_and_reproduce_under_a_seed(
    sampler_class, tkwargs
) -> None:
    functions = seeded_randn(5, 4, 1, seed=8, **tkwargs)
    posterior = ContinuousFunctionPosterior(functions.expand(3, 5, 4, 1))
    assert posterior.batch_range == (0, -2) and posterior.base_sample_shape == (3, 4, 5)
    samples = sampler_class(torch.Size([2, 6]), seed=0)(posterior)
    assert samples.shape == (2, 6, 3, 4, 1)
    # Equal functions in every batch element: the same z gives the same samples.
    assert torch.equal(samples[:, :, 0], samples[:, :, 2])
    assert torch.equal(samples, sampler_class(torch.Size([2, 6]), seed=0)(posterior))
    assert not torch.equal(samples, sampler_class(torch.Size([2, 6]), seed=1)(posterior))
    # A sample is not one of the functions.
    assert not (samples[:, :, 0].unsqueeze(-3) == functions).all(-1).all(-1).any()


def test_get_sampler_gives_the_sobol_sampler_and_the_iid_one_beyond_its_dimensions(
    tkwargs,
) -> None:
    posterior = ContinuousFunctionPosterior(seeded_randn(4, 3, 1, seed=9, **tkwargs))
    sampler = get_sampler(posterior, torch.Size([16]), seed=3)
    assert isinstance(sampler, SobolQMCNormalSampler) and sampler.seed == 3
    torch.testing.assert_close(
        sampler(posterior), get_sampler(posterior, torch.Size([16]), seed=3)(posterior)
    )
    num_points = SobolEngine.MAXDIM // 4 + 1
    wide = ContinuousMixturePosterior(
        torch.zeros(3, num_points, 1, **tkwargs), torch.ones(3, num_points, 1, **tkwargs)
    )
    assert isinstance(get_sampler(wide, torch.Size([4])), IIDNormalSampler)


def test_rsample_shapes_gradients_and_the_global_seed(tkwargs) -> None:
    values = seeded_randn(2, 5, 3, 2, seed=10, **tkwargs).requires_grad_(True)
    posterior = ContinuousFunctionPosterior(values)
    torch.manual_seed(0)
    samples = posterior.rsample(torch.Size([4, 2]))
    assert samples.shape == (4, 2, 2, 3, 2)
    assert posterior.rsample().shape == (1, 2, 3, 2)
    samples.sum().backward()
    assert values.grad is not None and values.grad.abs().sum() > 0
    torch.manual_seed(0)
    torch.testing.assert_close(posterior.rsample(torch.Size([4, 2])), samples.detach())
    mixture = ContinuousMixturePosterior(values.detach()[0], torch.ones(5, 3, 2, **tkwargs))
    assert mixture.rsample(torch.Size([7])).shape == (7, 3, 2)


def test_many_rsample_draws_are_distinct_functions(tkwargs) -> None:
    # A finite set repeats its K functions; the continuous posterior never does, so
    # Thompson sampling by MaxPosteriorSampling gets a new maximiser per sample.
    posterior = ContinuousFunctionPosterior(seeded_randn(3, 16, 1, seed=11, **tkwargs))
    torch.manual_seed(0)
    samples = posterior.rsample(torch.Size([50]))
    assert samples.squeeze(-1).unique(dim=0).shape[0] == 50


def test_an_empty_batch_of_points_has_empty_samples(tkwargs) -> None:
    posterior = ContinuousFunctionPosterior(torch.zeros(5, 0, 1, **tkwargs))
    assert posterior.base_sample_shape == (1, 5)
    assert SobolQMCNormalSampler(torch.Size([3]), seed=0)(posterior).shape == (3, 0, 1)
    mixture = ContinuousMixturePosterior(
        torch.zeros(5, 0, 1, **tkwargs), torch.zeros(5, 0, 1, **tkwargs)
    )
    assert SobolQMCNormalSampler(torch.Size([3]), seed=0)(mixture).shape == (3, 0, 1)
    # An empty batch of inputs: empty samples of the batch's shape.
    empty_batch = ContinuousFunctionPosterior(torch.zeros(0, 5, 2, 1, **tkwargs))
    assert IIDNormalSampler(torch.Size([3]), seed=0)(empty_batch).shape == (3, 0, 2, 1)


def test_maps_keep_the_continuous_samples(tkwargs) -> None:
    values = seeded_randn(5, 3, 2, seed=12, **tkwargs)
    posterior = ContinuousFunctionPosterior(values)
    transform = Standardize(2).to(**tkwargs)
    transform.train()
    transform(seeded_randn(10, 2, seed=13, **tkwargs))
    transform.eval()
    untransformed = posterior.untransform_outcomes(transform)
    assert isinstance(untransformed, ContinuousFunctionPosterior)
    base = seeded_randn(4, 3, 5, seed=14, **tkwargs)
    samples = posterior.rsample_from_base_samples(torch.Size([4]), base)
    torch.testing.assert_close(
        untransformed.rsample_from_base_samples(torch.Size([4]), base),
        transform.untransform(samples)[0],
        **tolerances(tkwargs["dtype"]),
    )
    assert isinstance(posterior.subset_outputs([1]), ContinuousFunctionPosterior)
    assert isinstance(posterior.scalarize(torch.ones(2, **tkwargs)), ContinuousFunctionPosterior)
    shifted = posterior.shift_functions(torch.ones(2, 1, 1, 1, **tkwargs))
    assert isinstance(shifted, ContinuousFunctionPosterior) and shifted.batch_shape == (2,)
    noisy = posterior.add_observation_noise(torch.full((3, 2), 0.5, **tkwargs))
    assert isinstance(noisy, ContinuousMixturePosterior)
    torch.testing.assert_close(noisy.variance, posterior.variance + 0.5)
    for mapped in (
        noisy.subset_outputs([0]),
        noisy.untransform_outcomes(transform),
        noisy.scalarize(torch.ones(2, **tkwargs)),
        noisy.add_observation_noise(torch.ones(3, 2, **tkwargs)),
        noisy.shift_functions(torch.ones(3, 2, **tkwargs)),
    ):
        assert isinstance(mapped, ContinuousMixturePosterior)


def test_base_samples_of_another_shape_are_refused() -> None:
    # A finite set's normal base samples: one per point.
    base_samples = torch.zeros(4, 3, 1)
    posterior = ContinuousFunctionPosterior(torch.zeros(5, 3, 1))
    with pytest.raises(ValueError, match="standard normals of shape"):
        posterior.rsample_from_base_samples(torch.Size([4]), base_samples)
    mixture = ContinuousMixturePosterior(torch.zeros(5, 3, 1), torch.ones(5, 3, 1))
    with pytest.raises(ValueError, match="standard normals of shape"):
        mixture.rsample_from_base_samples(torch.Size([4]), base_samples)
    with pytest.raises(ValueError, match="standard normals of shape"):
        mixture.rsample_from_base_samples(torch.Size([4]), torch.zeros(4, dtype=torch.long))


def test_explicit_index_samplers_still_draw_whole_functions(tkwargs) -> None:
    # An explicit EnsembleIndexSampler or MixtureSampler asks for the exact average over
    # the bank (optimize_acqf_screened ranks candidates that way).
    values = seeded_randn(4, 3, 1, seed=17, **tkwargs)
    sampler = EnsembleIndexSampler(torch.Size([8]), seed=0)
    torch.testing.assert_close(
        sampler(ContinuousFunctionPosterior(values)), sampler(FunctionEnsemblePosterior(values))
    )
    variances = seeded_rand(4, 3, 1, seed=18, **tkwargs)
    mixture_sampler = MixtureSampler(torch.Size([8]), seed=0)
    torch.testing.assert_close(
        mixture_sampler(ContinuousMixturePosterior(values, variances)),
        mixture_sampler(MixtureOfGaussiansPosterior(values, variances)),
    )


def test_shared_and_per_element_normals_give_the_same_samples(tkwargs) -> None:
    values = seeded_randn(3, 2, 4, 5, 2, seed=19, **tkwargs)  # batch 3 x 2, s 4
    weights = _weights(tkwargs)
    shared = seeded_randn(6, 1, 1, 4, seed=20, **tkwargs).expand(6, 3, 2, 4)
    torch.testing.assert_close(
        combine_functions(values, weights, shared),
        combine_functions(values, weights, shared.contiguous()),
        **tolerances(tkwargs["dtype"]),
    )


def test_combine_functions_refuses_normals_of_the_wrong_shape() -> None:
    with pytest.raises(ValueError, match="sample_shape x"):
        combine_functions(torch.zeros(2, 5, 3, 1), torch.full((5,), 0.2), torch.zeros(4, 5))
    with pytest.raises(ValueError, match="sample_shape x"):
        combine_functions(torch.zeros(5, 3, 1), torch.full((5,), 0.2), torch.zeros(4, 6))


def test_the_functions_option_is_the_finite_set_unchanged() -> None:
    finite = FunctionEnsemblePosterior(torch.randn(5, 3, 1))
    assert with_joint_samples(finite, "functions") is finite
    mixture = MixtureOfGaussiansPosterior(torch.randn(5, 3, 1), torch.ones(5, 3, 1))
    assert with_joint_samples(mixture, "functions") is mixture
    assert isinstance(with_joint_samples(mixture, "continuous"), ContinuousMixturePosterior)


@pytest.mark.parametrize(
    ("model_class", "options"),
    [
        (DeepEnsemble, {"hidden_widths": (16,), "epochs": 20}),
        (MCDropout, {"hidden_widths": (16,), "epochs": 20, "num_masks": 8}),
    ],
)
def test_models_serve_the_option_with_the_same_mean_and_variance(model_class, options) -> None:
    train_X = seeded_rand(12, 2, seed=15, dtype=torch.float64)
    train_Y = train_X.sin().sum(-1, keepdim=True)
    X = seeded_rand(4, 3, 2, seed=16, dtype=torch.float64)
    posteriors = {}
    for joint_samples in ("functions", "continuous"):
        model = model_class(train_X, train_Y, joint_samples=joint_samples, **options).fit(seed=0)
        posteriors[joint_samples] = model.posterior(X), model.posterior(X, observation_noise=True)
    (finite, finite_noisy), (continuous, continuous_noisy) = posteriors.values()
    # "functions" is the posterior before the option: its exact classes and samples.
    assert type(finite) is FunctionEnsemblePosterior
    assert type(finite_noisy) is MixtureOfGaussiansPosterior
    sampler = EnsembleIndexSampler(torch.Size([8]), seed=0)
    values = finite.values
    torch.testing.assert_close(sampler(finite), sampler(FunctionEnsemblePosterior(values)))
    assert isinstance(continuous, ContinuousFunctionPosterior)
    assert isinstance(continuous_noisy, ContinuousMixturePosterior)
    torch.testing.assert_close(continuous.mean, finite.mean, rtol=0, atol=0)
    torch.testing.assert_close(continuous.variance, finite.variance, rtol=0, atol=0)
    torch.testing.assert_close(continuous_noisy.variance, finite_noisy.variance, rtol=0, atol=0)


def test_an_unknown_option_is_refused() -> None:
    with pytest.raises(ValueError, match="joint_samples"):
        DeepEnsemble(torch.rand(4, 1), torch.rand(4, 1), joint_samples="members")
    with pytest.raises(ValueError, match="joint_samples"):
        MCDropout(torch.rand(4, 1), torch.rand(4, 1), joint_samples="masks")
