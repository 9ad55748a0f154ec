"""The smallest trainable module, for tests of the training loop and its optimizers."""

import torch
from torch import nn

DTYPE = torch.float64


class Vector(nn.Module):
    r"""A module holding one parameter vector ``theta``.

    Args:
        values: The initial entries of ``theta`` (a float64 tensor of their shape).
    """

    def __init__(self, values):
        super().__init__()
        self.theta = nn.Parameter(torch.tensor(values, dtype=DTYPE))
