"""Training a NOMU network (Heiss et al., 2022) with the shared training loop: one stage
on NOMU's loss, or two stages when the network learns the data noise (App. C.1)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from botorch_nn_uq.nn.nomu import NOMUNetwork
from botorch_nn_uq.training.config import TrainingConfig, TrainingResult
from botorch_nn_uq.training.loop import train_network
from botorch_nn_uq.training.losses import KnownNoise, l2_penalty
from botorch_nn_uq.training.nomu_loss import artificial_inputs, data_fit_loss, nomu_loss
from botorch_nn_uq.training.trained_networks import InputMappedNetwork


@contextmanager
def _trainable_only(network: nn.Module, modules: Iterable[nn.Module]) -> Iterator[None]:
    r"""Within the block, only the parameters of ``modules`` (that required gradients
    before) are trained; every flag is restored afterwards."""
    parameters = list(network.parameters())
    flags = [parameter.requires_grad for parameter in parameters]
    trainable = {id(parameter) for module in modules for parameter in module.parameters()}
    try:
        for parameter, flag in zip(parameters, flags, strict=True):
            parameter.requires_grad_(flag and id(parameter) in trainable)
        yield
    finally:
        for parameter, flag in zip(parameters, flags, strict=True):
            parameter.requires_grad_(flag)


def nomu_l2_penalty(
    network: NOMUNetwork,
    l2_regularization: float,
    uncertainty_l2_regularization: float | None = None,
    scale: float = 1.0,
) -> Tensor:
    r"""``lambda ||theta||^2`` over the trainable parameters of ``network``, with the
    uncertainty branch's own ``lambda`` if given, all multiplied by ``scale``.

    Args:
        network: The NOMU network.
        l2_regularization: ``lambda`` of all weights and biases (of the mean branch only
            when ``uncertainty_l2_regularization`` is given).
        uncertainty_l2_regularization: ``lambda`` of the uncertainty branch (its hidden
            layers and the raw-uncertainty output layer); ``None`` uses
            ``l2_regularization``.
        scale: A factor on the whole penalty.

    Returns:
        The scalar penalty.
    """
    if uncertainty_l2_regularization is None:
        return scale * l2_regularization * l2_penalty(network)
    mean_part = sum(l2_penalty(module) for module in network.mean_branch_modules())
    uncertainty_part = sum(l2_penalty(module) for module in network.uncertainty_branch_modules())
    return scale * (
        l2_regularization * mean_part + uncertainty_l2_regularization * uncertainty_part
    )


def train_nomu_network(
    network: NOMUNetwork,
    train_X: Tensor,
    train_Y: Tensor,
    artificial_input_box: Tensor,
    config: TrainingConfig,
    *,
    pi_sqr: float,
    pi_exp: float,
    c_exp: float,
    stable_loss: bool,
    num_artificial_points: int,
    l2_regularization: float,
    uncertainty_l2_regularization: float | None = None,
    train_mean: bool = True,
    known_noise: KnownNoise | None = None,
    input_transform: nn.Module | None = None,
    generator: torch.Generator | None = None,
    progress: bool = False,
) -> TrainingResult:
    r"""Train ``network`` in place on NOMU's loss plus its L2 penalty.

    Every gradient step draws ``num_artificial_points`` fresh artificial inputs from
    ``artificial_input_box``. Without a noise head the whole network
    is trained in one stage on :func:`~botorch_nn_uq.training.nomu_loss.nomu_loss`. With a
    noise head (``learn_noise``, App. C.1) the mean branch and the noise head are first
    trained on the Gaussian likelihood, then frozen, and the uncertainty branch is
    trained on the noisy loss (57), with ``pi_exp`` and ``lambda`` divided by ``2
    mean(sigma_hat_n^2)`` over the training inputs. With known observation noise (one
    stage, no noise head), terms (a) and (b) weigh every row by its precision weight (see
    :mod:`~botorch_nn_uq.training.nomu_loss`).

    With a learnable ``input_transform`` (BoTorch's ``Warp``) the training rows go
    through it at every step and its parameters train with the network (in the first
    stage only, with a noise head: the frozen mean branch must keep its inputs), while
    the artificial inputs are drawn in the network's own input units, as without it: a
    ``Warp`` maps its input box onto the unit cube whatever its concentrations, so the
    box of artificial inputs stays the transformed input box.

    Args:
        network: The network to train.
        train_X: An ``n x d`` tensor of (transformed) training inputs (untransformed
            with ``input_transform``).
        train_Y: An ``n x m`` tensor of (transformed) training targets.
        artificial_input_box: A ``2 x d`` tensor, the box of the artificial inputs (in
            the units of ``train_X``).
        config: The settings of the shared training loop (used by both stages).
        pi_sqr: Weight of the in-sample term (b).
        pi_exp: Weight of the out-of-sample term (c).
        c_exp: Steepness of term (c).
        stable_loss: Use the numerically stable penalties (App. B.2.7).
        num_artificial_points: The number ``l`` of artificial inputs per step.
        l2_regularization: ``lambda`` of the L2 penalty (see :func:`nomu_l2_penalty`).
        uncertainty_l2_regularization: The uncertainty branch's own ``lambda``.
        train_mean: Include the data-fit term (a) in the one-stage loss; ``False`` for a
            frozen, pre-trained mean branch.
        known_noise: The known observation noise of the training rows (``n x m``), for a
            network without a noise head.
        input_transform: A module with trainable parameters that maps the training rows
            to the network's inputs (a model's learnable input transform as
            :class:`~botorch_nn_uq.models.input_transforms.TrainingInputs`), trained with
            the network (in place).
        generator: The source of every random choice of the training (mini-batch order
            and artificial inputs, drawn in the order the steps need them); ``None``
            draws from torch's global generator.
        progress: Show a progress bar.

    Returns:
        The :class:`~botorch_nn_uq.training.TrainingResult` of the (last) stage.
    """
    num_data = train_X.shape[0]
    if known_noise is not None and network.noise_layer is not None:
        raise ValueError(
            "A NOMU network with a noise head learns the noise; known noise trains a "
            "network without one."
        )

    # What the loop trains and keeps the best weights of: the network and the transform.
    module = network if input_transform is None else InputMappedNetwork(input_transform, network)
    transforms = [] if input_transform is None else [input_transform]

    def rows(indices: Tensor | None) -> tuple[Tensor, Tensor]:
        X, Y = (train_X, train_Y) if indices is None else (train_X[indices], train_Y[indices])
        if input_transform is not None:
            X = input_transform(X)
        return X, Y

    if network.noise_layer is None:

        def loss(indices: Tensor | None) -> Tensor:
            X, Y = rows(indices)
            artificial = artificial_inputs(artificial_input_box, num_artificial_points, generator)
            output = network(torch.cat([X, artificial]))
            batch = X.shape[0]
            return nomu_loss(
                output.mean[:batch] if train_mean else None,
                Y,
                output.raw_uncertainty[:batch],
                output.raw_uncertainty[batch:],
                pi_sqr=pi_sqr,
                pi_exp=pi_exp,
                c_exp=c_exp,
                stable=stable_loss,
                weights=None if known_noise is None else known_noise.rows(indices).weights,
            ) + nomu_l2_penalty(network, l2_regularization, uncertainty_l2_regularization)

        return train_network(
            module,
            loss,
            num_data,
            config,
            progress=progress,
            description="NOMU",
            generator=generator,
        )

    def noise_loss(indices: Tensor | None) -> Tensor:
        X, Y = rows(indices)
        output = network(X)
        return data_fit_loss(output.mean, Y, output.noise_std) + nomu_l2_penalty(
            network, l2_regularization, uncertainty_l2_regularization
        )

    with _trainable_only(module, [*network.mean_branch_modules(), *transforms]):
        train_network(
            module,
            noise_loss,
            num_data,
            config,
            progress=progress,
            description="NOMU mean and noise",
            generator=generator,
        )
    with torch.no_grad():
        noise_std = network(rows(None)[0]).noise_std
    # Dividing pi_exp and lambda by 2 * mean(sigma_n^2) (per output; lambda by the
    # average over outputs) makes the noisy loss (57) a multiple of the noiseless
    # loss (4) for homoscedastic noise (App. C.1).
    consistency = 1.0 / (2.0 * noise_std.square().mean(dim=0))

    def uncertainty_loss(indices: Tensor | None) -> Tensor:
        X, _ = rows(indices)
        artificial = artificial_inputs(artificial_input_box, num_artificial_points, generator)
        raw = network(torch.cat([X, artificial])).raw_uncertainty
        batch = X.shape[0]
        return nomu_loss(
            None,
            train_Y,
            raw[:batch],
            raw[batch:],
            pi_sqr=pi_sqr,
            pi_exp=pi_exp * consistency,
            c_exp=c_exp,
            stable=stable_loss,
            noise_std=noise_std if indices is None else noise_std[indices],
        ) + nomu_l2_penalty(
            network,
            l2_regularization,
            uncertainty_l2_regularization,
            scale=consistency.mean().item(),
        )

    with _trainable_only(module, network.uncertainty_branch_modules()):
        return train_network(
            module,
            uncertainty_loss,
            num_data,
            config,
            progress=progress,
            description="NOMU uncertainty",
            generator=generator,
        )
