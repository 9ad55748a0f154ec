r"""GPU properties of the training loop, measured without a GPU: on the ``meta`` device
(shapes without values) a dispatch counter sees every host synchronisation and every copy
between host and device; on the CPU, whose optimizer is fused as a GPU's is (the meta
device has no fused kernels), it counts the operations a step queues."""

import math

import pytest
import torch

from botorch_nn_uq.nn.batched_mlp import BatchedMLP
from botorch_nn_uq.training import TrainingConfig, fit_members
from botorch_nn_uq.training import loop as training_loop
from tests.testing import DeviceTrafficCounter

META = torch.device("meta")
#: Rows, batch size and steps: 10 batches per epoch (the last one short), 3 epochs.
NUM_DATA, BATCH_SIZE, STEPS = 950, 100, 30
#: The most device operations a step of the common path may queue.
OPERATION_BUDGET = 60


def _members(gaussian_head: bool = True, **options) -> BatchedMLP:
    return BatchedMLP(
        20, 1, (64, 64), member_seeds=[1, 2, 3, 4, 5], gaussian_head=gaussian_head, **options
    )


def _data(device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    X = torch.rand(NUM_DATA, 20, generator=generator, dtype=dtype)
    return X.to(device), X.sum(-1, keepdim=True).to(device)


def _count_fit(monkeypatch, network: BatchedMLP, config: TrainingConfig, device=META, **options):
    r"""Fit ``network`` on ``device`` under a counter whose records are the optimizer
    steps."""
    counter = DeviceTrafficCounter(device)
    original_step = training_loop._Bookkeeping.step

    def counted_step(self, optimizer):
        with counter.step():
            original_step(self, optimizer)

    monkeypatch.setattr(training_loop._Bookkeeping, "step", counted_step)
    X, Y = _data(device, options.pop("data_dtype", torch.float64))
    network = network.to(device)
    with counter:
        result = fit_members(network, X, Y, config, **options)
    return counter, result


@pytest.mark.parametrize("gaussian_head", [True, False])
@pytest.mark.parametrize("training_dtype", [None, torch.float32])
def test_a_common_path_step_never_waits_for_the_host(monkeypatch, gaussian_head, training_dtype):
    config = TrainingConfig(epochs=100, max_steps=STEPS, batch_size=BATCH_SIZE, learning_rate=5e-3)
    counter, result = _count_fit(
        monkeypatch,
        _members(gaussian_head),
        config,
        l2_regularization=1e-6,
        training_dtype=training_dtype,
    )
    assert result.steps_run == len(counter.steps) == STEPS
    epochs = math.ceil(STEPS / math.ceil(NUM_DATA / BATCH_SIZE))
    assert result.epochs_run == epochs
    for step in counter.steps:
        assert (step["syncs"], step["host_to_device"], step["device_to_host"]) == (0, 0, 0)
    # One read of the epoch's records per epoch and one of the best losses at the end;
    # the host sends each epoch's order and, once per fit, the batches' row weights, the
    # members' update scales and their two patience vectors.
    assert counter.totals["device_to_host"] == epochs + 1
    assert counter.totals["host_to_device"] == epochs + 4


@pytest.mark.parametrize("gaussian_head", [True, False])
def test_a_common_path_step_stays_within_its_operation_budget(monkeypatch, gaussian_head):
    config = TrainingConfig(epochs=100, max_steps=STEPS, batch_size=BATCH_SIZE, learning_rate=5e-3)
    counter, _ = _count_fit(
        monkeypatch,
        _members(gaussian_head),
        config,
        device=torch.device("cpu"),
        l2_regularization=1e-6,
    )
    # The optimizer creates its state in the first step.
    operations = [step["operations"] for step in counter.steps[1:]]
    assert max(operations) <= OPERATION_BUDGET


@pytest.mark.parametrize("device", [META, torch.device("cpu")], ids=str)
def test_every_step_of_two_epochs_queues_the_same_operations_on_the_same_shapes(
    monkeypatch, device
):
    # The short last batch is padded to the others' shape, so one captured step fits all.
    config = TrainingConfig(epochs=2, batch_size=BATCH_SIZE, learning_rate=5e-3)
    counter, result = _count_fit(
        monkeypatch, _members(), config, device=device, l2_regularization=1e-6
    )
    assert result.epochs_run == 2 and len(counter.steps) == 20
    # The optimizer creates its state in the first step.
    sequences = {tuple(step["sequence"]) for step in counter.steps[1:]}
    assert len(sequences) == 1


def test_the_full_batch_step_keeps_best_weights_without_the_host(monkeypatch):
    epochs = 2 * training_loop.HOST_READ_EPOCHS + 3
    config = TrainingConfig(epochs=epochs, learning_rate=5e-3)
    counter, result = _count_fit(monkeypatch, _members(), config, l2_regularization=1e-6)
    assert result.epochs_run == len(counter.steps) == len(result.loss_history) == epochs
    for step in counter.steps:
        assert (step["syncs"], step["host_to_device"], step["device_to_host"]) == (0, 0, 0)
    # Nothing is decided on the host between epochs: the records of HOST_READ_EPOCHS
    # epochs at a time, the rest at the end, then the best losses.
    assert counter.totals["device_to_host"] == 3 + 1


def test_the_general_path_step_never_waits_for_the_host(monkeypatch):
    # Row weights and per-member learning rates take the general path.
    config = TrainingConfig(epochs=100, max_steps=STEPS, batch_size=BATCH_SIZE, learning_rate=5e-3)
    counter, result = _count_fit(
        monkeypatch,
        _members(),
        config,
        row_weights=torch.ones(5, NUM_DATA, dtype=torch.float64, device=META),
        learning_rates=torch.full((5,), 1e-3, dtype=torch.float64),
    )
    assert result.steps_run == STEPS
    for step in counter.steps:
        assert (step["syncs"], step["host_to_device"], step["device_to_host"]) == (0, 0, 0)
