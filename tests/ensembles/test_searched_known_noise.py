"""Known observation noise (``train_Yvar``) in the searched ensembles: candidates train on
it in pools (in-process and on Ray) and in hyper-deep's validation copies, validation
scores use the validation rows' known variances, selection follows them, and the fitted
models round-trip through checkpoints. (Every card runs BoTorch's tutorial patterns with
known noise in ``tests/test_features.py``, heteroscedastic noise among them.)"""

import math

import pytest
import torch

from botorch_nn_uq.ensembles.architecture_space import Architecture, Node
from botorch_nn_uq.ensembles.holdout import (
    make_validation_splits,
    member_log_likelihoods,
    validation_log_likelihoods,
)
from botorch_nn_uq.ensembles.hyperparameter_space import TrainingHyperparameters
from botorch_nn_uq.ensembles.pool import (
    CandidateSpec,
    InProcessExecutor,
    PoolData,
    PoolSettings,
    train_pool,
)
from botorch_nn_uq.ensembles.shift_adaptation import CandidateScorer, select_from_pool
from botorch_nn_uq.models import (
    AutoDEUQ,
    HyperDeepEnsemble,
    NESRandomSearch,
    NESRegularizedEvolution,
)
from botorch_nn_uq.models.checkpoint import KNOWN_NOISE_KEY, decode_header
from botorch_nn_uq.nn.batched_mlp import BatchedMLP
from botorch_nn_uq.training import members
from botorch_nn_uq.training.config import TrainingConfig
from botorch_nn_uq.training.losses import KnownNoise
from tests.cards import NEURAL_CARDS, smallest
from tests.ensembles.ray_cluster import local_ray_executor

DTYPE = torch.float64
SETTINGS = PoolSettings(epochs=20)
SMALL = Architecture((Node(4, "tanh"), Node(), Node()))
SEARCHED = [HyperDeepEnsemble, NESRandomSearch, NESRegularizedEvolution, AutoDEUQ]


def _pool_data(n: int = 30, num_validation: int = 10) -> PoolData:
    generator = torch.Generator().manual_seed(0)
    X = torch.rand(n, 2, generator=generator, dtype=DTYPE)
    Y = (3 * X).sin().sum(-1, keepdim=True)
    Y = (Y - Y.mean()) / Y.std()
    Yvar = torch.linspace(1e-3, 1.0, n, dtype=DTYPE).unsqueeze(-1)
    split = n - num_validation
    return PoolData(X[:split], Y[:split], X[split:], Y[split:], Yvar[:split], Yvar[split:])


def _specs(count: int = 2) -> list[CandidateSpec]:
    hyperparameters = TrainingHyperparameters(
        learning_rate=1e-2,
        batch_size=8,
        optimizer="adam",
        lr_reduction_patience=3,
        early_stopping_patience=6,
    )
    return [CandidateSpec(i, SMALL, hyperparameters, seed=100 + i) for i in range(count)]


def _gaussian_log_density(mean: torch.Tensor, Y: torch.Tensor, Yvar: torch.Tensor):
    return torch.distributions.Normal(mean, Yvar.sqrt()).log_prob(Y).sum(-1)


@pytest.mark.parametrize("gaussian_head", [True, False])
def test_member_log_likelihoods_use_the_known_variances_for_every_head(gaussian_head) -> None:
    X = torch.rand(6, 2, generator=torch.Generator().manual_seed(1), dtype=DTYPE)
    Y, Yvar = X.sum(-1, keepdim=True), torch.linspace(0.1, 2.0, 6, dtype=DTYPE).unsqueeze(-1)
    network = BatchedMLP(2, 1, (4,), [0, 1], gaussian_head=gaussian_head).double()
    with torch.no_grad():
        mean = network(X).mean
    expected = _gaussian_log_density(mean, Y, Yvar)
    torch.testing.assert_close(member_log_likelihoods(network, X, Y, Yvar), expected)


def test_pool_data_takes_known_noise_for_both_sides_or_neither() -> None:
    data = _pool_data()
    with pytest.raises(ValueError, match="both the training and the validation rows"):
        PoolData(data.train_X, data.train_Y, data.validation_X, data.validation_Y, data.train_Yvar)


def test_candidates_train_on_the_known_noise_and_score_with_the_validation_variances(
    monkeypatch,
) -> None:
    seen = []
    row_losses = members.member_row_losses

    def recording(*args, **kwargs):
        seen.append(kwargs.get("known_noise"))
        return row_losses(*args, **kwargs)

    monkeypatch.setattr(members, "member_row_losses", recording)
    data = _pool_data()
    candidates = train_pool(_specs(), data, SETTINGS)
    assert seen and all(known is not None for known in seen)
    # Full-batch calls see every stacked row: training rows, then validation rows.
    full = [known for known in seen if known.variance.shape[0] == 30]
    torch.testing.assert_close(full[0].variance, torch.cat([data.train_Yvar, data.validation_Yvar]))
    # The stored validation scores are the Gaussian densities with the known variances.
    rescored = CandidateScorer(
        data.validation_X, data.validation_Y, SETTINGS, data.validation_Yvar
    )(candidates)
    stored = torch.stack([candidate.validation_log_likelihoods for candidate in candidates])
    torch.testing.assert_close(stored, rescored)
    own = CandidateScorer(data.validation_X, data.validation_Y, SETTINGS)(candidates)
    assert not torch.allclose(stored, own)


def test_the_selection_follows_the_known_variances_of_the_validation_rows() -> None:
    data = _pool_data()
    candidates = train_pool(_specs(), data, SETTINGS)
    X, Y = data.validation_X, data.validation_Y
    # With unit variances, a row's log density is -(log(2 pi) + squared residual) / 2.
    unit = CandidateScorer(X, Y, SETTINGS, torch.ones_like(Y))(candidates)
    squared_residuals = -2 * unit - math.log(2 * math.pi)
    for chosen in (0, 1):
        # The rows where the chosen candidate is the better one are nearly exact and the
        # others very noisy: the known variances select it, whichever it is.
        better = squared_residuals[chosen] < squared_residuals[1 - chosen]
        Yvar = torch.where(better, 1e-4, 1e2).to(DTYPE).unsqueeze(-1)
        scorer = CandidateScorer(X, Y, SETTINGS, Yvar)
        usable, selection = select_from_pool(candidates, 1, scorer)
        assert usable[int(selection.indices[0])] is candidates[chosen]


def test_hyper_deep_copies_train_on_and_score_with_the_held_out_known_variances() -> None:
    X = torch.rand(16, 2, generator=torch.Generator().manual_seed(2), dtype=DTYPE)
    Y = X.sin().sum(-1, keepdim=True)
    Yvar = torch.linspace(0.01, 1.0, 16, dtype=DTYPE).unsqueeze(-1)
    known_noise = KnownNoise.from_variance(Yvar)
    splits = make_validation_splits(16, "cross-validation", num_folds=4)
    config = TrainingConfig(epochs=20, learning_rate=1e-2)
    l2 = torch.tensor([0.0, 1e-3], dtype=DTYPE)
    learning_rates = torch.tensor([1e-2, 3e-3], dtype=DTYPE)
    seeds = list(range(100, 108))

    def make_network(num_members: int) -> BatchedMLP:
        return BatchedMLP(2, 1, (8,), seeds[:num_members], gaussian_head=True)

    scores = validation_log_likelihoods(
        make_network,
        X,
        Y,
        splits,
        config,
        l2_regularization=l2,
        learning_rates=learning_rates,
        known_noise=known_noise,
    )
    # Candidate 1's copy for fold 2, trained alone on the known noise, scored with the
    # known variances of its held-out rows.
    candidate, fold = 1, 2
    alone = BatchedMLP(2, 1, (8,), [seeds[candidate * 4 + fold]], gaussian_head=True).double()
    members.fit_members(
        alone,
        X,
        Y,
        config,
        l2_regularization=l2[candidate : candidate + 1],
        row_weights=splits.train_weights[fold : fold + 1].double(),
        learning_rates=learning_rates[candidate : candidate + 1],
        known_noise=known_noise,
    )
    held_out = splits.validation_weights[fold].nonzero().squeeze(-1)
    with torch.no_grad():
        mean = alone(X[held_out]).mean
    expected = _gaussian_log_density(mean, Y[held_out], Yvar[held_out])[0]
    torch.testing.assert_close(scores[candidate, held_out], expected, atol=1e-8, rtol=1e-6)


def _fitted(cls: type, Yvar: torch.Tensor | None, seed: int = 0):
    card = next(card for card in NEURAL_CARDS if card.model_class is cls)
    X = torch.rand(12, 2, generator=torch.Generator().manual_seed(0), dtype=DTYPE)
    Y = torch.stack([X.sin().sum(-1), X.prod(-1)], dim=-1)
    model = cls(X, Y, Yvar, **smallest(card.fast.hyperparameters, epochs=20))
    return model.fit(seed=seed) if seed is not None else model


@pytest.mark.filterwarnings("ignore:The member selection .* kept a single member:UserWarning")
@pytest.mark.parametrize("cls", SEARCHED, ids=lambda cls: cls.__name__)
def test_a_searched_ensembles_checkpoint_with_known_noise_round_trips(cls) -> None:
    Yvar = torch.linspace(0.01, 0.3, 12, dtype=DTYPE).unsqueeze(-1).expand(12, 2).contiguous()
    model = _fitted(cls, Yvar)
    state = model.state_dict()
    assert decode_header(state["_extra_state"])[KNOWN_NOISE_KEY] is True
    loaded = _fitted(cls, Yvar, seed=None)
    loaded.load_state_dict(state)
    X = torch.rand(5, 1, 2, generator=torch.Generator().manual_seed(9), dtype=DTYPE)
    for observation_noise in (False, True):
        expected = model.posterior(X, observation_noise=observation_noise)
        given = loaded.posterior(X, observation_noise=observation_noise)
        assert torch.equal(given.mean, expected.mean)
        assert torch.equal(given.variance, expected.variance)
    # observation_noise=True adds the mean known variance (transformed back).
    added = model.posterior(X, observation_noise=True).variance - model.posterior(X).variance
    torch.testing.assert_close(added, Yvar.mean(0).expand_as(added))


@pytest.fixture(scope="module")
def ray_executor():
    yield from local_ray_executor()


@pytest.mark.slow
def test_a_ray_pool_with_known_noise_equals_the_in_process_one(ray_executor) -> None:
    data, specs = _pool_data(), _specs()
    on_ray = train_pool(specs, data, SETTINGS, ray_executor)
    in_process = train_pool(specs, data, SETTINGS, InProcessExecutor())
    for a, b in zip(on_ray, in_process, strict=True):
        assert a.spec == b.spec and not a.failed
        assert torch.equal(a.validation_log_likelihoods, b.validation_log_likelihoods)
        assert all(torch.equal(a.state[name], b.state[name]) for name in a.state)
