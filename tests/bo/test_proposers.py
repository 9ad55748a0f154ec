"""Proposers of the BO core: candidate sets, NOMU's dynamic c, trust regions, and their
configurations and states."""

import pytest
import torch
from botorch.models.transforms import Normalize, Standardize

from botorch_nn_uq.bo import (
    AcquisitionContext,
    AcquisitionProposer,
    BayesianOptimizer,
    CandidateSetProposer,
    DynamicCalibrationProposer,
    FunctionProblem,
    RandomProposer,
    TrustRegionProposer,
)
from botorch_nn_uq.bo.continual import ContinualTraining
from botorch_nn_uq.bo.fitting import ColdFit, ContinualFit
from botorch_nn_uq.bo.proposer_configs import proposer_from_config
from botorch_nn_uq.bo.surrogates import SurrogateSpec
from botorch_nn_uq.models import NOMU, DeepEnsemble


def test_a_candidate_set_is_used_once_per_candidate_with_random_ties() -> None:
    candidates = torch.linspace(0, 1, 5, dtype=torch.float64).unsqueeze(-1)
    problem = FunctionProblem(lambda x: float(x), [[0.0], [1.0]])
    optimizer = BayesianOptimizer.for_problem(
        problem, proposer=CandidateSetProposer(candidates), n_initial=2, seed=1
    )
    optimizer.run(problem, steps=5)
    assert sorted(optimizer.X[2:, 0].tolist()) == candidates[:, 0].tolist()
    assert sorted(optimizer.proposer.state_dict()["used"]) == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="Every candidate has been proposed"):
        optimizer.ask()


def test_a_candidate_set_takes_the_acquisitions_best() -> None:
    candidates = torch.tensor([[0.1], [0.7], [0.4]], dtype=torch.float64)
    proposer = CandidateSetProposer(candidates, lambda model, context: lambda X: -X[..., 0, 0])
    context = AcquisitionContext(candidates, candidates, candidates[[0, 1]], seed=0)
    first = proposer.propose(None, context, 1, torch.Generator())
    second = proposer.propose(None, context, 1, torch.Generator())
    assert first.X.tolist() == [[0.1]] and second.X.tolist() == [[0.4]]


def _nomu_spec() -> SurrogateSpec:
    def construct(train_X, train_Y, bounds):
        return NOMU(
            train_X,
            train_Y,
            bounds=bounds,
            mean_widths=(16,),
            uncertainty_widths=(8,),
            epochs=30,
            num_artificial_points=16,
        )

    return SurrogateSpec.from_constructor("small-nomu", "a small NOMU", construct)


def test_dynamic_c_is_set_once_and_kept() -> None:
    problem = FunctionProblem(lambda x: float((x - 0.3).square().sum()), [[0.0] * 2, [1.0] * 2])
    proposer = DynamicCalibrationProposer(horizon=2, num_restarts=2, raw_samples=16)
    optimizer = BayesianOptimizer.for_problem(
        problem, surrogate=_nomu_spec(), proposer=proposer, n_initial=4
    )
    optimizer.run(problem, steps=2)
    constants = {record.details["calibration_constant"] for record in optimizer.records[1:]}
    assert len(constants) == 1 and all("doublings" in r.details for r in optimizer.records[1:])
    state = proposer.state_dict()
    restored = DynamicCalibrationProposer(horizon=2)
    restored.load_state_dict(state)
    assert torch.equal(restored.calibration_constant, proposer.calibration_constant)
    with pytest.raises(ValueError, match="past the horizon"):
        optimizer.ask()


def test_a_trust_region_restricts_the_inner_proposers_box() -> None:
    bounds = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
    seen = {}

    class Recording(RandomProposer):
        uses_model = True

        def propose(self, model, context, q, random):
            seen["box"] = context.proposal_bounds
            return super().propose(model, context, q, random)

    proposer = TrustRegionProposer(Recording(), length_init=0.2, length=0.2)
    proposer.observe(bounds[:1], torch.ones(1), torch.ones(1))
    center = torch.tensor([0.5, 0.5], dtype=torch.float64)
    context = AcquisitionContext(bounds, bounds[:, :1], bounds, seed=0, center=center)
    proposal = proposer.propose(None, context, 1, torch.Generator())
    torch.testing.assert_close(seen["box"], torch.tensor([[0.4, 0.4], [0.6, 0.6]]).double())
    assert proposal.details["trust_region_length"] == 0.2
    copy = TrustRegionProposer(Recording())
    copy.load_state_dict(proposer.state_dict())
    assert copy.region == proposer.region


def test_a_region_local_fit_normalises_to_the_region_grown_around_the_incumbent() -> None:
    bounds = torch.tensor([[0.0, -10.0], [1.0, 10.0]], dtype=torch.float64)
    proposer = TrustRegionProposer(
        AcquisitionProposer("ts"), local_fit=2, length_init=0.2, length=0.2
    )
    center = torch.tensor([0.9, 0.0], dtype=torch.float64)
    # Before the first batch is told there is no region: the fit sees the whole box.
    assert proposer.fit_bounds(bounds, center) is bounds
    proposer.observe(bounds[:1], torch.ones(1), torch.ones(1))
    torch.testing.assert_close(
        proposer.fit_bounds(bounds, center),
        torch.tensor([[0.7, -4.0], [1.0, 4.0]], dtype=torch.float64),
    )
    assert TrustRegionProposer(AcquisitionProposer("ts")).fit_bounds(bounds, center) is bounds
    assert "fitted region-locally, x2" in proposer.describe()
    for bad in (0.5, float("inf"), True, "4"):
        with pytest.raises(ValueError, match="local_fit must be"):
            TrustRegionProposer(AcquisitionProposer("ts"), local_fit=bad)


@pytest.mark.parametrize(
    ("continual", "acquisition"), [(False, "ts"), (True, "ts"), (False, "qlogei")]
)
def test_a_region_local_fit_trains_the_step_model_in_the_regions_coordinates(
    continual, acquisition, tmp_path
) -> None:
    # The suite turns warnings into errors: points outside the region's neighbourhood (the
    # data, qLogEI's baseline) must not warn.
    problem = FunctionProblem(
        lambda X: (X - 0.3).square().sum(-1), [[0.0] * 2, [1.0] * 2], vectorized=True
    )
    proposer = TrustRegionProposer(
        AcquisitionProposer(
            acquisition, num_restarts=2, raw_samples=16, options={"num_candidates": 64}
        ),
        local_fit=3,
    )
    surrogate = SurrogateSpec.from_constructor(
        "small-ensemble",
        "a small deep ensemble",
        lambda X, Y, bounds: DeepEnsemble(
            X,
            Y,
            input_transform=Normalize(2, bounds=bounds),
            outcome_transform=Standardize(1),
            hidden_widths=(8,),
            epochs=20,
        ),
        supports_warm_start=True,
    )
    optimizer = BayesianOptimizer.for_problem(
        problem,
        surrogate=surrogate,
        proposer=proposer,
        fit_policy=ContinualFit(ContinualTraining(warm_start_steps=5)) if continual else ColdFit(),
        n_initial=8,
    )
    warm_starts = []
    for _ in range(4):
        X = optimizer.ask(4 if optimizer.step else None)
        if optimizer.model is not None:
            center = optimizer.X[optimizer.values.argmin()]
            box = proposer.region.box(center, optimizer.bounds, scale=3)
            transform = optimizer.model.input_transform
            torch.testing.assert_close(transform.offset.reshape(-1), box[0])
            torch.testing.assert_close(transform.coefficient.reshape(-1), box[1] - box[0])
            warm_starts.append(optimizer.fit_policy.last_fit_was_warm)
        optimizer.tell(X, problem.evaluate(X))
    assert any(warm_starts) == continual
    # A saved run continues from its last model in that model's own coordinates.
    optimizer.save(tmp_path / "run.state")
    loaded = BayesianOptimizer.load(tmp_path / "run.state", surrogate=surrogate)
    assert loaded.proposer.local_fit == 3.0
    if continual:
        for name in ("offset", "coefficient"):
            saved = getattr(optimizer.model.input_transform, name)
            torch.testing.assert_close(getattr(loaded.model.input_transform, name), saved)
    assert loaded.ask(4).shape == (4, 2)


@pytest.mark.parametrize(
    "proposer",
    [
        AcquisitionProposer("qucb", sequential=True, options={"beta": 2.0}, raw_samples=32),
        TrustRegionProposer(AcquisitionProposer("ts"), length_init=0.4),
        TrustRegionProposer(AcquisitionProposer("ts"), local_fit=4),
        RandomProposer(),
        DynamicCalibrationProposer(horizon=10, mw_factor=0.5),
    ],
    ids=lambda proposer: type(proposer).__name__,
)
def test_named_proposers_are_rebuilt_from_their_configuration(proposer) -> None:
    assert proposer_from_config(proposer.to_config()).to_config() == proposer.to_config()


def test_proposers_given_as_code_have_no_configuration() -> None:
    assert AcquisitionProposer(lambda model, context: None).to_config() is None
    assert TrustRegionProposer(AcquisitionProposer(lambda m, c: None)).to_config() is None
    with pytest.raises(ValueError, match="raw_samples must be at least num_restarts"):
        AcquisitionProposer("logei", num_restarts=8, raw_samples=4)
    with pytest.raises(ValueError, match="Unknown proposer"):
        proposer_from_config({"type": "nope"})


def test_single_precision_candidates_become_points_of_the_box() -> None:
    bounds = torch.tensor([[0.01, 0.1], [0.7, 5.0]], dtype=torch.float64)
    corners = bounds.float()  # 0.01 rounds below itself in float32
    assert (corners.double()[0] < bounds[0]).any()

    def corner_value(model, context):
        return lambda X: -(X - corners[0]).square().sum(dim=(-2, -1))

    proposer = AcquisitionProposer(corner_value, num_restarts=2, raw_samples=8, dtype=torch.float32)
    context = AcquisitionContext(bounds, bounds[:, :1], bounds, seed=0)
    point = proposer.propose(None, context, 1, torch.Generator()).X
    assert point.dtype == torch.float64
    assert ((point >= bounds[0]) & (point <= bounds[1])).all()


def test_random_points_follow_the_device_of_the_box() -> None:
    # Drawn from the run's CPU stream and moved: meta tensors (no values) fail on a CPU
    # tensor left behind, as a GPU would.
    bounds = torch.tensor([[0.0, -1.0], [1.0, 2.0]], dtype=torch.float64, device="meta")
    context = AcquisitionContext(train_X=bounds, train_Y=bounds[:, :1], bounds=bounds, seed=0)
    proposal = RandomProposer().propose(None, context, 3, torch.Generator().manual_seed(0))
    assert proposal.X.device.type == "meta" and proposal.X.shape == (3, 2)
