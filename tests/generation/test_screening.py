"""Tests of acquisition optimisation screened with a sub-bank of functions: the full-bank
rescoring picks what an exhaustive full-bank evaluation picks, L-BFGS reaches the dense
grid's maximum, and the returned value is always the full acquisition's."""

import pytest
import torch
from botorch.acquisition import AcquisitionFunction
from botorch.acquisition.objective import GenericMCObjective
from botorch.models.transforms import Normalize, Standardize
from botorch.utils.sampling import draw_sobol_samples
from torch import Tensor

from botorch_nn_uq.acquisition import qLeakyExpectedImprovement
from botorch_nn_uq.generation import optimize_acqf_screened
from botorch_nn_uq.models import NEON
from botorch_nn_uq.posteriors import EnsembleIndexSampler
from tests.testing import tolerances

# One small fit for the module, in float64 (the fit is the expensive part).
DTYPE = torch.float64
BOUNDS = torch.tensor([[0.0], [1.0]], dtype=DTYPE)
GRID = torch.linspace(0, 1, 4, dtype=DTYPE).unsqueeze(-1)
TINY_NEON = {
    "encoder_widths": (16,),
    "latent_dim": 8,
    "decoder_depth": 1,
    "decoder_width": 16,
    "epinet_widths": (8,),
    "index_dim": 4,
    "prior_widths": (3,),
    "num_epistemic_samples": 16,
    "num_training_indices": 4,
    "epochs": 150,
    "learning_rate": 3e-3,
}
SCREENING_BANK_SIZE = 4
# The composite objective g(f) = -mean_j f(x, y_j)^2: maximal where the function on the
# grid is closest to zero.
OBJECTIVE = GenericMCObjective(lambda Y, X: -Y.pow(2).mean(-1))


def _training_data() -> tuple[Tensor, Tensor]:
    r"""10 inputs on ``[0, 1]`` and their functions ``f(x, y) = x - 0.3 + 0.2 y`` on the
    grid."""
    train_X = torch.rand(10, 1, generator=torch.Generator().manual_seed(0), dtype=DTYPE)
    return train_X, train_X - 0.3 + 0.2 * GRID.T


@pytest.fixture(scope="module")
def model() -> NEON:
    r"""A NEON on the training data with a bank of 16 functions."""
    train_X, train_Y = _training_data()
    return NEON(
        train_X,
        train_Y,
        input_transform=Normalize(1, bounds=BOUNDS),
        outcome_transform=Standardize(GRID.shape[0]),
        output_grid=GRID,
        **TINY_NEON,
    ).fit(seed=0)


def _leaky_ei(model: NEON) -> qLeakyExpectedImprovement:
    r"""q-leaky EI of the composite objective averaged over the model's whole bank."""
    best_g = OBJECTIVE(_training_data()[1]).max()
    return qLeakyExpectedImprovement(
        model,
        best_f=best_g,
        sampler=EnsembleIndexSampler(torch.Size([model.function_bank_size]), seed=0),
        objective=OBJECTIVE,
    )


class _Wrapped(AcquisitionFunction):
    r"""``sign`` times an acquisition function, counting the candidate sets it scores and
    keeping those it is differentiated at (L-BFGS-B's iterates); ``frozen`` makes its
    gradient zero, so that L-BFGS-B stops where it starts (scipy's L-BFGS-B takes a step
    even with ``maxiter=0``)."""

    def __init__(
        self, acquisition: AcquisitionFunction, sign: float = 1.0, frozen: bool = False
    ) -> None:
        super().__init__(model=acquisition.model)
        self.acquisition = acquisition
        self.sign = sign
        self.frozen = frozen
        self.num_evaluated = 0
        self.iterates: list[Tensor] = []

    def forward(self, X: Tensor) -> Tensor:
        self.num_evaluated += X.shape[0]
        if X.requires_grad:
            self.iterates.append(X.detach().clone())
        values = self.sign * self.acquisition(X)
        if self.frozen:
            return values.detach() + 0.0 * X.sum(dim=(-2, -1))
        return values


@pytest.fixture(scope="module")
def full(model) -> qLeakyExpectedImprovement:
    return _leaky_ei(model)


@pytest.fixture(scope="module")
def screening(model) -> qLeakyExpectedImprovement:
    return _leaky_ei(model.function_bank_subset(SCREENING_BANK_SIZE))


def _values(acquisition: AcquisitionFunction, X: Tensor) -> Tensor:
    with torch.no_grad():
        return acquisition(X)


def _frozen_screener(kind: str, full: AcquisitionFunction, screening: AcquisitionFunction):
    r"""A screening acquisition that L-BFGS-B cannot move: the sub-bank's, or the full
    bank's in reverse order."""
    if kind == "sub-bank":
        return _Wrapped(screening, frozen=True)
    return _Wrapped(full, sign=-1.0, frozen=True)


@pytest.mark.parametrize("screening_kind", ["sub-bank", "reversed"])
def test_without_optimisation_steps_the_result_is_the_exhaustive_full_bank_argmax(
    full, screening, screening_kind
) -> None:
    # The rescoring decides: even a screening acquisition that ranks the raw points in
    # reverse cannot change the pick once every raw point is rescored.
    screener = _frozen_screener(screening_kind, full, screening)
    raw = draw_sobol_samples(BOUNDS, n=16, q=1, seed=1)
    exhaustive = _values(full, raw)
    candidates, value = optimize_acqf_screened(
        full, screener, BOUNDS, q=1, num_restarts=2, raw_samples=16, num_rescored=16, seed=1
    )
    assert torch.equal(candidates, raw[exhaustive.argmax()])
    torch.testing.assert_close(value, exhaustive.max(), **tolerances(DTYPE))


@pytest.mark.parametrize("screening_kind", ["sub-bank", "reversed"])
def test_the_full_bank_ranks_the_screened_shortlist(full, screening, screening_kind) -> None:
    screener = _frozen_screener(screening_kind, full, screening)
    raw = draw_sobol_samples(BOUNDS, n=16, q=1, seed=1)
    shortlist = raw[_values(screener, raw).topk(6).indices]
    candidates, _ = optimize_acqf_screened(
        full, screener, BOUNDS, q=1, num_restarts=2, raw_samples=16, num_rescored=6, seed=1
    )
    assert torch.equal(candidates, shortlist[_values(full, shortlist).argmax()])
    if screening_kind == "reversed":
        # The shortlist is then the full bank's six worst raw points.
        assert not torch.equal(candidates, raw[_values(full, raw).argmax()])


def test_the_restarts_start_from_the_shortlists_best_by_the_full_bank(full, screening) -> None:
    screener = _Wrapped(screening)
    raw = draw_sobol_samples(BOUNDS, n=16, q=1, seed=1)
    shortlist = raw[_values(screening, raw).topk(8).indices]
    optimize_acqf_screened(
        full, screener, BOUNDS, q=1, num_restarts=3, raw_samples=16, num_rescored=8, seed=1
    )
    # Deterministic top-k, best first.
    assert torch.equal(screener.iterates[0], shortlist[_values(full, shortlist).topk(3).indices])


def test_lbfgs_on_the_full_bank_reaches_the_dense_grid_maximum(full, screening) -> None:
    dense = torch.linspace(0, 1, 2001, dtype=DTYPE).view(-1, 1, 1)
    dense_values = _values(full, dense)
    candidates, value = optimize_acqf_screened(
        full, screening, BOUNDS, q=1, num_restarts=4, raw_samples=32, optimize_on="full", seed=0
    )
    spread = dense_values.max() - dense_values.min()
    assert value >= dense_values.max() - 1e-3 * spread
    assert (candidates - dense[dense_values.argmax()]).abs().item() <= 0.01


def test_screened_lbfgs_never_ends_below_the_best_rescored_raw_point(full, screening) -> None:
    raw = draw_sobol_samples(BOUNDS, n=32, q=1, seed=1)
    _, value = optimize_acqf_screened(
        full, screening, BOUNDS, q=1, num_restarts=4, raw_samples=32, num_rescored=32, seed=1
    )
    assert value >= _values(full, raw).max() - tolerances(DTYPE)["atol"]


@pytest.mark.parametrize("optimize_on", ["screening", "full"])
@pytest.mark.parametrize("q", [1, 2])
def test_the_returned_value_is_a_fresh_full_bank_evaluation(
    full, screening, optimize_on, q
) -> None:
    candidates, value = optimize_acqf_screened(
        full, screening, BOUNDS, q=q, num_restarts=2, raw_samples=8, optimize_on=optimize_on, seed=2
    )
    assert candidates.shape == (q, 1) and value.shape == ()
    assert not candidates.requires_grad and not value.requires_grad
    assert ((candidates >= 0) & (candidates <= 1)).all()
    assert torch.equal(value, _values(full, candidates.unsqueeze(0)).squeeze(0))


def test_the_full_acquisition_scores_only_the_shortlist_and_the_end_points(full, screening) -> None:
    counted = _Wrapped(full)
    optimize_acqf_screened(
        counted, screening, BOUNDS, q=1, num_restarts=3, raw_samples=32, num_rescored=8, seed=0
    )
    # The shortlist, the end points with the best rescored raw point, the returned point.
    assert counted.num_evaluated == 8 + (3 + 1) + 1


def test_a_seed_gives_one_result_whatever_the_batch_limit(full, screening) -> None:
    arguments = (full, screening, BOUNDS)
    settings = {"q": 1, "num_restarts": 2, "raw_samples": 16, "seed": 4}
    first = optimize_acqf_screened(*arguments, **settings)
    again = optimize_acqf_screened(*arguments, **settings, options={"batch_limit": 3})
    torch.testing.assert_close(again, first, **tolerances(DTYPE))


@pytest.mark.parametrize(
    ("overrides", "error", "message"),
    [
        ({"q": 0}, ValueError, "q must be a positive integer"),
        ({"num_restarts": 1.5}, ValueError, "num_restarts must be a positive integer"),
        ({"raw_samples": -4}, ValueError, "raw_samples must be a positive integer"),
        ({"num_rescored": 0}, ValueError, "num_rescored must be a positive integer"),
        ({"num_rescored": 2}, ValueError, r"num_restarts <= num_rescored <= raw_samples"),
        ({"num_rescored": 9}, ValueError, r"num_restarts <= num_rescored <= raw_samples"),
        ({"raw_samples": 3}, ValueError, r"num_restarts <= num_rescored <= raw_samples"),
        ({"optimize_on": "both"}, ValueError, "Unknown optimize_on 'both'"),
        ({"bounds": BOUNDS[0]}, ValueError, r"bounds must be a 2 x d floating-point tensor"),
        ({"bounds": BOUNDS.flip(0)}, ValueError, "upper >= lower"),
        ({"bounds": torch.zeros(2, 2, dtype=DTYPE)}, ValueError, "1-dimensional inputs"),
        ({"seed": -1}, ValueError, "seed must be an integer"),
        ({"options": {"seed": 0}}, ValueError, "as `seed=`"),
        ({"options": {"batch_limit": 0}}, ValueError, r"options\['batch_limit'\]"),
        ({"acq_function": lambda X: X}, TypeError, "acq_function must be a BoTorch"),
    ],
)
def test_invalid_arguments_are_named(full, screening, overrides, error, message) -> None:
    arguments = {
        "acq_function": full,
        "screening_acq_function": screening,
        "bounds": BOUNDS,
        "q": 1,
        "num_restarts": 4,
        "raw_samples": 8,
        **overrides,
    }
    with pytest.raises(error, match=message):
        optimize_acqf_screened(**arguments)
