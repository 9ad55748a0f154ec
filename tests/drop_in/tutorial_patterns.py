r"""BoTorch's tutorials that pass known observation noise (``train_Yvar``), and the drop-in
scenario that runs their patterns on every model family: the ``"known-noise"`` cell of
the feature table (:func:`known_noise_scenario`, registered in
``tests/drop_in/scenarios.py``), which ``tests/test_features.py`` also runs on every other
card by its name (the searched ensembles among them).

The tutorials, as read in pytorch/botorch at commit ``e390e13`` (October 2025), and where
each pattern is checked:

- ``closed_loop_botorch_only`` (closed-loop batch, constrained BO with qLogEI and
  qLogNEI): ``SingleTaskGP(train_x, train_obj, train_yvar.expand_as(train_obj),
  input_transform=Normalize(d))`` for the objective and for a constraint, combined in a
  ``ModelListGP``; ``qLogNoisyExpectedImprovement`` with ``X_baseline``, an objective and
  a constraint; each iteration's model loads the previous one's ``state_dict``:
  :func:`closed_loop_with_a_constraint`, :func:`state_dict_round_trip`.
- ``multi_objective_bo``: ``SingleTaskGP(train_x, train_y, train_yvar)`` (positional,
  ``torch.full_like(train_y, NOISE_SE[i] ** 2)``) per objective in a ``ModelListGP``,
  with ``qNoisyExpectedHypervolumeImprovement``: :func:`multi_objective`.
- ``bo_with_warped_gp``: the keyword form ``SingleTaskGP(train_X=..., train_Y=...,
  train_Yvar=train_yvar.expand_as(train_obj), input_transform=Warp(...))`` with
  ``qLogNoisyExpectedImprovement``: :func:`positional_and_keyword` (with ``Normalize``;
  ``Warp`` itself is the learnable-transforms cell's, which two families refuse).
- ``decoupled_mobo``, ``robust_multi_objective_bo``, ``Multi_objective_multi_fidelity_BO``
  and ``ibnn_bo``: "noiseless" observations as ``train_Yvar=torch.full_like(train_y,
  1e-7)`` (``1e-8``, ``1e-6``), rounded up to GPyTorch's floor with a warning:
  :func:`nearly_noiseless`.
- ``batch_mode_cross_validation``: ``gen_loo_cv_folds(train_X, train_Y, train_Yvar)``
  and ``batch_cross_validation``, which build models on batched training data (with
  ``train_Yvar`` batched too): the batched-models cell's scenario,
  :func:`~tests.drop_in.batched_data.batched_models_scenario`, which runs it on the GP and
  on every family (those without batched training data raise their refusal).
- ``saasbo``: ``SaasFullyBayesianSingleTaskGP(..., train_Yvar=torch.full_like(train_Y,
  1e-6))``: another model class; its noise is :func:`nearly_noiseless`'s.

Tensor-valued outputs come from ``composite_bo_with_hogp``: ``HigherOrderGP(train_X,
train_Y, outcome_transform=FlattenedStandardize(train_Y.shape[1:]),
input_transform=Normalize(d))`` on ``n x o1 x o2`` outputs, with ``qExpectedImprovement``,
an ``IIDNormalSampler`` and a ``GenericMCObjective`` over the outputs' grid: the
``"tensor-outputs"`` scenario of ``tests/drop_in/scenarios.py`` (with ``qLogExpectedImprovement``,
which takes the same sampler and objective).

Beyond the tutorials, the scenario checks what a fixed-noise GP does with the noise:
heteroscedastic noise is honoured point by point (:func:`noisy_points_pull_less`),
``observation_noise=True`` adds the mean known variance (:func:`noise_at_new_points`) and
fantasies draw and condition with the noise BoTorch's ``fantasize`` gives them
(:func:`fantasies`).
"""

from __future__ import annotations

import math

import pytest
import torch
from botorch.acquisition import qKnowledgeGradient, qLogNoisyExpectedImprovement
from botorch.acquisition.multi_objective import qLogNoisyExpectedHypervolumeImprovement
from botorch.acquisition.objective import GenericMCObjective
from botorch.models import ModelList
from botorch.models.model import Model
from botorch.sampling import SobolQMCNormalSampler
from gpytorch.utils.warnings import NumericalWarning
from torch import Tensor

from tests.drop_in.setting import (
    constructor_arguments,
    fit,
    model_class,
    optimize,
    query_points,
    toy_data,
)

#: The standard errors of the multi-objective tutorial's pattern, one per objective
#: (smaller than the tutorial's, which are in Branin-Currin's units).
NOISE_SE = (0.1, 0.02)
#: The offset of the noisy observations of :func:`heteroscedastic_data`, and their noise
#: variance; the other observations are exact up to :data:`EXACT_VARIANCE`.
OFFSET, OFFSET_VARIANCE, EXACT_VARIANCE = 2.0, 4.0, 1e-4


def heteroscedastic_data(n: int = 24) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    r"""``n`` points in the unit square whose every other observation is offset by
    :data:`OFFSET` and known to be that noisy.

    Returns:
        ``n x 2`` inputs, ``n x 1`` observations, their ``n x 1`` noise variances and the
        ``n x 1`` noiseless function values.
    """
    X = torch.rand(n, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    clean = torch.sin(5 * X).sum(-1, keepdim=True)
    noisy = (torch.arange(n) % 2 == 1).unsqueeze(-1)
    Y = clean + OFFSET * noisy
    Yvar = torch.where(noisy, OFFSET_VARIANCE, EXACT_VARIANCE).to(Y)
    return X, Y, Yvar, clean


def known_noise_model(family: str, X: Tensor, Y: Tensor, Yvar: Tensor) -> Model:
    r"""The family's model on ``(X, Y)`` with known noise ``Yvar`` passed third, as the
    closed-loop tutorial passes it, fitted."""
    return fit(family, model_class(family)(X, Y, Yvar, **constructor_arguments(family, Y)))


def positional_and_keyword(family: str, X: Tensor, Y: Tensor, Yvar: Tensor) -> Model:
    r"""``train_Yvar`` third and as a keyword give the same model; returns it."""
    positional = known_noise_model(family, X, Y, Yvar)
    keyword = fit(
        family, model_class(family)(X, Y, train_Yvar=Yvar, **constructor_arguments(family, Y))
    )
    test_X = query_points(4, 1)
    for observation_noise in (False, True):
        expected = positional.posterior(test_X, observation_noise=observation_noise)
        given = keyword.posterior(test_X, observation_noise=observation_noise)
        torch.testing.assert_close(given.mean, expected.mean)
        torch.testing.assert_close(given.variance, expected.variance)
    return positional


def noise_at_new_points(model: Model, Yvar: Tensor) -> None:
    r"""``observation_noise=True`` adds the mean known variance at new points, as
    BoTorch's fixed-noise GP does."""
    test_X = query_points(5, 1)
    latent = model.posterior(test_X)
    noisy = model.posterior(test_X, observation_noise=True)
    torch.testing.assert_close(noisy.mean, latent.mean)
    added = noisy.variance - latent.variance
    torch.testing.assert_close(added, Yvar.mean().expand_as(added))


def noisy_points_pull_less(family: str, model: Model, X: Tensor, Y: Tensor, Yvar: Tensor) -> None:
    r"""Heteroscedastic noise is honoured point by point: the offset, noisy observations
    pull the fit far less than they do when every observation has the mean variance
    (which is what averaging the noise would train)."""
    _, _, _, clean = heteroscedastic_data()
    averaged = known_noise_model(family, X, Y, Yvar.mean().expand_as(Yvar))

    def error(fitted: Model) -> float:
        mean = fitted.posterior(X.unsqueeze(-2)).mean.squeeze(-2)
        return (mean - clean).abs().mean().item()

    assert error(model) < 0.5 * error(averaged)


def closed_loop_with_a_constraint(family: str, model: Model, X: Tensor, Yvar: Tensor) -> None:
    r"""The closed-loop tutorial's step: objective and constraint models with known
    noise in a model list, ``qLogNoisyExpectedImprovement`` with ``X_baseline`` and the
    constraint, optimised."""
    constraint = (X - 0.4).pow(2).sum(-1, keepdim=True) - 0.3
    constraint_model = known_noise_model(family, X, constraint, Yvar)
    acquisition = qLogNoisyExpectedImprovement(
        ModelList(model, constraint_model),
        X_baseline=X,
        sampler=SobolQMCNormalSampler(torch.Size([32]), seed=0),
        objective=GenericMCObjective(lambda samples, X=None: samples[..., 0]),
        constraints=[lambda samples: samples[..., 1]],
    )
    optimize(acquisition, q=2)


def multi_objective(family: str) -> None:
    r"""The multi-objective tutorial's models: one per objective with its known noise
    passed third, in a model list, with ``qLogNoisyExpectedHypervolumeImprovement``."""
    X, Y = toy_data(num_outputs=2)
    models = [
        known_noise_model(family, X, Y[:, [i]], torch.full_like(Y[:, [i]], NOISE_SE[i] ** 2))
        for i in range(2)
    ]
    acquisition = qLogNoisyExpectedHypervolumeImprovement(
        ModelList(*models),
        ref_point=Y.min(dim=0).values - 0.1,
        X_baseline=X,
        sampler=SobolQMCNormalSampler(torch.Size([32]), seed=0),
    )
    optimize(acquisition, q=2, sequential=True)


def fantasies(model: Model, Yvar: Tensor) -> None:
    r"""Fantasies as BoTorch gives them noise: without ``observation_noise`` the mean
    training noise (the same fantasy model as with that noise as a tensor), a tensor
    used to draw and to condition (less noise, less variance left at the point); and
    ``qKnowledgeGradient`` moves its candidate."""
    x = query_points(1)
    mean_noise = (Yvar.mean(dim=0) / model.outcome_transform.stdvs.pow(2)).reshape(1, 1)

    def fantasy_variance(observation_noise: Tensor | None) -> Tensor:
        sampler = SobolQMCNormalSampler(torch.Size([8]), seed=0)
        fantasy = model.fantasize(x, sampler, observation_noise=observation_noise)
        return fantasy.posterior(x).variance

    torch.testing.assert_close(fantasy_variance(None), fantasy_variance(mean_noise))
    exact, noisy = (
        fantasy_variance(torch.full((1, 1), noise, dtype=x.dtype)) for noise in (1e-6, 1.0)
    )
    assert (exact < noisy).all()
    knowledge_gradient = qKnowledgeGradient(
        model, num_fantasies=4, sampler=SobolQMCNormalSampler(torch.Size([4]), seed=0)
    )
    candidates = query_points(3, 5).requires_grad_(True)
    knowledge_gradient(candidates).sum().backward()
    assert (candidates.grad[..., 0, :].abs().sum(-1) > 0).all()


def state_dict_round_trip(family: str, model: Model, X: Tensor, Y: Tensor, Yvar: Tensor) -> None:
    r"""The closed-loop tutorial's warm start: a new model with the same known noise
    loads the fitted model's ``state_dict`` and predicts as it does."""
    loaded = model_class(family)(X, Y, Yvar, **constructor_arguments(family, Y))
    loaded.load_state_dict(model.state_dict())
    loaded.eval()
    test_X = query_points(4, 1)
    for observation_noise in (False, True):
        expected = model.posterior(test_X, observation_noise=observation_noise)
        given = loaded.posterior(test_X, observation_noise=observation_noise)
        torch.testing.assert_close(given.mean, expected.mean)
        torch.testing.assert_close(given.variance, expected.variance)


def nearly_noiseless(family: str) -> None:
    r"""``train_Yvar=torch.full_like(train_Y, 1e-7)``, the tutorials' "noiseless": rounded
    up to GPyTorch's floor (``1e-6`` in double precision, after the outcome transform)
    with a warning, as the fixed-noise GP rounds it, which ``observation_noise=True``
    then adds."""
    X, Y = toy_data()
    with pytest.warns(NumericalWarning, match="[Rr]ound"):
        model = model_class(family)(
            X, Y, train_Yvar=torch.full_like(Y, 1e-7), **constructor_arguments(family, Y)
        )
    model = fit(family, model)
    test_X = query_points(3, 1)
    latent = model.posterior(test_X).variance
    added = model.posterior(test_X, observation_noise=True).variance - latent
    floor = 1e-6 * model.outcome_transform.stdvs.pow(2)
    torch.testing.assert_close(added, floor.expand_as(added), rtol=1e-4, atol=math.ulp(1.0))


def known_noise_scenario(family: str) -> None:
    r"""The ``"known-noise"`` cell: every check of this module on the family's model (or
    on the model of the card named ``family``, see ``tests.drop_in.setting.MODELS``)."""
    X, Y, Yvar, _ = heteroscedastic_data()
    model = positional_and_keyword(family, X, Y, Yvar)
    noise_at_new_points(model, Yvar)
    noisy_points_pull_less(family, model, X, Y, Yvar)
    closed_loop_with_a_constraint(family, model, X, Yvar)
    multi_objective(family)
    fantasies(model, Yvar)
    state_dict_round_trip(family, model, X, Y, Yvar)
    nearly_noiseless(family)
