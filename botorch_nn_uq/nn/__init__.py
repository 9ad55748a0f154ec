"""Torch building blocks for the neural surrogates."""

from botorch_nn_uq.nn.neon import count_parameters

__all__ = ["count_parameters"]
