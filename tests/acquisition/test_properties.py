"""Property-based checks of every acquisition function: whatever incumbent, target,
variances and candidates it is given, it answers with a clear ``ValueError`` /
``TypeError`` or with finite values of the right shape (``-inf`` only for a log
probability where no improvement is possible). Never a silent NaN or all-zero answer
from a NaN argument. Each example runs on every available device (the CPU, and CUDA
where there is one)."""

import math

import pytest
import torch
from hypothesis import event, given
from hypothesis import strategies as st

from botorch_nn_uq.acquisition import (
    LeakyExpectedImprovement,
    LogRobustTargetProbabilityOfImprovement,
    RobustTargetExpectedImprovement,
    RobustTargetLowerConfidenceBound,
    RobustTargetProbabilityOfImprovement,
    compute_e_min,
    qLeakyExpectedImprovement,
    qRobustTargetExpectedImprovement,
)
from botorch_nn_uq.models import NOMU, DeepEnsemble
from tests.testing import available_devices

DTYPE = torch.float64
NON_FINITE = (math.nan, math.inf, -math.inf)


def _data():
    X = torch.rand(12, 2, dtype=DTYPE, generator=torch.Generator().manual_seed(0))
    return X, (3 * X).sin().sum(-1, keepdim=True)


@pytest.fixture(scope="module")
def models():
    r"""The models by name on each available device, fitted once per module."""
    fitted = {}
    for device in available_devices():
        X, Y = (tensor.to(device) for tensor in _data())
        bounds = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=DTYPE, device=device)
        fitted[device] = {
            "deep-ensemble": DeepEnsemble(X, Y, epochs=30).fit(seed=0),
            "nomu": NOMU(X, Y, bounds=bounds, epochs=30, num_artificial_points=16).fit(seed=0),
        }
    return fitted


@st.composite
def numbers(draw, low: float, high: float):
    r"""A value in ``[low, high]`` seven times in eight, else a non-finite one or, for
    a non-negative quantity, a negative one."""
    kind = draw(st.sampled_from(["valid"] * 7 + ["invalid"]))
    if kind == "valid":
        return draw(st.floats(low, high))
    return draw(st.sampled_from(NON_FINITE + ((-0.5,) if low >= 0 else ())))


def _robust_poi(acquisition_class):
    r"""A builder of (log) robust PoI, which take the same arguments."""
    return lambda model, a: acquisition_class(
        model,
        target=a["target"],
        best_f=a["e_min"],
        aleatoric_variance=a["variance"],
        zeta=a["zeta"],
    )


ACQUISITIONS = {
    "leaky-ei": lambda model, a: LeakyExpectedImprovement(
        model, best_f=a["best_f"], negative_slope=a["slope"]
    ),
    "q-leaky-ei": lambda model, a: qLeakyExpectedImprovement(
        model,
        best_f=a["best_f"],
        negative_slope=a["slope"],
    ),
    "robust-ei": lambda model, a: RobustTargetExpectedImprovement(
        model, target=a["target"], best_f=a["e_min"], aleatoric_variance=a["variance"]
    ),
    "robust-poi": _robust_poi(RobustTargetProbabilityOfImprovement),
    "log-robust-poi": _robust_poi(LogRobustTargetProbabilityOfImprovement),
    "robust-lcb": lambda model, a: RobustTargetLowerConfidenceBound(
        model, target=a["target"], aleatoric_variance=a["variance"], quantile=a["quantile"]
    ),
    "q-robust-ei": lambda model, a: qRobustTargetExpectedImprovement(
        model,
        target=a["target"],
        best_f=a["e_min"],
        aleatoric_variance=a["variance"],
    ),
}
MONTE_CARLO = {"q-leaky-ei", "q-robust-ei"}


@st.composite
def arguments(draw):
    r"""Arguments of every acquisition, with the incumbent ``E_min`` computed from data
    that may hold a NaN, and a candidate batch that may hold one too."""
    target = draw(numbers(-3.0, 3.0))
    variance = draw(numbers(0.0, 1.0))
    Y = _data()[1].clone()
    if draw(st.sampled_from([False] * 7 + [True])):
        Y[0, 0] = draw(st.sampled_from(NON_FINITE))
    return {
        "best_f": draw(numbers(-3.0, 3.0)),
        "slope": draw(st.sampled_from([0.0, 0.1, 0.2, 0.5, -0.1, 1.5, math.nan])),
        "target": target,
        "variance": variance,
        "e_min_data": Y,
        "e_min_direct": draw(numbers(0.0, 10.0)),
        "use_data": draw(st.booleans()),
        "zeta": draw(numbers(0.0, 0.5)),
        "quantile": draw(st.sampled_from([0.05, 0.1, 0.5, 0.9, 0.0, 1.0, math.nan])),
        "batch": draw(st.sampled_from([(4,), (2, 3), (1,)])),
        "q": draw(st.integers(1, 3)),
        "nan_candidate": draw(st.sampled_from([False] * 7 + [True])),
    }


# Parametrised, not the `device` fixture: hypothesis refuses function-scoped fixtures.
@pytest.mark.parametrize("device", available_devices(), ids=str)
@pytest.mark.parametrize("model_name", ["deep-ensemble", "nomu"])
@pytest.mark.parametrize("name", list(ACQUISITIONS))
@given(a=arguments())
def test_a_clear_error_or_finite_values(models, device, model_name, name, a) -> None:
    model = models[device][model_name]
    q = a["q"] if name in MONTE_CARLO else 1
    X = torch.rand(*a["batch"], q, 2, dtype=DTYPE, generator=torch.Generator().manual_seed(1))
    if a["nan_candidate"]:
        X[..., 0, 0] = math.nan
    X = X.to(device)
    a = {**a, "e_min_data": a["e_min_data"].to(device)}
    try:
        a["e_min"] = (
            compute_e_min(a["e_min_data"], a["target"], a["variance"])
            if a["use_data"]
            else a["e_min_direct"]
        )
        values = ACQUISITIONS[name](model, a)(X)
    except (ValueError, TypeError) as error:
        event(f"refused: {type(error).__name__}")
        assert str(error)
        return
    event("evaluated")
    assert values.shape == a["batch"] and values.device == device
    assert not values.isnan().any()
    if name == "log-robust-poi":
        assert (values <= 0).all()
    else:
        assert values.isfinite().all()
    if name in ("robust-ei", "q-robust-ei", "robust-poi"):
        assert (values >= 0).all()
    if name == "robust-poi":
        assert (values <= 1).all()
