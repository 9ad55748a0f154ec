"""BoTorch's MC acquisition functions on a model whose posterior is a function ensemble."""

import math

import torch
from botorch.acquisition.logei import qLogExpectedImprovement
from botorch.acquisition.monte_carlo import qSimpleRegret, qUpperConfidenceBound
from botorch.acquisition.objective import ScalarizedPosteriorTransform
from botorch.models.model import Model

from botorch_nn_uq.posteriors import FunctionEnsemblePosterior
from botorch_nn_uq.posteriors.transforms import apply_posterior_transform
from tests.testing import seeded_rand, tolerances


class LinearEnsembleModel(Model):
    r"""``s`` linear functions ``f_k(x) = a_k^T x + c_k`` (``m`` outputs) as a
    :class:`FunctionEnsemblePosterior`."""

    def __init__(self, slopes, intercepts, weights=None):
        super().__init__()
        self.slopes = slopes  # s x d x m
        self.intercepts = intercepts  # s x m
        self.weights = weights

    @property
    def num_outputs(self):
        return self.slopes.shape[-1]

    @property
    def batch_shape(self):
        return torch.Size()

    def member_values(self, X):
        r"""``batch_shape x s x q x m`` member values at ``batch_shape x q x d`` inputs."""
        return X.unsqueeze(-3) @ self.slopes + self.intercepts.unsqueeze(-2)

    def posterior(self, X, output_indices=None, observation_noise=False, posterior_transform=None):
        posterior = FunctionEnsemblePosterior(self.member_values(X), self.weights)
        if output_indices is not None:
            posterior = posterior.subset_outputs(output_indices)
        if posterior_transform is not None:
            posterior = apply_posterior_transform(posterior, posterior_transform, X=X)
        return posterior


def _model(tkwargs, num_members=4, d=2, m=1, weights=None, seed=0):
    generator = torch.Generator().manual_seed(seed)
    slopes = torch.randn(num_members, d, m, generator=generator, dtype=tkwargs["dtype"])
    intercepts = torch.randn(num_members, m, generator=generator, dtype=tkwargs["dtype"])
    return LinearEnsembleModel(slopes.to(**tkwargs), intercepts.to(**tkwargs), weights)


def _inputs(shape, tkwargs, seed=1):
    return seeded_rand(*shape, seed=seed, **tkwargs)


def test_qsimple_regret_is_the_member_average_of_the_max_over_q(tkwargs):
    model = _model(tkwargs)
    X = _inputs((5, 3, 2), tkwargs)
    acquisition = qSimpleRegret(model)
    value = acquisition(X)
    values = model.member_values(X).squeeze(-1)  # b x s x q
    expected = values.max(dim=-1).values.mean(dim=-1)
    assert value.shape == torch.Size([5])
    torch.testing.assert_close(value, expected, **tolerances(tkwargs["dtype"]))


def test_qucb_for_one_point_matches_the_hand_computed_value(tkwargs):
    beta = 2.0
    model = _model(tkwargs, seed=2)
    X = _inputs((6, 1, 2), tkwargs, seed=3)
    value = qUpperConfidenceBound(model, beta=beta)(X)
    values = model.member_values(X).squeeze(-1).squeeze(-1)  # b x s
    mean = values.mean(-1)
    expected = mean + math.sqrt(beta * math.pi / 2) * (values - mean.unsqueeze(-1)).abs().mean(-1)
    torch.testing.assert_close(value, expected, **tolerances(tkwargs["dtype"]))


def test_qucb_for_several_points_matches_the_hand_computed_value(tkwargs):
    beta = 0.5
    model = _model(tkwargs, seed=4)
    X = _inputs((3, 2, 2), tkwargs, seed=5)
    value = qUpperConfidenceBound(model, beta=beta)(X)
    values = model.member_values(X).squeeze(-1)  # b x s x q
    mean = values.mean(-2, keepdim=True)
    per_member = mean + math.sqrt(beta * math.pi / 2) * (values - mean).abs()
    expected = per_member.max(dim=-1).values.mean(dim=-1)
    torch.testing.assert_close(value, expected, **tolerances(tkwargs["dtype"]))


def test_qlog_expected_improvement_matches_the_ensemble_expectation(tkwargs):
    model = _model(tkwargs, seed=6)
    X = _inputs((4, 2, 2), tkwargs, seed=7)
    values = model.member_values(X).squeeze(-1)  # b x s x q
    best_f = values.max(dim=-1).values.median().item()
    value = qLogExpectedImprovement(model, best_f=best_f)(X)
    improvement = (values.max(dim=-1).values - best_f).clamp_min(0.0)  # b x s
    expected = improvement.mean(dim=-1).log()
    # qLogEI smooths max and ReLU with temperatures 1e-2 and 1e-6.
    torch.testing.assert_close(value, expected, rtol=0.0, atol=1e-3)
    assert torch.isfinite(value).all()


def test_acquisition_value_does_not_depend_on_the_other_batch_elements(tkwargs):
    # Non-uniform weights and a sample count that is not a multiple of the ensemble size:
    # the member indices are still shared, so each batch element is evaluated alike.
    model = _model(
        tkwargs, num_members=5, weights=torch.tensor([3.0, 1.0, 1.0, 2.0, 1.0], **tkwargs), seed=8
    )
    X = _inputs((6, 2, 2), tkwargs, seed=9)
    acquisition = qUpperConfidenceBound(model, beta=1.0)
    batched = acquisition(X)
    one_by_one = torch.cat([acquisition(X[i : i + 1]) for i in range(6)])
    torch.testing.assert_close(batched, one_by_one, **tolerances(tkwargs["dtype"]))
    # And repeated calls give the same value (fixed base samples).
    torch.testing.assert_close(acquisition(X), batched, rtol=0.0, atol=0.0)


def test_acquisition_with_a_scalarized_posterior_transform(tkwargs):
    weights = torch.tensor([1.0, -2.0], **tkwargs)
    model = _model(tkwargs, m=2, seed=10)
    X = _inputs((3, 2, 2), tkwargs, seed=11)
    transform = ScalarizedPosteriorTransform(weights=weights, offset=0.5)
    value = qSimpleRegret(model, posterior_transform=transform)(X)
    scalar_values = 0.5 + model.member_values(X) @ weights.unsqueeze(-1)  # b x s x q x 1
    expected = scalar_values.squeeze(-1).max(dim=-1).values.mean(dim=-1)
    torch.testing.assert_close(value, expected, **tolerances(tkwargs["dtype"]))


def test_acquisition_gradients_flow_to_the_inputs(tkwargs):
    model = _model(tkwargs, seed=12)
    X = _inputs((2, 1, 2), tkwargs, seed=13).requires_grad_(True)
    qSimpleRegret(model)(X).sum().backward()
    # Linear members: the gradient is the member-average slope.
    expected = model.slopes.squeeze(-1).mean(0).expand(2, 1, 2)
    torch.testing.assert_close(X.grad, expected)
