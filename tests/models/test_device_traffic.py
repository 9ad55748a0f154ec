r"""A posterior call's traffic with its device, measured without a GPU: on the ``meta``
device a dispatch counter sees every host synchronisation and copy (see
:class:`~tests.testing.DeviceTrafficCounter`). Inside an acquisition optimisation a
posterior call should only queue work: checks of the fitted state ran when the model was
fitted, and the checks of the inputs read the device once."""

import pytest
import torch
from botorch.models.transforms import Normalize

from botorch_nn_uq.models import DeepEnsemble
from tests.testing import DeviceTrafficCounter

META = torch.device("meta")


@pytest.fixture(scope="module")
def meta_ensemble() -> DeepEnsemble:
    generator = torch.Generator().manual_seed(0)
    train_X = torch.rand(30, 3, generator=generator, dtype=torch.float64)
    train_Y = train_X.sum(-1, keepdim=True)
    bounds = torch.tensor([[0.0] * 3, [1.0] * 3], dtype=torch.float64)
    # No outcome transform: BoTorch's Standardize reads its `_is_trained` flag back from
    # the device at every untransform, which is BoTorch's read, not the package's.
    model = DeepEnsemble(
        train_X,
        (train_Y - train_Y.mean()) / train_Y.std(),
        input_transform=Normalize(3, bounds=bounds),
        outcome_transform=None,
        epochs=5,
    ).fit(seed=0)
    return model.to(META)


@pytest.mark.parametrize("observation_noise", [False, True])
def test_a_posterior_call_reads_the_device_once(meta_ensemble, observation_noise):
    X = torch.empty(8, 2, 3, dtype=torch.float64, device=META)
    with DeviceTrafficCounter(META) as counter:
        posterior = meta_ensemble.posterior(X, observation_noise=observation_noise)
        moments = posterior.mean, posterior.variance
    # One read: whether X holds NaN or infinite values and whether any input lies far
    # outside the bounds, copied back together.
    assert all(moment.shape == (8, 2, 1) for moment in moments)
    assert counter.totals["syncs"] == 0
    assert counter.totals["device_to_host"] == 1
    assert counter.totals["host_to_device"] == 0
