"""Conformance kit: the behaviour every model of the package must show inside BoTorch.

Every model card of the package's models (:data:`botorch_nn_uq.models.MODEL_CARDS`) joins
the kit as one :class:`ConformanceEntry` (:meth:`ConformanceEntry.from_card`, with the
card's fast settings) in ``MODEL_ENTRIES`` of ``tests/models/test_conformance.py``; every
test of :class:`ConformanceKit` then runs on it.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
from botorch.acquisition import (
    LogExpectedImprovement,
    UpperConfidenceBound,
    qLogExpectedImprovement,
    qLogNoisyExpectedImprovement,
    qUpperConfidenceBound,
)
from botorch.acquisition.active_learning import qNegIntegratedPosteriorVariance
from botorch.acquisition.knowledge_gradient import qKnowledgeGradient
from botorch.acquisition.max_value_entropy_search import (
    qLowerBoundMaxValueEntropy,
    qMaxValueEntropy,
)
from botorch.acquisition.objective import GenericMCObjective, ScalarizedPosteriorTransform
from botorch.exceptions.errors import UnsupportedError
from botorch.exceptions.warnings import InputDataWarning
from botorch.fit import fit_gpytorch_mll
from botorch.models import HigherOrderGP, ModelList, SingleTaskGP
from botorch.models.higher_order_gp import FlattenedStandardize
from botorch.models.transforms import Normalize, Standardize
from botorch.models.transforms.input import Warp
from botorch.optim import optimize_acqf
from botorch.sampling import SobolQMCNormalSampler
from botorch.sampling.get_sampler import get_sampler
from botorch.utils.sampling import draw_sobol_samples
from gpytorch.mlls import ExactMarginalLogLikelihood
from torch import Tensor
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.utils._python_dispatch import TorchDispatchMode

from botorch_nn_uq.models import ModelCard
from botorch_nn_uq.posteriors import GaussianMarginalPosterior, TensorOutputPosterior
from botorch_nn_uq.training import NonFiniteLossError, resolve_seed
from tests.testing import allow_single_member_warning, tolerances

BOUNDS_LOW, BOUNDS_HIGH = -2.0, 3.0
DIM = 2
#: The epochs of the fits that check how a fit draws its random choices, not its result.
SHORT_FIT_EPOCHS = 20
CPU = torch.device("cpu")


@dataclass(frozen=True)
class ConformanceEntry:
    r"""One model under test.

    Args:
        name: Test id.
        model_class: A ``NeuralSurrogateModel`` subclass.
        hyperparameters: Fast settings for tests.
        has_observation_noise_model: Whether ``observation_noise=True`` adds noise.
        extra_kwargs: Further constructor arguments, given the ``2 x d`` bounds.
    """

    name: str
    model_class: type
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    has_observation_noise_model: bool = True
    extra_kwargs: Callable[[Tensor], dict[str, Any]] = lambda bounds: {}

    @classmethod
    def from_card(cls, card: ModelCard, name: str | None = None, **overrides: Any):
        r"""The entry of a model card: its class and fast settings.

        Args:
            card: The model's card.
            name: Test id (default: the card's name), for a variant of the card.
            **overrides: Hyperparameters that replace the card's fast ones.
        """
        return cls(
            name=card.name if name is None else name,
            model_class=card.model_class,
            hyperparameters={**card.fast.hyperparameters, **overrides},
            has_observation_noise_model=card.fast.observation_noise_model,
            extra_kwargs=card.box_arguments,
        )

    def build(self, train_X: Tensor, train_Y: Tensor, bounds: Tensor | None = None, **kwargs: Any):
        r"""The entry's model, with ``Normalize`` to ``bounds`` unless an input transform
        is given (BoTorch warns about inputs outside the unit cube otherwise)."""
        bounds = bounds_like(train_X) if bounds is None else bounds
        kwargs.setdefault("input_transform", Normalize(DIM, bounds=bounds))
        return self.model_class(
            train_X, train_Y, **self.extra_kwargs(bounds), **self.hyperparameters, **kwargs
        )

    def fitted(self, train_X: Tensor, train_Y: Tensor, seed: int = 0, **kwargs: Any):
        return self.build(train_X, train_Y, **kwargs).fit(seed=seed)


def bounds_like(X: Tensor) -> Tensor:
    return torch.tensor([[BOUNDS_LOW] * DIM, [BOUNDS_HIGH] * DIM], dtype=X.dtype, device=X.device)


def toy_function(X: Tensor) -> Tensor:
    r"""Two outputs of very different scales, to make outcome transforms matter."""
    first = 1000.0 + 100.0 * torch.sin(2.0 * X[..., 0]) * torch.cos(X[..., 1])
    second = -5.0 + 2.0 * (X**2).sum(-1)
    return torch.stack([first, second], dim=-1)


def toy_data(
    n: int = 24,
    dtype: torch.dtype = torch.float64,
    num_outputs: int = 1,
    device: torch.device = CPU,
):
    r"""``n`` training points in the box and their toy outputs, drawn on the CPU and
    moved to ``device`` (the same data on every device)."""
    generator = torch.Generator().manual_seed(123)
    X = BOUNDS_LOW + (BOUNDS_HIGH - BOUNDS_LOW) * torch.rand(
        n, DIM, generator=generator, dtype=dtype
    )
    X = X.to(device)
    return X, toy_function(X)[..., :num_outputs]


def test_points(
    *batch: int, dtype: torch.dtype = torch.float64, device: torch.device = CPU
) -> Tensor:
    r"""Points of shape ``batch x d`` in the box, drawn on the CPU and moved to
    ``device``."""
    generator = torch.Generator().manual_seed(7)
    points = BOUNDS_LOW + (BOUNDS_HIGH - BOUNDS_LOW) * torch.rand(
        *batch, DIM, generator=generator, dtype=dtype
    )
    return points.to(device)


_STANDARD_MODELS: dict[tuple, Any] = {}


def standard_model(entry: ConformanceEntry, dtype=torch.float64, num_outputs=1, seed=0, device=CPU):
    r"""The entry's model fitted on the toy data with Normalize + Standardize, on
    ``device``. Fits are deterministic, so one fit per setting is shared by the tests
    (which only read it)."""
    key = (entry.name, dtype, num_outputs, seed, device)
    if key not in _STANDARD_MODELS:
        _STANDARD_MODELS[key] = _fit_standard_model(entry, dtype, num_outputs, seed, device)
    return _STANDARD_MODELS[key]


def _fit_standard_model(entry: ConformanceEntry, dtype, num_outputs, seed, device):
    train_X, train_Y = toy_data(dtype=dtype, num_outputs=num_outputs, device=device)
    model = entry.fitted(
        train_X,
        train_Y,
        seed=seed,
        input_transform=Normalize(DIM, bounds=bounds_like(train_X)),
        outcome_transform=Standardize(num_outputs),
    )
    return model, train_X, train_Y


@contextmanager
def training_interrupted_after(steps: int, error: BaseException) -> Iterator[None]:
    r"""Raise ``error`` from the ``steps``-th optimizer step taken inside the block (a
    user's Ctrl-C, or a failure deep inside training)."""
    taken = 0

    def hook(optimizer, args, kwargs) -> None:
        nonlocal taken
        taken += 1
        if taken == steps:
            raise error

    handle = register_optimizer_step_post_hook(hook)
    try:
        yield
    finally:
        handle.remove()


class GlobalDrawRecorder(TorchDispatchMode):
    r"""Inside the block, records every torch operation that draws from torch's global
    CPU generator, or from the global generator of the current CUDA device where there is
    one (the operation's name in ``draws``), also where the generator's state is saved
    and restored around it (as ``seeded`` and ``torch.random.fork_rng`` do)."""

    def __init__(self) -> None:
        super().__init__()
        self.draws: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        before = global_rng_states()
        result = func(*args, **(kwargs or {}))
        after = global_rng_states()
        if not all(torch.equal(old, new) for old, new in zip(before, after, strict=True)):
            self.draws.append(str(func))
        return result


def global_rng_states() -> list[Tensor]:
    r"""The states of torch's global CPU generator and, where CUDA is available, of the
    current CUDA device's."""
    states = [torch.random.get_rng_state()]
    if torch.cuda.is_available():
        states.append(torch.cuda.get_rng_state())
    return states


def assert_same_rng_states(before: list[Tensor]) -> None:
    r"""Assert that the global generators are in the states ``before``."""
    assert all(torch.equal(old, new) for old, new in zip(before, global_rng_states(), strict=True))


def fitted_state(model) -> dict[str, Any]:
    r"""Everything a fit sets, with the predictions at fixed points."""
    X = test_points(5, 1).to(model.train_X)
    fitted = model.is_fitted
    posterior = model.posterior(X) if fitted else None
    return {
        "is_fitted": fitted,
        "fit_seed": model.fit_seed,
        "hyperparameters": model.hyperparameters,
        "training_result": model.training_result,
        "state_dict": {name: value.clone() for name, value in model.state_dict().items()},
        "mean": None if posterior is None else posterior.mean,
        "variance": None if posterior is None else posterior.variance,
    }


def assert_same_fitted_state(before: dict[str, Any], after: dict[str, Any]) -> None:
    assert before.keys() == after.keys()
    for key in ("is_fitted", "fit_seed", "hyperparameters", "training_result"):
        assert before[key] == after[key], key
    assert before["state_dict"].keys() == after["state_dict"].keys()
    for name, value in before["state_dict"].items():
        assert torch.equal(value, after["state_dict"][name]), name
    for key in ("mean", "variance"):
        if before[key] is None:
            assert after[key] is None
        else:
            assert torch.equal(before[key], after[key]), key


# The kit's few training points may leave a searched ensemble with a single member.
@allow_single_member_warning
class ConformanceKit:
    r"""Tests every model must pass. Needs a fixture ``entry`` (a ConformanceEntry).

    Every test runs on each available device (the ``device`` fixture: the CPU, and
    CUDA where there is one), with data drawn on the CPU and moved there.
    """

    @pytest.mark.parametrize("batch", [(3,), (4, 3), (2, 4, 3), (2, 1, 4, 1)])
    def test_posterior_shapes(
        self, entry: ConformanceEntry, device: torch.device, batch: tuple[int, ...]
    ) -> None:
        model, *_ = standard_model(entry, num_outputs=2, device=device)
        X = test_points(*batch, device=device)
        posterior = model.posterior(X)
        assert posterior.mean.shape == X.shape[:-1] + (2,)
        assert posterior.variance.shape == X.shape[:-1] + (2,)
        assert (posterior.variance >= 0).all()
        assert posterior.rsample(torch.Size([5])).shape == (5,) + X.shape[:-1] + (2,)
        sampler = get_sampler(posterior, torch.Size([6]), seed=0)
        assert sampler(posterior).shape == (6,) + X.shape[:-1] + (2,)
        assert model.num_outputs == 2
        assert model.batch_shape == torch.Size()

    @pytest.mark.parametrize("batch", [(0,), (0, 1), (3, 0), (2, 0, 4)])
    def test_an_empty_batch_gives_an_empty_posterior(
        self, entry, device: torch.device, batch
    ) -> None:
        model, *_ = standard_model(entry, num_outputs=2, device=device)
        X = test_points(*batch, device=device)
        for observation_noise in (False, True):
            posterior = model.posterior(X, observation_noise=observation_noise)
            assert posterior.mean.shape == posterior.variance.shape == X.shape[:-1] + (2,)
            assert posterior.rsample(torch.Size([3])).shape == (3,) + X.shape[:-1] + (2,)
            samples = get_sampler(posterior, torch.Size([4]), seed=0)(posterior)
            assert samples.shape == (4,) + X.shape[:-1] + (2,)

    def test_dtypes(
        self, entry: ConformanceEntry, device: torch.device, dtype: torch.dtype
    ) -> None:
        model, *_ = standard_model(entry, dtype=dtype, device=device)
        posterior = model.posterior(test_points(5, 1, dtype=dtype, device=device))
        assert posterior.mean.dtype == dtype
        assert posterior.variance.dtype == dtype
        assert all(p.dtype == dtype for p in model.parameters())
        if dtype == torch.float32:
            # Down-casting float64 inputs is refused (a float32 GP fails on them too).
            with pytest.raises(ValueError, match="dtype"):
                model.posterior(test_points(5, 1, dtype=torch.float64, device=device))
        else:
            # Float32 inputs of a float64 model are promoted, as a float64 GP does.
            single = test_points(5, 1, dtype=torch.float32, device=device)
            promoted = model.posterior(single)
            expected = model.posterior(single.to(dtype))
            assert promoted.mean.dtype == dtype
            torch.testing.assert_close(promoted.mean, expected.mean)
            torch.testing.assert_close(promoted.variance, expected.variance)

    def test_input_transform_equals_manual_normalisation(
        self, entry: ConformanceEntry, device: torch.device
    ) -> None:
        train_X, train_Y = toy_data(device=device)
        bounds = bounds_like(train_X)
        with_transform = entry.fitted(
            train_X, train_Y, input_transform=Normalize(DIM, bounds=bounds)
        )
        unit_X = (train_X - bounds[0]) / (bounds[1] - bounds[0])
        unit_bounds = torch.stack([torch.zeros(DIM), torch.ones(DIM)]).to(train_X)
        manual = entry.fitted(unit_X, train_Y, bounds=unit_bounds, input_transform=None)
        X = test_points(6, 2, device=device)
        expected = manual.posterior((X - bounds[0]) / (bounds[1] - bounds[0]))
        actual = with_transform.posterior(X)
        torch.testing.assert_close(actual.mean, expected.mean)
        torch.testing.assert_close(actual.variance, expected.variance)

    def test_outcome_transform_gives_original_units(
        self, entry: ConformanceEntry, device: torch.device
    ) -> None:
        train_X, train_Y = toy_data(num_outputs=2, device=device)
        model = entry.fitted(train_X, train_Y, outcome_transform=Standardize(2))
        # Standardised by the transform's own arithmetic, so that both fits train on
        # bit-identical targets (a network's training amplifies rounding differences).
        standardized, _ = Standardize(2)(train_Y)
        mean, std = train_Y.mean(0), train_Y.std(0)
        manual = entry.fitted(train_X, standardized, outcome_transform=None)
        X = test_points(5, 3, device=device)
        posterior, expected = model.posterior(X), manual.posterior(X)
        torch.testing.assert_close(posterior.mean, expected.mean * std + mean)
        torch.testing.assert_close(posterior.variance, expected.variance * std**2)
        # In original units the fit tracks the data (outputs of scale 1000 and ~10): a
        # units error would be ~20 data standard deviations off. Searched ensembles hold
        # out a fifth of the 24 points, hence a bound of one standard deviation.
        fitted = model.posterior(train_X.unsqueeze(-2)).mean.squeeze(-2)
        relative_error = (fitted - train_Y).abs().mean(0) / train_Y.std(0)
        assert (relative_error < 1.0).all(), relative_error

    def test_output_indices(self, entry: ConformanceEntry, device: torch.device) -> None:
        model, *_ = standard_model(entry, num_outputs=2, device=device)
        X = test_points(4, 3, device=device)
        full = model.posterior(X)
        for indices in ([1], [0], [1, 0]):
            subset = model.posterior(X, output_indices=indices)
            torch.testing.assert_close(subset.mean, full.mean[..., indices])
            torch.testing.assert_close(subset.variance, full.variance[..., indices])
        with pytest.raises(ValueError, match="output_indices"):
            model.posterior(X, output_indices=[2])

    @pytest.mark.parametrize("indices", [[1], [0], [1, 0], [-2]])
    def test_subset_output(
        self, entry: ConformanceEntry, device: torch.device, indices: list[int]
    ) -> None:
        model, *_ = standard_model(entry, num_outputs=2, device=device)
        X = test_points(4, 3, device=device)
        before = model.posterior(X)
        subset = model.subset_output(indices)
        assert type(subset) is type(model)
        assert subset.num_outputs == len(indices) and model.num_outputs == 2
        served = [i % 2 for i in indices]
        torch.testing.assert_close(
            subset.outcome_transform.means, model.outcome_transform.means[..., served]
        )
        noise = torch.tensor([0.1, 0.3], dtype=X.dtype, device=device).expand(*X.shape[:-1], 2)
        weights = torch.tensor([0.4, -0.6], dtype=X.dtype, device=device)[: len(indices)]
        for observation_noise, subset_noise in [
            (False, False),
            (True, True),
            (noise, noise[..., served]),
        ]:
            expected = model.posterior(
                X, output_indices=indices, observation_noise=observation_noise
            )
            actual = subset.posterior(X, observation_noise=subset_noise)
            assert type(actual) is type(expected)
            torch.testing.assert_close(actual.mean, expected.mean, rtol=0, atol=0)
            torch.testing.assert_close(actual.variance, expected.variance, rtol=0, atol=0)
            samples = get_sampler(actual, torch.Size([8]), seed=3)(actual)
            torch.testing.assert_close(
                samples, get_sampler(expected, torch.Size([8]), seed=3)(expected), rtol=0, atol=0
            )
            full = model.posterior(X, observation_noise=observation_noise)
            torch.testing.assert_close(actual.mean, full.mean[..., served])
            torch.testing.assert_close(actual.variance, full.variance[..., served])
            transform = ScalarizedPosteriorTransform(weights=weights)
            scalarized = subset.posterior(
                X, observation_noise=subset_noise, posterior_transform=transform
            )
            expected_scalarized = model.posterior(
                X,
                output_indices=indices,
                observation_noise=observation_noise,
                posterior_transform=transform,
            )
            torch.testing.assert_close(scalarized.mean, expected_scalarized.mean, rtol=0, atol=0)
        # A subset of a subset selects from the original outputs.
        torch.testing.assert_close(
            subset.subset_output([0]).posterior(X).mean,
            model.posterior(X, output_indices=indices[:1]).mean,
            rtol=0,
            atol=0,
        )
        after = model.posterior(X)
        torch.testing.assert_close(after.mean, before.mean, rtol=0, atol=0)
        torch.testing.assert_close(after.variance, before.variance, rtol=0, atol=0)

    @pytest.mark.parametrize("indices", [[2], [-3], [], [0, 0], [0.0], "0", 1])
    def test_subset_output_rejects_invalid_indices(
        self, entry, device: torch.device, indices
    ) -> None:
        model, *_ = standard_model(entry, num_outputs=2, device=device)
        with pytest.raises(ValueError, match="idcs|distinct output indices"):
            model.subset_output(indices)

    def test_scalarized_posterior_transform(
        self, entry: ConformanceEntry, device: torch.device
    ) -> None:
        model, *_ = standard_model(entry, num_outputs=2, device=device)
        X = test_points(4, 3, device=device)
        weights = torch.tensor([0.3, -0.7], dtype=X.dtype, device=device)
        transform = ScalarizedPosteriorTransform(weights=weights, offset=2.0)
        full = model.posterior(X)
        scalarized = model.posterior(X, posterior_transform=transform)
        assert scalarized.mean.shape == X.shape[:-1] + (1,)
        torch.testing.assert_close(scalarized.mean, 2.0 + full.mean @ weights.unsqueeze(-1))
        if isinstance(full, GaussianMarginalPosterior):
            # Independent outputs: the variance of the weighted sum is the weighted sum of
            # variances, and samples follow the scalarised Gaussian.
            torch.testing.assert_close(scalarized.variance, full.variance @ weights.pow(2)[:, None])
            scalar_samples = get_sampler(scalarized, torch.Size([4096]), seed=3)(scalarized)
            standard_error = (scalarized.variance / 4096).sqrt()
            assert ((scalar_samples.mean(0) - scalarized.mean) / standard_error).abs().max() < 5
        else:
            # Functions / members are scalarised one by one: samples map exactly.
            samples = get_sampler(full, torch.Size([8]), seed=3)(full)
            scalar_samples = get_sampler(scalarized, torch.Size([8]), seed=3)(scalarized)
            torch.testing.assert_close(scalar_samples, 2.0 + samples @ weights.unsqueeze(-1))

    def test_observation_noise(self, entry: ConformanceEntry, device: torch.device) -> None:
        model, train_X, train_Y = standard_model(entry, device=device)
        X = test_points(5, 2, device=device)
        latent = model.posterior(X)
        noisy = model.posterior(X, observation_noise=True)
        torch.testing.assert_close(noisy.mean, latent.mean)
        if entry.has_observation_noise_model:
            assert (noisy.variance > latent.variance).all()
        noise = torch.full(X.shape[:-1] + (1,), 0.25, dtype=X.dtype, device=device)
        explicit = model.posterior(X, observation_noise=noise)
        scale = model.outcome_transform.stdvs.squeeze() ** 2
        torch.testing.assert_close(explicit.variance, latent.variance + 0.25 * scale)
        with pytest.raises(ValueError, match="observation_noise"):
            model.posterior(X, observation_noise=-noise)
        with pytest.raises(ValueError, match="observation_noise"):
            model.posterior(X, observation_noise=torch.ones(7, 5, 1, dtype=X.dtype, device=device))

    def test_rsample_determinism(self, entry: ConformanceEntry, device: torch.device) -> None:
        model, *_ = standard_model(entry, device=device)
        for observation_noise in (False, True):
            posterior = model.posterior(
                test_points(4, 3, device=device), observation_noise=observation_noise
            )
            first = get_sampler(posterior, torch.Size([16]), seed=11)(posterior)
            second = get_sampler(posterior, torch.Size([16]), seed=11)(posterior)
            other = get_sampler(posterior, torch.Size([16]), seed=12)(posterior)
            assert first.shape == (16, 4, 3, 1)
            torch.testing.assert_close(first, second)
            # (A one-member ensemble, which greedy selection may return, has one sample.)
            if (posterior.variance > 0).any():
                assert not torch.equal(first, other)
            # A point's samples do not depend on the other points in its batch.
            alone = get_sampler(posterior, torch.Size([16]), seed=11)(
                model.posterior(
                    test_points(4, 3, device=device)[:1], observation_noise=observation_noise
                )
            )
            torch.testing.assert_close(alone[:, 0], first[:, 0])

    def test_gradients_flow_to_inputs(self, entry: ConformanceEntry, device: torch.device) -> None:
        model, *_ = standard_model(entry, device=device)
        X = test_points(4, 1, device=device).requires_grad_(True)
        posterior = model.posterior(X)
        (posterior.mean.sum() + posterior.variance.sum()).backward()
        assert X.grad is not None and X.grad.abs().sum() > 0

    @pytest.mark.parametrize("acquisition_name", ["LogEI", "UCB", "qLogEI", "qLogNEI", "qUCB"])
    def test_optimize_acqf_end_to_end(
        self, entry: ConformanceEntry, device: torch.device, acquisition_name: str
    ) -> None:
        model, train_X, train_Y = standard_model(entry, device=device)
        best_f = train_Y.max()
        acquisitions = {
            "LogEI": lambda: LogExpectedImprovement(model, best_f=best_f),
            "UCB": lambda: UpperConfidenceBound(model, beta=4.0),
            "qLogEI": lambda: qLogExpectedImprovement(model, best_f=best_f),
            "qLogNEI": lambda: qLogNoisyExpectedImprovement(model, X_baseline=train_X),
            "qUCB": lambda: qUpperConfidenceBound(model, beta=4.0),
        }
        acquisition = acquisitions[acquisition_name]()
        q = 1 if acquisition_name in ("LogEI", "UCB") else 2
        bounds = bounds_like(train_X)
        candidate, value = optimize_acqf(
            acquisition, bounds, q=q, num_restarts=4, raw_samples=128, options={"seed": 0}
        )
        assert candidate.shape == (q, DIM)
        assert ((candidate >= bounds[0]) & (candidate <= bounds[1])).all()
        with torch.no_grad():
            # The raw samples optimize_acqf draws for its initialisation with this seed.
            raw_samples = draw_sobol_samples(bounds, n=128, q=q, seed=0)
            best_raw_sample = acquisition(raw_samples).max()
            value_at_candidate = acquisition(candidate.unsqueeze(0)).squeeze()
        torch.testing.assert_close(value_at_candidate, value.squeeze())
        assert value_at_candidate >= best_raw_sample - 1e-6 * best_raw_sample.abs()

    @pytest.mark.parametrize("acquisition_class", [qMaxValueEntropy, qLowerBoundMaxValueEntropy])
    def test_max_value_entropy(
        self, entry: ConformanceEntry, device: torch.device, acquisition_class: type
    ) -> None:
        model, train_X, _ = standard_model(entry, device=device)
        bounds = bounds_like(train_X)
        candidate_set = draw_sobol_samples(bounds, n=64, q=1, seed=0).squeeze(-2)
        torch.manual_seed(0)
        acquisition = acquisition_class(model, candidate_set, num_mv_samples=8)
        values = acquisition(test_points(6, 1, device=device))
        assert values.shape == (6,) and values.isfinite().all()
        candidate, value = optimize_acqf(
            acquisition, bounds, q=1, num_restarts=2, raw_samples=16, options={"maxiter": 20}
        )
        assert candidate.shape == (1, DIM) and value.isfinite()
        assert ((candidate >= bounds[0]) & (candidate <= bounds[1])).all()

    def test_model_list_with_single_task_gp(
        self, entry: ConformanceEntry, device: torch.device
    ) -> None:
        model, train_X, train_Y = standard_model(entry, device=device)
        gp = SingleTaskGP(
            train_X,
            train_Y,
            input_transform=Normalize(DIM, bounds=bounds_like(train_X)),
            outcome_transform=Standardize(1),
        )
        model_list = ModelList(model, gp)
        X = test_points(5, 2, device=device)
        posterior = model_list.posterior(X)
        assert posterior.mean.shape == (5, 2, 2)
        torch.testing.assert_close(posterior.mean[..., :1], model.posterior(X).mean)
        objective = GenericMCObjective(lambda samples, X=None: samples.sum(-1))
        acquisition = qLogExpectedImprovement(
            model_list, best_f=2 * train_Y.max(), objective=objective
        )
        candidate, _ = optimize_acqf(
            acquisition, bounds_like(train_X), q=2, num_restarts=2, raw_samples=32
        )
        assert candidate.shape == (2, DIM)

    def test_same_seed_same_model(self, entry: ConformanceEntry, device: torch.device) -> None:
        X = test_points(6, 1, device=device)
        torch.manual_seed(1)
        first = standard_model(entry, seed=4, device=device)[0].posterior(X)
        torch.manual_seed(2)
        second = standard_model(entry, seed=4, device=device)[0].posterior(X)
        third = standard_model(entry, seed=5, device=device)[0].posterior(X)
        torch.testing.assert_close(first.mean, second.mean, rtol=0, atol=0)
        torch.testing.assert_close(first.variance, second.variance, rtol=0, atol=0)
        assert not torch.equal(first.mean, third.mean)

    def test_a_seeded_fit_draws_nothing_from_the_global_generator(
        self, entry, device: torch.device
    ) -> None:
        # Short fits: every random choice of a fit is made in its first epochs too.
        train_X, train_Y = toy_data(device=device)
        torch.manual_seed(1)
        states = global_rng_states()
        with GlobalDrawRecorder() as recorder:
            model = entry.build(train_X, train_Y).fit(seed=3, epochs=SHORT_FIT_EPOCHS)
        assert recorder.draws == []
        assert_same_rng_states(states)
        # Nor may the fit read the global state (to seed a generator of its own, say).
        torch.manual_seed(2)
        other = entry.build(train_X, train_Y).fit(seed=3, epochs=SHORT_FIT_EPOCHS)
        X = test_points(4, 1, device=device)
        assert torch.equal(model.posterior(X).mean, other.posterior(X).mean)
        assert torch.equal(model.posterior(X).variance, other.posterior(X).variance)

    def test_an_unseeded_fit_draws_its_seed_from_the_global_generator(
        self, entry, device: torch.device
    ) -> None:
        train_X, train_Y = toy_data(device=device)
        torch.manual_seed(5)
        model = entry.build(train_X, train_Y).fit(epochs=SHORT_FIT_EPOCHS)
        after_fit = torch.rand(3)
        torch.manual_seed(5)
        assert model.fit_seed == resolve_seed(None)
        assert torch.equal(torch.rand(3), after_fit)

    def test_progress_bar(
        self, entry: ConformanceEntry, device: torch.device, capsys: pytest.CaptureFixture
    ) -> None:
        train_X, train_Y = toy_data(device=device)
        entry.build(train_X, train_Y).fit(seed=0, progress=True)
        assert re.search(r"\d+%\|", capsys.readouterr().err)
        entry.build(train_X, train_Y).fit(seed=0, progress=False)
        assert capsys.readouterr().err == ""

    @pytest.mark.parametrize(
        ("make_data", "error", "message"),
        [
            (lambda X, Y: (X[:, 0], Y), ValueError, r"n x d.*X\.unsqueeze\(-1\)"),
            (lambda X, Y: (X, Y[:, 0]), ValueError, r"n x m.*Y\.unsqueeze\(-1\)"),
            (lambda X, Y: (X, Y.expand(3, *Y.shape)), ValueError, "train_Y .*batch dimensions"),
            (lambda X, Y: (X, Y[:-1]), ValueError, "same number of rows"),
            (lambda X, Y: (X[:0], Y[:0]), ValueError, "Empty"),
            (lambda X, Y: (X[:1], Y[:1]), ValueError, r"At least \d+"),
            (lambda X, Y: (X.float(), Y), ValueError, "same dtype"),
            (lambda X, Y: (X, Y.to("meta")), ValueError, "same device"),
            (lambda X, Y: (X.masked_fill(X > 2.5, float("nan")), Y), ValueError, "train_X .*NaN"),
            (lambda X, Y: (X, Y.masked_fill(Y > 1050, float("inf"))), ValueError, "train_Y .*inf"),
            (lambda X, Y: (X.long(), Y), TypeError, "floating-point"),
        ],
    )
    def test_bad_training_data(
        self, entry, device: torch.device, make_data, error, message
    ) -> None:
        train_X, train_Y = make_data(*toy_data(device=device))
        with pytest.raises(error, match=message):
            entry.build(train_X, train_Y)

    def test_batched_training_data_as_a_batched_single_task_gp(
        self, entry: ConformanceEntry, device: torch.device
    ) -> None:
        # The same calls on a batched SingleTaskGP: the model's batch shape and posterior
        # shapes are the GP's; each element is the fit of its data alone. A model that
        # takes no batched data refuses them naming the remedy.
        train_X, train_Y = toy_data(device=device)
        X, Y = torch.stack([train_X.flip(0), train_X]), torch.stack([2 * train_Y, train_Y])
        if entry.model_class.batched_data_limit is not None:
            message = (
                rf"{entry.model_class.__name__} does not take batched.*ModelList.*DeepEnsemble"
            )
            with pytest.raises(ValueError, match=message):
                entry.build(X, Y)
            return
        gp = SingleTaskGP(X, Y, input_transform=Normalize(DIM, bounds=bounds_like(X))).eval()
        # Trained in double precision: single-precision rounding, which differs between
        # batch sizes, grows over the epochs to a few parts in 10^4.
        double = {"training_dtype": None}
        model = entry.fitted(X, Y, **double)
        assert model.batch_shape == gp.batch_shape == (2,)
        for batch in [(3,), (2, 3), (4, 1, 3), (4, 2, 3)]:
            test_X = test_points(*batch, device=device)
            for noise in (False, True):
                posterior = model.posterior(test_X, observation_noise=noise)
                expected = gp.posterior(test_X, observation_noise=noise)
                assert posterior.mean.shape == posterior.variance.shape == expected.mean.shape
        test_X = test_points(3, device=device)
        alone = entry.fitted(train_X, train_Y, **double).posterior(test_X)
        posterior = model.posterior(test_X)
        torch.testing.assert_close(posterior.mean[1], alone.mean, rtol=1e-5, atol=1e-4)
        torch.testing.assert_close(posterior.variance[1], alone.variance, rtol=1e-4, atol=1e-4)

    def test_tensor_valued_outputs_are_the_flattened_outputs_in_their_shape(
        self, entry: ConformanceEntry, device: torch.device
    ) -> None:
        train_X, pair = toy_data(num_outputs=2, device=device)
        # Six outputs: the two toy outputs at three scales.
        train_Y = (pair.unsqueeze(-1) * torch.tensor([1.0, 0.5, 2.0]).to(pair)).flatten(1)
        field = train_Y.unflatten(-1, (2, 3))
        models = {
            "tensor": entry.build(
                train_X, field, outcome_transform=FlattenedStandardize(field.shape[1:])
            ),
            "flat": entry.build(
                train_X, train_Y, outcome_transform=FlattenedStandardize(torch.Size([6]))
            ),
        }
        posteriors = {}
        for name, model in models.items():
            posteriors[name] = model.fit(seed=0).posterior(test_points(4, 2, device=device))
        tensor, flat = posteriors["tensor"], posteriors["flat"]
        assert isinstance(tensor, TensorOutputPosterior)
        assert tensor.mean.shape == tensor.variance.shape == (4, 2, 2, 3)
        torch.testing.assert_close(tensor.mean, flat.mean.unflatten(-1, (2, 3)))
        torch.testing.assert_close(tensor.variance, flat.variance.unflatten(-1, (2, 3)))
        draws = [
            SobolQMCNormalSampler(torch.Size([5]), seed=1)(posterior)
            for posterior in (tensor, flat)
        ]
        torch.testing.assert_close(draws[0], draws[1].unflatten(-1, (2, 3)))
        # Side by side with BoTorch's model of such outputs: the same call, the same shapes.
        with warnings.catch_warnings():
            # Raised by torch inside the HigherOrderGP's sparse interpolation.
            warnings.filterwarnings("ignore", message="Sparse invariant checks")
            hogp = HigherOrderGP(
                train_X,
                field,
                input_transform=Normalize(DIM, bounds=bounds_like(train_X)),
                outcome_transform=FlattenedStandardize(field.shape[1:]),
            ).eval()
            reference = hogp.posterior(test_points(4, 2, device=device))
            reference_draws = SobolQMCNormalSampler(torch.Size([5]), seed=1)(reference)
        assert tensor.mean.shape == reference.mean.shape
        assert tensor.variance.shape == reference.variance.shape
        assert draws[0].shape == reference_draws.shape

    def test_non_finite_loss_raises(self, entry: ConformanceEntry, device: torch.device) -> None:
        train_X, train_Y = toy_data(device=device)
        with (
            pytest.raises(NonFiniteLossError, match="training loss became"),
            pytest.warns(InputDataWarning, match="not standardized"),
        ):
            entry.fitted(train_X, train_Y * 1e200, outcome_transform=None)

    def test_bad_hyperparameters_and_calls(
        self, entry: ConformanceEntry, device: torch.device
    ) -> None:
        train_X, train_Y = toy_data(device=device)
        with pytest.raises(TypeError, match="Unknown hyperparameter"):
            entry.build(train_X, train_Y, not_a_hyperparameter=1)
        with pytest.raises(ValueError, match="epochs"):
            entry.build(train_X, train_Y).fit(seed=0, epochs=0)
        with pytest.raises(ValueError, match="seed"):
            entry.build(train_X, train_Y).fit(seed=-1)
        with pytest.raises(RuntimeError, match="not fitted"):
            entry.build(train_X, train_Y).posterior(test_points(2, 1, device=device))
        model = entry.fitted(train_X, train_Y)
        with pytest.raises(ValueError, match="input dimensions"):
            model.posterior(torch.rand(2, 1, DIM + 1, dtype=train_X.dtype).to(device))
        with pytest.raises(ValueError, match="at least two dimensions"):
            model.posterior(torch.rand(DIM, dtype=train_X.dtype).to(device))
        with pytest.raises(ValueError, match="NaN"):
            model.posterior(
                torch.full((2, 1, DIM), float("nan"), dtype=train_X.dtype, device=device)
            )

    @pytest.mark.parametrize("steps", [1, 5])
    def test_an_interrupted_first_fit_leaves_the_model_unfitted(
        self, entry, device: torch.device, steps
    ) -> None:
        train_X, train_Y = toy_data(device=device)
        model = entry.build(train_X, train_Y)
        before = fitted_state(model)
        with (
            training_interrupted_after(steps, KeyboardInterrupt()),
            pytest.raises(KeyboardInterrupt),
        ):
            model.fit(seed=0)
        assert_same_fitted_state(before, fitted_state(model))
        with pytest.raises(RuntimeError, match="not fitted"):
            model.posterior(test_points(2, 1, device=device))
        assert model.fit(seed=0).is_fitted

    @pytest.mark.parametrize(
        "error", [KeyboardInterrupt(), RuntimeError("out of memory")], ids=["interrupt", "error"]
    )
    def test_a_failed_refit_leaves_the_previous_fit_in_service(
        self, entry, device: torch.device, error
    ) -> None:
        train_X, train_Y = toy_data(device=device)
        model = entry.fitted(train_X, train_Y, seed=0)
        before = fitted_state(model)
        with training_interrupted_after(3, error), pytest.raises(type(error)):
            model.fit(seed=1, epochs=7)
        assert_same_fitted_state(before, fitted_state(model))

    @pytest.mark.parametrize("data", ["same", "other"])
    def test_a_checkpoint_loads_into_a_fresh_model(
        self, entry, device: torch.device, data, tmp_path
    ) -> None:
        model, train_X, train_Y = standard_model(entry, device=device)
        torch.save(model.state_dict(), tmp_path / "model.pt")
        if data == "other":
            # The checkpoint is the trained function: another model's data do not matter.
            train_X = test_points(17, device=device)
            train_Y = toy_function(train_X)[..., :1]
        fresh = entry.build(
            train_X,
            train_Y,
            input_transform=Normalize(DIM, bounds=bounds_like(train_X)),
            outcome_transform=Standardize(1),
        )
        fresh.load_state_dict(torch.load(tmp_path / "model.pt", weights_only=True))
        assert fresh.is_fitted and fresh.fit_seed == model.fit_seed
        X = test_points(5, 3, device=device)
        for observation_noise in (False, True):
            expected = model.posterior(X, observation_noise=observation_noise)
            loaded = fresh.posterior(X, observation_noise=observation_noise)
            assert torch.equal(loaded.mean, expected.mean)
            assert torch.equal(loaded.variance, expected.variance)
            sampler = get_sampler(expected, torch.Size([8]), seed=0)
            assert torch.equal(sampler(loaded), sampler(expected))

    def test_every_result_stays_on_the_device_of_the_data(
        self, entry: ConformanceEntry, device: torch.device
    ) -> None:
        r"""Fit, posterior, samples, an acquisition's optimisation, fantasies and a
        checkpoint of a CPU fit, all on ``device`` (each available device: the CPU, and
        CUDA where there is one), with the CPU fit's predictions."""
        cpu_model, cpu_X, cpu_Y = standard_model(entry)
        train_X, train_Y = cpu_X.to(device), cpu_Y.to(device)
        bounds = bounds_like(train_X)

        def transforms() -> dict[str, Any]:
            return {
                "input_transform": Normalize(DIM, bounds=bounds),
                "outcome_transform": Standardize(1),
            }

        model = entry.fitted(train_X, train_Y, seed=0, **transforms())
        assert {p.device.type for p in model.parameters()} <= {device.type}
        X = test_points(4, 1, device=device)
        posterior = model.posterior(X, observation_noise=True)
        samples = get_sampler(posterior, torch.Size([4]), seed=0)(posterior)
        for value in (posterior.mean, posterior.variance, samples):
            assert value.device.type == device.type and value.isfinite().all()
        acquisition = qLogExpectedImprovement(model, best_f=train_Y.max())
        candidate, _ = optimize_acqf(
            acquisition, bounds, q=2, num_restarts=2, raw_samples=16, options={"seed": 0}
        )
        assert candidate.device.type == device.type
        fantasy = model.fantasize(X, SobolQMCNormalSampler(torch.Size([2])))
        assert fantasy.posterior(X).mean.device.type == device.type
        fresh = entry.build(train_X, train_Y, **transforms())
        fresh.load_state_dict(cpu_model.state_dict())
        # Another device's kernels round differently; the function is the same.
        torch.testing.assert_close(
            fresh.posterior(X).mean.cpu(),
            cpu_model.posterior(X.cpu()).mean,
            **tolerances(torch.float64, rounding_steps=1e6),
        )

    def test_a_checkpoint_holds_no_training_data(
        self, entry: ConformanceEntry, device: torch.device
    ) -> None:
        model, train_X, train_Y = standard_model(entry, device=device)
        state = model.state_dict()
        assert not {"train_X", "transformed_train_Y"} & set(state)
        for data in (train_X, train_Y, model.transformed_train_Y):
            assert not any(torch.equal(value, data) for value in state.values())

    def test_fantasize_shapes(self, entry: ConformanceEntry, device: torch.device) -> None:
        model, *_ = standard_model(entry, device=device)
        fantasy = model.fantasize(
            test_points(3, 1, device=device), SobolQMCNormalSampler(torch.Size([2]))
        )
        assert fantasy.batch_shape == (2, 3) and fantasy.num_outputs == 1
        for X in (test_points(2, 3, 4, device=device), test_points(4, device=device)):
            posterior = fantasy.posterior(X)
            assert posterior.mean.shape == posterior.variance.shape == (2, 3, 4, 1)
            samples = get_sampler(posterior, torch.Size([5]), seed=0)(posterior)
            assert samples.shape == (5, 2, 3, 4, 1) and samples.isfinite().all()

    def test_conditioning_draws_nothing_from_the_global_generator(
        self, entry, device: torch.device
    ) -> None:
        model, *_ = standard_model(entry, device=device)
        x = test_points(1, device=device)
        y = model.posterior(x).mean + 1.0
        torch.manual_seed(1)
        states = global_rng_states()
        with GlobalDrawRecorder() as recorder:
            conditioned = model.condition_on_observations(x, y)
            first = conditioned.posterior(x).mean
        assert recorder.draws == []
        assert_same_rng_states(states)
        torch.manual_seed(2)
        again = model.condition_on_observations(x, y)
        assert torch.equal(first, again.posterior(x).mean)

    def test_conditioning_moves_the_mean_toward_an_observation(
        self, entry, device: torch.device
    ) -> None:
        model, *_ = standard_model(entry, device=device)
        x = test_points(1, device=device)
        before = model.posterior(x, observation_noise=True)
        y = before.mean + 3 * before.variance.sqrt()
        conditioned = model.condition_on_observations(x, y)
        after = conditioned.posterior(x)
        assert (after.mean - y).abs() < (model.posterior(x).mean - y).abs()
        # The uncertainty at an observed point shrinks, as a GP's does.
        assert after.variance < model.posterior(x).variance

    def test_conditioning_is_differentiable_in_the_observations(
        self, entry, device: torch.device
    ) -> None:
        model, *_ = standard_model(entry, device=device)
        x = test_points(1, device=device).requires_grad_(True)
        y = model.posterior(x.detach()).mean.detach().requires_grad_(True)
        mean = model.condition_on_observations(x, y).posterior(test_points(3, device=device)).mean
        gradients = torch.autograd.grad(mean.sum(), [x, y])
        assert all(g.isfinite().all() and g.abs().sum() > 0 for g in gradients)

    @pytest.mark.parametrize("acquisition_name", ["qKG", "qNIPV", "qLogNEI-pending"])
    def test_look_ahead_acquisitions(
        self, entry: ConformanceEntry, device: torch.device, acquisition_name
    ) -> None:
        model, train_X, _ = standard_model(entry, device=device)
        bounds = bounds_like(train_X)
        options = {"maxiter": 3, "seed": 0}
        if acquisition_name == "qKG":
            acquisition = qKnowledgeGradient(model, num_fantasies=2)
            # The optimisation of the posterior mean that initialises the fantasy points.
            options |= {"num_inner_restarts": 2, "raw_inner_samples": 4}
        elif acquisition_name == "qNIPV":
            mc_points = draw_sobol_samples(bounds, n=8, q=1, seed=0).squeeze(-2)
            acquisition = qNegIntegratedPosteriorVariance(model, mc_points=mc_points)
        else:
            acquisition = qLogNoisyExpectedImprovement(
                model, X_baseline=train_X, X_pending=test_points(2, device=device)
            )
        candidate, value = optimize_acqf(
            acquisition, bounds, q=1, num_restarts=1, raw_samples=4, options=options
        )
        assert candidate.shape == (1, DIM) and candidate.isfinite().all()
        assert value.isfinite().all()
        assert ((candidate >= bounds[0]) & (candidate <= bounds[1])).all()

    def test_a_learnable_warp_as_in_botorchs_warped_gp(
        self, entry: ConformanceEntry, device: torch.device
    ) -> None:
        # BoTorch's bo_with_warped_gp tutorial, the same call on SingleTaskGP and on the
        # model: Warp(d, indices, bounds) as the input transform, then qLogNEI.
        train_X, train_Y = toy_data(device=device)
        bounds = bounds_like(train_X)

        def warp() -> Warp:
            return Warp(d=DIM, indices=list(range(DIM)), bounds=bounds).to(train_X)

        if not entry.model_class.trains_input_transform:
            with pytest.raises(UnsupportedError, match="cannot learn the parameters"):
                entry.build(train_X, train_Y, input_transform=warp())
            return
        gp = SingleTaskGP(
            train_X, train_Y, input_transform=warp(), outcome_transform=Standardize(1)
        )
        fit_gpytorch_mll(ExactMarginalLogLikelihood(gp.likelihood, gp))
        model = entry.fitted(train_X, train_Y, input_transform=warp())
        X = test_points(4, 1, device=device)
        for fitted in (gp, model):
            transform = fitted.input_transform
            assert not transform.training
            assert not torch.equal(transform.concentration0, warp().concentration0)
            posterior = fitted.posterior(X)
            assert posterior.mean.isfinite().all() and posterior.variance.isfinite().all()
            acquisition = qLogNoisyExpectedImprovement(fitted, X_baseline=train_X)
            candidate, value = optimize_acqf(
                acquisition, bounds, q=1, num_restarts=1, raw_samples=8, options={"maxiter": 5}
            )
            assert candidate.isfinite().all() and value.isfinite().all()
        # Same seed, same model: the warp too.
        again = entry.fitted(train_X, train_Y, input_transform=warp())
        torch.testing.assert_close(again.posterior(X).mean, model.posterior(X).mean, rtol=0, atol=0)
