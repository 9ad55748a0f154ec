"""Torch building blocks for the neural surrogates: :class:`BatchedMLP`, ``K`` MLPs with
stacked parameters trained as one computation (the members of every ensemble), and
:func:`count_parameters`. NOMU's two-branch network, MC dropout's MLP and NEON's
backbone and EpiNet are in their modules (:mod:`botorch_nn_uq.nn.nomu`,
:mod:`botorch_nn_uq.nn.mlp`, :mod:`botorch_nn_uq.nn.neon`); the members' backward pass
written by hand, which the training loop's common path runs, is in
:mod:`botorch_nn_uq.nn.hand_backward`."""

from botorch_nn_uq.nn.batched_mlp import BatchedMLP
from botorch_nn_uq.nn.neon import count_parameters

__all__ = ["BatchedMLP", "count_parameters"]
