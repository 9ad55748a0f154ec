r"""Robust target-value acquisition functions (Hoffer, Ranftl & Geiger).

Goal: find ``x`` whose stochastic output is as close as possible to a target ``y•`` in
expected squared error, ``E(x) = (y• − m(x))² + σ_a²(x)``, where ``m(x)`` is the mean
output (modelled by a surrogate with epistemic posterior ``N(μ(x), σ_e²(x))``) and
``σ_a²(x)`` is a known or separately estimated aleatoric variance. The surrogate
objective ``Ê(x) = (m̂(x) − y•)² + σ_a²(x)``, ``m̂ ~ N(μ, σ_e²)``, satisfies
``(Ê − σ_a²)/σ_e² ~ χ²₁(λ = (μ − y•)²/σ_e²)``: the aleatoric variance is a
deterministic offset, not extra randomness.

All acquisition functions here *minimise* ``Ê`` and return values to *maximise*:

- :class:`RobustTargetExpectedImprovement`: ``E[(E_min − Ê)₊]``;
- :class:`RobustTargetProbabilityOfImprovement`: ``P(Ê ≤ E_min − ζ)``, and its
  logarithm in :class:`LogRobustTargetProbabilityOfImprovement`;
- :class:`RobustTargetLowerConfidenceBound`: minus the ``q``-quantile of ``Ê``;
- :class:`qRobustTargetExpectedImprovement`: Monte Carlo EI for any batch size.

With ``aleatoric_variance = 0`` they are the non-robust noncentral-χ² acquisitions of
Uhrenholt & Jensen (AISTATS 2019). The analytic classes use the exact closed forms of
:mod:`botorch_nn_uq.acquisition.noncentral_chi2` by default and Sankaran's
approximation with ``approximation="sankaran"``.

EI and PoI are exactly zero (flat) wherever ``σ_a²(x) ≥ E_min``: optimise them with
enough raw samples, over a discrete candidate set (``optimize_acqf_discrete``), or use
the lower confidence bound, which is informative everywhere.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from typing import Literal

import torch
from botorch.acquisition.analytic import AnalyticAcquisitionFunction
from botorch.acquisition.objective import MCAcquisitionObjective, PosteriorTransform
from botorch.models.model import Model
from botorch.sampling.base import MCSampler
from botorch.utils.transforms import (
    average_over_ensemble_models,
    is_ensemble,
    t_batch_mode_transform,
)
from torch import Tensor

from botorch_nn_uq.acquisition.noncentral_chi2 import (
    check_resolvable_quantile,
    log_squared_gaussian_cdf,
    sankaran_squared_gaussian_cdf,
    sankaran_squared_gaussian_expected_improvement,
    sankaran_squared_gaussian_quantile,
    squared_gaussian_cdf,
    squared_gaussian_expected_improvement,
    squared_gaussian_quantile,
)
from botorch_nn_uq.acquisition.validation import (
    NonEmptyBatchMCAcquisitionFunction,
    validate_best_f,
)
from botorch_nn_uq.checks import (
    NON_NEGATIVE,
    OPEN_UNIT_INTERVAL,
    broadcasts_to,
    check_choice,
    check_finite_tensor,
    check_real_number,
)

#: A known aleatoric variance: a constant, a tensor broadcastable to the candidates'
#: ``batch_shape x q``, or a differentiable callable mapping a ``batch_shape x q x d``
#: tensor of (untransformed) inputs to a ``batch_shape x q`` tensor of variances.
AleatoricVariance = float | Tensor | Callable[[Tensor], Tensor]

Approximation = Literal["exact", "sankaran"]
APPROXIMATIONS = ("exact", "sankaran")


def compute_e_min(
    Y_mean: Tensor,
    target: float,
    aleatoric_variance: AleatoricVariance,
    X: Tensor | None = None,
) -> Tensor:
    r"""Incumbent expected squared error ``E_min = min_i [(ȳ_i − y•)² + σ_a²(x_i)]``.

    Args:
        Y_mean: Mean outputs at the observed points: replicate means ``ȳ_i`` (or
            noise-free observations of ``m``), or the surrogate's posterior mean
            ``μ(x_i)`` for noisy data. Shape ``batch_shape x n x 1`` (BoTorch's
            layout of training targets) or ``n``.
        target: The target value ``y•``.
        aleatoric_variance: ``σ_a²`` at the observed points: a non-negative float, a
            tensor broadcastable to ``Y_mean`` (e.g. ``n x 1`` for ``Y_mean`` of shape
            ``n x 1``), or a callable as taken by the acquisition functions, evaluated
            (without gradients) at ``X`` as ``batch_shape x n x 1 x d``.
        X: The observed inputs, ``batch_shape x n x d`` (or ``n x d``); needed only
            for a callable ``aleatoric_variance``.

    Returns:
        ``E_min``, a ``batch_shape``-dim tensor (a scalar tensor for unbatched data).

    Example:
        >>> Y = torch.tensor([[0.3], [-0.1], [0.5]])
        >>> compute_e_min(Y, target=0.0, aleatoric_variance=0.01)  # 0.1² + 0.01
        tensor(0.0200)
    """
    Y_mean = check_finite_tensor("Y_mean", Y_mean)
    if not Y_mean.is_floating_point():
        # Integer observations: the squared errors and variances are real numbers.
        Y_mean = Y_mean.to(torch.float64)
    if Y_mean.dim() == 1:
        Y_mean = Y_mean.unsqueeze(-1)
    if Y_mean.dim() == 0 or Y_mean.shape[-1] != 1:
        raise ValueError(
            "Y_mean must have shape `n` or `batch_shape x n x 1` (one output), got "
            f"shape {tuple(Y_mean.shape)}."
        )
    if Y_mean.shape[-2] == 0:
        raise ValueError(f"Y_mean holds no observations (shape {tuple(Y_mean.shape)}).")
    target = _validate_target(target)
    if callable(aleatoric_variance) and not isinstance(aleatoric_variance, Tensor):
        if X is None:
            raise ValueError("A callable aleatoric_variance needs the observed inputs X.")
        with torch.no_grad():
            aleatoric_variance = aleatoric_variance(X.unsqueeze(-2)).reshape(Y_mean.shape)
    variance = check_finite_tensor(
        "aleatoric_variance", aleatoric_variance, interval=NON_NEGATIVE, dtype=Y_mean.dtype
    ).to(Y_mean.device)
    if not broadcasts_to(variance.shape, Y_mean.shape):
        raise ValueError(
            f"aleatoric_variance of shape {tuple(variance.shape)} does not broadcast to "
            f"Y_mean's shape {tuple(Y_mean.shape)}."
        )
    squared_error = (Y_mean - target.to(Y_mean)).square() + variance
    return squared_error.amin(dim=-2).squeeze(-1)


def first_order_input_noise_variance(
    model: Model,
    input_variance: float | Tensor,
    posterior_transform: PosteriorTransform | None = None,
) -> Callable[[Tensor], Tensor]:
    r"""Aleatoric variance of ``y = f(x + η)``, ``η ~ N(0, diag(σ_u²))``, to first order.

    Propagates input noise through the model's posterior mean ``μ`` (delta method, as
    in Girard's uncertain-input GPs): ``σ_a²(x) ≈ Σ_j σ_u,j² (∂μ/∂x_j)²``. The result
    is a differentiable callable to pass as ``aleatoric_variance``; gradients with
    respect to the candidates flow through ``∂μ/∂x`` when they require grad. It
    assumes the posterior mean at each point depends only on that point (true for GPs
    and ensembles).

    Args:
        model: A fitted single-outcome model (or multi-output with a scalarising
            ``posterior_transform``) of the mean output, in untransformed input space.
        input_variance: ``σ_u²``: a non-negative float or a ``d``-dim tensor of
            per-dimension input-noise variances.
        posterior_transform: A ``PosteriorTransform`` (optional).

    Returns:
        A callable mapping a ``batch_shape x q x d`` tensor to the
        ``batch_shape x q`` tensor of variances.

    Example:
        >>> variance = first_order_input_noise_variance(model, input_variance=0.035**2)
        >>> ei = RobustTargetExpectedImprovement(
        ...     model, target=0.0, best_f=e_min, aleatoric_variance=variance
        ... )
    """
    input_variance = check_finite_tensor(
        "input_variance", input_variance, interval=NON_NEGATIVE, dtype=torch.float64
    )

    def aleatoric_variance(X: Tensor) -> Tensor:
        differentiable = X.requires_grad
        with torch.enable_grad():
            inputs = X if differentiable else X.detach().requires_grad_(True)
            mean = model.posterior(inputs, posterior_transform=posterior_transform).mean
            if mean.shape[-1] != 1:
                raise ValueError(
                    "first_order_input_noise_variance needs a single-output posterior; "
                    "pass a scalarising posterior_transform."
                )
            (gradient,) = torch.autograd.grad(mean.sum(), inputs, create_graph=differentiable)
        return (gradient.square() * input_variance.to(gradient)).sum(dim=-1)

    return aleatoric_variance


def _validate_target(target: float | Tensor) -> Tensor:
    target = check_finite_tensor("target", target, dtype=torch.float64)
    if target.numel() != 1:
        raise ValueError(f"target must be a scalar, got shape {tuple(target.shape)}.")
    return target


def _validate_approximation(approximation: str) -> Approximation:
    check_choice("approximation", approximation, APPROXIMATIONS)
    return approximation


class _RobustTargetArgumentsMixin:
    r"""Stores the target, the aleatoric variance and the incumbent of a robust
    target-value acquisition function, and evaluates the variance at candidates."""

    def _set_target_and_aleatoric_variance(
        self, target: float | Tensor, aleatoric_variance: AleatoricVariance
    ) -> None:
        self.register_buffer("target", _validate_target(target))
        if callable(aleatoric_variance) and not isinstance(aleatoric_variance, Tensor):
            self.aleatoric_variance_function = aleatoric_variance
            self.register_buffer("aleatoric_variance", None)
        else:
            variance = check_finite_tensor(
                "aleatoric_variance", aleatoric_variance, interval=NON_NEGATIVE, dtype=torch.float64
            )
            self.aleatoric_variance_function = None
            self.register_buffer("aleatoric_variance", variance)

    def _set_incumbent(self, best_f: float | Tensor) -> None:
        r"""Store the incumbent ``E_min`` as the buffer ``best_f``.

        Args:
            best_f: ``E_min``, an expected squared error and hence non-negative: a
                scalar, or a tensor broadcastable to the model's ``batch_shape``.
        """
        self.register_buffer("best_f", validate_best_f(best_f, self.model, interval=NON_NEGATIVE))

    def _aleatoric_variance_at(self, X: Tensor) -> Tensor:
        r"""``σ_a²`` at the candidates.

        Args:
            X: A ``batch_shape x q x d``-dim tensor of candidates.

        Returns:
            A tensor broadcastable to ``batch_shape x q``.
        """
        points_shape = X.shape[:-1]
        if self.aleatoric_variance_function is None:
            variance = self.aleatoric_variance.to(X)
            description = "aleatoric_variance"
        else:
            variance = self.aleatoric_variance_function(X)
            if variance.shape == points_shape + (1,):
                variance = variance.squeeze(-1)
            description = "aleatoric_variance(X)"
            # A callable's values are only known here; a NaN would silently zero EI.
            check_finite_tensor("aleatoric_variance", variance.detach(), interval=NON_NEGATIVE)
        if not broadcasts_to(variance.shape, points_shape):
            raise ValueError(
                f"{description} has shape {tuple(variance.shape)}, which does not "
                f"broadcast to the candidates' `batch_shape x q` = {tuple(points_shape)}."
            )
        return variance


class _AnalyticRobustTargetAcquisitionFunction(
    _RobustTargetArgumentsMixin, AnalyticAcquisitionFunction
):
    r"""Shared set-up and evaluation of the analytic robust target-value acquisition
    functions: ``forward`` computes the Gaussian posterior of the deviation
    ``m̂(x) − y•`` and ``σ_a²(x)`` at the candidates, and each subclass turns them into
    its acquisition values in :meth:`_evaluate`."""

    def __init__(
        self,
        model: Model,
        target: float | Tensor,
        aleatoric_variance: AleatoricVariance,
        approximation: Approximation,
        posterior_transform: PosteriorTransform | None,
    ) -> None:
        super().__init__(model=model, posterior_transform=posterior_transform)
        self._set_target_and_aleatoric_variance(target, aleatoric_variance)
        self.approximation = _validate_approximation(approximation)

    @t_batch_mode_transform(expected_q=1)
    @average_over_ensemble_models
    def forward(self, X: Tensor) -> Tensor:
        r"""Evaluate the acquisition function on the candidate set ``X``.

        Args:
            X: A ``batch_shape x 1 x d``-dim tensor of candidates.

        Returns:
            A ``batch_shape``-dim tensor of acquisition values (see :meth:`_evaluate`).
        """
        mean, std = self._mean_and_sigma(X)
        aleatoric = self._aleatoric_variance_at(X).expand(X.shape[:-1]).squeeze(-1)
        if is_ensemble(self.model):
            aleatoric = aleatoric.unsqueeze(-1)
        offset = mean.squeeze(-1) - self.target.to(mean)
        return self._evaluate(offset, std.squeeze(-1), aleatoric)

    @abstractmethod
    def _evaluate(self, offset: Tensor, std: Tensor, aleatoric: Tensor) -> Tensor:
        r"""The acquisition values at the candidates.

        Args:
            offset: The posterior mean ``μ(x) − y•`` of the deviation ``m̂(x) − y•``.
            std: Its posterior standard deviation ``σ_e(x)``.
            aleatoric: The aleatoric variance ``σ_a²(x)``.

        All three are mutually broadcastable tensors of shape ``batch_shape``
        (``batch_shape x ensemble`` for ensemble models such as fully Bayesian GPs).

        Returns:
            The acquisition values, a tensor of the broadcast shape.
        """


class RobustTargetExpectedImprovement(_AnalyticRobustTargetAcquisitionFunction):
    r"""Robust target-value Expected Improvement (analytic, ``q = 1``).

    ``EI(x) = E[(E_min − Ê(x))₊]`` with ``Ê = (m̂ − y•)² + σ_a²(x)``. With
    ``c = E_min − σ_a²(x)``, ``δ = |μ − y•|``, ``s = σ_e``, ``r = √c``,
    ``a = (−r − δ)/s``, ``b = (r − δ)/s``:

        ``EI = (c − δ² − s²)·[Φ(b) − Φ(a)] + s·[(r + δ)·φ(b) + (r − δ)·φ(a)]``

    for ``c > 0`` and ``0`` otherwise; this equals the sign-corrected Eq. 13 of the
    paper, ``σ_e²·[e F_{1,λ}(e) − F_{3,λ}(e) − λ F_{5,λ}(e)]``, ``e = c/σ_e²``.

    Example:
        >>> model = SingleTaskGP(train_X, train_Y, train_Yvar=torch.full_like(train_Y, 1e-10))
        >>> e_min = compute_e_min(train_Y, target=0.0, aleatoric_variance=0.25)
        >>> ei = RobustTargetExpectedImprovement(
        ...     model, target=0.0, best_f=e_min, aleatoric_variance=0.25
        ... )
        >>> values = ei(test_X)  # test_X: batch_shape x 1 x d
    """

    def __init__(
        self,
        model: Model,
        target: float | Tensor,
        best_f: float | Tensor,
        aleatoric_variance: AleatoricVariance,
        approximation: Approximation = "exact",
        posterior_transform: PosteriorTransform | None = None,
    ) -> None:
        r"""Robust target-value Expected Improvement.

        Args:
            model: A fitted single-outcome model of the mean output ``m`` (or a
                multi-output model with a scalarising ``posterior_transform``). Its
                posterior mean and variance are used as a Gaussian.
            target: The target value ``y•``.
            best_f: The incumbent ``E_min`` (see :func:`compute_e_min`): a scalar,
                or a ``batch_shape``-dim tensor for batched models.
            aleatoric_variance: ``σ_a²``: a non-negative float, a tensor
                broadcastable to the candidates' ``batch_shape x 1``, or a
                differentiable callable mapping ``batch_shape x q x d`` inputs to
                ``batch_shape x q`` variances. ``0`` gives the non-robust
                noncentral-χ² EI.
            approximation: ``"exact"`` (closed form) or ``"sankaran"`` (Sankaran's
                approximation of the three noncentral-χ² CDFs; can be negative).
            posterior_transform: A ``PosteriorTransform`` (optional).
        """
        super().__init__(model, target, aleatoric_variance, approximation, posterior_transform)
        self._set_incumbent(best_f)

    def _evaluate(self, offset: Tensor, std: Tensor, aleatoric: Tensor) -> Tensor:
        r"""Robust EI: non-negative expected improvements (in units of squared output)."""
        threshold = self.best_f.to(offset) - aleatoric
        if self.approximation == "sankaran":
            return sankaran_squared_gaussian_expected_improvement(threshold, offset, std)
        return squared_gaussian_expected_improvement(threshold, offset, std)


class RobustTargetProbabilityOfImprovement(_AnalyticRobustTargetAcquisitionFunction):
    r"""Robust target-value Probability of Improvement (analytic, ``q = 1``).

    ``PoI(x) = P(Ê(x) ≤ E_min − ζ) = Φ(b) − Φ(a)`` with ``c = E_min − ζ − σ_a²(x)`` and
    ``a``, ``b`` as in :class:`RobustTargetExpectedImprovement`; ``0`` where
    ``c ≤ 0``. The margin ``ζ ≥ 0`` prefers larger, less probable improvements.

    Example:
        >>> poi = RobustTargetProbabilityOfImprovement(
        ...     model, target=0.0, best_f=e_min, aleatoric_variance=0.25, zeta=0.01
        ... )
        >>> values = poi(test_X)  # test_X: batch_shape x 1 x d
    """

    def __init__(
        self,
        model: Model,
        target: float | Tensor,
        best_f: float | Tensor,
        aleatoric_variance: AleatoricVariance,
        zeta: float = 0.0,
        approximation: Approximation = "exact",
        posterior_transform: PosteriorTransform | None = None,
    ) -> None:
        r"""Robust target-value Probability of Improvement.

        Arguments as in :class:`RobustTargetExpectedImprovement` (``approximation``
        ``"sankaran"`` approximates the noncentral-χ² CDF), plus ``zeta``, the required
        improvement margin ``ζ ≥ 0``.
        """
        super().__init__(model, target, aleatoric_variance, approximation, posterior_transform)
        check_real_number("zeta", zeta, interval=NON_NEGATIVE)
        self.zeta = float(zeta)
        self._set_incumbent(best_f)

    def _threshold(self, offset: Tensor, aleatoric: Tensor) -> Tensor:
        r"""``c = E_min − ζ − σ_a²(x)``, in the dtype and on the device of ``offset``."""
        return self.best_f.to(offset) - self.zeta - aleatoric

    def _evaluate(self, offset: Tensor, std: Tensor, aleatoric: Tensor) -> Tensor:
        r"""Robust PoI: probabilities of improving by at least ``ζ``."""
        threshold = self._threshold(offset, aleatoric)
        if self.approximation == "sankaran":
            return sankaran_squared_gaussian_cdf(threshold, offset, std)
        return squared_gaussian_cdf(threshold, offset, std)


class LogRobustTargetProbabilityOfImprovement(RobustTargetProbabilityOfImprovement):
    r"""Logarithm of :class:`RobustTargetProbabilityOfImprovement` (analytic, ``q = 1``).

    Accurate far into the tails, where PoI underflows (``log P`` of order ``−λ/2``),
    via ``botorch.utils.probability.utils.log_prob_normal_in``. Where
    ``σ_a²(x) + ζ ≥ E_min`` no improvement is possible: the value is ``−inf`` (with
    zero gradient), so optimise it over candidates that can improve (e.g. with
    ``optimize_acqf_discrete``) or use the lower confidence bound.
    Only the exact form is available (``approximation="exact"``).
    """

    def __init__(
        self,
        model: Model,
        target: float | Tensor,
        best_f: float | Tensor,
        aleatoric_variance: AleatoricVariance,
        zeta: float = 0.0,
        posterior_transform: PosteriorTransform | None = None,
    ) -> None:
        r"""Log robust target-value Probability of Improvement.

        Arguments as in :class:`RobustTargetProbabilityOfImprovement`, without
        ``approximation``.
        """
        super().__init__(
            model, target, best_f, aleatoric_variance, zeta, "exact", posterior_transform
        )

    def _evaluate(self, offset: Tensor, std: Tensor, aleatoric: Tensor) -> Tensor:
        r"""Log robust PoI: log-probabilities (``−inf`` where no improvement is possible)."""
        return log_squared_gaussian_cdf(self._threshold(offset, aleatoric), offset, std)


class RobustTargetLowerConfidenceBound(_AnalyticRobustTargetAcquisitionFunction):
    r"""Robust target-value Lower Confidence Bound (analytic, ``q = 1``).

    Minimises the ``q``-quantile of ``Ê(x)``, ``σ_a²(x) + σ_e²(x)·F⁻¹_{1,λ(x)}(q)``
    (Eq. 14), and returns its negative so that larger is better. Small ``q`` is
    optimistic (explorative); as Gaussian intuition, ``q = Φ(−κ)`` for a
    ``μ − κσ`` bound. The exact quantile is ``σ_a² + w_q²`` where ``w_q ≥ 0`` solves
    ``Φ((w − δ)/s) − Φ((−w − δ)/s) = q``: found by bisection, with one Newton step
    attaching implicit-function gradients (see
    :func:`~botorch_nn_uq.acquisition.noncentral_chi2.squared_gaussian_quantile`).

    Unlike EI and PoI it is informative everywhere, including where
    ``σ_a²(x) ≥ E_min``, and needs no incumbent.

    Example:
        >>> lcb = RobustTargetLowerConfidenceBound(
        ...     model, target=0.0, aleatoric_variance=0.25, quantile=0.1
        ... )
        >>> values = lcb(test_X)  # test_X: batch_shape x 1 x d; values ≤ -0.25
    """

    def __init__(
        self,
        model: Model,
        target: float | Tensor,
        aleatoric_variance: AleatoricVariance,
        quantile: float = 0.1,
        approximation: Approximation = "exact",
        posterior_transform: PosteriorTransform | None = None,
    ) -> None:
        r"""Robust target-value Lower Confidence Bound.

        ``model``, ``target``, ``aleatoric_variance`` and ``posterior_transform`` as in
        :class:`RobustTargetExpectedImprovement`.

        Args:
            quantile: The probability level ``q ∈ (0, 1)`` of the bound.
            approximation: ``"exact"`` (bisection + Newton) or ``"sankaran"``
                (closed-form inverse of Sankaran's approximation).
        """
        super().__init__(model, target, aleatoric_variance, approximation, posterior_transform)
        check_real_number("quantile", quantile, interval=OPEN_UNIT_INTERVAL)
        check_resolvable_quantile(torch.tensor(float(quantile), dtype=torch.float64))
        self.quantile = float(quantile)

    def _evaluate(self, offset: Tensor, std: Tensor, aleatoric: Tensor) -> Tensor:
        r"""The negated ``q``-quantiles ``−(σ_a² + σ_e² F⁻¹_{1,λ}(q))`` of ``Ê``."""
        if self.approximation == "sankaran":
            squared_deviation = sankaran_squared_gaussian_quantile(self.quantile, offset, std)
        else:
            squared_deviation = squared_gaussian_quantile(self.quantile, offset, std)
        return -(aleatoric + squared_deviation)


class qRobustTargetExpectedImprovement(  # noqa: N801
    _RobustTargetArgumentsMixin, NonEmptyBatchMCAcquisitionFunction
):
    r"""MC-based batch robust target-value Expected Improvement (any ``q``).

    Samples ``m̂`` jointly at the ``q`` candidates, forms
    ``Ê_i = (m̂(x_i) − y•)² + σ_a²(x_i)`` per sample, and averages
    ``max_i (E_min − Ê_i)₊`` over samples. For ``q = 1`` it estimates
    :class:`RobustTargetExpectedImprovement`; it needs no Gaussian posterior, so it
    also serves sample-based (ensemble) posteriors.

    Example:
        >>> sampler = SobolQMCNormalSampler(sample_shape=torch.Size([1024]))
        >>> q_ei = qRobustTargetExpectedImprovement(
        ...     model, target=0.0, best_f=e_min, aleatoric_variance=0.25, sampler=sampler
        ... )
        >>> values = q_ei(test_X)  # test_X: batch_shape x q x d
    """

    def __init__(
        self,
        model: Model,
        target: float | Tensor,
        best_f: float | Tensor,
        aleatoric_variance: AleatoricVariance,
        sampler: MCSampler | None = None,
        objective: MCAcquisitionObjective | None = None,
        posterior_transform: PosteriorTransform | None = None,
        X_pending: Tensor | None = None,
    ) -> None:
        r"""q-Robust target-value Expected Improvement.

        Args:
            model: A fitted model of the mean output ``m``.
            target: The target value ``y•`` (on the objective's scale).
            best_f: The incumbent ``E_min``: a scalar, or a ``batch_shape``-dim tensor
                for batched models.
            aleatoric_variance: ``σ_a²``: a non-negative float, a tensor
                broadcastable to ``batch_shape x q`` (``q`` including pending
                points), or a differentiable callable mapping ``batch_shape x q x d``
                inputs to ``batch_shape x q`` variances.
            sampler: The sampler used to draw base samples (see
                ``MCAcquisitionFunction``).
            objective: The ``MCAcquisitionObjective`` mapping samples to the scalar
                output compared with the target. Defaults to ``IdentityMCObjective()``.
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
        )
        self._set_target_and_aleatoric_variance(target, aleatoric_variance)
        self._set_incumbent(best_f)

    def _get_samples_and_objectives(self, X: Tensor) -> tuple[Tensor, Tensor]:
        r"""Posterior samples and the negated expected squared errors ``−Ê``.

        Args:
            X: A ``batch_shape x q x d``-dim tensor of candidates.

        Returns:
            ``(samples, negative_squared_error)`` of shapes
            ``sample_shape x batch_shape x q x m`` and ``sample_shape x batch_shape x q``.
        """
        samples, obj = super()._get_samples_and_objectives(X)
        squared_error = (obj - self.target.to(obj)).square() + self._aleatoric_variance_at(X)
        return samples, -squared_error

    def _sample_forward(self, obj: Tensor) -> Tensor:
        r"""Improvements ``(E_min − Ê)₊`` per sample and batch point.

        Args:
            obj: A ``sample_shape x batch_shape x q``-dim tensor of ``−Ê`` samples.

        Returns:
            A ``sample_shape x batch_shape x q``-dim tensor of improvements.
        """
        return (obj + self.best_f.to(obj).unsqueeze(-1)).clamp_min(0)
