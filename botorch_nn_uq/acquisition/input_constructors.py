r"""BoTorch input constructors for this package's acquisition functions.

Importing this module registers one constructor per class with
``botorch.acquisition.input_constructors.acqf_input_constructor``, so the classes can
be built by name the way BoTorch builds its own:

    >>> from botorch.acquisition.input_constructors import get_acqf_input_constructor
    >>> kwargs = get_acqf_input_constructor(RobustTargetExpectedImprovement)(
    ...     model=model, training_data=SupervisedDataset(X, Y, ...), target=0.0,
    ...     aleatoric_variance=0.25,
    ... )
    >>> acqf = RobustTargetExpectedImprovement(**kwargs)

Incumbents are computed from ``training_data`` when not given: the best observed
value for Leaky EI, and ``E_min`` (:func:`compute_e_min`) for the robust family.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import torch
from botorch.acquisition.input_constructors import (
    acqf_input_constructor,
    get_best_f_analytic,
    get_best_f_mc,
)
from botorch.acquisition.objective import MCAcquisitionObjective, PosteriorTransform
from botorch.models.model import Model
from botorch.sampling.base import MCSampler
from botorch.utils.datasets import SupervisedDataset
from torch import Tensor

from botorch_nn_uq.acquisition.leaky_ei import (
    DEFAULT_NEGATIVE_SLOPE,
    LeakyExpectedImprovement,
    qLeakyExpectedImprovement,
)
from botorch_nn_uq.acquisition.robust_target import (
    AleatoricVariance,
    Approximation,
    LogRobustTargetProbabilityOfImprovement,
    RobustTargetExpectedImprovement,
    RobustTargetLowerConfidenceBound,
    RobustTargetProbabilityOfImprovement,
    compute_e_min,
    qRobustTargetExpectedImprovement,
)

TrainingData = SupervisedDataset | dict[Hashable, SupervisedDataset]


def _inputs_and_outcomes(training_data: TrainingData) -> tuple[Tensor, Tensor]:
    r"""Training inputs ``n x d`` and outcomes ``n x m`` (outcomes of a dict joined)."""
    if isinstance(training_data, SupervisedDataset):
        return training_data.X, training_data.Y
    datasets = list(training_data.values())
    X = datasets[0].X
    if not all(torch.equal(dataset.X, X) for dataset in datasets):
        raise NotImplementedError("Only datasets sharing the same inputs X are supported.")
    return X, torch.cat([dataset.Y for dataset in datasets], dim=-1)


def _scalar_outcomes(
    model: Model,
    training_data: TrainingData,
    posterior_transform: PosteriorTransform | None,
    objective: MCAcquisitionObjective | None,
    use_posterior_mean: bool,
) -> tuple[Tensor, Tensor]:
    r"""Training inputs ``n x d`` and scalar outcomes ``n x 1``: observed, or the posterior mean."""
    X, Y = _inputs_and_outcomes(training_data)
    if use_posterior_mean:
        with torch.no_grad():
            posterior = model.posterior(X, posterior_transform=posterior_transform)
            Y = posterior.mean
    elif posterior_transform is not None:
        Y = posterior_transform.evaluate(Y).unsqueeze(-1)
    if objective is not None:
        Y = objective(Y.unsqueeze(0), X=X).squeeze(0).unsqueeze(-1)
    if Y.shape[-1] != 1:
        raise ValueError(
            "The incumbent needs a single outcome: pass a scalarising posterior_transform (or an "
            "objective) for multi-output models."
        )
    return X, Y


def _robust_target_inputs(
    *,
    model: Model,
    training_data: TrainingData,
    target: float,
    aleatoric_variance: AleatoricVariance,
    best_f: float | Tensor | None,
    posterior_transform: PosteriorTransform | None,
    use_posterior_mean: bool,
    objective: MCAcquisitionObjective | None = None,
) -> dict[str, Any]:
    r"""The keyword arguments that every robust target-value acquisition with an
    incumbent takes: ``model``, ``target``, ``best_f``, ``aleatoric_variance`` and
    ``posterior_transform``.

    Args:
        model: The model of the mean output.
        training_data: Dataset(s) used to train the model (``n`` points).
        target: The target value ``y•``.
        aleatoric_variance: ``σ_a²`` (float, tensor broadcastable to ``n x 1``, or
            callable evaluated at the training inputs as ``n x 1 x d``).
        best_f: The incumbent ``E_min``, or ``None`` to compute it with
            :func:`compute_e_min` from the training outcomes (``n x 1`` after the
            ``posterior_transform`` and ``objective``).
        posterior_transform: A scalarising ``PosteriorTransform`` (optional).
        use_posterior_mean: Compute ``E_min`` from the posterior mean ``μ(x_i)``
            instead of the observed outcomes.
        objective: The ``MCAcquisitionObjective`` of an MC acquisition (optional).

    Returns:
        A dict mapping those keyword arguments to values.
    """
    if best_f is None:
        X, Y = _scalar_outcomes(
            model, training_data, posterior_transform, objective, use_posterior_mean
        )
        best_f = compute_e_min(Y, target=target, aleatoric_variance=aleatoric_variance, X=X)
    return {
        "model": model,
        "target": target,
        "best_f": best_f,
        "aleatoric_variance": aleatoric_variance,
        "posterior_transform": posterior_transform,
    }


@acqf_input_constructor(LeakyExpectedImprovement)
def construct_inputs_leaky_ei(
    model: Model,
    training_data: TrainingData,
    best_f: float | Tensor | None = None,
    negative_slope: float = DEFAULT_NEGATIVE_SLOPE,
    posterior_transform: PosteriorTransform | None = None,
    maximize: bool = True,
) -> dict[str, Any]:
    r"""Construct kwargs for :class:`LeakyExpectedImprovement`.

    Args:
        model: The model to be used in the acquisition function.
        training_data: Dataset(s) used to train the model; ``best_f`` defaults to the
            best (largest, or smallest if ``maximize`` is False) observed outcome.
        best_f: The incumbent ``y*``.
        negative_slope: The slope ``δ ∈ [0, 1)`` of negative improvements.
        posterior_transform: A ``PosteriorTransform`` (also applied to the outcomes
            when computing ``best_f``).
        maximize: If False, consider the problem a minimisation problem.

    Returns:
        A dict mapping keyword arguments of the constructor to values.
    """
    if best_f is None:
        if maximize:
            best_f = get_best_f_analytic(
                training_data=training_data, posterior_transform=posterior_transform
            )
        else:
            _, Y = _scalar_outcomes(
                model, training_data, posterior_transform, None, use_posterior_mean=False
            )
            best_f = Y.amin(dim=-2).squeeze(-1)
    return {
        "model": model,
        "best_f": best_f,
        "negative_slope": negative_slope,
        "posterior_transform": posterior_transform,
        "maximize": maximize,
    }


@acqf_input_constructor(qLeakyExpectedImprovement)
def construct_inputs_q_leaky_ei(
    model: Model,
    training_data: TrainingData,
    best_f: float | Tensor | None = None,
    negative_slope: float = DEFAULT_NEGATIVE_SLOPE,
    objective: MCAcquisitionObjective | None = None,
    posterior_transform: PosteriorTransform | None = None,
    X_pending: Tensor | None = None,
    sampler: MCSampler | None = None,
) -> dict[str, Any]:
    r"""Construct kwargs for :class:`qLeakyExpectedImprovement`.

    Args:
        model: The model to be used in the acquisition function.
        training_data: Dataset(s) used to train the model; ``best_f`` defaults to the
            best observed objective value.
        best_f: The incumbent ``y*`` on the objective scale.
        negative_slope: The weight ``δ ∈ [0, 1)`` of non-maximal improvements.
        objective: The ``MCAcquisitionObjective`` (optional).
        posterior_transform: A ``PosteriorTransform`` (optional).
        X_pending: A ``m x d``-dim tensor of pending points (optional).
        sampler: The sampler used to draw base samples (optional).

    Returns:
        A dict mapping keyword arguments of the constructor to values.
    """
    if best_f is None:
        best_f = get_best_f_mc(
            training_data=training_data,
            objective=objective,
            posterior_transform=posterior_transform,
            model=model,
        )
    return {
        "model": model,
        "best_f": best_f,
        "negative_slope": negative_slope,
        "sampler": sampler,
        "objective": objective,
        "posterior_transform": posterior_transform,
        "X_pending": X_pending,
    }


@acqf_input_constructor(RobustTargetExpectedImprovement)
def construct_inputs_robust_target_ei(
    model: Model,
    training_data: TrainingData,
    target: float,
    aleatoric_variance: AleatoricVariance,
    best_f: float | Tensor | None = None,
    approximation: Approximation = "exact",
    posterior_transform: PosteriorTransform | None = None,
    use_posterior_mean: bool = False,
) -> dict[str, Any]:
    r"""Construct kwargs for :class:`RobustTargetExpectedImprovement`.

    Args:
        model: The model of the mean output.
        training_data: Dataset(s) used to train the model. ``best_f`` defaults to
            ``E_min`` over the training points, from the observed outcomes (assumed
            noise-free means) or, with ``use_posterior_mean``, from the model's
            posterior mean there (for noisy data).
        target: The target value ``y•``.
        aleatoric_variance: ``σ_a²`` (float, tensor or callable). To compute ``E_min``
            a tensor must broadcast to the training outcomes (``n x 1``) and a
            callable is evaluated at the training inputs as ``n x 1 x d``.
        best_f: The incumbent ``E_min``.
        approximation: ``"exact"`` or ``"sankaran"``.
        posterior_transform: A scalarising ``PosteriorTransform`` (optional).
        use_posterior_mean: Compute ``E_min`` from ``μ(x_i)`` instead of observed
            outcomes.

    Returns:
        A dict mapping keyword arguments of the constructor to values.
    """
    return {
        **_robust_target_inputs(
            model=model,
            training_data=training_data,
            target=target,
            aleatoric_variance=aleatoric_variance,
            best_f=best_f,
            posterior_transform=posterior_transform,
            use_posterior_mean=use_posterior_mean,
        ),
        "approximation": approximation,
    }


@acqf_input_constructor(RobustTargetProbabilityOfImprovement)
def construct_inputs_robust_target_poi(
    model: Model,
    training_data: TrainingData,
    target: float,
    aleatoric_variance: AleatoricVariance,
    best_f: float | Tensor | None = None,
    zeta: float = 0.0,
    approximation: Approximation = "exact",
    posterior_transform: PosteriorTransform | None = None,
    use_posterior_mean: bool = False,
) -> dict[str, Any]:
    r"""Construct kwargs for :class:`RobustTargetProbabilityOfImprovement`.

    Arguments as in :func:`construct_inputs_robust_target_ei`, plus ``zeta``, the
    required improvement margin ``ζ ≥ 0``.

    Returns:
        A dict mapping keyword arguments of the constructor to values.
    """
    return {
        **construct_inputs_robust_target_ei(
            model=model,
            training_data=training_data,
            target=target,
            aleatoric_variance=aleatoric_variance,
            best_f=best_f,
            approximation=approximation,
            posterior_transform=posterior_transform,
            use_posterior_mean=use_posterior_mean,
        ),
        "zeta": zeta,
    }


@acqf_input_constructor(LogRobustTargetProbabilityOfImprovement)
def construct_inputs_log_robust_target_poi(
    model: Model,
    training_data: TrainingData,
    target: float,
    aleatoric_variance: AleatoricVariance,
    best_f: float | Tensor | None = None,
    zeta: float = 0.0,
    posterior_transform: PosteriorTransform | None = None,
    use_posterior_mean: bool = False,
) -> dict[str, Any]:
    r"""Construct kwargs for :class:`LogRobustTargetProbabilityOfImprovement`.

    Arguments as in :func:`construct_inputs_robust_target_poi` (exact form only).

    Returns:
        A dict mapping keyword arguments of the constructor to values.
    """
    inputs = construct_inputs_robust_target_poi(
        model=model,
        training_data=training_data,
        target=target,
        aleatoric_variance=aleatoric_variance,
        best_f=best_f,
        zeta=zeta,
        posterior_transform=posterior_transform,
        use_posterior_mean=use_posterior_mean,
    )
    del inputs["approximation"]
    return inputs


@acqf_input_constructor(RobustTargetLowerConfidenceBound)
def construct_inputs_robust_target_lcb(
    model: Model,
    target: float,
    aleatoric_variance: AleatoricVariance,
    quantile: float = 0.1,
    approximation: Approximation = "exact",
    posterior_transform: PosteriorTransform | None = None,
) -> dict[str, Any]:
    r"""Construct kwargs for :class:`RobustTargetLowerConfidenceBound`.

    Args:
        model: The model of the mean output.
        target: The target value ``y•``.
        aleatoric_variance: ``σ_a²`` (float, tensor or callable).
        quantile: The probability level ``q ∈ (0, 1)`` of the bound.
        approximation: ``"exact"`` or ``"sankaran"``.
        posterior_transform: A scalarising ``PosteriorTransform`` (optional).

    Returns:
        A dict mapping keyword arguments of the constructor to values.
    """
    return {
        "model": model,
        "target": target,
        "aleatoric_variance": aleatoric_variance,
        "quantile": quantile,
        "approximation": approximation,
        "posterior_transform": posterior_transform,
    }


@acqf_input_constructor(qRobustTargetExpectedImprovement)
def construct_inputs_q_robust_target_ei(
    model: Model,
    training_data: TrainingData,
    target: float,
    aleatoric_variance: AleatoricVariance,
    best_f: float | Tensor | None = None,
    objective: MCAcquisitionObjective | None = None,
    posterior_transform: PosteriorTransform | None = None,
    X_pending: Tensor | None = None,
    sampler: MCSampler | None = None,
    use_posterior_mean: bool = False,
) -> dict[str, Any]:
    r"""Construct kwargs for :class:`qRobustTargetExpectedImprovement`.

    Arguments as in :func:`construct_inputs_robust_target_ei`, plus the MC arguments
    ``objective`` (also applied to the outcomes when computing ``E_min``),
    ``X_pending`` and ``sampler``.

    Returns:
        A dict mapping keyword arguments of the constructor to values.
    """
    return {
        **_robust_target_inputs(
            model=model,
            training_data=training_data,
            target=target,
            aleatoric_variance=aleatoric_variance,
            best_f=best_f,
            posterior_transform=posterior_transform,
            use_posterior_mean=use_posterior_mean,
            objective=objective,
        ),
        "sampler": sampler,
        "objective": objective,
        "X_pending": X_pending,
    }
