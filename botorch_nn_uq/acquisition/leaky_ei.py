r"""Leaky Expected Improvement (Guilhoto & Perdikaris, NEON, Eqs. 7–8 and appendix).

Expected improvement ``E[max(0, f(x) − y*)]`` has zero gradient wherever no posterior
sample improves on the incumbent. For sample-based posteriors (ensembles, MC dropout,
epistemic-index banks) that is most of the input space, so gradient-based acquisition
optimisation stalls. Leaky EI replaces the ReLU by a LeakyReLU with negative slope
``δ``:

    ``α_L-EI(x) = E[LeakyReLU_δ(f(x) − y*)]``,  ``LeakyReLU_δ(t) = t if t ≥ 0 else δ·t``.

Because ``LeakyReLU_δ(t) − ReLU(t) = δ·min(t, 0)``, it differs from EI by at most
``δ·(b − a)`` when ``f`` and the posterior take values in ``[a, b]`` (Theorem 1 of the
paper), and its gradient never vanishes identically. Leaky EI can be negative, so
BoTorch's non-negative initialisation heuristic (``initialize_q_batch_nonneg``) does
not apply; ``optimize_acqf``'s default initialiser is appropriate.
"""

from __future__ import annotations

import torch
from botorch.acquisition.analytic import AnalyticAcquisitionFunction
from botorch.acquisition.objective import MCAcquisitionObjective, PosteriorTransform
from botorch.models.model import Model
from botorch.sampling.base import MCSampler
from botorch.utils.transforms import average_over_ensemble_models, t_batch_mode_transform
from torch import Tensor

from botorch_nn_uq.acquisition.validation import (
    NonEmptyBatchMCAcquisitionFunction,
    validate_best_f,
)
from botorch_nn_uq.checks import Interval, check_boolean, check_real_number
from botorch_nn_uq.compat import log_ei_helper, scaled_improvement

DEFAULT_NEGATIVE_SLOPE = 0.01


def _validate_negative_slope(negative_slope: float) -> float:
    check_real_number("negative_slope", negative_slope, Interval(0.0, 1.0, upper_closed=False))
    return float(negative_slope)


class LeakyExpectedImprovement(AnalyticAcquisitionFunction):
    r"""Single-outcome Leaky Expected Improvement (analytic, Gaussian posterior).

    Under a Gaussian posterior ``N(μ, σ²)``, ``E[min(t, 0)] = (μ − y*) − EI`` gives the
    closed form

        ``α_L-EI(x) = (1 − δ)·EI(x) + δ·(μ(x) − y*)``.

    EI is evaluated as ``σ·exp(log h(u))`` with BoTorch's numerically stable
    ``log h`` (``u = (μ − y*)/σ``), so values and gradients stay accurate far from the
    incumbent, where plain EI underflows to zero and the leaky term ``δ·(μ − y*)``
    carries the gradient. Only ``q = 1``; for sample-based (joint) posteriors and
    ``q > 1`` use :class:`qLeakyExpectedImprovement`.

    Example:
        >>> model = SingleTaskGP(train_X, train_Y)
        >>> leaky_ei = LeakyExpectedImprovement(model, best_f=train_Y.max())
        >>> values = leaky_ei(test_X)  # test_X: batch_shape x 1 x d
    """

    def __init__(
        self,
        model: Model,
        best_f: float | Tensor,
        negative_slope: float = DEFAULT_NEGATIVE_SLOPE,
        posterior_transform: PosteriorTransform | None = None,
        maximize: bool = True,
    ) -> None:
        r"""Leaky Expected Improvement (analytic).

        Args:
            model: A fitted single-outcome model (or a multi-output model together
                with a scalarising ``posterior_transform``).
            best_f: The incumbent ``y*``: a scalar, or a ``batch_shape``-dim tensor
                for batched models.
            negative_slope: The slope ``δ ∈ [0, 1)`` applied to negative
                improvements; ``δ = 0`` recovers EI.
            posterior_transform: A ``PosteriorTransform`` (optional).
            maximize: If False, improvement is ``y* − f(x)`` (minimisation).
        """
        super().__init__(model=model, posterior_transform=posterior_transform)
        self.negative_slope = _validate_negative_slope(negative_slope)
        self.register_buffer("best_f", validate_best_f(best_f, model))
        check_boolean("maximize", maximize)
        self.maximize = maximize

    @t_batch_mode_transform(expected_q=1)
    @average_over_ensemble_models
    def forward(self, X: Tensor) -> Tensor:
        r"""Evaluate Leaky EI on the candidate set ``X``.

        Args:
            X: A ``batch_shape x 1 x d``-dim tensor of candidates.

        Returns:
            A ``batch_shape``-dim tensor of Leaky EI values.
        """
        mean, sigma = self._mean_and_sigma(X)
        best_f = self.best_f.to(mean)
        u = scaled_improvement(mean, sigma, best_f, self.maximize)
        expected_improvement = sigma * log_ei_helper(u).exp()
        mean_improvement = mean - best_f if self.maximize else best_f - mean
        leaky = (
            1 - self.negative_slope
        ) * expected_improvement + self.negative_slope * mean_improvement
        return leaky.squeeze(-1)


class qLeakyExpectedImprovement(NonEmptyBatchMCAcquisitionFunction):  # noqa: N801
    r"""MC-based batch Leaky Expected Improvement (q-L-EI, NEON appendix).

    For one joint posterior sample ``z`` over the batch ``x_1..x_q`` with improvements
    ``I_i = f(x_i, z) − y*``:

        ``α'(x_1..x_q; z) = Σ_i w_i·I_i``,  ``w_i = 1`` if ``I_i = max_j I_j`` and
        ``I_i > 0``, else ``δ``,

    and ``α_qL-EI`` is the mean of ``α'`` over samples. Ties at a positive maximum all
    get weight 1. This is not ``LeakyReLU(max_i I_i)``: every non-maximal point
    contributes ``δ`` times its signed improvement, so every point of the batch
    receives a gradient. For ``q = 1`` it reduces to Leaky EI.

    The samples must be joint across the ``q`` points: BoTorch's GP samplers and the
    ``IndexSampler`` of ``EnsemblePosterior`` (each sample one ensemble member
    evaluated at all ``q`` points) both are.

    Example:
        >>> model = SingleTaskGP(train_X, train_Y)
        >>> sampler = SobolQMCNormalSampler(sample_shape=torch.Size([1024]))
        >>> q_leaky_ei = qLeakyExpectedImprovement(model, train_Y.max(), sampler=sampler)
        >>> values = q_leaky_ei(test_X)  # test_X: batch_shape x q x d
    """

    def __init__(
        self,
        model: Model,
        best_f: float | Tensor,
        negative_slope: float = DEFAULT_NEGATIVE_SLOPE,
        sampler: MCSampler | None = None,
        objective: MCAcquisitionObjective | None = None,
        posterior_transform: PosteriorTransform | None = None,
        X_pending: Tensor | None = None,
    ) -> None:
        r"""q-Leaky Expected Improvement.

        Args:
            model: A fitted model.
            best_f: The incumbent ``y*`` on the objective scale: a scalar, or a
                ``batch_shape``-dim tensor for batched models.
            negative_slope: The weight ``δ ∈ [0, 1)`` of non-maximal or non-positive
                improvements; ``δ = 0`` recovers qEI.
            sampler: The sampler used to draw base samples (see
                ``MCAcquisitionFunction``). Defaults to BoTorch's registered sampler
                for the model's posterior.
            objective: The ``MCAcquisitionObjective`` under which samples are
                evaluated. Defaults to ``IdentityMCObjective()``.
            posterior_transform: A ``PosteriorTransform`` (optional).
            X_pending: A ``m x d``-dim tensor of points submitted for evaluation but
                not yet evaluated; concatenated to ``X`` in ``forward``.
        """
        super().__init__(
            model=model,
            sampler=sampler,
            objective=objective,
            posterior_transform=posterior_transform,
            X_pending=X_pending,
            q_reduction=torch.sum,
        )
        self.negative_slope = _validate_negative_slope(negative_slope)
        self.register_buffer("best_f", validate_best_f(best_f, model))

    def _sample_forward(self, obj: Tensor) -> Tensor:
        r"""Weighted improvements ``w_i·I_i`` per sample and batch point.

        Args:
            obj: A ``sample_shape x batch_shape x q``-dim tensor of objective samples.

        Returns:
            A ``sample_shape x batch_shape x q``-dim tensor; summing over ``q`` gives
            the per-sample q-L-EI utility.
        """
        improvement = obj - self.best_f.to(obj).unsqueeze(-1)
        is_best = (improvement == improvement.amax(dim=-1, keepdim=True)) & (improvement > 0)
        weight = torch.where(
            is_best,
            torch.ones_like(improvement),
            torch.full_like(improvement, self.negative_slope),
        )
        return weight * improvement
