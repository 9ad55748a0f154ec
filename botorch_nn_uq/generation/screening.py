r"""Acquisition optimisation that screens with a cheap acquisition and decides with the
full one.

The posterior of a model with a bank of functions (NEON's epistemic indices, MC
dropout's masks) costs one forward pass per function: on the Brusselator composite
problem, NEON scores one candidate with ``128`` functions times ``64 x 64`` grid points,
and ``optimize_acqf`` with hundreds of raw samples and several L-BFGS restarts becomes
the bulk of a BO step. A model that serves only the bank's first functions
(``model.function_bank_subset(16)``) gives an acquisition that ranks candidates nearly
as well at a fraction of the cost. :func:`optimize_acqf_screened` spends that cheap
acquisition on the many evaluations (the raw samples, and optionally the L-BFGS
iterations) and the full one on the few that decide (the initial conditions, the end
points and the returned value).
"""

from __future__ import annotations

from typing import Any

import torch
from botorch.acquisition.acquisition import AcquisitionFunction
from botorch.optim import optimize_acqf
from botorch.utils.sampling import draw_sobol_samples
from torch import Tensor

from botorch_nn_uq.checks import check_choice, check_integer, check_seed

#: Candidate sets scored by one call of an acquisition function when ``options`` give no
#: ``batch_limit``: a bank of ``s`` functions on ``m`` outputs holds ``32 x s x q x m``
#: posterior values at once.
DEFAULT_BATCH_LIMIT = 32
OPTIMIZE_ON = ("screening", "full")


def optimize_acqf_screened(
    acq_function: AcquisitionFunction,
    screening_acq_function: AcquisitionFunction,
    bounds: Tensor,
    q: int,
    num_restarts: int,
    raw_samples: int,
    *,
    num_rescored: int | None = None,
    optimize_on: str = "screening",
    options: dict[str, Any] | None = None,
    seed: int | None = None,
) -> tuple[Tensor, Tensor]:
    r"""Maximise ``acq_function`` over a box, screening candidates with the cheaper
    ``screening_acq_function``; like ``botorch.optim.optimize_acqf`` with
    ``return_best_only=True``.

    The algorithm:

    1. Draw ``raw_samples`` scrambled-Sobol candidate sets (``raw_samples x q x d``) in
       ``bounds`` from ``seed`` (BoTorch's ``draw_sobol_samples``).
    2. Score them all with ``screening_acq_function`` (no gradients, ``batch_limit``
       candidate sets per call).
    3. Rescore the ``num_rescored`` best of them with ``acq_function`` and take the
       ``num_restarts`` best by that value as initial conditions. This top-k is
       deterministic, unlike ``optimize_acqf``'s default initialiser (Boltzmann sampling
       from torch's global generator): the same ``seed`` gives the same result.
    4. Run BoTorch's L-BFGS-B (``optimize_acqf`` with these initial conditions) on the
       screening acquisition (``optimize_on="screening"``) or on the full one
       (``"full"``).
    5. Score the restarts' end points and the best rescored raw candidate set with
       ``acq_function`` and return the best of them. The returned value is
       ``acq_function`` at the returned candidates, evaluated on them alone, so it is
       exactly what ``acq_function(candidates.unsqueeze(0))`` gives, and (up to
       rounding) it is never below the full value of the best rescored raw candidate
       set.

    The cost in evaluations of ``acq_function`` is ``num_rescored + num_restarts + 2``
    candidate sets, plus the L-BFGS iterations with ``optimize_on="full"``; everything
    else runs on the screening acquisition. With a screening model of 16 of 128
    functions, a screening evaluation costs an eighth of a full one.

    The two acquisition functions must value candidate sets independently of the other
    sets scored in the same call (true of MC acquisitions with BoTorch's samplers and
    this package's ``EnsembleIndexSampler``), since the scores are computed in chunks.

    Args:
        acq_function: The acquisition function to maximise (e.g. on the model's full
            bank of functions), taking ``b x q x d`` inputs.
        screening_acq_function: A cheaper acquisition function that ranks candidate
            sets like ``acq_function`` (e.g. the same acquisition on
            ``model.function_bank_subset(16)``), taking ``b x q x d`` inputs.
        bounds: A ``2 x d`` tensor of lower and upper bounds.
        q: The number of points per candidate set.
        num_restarts: The number of L-BFGS-B restarts.
        raw_samples: The number of Sobol candidate sets scored by the screening
            acquisition.
        num_rescored: The number of best screened candidate sets rescored by
            ``acq_function``, in ``[num_restarts, raw_samples]``; ``None`` takes
            ``min(raw_samples, 4 * num_restarts)``.
        optimize_on: ``"screening"`` to run L-BFGS-B on ``screening_acq_function``
            (cheap; the end points are then judged by ``acq_function``) or ``"full"``
            to run it on ``acq_function``.
        options: Options of ``optimize_acqf`` (``maxiter``, ``batch_limit``, ...), also
            used here: ``init_batch_limit`` (else ``batch_limit``, else
            ``DEFAULT_BATCH_LIMIT``) candidate sets are scored per acquisition call in
            steps 2, 3 and 5. The Sobol seed is the ``seed`` argument, not an option.
        seed: The seed of the Sobol scrambling; ``None`` draws one at random.

    Returns:
        A two-element tuple: the ``q x d`` candidates (detached) and the scalar
        (0-dim) tensor of ``acq_function``'s value at them.

    Example:
        >>> model = NEON(train_X, train_Y, output_grid=grid).fit(seed=0)  # 128 functions
        >>> def acquisition(model):
        ...     return qLeakyExpectedImprovement(
        ...         model,
        ...         best_f=best_g,
        ...         sampler=EnsembleIndexSampler(torch.Size([model.function_bank_size]), seed=0),
        ...         objective=objective,
        ...     )
        >>> candidates, value = optimize_acqf_screened(
        ...     acquisition(model),
        ...     acquisition(model.function_bank_subset(16)),
        ...     bounds,
        ...     q=1,
        ...     num_restarts=10,
        ...     raw_samples=256,
        ...     seed=0,
        ... )
        >>> candidates.shape, value.shape
        (torch.Size([1, d]), torch.Size([]))
    """
    options = dict(options or {})
    num_rescored = _validate_arguments(
        acq_function,
        screening_acq_function,
        bounds,
        q,
        num_restarts,
        raw_samples,
        num_rescored,
        optimize_on,
        options,
        seed,
    )
    batch_limit = options.get("init_batch_limit", options.get("batch_limit", DEFAULT_BATCH_LIMIT))
    raw_candidates = draw_sobol_samples(bounds, n=raw_samples, q=q, seed=seed)
    screened = _evaluate(screening_acq_function, raw_candidates, batch_limit)
    shortlist = raw_candidates[screened.topk(num_rescored).indices]
    shortlist_values = _evaluate(acq_function, shortlist, batch_limit)
    initial_conditions = shortlist[shortlist_values.topk(num_restarts).indices]
    optimized = acq_function if optimize_on == "full" else screening_acq_function
    end_points, _ = optimize_acqf(
        optimized,
        bounds,
        q=q,
        num_restarts=num_restarts,
        batch_initial_conditions=initial_conditions,
        return_best_only=False,
        options=options,
        # A retry needs fresh initial conditions, which would bypass the screening; a
        # restart that stops early (e.g. an ABNORMAL line search) still ends no worse on
        # the optimised acquisition than it started, and step 5 keeps the best rescored
        # raw candidates.
        retry_on_optimization_warning=False,
    )
    contenders = torch.cat([end_points.detach(), shortlist[shortlist_values.argmax()][None]])
    best = contenders[_evaluate(acq_function, contenders, batch_limit).argmax()]
    with torch.no_grad():
        value = acq_function(best.unsqueeze(0)).squeeze(0)
    return best, value


def _evaluate(acq_function: AcquisitionFunction, candidates: Tensor, batch_limit: int) -> Tensor:
    r"""``acq_function`` at ``b x q x d`` candidate sets, ``batch_limit`` sets per call:
    a ``b``-vector."""
    with torch.no_grad():
        return torch.cat([acq_function(chunk) for chunk in candidates.split(batch_limit)])


def _validate_arguments(
    acq_function: Any,
    screening_acq_function: Any,
    bounds: Any,
    q: Any,
    num_restarts: Any,
    raw_samples: Any,
    num_rescored: Any,
    optimize_on: Any,
    options: dict[str, Any],
    seed: Any,
) -> int:
    r"""Check the arguments of :func:`optimize_acqf_screened`; returns ``num_rescored``
    with its default filled in."""
    for name, acquisition in [
        ("acq_function", acq_function),
        ("screening_acq_function", screening_acq_function),
    ]:
        if not isinstance(acquisition, AcquisitionFunction):
            raise TypeError(
                f"{name} must be a BoTorch AcquisitionFunction; got {type(acquisition).__name__}."
            )
    if (
        not isinstance(bounds, Tensor)
        or not bounds.is_floating_point()
        or bounds.ndim != 2
        or bounds.shape[0] != 2
    ):
        shape = tuple(bounds.shape) if isinstance(bounds, Tensor) else type(bounds).__name__
        raise ValueError(f"bounds must be a 2 x d floating-point tensor; got {shape}.")
    if not (bounds.isfinite().all() and (bounds[1] >= bounds[0]).all()):
        raise ValueError(f"bounds must be finite with upper >= lower; got {bounds.tolist()}.")
    for name, acquisition in [
        ("acq_function", acq_function),
        ("screening_acq_function", screening_acq_function),
    ]:
        input_dim = _model_input_dim(acquisition)
        if input_dim is not None and input_dim != bounds.shape[-1]:
            raise ValueError(
                f"The model of {name} takes {input_dim}-dimensional inputs; bounds have "
                f"d = {bounds.shape[-1]}."
            )
    check_integer("q", q)
    check_integer("num_restarts", num_restarts)
    check_integer("raw_samples", raw_samples)
    if num_rescored is None:
        num_rescored = min(raw_samples, 4 * num_restarts)
    check_integer("num_rescored", num_rescored)
    if not num_restarts <= num_rescored <= raw_samples:
        raise ValueError(
            "optimize_acqf_screened needs num_restarts <= num_rescored <= raw_samples; got "
            f"num_restarts={num_restarts}, num_rescored={num_rescored}, "
            f"raw_samples={raw_samples}."
        )
    check_choice("optimize_on", optimize_on, OPTIMIZE_ON)
    if seed is not None:
        check_seed("seed", seed)
    if "seed" in options:
        raise ValueError(
            "Pass the Sobol seed of optimize_acqf_screened as `seed=`, not in `options`."
        )
    for name in ("init_batch_limit", "batch_limit"):
        if name in options:
            check_integer(f"options[{name!r}]", options[name])
    return num_rescored


def _model_input_dim(acq_function: AcquisitionFunction) -> int | None:
    r"""The input dimension of the acquisition's model where the model keeps its
    training inputs in problem units (``train_X``, as this package's models do), else
    ``None``."""
    train_X = getattr(getattr(acq_function, "model", None), "train_X", None)
    return train_X.shape[-1] if isinstance(train_X, Tensor) else None
