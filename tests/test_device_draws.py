"""Random draws follow the package's device rule without a GPU: every draw is made on
the CPU, from the package's CPU generators, and moved to the data's device, so a seed
gives the same run on every device.

The data are meta tensors (shapes without values): a draw made on the data's device is
recorded by :class:`~tests.testing.DeviceDrawRecorder`, and a CPU tensor left behind
shows in the result's device. On a GPU the same draws failed (a CPU generator cannot
fill a CUDA tensor) or differed from the CPU's.
"""

import torch
from torch import nn

from botorch_nn_uq.calibration import uniform_points
from botorch_nn_uq.models.ensemble import member_validation_masks, resampling_row_weights
from botorch_nn_uq.nn.batched_mlp import BatchedMLP
from botorch_nn_uq.nn.mlp import DropoutMLP, dropout
from botorch_nn_uq.posteriors import FunctionEnsemblePosterior, MixtureOfGaussiansPosterior
from botorch_nn_uq.training import TrainingConfig, train_network
from botorch_nn_uq.training.nomu_loss import artificial_inputs
from tests.testing import DeviceDrawRecorder, DeviceTrafficCounter

META = torch.device("meta")


def _generator() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def test_nomu_artificial_inputs_are_drawn_on_the_cpu() -> None:
    box = torch.empty(2, 3, dtype=torch.float64, device=META)
    with DeviceDrawRecorder() as recorder:
        points = artificial_inputs(box, 5, _generator())
    assert recorder.draws == []
    assert points.device == META and points.shape == (5, 3)


def test_dropout_masks_are_drawn_on_the_cpu() -> None:
    network = DropoutMLP(2, 1, hidden_widths=[4, 3], dropout=0.2).to(META)
    X = torch.empty(6, 2, device=META)
    with DeviceDrawRecorder() as recorder:
        thinned = dropout(torch.empty(6, 4, device=META), 0.2, _generator())
        masks = network.sample_masks(7, _generator())
        network.train()
        output = network(X, generator=_generator())
    assert recorder.draws == []
    assert thinned.device == output.device == META
    assert [(mask.device, mask.shape) for mask in masks] == [(META, (7, 4)), (META, (7, 3))]


def test_batched_members_draw_their_training_dropout_on_the_cpu() -> None:
    members = BatchedMLP(2, 1, hidden_widths=[4], member_seeds=[1, 2, 3], dropout=0.3)
    rates = members.dropout_rates
    # The rates stay on the CPU: whether to draw masks at all is read from their values.
    members.to(META).dropout_rates = rates
    members.train()
    with DeviceDrawRecorder() as recorder:
        X = torch.empty(5, 2, dtype=torch.float64, device=META)
        output = members(X, generator=_generator())
    assert recorder.draws == []
    assert output.mean.device == META and output.mean.shape == (3, 5, 1)


def test_deep_ensemble_resamples_are_drawn_on_the_cpu_and_moved() -> None:
    members = BatchedMLP(2, 1, hidden_widths=[4], member_seeds=[1, 2])
    with DeviceDrawRecorder() as recorder:
        bootstrap = resampling_row_weights(members, 10, True, None, torch.float64, META)
        subsets = resampling_row_weights(members, 10, False, 0.5, torch.float64, META)
        held_out = member_validation_masks(members, 10, 0.3, torch.float64, META)
    assert recorder.draws == []
    for weights in (bootstrap, subsets, held_out):
        assert weights.device == META and weights.shape == (2, 10)
        assert weights.dtype == torch.float64


def test_posterior_samples_are_drawn_on_the_cpu() -> None:
    bank = torch.empty(4, 3, 1, device=META)
    ensemble = FunctionEnsemblePosterior(
        bank, draw_functions=lambda n: torch.empty(n, 3, 1, device=META)
    )
    with DeviceDrawRecorder() as recorder:
        # More samples than functions: fresh functions join the bank in a random order.
        samples = ensemble.rsample(torch.Size([6]))
    assert recorder.draws == []
    assert samples.device == META and samples.shape == (6, 3, 1)


def test_mixture_samples_draw_their_noise_on_the_cpu(monkeypatch) -> None:
    from botorch_nn_uq.posteriors import mixture as mixture_module

    # The weights are checked and the members picked from their values, which meta
    # tensors lack: CPU weights, and picks on the meta device.
    monkeypatch.setattr(
        mixture_module,
        "systematic_member_indices",
        lambda weights, sample_shape: torch.zeros(sample_shape, dtype=torch.long, device=META),
    )
    bank = torch.empty(4, 3, 1, device=META)
    posterior = MixtureOfGaussiansPosterior(bank, bank, weights=torch.ones(4))
    with DeviceDrawRecorder() as recorder:
        samples = posterior.rsample(torch.Size([2]))
    assert recorder.draws == []
    assert samples.device == META and samples.shape == (2, 3, 1)


def test_calibration_points_are_drawn_on_the_cpu() -> None:
    bounds = torch.empty(2, 3, dtype=torch.float64, device=META)
    with DeviceDrawRecorder() as recorder:
        points = uniform_points(bounds, 8, seed=1)
    assert recorder.draws == []
    assert points.device == META and points.shape == (8, 3)


def test_mini_batch_orders_index_the_data_on_the_network_device() -> None:
    # A network on the meta device and a loss that only records its indices: the orders
    # move to the network, whose device keeps the loop's bookkeeping too (the traffic
    # counter stands in for the values a meta tensor lacks when the loop reads them).
    network = nn.Linear(1, 1, device=META)
    devices = []

    def loss(indices: torch.Tensor | None) -> torch.Tensor:
        devices.append(indices.device)
        return network.weight.sum()

    config = TrainingConfig(epochs=2, batch_size=4, learning_rate=1e-3)
    with DeviceTrafficCounter(META), DeviceDrawRecorder() as recorder:
        train_network(network, loss, 10, config, generator=_generator())
    assert recorder.draws == []
    assert devices == [META] * 6
