"""Tests of NOMU's training: the loss of the one-stage fit, the L2 penalty per branch and
the two stages of the noisy variant."""

import copy

import pytest
import torch

from botorch_nn_uq.nn.nomu import NOMUNetwork
from botorch_nn_uq.training import TrainingConfig, nomu_training
from botorch_nn_uq.training.nomu_loss import artificial_inputs
from botorch_nn_uq.training.nomu_training import nomu_l2_penalty, train_nomu_network

DTYPE = torch.float64
BOX = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=DTYPE)
LOSS = {"pi_sqr": 0.3, "pi_exp": 0.2, "c_exp": 5.0, "stable_loss": False}


def _data(n: int = 6, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    train_X = torch.rand(n, 2, generator=generator, dtype=DTYPE)
    return train_X, torch.sin(3 * train_X).sum(-1, keepdim=True)


def _network(learn_noise: bool = False, seed: int = 0) -> NOMUNetwork:
    return NOMUNetwork(
        2,
        1,
        (8, 8),
        (4,),
        activation="tanh",
        learn_noise=learn_noise,
        init_scale=None,
        generator=torch.Generator().manual_seed(seed),
    ).to(DTYPE)


def _squares(modules) -> torch.Tensor:
    return sum((p**2).sum() for module in modules for p in module.parameters())


def test_l2_penalty_weighs_each_branch() -> None:
    network = _network(learn_noise=True)
    mean_part = _squares(network.mean_branch_modules())
    uncertainty_part = _squares(network.uncertainty_branch_modules())
    shared = nomu_l2_penalty(network, 1e-2, scale=3.0)
    torch.testing.assert_close(shared, 3.0 * 1e-2 * (mean_part + uncertainty_part))
    separate = nomu_l2_penalty(network, 1e-2, uncertainty_l2_regularization=0.5, scale=3.0)
    torch.testing.assert_close(separate, 3.0 * (1e-2 * mean_part + 0.5 * uncertainty_part))


@pytest.mark.parametrize("train_mean", [True, False])
def test_one_stage_loss_by_hand(train_mean: bool) -> None:
    train_X, train_Y = _data()
    network = _network()
    initial = copy.deepcopy(network)
    result = train_nomu_network(
        network,
        train_X,
        train_Y,
        BOX,
        TrainingConfig(epochs=1),
        **LOSS,
        num_artificial_points=16,
        l2_regularization=1e-3,
        uncertainty_l2_regularization=1e-1,
        train_mean=train_mean,
        generator=torch.Generator().manual_seed(3),
    )
    # Replay the step's random stream: the artificial inputs are its only draw.
    artificial = artificial_inputs(BOX, 16, torch.Generator().manual_seed(3))
    with torch.no_grad():
        at_data, at_artificial = initial(train_X), initial(artificial)
        fit = ((at_data.mean - train_Y) ** 2).sum() if train_mean else 0.0
        in_sample = 0.3 * (at_data.raw_uncertainty**2).sum()
        out_of_sample = 0.2 * torch.exp(-5.0 * at_artificial.raw_uncertainty).mean()
        penalty = 1e-3 * _squares(initial.mean_branch_modules())
        penalty = penalty + 1e-1 * _squares(initial.uncertainty_branch_modules())
    expected = (fit + in_sample + out_of_sample + penalty).item()
    assert result.loss_history[0] == pytest.approx(expected, rel=1e-10)
    assert result.steps_run == 1


def test_noise_head_trains_the_branches_in_two_stages(monkeypatch) -> None:
    train_X, train_Y = _data(n=12)
    network = _network(learn_noise=True)
    network.mean_network[0].bias.requires_grad_(False)
    stages = []
    pi_exps = []
    train_network = nomu_training.train_network
    nomu_loss = nomu_training.nomu_loss

    def recording_train_network(module, *args, description, **kwargs):
        trainable = {name for name, p in module.named_parameters() if p.requires_grad}
        stages.append((description, trainable))
        return train_network(module, *args, description=description, **kwargs)

    def recording_nomu_loss(*args, pi_exp, **kwargs):
        pi_exps.append(pi_exp)
        return nomu_loss(*args, pi_exp=pi_exp, **kwargs)

    monkeypatch.setattr(nomu_training, "train_network", recording_train_network)
    monkeypatch.setattr(nomu_training, "nomu_loss", recording_nomu_loss)
    result = train_nomu_network(
        network,
        train_X,
        train_Y,
        BOX,
        TrainingConfig(epochs=4),
        **LOSS,
        num_artificial_points=16,
        l2_regularization=1e-3,
    )
    mean_and_noise = {
        name
        for name, _ in network.named_parameters()
        if name.startswith(("mean_network.", "noise_layer.")) and name != "mean_network.0.bias"
    }
    uncertainty = {
        name
        for name, _ in network.named_parameters()
        if name.startswith(("uncertainty_network.", "raw_uncertainty_layer."))
    }
    assert stages == [("NOMU mean and noise", mean_and_noise), ("NOMU uncertainty", uncertainty)]
    assert result.steps_run == 4
    # Every flag is restored, including the one that was off before.
    frozen = [name for name, p in network.named_parameters() if not p.requires_grad]
    assert frozen == ["mean_network.0.bias"]
    # The second stage divides pi_exp by 2 mean(sigma_n^2) of the frozen first stage.
    with torch.no_grad():
        noise_std = network(train_X).noise_std
    expected = 0.2 / (2.0 * noise_std.square().mean(dim=0))
    assert len(pi_exps) == 4
    for pi_exp in pi_exps:
        torch.testing.assert_close(pi_exp, expected)
