"""Batched training data (``batch_shape x n x d``, ``batch_shape x n x m``): a deep
ensemble fitted on a batch equals, element by element, the fits of each element alone
with the same seed; its posterior has a batched GP's shapes; transforms, known noise and
checkpoints are per batch element; the other families refuse batched data, naming the
remedy."""

from __future__ import annotations

import itertools

import pytest
import torch
from botorch.cross_validation import batch_cross_validation, gen_loo_cv_folds
from botorch.exceptions.errors import UnsupportedError
from botorch.fit import fit_gpytorch_mll
from botorch.models import SingleTaskGP
from botorch.models.transforms import Normalize, Standardize
from botorch.models.transforms.input import Warp
from botorch.sampling import SobolQMCNormalSampler
from torch import Tensor

from botorch_nn_uq.fit import NetworkLoss
from botorch_nn_uq.models import NEON, NOMU, DeepEnsemble, HyperDeepEnsemble, MCDropout
from botorch_nn_uq.models.checkpoint import CheckpointError
from botorch_nn_uq.nn.batched_mlp import BatchedMLP
from botorch_nn_uq.training.members import fit_members
from tests.cards import fast_settings

F64 = {"dtype": torch.float64}
#: Tiny members, trained briefly: the checks compare fits, not their quality.
TINY = {"ensemble_size": 2, "hidden_widths": (8,), "epochs": 15}
BATCH_SHAPE = torch.Size([2, 3])


def batched_data(
    batch_shape: torch.Size = BATCH_SHAPE, n: int = 10, m: int = 1
) -> tuple[Tensor, Tensor, Tensor]:
    r"""``batch_shape x n x 2`` inputs, ``batch_shape x n x m`` outcomes of another scale
    per element and ``batch_shape x n x m`` known noise variances."""
    generator = torch.Generator().manual_seed(0)
    X = torch.rand(*batch_shape, n, 2, generator=generator, **F64)
    scale = torch.arange(1, batch_shape.numel() + 1, **F64).view(*batch_shape, 1, 1)
    Y = scale * torch.sin(5 * X).sum(-1, keepdim=True) + torch.arange(m, **F64)
    Yvar = 0.01 + 0.1 * torch.rand(Y.shape, generator=generator, **F64)
    return X, Y, Yvar


def query_points(*batch: int) -> Tensor:
    return torch.rand(*batch, 2, generator=torch.Generator().manual_seed(1), **F64)


def assert_each_element_is_its_own_fit(batched, fit_element, batch_shape, X: Tensor) -> None:
    r"""``batched``'s posterior at ``X`` (with and without observation noise) is, in each
    batch element, that of ``fit_element(index)``: the element's data fitted alone."""
    posteriors = {noise: batched.posterior(X, observation_noise=noise) for noise in (False, True)}
    for index in itertools.product(*map(range, batch_shape)):
        alone = fit_element(index)
        for noise, posterior in posteriors.items():
            expected = alone.posterior(X, observation_noise=noise)
            assert posterior.mean.shape == (*batch_shape, *expected.mean.shape)
            # Members train in float32 (the default training_dtype): rounding differs.
            torch.testing.assert_close(posterior.mean[index], expected.mean, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(
                posterior.variance[index], expected.variance, rtol=1e-5, atol=1e-6
            )


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"likelihood": "mse"},
        {"batch_size": 4},
        {"bootstrap": True},
        {"validation_fraction": 0.3},
        {"gradient_clip_norm": 1.0},
        {"training_dtype": None},
    ],
    ids=["common-path", "mse", "mini-batches", "bootstrap", "validation", "clipped", "float64"],
)
def test_each_batch_element_equals_a_fit_on_that_element_alone(options) -> None:
    X, Y, _ = batched_data()
    hyperparameters = {**TINY, **options}
    batched = DeepEnsemble(X, Y, **hyperparameters).fit(seed=3)
    assert batched.batch_shape == BATCH_SHAPE
    assert batched.network.num_members == BATCH_SHAPE.numel() * TINY["ensemble_size"]
    assert_each_element_is_its_own_fit(
        batched,
        lambda index: DeepEnsemble(X[index], Y[index], **hyperparameters).fit(seed=3),
        BATCH_SHAPE,
        query_points(4),
    )


def test_batched_transforms_and_known_noise_are_per_element() -> None:
    X, Y, Yvar = batched_data(m=2)
    transforms = {
        "input_transform": Normalize(2, batch_shape=BATCH_SHAPE),
        "outcome_transform": Standardize(2, batch_shape=BATCH_SHAPE),
    }
    batched = DeepEnsemble(X, Y, Yvar, **transforms, **TINY).fit(seed=0)

    def alone(index: tuple[int, ...]) -> DeepEnsemble:
        return DeepEnsemble(
            X[index],
            Y[index],
            Yvar[index],
            input_transform=Normalize(2),
            outcome_transform=Standardize(2),
            **TINY,
        ).fit(seed=0)

    assert_each_element_is_its_own_fit(batched, alone, BATCH_SHAPE, query_points(4))
    # With known noise, observation_noise=True adds each element's mean known variance.
    torch.testing.assert_close(batched.noise_variance, batched.transformed_train_Yvar.mean(-2))
    assert batched.noise_variance.shape == (*BATCH_SHAPE, 2)


def test_the_default_outcome_transform_standardises_each_element() -> None:
    X, Y, _ = batched_data()
    model = DeepEnsemble(X, Y, **TINY)
    assert model.outcome_transform._batch_shape == BATCH_SHAPE
    torch.testing.assert_close(
        model.transformed_train_Y.mean(-2), torch.zeros(*BATCH_SHAPE, 1, **F64), atol=1e-12, rtol=0
    )
    gp = SingleTaskGP(X, Y)
    assert gp.outcome_transform._batch_shape == model.outcome_transform._batch_shape


@pytest.mark.parametrize(
    "shape", [(4,), (2, 3, 4), (5, 2, 3, 4), (5, 1, 1, 4), (1, 4), (5, 1, 3, 4)]
)
def test_posterior_shapes_are_a_batched_gps(shape) -> None:
    X, Y, _ = batched_data()
    model = DeepEnsemble(X, Y, **TINY).fit(seed=0)
    gp = SingleTaskGP(X, Y).eval()
    test_X = query_points(*shape)
    expected = gp.posterior(test_X).mean.shape
    posterior = model.posterior(test_X)
    assert posterior.mean.shape == posterior.variance.shape == expected
    assert model(test_X).mean.shape == gp(test_X).mean.shape
    samples = SobolQMCNormalSampler(torch.Size([3]), seed=0)(posterior)
    assert samples.shape == (3, *expected)
    parts = model.uncertainty_decomposition(test_X)
    assert parts.mean.shape == parts.epistemic_variance.shape == expected
    # Differentiable in the inputs, as an acquisition's optimisation needs.
    test_X.requires_grad_(True)
    model.posterior(test_X).mean.sum().backward()
    assert test_X.grad.isfinite().all() and test_X.grad.abs().sum() > 0


def test_inputs_whose_batch_does_not_broadcast_are_refused() -> None:
    X, Y, _ = batched_data()
    model = DeepEnsemble(X, Y, **TINY).fit(seed=0)
    with pytest.raises(ValueError, match=r"batch shape \(4,\), which does not broadcast"):
        model.posterior(query_points(4, 3))


def test_an_element_evaluates_only_its_own_inputs() -> None:
    X, Y, _ = batched_data(batch_shape=torch.Size([2]))
    model = DeepEnsemble(X, Y, **TINY).fit(seed=0)
    test_X = query_points(2, 3)
    batched = model.posterior(test_X).mean
    shared = model.posterior(test_X[1]).mean
    torch.testing.assert_close(batched[1], shared[1])
    assert not torch.allclose(batched[0], model.posterior(test_X[1]).mean[0])


def test_batch_cross_validation_equals_the_folds_fitted_one_by_one() -> None:
    X, Y, _ = batched_data(batch_shape=torch.Size([]), n=8)
    folds = gen_loo_cv_folds(X, Y)
    results = batch_cross_validation(
        DeepEnsemble, NetworkLoss, folds, fit_args={"seed": 0}, model_init_kwargs=TINY
    )
    assert results.model.batch_shape == (8,)
    assert results.posterior.mean.shape == folds.test_Y.shape == (8, 1, 1)
    for fold in (0, 5):
        alone = DeepEnsemble(folds.train_X[fold], folds.train_Y[fold], **TINY).fit(seed=0)
        torch.testing.assert_close(
            results.posterior.mean[fold], alone.posterior(folds.test_X[fold]).mean
        )


def test_fit_gpytorch_mll_fits_through_network_loss_and_refuses_gp_options() -> None:
    X, Y, _ = batched_data(batch_shape=torch.Size([]))
    model = DeepEnsemble(X, Y, **TINY)
    fit_gpytorch_mll(NetworkLoss(model.likelihood, model), seed=4)
    assert model.is_fitted and model.fit_seed == 4
    with pytest.raises(UnsupportedError, match="fit_args=\\{'seed': 0\\}"):
        fit_gpytorch_mll(NetworkLoss(None, model), optimizer_kwargs={"maxiter": 3})
    with pytest.raises(TypeError, match="ExactMarginalLogLikelihood"):
        NetworkLoss(None, SingleTaskGP(X, Y))
    with pytest.raises(NotImplementedError, match="not evaluated"):
        NetworkLoss(None, model)(X)


def test_a_checkpoint_loads_into_a_model_of_the_same_batch_shape_only() -> None:
    X, Y, _ = batched_data()
    model = DeepEnsemble(X, Y, **TINY).fit(seed=0)
    fresh = DeepEnsemble(X, Y, **TINY)
    fresh.load_state_dict(model.state_dict())
    torch.testing.assert_close(
        fresh.posterior(query_points(3)).mean, model.posterior(query_points(3)).mean
    )
    for other_X, other_Y in ((X[0], Y[0]), (X[0, 0], Y[0, 0])):
        with pytest.raises(CheckpointError, match="batch shape of the training data"):
            DeepEnsemble(other_X, other_Y, **TINY).load_state_dict(model.state_dict())


def test_subset_output_of_a_batched_model() -> None:
    X, Y, _ = batched_data(m=2)
    model = DeepEnsemble(X, Y, **TINY).fit(seed=0)
    test_X = query_points(3)
    subset = model.subset_output([1])
    assert subset.batch_shape == BATCH_SHAPE
    torch.testing.assert_close(subset.posterior(test_X).mean, model.posterior(test_X).mean[..., 1:])


def test_conditioning_a_batched_model_is_refused_with_the_remedy() -> None:
    X, Y, _ = batched_data()
    model = DeepEnsemble(X, Y, **TINY).fit(seed=0)
    with pytest.raises(UnsupportedError, match="fit one model per batch element"):
        model.fantasize(query_points(1), SobolQMCNormalSampler(torch.Size([2])))
    with pytest.raises(UnsupportedError, match="fit one model per batch element"):
        model.condition_on_observations(query_points(1), torch.zeros(1, 1, **F64))


@pytest.mark.parametrize(
    ("model_class", "card"),
    [
        (MCDropout, "mc-dropout"),
        (NOMU, "nomu"),
        (NEON, "neon"),
        (HyperDeepEnsemble, "hyper-deep-ensemble"),
    ],
)
def test_families_without_batched_data_refuse_them_naming_the_remedy(model_class, card) -> None:
    X, Y, _ = batched_data()
    message = rf"{model_class.__name__} does not take batched.*ModelList\(.*DeepEnsemble"
    with pytest.raises(ValueError, match=message):
        model_class(X, Y, **fast_settings(card))
    folds = gen_loo_cv_folds(X[0, 0], Y[0, 0])
    with pytest.raises(ValueError, match=message):
        batch_cross_validation(model_class, NetworkLoss, folds)


@pytest.mark.parametrize(
    ("make_data", "message"),
    [
        (lambda X, Y: (X, Y[:1]), "same batch shape"),
        (lambda X, Y: (X, Y[0]), "same batch shape"),
        (lambda X, Y: (X[..., :1, :], Y[..., :1, :]), "At least 2 training points .*per batch"),
        (lambda X, Y: (X, Y[..., :-1, :]), "same number of rows"),
        (lambda X, Y: (X.index_fill(-2, torch.tensor([3]), float("nan")), Y), "train_X .*NaN"),
        (lambda X, Y: (X, Y.index_fill(-2, torch.tensor([3]), float("inf"))), "train_Y .*inf"),
    ],
)
def test_bad_batched_training_data(make_data, message) -> None:
    with pytest.raises(ValueError, match=message):
        DeepEnsemble(*make_data(*batched_data()[:2]), **TINY)


def test_known_noise_must_have_the_batched_shape_of_the_outcomes() -> None:
    X, Y, Yvar = batched_data()
    with pytest.raises(ValueError, match="train_Yvar must have the shape of train_Y"):
        DeepEnsemble(X, Y, Yvar[0], **TINY)


def test_element_rows_need_a_multiple_of_the_elements_in_members() -> None:
    X, Y, _ = batched_data(batch_shape=torch.Size([2]))
    members = BatchedMLP(2, 1, (4,), member_seeds=[0, 1, 2])
    config = DeepEnsemble(X, Y, **TINY).hyperparameters.training_config()
    with pytest.raises(ValueError, match="multiple of 2 members"):
        fit_members(members, X, Y, config)


def test_a_batched_fit_warm_starts_from_a_batched_fit() -> None:
    X, Y, _ = batched_data()
    previous = DeepEnsemble(X, Y, **TINY).fit(seed=0)
    model = DeepEnsemble(X, Y, **TINY).fit(seed=1, warm_start=previous)
    assert model.warm_started
    assert model.posterior(query_points(3)).mean.shape == (*BATCH_SHAPE, 3, 1)


def test_learnable_input_transforms_are_refused_on_batched_data() -> None:
    X, Y, _ = batched_data()
    with pytest.raises(UnsupportedError, match="shared by every batch element"):
        DeepEnsemble(X, Y, input_transform=Warp(2, indices=[0, 1]), **TINY)


def test_batched_tensor_valued_outputs_are_refused_with_the_remedy() -> None:
    X, Y, _ = batched_data()
    with pytest.raises(ValueError, match=r"train_Y\.flatten\(3\)"):
        DeepEnsemble(X, Y.unsqueeze(-1).expand(*Y.shape, 3), **TINY)
