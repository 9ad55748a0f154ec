r"""Every use of BoTorch's private names, behind one door.

BoTorch keeps some helpers private that the package needs, and private names may change
in any release. Each one the package relies on is wrapped here, and
``tests/test_compat.py`` pins the behaviour relied on, so an upgrade that changes one
fails there, in one place, rather than somewhere inside a model or an acquisition. The
tested BoTorch range is bounded in ``pyproject.toml``.

Subclasses of BoTorch's test functions implement ``_evaluate_true``: that is BoTorch's
abstract extension point, not a private use, and it stays in those subclasses.
"""

from __future__ import annotations

from botorch.acquisition.analytic import _log_ei_helper, _scaled_improvement
from botorch.models.transforms.outcome import OutcomeTransform, Standardize
from botorch.posteriors.ensemble import EnsemblePosterior
from botorch.test_functions.base import BaseTestProblem
from torch import Tensor


def log_ei_helper(u: Tensor) -> Tensor:
    r"""``log(φ(u) + u Φ(u))``, computed stably for very negative ``u`` (the log of
    expected improvement in units of the posterior standard deviation).

    Args:
        u: A tensor of scaled improvements (any shape).

    Returns:
        A tensor of the same shape.
    """
    return _log_ei_helper(u)


def scaled_improvement(mean: Tensor, sigma: Tensor, best_f: Tensor, maximize: bool) -> Tensor:
    r"""``u = (mean - best_f) / sigma``, or ``-u`` when minimising.

    Args:
        mean: Posterior means (any shape broadcastable with ``sigma`` and ``best_f``).
        sigma: Posterior standard deviations.
        best_f: The incumbent.
        maximize: Whether larger values are better.
    """
    return _scaled_improvement(mean, sigma, best_f, maximize)


def is_linear(outcome_transform: OutcomeTransform) -> bool:
    r"""Whether ``outcome_transform`` is affine (``Standardize``, chains of affine
    transforms), so it maps a Gaussian (or a mixture of Gaussians) to one exactly."""
    return bool(getattr(outcome_transform, "_is_linear", False))


def standardize_min_stdv(transform: Standardize) -> float:
    r"""The smallest standard deviation ``transform`` divides by (its ``min_stdv``)."""
    return transform._min_stdv


def standardize_width(transform: Standardize) -> int:
    r"""The number of outputs ``m`` that ``transform`` standardises."""
    return transform._m


def ensemble_weights(posterior: EnsemblePosterior) -> Tensor | None:
    r"""The member weights ``posterior`` was constructed with, as given (``None`` for
    uniform weights); BoTorch's public ``weights`` are renormalised, and passing those
    on would not keep a derived posterior bit-identical."""
    return posterior._weights


def evaluate_true_unchecked(test_function: BaseTestProblem, X: Tensor) -> Tensor:
    r"""The noiseless value of ``test_function`` at ``X`` (``batch_shape x d``) without
    BoTorch's bounds check, which compares ``X`` with a CPU buffer and so fails for
    inputs on another device; callers check the bounds themselves."""
    return test_function._evaluate_true(X)
