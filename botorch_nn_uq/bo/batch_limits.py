r"""How large a batch ``optimize_acqf`` can hold: a model of its peak memory for an MC
q-acquisition, measured on BoTorch's GP, and the largest batch that fits a budget.
:class:`~botorch_nn_uq.bo.proposers.AcquisitionProposer` refuses a batch beyond it before
any work.
"""

from __future__ import annotations

import math

__all__ = ["ACQUISITION_MEMORY_BUDGET", "largest_optimize_acqf_batch", "optimize_acqf_memory"]

#: The memory in bytes that ``optimize_acqf`` may take for a q-acquisition's batch
#: (:func:`optimize_acqf_memory`); :class:`~botorch_nn_uq.bo.proposers.AcquisitionProposer`
#: refuses larger batches.
ACQUISITION_MEMORY_BUDGET = 4 * 2**30

# Numbers allocated at once per batch of q points, as (q^2 coefficient, q coefficient):
# the larger of the two terms counts, the joint posterior over the batch (its q x q
# covariance and Cholesky factor) and the 128 MC samples of the batch. Measured as the
# peak resident memory of one qLogEI evaluation on a SingleTaskGP of 9 points (d = 2 to
# 50; q = 200 to 1600 for the q^2 term, q = 10 to 50 with 512 to 2048 raw samples for
# the q term), then rounded up: per raw sample (scored all at once, without gradients)
# 5.2 q^2 and 1,400 q; per restart (an L-BFGS-B evaluation, with gradients) 10 q^2 and
# 3,200 q.
_NUMBERS_PER_RAW_SAMPLE = (6, 1500)
_NUMBERS_PER_RESTART = (12, 3300)


def optimize_acqf_memory(q: int, raw_samples: int, num_restarts: int, element_size: int = 8) -> int:
    r"""The estimated peak memory in bytes of ``optimize_acqf`` maximising an MC
    q-acquisition (e.g. qLogEI) over a batch of ``q`` points on a model with a joint
    Gaussian posterior over the batch (a GP's, on which it was measured).

    ``optimize_acqf`` scores its ``raw_samples`` candidate batches at once (BoTorch's
    ``init_batch_limit`` is not set), each with the joint posterior over its ``q``
    points, then optimises ``num_restarts`` batches together with gradients; the larger
    of the two phases counts. Each takes, per batch, the larger of a term in ``q^2``
    (the posterior covariance and its Cholesky factor) and a term in ``q`` (the MC
    samples), with the coefficients measured for qLogEI on a ``SingleTaskGP`` (see the
    module's ``_NUMBERS_PER_RAW_SAMPLE``). Optimising the batch point by point
    (``sequential``) needs as much: its last point is scored jointly with the ``q - 1``
    points chosen before it. The training data add a term in ``n q`` per batch, small
    for the data sizes of a BO run, which is not counted.

    Args:
        q: The batch size.
        raw_samples: ``optimize_acqf``'s raw samples.
        num_restarts: ``optimize_acqf``'s restarts.
        element_size: Bytes per number (8 for float64, 4 for float32).

    Returns:
        The estimated peak in bytes.

    Example:
        >>> optimize_acqf_memory(20_000, raw_samples=512, num_restarts=10) / 2**30
        9155.27...
    """
    phases = ((raw_samples, _NUMBERS_PER_RAW_SAMPLE), (num_restarts, _NUMBERS_PER_RESTART))
    return element_size * max(
        batches * max(square * q * q, linear * q) for batches, (square, linear) in phases
    )


def largest_optimize_acqf_batch(
    raw_samples: int,
    num_restarts: int,
    budget: int = ACQUISITION_MEMORY_BUDGET,
    element_size: int = 8,
) -> int:
    r"""The largest batch size whose :func:`optimize_acqf_memory` fits ``budget``.

    Args:
        raw_samples: ``optimize_acqf``'s raw samples.
        num_restarts: ``optimize_acqf``'s restarts.
        budget: The memory budget in bytes.
        element_size: Bytes per number (8 for float64, 4 for float32).

    Returns:
        The largest ``q`` (0 if not even one point fits).

    Example:
        >>> largest_optimize_acqf_batch(raw_samples=512, num_restarts=10)
        418
    """
    limits = []
    for batches, (square, linear) in (
        (raw_samples, _NUMBERS_PER_RAW_SAMPLE),
        (num_restarts, _NUMBERS_PER_RESTART),
    ):
        # The numbers one batch may hold: both terms must fit them.
        numbers = budget // (element_size * batches)
        limits.append(min(math.isqrt(numbers // square), numbers // linear))
    return min(limits)
