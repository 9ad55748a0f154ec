r"""Batched training data (``batch_shape x n x d``, ``batch_shape x n x m``), as BoTorch's
batched GPs take them, and the drop-in scenario that runs the same calls on
``SingleTaskGP`` and on a model of every family side by side: the ``"batched-models"``
cell of the feature table (:func:`batched_models_scenario`, registered in
``tests/drop_in/scenarios.py``).

The calls are those of BoTorch's ``batch_mode_cross_validation`` tutorial (as read in
pytorch/botorch at commit ``e390e13``, October 2025): ``gen_loo_cv_folds(train_X,
train_Y, train_Yvar)`` and ``batch_cross_validation(model_cls, mll_cls, cv_folds)``, whose
model is built on ``n x (n - 1) x d`` folds and asked for its posterior at each fold's
held-out point; the package's models take ``mll_cls=NetworkLoss`` where a GP takes
``ExactMarginalLogLikelihood``. Before them, a model is built on batched data with
batched transforms (``Normalize(d, batch_shape=...)``, ``Standardize(m,
batch_shape=...)``), and its batch shape and posterior shapes are compared with the GP's
for every input layout a batched GP accepts (``q x d``, ``batch_shape x q x d``, and the
``b x 1 x q x d`` and ``b x batch_shape x q x d`` that ``optimize_acqf`` passes). A
family that takes no batched data raises its refusal at construction, which names the
remedy.
"""

from __future__ import annotations

import torch
from botorch.cross_validation import batch_cross_validation, gen_loo_cv_folds
from botorch.models import SingleTaskGP
from botorch.models.transforms import Normalize, Standardize
from gpytorch.mlls import ExactMarginalLogLikelihood
from torch import Tensor

from botorch_nn_uq.fit import NetworkLoss
from tests.drop_in.setting import DIM, build, family_options, fit, model_class, toy_data

#: The batch shape of the scenario's training data.
BATCH_SHAPE = torch.Size([2])
#: The known noise variance of the cross-validation's observations.
NOISE_VARIANCE = 1e-3
#: The input layouts of the posterior calls: ``q x d``, ``batch_shape x q x d``,
#: ``b x 1 x q x d`` and ``b x batch_shape x q x d`` (``q = 3``, ``b = 4``).
QUERY_SHAPES = ((3,), (2, 3), (4, 1, 3), (4, 2, 3))


def batched_toy_data() -> tuple[Tensor, Tensor]:
    r"""Two batch elements: the toy data and the toy data reflected with its outcomes
    negated, ``2 x n x 2`` and ``2 x n x 1``."""
    train_X, train_Y = toy_data()
    return torch.stack([train_X, 1 - train_X]), torch.stack([train_Y, -train_Y])


def batched_transforms() -> dict[str, object]:
    r"""``Normalize`` and ``Standardize`` per batch element, as a batched GP takes them."""
    return {
        "input_transform": Normalize(DIM, batch_shape=BATCH_SHAPE),
        "outcome_transform": Standardize(1, batch_shape=BATCH_SHAPE),
    }


def cross_validation(family: str):
    r"""BoTorch's ``batch_mode_cross_validation`` tutorial on the toy data with known
    noise: leave-one-out folds, and one batched model fitted on all of them."""
    train_X, train_Y = toy_data()
    folds = gen_loo_cv_folds(train_X, train_Y, torch.full_like(train_Y, NOISE_VARIANCE))
    if family == "gp":
        return folds, batch_cross_validation(SingleTaskGP, ExactMarginalLogLikelihood, folds)
    return folds, batch_cross_validation(
        model_class(family),
        NetworkLoss,
        folds,
        fit_args={"seed": 0},
        model_init_kwargs=family_options(family),
    )


def batched_models_scenario(family: str) -> None:
    r"""The ``"batched-models"`` cell: the same calls on ``SingleTaskGP`` and on
    ``family``'s model (see the module docstring)."""
    train_X, train_Y = batched_toy_data()
    gp = fit("gp", build("gp", train_X, train_Y, **batched_transforms()))
    model = fit(family, build(family, train_X, train_Y, **batched_transforms()))
    assert model.batch_shape == gp.batch_shape == BATCH_SHAPE
    for shape in QUERY_SHAPES:
        X = torch.rand(*shape, DIM, dtype=train_X.dtype, generator=torch.Generator().manual_seed(0))
        expected, posterior = gp.posterior(X), model.posterior(X)
        assert posterior.mean.shape == posterior.variance.shape == expected.mean.shape
        noisy = model.posterior(X, observation_noise=True)
        assert (noisy.variance >= posterior.variance).all()
    folds, gp_results = cross_validation("gp")
    _, results = cross_validation(family)
    assert results.model.batch_shape == gp_results.model.batch_shape == (folds.train_X.shape[0],)
    assert results.posterior.mean.shape == gp_results.posterior.mean.shape == folds.test_Y.shape
    # Each fold's model predicts its held-out point, as the tutorial's error measures it
    # (the toy outcomes spread over about two units).
    errors = (results.posterior.mean - folds.test_Y).abs()
    assert errors.isfinite().all() and errors.median() < 1.0
