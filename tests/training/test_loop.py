"""Tests of the shared training loop."""

import math
from functools import partial

import pytest
import torch
from torch import nn

from botorch_nn_uq.training import NonFiniteLossError, TrainingConfig, TrainingResult, train_network
from tests.training.vector import DTYPE, Vector


def _linear_regression_data(num_data=32, seed=0):
    generator = torch.Generator().manual_seed(seed)
    X = torch.randn(num_data, 2, generator=generator, dtype=DTYPE)
    Y = X @ torch.tensor([[2.0], [-1.0]], dtype=DTYPE) + 0.5
    return X, Y


def _linear_model():
    model = nn.Linear(2, 1).to(DTYPE)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[0.3, 0.4]], dtype=DTYPE))
        model.bias.zero_()
    return model


def _mse_loss(model, X, Y):
    def loss_fn(indices):
        if indices is None:
            return ((model(X) - Y) ** 2).mean()
        return ((model(X[indices]) - Y[indices]) ** 2).mean()

    return loss_fn


# ---------------------------------------------------------------------------
# Convergence and best weights


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_linear_regression_converges(optimizer):
    X, Y = _linear_regression_data()
    model = _linear_model()
    loss_fn = _mse_loss(model, X, Y)
    config = TrainingConfig(epochs=400, learning_rate=0.1, optimizer=optimizer)
    result = train_network(model, loss_fn, len(X), config)
    assert isinstance(result, TrainingResult)
    assert result.epochs_run == 400
    assert len(result.loss_history) == 400
    assert result.loss_history[0] > 1.0
    assert result.best_loss < 1e-6 * result.loss_history[0]
    torch.testing.assert_close(
        model.weight.detach(), torch.tensor([[2.0, -1.0]], dtype=DTYPE), atol=1e-3, rtol=0
    )
    torch.testing.assert_close(
        model.bias.detach(), torch.tensor([0.5], dtype=DTYPE), atol=1e-3, rtol=0
    )
    assert not model.training


def test_minibatch_linear_regression_converges():
    X, Y = _linear_regression_data(num_data=40)
    model = _linear_model()
    torch.manual_seed(0)
    config = TrainingConfig(epochs=150, learning_rate=0.05, batch_size=8, optimizer="adam")
    result = train_network(model, _mse_loss(model, X, Y), len(X), config)
    assert result.best_loss < 1e-4 * result.loss_history[0]


def test_best_weights_are_restored_when_sgd_diverges_late():
    # 0.5 * (theta_1^2 + 100 theta_2^2) with lr just above 2 / 100: the first coordinate
    # converges while the second slowly diverges, so the loss falls and then rises again.
    module = Vector([1.0, 1e-3])
    curvature = torch.tensor([1.0, 100.0], dtype=DTYPE)
    visited = []

    def loss_fn(indices):
        visited.append(module.theta.detach().clone())
        return 0.5 * (curvature * module.theta**2).sum()

    config = TrainingConfig(epochs=400, learning_rate=0.0201, optimizer="sgd")
    result = train_network(module, loss_fn, 1, config)
    history = result.loss_history
    assert result.epochs_run == 400
    assert math.isfinite(history[-1])
    assert history[-1] > 10 * result.best_loss
    assert result.best_epoch not in (0, 399)
    assert result.best_loss == min(history)
    assert result.best_epoch == history.index(min(history))
    # The module holds the weights at which the best loss was computed (pre-step).
    assert torch.equal(module.theta.detach(), visited[result.best_epoch])
    with torch.no_grad():
        reevaluated = 0.5 * (curvature * module.theta**2).sum().item()
    assert math.isclose(reevaluated, result.best_loss, rel_tol=1e-12)


def test_best_weights_are_restored_when_adam_oscillates():
    module = Vector([1.3, -0.7])
    visited = []

    def loss_fn(indices):
        visited.append(module.theta.detach().clone())
        return (module.theta**2).sum()

    config = TrainingConfig(epochs=30, learning_rate=0.5, optimizer="adam")
    result = train_network(module, loss_fn, 1, config)
    assert result.loss_history[-1] > 10 * result.best_loss
    assert torch.equal(module.theta.detach(), visited[result.best_epoch])
    with torch.no_grad():
        assert math.isclose((module.theta**2).sum().item(), result.best_loss, rel_tol=1e-12)


def test_snapshot_is_a_copy_not_a_live_reference():
    # After the best epoch, the weights are changed in place (as an optimizer would); a
    # snapshot holding live references would follow them.
    module = Vector([2.0])
    epoch = {"count": 0}
    visited = []

    def loss_fn(indices):
        visited.append(module.theta.detach().clone())
        epoch["count"] += 1
        if epoch["count"] > 5:
            with torch.no_grad():
                module.theta.add_(100.0)
        return (module.theta**2).sum()

    config = TrainingConfig(epochs=10, learning_rate=0.1, optimizer="sgd")
    result = train_network(module, loss_fn, 1, config)
    assert result.best_epoch == 4
    assert torch.equal(module.theta.detach(), visited[4])
    torch.testing.assert_close(module.theta.detach(), torch.tensor([2.0 * 0.8**4], dtype=DTYPE))


def test_restored_weights_do_not_alias_the_snapshot_across_runs():
    # Two runs on the same module: the second must restore its own best weights, not
    # anything left over from (or shared with) the first run's snapshot.
    module = Vector([1.0])
    config = TrainingConfig(epochs=3, learning_rate=0.1, optimizer="sgd")
    first = train_network(module, lambda _: (module.theta**2).sum(), 1, config)
    assert first.best_epoch == 2
    torch.testing.assert_close(module.theta.detach(), torch.tensor([0.8**2], dtype=DTYPE))
    with torch.no_grad():
        module.theta.fill_(-1.0)
    second = train_network(module, lambda _: ((module.theta + 1.0) ** 2).sum() + 1.0, 1, config)
    assert second.best_epoch == 0
    assert second.best_loss == 1.0
    torch.testing.assert_close(module.theta.detach(), torch.tensor([-1.0], dtype=DTYPE))


# ---------------------------------------------------------------------------
# Early stopping, non-finite losses, mini-batches, validation


def test_early_stopping_on_a_plateau():
    module = Vector([1.0])
    values = [5.0, 4.0, 3.0] + [3.0] * 50
    calls = []

    def loss_fn(indices):
        epoch = len(calls)
        calls.append(epoch)
        return values[epoch] + 0.0 * module.theta.sum()

    config = TrainingConfig(
        epochs=50, learning_rate=0.1, optimizer="sgd", early_stopping_patience=4
    )
    result = train_network(module, loss_fn, 1, config)
    assert result.best_epoch == 2
    assert result.epochs_run == 2 + 1 + 4
    assert result.epochs_run < config.epochs
    assert result.loss_history == values[: result.epochs_run]


def test_early_stopping_respects_min_delta():
    module = Vector([1.0])
    values = [5.0, 4.0, 3.95, 3.9, 3.85, 3.8, 3.75]
    calls = []

    def loss_fn(indices):
        calls.append(None)
        return values[len(calls) - 1] + 0.0 * module.theta.sum()

    config = TrainingConfig(epochs=7, learning_rate=0.1, early_stopping_patience=2, min_delta=0.1)
    result = train_network(module, loss_fn, 1, config)
    # Improvements of 0.05 do not count: best stays at epoch 1, stop after 2 more epochs.
    assert result.best_epoch == 1
    assert result.best_loss == 4.0
    assert result.epochs_run == 4


def test_early_stopping_on_a_converging_loss():
    X, Y = _linear_regression_data()
    model = _linear_model()
    config = TrainingConfig(
        epochs=2000, learning_rate=0.1, optimizer="sgd", early_stopping_patience=5, min_delta=1e-8
    )
    result = train_network(model, _mse_loss(model, X, Y), len(X), config)
    assert result.epochs_run < 2000
    assert result.epochs_run == result.best_epoch + 1 + 5
    assert result.best_loss < 1e-6


@pytest.mark.parametrize("bad_value", [float("nan"), float("inf")])
def test_non_finite_loss_raises_with_the_epoch(bad_value):
    module = Vector([1.0])
    calls = []

    def loss_fn(indices):
        calls.append(None)
        loss = (module.theta**2).sum()
        return loss * bad_value if len(calls) == 4 else loss

    config = TrainingConfig(epochs=10, learning_rate=0.1, optimizer="sgd")
    with pytest.raises(NonFiniteLossError, match="epoch 3"):
        train_network(module, loss_fn, 1, config)


@pytest.mark.parametrize("progress", [False, True], ids=["records-read-in-blocks", "per-epoch"])
@pytest.mark.parametrize("bad_epoch", [0, 63, 64, 70, 149])
def test_a_full_batch_fit_raises_at_the_epoch_the_loss_stopped_being_finite(progress, bad_epoch):
    module = Vector([1.0])
    calls = []

    def loss_fn(indices):
        calls.append(None)
        loss = (module.theta**2).sum()
        return loss * float("inf") if len(calls) == bad_epoch + 1 else loss

    config = TrainingConfig(epochs=150, learning_rate=0.1, optimizer="sgd")
    with pytest.raises(NonFiniteLossError, match=f"became inf at epoch {bad_epoch}\\."):
        train_network(module, loss_fn, 1, config, progress=progress)


def _squared_norm(module, indices):
    return (module.theta**2).sum()


def test_records_read_in_blocks_are_those_read_every_epoch():
    results = []
    for progress in (False, True):
        module = Vector([1.0, -2.0])
        config = TrainingConfig(epochs=150, learning_rate=0.05)
        result = train_network(module, partial(_squared_norm, module), 1, config, progress=progress)
        results.append((result, module.theta.detach().clone()))
    (blocks, theta_blocks), (per_epoch, theta_per_epoch) = results
    assert torch.equal(theta_blocks, theta_per_epoch)
    assert blocks.best_epoch == per_epoch.best_epoch and blocks.best_loss == per_epoch.best_loss
    assert blocks.epochs_run == per_epoch.epochs_run == 150
    assert [float(v) for v in blocks.loss_history] == [float(v) for v in per_epoch.loss_history]


def test_non_finite_loss_in_a_minibatch_raises():
    module = Vector([1.0])

    def loss_fn(indices):
        if 7 in indices.tolist():
            return module.theta.sum() * float("nan")
        return module.theta.sum() ** 2

    torch.manual_seed(0)
    config = TrainingConfig(epochs=3, batch_size=2, learning_rate=0.1)
    with pytest.raises(NonFiniteLossError, match="epoch 0"):
        train_network(module, loss_fn, 10, config)


def test_minibatches_visit_every_row_once_per_epoch():
    module = Vector([1.0])
    batches = []

    def loss_fn(indices):
        batches.append(indices.clone())
        return (module.theta**2).sum()

    torch.manual_seed(0)
    config = TrainingConfig(epochs=3, learning_rate=0.01, batch_size=3, optimizer="sgd")
    train_network(module, loss_fn, 10, config)
    assert len(batches) == 3 * 4
    assert [len(batch) for batch in batches] == [3, 3, 3, 1] * 3
    epochs = [torch.cat(batches[4 * e : 4 * (e + 1)]) for e in range(3)]
    for rows in epochs:
        assert torch.equal(rows.sort().values, torch.arange(10))
    # Shuffled anew every epoch.
    assert not torch.equal(epochs[0], epochs[1]) or not torch.equal(epochs[1], epochs[2])


def test_the_generator_orders_the_minibatches():
    module = Vector([1.0])

    def batch_orders(generator):
        batches = []

        def loss_fn(indices):
            batches.append(indices.clone())
            return (module.theta**2).sum()

        config = TrainingConfig(epochs=2, learning_rate=0.01, batch_size=3, optimizer="sgd")
        train_network(module, loss_fn, 10, config, generator=generator)
        return torch.cat(batches)

    state = torch.random.get_rng_state()
    first = batch_orders(torch.Generator().manual_seed(4))
    assert torch.equal(torch.random.get_rng_state(), state)
    expected = torch.Generator().manual_seed(4)
    wanted = torch.cat([torch.randperm(10, generator=expected) for _ in range(2)])
    assert torch.equal(first, wanted)
    assert not torch.equal(first, batch_orders(torch.Generator().manual_seed(5)))


def test_member_mode_takes_member_generators_not_a_generator():
    module = Vector([[1.0], [2.0]])
    with pytest.raises(ValueError, match="member_generators"):
        train_network(
            module,
            lambda _: (module.theta**2).sum(-1),
            1,
            TrainingConfig(epochs=1),
            generator=torch.Generator(),
            member_generators=[torch.Generator(), torch.Generator()],
        )


def test_minibatch_epoch_loss_is_the_row_weighted_mean():
    module = Vector([1.0])
    row_losses = torch.arange(10, dtype=DTYPE) ** 2

    def loss_fn(indices):
        return row_losses[indices].mean() + 0.0 * module.theta.sum()

    torch.manual_seed(1)
    config = TrainingConfig(epochs=2, learning_rate=0.01, batch_size=4)
    result = train_network(module, loss_fn, 10, config)
    for loss in result.loss_history:
        assert math.isclose(loss, row_losses.mean().item(), rel_tol=1e-12)


def test_batch_size_at_least_num_data_trains_full_batch():
    module = Vector([1.0])
    received = []

    def loss_fn(indices):
        received.append(indices)
        return (module.theta**2).sum()

    train_network(module, loss_fn, 5, TrainingConfig(epochs=2, batch_size=5))
    train_network(module, loss_fn, 5, TrainingConfig(epochs=2, batch_size=50))
    assert received == [None] * 4


def test_validation_loss_is_the_monitored_loss():
    module = Vector([1.0])
    validation_values = [5.0, 3.0, 4.0, 1.0, 2.0, 6.0]
    states = []

    def validation_loss_fn():
        assert not torch.is_grad_enabled()
        assert not module.training
        states.append(module.theta.detach().clone())
        return torch.tensor(validation_values[len(states) - 1])

    def loss_fn(indices):
        assert module.training
        return module.theta.sum()  # gradient 1: SGD moves theta by -lr per epoch

    config = TrainingConfig(epochs=6, learning_rate=0.5, optimizer="sgd")
    result = train_network(module, loss_fn, 1, config, validation_loss_fn=validation_loss_fn)
    assert result.loss_history == validation_values
    assert result.best_epoch == 3
    assert result.best_loss == 1.0
    # The validation loss is evaluated after the epoch's step; those weights are kept.
    assert torch.equal(module.theta.detach(), states[3])
    torch.testing.assert_close(module.theta.detach(), torch.tensor([1.0 - 4 * 0.5], dtype=DTYPE))


def test_validation_loss_drives_early_stopping():
    module = Vector([1.0])
    calls = []

    def validation_loss_fn():
        calls.append(None)
        return torch.tensor(1.0 if len(calls) == 1 else 2.0)

    config = TrainingConfig(epochs=100, learning_rate=0.1, early_stopping_patience=3)
    result = train_network(
        module, lambda _: (module.theta**2).sum(), 1, config, validation_loss_fn=validation_loss_fn
    )
    assert result.best_epoch == 0
    assert result.epochs_run == 4


# ---------------------------------------------------------------------------
# Learning-rate decay and gradient clipping


def _recorded_sgd_steps(config, num_epochs):
    module = Vector([0.0])
    visited = []

    def loss_fn(indices):
        visited.append(module.theta.detach().clone())
        return module.theta.sum()  # gradient 1: each SGD step moves theta by -lr

    train_network(module, loss_fn, 1, config)
    positions = torch.cat(visited)
    return (positions[:-1] - positions[1:]).tolist()[: num_epochs - 1]


def test_learning_rate_decay_reduces_the_step_size():
    config = TrainingConfig(
        epochs=7, learning_rate=0.8, optimizer="sgd", lr_decay_rate=0.5, lr_decay_steps=2
    )
    steps = _recorded_sgd_steps(config, 7)
    expected = [0.8, 0.8, 0.4, 0.4, 0.2, 0.2]
    for step, target in zip(steps, expected, strict=True):
        assert math.isclose(step, target, rel_tol=1e-12)


def test_learning_rate_is_constant_without_decay():
    steps = _recorded_sgd_steps(TrainingConfig(epochs=5, learning_rate=0.3, optimizer="sgd"), 5)
    for step in steps:
        assert math.isclose(step, 0.3, rel_tol=1e-12)


def test_learning_rate_decay_counts_minibatch_steps():
    module = Vector([0.0])
    visited = []

    def loss_fn(indices):
        visited.append(module.theta.detach().clone())
        return module.theta.sum()

    torch.manual_seed(0)
    config = TrainingConfig(
        epochs=2,
        learning_rate=1.0,
        batch_size=2,
        optimizer="sgd",
        lr_decay_rate=0.5,
        lr_decay_steps=1,
    )
    train_network(module, loss_fn, 6, config)  # 3 steps per epoch
    positions = torch.cat(visited)
    steps = (positions[:-1] - positions[1:]).tolist()
    expected = [1.0, 0.5, 0.25, 0.125, 0.0625]
    for step, target in zip(steps, expected, strict=True):
        assert math.isclose(step, target, rel_tol=1e-12)


def test_gradient_clipping_limits_the_step():
    learning_rate, clip = 0.1, 0.5
    module = Vector([0.0, 0.0, 0.0, 0.0])
    visited = []

    def loss_fn(indices):
        visited.append(module.theta.detach().clone())
        return 100.0 * module.theta.sum()  # gradient norm 200

    config = TrainingConfig(
        epochs=3, learning_rate=learning_rate, optimizer="sgd", gradient_clip_norm=clip
    )
    train_network(module, loss_fn, 1, config)
    for before, after in zip(visited[:-1], visited[1:], strict=True):
        step = (after - before).norm().item()
        assert step <= learning_rate * clip * (1 + 1e-12)
        assert step >= 0.99 * learning_rate * clip
    # Without clipping the step is lr * 200.
    unclipped = Vector([0.0, 0.0, 0.0, 0.0])
    seen = []

    def unclipped_loss(indices):
        seen.append(unclipped.theta.detach().clone())
        return 100.0 * unclipped.theta.sum()

    config = TrainingConfig(epochs=2, learning_rate=learning_rate, optimizer="sgd")
    train_network(unclipped, unclipped_loss, 1, config)
    assert math.isclose((seen[1] - seen[0]).norm().item(), learning_rate * 200.0, rel_tol=1e-12)


# ---------------------------------------------------------------------------
# Frozen parameters, progress


def test_frozen_parameters_are_not_trained():
    module = Vector([1.0])
    module.frozen = nn.Parameter(torch.tensor([3.0], dtype=DTYPE), requires_grad=False)
    config = TrainingConfig(epochs=5, learning_rate=0.1, optimizer="sgd")
    train_network(module, lambda _: (module.theta**2).sum() + module.frozen.sum(), 1, config)
    assert module.frozen.item() == 3.0
    assert module.theta.item() < 1.0


def test_progress_bar_runs():
    module = Vector([1.0])
    config = TrainingConfig(epochs=3, learning_rate=0.1)
    result = train_network(
        module, lambda _: (module.theta**2).sum(), 1, config, progress=True, description="fit"
    )
    assert result.epochs_run == 3


# ---------------------------------------------------------------------------
# Threads


def test_training_runs_on_the_callers_threads_and_leaves_them_alone(monkeypatch):
    X, Y = _linear_regression_data()
    model = _linear_model()
    seen = []
    mse = _mse_loss(model, X, Y)

    def loss_fn(indices):
        seen.append(torch.get_num_threads())
        return mse(indices)

    def set_num_threads(threads):
        raise AssertionError("training changed the process-wide thread count")

    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with monkeypatch.context() as patched:
            patched.setattr(torch, "set_num_threads", set_num_threads)
            train_network(model, loss_fn, len(X), TrainingConfig(epochs=2))
        assert seen == [2, 2]
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(previous)


class _Linear(nn.Module):
    r"""``K`` scalar weights with the linear loss ``w`` (gradient 1): SGD steps equal the
    learning rate, so the recorded weights reveal the schedule."""

    def __init__(self, num_members):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(num_members, 1))


def test_learning_rate_is_reduced_on_a_plateau():
    module = _Linear(1)
    weights = []

    def loss_fn(indices):
        weights.append(module.w.item())
        return module.w.sum()

    # A huge min_delta makes every epoch after the first a plateau epoch.
    config = TrainingConfig(
        epochs=6, learning_rate=1.0, optimizer="sgd", min_delta=1e9, lr_reduction_patience=2,
        lr_reduction_factor=0.5,
    )  # fmt: skip
    train_network(module, loss_fn, 1, config)
    steps = [a - b for a, b in zip(weights[:-1], weights[1:], strict=True)]
    assert steps == pytest.approx([1.0, 1.0, 1.0, 0.5, 0.5])


def test_member_mode_reduces_each_members_learning_rate_on_its_own_plateau():
    module = _Linear(2)
    weights = []

    def loss_fn(indices):
        weights.append(module.w.detach().squeeze(-1).clone())
        return module.w.squeeze(-1)

    config = TrainingConfig(
        epochs=5, learning_rate=1.0, optimizer="sgd", min_delta=1e9, lr_reduction_factor=0.5
    )
    generators = [torch.Generator().manual_seed(i) for i in range(2)]
    train_network(
        module, loss_fn, 1, config, member_generators=generators,
        member_lr_reduction_patience=torch.tensor([1, 2]),
    )  # fmt: skip
    steps = torch.stack(weights[:-1]) - torch.stack(weights[1:])
    expected = torch.tensor([[1.0, 1.0], [1.0, 1.0], [0.5, 1.0], [0.25, 0.5]])
    torch.testing.assert_close(steps, expected)


def test_member_mode_stops_each_member_at_its_own_patience():
    module = _Linear(3)
    config = TrainingConfig(epochs=50, learning_rate=1.0, optimizer="sgd", min_delta=1e9)
    generators = [torch.Generator().manual_seed(i) for i in range(3)]
    result = train_network(
        module, lambda indices: module.w.squeeze(-1), 1, config,
        member_generators=generators, member_early_stopping_patience=torch.tensor([2, 4, 3]),
    )  # fmt: skip
    # Every member's best epoch is 0; training ends when the most patient member stops.
    assert result.best_epoch.tolist() == [0, 0, 0] and result.epochs_run == 5
    with pytest.raises(ValueError, match="member_early_stopping_patience"):
        train_network(
            module, lambda indices: module.w.squeeze(-1), 1, config,
            member_generators=generators, member_early_stopping_patience=torch.tensor([2, 0, 3]),
        )  # fmt: skip


@pytest.mark.parametrize("num_data", [40, 400, 4000])
def test_a_step_budget_fixes_the_number_of_steps_whatever_the_data_size(num_data):
    X, Y = _linear_regression_data(num_data)
    model = _linear_model()
    calls = []

    def loss(indices):
        calls.append(indices)
        return (model(X[indices]) - Y[indices]).pow(2).mean()

    config = TrainingConfig(epochs=10_000, max_steps=25, batch_size=16, learning_rate=1e-2)
    result = train_network(model, loss, num_data=num_data, config=config)
    assert result.steps_run == 25 and len(calls) == 25
    assert all(len(indices) <= 16 for indices in calls)
    # The last epoch may be cut by the budget; the epochs counted cover exactly 25 steps.
    assert result.epochs_run == math.ceil(25 / math.ceil(num_data / 16))


def test_epochs_end_training_before_the_step_budget():
    X, Y = _linear_regression_data(32)
    model = _linear_model()
    config = TrainingConfig(epochs=3, max_steps=1000, batch_size=8)
    result = train_network(
        model, lambda i: (model(X[i]) - Y[i]).pow(2).mean(), num_data=32, config=config
    )
    assert result.epochs_run == 3 and result.steps_run == 12


def test_a_full_batch_step_budget_equals_the_same_number_of_epochs():
    X, Y = _linear_regression_data(32)
    results = []
    for config in (
        TrainingConfig(epochs=50, learning_rate=1e-2),
        TrainingConfig(epochs=1000, max_steps=50, batch_size=64, learning_rate=1e-2),
    ):
        model = _linear_model()
        train_network(model, lambda i, m=model: (m(X) - Y).pow(2).mean(), 32, config)
        results.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    assert torch.equal(results[0], results[1])
