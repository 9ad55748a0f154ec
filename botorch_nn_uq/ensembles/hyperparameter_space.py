r"""The training-hyperparameter space of AutoDEUQ.

:class:`HyperparameterSpace` holds AutoDEUQ's training hyperparameters (learning rate,
batch size, optimizer, learning-rate-reduction and early-stopping patiences). Its points
are :class:`TrainingHyperparameters`; besides sampling and mutation it maps them to and
from the unit cube (:meth:`HyperparameterSpace.encode` /
:meth:`HyperparameterSpace.decode`) so a model-based sampler (e.g. a BoTorch GP with
UCB) can propose them. The architectures the searches pair them with live in
:mod:`botorch_nn_uq.ensembles.architecture_space`.

All randomness comes from an explicit :class:`torch.Generator`, so a search is
reproducible from its seed and independent of torch's global RNG.

Example:
    >>> space = HyperparameterSpace()
    >>> generator = torch.Generator().manual_seed(0)
    >>> parent = space.sample(generator)
    >>> child = space.mutate(parent, generator)
    >>> space.decode(space.encode(child)) == child
    True
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from botorch_nn_uq.checks import is_real_number
from botorch_nn_uq.ensembles._space_utils import is_int, randint, uniform
from botorch_nn_uq.training.config import OPTIMIZERS

# Learning rates are kept to this many significant digits, so that sampled values print
# cleanly and decode(encode(h)) == h exactly despite the log/exp round trip.
_LEARNING_RATE_DIGITS = 10


def _round_learning_rate(value: float, low: float, high: float) -> float:
    rounded = float(f"{value:.{_LEARNING_RATE_DIGITS}g}")
    return min(max(rounded, low), high)  # rounding must not leave the range


@dataclass(frozen=True)
class TrainingHyperparameters:
    r"""A point of a :class:`HyperparameterSpace`.

    Attributes:
        learning_rate: The optimizer's (initial) learning rate.
        batch_size: The mini-batch size.
        optimizer: One of :data:`~botorch_nn_uq.training.config.OPTIMIZERS`.
        lr_reduction_patience: Epochs without improvement of the validation loss before
            the learning rate is reduced (Keras' ``ReduceLROnPlateau``).
        early_stopping_patience: Epochs without improvement before training stops.
    """

    learning_rate: float
    batch_size: int
    optimizer: str
    lr_reduction_patience: int
    early_stopping_patience: int

    def __post_init__(self) -> None:
        if not (is_real_number(self.learning_rate) and self.learning_rate > 0):
            raise ValueError(f"learning_rate must be positive; got {self.learning_rate!r}.")
        if not math.isfinite(self.learning_rate):
            raise ValueError(f"learning_rate must be finite; got {self.learning_rate!r}.")
        for name in ("batch_size", "lr_reduction_patience", "early_stopping_patience"):
            value = getattr(self, name)
            if not (is_int(value) and value > 0):
                raise ValueError(f"{name} must be a positive integer; got {value!r}.")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(
                f"Unknown optimizer {self.optimizer!r}; valid: {', '.join(sorted(OPTIMIZERS))}."
            )

    def to_dict(self) -> dict[str, Any]:
        r"""A JSON-serialisable form."""
        return {
            "learning_rate": float(self.learning_rate),
            "batch_size": self.batch_size,
            "optimizer": self.optimizer,
            "lr_reduction_patience": self.lr_reduction_patience,
            "early_stopping_patience": self.early_stopping_patience,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainingHyperparameters:
        r"""The inverse of :meth:`to_dict`."""
        expected = {
            "learning_rate",
            "batch_size",
            "optimizer",
            "lr_reduction_patience",
            "early_stopping_patience",
        }
        if set(data) != expected:
            raise ValueError(
                f"A hyperparameter dict has exactly the keys {sorted(expected)}; "
                f"got {sorted(data)}."
            )
        return cls(**data)


@dataclass(frozen=True)
class HyperparameterSpace:
    r"""AutoDEUQ's space of training hyperparameters.

    Ranges are inclusive ``(low, high)`` pairs with ``0 < low <= high``; the integer
    ones hold integers.

    Args:
        learning_rate: Range of the learning rate, sampled log-uniformly.
        batch_size: Range of the batch size, sampled as a log-uniform integer.
        optimizers: The possible optimizers (keys of
            :data:`~botorch_nn_uq.training.config.OPTIMIZERS`), sampled uniformly.
        lr_reduction_patience: Range of the learning-rate-reduction patience (uniform).
        early_stopping_patience: Range of the early-stopping patience (uniform).

    The unit-cube encoding (:meth:`encode`) has ``dimension = 4 + len(optimizers)``
    coordinates: ``[log learning rate, log batch size, lr_reduction_patience,
    early_stopping_patience]``, each scaled linearly from its range to ``[0, 1]`` (a
    degenerate range ``low == high`` encodes as 0), followed by a one-hot block over
    ``optimizers`` in their given order.

    Example:
        >>> space = HyperparameterSpace()
        >>> h = space.sample(torch.Generator().manual_seed(0))
        >>> space.decode(space.encode(h)) == h
        True
    """

    learning_rate: tuple[float, float] = (1e-4, 1e-1)
    batch_size: tuple[int, int] = (1, 256)
    optimizers: tuple[str, ...] = (
        "sgd",
        "rmsprop",
        "adagrad",
        "adam",
        "adadelta",
        "adamax",
        "nadam",
    )
    lr_reduction_patience: tuple[int, int] = (10, 20)
    early_stopping_patience: tuple[int, int] = (20, 30)

    # Class constants (unannotated, so not dataclass fields).
    _INTEGER_RANGES = ("batch_size", "lr_reduction_patience", "early_stopping_patience")
    _RANGES = ("learning_rate", *_INTEGER_RANGES)
    _FIELDS = ("learning_rate", "batch_size", "optimizer", *_INTEGER_RANGES[1:])

    def __post_init__(self) -> None:
        for name in self._RANGES:
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(self, "optimizers", tuple(self.optimizers))
        if (
            len(self.learning_rate) != 2
            or not 0 < self.learning_rate[0] <= self.learning_rate[1] < math.inf
        ):
            raise ValueError(
                f"The learning_rate range needs finite 0 < low <= high; got {self.learning_rate}."
            )
        for name in self._INTEGER_RANGES:
            value = getattr(self, name)
            if len(value) != 2 or not all(is_int(v) for v in value):
                raise ValueError(f"The {name} range needs two integers; got {value!r}.")
            if not 0 < value[0] <= value[1]:
                raise ValueError(f"The {name} range needs 0 < low <= high; got {value!r}.")
        if not self.optimizers:
            raise ValueError("optimizers must not be empty.")
        unknown = [o for o in self.optimizers if o not in OPTIMIZERS]
        if unknown:
            raise ValueError(
                f"Unknown optimizers {unknown}; valid: {', '.join(sorted(OPTIMIZERS))}."
            )
        if len(set(self.optimizers)) != len(self.optimizers):
            raise ValueError(f"optimizers must be distinct; got {self.optimizers!r}.")

    @property
    def dimension(self) -> int:
        r"""``D``, the number of coordinates of :meth:`encode` (``4 + len(optimizers)``)."""
        return 4 + len(self.optimizers)

    def contains(self, hyperparameters: TrainingHyperparameters) -> bool:
        r"""Whether ``hyperparameters`` is a point of this space."""
        h = hyperparameters
        return (
            isinstance(h, TrainingHyperparameters)
            and self.learning_rate[0] <= h.learning_rate <= self.learning_rate[1]
            and h.optimizer in self.optimizers
            and all(
                getattr(self, name)[0] <= getattr(h, name) <= getattr(self, name)[1]
                for name in self._INTEGER_RANGES
            )
        )

    # -- sampling and mutation --------------------------------------------------------

    def sample(self, generator: torch.Generator) -> TrainingHyperparameters:
        r"""A random point: learning rate log-uniform, batch size a log-uniform integer
        (the exponential of a uniform log, rounded and clamped), optimizer uniform,
        patiences uniform integers (inclusive).

        Args:
            generator: The source of all randomness.
        """
        return TrainingHyperparameters(
            learning_rate=self._sample_learning_rate(generator),
            batch_size=self._sample_batch_size(generator),
            optimizer=self.optimizers[randint(0, len(self.optimizers), generator)],
            lr_reduction_patience=randint(
                self.lr_reduction_patience[0], self.lr_reduction_patience[1] + 1, generator
            ),
            early_stopping_patience=randint(
                self.early_stopping_patience[0], self.early_stopping_patience[1] + 1, generator
            ),
        )

    def mutate(
        self, hyperparameters: TrainingHyperparameters, generator: torch.Generator
    ) -> TrainingHyperparameters:
        r"""A copy with exactly one of the five hyperparameters changed.

        The field is drawn uniformly among those that can take another value; the
        learning rate and batch size are redrawn from their sampling distribution until
        they differ, the optimizer and patiences take a different value uniformly.

        Args:
            hyperparameters: The parent, a point of this space.
            generator: The source of all randomness.
        """
        h = hyperparameters
        if not self.contains(h):
            raise ValueError(f"The hyperparameters {h} are not in this space.")
        mutable = [
            name
            for name in self._FIELDS
            if (
                len(self.optimizers) > 1
                if name == "optimizer"
                else len(set(getattr(self, name))) > 1
            )
        ]
        if not mutable:
            raise ValueError("This space has a single point: nothing to mutate.")
        name = mutable[randint(0, len(mutable), generator)]
        current = getattr(h, name)
        if name in ("learning_rate", "batch_size"):
            draw = (
                self._sample_learning_rate if name == "learning_rate" else self._sample_batch_size
            )
            # Rejection keeps the sampling distribution (conditioned on a change). With
            # low < high no batch size has mass above ~0.6 (1 in the range (1, 2)) and a
            # repeated learning rate needs a range narrower than its 10 kept digits: the
            # cap only guards that degenerate case.
            for _ in range(1000):
                value = draw(generator)
                if value != current:
                    break
            else:
                raise ValueError(f"The {name} range {getattr(self, name)} is too narrow to mutate.")
        else:
            if name == "optimizer":
                choices: Sequence[Any] = self.optimizers
            else:
                low, high = getattr(self, name)
                choices = range(low, high + 1)
            others = [c for c in choices if c != current]
            value = others[randint(0, len(others), generator)]
        return TrainingHyperparameters(**{**h.to_dict(), name: value})

    # -- the unit-cube encoding -------------------------------------------------------

    def encode(self, hyperparameters: TrainingHyperparameters) -> Tensor:
        r"""Map to the unit cube ``[0, 1]^D`` (see the class docstring for the layout).

        Returns:
            A float64 tensor of shape ``(D,)``.
        """
        h = hyperparameters
        if not self.contains(h):
            raise ValueError(f"The hyperparameters {h} are not in this space.")
        x = torch.zeros(self.dimension, dtype=torch.float64)
        x[0] = _scale(math.log(h.learning_rate), *map(math.log, self.learning_rate))
        x[1] = _scale(math.log(h.batch_size), *map(math.log, self.batch_size))
        x[2] = _scale(h.lr_reduction_patience, *self.lr_reduction_patience)
        x[3] = _scale(h.early_stopping_patience, *self.early_stopping_patience)
        x[4 + self.optimizers.index(h.optimizer)] = 1.0
        return x

    def decode(self, x: Tensor) -> TrainingHyperparameters:
        r"""Map a point of the unit cube back to hyperparameters.

        Coordinates are clamped to ``[0, 1]`` first (so slight overshoots of an
        acquisition optimizer are harmless); integers are rounded, the optimizer is the
        argmax of the one-hot block (the first on ties). Every point of the cube decodes
        to a point of the space, and ``decode(encode(h)) == h``.

        Args:
            x: A tensor of shape ``(D,)``.
        """
        if x.shape != (self.dimension,):
            raise ValueError(
                f"Expected a point of shape ({self.dimension},); got {tuple(x.shape)}."
            )
        if not torch.isfinite(x).all():
            raise ValueError(f"Cannot decode a point with non-finite coordinates: {x.tolist()}.")
        x = x.detach().to(dtype=torch.float64, device="cpu").clamp(0.0, 1.0)
        values = x.tolist()
        log_lr = _unscale(values[0], *map(math.log, self.learning_rate))
        return TrainingHyperparameters(
            learning_rate=_round_learning_rate(math.exp(log_lr), *self.learning_rate),
            batch_size=_round_integer(
                math.exp(_unscale(values[1], *map(math.log, self.batch_size))), *self.batch_size
            ),
            optimizer=self.optimizers[int(torch.argmax(x[4:]).item())],
            lr_reduction_patience=_round_integer(
                _unscale(values[2], *self.lr_reduction_patience), *self.lr_reduction_patience
            ),
            early_stopping_patience=_round_integer(
                _unscale(values[3], *self.early_stopping_patience), *self.early_stopping_patience
            ),
        )

    # -- helpers ----------------------------------------------------------------------

    def _sample_learning_rate(self, generator: torch.Generator) -> float:
        low, high = map(math.log, self.learning_rate)
        value = math.exp(low + (high - low) * uniform(generator))
        return _round_learning_rate(value, *self.learning_rate)

    def _sample_batch_size(self, generator: torch.Generator) -> int:
        low, high = map(math.log, self.batch_size)
        return _round_integer(math.exp(low + (high - low) * uniform(generator)), *self.batch_size)


def _scale(value: float, low: float, high: float) -> float:
    return 0.0 if high == low else (value - low) / (high - low)


def _unscale(value: float, low: float, high: float) -> float:
    return low + value * (high - low)


def _round_integer(value: float, low: int, high: int) -> int:
    return min(max(round(value), low), high)
