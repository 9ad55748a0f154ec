"""BoTorch's community neural surrogate as a peer in the benchmarks: ``VBLLModel`` (a
variational Bayesian last layer on an MLP) with its own batch Thompson sampling
(``BLLMaxPosteriorSampling``, which optimises each sampled function with L-BFGS-B).

Importing this module registers two names in the package's BO registry, so the
benchmark runners drive the peer through the same BO loop, seeds and initial designs as
every other method:

- surrogate ``vbll``: ``VBLLModel`` (3 hidden layers of 64 ELU units, BoTorch's
  defaults) fitted on inputs scaled to the unit cube and standardised outcomes (it takes
  no transforms), with its own training loop (AdamW, learning rate 1e-3, mini-batches of
  32, early stopping after 100 epochs without improvement); the epochs are capped so that
  a fit takes at most ``VBLL_TRAINING_STEPS`` optimizer steps, like the package's
  step-budgeted networks;
- proposer ``vbll-ts``: ``BLLMaxPosteriorSampling`` with 10 restarts per sampled
  function, mapped back from the unit cube to the problem's box. It serves only ``vbll``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from botorch.models.model import Model
from botorch_community.acquisition.bll_thompson_sampling import BLLMaxPosteriorSampling
from botorch_community.models.vblls import VBLLModel
from torch import Tensor

from botorch_nn_uq.bo import (
    ACQUISITIONS,
    SURROGATES,
    AcquisitionContext,
    AcquisitionSpec,
    SurrogateSpec,
    register_acquisition,
    register_surrogate,
)
from botorch_nn_uq.training import seeded

VBLL_TRAINING_STEPS = 2000
VBLL_BATCH_SIZE = 32


def fit_vbll(
    train_X: Tensor,
    train_Y: Tensor,
    bounds: Tensor,
    seed: int,
    warm_start: VBLLModel | None = None,
    max_steps: int = VBLL_TRAINING_STEPS,
) -> VBLLModel:
    r"""Fit a ``VBLLModel`` on unit-cube inputs and standardised outcomes.

    Args:
        train_X: ``n x d`` inputs in problem units.
        train_Y: ``n x 1`` observations (to maximise).
        bounds: ``2 x d`` box of the problem.
        seed: Seed of the initialisation and the mini-batch order.
        warm_start: A model fitted here before whose parameters initialise this fit
            (VBLL's own ``initialization_params``, the continual training of Brunzema et
            al., 2025).
        max_steps: The cap on optimizer steps (whole epochs, at least one).

    Returns:
        The fitted model; it reads unit-cube inputs and predicts standardised outcomes.
    """
    unit_X = (train_X - bounds[0]) / (bounds[1] - bounds[0])
    standardised = (train_Y - train_Y.mean()) / train_Y.std().clamp_min(1e-12)
    batches_per_epoch = math.ceil(train_X.shape[0] / VBLL_BATCH_SIZE)
    with seeded(seed):
        model = VBLLModel(in_features=train_X.shape[-1], device=torch.device("cpu")).to(train_X)
        model.fit(
            unit_X,
            standardised,
            optimization_settings={
                "num_epochs": max(1, max_steps // batches_per_epoch),
                "batch_size": VBLL_BATCH_SIZE,
            },
            initialization_params=None if warm_start is None else warm_start.model.state_dict(),
        )
    return model


def restore_vbll(
    train_X: Tensor, train_Y: Tensor, bounds: Tensor, state: Mapping[str, Tensor]
) -> VBLLModel:
    r"""A ``VBLLModel`` fitted by :func:`fit_vbll`, rebuilt from its ``state_dict``."""
    model = VBLLModel(in_features=train_X.shape[-1], device=torch.device("cpu")).to(train_X)
    model.load_state_dict(state)
    return model.eval()


def propose_vbll_thompson(model: Model, context: AcquisitionContext, q: int) -> Tensor:
    r"""``q`` proposals of ``BLLMaxPosteriorSampling``, in problem units.

    Args:
        model: A model fitted by :func:`fit_vbll`.
        context: The BO step's data and seed.
        q: The batch size.

    Returns:
        A ``q x d`` tensor of proposals.
    """
    if not isinstance(model, VBLLModel):
        raise ValueError(f"vbll-ts serves only the vbll surrogate; got {type(model).__name__}.")
    bounds = context.bounds
    unit_box = torch.stack([torch.zeros_like(bounds[0]), torch.ones_like(bounds[0])])
    with seeded(context.seed):
        unit = BLLMaxPosteriorSampling(model, num_restarts=10, bounds=unit_box)(num_samples=q)
    return bounds[0] + (bounds[1] - bounds[0]) * unit.to(bounds)


def register() -> None:
    r"""Register ``vbll`` and ``vbll-ts`` (once per process)."""
    if "vbll" not in SURROGATES:
        register_surrogate(
            SurrogateSpec(
                "vbll",
                "BoTorch community VBLLModel (variational Bayesian last layer; unit-cube inputs)",
                fit_vbll,
                supports_warm_start=True,
                restore=restore_vbll,
            )
        )
    if "vbll-ts" not in ACQUISITIONS:
        register_acquisition(
            AcquisitionSpec(
                "vbll-ts",
                "BLLMaxPosteriorSampling: VBLL's own batch Thompson sampling",
                propose=propose_vbll_thompson,
            )
        )


register()
