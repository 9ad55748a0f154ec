"""The AutoDEUQ training-hyperparameter space: sampling, mutation and the unit-cube
encoding."""

import json
from collections import Counter

import pytest
import torch

from botorch_nn_uq.ensembles.hyperparameter_space import (
    HyperparameterSpace,
    TrainingHyperparameters,
)

SPACE = HyperparameterSpace()


def _generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _differences(before: dict, after: dict) -> list[str]:
    assert before.keys() == after.keys()
    return [key for key in before if before[key] != after[key]]


@pytest.fixture(scope="module")
def samples() -> list[TrainingHyperparameters]:
    generator = _generator(0)
    return [SPACE.sample(generator) for _ in range(2000)]


def test_hyperparameter_samples(samples):
    assert all(SPACE.contains(h) for h in samples)
    learning_rates = torch.tensor([h.learning_rate for h in samples])
    batch_sizes = [h.batch_size for h in samples]
    assert learning_rates.min() >= 1e-4 and learning_rates.max() <= 1e-1
    assert all(type(b) is int and 1 <= b <= 256 for b in batch_sizes)
    # Log-uniform: half the mass below the geometric midpoints 10^-2.5 and 16.
    assert 0.45 < (learning_rates < 10**-2.5).double().mean() < 0.55
    assert 0.45 < sum(b < 16 for b in batch_sizes) / len(batch_sizes) < 0.55
    assert min(batch_sizes) == 1 and max(batch_sizes) > 200
    assert {h.optimizer for h in samples} == set(SPACE.optimizers)
    assert {h.lr_reduction_patience for h in samples} == set(range(10, 21))
    assert {h.early_stopping_patience for h in samples} == set(range(20, 31))
    assert SPACE.sample(_generator(9)) == SPACE.sample(_generator(9))


def test_encode_decode(samples):
    assert SPACE.dimension == 4 + 7
    for h in samples[:500]:
        x = SPACE.encode(h)
        assert x.shape == (SPACE.dimension,) and x.dtype == torch.float64
        assert ((0 <= x) & (x <= 1)).all()
        assert x[4:].sum() == 1
        assert SPACE.decode(x) == h
    edges = [
        TrainingHyperparameters(1e-4, 1, "sgd", 10, 20),
        TrainingHyperparameters(1e-1, 256, "nadam", 20, 30),
        TrainingHyperparameters(0.001234, 255, "adam", 11, 29),
    ]
    for h in edges:
        assert SPACE.decode(SPACE.encode(h)) == h
    assert SPACE.encode(edges[0])[:4].tolist() == [0, 0, 0, 0]
    assert SPACE.encode(edges[1])[:4].tolist() == [1, 1, 1, 1]


def test_decode_any_cube_point():
    points = torch.rand(1000, SPACE.dimension, generator=_generator(2), dtype=torch.float64)
    overshoot = 1.2 * points - 0.1  # an acquisition optimizer slightly out of bounds
    for x in torch.cat([points, overshoot, torch.zeros(1, SPACE.dimension)]):
        h = SPACE.decode(x)
        assert SPACE.contains(h)
        assert type(h.batch_size) is int and type(h.lr_reduction_patience) is int
    x = torch.zeros(SPACE.dimension)
    x[4 + 3] = 0.9
    x[4 + 5] = 0.9  # ties go to the first
    assert SPACE.decode(x).optimizer == SPACE.optimizers[3]
    with pytest.raises(ValueError, match=r"shape \(11,\)"):
        SPACE.decode(torch.zeros(3))
    with pytest.raises(ValueError, match="non-finite"):
        SPACE.decode(torch.full((SPACE.dimension,), float("nan")))


def test_hyperparameter_mutation(samples):
    generator = _generator(6)
    mutated = Counter()
    for parent in samples[:500]:
        child = SPACE.mutate(parent, generator)
        assert SPACE.contains(child)
        (key,) = _differences(parent.to_dict(), child.to_dict())
        mutated[key] += 1
    assert set(mutated) == set(samples[0].to_dict())


def test_hyperparameter_mutation_skips_fixed_fields():
    space = HyperparameterSpace(learning_rate=(1e-3, 1e-3), batch_size=(32, 32),
                                optimizers=("adam", "sgd"), lr_reduction_patience=(10, 10),
                                early_stopping_patience=(20, 20))  # fmt: skip
    h = space.sample(_generator())
    assert (h.learning_rate, h.batch_size) == (1e-3, 32)
    assert space.decode(space.encode(h)) == h  # degenerate ranges encode as 0
    assert space.mutate(h, _generator()).optimizer != h.optimizer
    single = HyperparameterSpace(learning_rate=(1e-3, 1e-3), batch_size=(32, 32),
                                 optimizers=("adam",), lr_reduction_patience=(10, 10),
                                 early_stopping_patience=(20, 20))  # fmt: skip
    with pytest.raises(ValueError, match="nothing to mutate"):
        single.mutate(single.sample(_generator()), _generator())
    with pytest.raises(ValueError, match="not in this space"):
        SPACE.mutate(TrainingHyperparameters(1.0, 32, "adam", 10, 20), _generator())


def test_hyperparameter_dict_round_trip(samples):
    for h in samples[:100]:
        assert TrainingHyperparameters.from_dict(json.loads(json.dumps(h.to_dict()))) == h
    with pytest.raises(ValueError, match="exactly the keys"):
        TrainingHyperparameters.from_dict({"learning_rate": 1e-3})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"learning_rate": (1e-1, 1e-4)}, "learning_rate range needs finite 0 < low <= high"),
        ({"learning_rate": (0.0, 1e-1)}, "learning_rate range needs finite 0 < low <= high"),
        ({"batch_size": (0, 256)}, r"batch_size range needs 0 < low <= high"),
        ({"batch_size": (1.5, 256)}, "batch_size range needs two integers"),
        ({"lr_reduction_patience": (20, 10)}, "lr_reduction_patience range needs 0 < low"),
        ({"early_stopping_patience": (30,)}, "early_stopping_patience range needs two"),
        ({"optimizers": ()}, "optimizers must not be empty"),
        ({"optimizers": ("adam", "lbfgs")}, r"Unknown optimizers \['lbfgs'\]"),
        ({"optimizers": ("adam", "adam")}, "optimizers must be distinct"),
    ],
)
def test_hyperparameter_space_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        HyperparameterSpace(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"learning_rate": -1.0}, "learning_rate must be positive"),
        ({"batch_size": 0}, "batch_size must be a positive integer"),
        ({"batch_size": 8.0}, "batch_size must be a positive integer"),
        ({"optimizer": "lbfgs"}, "Unknown optimizer 'lbfgs'"),
        ({"early_stopping_patience": 0}, "early_stopping_patience must be a positive"),
    ],
)
def test_training_hyperparameters_validation(kwargs, message):
    valid = {"learning_rate": 1e-3, "batch_size": 32, "optimizer": "adam",
             "lr_reduction_patience": 10, "early_stopping_patience": 20}  # fmt: skip
    with pytest.raises(ValueError, match=message):
        TrainingHyperparameters(**{**valid, **kwargs})
