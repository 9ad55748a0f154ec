"""Ensembles under dataset shift (Zaidi et al., 2021, Section 4.3) on UCI regression: do
ensembles searched over architectures (NES-RS, NES-RE, NES-RE-0) and selected on a
shifted validation set stay better than a deep ensemble of one searched architecture
(DeepEns (RS)) as the test data shift further?

For every data set, split (seed = split) and method, one pool is trained ONCE on the
training part with its inputs and targets standardised on that part: 80 % of the rows
train the candidates, the other 20 % (a random hold-out) are the validation set
``D_val``. Every search uses ``D_val^shift`` of the highest severity
(``shift_validation_set``) as the paper does: NES-RE draws for each generation whether
its parents are chosen on ``D_val`` or on ``D_val^shift`` (NES-RE-0 evolves on ``D_val``
only). Then, for every severity ``s`` and ensemble size ``M``, the ensemble is selected
again from the same pool on ``D_val^shift`` of severity ``s`` (``select_from_pool`` with
a ``CandidateScorer``; no training) and tested on the test part shifted at severity
``s`` (``shift_test_set``, kinds disjoint from the validation ones). DeepEns (RS) picks
the architecture with the lowest loss on ``D_val^shift`` of severity ``s``
(``best_architecture``, no training) and serves a deep ensemble of it: the
``max(--sizes)`` members of each architecture picked are trained once, and size ``M`` is
their first ``M``. The references are not selected again: AutoDEUQ with the searches'
budget and architecture space (its own Caruana selection on the plain hold-out, at most
five members whatever ``M``), the hyper-deep ensemble and MC dropout of protocol 2
(``benchmarks.uci_regression``, five members for the former whatever ``M``) and an exact
GP (``SingleTaskGP`` fitted by maximising the marginal likelihood), all fitted once on
the whole training part and tested on the same shifted test sets. One seed per split
draws the hold-out, the searches, the validation shifts (nested across severities: the
same noise, scaled up), the test shifts and the references' fits.

Scores, in original target units: the test NLL of the ensemble's mixture of Gaussians,
the RMSE of its mean, the coverage of its central 50, 80 and 95 % intervals (the share
of test targets whose mixture CDF lies within ``(1 +- level) / 2``) and the calibration
error (mean absolute gap between coverage and level), and the paper's diversity lens:
the average member's NLL and the oracle ensemble's NLL (``mean_n min_k``; the smaller,
the more diverse the members; not for the references, whose CDF at a target is the share
of ``PIT_SAMPLES`` draws of their predictive distribution below it).

Writes ``runs.csv`` (one row per data set, split, method, size and severity),
``summary.md`` (mean ± standard error over splits per data set, size, method and
severity) and ``shift_<data set>.png`` (NLL and calibration error against severity)
into ``--out``. Each pool's search history is checkpointed in ``--out/runs/`` after every
trained group of candidates and each (data set, split, method, size) result is stored
there as JSON, so an interrupted benchmark resumes where it stopped (use a fresh
``--out`` after changing the search code).

Examples:
    python -m benchmarks.nes_shift --datasets boston --splits 3 --pool-size 10 --sizes 5 \\
        --threads 1 --jobs 1 --out benchmarks/results/nes_shift_boston
    python -m benchmarks.nes_shift --smoke --out /tmp/nes_shift_smoke
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
from botorch.fit import fit_gpytorch_mll
from botorch.models import SingleTaskGP
from botorch.models.model import Model
from gpytorch.mlls import ExactMarginalLogLikelihood
from torch import Tensor
from torch.distributions import Normal

from benchmarks.common import (
    add_jobs_option,
    add_uci_data_option,
    check_uci_selection,
    integer_argument,
    mean_and_standard_error,
    pyplot,
    run_jobs,
    runner_parser,
    save_figure,
    summary_header,
    uci_protocol_model,
    use_threads,
    write_json_atomically,
    write_text,
)
from benchmarks.uci import available_uci_datasets, load_uci_split
from benchmarks.uci_regression import ModelBuilder, build_hyper_deep_ensemble, build_mc_dropout
from botorch_nn_uq.bo import write_rows_csv
from botorch_nn_uq.ensembles import (
    MAX_SEVERITY,
    ArchitectureSpace,
    CandidateScorer,
    CandidateTrainer,
    PoolData,
    PoolSettings,
    SearchHistory,
    TrainedCandidate,
    TrainingHyperparameters,
    assemble_ensemble,
    best_architecture,
    deep_ensemble_random_search,
    make_validation_splits,
    nes_random_search,
    nes_regularized_evolution,
    select_from_pool,
    shift_test_set,
    shift_validation_set,
    train_deep_ensemble,
)
from botorch_nn_uq.metrics import mixture_nll, predictive_nll, rmse
from botorch_nn_uq.models import AutoDEUQ

#: The searches, selected again on the shifted validation set of every severity.
SEARCHES = ("nes-rs", "nes-re", "nes-re-0", "deepens-rs")
DATASETS = ("boston", "concrete", "energy", "yacht")
#: The nominal levels of the central intervals whose coverage is measured.
COVERAGE_LEVELS = (0.5, 0.8, 0.95)
#: The share of the training rows held out as the validation set ``D_val``.
VALIDATION_FRACTION = 0.2
#: The training configuration every candidate shares (NES searches architectures only;
#: the defaults of the package's NES models).
HYPERPARAMETERS = TrainingHyperparameters(
    learning_rate=1e-2,
    batch_size=32,
    optimizer="adam",
    lr_reduction_patience=20,
    early_stopping_patience=40,
)
#: The architectures searched (AutoDEUQ's 5-node space, as in protocol 2).
ARCHITECTURE_SPACE = ArchitectureSpace(num_nodes=5)
#: The random streams a split's seed is spread over, so that no two draw alike.
STREAMS = {"holdout": 0, "search": 1, "validation_shift": 2, "test_shift": 3, "reference": 4}
#: Draws of a reference's predictive distribution that estimate its CDF at the targets.
PIT_SAMPLES = 2000


@dataclass(frozen=True)
class Budget:
    r"""What a search's pool costs (the references keep their budgets of protocol 2).

    Args:
        pool_size: Networks each search trains (DeepEns (RS): its random search).
        epochs: The most epochs a network trains (early stopping may end sooner).
        population_size: NES-RE's population ``P``.
        num_parents: NES-RE's parent set ``m``.
        children_per_generation: NES-RE's children per population state (trained in
            one call, so children of one architecture train together).
    """

    pool_size: int = 30
    epochs: int = 200
    population_size: int = 10
    num_parents: int = 5
    children_per_generation: int = 5


#: The budget of ``--smoke``.
SMOKE_BUDGET = Budget(
    pool_size=4, epochs=3, population_size=2, num_parents=2, children_per_generation=2
)

#: A reference's builder: ``(train_X, train_Y, seed, budget) -> fitted model``.
ReferenceBuilder = Callable[[Tensor, Tensor, int, Budget], Model]


def build_gp(train_X: Tensor, train_Y: Tensor, seed: int, budget: Budget) -> Model:
    r"""An exact GP (``SingleTaskGP``, standardised inputs and targets) fitted by
    maximising the marginal likelihood."""
    model = uci_protocol_model(SingleTaskGP, train_X, train_Y)
    fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
    return model


def build_autodeuq(train_X: Tensor, train_Y: Tensor, seed: int, budget: Budget) -> Model:
    r"""AutoDEUQ with the searches' budget (``pool_size`` candidates trained at most
    ``epochs`` epochs, an aging population of ``population_size``) over the same
    architecture space, holding out the same fraction of the rows; its Caruana
    selection on the plain hold-out keeps at most five distinct members, as in
    protocol 2."""
    model = uci_protocol_model(
        AutoDEUQ,
        train_X,
        train_Y,
        ensemble_size=5,
        pool_size=budget.pool_size,
        epochs=budget.epochs,
        population_size=budget.population_size,
        generation_size=budget.children_per_generation,
        num_initial_random=budget.population_size,
        validation_fraction=VALIDATION_FRACTION,
        architecture_space=ARCHITECTURE_SPACE,
    )
    return model.fit(seed=seed)


def _protocol_2_budget(builder: ModelBuilder) -> ReferenceBuilder:
    r"""A protocol-2 builder as a reference builder: its own budget (the smoke one when
    the searches have the smoke budget)."""

    def build(train_X: Tensor, train_Y: Tensor, seed: int, budget: Budget) -> Model:
        return builder(train_X, train_Y, seed, budget == SMOKE_BUDGET)

    build.__doc__ = builder.__doc__
    return build


#: The references, fitted once and never selected again: name -> builder ``(train_X,
#: train_Y, seed, budget) -> fitted model`` (in original units).
REFERENCES: dict[str, ReferenceBuilder] = {
    "autodeuq": build_autodeuq,
    "hyper-deep-ensemble": _protocol_2_budget(build_hyper_deep_ensemble),
    "mc-dropout": _protocol_2_budget(build_mc_dropout),
    "gp": build_gp,
}
METHODS = (*SEARCHES, *REFERENCES)


@dataclass(frozen=True)
class JobSpec:
    r"""One method's pool on one split of one data set, selected and tested at every
    severity and size."""

    dataset: str
    split: int
    method: str
    sizes: tuple[int, ...]
    severities: tuple[int, ...]
    budget: Budget
    data_dir: Path
    smoke: bool = False

    @property
    def pool_key(self) -> str:
        r"""A file-name-safe identifier of the pool and its budget (smoke jobs, whose
        references have a budget of their own, are kept apart)."""
        budget = self.budget
        return (
            f"{self.dataset}_split{self.split}_{self.method}_pool{budget.pool_size}"
            f"_ep{budget.epochs}_pop{budget.population_size}_par{budget.num_parents}"
            f"_ch{budget.children_per_generation}"
        ) + ("_smoke" if self.smoke else "")

    def result_key(self, size: int) -> str:
        r"""A file-name-safe identifier of the results of ensemble size ``size``."""
        return f"{self.pool_key}_M{size}_sev{''.join(map(str, self.severities))}"


def stream(seed: int, name: str) -> torch.Generator:
    r"""The generator of the random stream ``name`` (:data:`STREAMS`) of ``seed``."""
    return torch.Generator().manual_seed(len(STREAMS) * seed + STREAMS[name])


@dataclass(frozen=True)
class StandardisedSplit:
    r"""A split in the pool's coordinates (inputs and targets standardised on the
    training part) with what maps back to original units.

    Args:
        pool_data: The candidates' training rows and the validation rows ``D_val``.
        test_X: ``t x d`` test inputs, original units.
        test_Y: ``t x 1`` test targets, original units.
        train_X: ``n x d`` training inputs, original units (the shifts' reference).
        train_Y: ``n x 1`` training targets, original units (the references' fit).
        input_location: ``d`` training means of the inputs.
        input_scale: ``d`` training standard deviations of the inputs (1 where constant).
        target_location: The training mean of the target.
        target_scale: The training standard deviation of the target.
    """

    pool_data: PoolData
    test_X: Tensor
    test_Y: Tensor
    train_X: Tensor
    train_Y: Tensor
    input_location: Tensor
    input_scale: Tensor
    target_location: Tensor
    target_scale: Tensor


def standardised_split(spec: JobSpec) -> StandardisedSplit:
    r"""Load the UCI split of ``spec``, standardise it on its training part and hold out
    ``D_val`` (:func:`standardise`)."""
    data = load_uci_split(spec.data_dir, spec.dataset, spec.split)
    return standardise(data.train_X, data.train_Y, data.test_X, data.test_Y, spec.split)


def standardise(
    train_X: Tensor, train_Y: Tensor, test_X: Tensor, test_Y: Tensor, seed: int
) -> StandardisedSplit:
    r"""A split in the pool's coordinates: inputs and targets standardised on the training
    part, and a random :data:`VALIDATION_FRACTION` of its rows held out as ``D_val``
    (drawn from the ``"holdout"`` stream of ``seed``).

    Args:
        train_X: ``n x d`` training inputs, original units.
        train_Y: ``n x 1`` training targets, original units.
        test_X: ``t x d`` test inputs, original units.
        test_Y: ``t x 1`` test targets, original units.
        seed: The split's seed.
    """
    input_location, input_scale = train_X.mean(0), train_X.std(0)
    # A constant feature carries nothing; a unit scale keeps it finite.
    input_scale = torch.where(input_scale > 0, input_scale, torch.ones_like(input_scale))
    target_location, target_scale = train_Y.mean(0), train_Y.std(0)
    X = (train_X - input_location) / input_scale
    Y = (train_Y - target_location) / target_scale
    holdout = make_validation_splits(
        X.shape[0],
        "holdout",
        validation_fraction=VALIDATION_FRACTION,
        generator=stream(seed, "holdout"),
    )
    validation = holdout.validation_weights[0].bool()
    return StandardisedSplit(
        pool_data=PoolData(
            train_X=X[~validation],
            train_Y=Y[~validation],
            validation_X=X[validation],
            validation_Y=Y[validation],
        ),
        test_X=test_X,
        test_Y=test_Y,
        train_X=train_X,
        train_Y=train_Y,
        input_location=input_location,
        input_scale=input_scale,
        target_location=target_location,
        target_scale=target_scale,
    )


def shifted_validation_scorer(
    split: StandardisedSplit, severity: int, seed: int, settings: PoolSettings
) -> CandidateScorer:
    r"""The scorer of ``D_val^shift`` of ``severity``; one seed for every severity, so
    the shifts are nested (the same noise, scaled up)."""
    data = split.pool_data
    X, Y = shift_validation_set(
        data.validation_X,
        data.validation_Y,
        severity,
        stream(seed, "validation_shift"),
        reference=data.train_X,
    )
    return CandidateScorer(X, Y, settings)


def selected_ensembles(
    spec: JobSpec, split: StandardisedSplit, settings: PoolSettings, store: Path
) -> dict[tuple[int, int], tuple[list[TrainedCandidate], Tensor]]:
    r"""Train the method's pool (or resume it from its checkpoint in ``store``) and
    select its ensembles.

    Returns:
        ``(severity, size) -> (members, weights)``: the ensemble selected on
        ``D_val^shift`` of that severity.
    """
    store.mkdir(parents=True, exist_ok=True)
    checkpoint = store / f"{spec.pool_key}.history"
    trainer = CandidateTrainer(
        spec.method,
        split.pool_data,
        settings,
        resume_from=SearchHistory.load(checkpoint) if checkpoint.exists() else None,
        checkpoint_path=checkpoint,
    )
    scorers = {
        severity: shifted_validation_scorer(split, severity, spec.split, settings)
        for severity in {*spec.severities, MAX_SEVERITY}
    }
    generator = stream(spec.split, "search")
    largest = max(spec.sizes)
    budget = spec.budget
    search = {
        "architecture_space": ARCHITECTURE_SPACE,
        "hyperparameters": HYPERPARAMETERS,
        "pool_size": budget.pool_size,
        "ensemble_size": largest,
        "generator": generator,
        "shifted_validation": scorers[MAX_SEVERITY],
    }
    if spec.method == "deepens-rs":
        members, _ = deep_ensemble_random_search(trainer, **search)
        pool = trainer.history.candidates[: budget.pool_size]
        ensembles = {members[0].spec.architecture: members}
        chosen = {}
        for severity in spec.severities:
            architecture = best_architecture(pool, scorers[severity])
            if architecture not in ensembles:
                # Architectures are met in the order of the severities, so a resumed
                # run proposes the same members and finds them in its checkpoint.
                ensembles[architecture], _ = train_deep_ensemble(
                    trainer,
                    architecture,
                    HYPERPARAMETERS,
                    ensemble_size=largest,
                    generator=generator,
                )
            chosen[severity] = ensembles[architecture]
        return {
            (severity, size): (chosen[severity][:size], torch.full((size,), 1 / size))
            for severity in spec.severities
            for size in spec.sizes
        }
    if spec.method == "nes-rs":
        pool, _ = nes_random_search(trainer, **search)
    else:
        pool, _ = nes_regularized_evolution(
            trainer,
            **search,
            population_size=budget.population_size,
            num_parents=budget.num_parents,
            children_per_generation=budget.children_per_generation,
            evolve_on_plain_validation=spec.method == "nes-re-0",
        )
    ensembles = {}
    for severity in spec.severities:
        for size in spec.sizes:
            usable, selection = select_from_pool(pool, size, scorers[severity])
            members = [usable[index] for index in selection.indices.tolist()]
            ensembles[(severity, size)] = (members, selection.weights)
    return ensembles


def ensemble_scores(
    members: Sequence[TrainedCandidate],
    weights: Tensor,
    X: Tensor,
    Y: Tensor,
    split: StandardisedSplit,
    settings: PoolSettings,
) -> dict[str, float]:
    r"""Test scores of an ensemble, in original target units.

    Args:
        members: The selected candidates.
        weights: Their mixture weights.
        X: ``t x d`` test inputs, original units.
        Y: ``t x 1`` test targets, original units.
        split: The split (its standardisation).
        settings: The pool's settings (Gaussian heads).

    Returns:
        ``test_nll``, ``test_rmse``, ``average_member_nll``, ``oracle_nll``,
        ``coverage_<level>`` for each of :data:`COVERAGE_LEVELS` and
        ``calibration_error``.
    """
    network, weights = assemble_ensemble(members, weights, X.shape[-1], 1, settings)
    network = network.to(X).eval()
    with torch.no_grad():
        output = network((X - split.input_location) / split.input_scale)
    # K x t x 1 member predictions, back in original units.
    means = output.mean * split.target_scale + split.target_location
    stds = output.std * split.target_scale
    weights = (weights / weights.sum()).to(X)
    members_density = Normal(means, stds)
    member_nll = -members_density.log_prob(Y).sum(-1)
    mixture_mean = (weights[:, None, None] * means).sum(0)
    cdf = (weights[:, None, None] * members_density.cdf(Y)).sum(0)
    return {
        "test_nll": float(mixture_nll(means, stds.pow(2), weights, Y)),
        "test_rmse": float(rmse(mixture_mean, Y)),
        "average_member_nll": float((weights * member_nll.mean(-1)).sum()),
        "oracle_nll": float(member_nll.min(0).values.mean()),
        **coverage_scores(cdf),
    }


def coverage_scores(cdf: Tensor) -> dict[str, float]:
    r"""``coverage_<level>`` for each of :data:`COVERAGE_LEVELS` and
    ``calibration_error`` from the predictive CDF at the ``t x 1`` test targets.

    The central interval of level ``c`` holds ``y`` exactly when the CDF at ``y`` is
    within ``(1 +- c) / 2``, so coverage needs no quantiles of the predictive.
    """
    coverage = {
        level: float(((cdf - 0.5).abs() <= level / 2).to(cdf).mean()) for level in COVERAGE_LEVELS
    }
    return {
        **{f"coverage_{round(100 * level)}": value for level, value in coverage.items()},
        "calibration_error": sum(abs(coverage[level] - level) for level in COVERAGE_LEVELS)
        / len(COVERAGE_LEVELS),
    }


def reference_scores(model: Model, X: Tensor, Y: Tensor, seed: int) -> dict[str, float]:
    r"""Test scores of a reference: NLL and RMSE of ``model.posterior(X,
    observation_noise=True)``, coverage from :data:`PIT_SAMPLES` of its draws (seeded by
    ``seed``), and no diversity lens (NaN), in original target units."""
    with torch.no_grad(), torch.random.fork_rng():
        torch.manual_seed(seed)
        posterior = model.posterior(X, observation_noise=True)
        draws = posterior.rsample(torch.Size([PIT_SAMPLES]))
        return {
            "test_nll": float(predictive_nll(posterior, Y)),
            "test_rmse": float(rmse(posterior.mean, Y)),
            "average_member_nll": math.nan,
            "oracle_nll": math.nan,
            **coverage_scores((draws <= Y).to(Y).mean(0)),
        }


def evaluate(spec: JobSpec, store: Path) -> dict[int, list[dict[str, Any]]]:
    r"""Train the pool, select and test every ensemble, or fit and test a reference
    (the same at every size), on the UCI split's test part shifted at every severity;
    ``size -> rows`` (one row per severity)."""
    split = standardised_split(spec)
    test_sets = {
        severity: shift_test_set(
            split.test_X,
            split.test_Y,
            severity,
            stream(spec.split, "test_shift"),
            reference=split.train_X,
        )
        for severity in spec.severities
    }
    return scored_rows(spec, split, test_sets, store)


def scored_rows(
    spec: JobSpec,
    split: StandardisedSplit,
    test_sets: dict[int, tuple[Tensor, Tensor]],
    store: Path,
) -> dict[int, list[dict[str, Any]]]:
    r"""Train the method's pool and select its ensembles (or fit a reference), then
    score them: for every severity ``s`` of ``spec``, the ensemble selected on
    ``D_val^shift`` of severity ``s`` on the test set ``test_sets[s]``.

    Args:
        spec: The job.
        split: Its data, standardised, with ``D_val`` held out.
        test_sets: ``severity -> (X, Y)``, ``t x d`` inputs and ``t x 1`` targets in
            original units.
        store: The folder of the pools' checkpoints.

    Returns:
        ``size -> rows``, one row per severity.
    """
    settings = PoolSettings(epochs=spec.budget.epochs)
    start = time.perf_counter()
    if spec.method in REFERENCES:
        with torch.random.fork_rng():
            torch.manual_seed(len(STREAMS) * spec.split + STREAMS["reference"])
            model = REFERENCES[spec.method](split.train_X, split.train_Y, spec.split, spec.budget)
    else:
        ensembles = selected_ensembles(spec, split, settings, store)
    search_seconds = time.perf_counter() - start
    rows: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for severity in spec.severities:
        test_X, test_Y = test_sets[severity]
        for size in spec.sizes:
            if spec.method in REFERENCES:
                num_architectures = 1
                scores = reference_scores(model, test_X, test_Y, spec.split)
            else:
                members, weights = ensembles[(severity, size)]
                num_architectures = len({member.spec.architecture for member in members})
                scores = ensemble_scores(members, weights, test_X, test_Y, split, settings)
            rows[size].append(
                {
                    "dataset": spec.dataset,
                    "split": spec.split,
                    "method": spec.method,
                    "ensemble_size": size,
                    "severity": severity,
                    "num_test": test_X.shape[0],
                    "num_architectures": num_architectures,
                    **scores,
                    "search_seconds": search_seconds,
                }
            )
    return rows


def execute(spec: JobSpec, store: Path) -> list[dict[str, Any]]:
    r"""Run one job on this process's torch threads (``--threads``), or load its
    results from ``store`` if an earlier invocation finished them; returns its rows."""
    return stored_rows(spec, store, lambda: evaluate(spec, store))


def stored_rows(
    spec: JobSpec, store: Path, compute: Callable[[], dict[int, list[dict[str, Any]]]]
) -> list[dict[str, Any]]:
    r"""The rows of ``spec`` at every size: loaded from ``store`` if an earlier
    invocation stored them all, else ``compute()`` (``size -> rows``), stored there
    first."""
    paths = {size: store / f"{spec.result_key(size)}.json" for size in spec.sizes}
    if not all(path.exists() for path in paths.values()):
        for size, rows in compute().items():
            write_json_atomically(rows, paths[size])
    return [row for path in paths.values() for row in json.loads(path.read_text())]


def progress_line(spec: JobSpec, rows: list[dict[str, Any]]) -> str:
    r"""What the progress output says of a finished job: its NLL at the lowest and the
    highest severity, for the largest size."""
    largest = [row for row in rows if row["ensemble_size"] == max(spec.sizes)]
    first, last = largest[0], largest[-1]
    return (
        f"{spec.dataset} split {spec.split} {spec.method}: M = {first['ensemble_size']}, NLL "
        f"{first['test_nll']:.3f} (severity {first['severity']}) to {last['test_nll']:.3f} "
        f"(severity {last['severity']}), search or fit {first['search_seconds']:.0f} s"
    )


#: The columns of the summary: (row key, header, digits).
SUMMARY_COLUMNS = (
    ("test_nll", "test NLL", 3),
    ("test_rmse", "test RMSE", 3),
    ("calibration_error", "calibration error", 3),
    ("coverage_50", "coverage 50 %", 2),
    ("coverage_80", "coverage 80 %", 2),
    ("coverage_95", "coverage 95 %", 2),
    ("average_member_nll", "average member NLL", 3),
    ("oracle_nll", "oracle NLL", 3),
)


def grouped_rows(rows: Sequence[dict[str, Any]]) -> dict[tuple, list[dict[str, Any]]]:
    r"""``(data set, size, method, severity) -> rows`` (one per split)."""
    groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        key = (row["dataset"], row["ensemble_size"], row["method"], row["severity"])
        groups[key].append(row)
    return groups


def summary_table(
    rows: Sequence[dict[str, Any]], args: argparse.Namespace, repeats: str = "splits"
) -> str:
    r"""A markdown table per data set and ensemble size: every score's mean ± standard
    error over splits (the column ``repeats`` counts them), per method and severity."""
    groups = grouped_rows(rows)
    columns = " | ".join(column[1] for column in SUMMARY_COLUMNS)
    header = f"| method | severity | {repeats} | {columns} |"
    separator = "|" + " --- |" * (len(SUMMARY_COLUMNS) + 3)
    blocks = []
    for dataset in args.datasets:
        for size in args.sizes:
            lines = [f"### {dataset}, M = {size}", "", header, separator]
            for method in args.methods:
                for severity in args.severities:
                    runs = groups[(dataset, size, method, severity)]
                    cells = []
                    for key, _, digits in SUMMARY_COLUMNS:
                        values = [run[key] for run in runs]
                        # The references have no members for the diversity lens (NaN).
                        if any(math.isnan(value) for value in values):
                            cells.append("–")
                            continue
                        mean, error = mean_and_standard_error(values)
                        cells.append(f"{mean:.{digits}f} ± {error:.{digits}f}")
                    lines.append(
                        f"| {method} | {severity} | {len(runs)} | " + " | ".join(cells) + " |"
                    )
            blocks.append("\n".join(lines) + "\n")
    return "\n".join(blocks)


#: The comparison of the paper's claim: NES-RE against the shift-selected deep ensemble.
CLAIM = ("nes-re", "deepens-rs")
#: The severities at which the claim is checked.
CLAIM_SEVERITIES = (3, 4, 5)
#: The ensembles among the methods (not MC dropout or the GP), whose best is checked for
#: calibration at the highest severity.
ENSEMBLES = (*SEARCHES, "autodeuq", "hyper-deep-ensemble")


def claim_table(
    rows: Sequence[dict[str, Any]],
    args: argparse.Namespace,
    severities: Sequence[int] = CLAIM_SEVERITIES,
    label: str = "severity",
) -> str:
    r"""The paper's claim, paired by split: per data set and size, NES-RE's test NLL
    minus DeepEns (RS)'s at ``severities`` (those run; mean ± standard error over splits,
    and the splits where NES-RE is lower), and at the highest severity the 95 % interval
    coverage of the ensemble (:data:`ENSEMBLES`) with the lowest NLL there. Empty when a method of
    :data:`CLAIM` was not run; ``label`` names the severities in the header."""
    if not set(CLAIM) <= set(args.methods):
        return ""
    groups = grouped_rows(rows)
    severities = [severity for severity in severities if severity in args.severities]
    top = max(args.severities)
    header = (
        "| data set | M | "
        + " | ".join(f"Δ NLL, {label} {severity}" for severity in severities)
        + f" | 95 % coverage at {label} {top} (the ensemble of lowest NLL there) |"
    )
    lines = [
        "### NES-RE against DeepEns (RS), paired by split",
        "",
        "Δ NLL: NES-RE's test NLL minus DeepEns (RS)'s (negative: NES-RE better), mean ± "
        "standard error over splits, and the splits where NES-RE is lower.",
        "",
        header,
        "|" + " --- |" * (len(severities) + 3),
    ]
    for dataset in args.datasets:
        for size in args.sizes:
            cells = []
            for severity in severities:
                by_split = [
                    {run["split"]: run["test_nll"] for run in groups[(dataset, size, m, severity)]}
                    for m in CLAIM
                ]
                splits = sorted(set(by_split[0]) & set(by_split[1]))
                if not splits:
                    cells.append("–")
                    continue
                differences = [by_split[0][split] - by_split[1][split] for split in splits]
                mean, error = mean_and_standard_error(differences)
                wins = sum(difference < 0 for difference in differences)
                cells.append(f"{mean:+.3f} ± {error:.3f} ({wins}/{len(splits)})")
            at_top = {
                method: groups[(dataset, size, method, top)]
                for method in args.methods
                if method in ENSEMBLES and groups[(dataset, size, method, top)]
            }
            best = min(
                at_top, key=lambda m: mean_and_standard_error([r["test_nll"] for r in at_top[m]])[0]
            )
            coverage, _ = mean_and_standard_error([run["coverage_95"] for run in at_top[best]])
            cells.append(f"{coverage:.2f} ({best})")
            lines.append(f"| {dataset} | {size} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot_against_severity(rows: Sequence[dict[str, Any]], args: argparse.Namespace) -> list[Path]:
    r"""Per data set, ``shift_<data set>.png``: test NLL (on a symmetric log scale, as a
    reference's NLL can grow by orders of magnitude under shift) and calibration error
    against severity (mean ± standard error over splits), one panel per score and size."""
    plt = pyplot()
    groups = grouped_rows(rows)
    scores = (("test_nll", "test NLL"), ("calibration_error", "calibration error"))
    paths = []
    for dataset in args.datasets:
        figure, axes = plt.subplots(
            len(scores), len(args.sizes), figsize=(5 * len(args.sizes), 7), squeeze=False
        )
        for column, size in enumerate(args.sizes):
            for row, (key, label) in enumerate(scores):
                axis = axes[row][column]
                for method in args.methods:
                    summaries = [
                        mean_and_standard_error(
                            [run[key] for run in groups[(dataset, size, method, severity)]]
                        )
                        for severity in args.severities
                    ]
                    means, errors = zip(*summaries, strict=True)
                    axis.errorbar(args.severities, means, yerr=errors, label=method, capsize=3)
                if key == "test_nll":
                    axis.set_yscale("symlog")
                axis.set_xlabel("shift severity")
                axis.set_ylabel(label)
                axis.set_title(f"{dataset}, M = {size}")
                axis.legend()
        paths.append(save_figure(figure, args.out / f"shift_{dataset}.png"))
    return paths


def add_budget_options(parser: argparse.ArgumentParser, defaults: Budget) -> None:
    r"""Add the options of a :class:`Budget` (``--pool-size``, ``--epochs``,
    ``--population-size``, ``--num-parents``, ``--children-per-generation``) with the
    defaults ``defaults``; :func:`budget_from_arguments` reads them back."""
    for field in dataclasses.fields(Budget):
        parser.add_argument(
            f"--{field.name.replace('_', '-')}",
            type=integer_argument(1),
            default=getattr(defaults, field.name),
        )


def budget_from_arguments(args: argparse.Namespace) -> Budget:
    r"""The :class:`Budget` of the options of :func:`add_budget_options`."""
    return Budget(**{field.name: getattr(args, field.name) for field in dataclasses.fields(Budget)})


def check_budget(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    r"""Sort ``args.sizes`` and refuse, as a parser error, sizes beyond the pool and an
    NES-RE population as large as its pool."""
    args.sizes = sorted(set(args.sizes))
    if max(args.sizes) > args.budget.pool_size:
        parser.error(f"--sizes up to {max(args.sizes)} exceed --pool-size {args.budget.pool_size}")
    evolving = {"nes-re", "nes-re-0"} & set(args.methods)
    if evolving and args.budget.population_size >= args.budget.pool_size:
        # With its whole pool as its first population, NES-RE would never evolve and
        # would repeat NES-RS.
        parser.error(f"--population-size must be smaller than --pool-size for {sorted(evolving)}")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = runner_parser(
        __doc__,
        out=Path("benchmarks/results/nes_shift"),
        smoke="tiny budget (for the test suite): the first data set present, 1 split, pools "
        "of 4 networks trained 3 epochs, the references' smoke budgets of protocol 2, size 2, "
        "severities 0 and 5",
    )
    parser.add_argument(
        "--methods", nargs="+", choices=METHODS, default=list(METHODS), help="methods"
    )
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS))
    parser.add_argument(
        "--splits", type=integer_argument(1), default=20, help="number of splits (0, 1, ...)"
    )
    parser.add_argument(
        "--sizes", nargs="+", type=integer_argument(1), default=[5, 10], help="ensemble sizes M"
    )
    parser.add_argument(
        "--severities",
        nargs="+",
        type=integer_argument(0, MAX_SEVERITY),
        default=list(range(MAX_SEVERITY + 1)),
        help="shift severities of the reselection and the test (0: no shift)",
    )
    add_budget_options(parser, Budget())
    add_uci_data_option(parser)
    add_jobs_option(parser)
    args = parser.parse_args(argv)
    try:
        available = available_uci_datasets(args.data_dir)
    except FileNotFoundError as error:
        parser.error(str(error))
    if args.smoke:
        present = [dataset for dataset in args.datasets if dataset in available]
        if not present:
            parser.error(f"none of the data sets is in {args.data_dir} (found: {available})")
        args.datasets, args.splits, args.sizes, args.severities = present[:1], 1, [2], [0, 5]
        args.budget = SMOKE_BUDGET
    else:
        args.budget = budget_from_arguments(args)
    args.severities = sorted(set(args.severities))
    check_budget(parser, args)
    check_uci_selection(parser, args.data_dir, args.datasets, args.splits)
    return args


def main(argv: Sequence[str] | None = None) -> Path:
    r"""Run the benchmark; returns the path of the markdown summary."""
    args = parse_args(argv)
    use_threads(args.threads)
    specs = [
        JobSpec(
            dataset,
            split,
            method,
            tuple(args.sizes),
            tuple(args.severities),
            args.budget,
            args.data_dir,
            args.smoke,
        )
        for split in range(args.splits)
        for dataset in args.datasets
        for method in args.methods
    ]
    store = args.out / "runs"
    start = time.perf_counter()
    job = partial(execute, store=store)
    results = run_jobs(job, specs, args.jobs, args.threads, progress_line)
    rows = [row for job_rows in results for row in job_rows]
    write_rows_csv(rows, args.out / "runs.csv")
    plots = plot_against_severity(rows, args)
    summary = args.out / "summary.md"
    write_text(
        summary,
        f"{summary_header(__file__, argv, args.threads)}\n\n{len(specs)} pools "
        f"({args.splits} split(s) per data set, budget {args.budget}), "
        f"{time.perf_counter() - start:.0f} s wall-clock in this invocation (jobs loaded from "
        f"{store} are not timed again).\n\n"
        "Ensembles reselected on the shifted validation set of each severity and tested on "
        "the test set shifted at that severity; mean ± standard error over splits. NLL in "
        "original target units (including ½ log 2π; lower is better); calibration error: "
        "mean absolute gap between the coverage of the central "
        f"{', '.join(f'{round(100 * level)}' for level in COVERAGE_LEVELS)} % intervals and "
        "their level; oracle NLL: the best member's NLL per point (lower: more diverse "
        f"members). Plots: {', '.join(path.name for path in plots)}.\n\n"
        + summary_table(rows, args)
        + "\n"
        + claim_table(rows, args),
    )
    print(summary.read_text())
    return summary


if __name__ == "__main__":
    main()
