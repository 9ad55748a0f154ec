r"""Ensemble adaptation to dataset shift: scoring trained candidates on another
validation set, and selecting from a trained pool again without training.

**Neural Ensemble Search under dataset shift.** Zaidi et al. (2021, Section 4.3) adapt
an ensemble search to a shift expected at test time with a shifted validation set
``D_val^shift``, which encodes one's belief about the test-time shift but uses kinds of
corruption disjoint from the test ones (:mod:`~botorch_nn_uq.ensembles.shifts` has such
kinds for tabular inputs). Every network still trains on the untouched training data;
the shifted set only steers the selections: NES-RS and NES-RE
(:mod:`~botorch_nn_uq.ensembles.nes`) select their final ensemble by ForwardSelect on
``D_val^shift`` instead of ``D_val``; NES-RE picks each generation's parents on ``D_val``
or ``D_val^shift``, drawn uniformly, so that its pool holds networks that ensemble well
with and without shift (NES-RE-0 evolves on ``D_val`` only); and the deep-ensemble
baseline DeepEns (RS) (:mod:`~botorch_nn_uq.ensembles.deep_ensemble_search`) picks its
one architecture by its loss on ``D_val^shift``. As training never sees the shift, one
pool serves every severity: the paper evolves with severity 5 and then, for each
severity ``s = 0, ..., 5``, selects a separate ensemble from the same pool on
``D_val^shift`` of severity ``s``, to be tested on ``D_test^shift`` of severity ``s``.
Selecting again trains nothing: a :class:`CandidateScorer` scores the trained candidates
on a new validation set with one forward pass of their trained weights, and
:func:`select_from_pool` runs ForwardSelect on those scores::

    def shifted(severity: int) -> CandidateScorer:
        # One seed for every severity: nested shifts (the same noise, scaled up).
        generator = torch.Generator().manual_seed(1)
        X_shift, Y_shift = shift_validation_set(
            X_val, Y_val, severity, generator, reference=X_train
        )
        return CandidateScorer(X_shift, Y_shift, trainer.settings)

    pool, selection = nes_regularized_evolution(
        trainer, space, hyperparameters, shifted_validation=shifted(5), ...
    )
    ensembles = {s: select_from_pool(pool, 10, shifted(s)) for s in range(MAX_SEVERITY + 1)}

A validation set enters a search as a *validation scorer*: a callable that maps trained
candidates to their ``len(candidates) x v`` matrix of log-likelihoods on it, which
ForwardSelect combines. :func:`~botorch_nn_uq.ensembles.history.stack_log_likelihoods`
is the scorer of the plain validation set (the scores cached at training); a
:class:`CandidateScorer` is the scorer of any other set.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from botorch_nn_uq.ensembles.history import SearchHistory, stack_log_likelihoods, usable_candidates
from botorch_nn_uq.ensembles.holdout import member_log_likelihoods
from botorch_nn_uq.ensembles.pool import PoolSettings, TrainedCandidate, assemble_ensemble
from botorch_nn_uq.ensembles.selection import SelectionResult, forward_select

#: A validation scorer: maps trained candidates to their ``len(candidates) x v``
#: validation log-likelihoods ``log p_k(y_n | x_n)`` (``-inf`` rows for failed ones).
ValidationScorer = Callable[[Sequence[TrainedCandidate]], Tensor]


class CandidateScorer:
    r"""The validation scorer of a data set ``(X, Y)``, e.g. ``D_val^shift``: trained
    candidates' log-likelihoods on it, computed from their trained weights by forward
    passes (no training) and cached per candidate.

    Args:
        X: ``v x d`` inputs, in the coordinates of the pool's data
            (:class:`~botorch_nn_uq.ensembles.pool.PoolData`; for a searched-ensemble
            model, its transformed inputs).
        Y: ``v x m`` targets, in the same coordinates (a model's transformed outcomes).
        settings: The pool's settings, which say how the candidates predict (their
            heads), e.g. ``CandidateTrainer.settings``.
        Yvar: ``v x m`` known noise variances of the rows (positive, in the coordinates of
            ``Y``: a model's transformed ``train_Yvar``), or ``None``: the candidates are
            scored with them in place of their own noise model, as a pool with known
            noise scores its validation set.

    Calling it with ``candidates`` returns their ``len(candidates) x v`` float64 matrix of
    ``log p_k(y_n | x_n)`` (summed over the outputs), as
    :func:`~botorch_nn_uq.ensembles.history.stack_log_likelihoods` does for the validation
    set they were trained with: ``-inf`` rows for failed candidates, ``-inf`` for NaN.
    Mean-only members score with their own mean squared residual on ``(X, Y)`` as
    variance, as on the plain validation set; with ``Yvar``, every candidate scores with
    the known variances instead. The scorer holds the scored candidates (by
    identity), so a candidate is evaluated once however often it is scored.

    Example:
        >>> scorer = CandidateScorer(X_shift, Y_shift, trainer.settings)
        >>> pool, selection = nes_random_search(
        ...     trainer, space, hyperparameters, pool_size=20, ensemble_size=5,
        ...     generator=generator, shifted_validation=scorer,
        ... )
    """

    def __init__(
        self, X: Tensor, Y: Tensor, settings: PoolSettings, Yvar: Tensor | None = None
    ) -> None:
        if not (isinstance(X, Tensor) and isinstance(Y, Tensor) and X.ndim == Y.ndim == 2):
            raise ValueError("X and Y must be 2-dim tensors, v x d inputs and v x m targets.")
        if X.shape[0] != Y.shape[0] or X.shape[0] < 1:
            raise ValueError(
                f"X and Y must have the same positive number of rows; got {tuple(X.shape)} "
                f"and {tuple(Y.shape)}."
            )
        if not isinstance(settings, PoolSettings):
            raise TypeError(f"settings must be the pool's PoolSettings; got {settings!r}.")
        if Yvar is not None and not (
            isinstance(Yvar, Tensor) and Yvar.shape == Y.shape and (Yvar > 0).all()
        ):
            raise ValueError("Yvar must be a tensor of positive variances with the shape of Y.")
        self.X, self.Y, self.settings = X.detach(), Y.detach(), settings
        self.Yvar = None if Yvar is None else Yvar.detach()
        self._scores: dict[int, tuple[TrainedCandidate, Tensor]] = {}

    def __call__(self, candidates: Sequence[TrainedCandidate]) -> Tensor:
        r"""The ``len(candidates) x v`` log-likelihoods of ``candidates`` on ``(X, Y)``."""
        unscored = {
            id(candidate): candidate
            for candidate in candidates
            if not candidate.failed and id(candidate) not in self._scores
        }
        if unscored:
            rows = candidate_log_likelihoods(
                list(unscored.values()), self.X, self.Y, self.settings, self.Yvar
            )
            self._scores.update(
                (key, (candidate, row))
                for (key, candidate), row in zip(unscored.items(), rows, strict=True)
            )
        failed = torch.full((self.X.shape[0],), -math.inf, dtype=torch.float64)
        return torch.stack([failed if c.failed else self._scores[id(c)][1] for c in candidates])


def candidate_log_likelihoods(
    candidates: Sequence[TrainedCandidate],
    X: Tensor,
    Y: Tensor,
    settings: PoolSettings,
    Yvar: Tensor | None = None,
) -> Tensor:
    r"""Trained candidates' log-likelihoods on ``(X, Y)`` from their trained weights: the
    candidates are loaded into one member group per architecture and evaluated in one
    batched forward pass per group, in ``X``'s dtype and on its device. Nothing trains.

    Args:
        candidates: Trained (not failed) candidates.
        X: ``v x d`` inputs, in the coordinates of the pool's data.
        Y: ``v x m`` targets, likewise.
        settings: The pool's settings (the members' heads).
        Yvar: ``v x m`` known noise variances of the rows, used in place of the
            candidates' own noise model; ``None`` scores with their own.

    Returns:
        A ``len(candidates) x v`` float64 CPU tensor of ``log p_k(y_n | x_n)`` (``-inf``
        where a prediction is NaN).
    """
    # `assemble_ensemble` reorders the weights it is given to its member order; the
    # candidates' positions as weights give that order.
    positions = torch.arange(len(candidates), dtype=torch.float64)
    network, order = assemble_ensemble(candidates, positions, X.shape[-1], Y.shape[-1], settings)
    network = network.to(X)
    scores = torch.cat([member_log_likelihoods(group, X, Y, Yvar) for group in network.groups])
    rows = torch.empty_like(scores)
    rows[order.long()] = scores
    rows = rows.detach().cpu().to(torch.float64)
    return torch.where(torch.isnan(rows), -math.inf, rows)


def select_from_pool(
    pool: SearchHistory | Sequence[TrainedCandidate],
    ensemble_size: int,
    validation: ValidationScorer = stack_log_likelihoods,
) -> tuple[list[TrainedCandidate], SelectionResult]:
    r"""ForwardSelect ``ensemble_size`` members from a trained pool on a validation set,
    without training: the final selection of NES, and its reselection on another
    validation set (e.g. one per shift severity) from the same pool.

    Args:
        pool: The trained candidates (failed ones included) or a search history (a
            fitted model's ``search_history``, or ``SearchHistory.load(path)``), whose
            candidates keep their trained weights.
        ensemble_size: ``M``, the number of (distinct) members.
        validation: The validation scorer: the plain validation set the candidates were
            scored on in training (the default), or a :class:`CandidateScorer` of
            another set such as ``D_val^shift``.

    Returns:
        The usable (not failed) candidates and the ForwardSelect result (indices into
        them).

    Raises:
        NonFiniteLossError: If every candidate failed.
    """
    candidates = pool.candidates if isinstance(pool, SearchHistory) else list(pool)
    usable = usable_candidates(candidates)
    scores = validation(usable)
    if scores.ndim != 2 or scores.shape[0] != len(usable):
        raise ValueError(
            f"The validation scorer must return one row per candidate ({len(usable)}); got "
            f"shape {tuple(scores.shape)}."
        )
    return usable, forward_select(scores, ensemble_size)
