"""BoTorch input transforms as the networks see them in training, and learnable ones.

A model maps its training inputs through ``input_transform`` in ``train`` mode once, at
construction, and trains its networks on the result; only the transforms with
``transform_on_train`` act there (``AppendFeatures``, for example, acts at evaluation
only). A transform with learnable parameters, such as BoTorch's ``Warp``, must instead
be applied at every training step, so that its parameters train with the network:
:class:`TransformedInputNetwork` does that during a fit (one network's, or the members'
of a deep ensemble, who share the transform).

Every fit starts a learnable transform from its parameters as the model was constructed
with them (:func:`learnable_state`), so that a refit with the same seed gives the same
model, or, when it warm-starts, from the warm start's learned parameters: the network it
starts from was trained on inputs mapped by those. Priors registered on a transform
(GPyTorch's ``register_prior``, which a GP's marginal likelihood adds) are not part of
the networks' losses.
"""

from __future__ import annotations

import torch
from botorch.models.transforms.input import (
    AffineInputTransform,
    ChainedInputTransform,
    InputTransform,
)
from torch import Tensor, nn

from botorch_nn_uq.training.trained_networks import InputMappedNetwork


def transform_components(transform: InputTransform) -> list[InputTransform]:
    r"""The transforms of a ``ChainedInputTransform`` in order, or ``[transform]``."""
    if isinstance(transform, ChainedInputTransform):
        return list(transform.values())
    return [transform]


def apply_training_transforms(transform: InputTransform, X: Tensor) -> Tensor:
    r"""``X`` mapped as training inputs are: through every component with
    ``transform_on_train``, with its current (fitted) coefficients and parameters.

    Components run in ``eval`` mode, so a ``Normalize`` that learns its bounds is not
    refitted to ``X``.

    Args:
        transform: An input transform.
        X: A ``batch_shape x n x d`` tensor.

    Returns:
        The ``batch_shape x n x d'`` mapped tensor (differentiable in the transforms'
        parameters).
    """
    for component in transform_components(transform):
        if not component.transform_on_train:
            continue
        was_training = component.training
        component.eval()
        try:
            X = component.transform(X)
        finally:
            component.train(was_training)
    return X


class InputCoordinatesError(ValueError):
    r"""Raised when a warm start normalised its inputs to another box and the model's
    network cannot be re-expressed in the new fit's coordinates (it has no
    ``rebase_inputs``); a BO run's continual fit then refits cold."""


def affine_rebase(
    old: InputTransform | None, new: InputTransform | None
) -> tuple[Tensor, Tensor] | None:
    r"""How the coordinates of one affine input transform (e.g. ``Normalize`` to a box)
    are expressed in another's: ``u_old = shift + scale * u_new`` for the same input.

    A warm start from a model normalised to another box (a region-local fit whose
    neighbourhood moved) uses it to carry the previous network's function over exactly.

    Args:
        old: The warm start's input transform.
        new: This fit's input transform.

    Returns:
        ``(scale, shift)``, two ``d``-vectors, if both transforms are single affine
        transforms of ``d`` inputs that differ; ``None`` if they are equal or not both
        affine (the inputs are then taken as they are).

    Raises:
        InputCoordinatesError: If the transforms differ and one has a batch shape.
    """
    if not (isinstance(old, AffineInputTransform) and isinstance(new, AffineInputTransform)):
        return None
    if torch.equal(old.offset, new.offset) and torch.equal(old.coefficient, new.coefficient):
        return None
    if any(t.numel() != t.shape[-1] for t in (old.offset, new.offset)):
        raise InputCoordinatesError(
            "warm_start normalised its inputs to another box with a batched affine input "
            "transform; only one box per model can be re-expressed."
        )
    old_offset, old_coefficient = old.offset.reshape(-1), old.coefficient.reshape(-1)
    scale = new.coefficient.reshape(-1).to(old_coefficient) / old_coefficient
    shift = (new.offset.reshape(-1).to(old_offset) - old_offset) / old_coefficient
    return scale, shift


def learnable_parameter_names(transform: InputTransform | None) -> list[str]:
    r"""The names of ``transform``'s parameters that require gradients (e.g. the
    concentrations of ``Warp``); empty for ``None`` and fixed transforms."""
    if transform is None:
        return []
    return [name for name, parameter in transform.named_parameters() if parameter.requires_grad]


def learnable_state(transform: InputTransform | None) -> dict[str, Tensor]:
    r"""Detached copies of ``transform``'s learnable parameters by name (those of
    :func:`learnable_parameter_names`); empty for ``None`` and fixed transforms."""
    if transform is None:
        return {}
    return {
        name: parameter.detach().clone()
        for name, parameter in transform.named_parameters()
        if parameter.requires_grad
    }


def load_learnable_state(transform: InputTransform, state: dict[str, Tensor]) -> None:
    r"""Set ``transform``'s learnable parameters to ``state`` (from
    :func:`learnable_state`), in the parameters' dtype and on their device.

    Raises:
        ValueError: If ``state`` does not name exactly the learnable parameters of
            ``transform``, or a value has another shape.
    """
    parameters = dict(transform.named_parameters())
    names = learnable_parameter_names(transform)
    if sorted(state) != sorted(names) or any(
        state[name].shape != parameters[name].shape for name in names
    ):
        shapes = {name: tuple(value.shape) for name, value in state.items()}
        raise ValueError(
            f"Learnable input-transform parameters {shapes} do not fit the transform "
            f"{type(transform).__name__}, whose learnable parameters are "
            f"{ {name: tuple(parameters[name].shape) for name in names} }."
        )
    with torch.no_grad():
        for name in names:
            parameters[name].copy_(state[name])


class TrainingInputs(nn.Module):
    r"""An input transform as a module that maps inputs as training inputs are mapped
    (:func:`apply_training_transforms`): what the torch-only training code
    (:func:`~botorch_nn_uq.training.members.fit_members`,
    :func:`~botorch_nn_uq.training.nomu_training.train_nomu_network`) calls and trains
    the parameters of.

    Args:
        transform: The input transform (trained in place).
    """

    def __init__(self, transform: InputTransform) -> None:
        super().__init__()
        self.transform = transform

    def forward(self, X: Tensor) -> Tensor:
        r"""``X`` (``batch_shape x n x d``) mapped as training inputs are."""
        return apply_training_transforms(self.transform, X)


class TransformedInputNetwork(InputMappedNetwork):
    r"""A network whose first argument goes through an input transform first: the
    module a fit trains when the transform has learnable parameters, so that the
    optimiser sees both.

    The transform is applied as to training inputs (:class:`TrainingInputs`) and stays
    in ``eval`` mode whatever the mode of the module. Attributes that this module does
    not have (``sample_masks``, ``hidden_layers``, ...) are the network's.

    Args:
        transform: The input transform (trained in place).
        network: The network, which takes transformed inputs.

    Example:
        >>> from botorch.models.transforms.input import Warp
        >>> module = TransformedInputNetwork(Warp(2, indices=[0, 1]), nn.Linear(2, 1))
        >>> sorted(name for name, _ in module.named_parameters())[-2:]
        ['network.bias', 'network.weight']
    """

    def __init__(self, transform: InputTransform, network: nn.Module) -> None:
        super().__init__(TrainingInputs(transform.eval()), network)

    @property
    def transform(self) -> InputTransform:
        r"""The input transform."""
        return self.inputs.transform

    def train(self, mode: bool = True) -> TransformedInputNetwork:
        r"""Set the network's mode; the transform stays in ``eval`` mode."""
        super().train(mode)
        self.transform.eval()
        return self
