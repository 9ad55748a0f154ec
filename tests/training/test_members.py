"""Tests of member training: ``K`` stacked networks trained as one computation must equal
``K`` independent trainings with the same member seeds."""

import pytest
import torch
from torch import nn

from botorch_nn_uq.nn.batched_mlp import DATA_ORDER_STREAM, BatchedMLP
from botorch_nn_uq.training import KnownNoise, NonFiniteLossError, TrainingConfig, train_network
from botorch_nn_uq.training import loop as loop_module
from botorch_nn_uq.training import members as members_module
from botorch_nn_uq.training.members import fit_members, member_row_losses

DTYPE = torch.float64
SEEDS = [3, 17, 101]
#: Batched and independent trainings agree up to floating-point summation order.
TIGHT = {"atol": 1e-10, "rtol": 1e-8}


def _data(n=32, seed=0, noise=0.1):
    generator = torch.Generator().manual_seed(seed)
    X = torch.rand(n, 2, generator=generator, dtype=DTYPE)
    Y = torch.sin(3 * X).sum(-1, keepdim=True)
    return X, Y + noise * torch.randn(n, 1, generator=generator, dtype=DTYPE)


def _network(member_seeds=SEEDS, gaussian_head=False):
    return BatchedMLP(
        2, 1, (12, 12), member_seeds, activation="tanh", gaussian_head=gaussian_head
    ).to(DTYPE)


def _assert_member_equals(network, member, alone):
    r"""Member ``member`` of ``network`` has the parameters of the 1-member ``alone``."""
    for stacked, single in zip(network.parameters(), alone.parameters(), strict=True):
        torch.testing.assert_close(stacked.detach()[member], single.detach()[0], **TIGHT)


def _member_differs(network, member, alone):
    return any(
        not torch.allclose(stacked[member], single[0], atol=1e-6)
        for stacked, single in zip(network.parameters(), alone.parameters(), strict=True)
    )


# ---------------------------------------------------------------------------
# Batched training equals independent training


@pytest.mark.parametrize("gaussian_head", [False, True])
@pytest.mark.parametrize("batch_size", [None, 16])
def test_batched_training_equals_independent_trainings(gaussian_head, batch_size):
    X, Y = _data()
    l2 = torch.tensor([0.0, 1e-3, 1e-1], dtype=DTYPE)
    learning_rates = torch.tensor([1e-2, 3e-3, 2e-2], dtype=DTYPE)

    def config(learning_rate):
        return TrainingConfig(
            epochs=60,
            learning_rate=learning_rate,
            batch_size=batch_size,
            early_stopping_patience=5,
            min_delta=1e-3,
        )

    network = _network(gaussian_head=gaussian_head)
    result = fit_members(
        network, X, Y, config(1e-2), l2_regularization=l2, learning_rates=learning_rates
    )
    assert result.best_epoch.shape == result.best_loss.shape == (3,)
    assert all(loss.shape == (3,) for loss in result.loss_history)
    assert not network.training
    solo_epochs = []
    for member, seed in enumerate(SEEDS):
        alone = _network([seed], gaussian_head=gaussian_head)
        solo = fit_members(
            alone, X, Y, config(learning_rates[member].item()), l2_regularization=l2[member]
        )
        _assert_member_equals(network, member, alone)
        assert result.best_epoch[member].item() == solo.best_epoch.item()
        torch.testing.assert_close(result.best_loss[member], solo.best_loss[0], **TIGHT)
        # The monitored losses agree for as long as the member trained alone.
        history = torch.stack(result.loss_history)[: solo.epochs_run, member]
        torch.testing.assert_close(history, torch.stack(solo.loss_history)[:, 0], **TIGHT)
        solo_epochs.append(solo.epochs_run)
    # Training stops once every member has run out of patience.
    assert result.epochs_run == max(solo_epochs)
    # The strongly regularised member stops early, so early stopping was exercised.
    assert min(solo_epochs) < 60


def test_members_differ_and_the_global_rng_is_not_used():
    X, Y = _data()
    config = TrainingConfig(epochs=20, learning_rate=1e-2, batch_size=8)
    torch.manual_seed(0)
    first = _network()
    fit_members(first, X, Y, config)
    torch.manual_seed(1)
    second = _network()
    fit_members(second, X, Y, config)
    for a, b in zip(first.parameters(), second.parameters(), strict=True):
        assert torch.equal(a, b)
    assert not torch.allclose(first.weights[0][0], first.weights[0][1])


def test_gradient_clipping_is_per_member():
    X, Y = _data()
    # Member 1's huge penalty makes its gradient enormous: unclipped SGD steps overshoot.
    l2 = torch.tensor([0.0, 1e3, 0.0], dtype=DTYPE)

    def config(clip):
        return TrainingConfig(
            epochs=40, learning_rate=1e-2, optimizer="sgd", gradient_clip_norm=clip
        )

    network = _network()
    result = fit_members(network, X, Y, config(10.0), l2_regularization=l2)
    for member, seed in enumerate(SEEDS):
        clipped, unclipped = _network([seed]), _network([seed])
        solo = fit_members(clipped, X, Y, config(10.0), l2_regularization=l2[member])
        fit_members(unclipped, X, Y, config(None), l2_regularization=l2[member])
        _assert_member_equals(network, member, clipped)
        assert result.best_epoch[member].item() == solo.best_epoch.item()
        if member == 1:
            # The clipped member followed a different path from its unclipped training ...
            assert _member_differs(network, member, unclipped)
        else:
            # ... while the other members were never clipped (a global norm would have
            # shrunk their steps by member 1's gradient).
            _assert_member_equals(network, member, unclipped)


def test_member_gradient_clipping_caps_each_members_norm():
    network = _network()
    config = TrainingConfig(epochs=1, learning_rate=1.0, optimizer="sgd", gradient_clip_norm=0.5)
    scales = torch.tensor([1.0, 1e4, 1e-6], dtype=DTYPE)
    before = [p.detach().clone() for p in network.parameters()]
    X, Y = _data()

    def loss_fn(indices):
        return scales * member_row_losses(network, X, Y, per_member=False).mean(-1)

    train_network(
        network,
        loss_fn,
        len(X),
        config,
        # An always-improving validation loss keeps the weights after the step.
        validation_loss_fn=lambda: torch.full((3,), -1.0, dtype=DTYPE),
        member_generators=_generators(network),
    )
    steps = sum(
        (p.detach() - old).pow(2).flatten(1).sum(-1)
        for p, old in zip(network.parameters(), before, strict=True)
    ).sqrt()
    # SGD with lr 1: the step is the (clipped) gradient; only the last member is unclipped.
    torch.testing.assert_close(steps[:2], torch.full((2,), 0.5, dtype=DTYPE), atol=1e-6, rtol=0)
    assert 0 < steps[2] < 1e-3


# ---------------------------------------------------------------------------
# Row weights and validation rows


@pytest.mark.parametrize("gaussian_head", [False, True])
def test_row_weights_select_each_members_training_rows(gaussian_head):
    X, Y = _data(n=30)
    config = TrainingConfig(epochs=40, learning_rate=1e-2)
    row_weights = torch.ones(3, 30, dtype=DTYPE)
    row_weights[1, :15] = 0.0  # member 1 trains on the second half only
    row_weights[2, :10] = 2.0  # member 2 sees the first ten rows twice
    network = _network(gaussian_head=gaussian_head)
    fit_members(network, X, Y, config, l2_regularization=1e-3, row_weights=row_weights)
    subsets = [
        (X, Y),
        (X[15:], Y[15:]),
        (torch.cat([X[:10], X]), torch.cat([Y[:10], Y])),
    ]
    for member, (seed, (X_k, Y_k)) in enumerate(zip(SEEDS, subsets, strict=True)):
        alone = _network([seed], gaussian_head=gaussian_head)
        fit_members(alone, X_k, Y_k, config, l2_regularization=1e-3)
        _assert_member_equals(network, member, alone)


def test_validation_row_weights_drive_the_best_weights():
    X, _ = _data(n=40)
    # Training rows follow 1 + x, validation rows 1 - x: fitting the offset helps the
    # validation loss, fitting the slope then hurts it.
    Y = 1 + torch.where(torch.arange(40)[:, None] < 20, X[:, :1], -X[:, :1])
    train_weights = torch.zeros(3, 40, dtype=DTYPE)
    train_weights[:, :20] = 1.0
    validation_weights = 1.0 - train_weights
    config = TrainingConfig(epochs=60, learning_rate=1e-2)
    network = _network()
    plain = _network()
    trained = fit_members(plain, X, Y, config, row_weights=train_weights)
    result = fit_members(
        network,
        X,
        Y,
        config,
        row_weights=train_weights,
        validation_row_weights=validation_weights,
    )
    # Monitoring the training loss keeps (nearly) the last weights; monitoring the
    # validation loss keeps early weights.
    assert (trained.best_epoch >= 40).all()
    assert (result.best_epoch > 0).all() and (result.best_epoch < 20).all()
    history = torch.stack(result.loss_history)
    torch.testing.assert_close(history.min(0).values, result.best_loss, rtol=0, atol=0)
    assert torch.equal(history.argmin(0), result.best_epoch)
    # The restored weights are the ones that reached the best validation loss.
    with torch.no_grad():
        row_losses = member_row_losses(network, X, Y, per_member=False)
    validation = (validation_weights * row_losses).sum(-1) / validation_weights.sum(-1)
    torch.testing.assert_close(validation, result.best_loss, **TIGHT)
    # The validation rows are not trained on: member 0's restored weights are those after
    # best_epoch + 1 full-batch steps on the training rows alone (full-batch training
    # without validation keeps the weights before the step of its best epoch).
    steps = result.best_epoch[0].item() + 1
    alone = _network(SEEDS[:1])
    alone_result = fit_members(
        alone, X[:20], Y[:20], TrainingConfig(epochs=steps + 1, learning_rate=1e-2)
    )
    assert alone_result.best_epoch.item() == steps
    _assert_member_equals(network, 0, alone)
    # Early stopping follows the validation loss too.
    stopped = _network()
    early = fit_members(
        stopped,
        X,
        Y,
        TrainingConfig(epochs=60, learning_rate=1e-2, early_stopping_patience=5),
        row_weights=train_weights,
        validation_row_weights=validation_weights,
    )
    assert torch.equal(early.best_epoch, result.best_epoch)
    assert early.epochs_run == result.best_epoch.max().item() + 6
    for a, b in zip(stopped.parameters(), network.parameters(), strict=True):
        assert torch.equal(a, b)


# ---------------------------------------------------------------------------
# Errors


def _generators(network):
    return network.member_generators(DATA_ORDER_STREAM)


def test_member_mode_loss_must_be_a_k_vector():
    network = _network()
    X, Y = _data()

    def scalar_loss(indices):
        return member_row_losses(network, X, Y, per_member=False).mean()

    with pytest.raises(ValueError, match="must return a 3-vector"):
        train_network(
            network,
            scalar_loss,
            len(X),
            TrainingConfig(epochs=2),
            member_generators=_generators(network),
        )


def test_member_mode_needs_a_leading_member_dimension():
    linear = nn.Linear(2, 1).to(DTYPE)
    generators = _network().member_generators(DATA_ORDER_STREAM)
    with pytest.raises(ValueError, match="leading member dimension of size 3"):
        train_network(
            linear,
            lambda indices: torch.zeros(3),
            4,
            TrainingConfig(),
            member_generators=generators,
        )


def test_a_diverging_member_does_not_affect_the_others():
    X, Y = _data()
    # Member 1's huge penalty makes plain SGD diverge to an infinite loss (epoch ~46).
    l2 = torch.tensor([0.0, 1e4, 0.0], dtype=DTYPE)
    config = TrainingConfig(epochs=50, learning_rate=0.1, optimizer="sgd")
    network = _network()
    result = fit_members(network, X, Y, config, l2_regularization=l2)
    history = torch.stack(result.loss_history)
    assert history[:, 1].isinf().any() and history[:, [0, 2]].isfinite().all()
    # The diverged member keeps its best weights: those before its first step.
    assert result.best_epoch[1].item() == 0
    _assert_member_equals(network, 1, _network(SEEDS[1:2]))
    for member in (0, 2):
        alone = _network([SEEDS[member]])
        solo = fit_members(alone, X, Y, config)
        _assert_member_equals(network, member, alone)
        assert result.best_epoch[member].item() == solo.best_epoch.item()
    with pytest.raises(NonFiniteLossError, match="training loss became inf"):
        fit_members(_network(SEEDS[1:2]), X, Y, config, l2_regularization=l2[1])


def test_non_finite_member_losses():
    network = _network()
    initial = [p.detach().clone() for p in network.parameters()]
    factor = torch.tensor([1.0, float("nan"), 1.0], dtype=DTYPE)
    result = train_network(
        network,
        lambda indices: network.squared_norms() * factor,
        4,
        TrainingConfig(epochs=3, learning_rate=1e-2),
        member_generators=_generators(network),
    )
    # A member without a single finite loss reports inf and keeps its initial weights.
    assert result.best_loss[1].item() == float("inf")
    assert result.best_epoch.tolist() == [2, -1, 2]
    for parameter, old in zip(network.parameters(), initial, strict=True):
        assert torch.equal(parameter[1], old[1])
        assert not torch.equal(parameter[0], old[0])
    # The error is raised once every member has failed.
    with pytest.raises(NonFiniteLossError, match="epoch 0"):
        train_network(
            network,
            lambda indices: network.squared_norms() * float("nan"),
            4,
            TrainingConfig(epochs=3),
            member_generators=_generators(network),
        )


def test_member_learning_rates_errors():
    network = _network()
    X, Y = _data()
    rates = torch.tensor([1e-3, 2e-3, 3e-3], dtype=DTYPE)
    with pytest.raises(ValueError, match="weight_decay"):
        fit_members(
            network, X, Y, TrainingConfig(epochs=2, weight_decay=1e-4), learning_rates=rates
        )
    for bad in (rates[:2], torch.tensor([1e-3, 0.0, 1e-3], dtype=DTYPE)):
        with pytest.raises(ValueError, match="positive 3-vector"):
            fit_members(network, X, Y, TrainingConfig(epochs=2), learning_rates=bad)
    linear = nn.Linear(2, 1).to(DTYPE)
    with pytest.raises(ValueError, match="need member mode"):
        train_network(
            linear,
            lambda indices: ((linear(X) - Y) ** 2).mean(),
            len(X),
            TrainingConfig(epochs=2),
            member_learning_rates=rates,
        )


@pytest.mark.parametrize("name", ["row_weights", "validation_row_weights"])
def test_bad_row_weights(name):
    network = _network()
    X, Y = _data(n=10)
    config = TrainingConfig(epochs=2)
    bad_shapes = [torch.ones(2, 10), torch.ones(3, 9), torch.ones(10)]
    negative = torch.ones(3, 10)
    negative[0, 0] = -1.0
    for weights in [*bad_shapes, negative]:
        with pytest.raises(ValueError, match=rf"{name} must be a non-negative `K x n`"):
            fit_members(network, X, Y, config, **{name: weights.to(DTYPE)})
    empty = torch.ones(3, 10, dtype=DTYPE)
    empty[2] = 0.0
    with pytest.raises(ValueError, match=f"at least one row with positive {name}"):
        fit_members(network, X, Y, config, **{name: empty})


def test_member_mode_keeps_the_step_budget_whatever_the_data_size():
    steps = []
    for n in (64, 2048):
        X, Y = _data(n=n)
        network = _network()
        config = TrainingConfig(epochs=10_000, max_steps=30, batch_size=32, learning_rate=1e-2)
        result = fit_members(network, X, Y, config)
        steps.append(result.steps_run)
        assert torch.isfinite(result.best_loss).all()
    assert steps == [30, 30]


# ---------------------------------------------------------------------------
# The common path


def _relu_members(gaussian_head):
    return BatchedMLP(3, 1, (32, 32), [5, 6, 7, 8], gaussian_head=gaussian_head).to(DTYPE)


def _common_path_data(n=300):
    generator = torch.Generator().manual_seed(3)
    X = torch.rand(n, 3, generator=generator, dtype=DTYPE)
    return X, torch.sin(4 * X).sum(-1, keepdim=True) + 0.1 * torch.randn(
        n, 1, generator=generator, dtype=DTYPE
    )


def _spy(monkeypatch, module, name):
    r"""A list that records every instance of ``module.name`` built from now on."""
    built = []
    original = getattr(module, name)

    def spy(*args, **kwargs):
        built.append(original(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(module, name, spy)
    return built


def _spy_on_common_path(monkeypatch):
    r"""A list that records every loss of the common path built from now on."""
    return _spy(monkeypatch, members_module, "CommonPathLoss")


@pytest.mark.parametrize("gaussian_head", [True, False])
@pytest.mark.parametrize("batch_size", [None, 64])
def test_the_common_path_trains_the_weights_of_the_general_path(
    monkeypatch, gaussian_head, batch_size
):
    # 100 Adam steps with an L2 penalty, on mini-batches with a short last batch (300 =
    # 4 x 64 + 44) or full-batch; the general path is taken by row weights of one. Over
    # many more steps at this learning rate the rounding differences of two equal
    # computations grow (Adam's normalised steps amplify them), so the comparison stops
    # at 100.
    X, Y = _common_path_data()
    config = TrainingConfig(epochs=100, max_steps=100, batch_size=batch_size, learning_rate=5e-3)
    built = _spy_on_common_path(monkeypatch)
    fast_network, general_network = _relu_members(gaussian_head), _relu_members(gaussian_head)
    fast = fit_members(fast_network, X, Y, config, l2_regularization=1e-3)
    assert len(built) == 1
    general = fit_members(
        general_network,
        X,
        Y,
        config,
        l2_regularization=1e-3,
        row_weights=torch.ones(4, X.shape[0], dtype=DTYPE),
    )
    assert len(built) == 1
    for fast_weights, general_weights in zip(
        fast_network.parameters(), general_network.parameters(), strict=True
    ):
        torch.testing.assert_close(fast_weights, general_weights, atol=1e-10, rtol=0)
    assert fast.steps_run == general.steps_run == 100
    assert fast.epochs_run == general.epochs_run
    assert torch.equal(fast.best_epoch, general.best_epoch)
    torch.testing.assert_close(fast.best_loss, general.best_loss, atol=1e-10, rtol=0)
    torch.testing.assert_close(
        torch.stack(fast.loss_history), torch.stack(general.loss_history), atol=1e-10, rtol=0
    )


@pytest.mark.parametrize("activation", ["relu", "gelu", "swish", "tanh"])
@pytest.mark.parametrize("gaussian_head", [True, False])
@pytest.mark.parametrize("batch_size", [None, 64])
def test_gradients_by_hand_train_the_weights_of_autograds(
    monkeypatch, activation, gaussian_head, batch_size
):
    X, Y = _common_path_data()
    config = TrainingConfig(epochs=100, max_steps=100, batch_size=batch_size, learning_rate=5e-3)
    common_path_loss = members_module.CommonPathLoss
    results = []
    for hand_gradients in (True, False):
        monkeypatch.setattr(
            members_module,
            "CommonPathLoss",
            lambda *args, hand=hand_gradients, **kwargs: common_path_loss(
                *args, **kwargs, hand_gradients=hand
            ),
        )
        network = BatchedMLP(3, 1, (16, 16), [5, 6, 7], activation, gaussian_head).to(DTYPE)
        results.append((network, fit_members(network, X, Y, config, l2_regularization=1e-3)))
    (hand, hand_result), (autograd, autograd_result) = results
    for hand_weights, autograd_weights in zip(
        hand.parameters(), autograd.parameters(), strict=True
    ):
        torch.testing.assert_close(hand_weights, autograd_weights, atol=1e-10, rtol=0)
    assert torch.equal(hand_result.best_epoch, autograd_result.best_epoch)
    torch.testing.assert_close(
        torch.stack(hand_result.loss_history),
        torch.stack(autograd_result.loss_history),
        atol=1e-10,
        rtol=0,
    )


def test_a_diverged_member_gets_no_gradient_by_hand():
    # Member 0 starts with a mean far out of range: its loss is infinite from the first
    # step, and the others train as they would without it (up to the rounding of batched
    # products).
    X, Y = _common_path_data(60)
    config = TrainingConfig(epochs=30, learning_rate=5e-3)
    network = BatchedMLP(3, 1, (16,), [5, 6, 7], "gelu", gaussian_head=True).to(DTYPE)
    with torch.no_grad():
        network.biases[-1][0, 0, 0] = 1e300
    result = fit_members(network, X, Y, config, l2_regularization=1e-3)
    assert result.diverged.tolist() == [True, False, False]
    alone = BatchedMLP(3, 1, (16,), [6, 7], "gelu", gaussian_head=True).to(DTYPE)
    fit_members(alone, X, Y, config, l2_regularization=1e-3)
    for trained, reference in zip(network.parameters(), alone.parameters(), strict=True):
        torch.testing.assert_close(trained[1:], reference, atol=1e-12, rtol=0)
    # The diverged member's gradients are zeros, not infinite or NaN.
    loss = members_module.CommonPathLoss(network, X, Y, batch_size=None, l2_regularization=0.0)
    losses, _ = loss()
    assert losses.isinf().tolist() == [True, False, False]
    loss.backward(losses, diverged=torch.tensor([True, False, False]))
    for parameter in network.parameters():
        assert parameter.grad[0].eq(0).all() and parameter.grad[1:].isfinite().all()


@pytest.mark.parametrize(
    ("options", "common"),
    [
        ({}, True),
        ({"l2_regularization": torch.tensor(1e-3)}, True),
        ({"l2_regularization": torch.tensor([0.0, 1e-3, 0.0, 1e-3])}, False),
        ({"row_weights": torch.ones(4, 40, dtype=DTYPE)}, False),
        ({"learning_rates": torch.full((4,), 1e-3)}, False),
        ({"known_noise": KnownNoise.from_variance(torch.full((40, 1), 0.1, dtype=DTYPE))}, True),
    ],
)
def test_the_common_path_is_taken_only_where_it_is_exact(monkeypatch, options, common):
    X, Y = _common_path_data(40)
    built = _spy_on_common_path(monkeypatch)
    fit_members(_relu_members(True), X, Y, TrainingConfig(epochs=2), **options)
    assert len(built) == int(common)
    for config in (
        TrainingConfig(epochs=2, optimizer="sgd"),
        TrainingConfig(epochs=2, gradient_clip_norm=1.0),
        TrainingConfig(epochs=2, lr_reduction_patience=1),
    ):
        fit_members(_relu_members(True), X, Y, config)
    dropout = BatchedMLP(3, 1, (8,), [1, 2], dropout=0.1).to(DTYPE)
    fit_members(dropout, X, Y, TrainingConfig(epochs=2), dropout_generator=torch.Generator())
    assert len(built) == int(common)


def test_training_in_single_precision_returns_the_network_in_its_own_dtype():
    X, Y = _common_path_data(100)
    config = TrainingConfig(epochs=50, learning_rate=1e-2)
    single, double = _relu_members(True), _relu_members(True)
    result = fit_members(single, X, Y, config, training_dtype=torch.float32)
    reference = fit_members(double, X, Y, config)
    assert all(p.dtype == DTYPE for p in single.parameters())
    # The same training up to single-precision rounding.
    torch.testing.assert_close(result.best_loss, reference.best_loss, atol=1e-3, rtol=1e-3)
    with pytest.raises(ValueError, match="floating-point dtype"):
        fit_members(single, X, Y, config, training_dtype=torch.int64)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
@pytest.mark.parametrize("batch_size", [None, 64])
def test_a_cuda_graph_replays_the_eager_steps(monkeypatch, batch_size):
    # The captured step replays the kernels of the eager one: the same weights.
    device = torch.device("cuda")
    X, Y = (tensor.to(device) for tensor in _common_path_data())
    captures = _spy(monkeypatch, loop_module, "_CapturedStep")
    networks = []
    for cuda_graphs in (True, False):
        config = TrainingConfig(
            epochs=100, max_steps=60, batch_size=batch_size, cuda_graphs=cuda_graphs
        )
        network = _relu_members(True).to(device)
        result = fit_members(network, X, Y, config, l2_regularization=1e-3)
        networks.append((network, result))
    assert len(captures) == 1
    (graphed, graphed_result), (eager, eager_result) = networks
    for graphed_weights, eager_weights in zip(
        graphed.parameters(), eager.parameters(), strict=True
    ):
        torch.testing.assert_close(graphed_weights, eager_weights, atol=1e-10, rtol=0)
    assert torch.equal(graphed_result.best_epoch, eager_result.best_epoch)
    torch.testing.assert_close(graphed_result.best_loss, eager_result.best_loss)


def test_the_forward_and_loss_of_a_step_trace_as_one_graph():
    # What a CUDA graph captures must not break into pieces that the host runs.
    X, Y = _common_path_data(100)
    network = _relu_members(True)
    loss = members_module.CommonPathLoss(network, X, Y, batch_size=32, l2_regularization=1e-3)
    generator = torch.Generator().manual_seed(0)
    loss.begin_epoch(torch.stack([torch.randperm(100, generator=generator) for _ in range(4)]))
    loss.select_batch(3, 32)
    explanation = torch._dynamo.explain(loss)()
    assert explanation.graph_break_count == 0
    assert explanation.graph_count == 1


# ---------------------------------------------------------------------------
# Known observation noise


def _known_noise(n: int, outputs: int = 2) -> KnownNoise:
    variance = torch.linspace(0.01, 1.0, n * outputs, dtype=DTYPE).reshape(n, outputs)
    return KnownNoise.from_variance(variance)


@pytest.mark.parametrize("gaussian_head", [True, False])
def test_row_losses_with_known_noise_by_hand(gaussian_head):
    network = BatchedMLP(2, 2, (6,), [1, 2], gaussian_head=gaussian_head).to(DTYPE)
    X, _ = _data(n=5)
    Y = torch.randn(5, 2, generator=torch.Generator().manual_seed(1), dtype=DTYPE)
    known = _known_noise(5)
    losses = member_row_losses(network, X, Y, per_member=False, known_noise=known)
    residuals = network(X).mean - Y
    if gaussian_head:
        # The Gaussian likelihood of the known variances, not the heads' own.
        variance = known.variance
        expected = 0.5 * torch.log(2 * torch.pi * variance) + residuals.pow(2) / (2 * variance)
        expected = expected.sum(-1)
    else:
        # Weighted least squares, output by output.
        expected = (known.weights * residuals.pow(2)).mean(-1)
    torch.testing.assert_close(losses, expected)
    # Per-member rows gather each member's rows' noise.
    indices = torch.tensor([[0, 3], [4, 4]])
    per_member = member_row_losses(
        network, X[indices], Y[indices], per_member=True, known_noise=known.rows(indices)
    )
    torch.testing.assert_close(per_member, expected.gather(1, indices))


@pytest.mark.parametrize("hand_gradients", [True, False])
@pytest.mark.parametrize("gaussian_head", [True, False])
@pytest.mark.parametrize("batch_size", [None, 64])
def test_known_noise_on_the_common_path_trains_the_weights_of_the_general_path(
    monkeypatch, hand_gradients, gaussian_head, batch_size
):
    # As the test above, with heteroscedastic known noise on two outputs; the general path
    # is taken by row weights of one.
    X, Y = _common_path_data()
    Y = torch.cat([Y, Y.square()], dim=-1)
    variance = torch.linspace(0.01, 2.0, Y.numel(), dtype=DTYPE).reshape(Y.shape)
    known = KnownNoise.from_variance(variance)
    config = TrainingConfig(epochs=100, max_steps=100, batch_size=batch_size, learning_rate=5e-3)
    common_path_loss = members_module.CommonPathLoss
    built = []

    def common_path(*args, **kwargs):
        built.append(common_path_loss(*args, **kwargs, hand_gradients=hand_gradients))
        return built[-1]

    monkeypatch.setattr(members_module, "CommonPathLoss", common_path)
    networks = [
        BatchedMLP(3, 2, (16, 16), [5, 6, 7], "gelu", gaussian_head=gaussian_head).to(DTYPE)
        for _ in range(2)
    ]
    fast = fit_members(networks[0], X, Y, config, l2_regularization=1e-3, known_noise=known)
    assert len(built) == 1
    general = fit_members(
        networks[1],
        X,
        Y,
        config,
        l2_regularization=1e-3,
        known_noise=known,
        row_weights=torch.ones(3, X.shape[0], dtype=DTYPE),
    )
    assert len(built) == 1
    for fast_weights, general_weights in zip(
        networks[0].parameters(), networks[1].parameters(), strict=True
    ):
        torch.testing.assert_close(fast_weights, general_weights, atol=1e-10, rtol=0)
    assert torch.equal(fast.best_epoch, general.best_epoch)
    torch.testing.assert_close(
        torch.stack(fast.loss_history), torch.stack(general.loss_history), atol=1e-10, rtol=0
    )


@pytest.mark.parametrize("gaussian_head", [True, False])
def test_known_noise_lets_precise_rows_dominate(gaussian_head):
    X, Y = _data(n=24, noise=0.0)
    noisy = torch.arange(24) % 2 == 1
    offset_Y = Y + 2.0 * noisy.unsqueeze(-1)
    variance = torch.where(noisy, 4.0, 1e-4).to(DTYPE).unsqueeze(-1)
    config = TrainingConfig(epochs=300, learning_rate=1e-2)
    weighted = _network(gaussian_head=gaussian_head)
    fit_members(weighted, X, offset_Y, config, known_noise=KnownNoise.from_variance(variance))
    unweighted = _network(gaussian_head=gaussian_head)
    fit_members(unweighted, X, offset_Y, config)

    def error(network):
        return (network(X).mean - Y).abs().mean().item()

    assert error(weighted) < 0.5 * error(unweighted)


def test_known_noise_must_have_the_targets_shape():
    X, Y = _data(n=8)
    with pytest.raises(ValueError, match="shape of train_Y"):
        fit_members(_network(), X, Y, TrainingConfig(epochs=1), known_noise=_known_noise(8))
