"""Tests of tensor-valued outputs: the transforms of the flattened outputs, and a model
of them against the same model of the flattened outputs and against BoTorch's
``HigherOrderGP``."""

import pytest
import torch
from botorch.acquisition.objective import ScalarizedPosteriorTransform
from botorch.exceptions.errors import UnsupportedError
from botorch.models import HigherOrderGP
from botorch.models.higher_order_gp import FlattenedStandardize
from botorch.models.transforms import Log, Normalize, Standardize
from botorch.sampling import IIDNormalSampler

from botorch_nn_uq.models import DeepEnsemble
from botorch_nn_uq.models.tensor_outputs import (
    flat_outcome_transform,
    flatten_outputs,
    scaling_check_targets,
    tensor_output_shape,
)
from botorch_nn_uq.posteriors import TensorOutputPosterior

DTYPE = torch.float64
OUTPUT_SHAPE = torch.Size([2, 3])
FAST = {"hidden_widths": (8,), "epochs": 40, "ensemble_size": 2}


def _data(n: int = 16):
    r"""``n x 2`` inputs and a ``2 x 3`` field per point."""
    X = torch.rand(n, 2, generator=torch.Generator().manual_seed(0), dtype=DTYPE)
    scales = torch.tensor([1.0, 3.0], dtype=DTYPE)[:, None]
    field = scales * torch.sin(4 * X[:, :1, None] + torch.arange(3, dtype=DTYPE) + X[:, 1:, None])
    return X, field


def _points(*batch: int) -> torch.Tensor:
    return torch.rand(*batch, 2, generator=torch.Generator().manual_seed(1), dtype=DTYPE)


def _pair(**options):
    r"""The deep ensemble fitted on the field and on its flattened outputs."""
    X, field = _data()
    flat_options = dict(options)
    if isinstance(options.get("outcome_transform"), FlattenedStandardize):
        flat_options["outcome_transform"] = FlattenedStandardize(torch.Size([6]))
    if "train_Yvar" in options:
        flat_options["train_Yvar"] = options["train_Yvar"].flatten(1)
    tensor = DeepEnsemble(X, field, input_transform=Normalize(2), **FAST, **options)
    flat = DeepEnsemble(X, field.flatten(1), input_transform=Normalize(2), **FAST, **flat_options)
    return tensor.fit(seed=0), flat.fit(seed=0)


def test_tensor_output_shape_tells_tensor_valued_outputs_apart():
    X, field = _data()
    assert tensor_output_shape(X, field) == OUTPUT_SHAPE
    assert tensor_output_shape(X, field.flatten(1)) is None
    assert tensor_output_shape(X.expand(2, *X.shape), field) is None
    assert tensor_output_shape(X, field[:-1]) is None
    assert tensor_output_shape(X, "not a tensor") is None


def test_flatten_outputs_names_values_of_another_shape():
    values = torch.zeros(5, 4, 2, 3)
    assert flatten_outputs(values, OUTPUT_SHAPE, "Y").shape == (5, 4, 6)
    for shape in [(5, 4, 6), (2, 3), (5, 3, 2)]:
        with pytest.raises(ValueError, match=r"noise must end in the outputs' shape \(2, 3\)"):
            flatten_outputs(torch.zeros(shape), OUTPUT_SHAPE, "noise")


@pytest.mark.parametrize("trained", [False, True])
def test_a_flattened_standardize_acts_on_the_flattened_outputs_as_on_the_tensor(trained):
    _, field = _data()
    given = FlattenedStandardize(OUTPUT_SHAPE, min_stdv=1e-6)
    if trained:
        given(field)
        given.eval()
    flat = flat_outcome_transform(given, OUTPUT_SHAPE)
    assert isinstance(flat, FlattenedStandardize) and flat.output_shape == (6,)
    assert flat.training is not trained
    tensor_Y, _ = given(field)
    flat_Y, _ = flat(field.flatten(1))
    torch.testing.assert_close(flat_Y, tensor_Y.flatten(1), rtol=0, atol=1e-15)
    values, variances = torch.randn(4, 2, 6, dtype=DTYPE), torch.rand(4, 2, 6, dtype=DTYPE)
    expected = given.untransform(
        values.unflatten(-1, OUTPUT_SHAPE), variances.unflatten(-1, OUTPUT_SHAPE)
    )
    untransformed = flat.untransform(values, variances)
    for result, reference in zip(untransformed, expected, strict=True):
        torch.testing.assert_close(result, reference.flatten(-2), rtol=0, atol=1e-15)


def test_standardize_of_the_flattened_outputs_is_kept_and_other_transforms_are_refused():
    standardize = Standardize(6)
    assert flat_outcome_transform(standardize, OUTPUT_SHAPE) is standardize
    refused = [
        (FlattenedStandardize(torch.Size([3, 2])), r"made for outputs of shape \(3, 2\)"),
        (FlattenedStandardize(OUTPUT_SHAPE, batch_shape=torch.Size([2])), "batch_shape"),
        (Standardize(3), r"FlattenedStandardize\(\(2, 3\)\).*Standardize\(m=6\).*got Standardize"),
        (Log(), "got Log"),
    ]
    for transform, message in refused:
        with pytest.raises(ValueError, match=message):
            flat_outcome_transform(transform, OUTPUT_SHAPE)
    X, field = _data()
    with pytest.raises(ValueError, match="got Log"):
        DeepEnsemble(X, field.abs() + 1, outcome_transform=Log())


def test_the_scaling_check_sees_flattened_standardized_outputs_as_one_column():
    Y, Yvar = torch.randn(5, 6), torch.rand(5, 6)
    one_column = scaling_check_targets(Y, Yvar, FlattenedStandardize(torch.Size([6])))
    assert one_column["train_Y"].shape == one_column["train_Yvar"].shape == (30, 1)
    assert scaling_check_targets(Y, None, Standardize(6)) == {"train_Y": Y, "train_Yvar": None}


@pytest.mark.parametrize(
    "options",
    [
        pytest.param({}, id="default"),
        pytest.param(
            {"outcome_transform": FlattenedStandardize(OUTPUT_SHAPE)}, id="flattened-standardize"
        ),
        pytest.param(
            {"outcome_transform": None},
            id="none",
            # Raw outcomes: BoTorch's scaling check warns, for both models.
            marks=pytest.mark.filterwarnings(
                "ignore::botorch.exceptions.warnings.InputDataWarning"
            ),
        ),
    ],
)
def test_the_model_of_a_field_is_the_model_of_its_flattened_outputs(options):
    tensor, flat = _pair(**options)
    assert tensor.output_shape == OUTPUT_SHAPE and flat.output_shape is None
    assert tensor.num_outputs == 6
    X = _points(3, 2)
    for observation_noise in (False, True):
        posterior = tensor.posterior(X, observation_noise=observation_noise)
        reference = flat.posterior(X, observation_noise=observation_noise)
        assert isinstance(posterior, TensorOutputPosterior)
        assert posterior.mean.shape == (3, 2, 2, 3)
        torch.testing.assert_close(posterior.mean, reference.mean.unflatten(-1, OUTPUT_SHAPE))
        torch.testing.assert_close(
            posterior.variance, reference.variance.unflatten(-1, OUTPUT_SHAPE)
        )


def test_known_noise_and_noise_tensors_have_the_outputs_shape():
    _, field = _data()
    train_Yvar = torch.full_like(field, 0.01)
    tensor, flat = _pair(train_Yvar=train_Yvar)
    X = _points(3, 2)
    noise = torch.rand(3, 2, 2, 3, generator=torch.Generator().manual_seed(2), dtype=DTYPE)
    posterior = tensor.posterior(X, observation_noise=noise)
    reference = flat.posterior(X, observation_noise=noise.flatten(-2))
    torch.testing.assert_close(posterior.variance, reference.variance.unflatten(-1, OUTPUT_SHAPE))
    with pytest.raises(ValueError, match=r"observation_noise must end in the outputs' shape"):
        tensor.posterior(X, observation_noise=noise.flatten(-2))


def test_conditioning_takes_observations_in_the_outputs_shape():
    tensor, flat = _pair()
    X_new = _points(2)
    Y_new = torch.randn(2, 2, 3, generator=torch.Generator().manual_seed(3), dtype=DTYPE)
    conditioned = tensor.condition_on_observations(X_new, Y_new)
    reference = flat.condition_on_observations(X_new, Y_new.flatten(-2))
    X = _points(4, 1)
    torch.testing.assert_close(
        conditioned.posterior(X).mean, reference.posterior(X).mean.unflatten(-1, OUTPUT_SHAPE)
    )
    with pytest.raises(ValueError, match=r"Y must end in the outputs' shape \(2, 3\)"):
        tensor.condition_on_observations(X_new, Y_new.flatten(-2))


def test_fantasies_are_drawn_and_served_in_the_outputs_shape():
    tensor, _ = _pair()
    fantasies = tensor.fantasize(_points(2), IIDNormalSampler(torch.Size([3]), seed=0))
    posterior = fantasies.posterior(_points(4, 1, 1))
    assert isinstance(posterior, TensorOutputPosterior)
    assert posterior.mean.shape == (4, 3, 1, 2, 3)


def test_output_selections_are_refused_with_the_remedy():
    tensor, _ = _pair()
    with pytest.raises(UnsupportedError, match=r"output_indices selects .*mean\[\.\.\., i, j\]"):
        tensor.posterior(_points(1, 2), output_indices=[0])
    with pytest.raises(UnsupportedError, match="subset_output selects among the flattened"):
        tensor.subset_output([0, 1])


# Raised by torch inside the HigherOrderGP's sparse interpolation.
@pytest.mark.filterwarnings("ignore:Sparse invariant checks:UserWarning")
def test_posteriors_are_shaped_as_the_higher_order_gps():
    X, field = _data()
    hogp = HigherOrderGP(X, field, outcome_transform=FlattenedStandardize(OUTPUT_SHAPE)).eval()
    tensor, _ = _pair(outcome_transform=FlattenedStandardize(OUTPUT_SHAPE))
    sampler = IIDNormalSampler(torch.Size([5]), seed=0)
    for points in (_points(1, 2), _points(3, 4, 2)):
        expected, posterior = hogp.posterior(points), tensor.posterior(points)
        assert posterior.mean.shape == expected.mean.shape
        assert posterior.variance.shape == expected.variance.shape
        assert sampler(posterior).shape == sampler(expected).shape


def test_a_checkpoint_loads_into_a_model_of_the_same_field():
    tensor, _ = _pair(outcome_transform=FlattenedStandardize(OUTPUT_SHAPE))
    X, field = _data()
    fresh = DeepEnsemble(
        X,
        field,
        input_transform=Normalize(2),
        outcome_transform=FlattenedStandardize(OUTPUT_SHAPE),
        **FAST,
    )
    fresh.load_state_dict(tensor.state_dict())
    points = _points(3, 1)
    torch.testing.assert_close(
        fresh.posterior(points).mean, tensor.posterior(points).mean, rtol=0, atol=0
    )


def test_the_uncertainty_decomposition_has_the_outputs_shape():
    tensor, flat = _pair()
    points = _points(3, 1)
    decomposition, reference = (model.uncertainty_decomposition(points) for model in (tensor, flat))
    for name in ("mean", "aleatoric_variance", "epistemic_variance"):
        torch.testing.assert_close(
            getattr(decomposition, name), getattr(reference, name).unflatten(-1, OUTPUT_SHAPE)
        )


def test_a_posterior_transform_acts_on_the_flattened_outputs():
    tensor, flat = _pair()
    weights = torch.linspace(-1.0, 1.0, 6, dtype=DTYPE)
    transform = ScalarizedPosteriorTransform(weights)
    points = _points(3, 2)
    scalarised = tensor.posterior(points, posterior_transform=transform)
    reference = flat.posterior(points, posterior_transform=transform)
    assert scalarised.mean.shape == (3, 2, 1)
    torch.testing.assert_close(scalarised.mean, reference.mean)


def test_the_posteriors_gaussian_is_over_the_flattened_outputs():
    tensor, flat = _pair()
    points = _points(3, 2)
    torch.testing.assert_close(tensor.posterior(points).mvn.mean, flat.posterior(points).mvn.mean)
