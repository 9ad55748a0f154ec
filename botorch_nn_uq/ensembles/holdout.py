r"""Held-out data of the ensemble builders: hold-out sizes, validation splits (a
hold-out or cross-validation folds) and the log-likelihoods of candidates on held-out rows.

Ensemble builders score many candidate configurations on held-out data and select
among them without retraining. With the small data sets of BO, a single hold-out set
wastes data and is noisy, so candidates can also be scored OUT OF FOLD: each candidate
is trained once per fold (all folds of all candidates in one batched computation) and
every row is predicted by the copy that did not see it.

Every hold-out of the package (a deep ensemble's per-member validation rows, a
hyper-deep ensemble's hold-out split, a searched ensemble's selection rows) is sized by
:func:`holdout_size`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from botorch_nn_uq.nn.batched_mlp import BatchedMLP
from botorch_nn_uq.training.config import TrainingConfig
from botorch_nn_uq.training.losses import KnownNoise
from botorch_nn_uq.training.members import fit_members

VALIDATION_SCHEMES = ("auto", "cross-validation", "holdout")
#: The fewest rows a hold-out leaves on each side, given at least twice as many rows: a
#: single held-out row scores a network by one residual (and a mean-only network's
#: variance estimate is that residual), a single training row fits one point.
MIN_ROWS_PER_SIDE = 2


def holdout_size(num_rows: int, fraction: float) -> int:
    r"""The number of rows a hold-out of ``fraction`` of ``num_rows`` rows validates on.

    ``ceil(fraction * num_rows)``, moved into ``[k, num_rows - k]`` so that both the
    held-out and the training rows number at least ``k = min(2, num_rows // 2)``
    (:data:`MIN_ROWS_PER_SIDE`): two each from four rows on, one each from two or three.

    Args:
        num_rows: The number of rows ``n``, at least 2.
        fraction: The held-out fraction, in ``(0, 1)``.

    Returns:
        The number of held-out rows, in ``[1, n - 1]``.

    Example:
        >>> holdout_size(30, 0.2), holdout_size(8, 0.2), holdout_size(5, 0.2)
        (6, 2, 2)
    """
    if num_rows < 2:
        raise ValueError(f"A hold-out needs at least 2 rows; got {num_rows}.")
    if not 0 < fraction < 1:
        raise ValueError(f"The held-out fraction must be in (0, 1); got {fraction}.")
    least = min(MIN_ROWS_PER_SIDE, num_rows // 2)
    return min(num_rows - least, max(least, math.ceil(fraction * num_rows)))


@dataclass(frozen=True)
class ValidationSplits:
    r"""Row masks of ``F`` training / validation splits of ``n`` rows.

    Attributes:
        train_weights: ``F x n`` 0/1 training masks.
        validation_weights: ``F x n`` 0/1 validation masks; each row is validated in at
            most one split (exactly one for cross-validation).
    """

    train_weights: Tensor
    validation_weights: Tensor

    @property
    def num_splits(self) -> int:
        r"""The number of splits ``F``."""
        return self.train_weights.shape[0]

    @property
    def validation_rows(self) -> Tensor:
        r"""Indices of the rows that some split validates on."""
        return self.validation_weights.sum(0).nonzero().squeeze(-1)


def make_validation_splits(
    num_data: int,
    scheme: str,
    num_folds: int = 5,
    validation_fraction: float = 0.2,
    cross_validation_max_points: int = 200,
    generator: torch.Generator | None = None,
) -> ValidationSplits:
    r"""Random validation splits.

    Args:
        num_data: The number of rows ``n`` (at least 2).
        scheme: ``"cross-validation"`` (``num_folds`` folds, capped at ``n``),
            ``"holdout"`` (one split: a random ``validation_fraction`` of the rows held
            out, :func:`holdout_size` rows), or ``"auto"``: cross-validation for at most
            ``cross_validation_max_points`` rows, else hold-out.
        num_folds: Folds of cross-validation (at least 2).
        validation_fraction: Hold-out fraction in ``(0, 1)``.
        cross_validation_max_points: The ``"auto"`` threshold.
        generator: The source of the splits (one permutation of the rows); ``None``
            draws from torch's global generator.

    Returns:
        The :class:`ValidationSplits`.
    """
    if scheme not in VALIDATION_SCHEMES:
        raise ValueError(
            f"Unknown validation scheme {scheme!r}; valid: {', '.join(VALIDATION_SCHEMES)}."
        )
    if num_data < 2:
        raise ValueError(f"Validation needs at least 2 rows; got {num_data}.")
    if num_folds < 2:
        raise ValueError(f"num_folds must be at least 2; got {num_folds}.")
    if not 0 < validation_fraction < 1:
        raise ValueError(f"validation_fraction must be in (0, 1); got {validation_fraction}.")
    if scheme == "auto":
        scheme = "cross-validation" if num_data <= cross_validation_max_points else "holdout"
    order = torch.randperm(num_data, generator=generator)
    if scheme == "cross-validation":
        folds = torch.arange(num_data) % min(num_folds, num_data)
        validation = torch.zeros(int(folds.max()) + 1, num_data)
        validation[folds, order] = 1.0
    else:
        validation = torch.zeros(1, num_data)
        validation[0, order[: holdout_size(num_data, validation_fraction)]] = 1.0
    return ValidationSplits(train_weights=1.0 - validation, validation_weights=validation)


def member_log_likelihoods(
    network: BatchedMLP, X: Tensor, Y: Tensor, Yvar: Tensor | None = None
) -> Tensor:
    r"""Each member's predictive log density ``log p_k(y_n | x_n)`` (summed over outputs).

    Gaussian heads use their predicted standard deviation; mean-only members use a
    Gaussian with their own maximum-likelihood variance (mean squared residual over the
    given rows). With known observation noise ``Yvar``, every member uses it instead:
    the likelihood a model with known noise (``train_Yvar``) serves.

    Args:
        network: ``K`` members (evaluated in ``eval`` mode).
        X: ``n x d`` inputs.
        Y: ``n x m`` targets.
        Yvar: ``n x m`` known noise variances of the rows (positive, in the units of
            ``Y``), or ``None``.

    Returns:
        A ``K x n`` tensor.
    """
    network.eval()
    with torch.no_grad():
        output = network(X)
    residuals = output.mean - Y
    if Yvar is not None:
        variance = Yvar
    elif output.std is None:
        variance = residuals.pow(2).mean(dim=-2, keepdim=True).clamp_min(1e-12)
    else:
        variance = output.std.pow(2)
    log_density = -0.5 * (torch.log(2 * math.pi * variance) + residuals.pow(2) / variance)
    return log_density.sum(-1)


def validation_log_likelihoods(
    make_network: Callable[[int], BatchedMLP],
    train_X: Tensor,
    train_Y: Tensor,
    splits: ValidationSplits,
    config: TrainingConfig,
    *,
    l2_regularization: Tensor,
    learning_rates: Tensor,
    dropout_generator: torch.Generator | None = None,
    known_noise: KnownNoise | None = None,
    progress: bool = False,
) -> Tensor:
    r"""Cached validation log-likelihoods of ``C`` candidate configurations.

    Every candidate is trained once per split on that split's training rows, all ``C x
    F`` copies in one batched computation, and each validation row is scored by the
    copy that held it out.

    Args:
        make_network: Maps the number of members ``C x F`` to a fresh
            :class:`BatchedMLP` whose member ``c * F + f`` is candidate ``c``'s copy for
            split ``f`` (its dropout rates and seeds set accordingly).
        train_X: ``n x d`` training inputs.
        train_Y: ``n x m`` training targets.
        splits: The validation splits (``F``).
        config: The training settings shared by all candidates.
        l2_regularization: ``C``-vector of each candidate's L2 ``lambda``.
        learning_rates: ``C``-vector of each candidate's learning rate.
        dropout_generator: The source of the training-time dropout masks; ``None``
            draws from torch's global generator.
        known_noise: The known observation noise of the ``n`` rows (``n x m``), or
            ``None``: every copy trains on it (see
            :func:`~botorch_nn_uq.training.members.fit_members`) and is scored with the
            held-out rows' known variances (see :func:`member_log_likelihoods`).
        progress: Show a progress bar.

    Returns:
        A ``C x n_val`` tensor of log densities at the validation rows
        (``splits.validation_rows``); ``-inf`` where the scoring copy diverged before
        reaching a finite training loss.
    """
    num_splits = splits.num_splits
    num_candidates = l2_regularization.shape[0]
    network = make_network(num_candidates * num_splits).to(train_X)
    result = fit_members(
        network,
        train_X,
        train_Y,
        config,
        l2_regularization=l2_regularization.repeat_interleave(num_splits),
        row_weights=splits.train_weights.to(train_X).repeat(num_candidates, 1),
        learning_rates=learning_rates.repeat_interleave(num_splits),
        dropout_generator=dropout_generator,
        known_noise=known_noise,
        progress=progress,
        description="validation copies",
    )
    rows = splits.validation_rows
    validation_mask = splits.validation_weights.to(train_X)[:, rows]
    scores = torch.zeros(num_candidates * num_splits, rows.shape[0]).to(train_X)
    for split in range(num_splits):
        # Mean-only members estimate their variance on each split's own held-out rows.
        held_out = splits.validation_weights[split].nonzero().squeeze(-1)
        split_scores = member_log_likelihoods(
            network,
            train_X[held_out],
            train_Y[held_out],
            None if known_noise is None else known_noise.variance[held_out],
        )
        positions = torch.searchsorted(rows, held_out)
        scores[:, positions] = split_scores
    # A copy that never had a finite training loss has no usable prediction.
    never_finite = ~torch.isfinite(result.best_loss).to(scores.device)
    scores[never_finite] = -math.inf
    scores = scores.view(num_candidates, num_splits, -1)
    return torch.where(validation_mask.bool(), scores, torch.zeros_like(scores)).sum(1)
