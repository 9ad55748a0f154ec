r"""Training pools of candidate networks for ensemble search, in-process or on Ray.

A candidate is an architecture, its training hyperparameters and a seed. Candidates
that share an architecture, a batch size and an optimizer train together as ONE batched
computation (:class:`~botorch_nn_uq.nn.batched_mlp.BatchedMLP` in member mode of the
shared training loop): per-member learning rates, early-stopping and plateau patience,
each member checkpointed at its minimum validation loss. Every candidate is then scored
by its validation log-likelihoods, which greedy selection combines without retraining.

Training a group is a pure function of its candidates and the data, so an executor may
run groups anywhere: :class:`InProcessExecutor` runs them one after another, and
:class:`RayExecutor` runs one Ray task per group, locally (``ray.init()``) or on an
existing cluster, with identical results for the same seeds. A candidate whose training
diverges is recorded with an infinite validation loss, never dropped.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import Tensor

from botorch_nn_uq.checks import NON_NEGATIVE, check_integer_fields, check_real_fields
from botorch_nn_uq.ensembles.architecture_space import Architecture
from botorch_nn_uq.ensembles.holdout import member_log_likelihoods
from botorch_nn_uq.ensembles.hyperparameter_space import TrainingHyperparameters
from botorch_nn_uq.nn.batched_mlp import BatchedMLP, EnsembleNetwork
from botorch_nn_uq.training.config import NonFiniteLossError, TrainingConfig
from botorch_nn_uq.training.losses import KnownNoise
from botorch_nn_uq.training.members import fit_members


@dataclass(frozen=True)
class CandidateSpec:
    r"""One candidate network of a search.

    Attributes:
        candidate_id: Its position in the search history (0, 1, ...).
        architecture: Its architecture.
        hyperparameters: Its training hyperparameters.
        seed: Its member seed (initialisation and data order).
    """

    candidate_id: int
    architecture: Architecture
    hyperparameters: TrainingHyperparameters
    seed: int

    def to_dict(self) -> dict[str, Any]:
        r"""A JSON-serialisable form."""
        return {
            "candidate_id": self.candidate_id,
            "architecture": self.architecture.to_dict(),
            "hyperparameters": self.hyperparameters.to_dict(),
            "seed": self.seed,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CandidateSpec:
        r"""The inverse of :meth:`to_dict`."""
        return cls(
            candidate_id=int(data["candidate_id"]),
            architecture=Architecture.from_dict(data["architecture"]),
            hyperparameters=TrainingHyperparameters.from_dict(data["hyperparameters"]),
            seed=int(data["seed"]),
        )

    @property
    def group_key(self) -> tuple[Architecture, int, str]:
        r"""Candidates with equal keys train as one batched computation."""
        return (
            self.architecture,
            self.hyperparameters.batch_size,
            self.hyperparameters.optimizer,
        )


@dataclass(frozen=True)
class PoolSettings:
    r"""Settings shared by every candidate of a pool.

    Attributes:
        epochs: The maximum number of epochs (early stopping may end training sooner).
        max_steps: A budget in optimizer steps (whichever of ``epochs`` and
            ``max_steps`` ends first), so a candidate costs the same whatever the number
            of training rows; ``None``: ``epochs`` only.
        gaussian_head: Whether members predict a standard deviation.
        min_std: Floor of the predicted standard deviation.
        l2_regularization: Keras-style L2 ``lambda``.
        lr_reduction_factor: The plateau reduction factor of the learning rate.
    """

    epochs: int = 100
    max_steps: int | None = None
    gaussian_head: bool = True
    min_std: float = 1e-3
    l2_regularization: float = 0.0
    lr_reduction_factor: float = 0.1


@dataclass(frozen=True)
class PoolData:
    r"""Transformed training and validation data of a pool.

    With known observation noise (a model's transformed ``train_Yvar``, split with its
    rows), the candidates train on it as a
    :class:`~botorch_nn_uq.models.ensemble.DeepEnsemble`'s members do, and their
    validation log-likelihoods use the validation rows' known variances.

    Attributes:
        train_X: ``n x d`` training inputs.
        train_Y: ``n x m`` training targets.
        validation_X: ``v x d`` validation inputs.
        validation_Y: ``v x m`` validation targets.
        train_Yvar: ``n x m`` known noise variances of the training rows (positive), or
            ``None`` without known noise.
        validation_Yvar: ``v x m`` known noise variances of the validation rows; given
            exactly when ``train_Yvar`` is.
    """

    train_X: Tensor
    train_Y: Tensor
    validation_X: Tensor
    validation_Y: Tensor
    train_Yvar: Tensor | None = None
    validation_Yvar: Tensor | None = None

    def __post_init__(self) -> None:
        if (self.train_Yvar is None) != (self.validation_Yvar is None):
            raise ValueError("Give known noise for both the training and the validation rows.")

    @property
    def known_noise(self) -> KnownNoise | None:
        r"""The known noise of the training rows followed by the validation rows
        (``(n + v) x m``, as :func:`train_candidate_group` stacks them), or ``None``."""
        if self.train_Yvar is None:
            return None
        return KnownNoise.from_variance(torch.cat([self.train_Yvar, self.validation_Yvar]))


@dataclass
class TrainedCandidate:
    r"""A trained (or failed) candidate.

    Attributes:
        spec: The candidate.
        validation_log_likelihoods: ``v``-vector of ``log p(y | x)`` at the validation
            points (``-inf`` everywhere if training failed).
        validation_nll: Mean validation negative log-likelihood (``inf`` if failed).
        state: The member's weights (CPU tensors, keyed like a one-member
            ``BatchedMLP``'s state dict), ``None`` if training failed.
        seconds: Its share of its group's training time.
        steps: The optimizer steps its group's training took (0 if unknown).
        error: Why training failed, if it did.
    """

    spec: CandidateSpec
    validation_log_likelihoods: Tensor
    validation_nll: float
    state: dict[str, Tensor] | None
    seconds: float
    error: str | None = None
    steps: int = 0

    @property
    def failed(self) -> bool:
        r"""Whether training failed (the candidate can never be selected)."""
        return self.state is None


class PoolExecutor(Protocol):
    r"""Runs independent group-training calls, returning results in order.

    An executor may also provide ``imap_unordered(function, arguments)``, an iterator
    over the results in the order the calls finish; :func:`train_pool` then reports
    each group as soon as it is trained (e.g. to checkpoint a search), where ``map``
    alone reports them only when all are done.
    """

    def map(
        self, function: Callable[..., list[TrainedCandidate]], arguments: Sequence[tuple]
    ) -> list[list[TrainedCandidate]]: ...


class InProcessExecutor:
    r"""Trains the groups one after another in this process."""

    def map(
        self, function: Callable[..., list[TrainedCandidate]], arguments: Sequence[tuple]
    ) -> list[list[TrainedCandidate]]:
        r"""``[function(*args) for args in arguments]``."""
        return [function(*args) for args in arguments]

    def imap_unordered(
        self, function: Callable[..., list[TrainedCandidate]], arguments: Sequence[tuple]
    ) -> Iterator[list[TrainedCandidate]]:
        r"""Yield ``function(*args)`` for each of ``arguments``, each as soon as it is
        computed (here in order)."""
        for args in arguments:
            yield function(*args)


@dataclass
class RayExecutor:
    r"""Trains each group as one Ray task.

    A task runs in a Ray worker process, whose torch threads are its own: the workers
    start with ``OMP_NUM_THREADS=threads_per_task`` and each task reserves as many of
    Ray's CPUs, so the tasks together never run more threads than the CPUs Ray was
    given. (In this process the package leaves torch's threads to the caller.)

    A search whose data live on a GPU needs ``gpus_per_task > 0``: Ray hides the GPUs
    from a task that reserves none (its ``CUDA_VISIBLE_DEVICES`` is empty), and a
    fraction lets several tasks share one GPU (0.25: four at a time). Ray numbers a
    task's visible GPUs from 0, so the data should be on ``cuda`` (``cuda:0``).

    Args:
        address: The address of an existing Ray cluster; ``None`` starts (or reuses) a
            local Ray instance with ``ray.init()``.
        num_cpus: CPUs of a local instance (``None``: all).
        init_kwargs: Further keyword arguments of ``ray.init``.
        threads_per_task: Torch threads of each task's worker process, and the CPUs the
            task reserves. The candidates' networks are small: one thread trains them
            fastest, and more tasks run side by side.
        gpus_per_task: The GPUs each task reserves (a fraction shares one); 0, the
            default, reserves none, for data on the CPU.

    Raises:
        ImportError: If Ray is not installed (``pip install "botorch-nn-uq[ray]"``).
    """

    address: str | None = None
    num_cpus: int | None = None
    init_kwargs: dict[str, Any] = field(default_factory=dict)
    threads_per_task: int = 1
    gpus_per_task: float = 0.0

    def __post_init__(self) -> None:
        check_integer_fields(self, "threads_per_task")
        check_real_fields(self, "gpus_per_task", interval=NON_NEGATIVE)
        try:
            import ray
        except ImportError as error:
            raise ImportError('RayExecutor needs Ray: pip install "botorch-nn-uq[ray]".') from error
        if not ray.is_initialized():
            options = dict(self.init_kwargs)
            if self.address is None:
                options.setdefault("num_cpus", self.num_cpus)
            ray.init(address=self.address, **options)
        self._ray = ray

    def map(
        self, function: Callable[..., list[TrainedCandidate]], arguments: Sequence[tuple]
    ) -> list[list[TrainedCandidate]]:
        r"""Submit one task per argument tuple and wait for all of them."""
        remote = self._remote(function)
        return self._ray.get([remote.remote(*args) for args in arguments])

    def imap_unordered(
        self, function: Callable[..., list[TrainedCandidate]], arguments: Sequence[tuple]
    ) -> Iterator[list[TrainedCandidate]]:
        r"""Submit one task per argument tuple and yield the results as tasks finish."""
        remote = self._remote(function)
        pending = [remote.remote(*args) for args in arguments]
        while pending:
            done, pending = self._ray.wait(pending, num_returns=1)
            yield self._ray.get(done[0])

    def _remote(self, function: Callable[..., Any]) -> Any:
        # The thread count must be in the environment when the worker process starts,
        # before torch sizes its thread pool.
        threads = {"OMP_NUM_THREADS": str(self.threads_per_task)}
        resources = {"num_cpus": self.threads_per_task}
        if self.gpus_per_task > 0:
            resources["num_gpus"] = self.gpus_per_task
        return self._ray.remote(**resources, runtime_env={"env_vars": threads})(function)


def train_candidate_group(
    specs: Sequence[CandidateSpec], data: PoolData, settings: PoolSettings
) -> list[TrainedCandidate]:
    r"""Train candidates that share :attr:`CandidateSpec.group_key` as one computation.

    Training rows and validation rows are stacked; each member trains on the training
    rows with its own learning rate, early-stopping and plateau patience, and keeps the
    weights of its minimum validation loss (with the data's known noise, both losses and
    the validation log-likelihoods use it).

    Args:
        specs: Candidates with one group key.
        data: The pool's data.
        settings: The shared settings.

    Returns:
        One :class:`TrainedCandidate` per spec, in order.
    """
    if len({spec.group_key for spec in specs}) != 1:
        raise ValueError("A group's candidates must share architecture, batch size and optimizer.")
    start = time.perf_counter()
    network = build_members(
        specs[0].architecture,
        [spec.seed for spec in specs],
        data.train_X.shape[-1],
        data.train_Y.shape[-1],
        settings,
    ).to(data.train_X)
    X = torch.cat([data.train_X, data.validation_X])
    Y = torch.cat([data.train_Y, data.validation_Y])
    is_train = torch.cat(
        [torch.ones(data.train_X.shape[0]), torch.zeros(data.validation_X.shape[0])]
    ).to(X)
    num_members = len(specs)
    hyperparameters = [spec.hyperparameters for spec in specs]
    config = TrainingConfig(
        epochs=settings.epochs,
        max_steps=settings.max_steps,
        # The largest rate as the reference keeps every member's rescale factor <= 1, so
        # no member's update drowns in rounding against the reference step.
        learning_rate=max(h.learning_rate for h in hyperparameters),
        batch_size=hyperparameters[0].batch_size,
        optimizer=hyperparameters[0].optimizer,
        lr_reduction_factor=settings.lr_reduction_factor,
    )
    error = None
    steps = 0
    try:
        result = fit_members(
            network,
            X,
            Y,
            config,
            l2_regularization=settings.l2_regularization,
            row_weights=is_train.expand(num_members, -1),
            validation_row_weights=(1 - is_train).expand(num_members, -1),
            learning_rates=torch.tensor(
                [h.learning_rate for h in hyperparameters], dtype=X.dtype, device=X.device
            ),
            early_stopping_patience=torch.tensor(
                [h.early_stopping_patience for h in hyperparameters]
            ),
            lr_reduction_patience=torch.tensor([h.lr_reduction_patience for h in hyperparameters]),
            known_noise=data.known_noise,
            description="candidates",
        )
        steps = result.steps_run
        trained = torch.isfinite(result.best_loss)
        log_likelihoods = member_log_likelihoods(
            network, data.validation_X, data.validation_Y, data.validation_Yvar
        )
        trained &= torch.isfinite(log_likelihoods).all(-1).cpu()
    except NonFiniteLossError as failure:
        error = str(failure)
        trained = torch.zeros(num_members, dtype=torch.bool)
        log_likelihoods = torch.full((num_members, data.validation_X.shape[0]), -math.inf)
    seconds = (time.perf_counter() - start) / num_members
    state = {name: tensor.detach().cpu() for name, tensor in network.state_dict().items()}
    outcomes = []
    for member, spec in enumerate(specs):
        if bool(trained[member]):
            scores = log_likelihoods[member].detach().cpu()
            outcomes.append(
                TrainedCandidate(
                    spec=spec,
                    validation_log_likelihoods=scores,
                    validation_nll=float(-scores.mean()),
                    state={
                        name: tensor[member : member + 1].clone() for name, tensor in state.items()
                    },
                    seconds=seconds,
                    steps=steps,
                )
            )
        else:
            outcomes.append(
                TrainedCandidate(
                    spec=spec,
                    validation_log_likelihoods=torch.full(
                        (data.validation_X.shape[0],), -math.inf, dtype=torch.float64
                    ),
                    validation_nll=math.inf,
                    state=None,
                    seconds=seconds,
                    steps=steps,
                    error=error or "non-finite training loss or validation prediction",
                )
            )
    return outcomes


def train_pool(
    specs: Sequence[CandidateSpec],
    data: PoolData,
    settings: PoolSettings,
    executor: PoolExecutor | None = None,
    on_group_done: Callable[[list[TrainedCandidate]], None] | None = None,
) -> list[TrainedCandidate]:
    r"""Train candidates, grouped by :attr:`CandidateSpec.group_key` (one batched
    computation, and one executor task, per group).

    Args:
        specs: The candidates.
        data: The pool's data.
        settings: The shared settings.
        executor: Where groups run; in-process by default.
        on_group_done: Called with each group's trained candidates as soon as the group
            is trained (with an executor that has no ``imap_unordered``, once all are).

    Returns:
        One :class:`TrainedCandidate` per spec, in the order of ``specs``.
    """
    groups: dict[tuple, list[CandidateSpec]] = {}
    for spec in specs:
        groups.setdefault(spec.group_key, []).append(spec)
    executor = executor or InProcessExecutor()
    arguments = [(group, data, settings) for group in groups.values()]
    as_completed = getattr(executor, "imap_unordered", None)
    if on_group_done is not None and as_completed is not None:
        results = []
        for outcomes in as_completed(train_candidate_group, arguments):
            on_group_done(outcomes)
            results.append(outcomes)
    else:
        results = executor.map(train_candidate_group, arguments)
        if on_group_done is not None:
            for outcomes in results:
                on_group_done(outcomes)
    by_id = {outcome.spec.candidate_id: outcome for group in results for outcome in group}
    return [by_id[spec.candidate_id] for spec in specs]


def build_members(
    architecture: Architecture,
    seeds: Sequence[int],
    input_dim: int,
    output_dim: int,
    settings: PoolSettings,
) -> BatchedMLP:
    r"""Untrained members of ``architecture`` with ``seeds``."""
    spec = architecture.network_spec()
    return BatchedMLP(
        input_dim,
        output_dim,
        hidden_widths=spec.hidden_widths,
        member_seeds=list(seeds),
        activation=spec.activations,
        gaussian_head=settings.gaussian_head,
        min_std=settings.min_std,
        skip_connections=spec.skip_connections,
    )


def assemble_ensemble(
    candidates: Sequence[TrainedCandidate],
    weights: Tensor,
    input_dim: int,
    output_dim: int,
    settings: PoolSettings,
) -> tuple[EnsembleNetwork, Tensor]:
    r"""The serving network of selected candidates: one member group per architecture.

    Args:
        candidates: The selected (trained) candidates.
        weights: Their mixture weights, aligned with ``candidates``.
        input_dim: Inputs ``d``.
        output_dim: Outputs ``m``.
        settings: The pool's settings.

    Returns:
        The :class:`EnsembleNetwork` and the weights reordered to its member order.
    """
    if any(candidate.failed for candidate in candidates):
        raise ValueError("Failed candidates cannot join an ensemble.")
    by_architecture: dict[Architecture, list[int]] = {}
    for index, candidate in enumerate(candidates):
        by_architecture.setdefault(candidate.spec.architecture, []).append(index)
    groups, order = [], []
    for architecture, indices in by_architecture.items():
        members = build_members(
            architecture,
            [candidates[i].spec.seed for i in indices],
            input_dim,
            output_dim,
            settings,
        )
        state = {
            name: torch.cat([candidates[i].state[name] for i in indices])
            for name in candidates[indices[0]].state
        }
        members.load_state_dict(state)
        groups.append(members)
        order += indices
    return EnsembleNetwork(groups), weights[order]
