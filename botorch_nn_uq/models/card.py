r"""Model cards: the catalogue entry of a model, defined next to its class.

A :class:`ModelCard` says everything the rest of the project needs to know about a model
besides its code: its name in the registry of surrogates and a one-line description, how
the BO loop builds and fits it (:class:`BODefaults`), where it stands in the feature
table of BoTorch and Ax features (its :class:`Family`: a column of :class:`Support`
cells, one per :data:`FEATURES` row), and settings that fit it on toy data in well under
a second (:class:`FastSettings`). :data:`botorch_nn_uq.models.MODEL_CARDS` holds every
card; the registry of surrogates (:mod:`botorch_nn_uq.bo.surrogates`), the user guide's
feature and model tables and the test suite's lists of models are derived from it, so a
model is added by its module (class and card), the card's line in
:data:`~botorch_nn_uq.models.MODEL_CARDS` and its tests.

Several cards may share a family (the deep, hyper-deep, NES and AutoDEUQ ensembles are one
column of the feature table): the cells belong to the family, so they are the same for
each of its cards by construction.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from botorch.models.model import Model
from torch import Tensor


class Status(Enum):
    r"""How a feature works with a model family."""

    WORKS = "works"
    APPROXIMATE = "works, with the stated approximation or limit"
    UNSUPPORTED = "not supported"


@dataclass(frozen=True)
class Support:
    r"""One cell of the feature table: a feature with a model family.

    Args:
        status: How the feature works.
        note: What to know (markdown; required unless the feature simply works).
        error: For :attr:`Status.UNSUPPORTED`, the exception type the feature raises.
        error_match: A regular expression its message matches.

    Raises:
        ValueError: If a cell that does not simply work has no note, or an error type is
            given for a cell that is not unsupported (or missing for one that is).
    """

    status: Status
    note: str = ""
    error: type[Exception] | None = None
    error_match: str = ""

    def __post_init__(self) -> None:
        if self.status is not Status.WORKS and not self.note:
            raise ValueError(f"A cell marked {self.status.value!r} needs a note.")
        if (self.status is Status.UNSUPPORTED) != (self.error is not None):
            raise ValueError("An error type is given for, and only for, unsupported cells.")


@dataclass(frozen=True)
class Feature:
    r"""A row of the feature table: a BoTorch or Ax feature that every family states.

    Args:
        key: Identifier (the keys of a family's ``support``; the test suite runs the
            row's drop-in scenario, registered under this key).
        title: The row header (markdown).
    """

    key: str
    title: str


#: The features every model family states its support for, in the table's order.
FEATURES: tuple[Feature, ...] = (
    Feature(
        "analytic-acquisitions",
        "Analytic acquisitions (`LogExpectedImprovement`, `UpperConfidenceBound`, "
        "`ProbabilityOfImprovement`)",
    ),
    Feature(
        "mc-acquisitions",
        "MC acquisitions (`qLogExpectedImprovement`, `qUpperConfidenceBound`)",
    ),
    Feature("noisy-ei-pending", "`qLogNoisyExpectedImprovement` with `X_pending`"),
    Feature(
        "normal-samplers",
        "Explicit normal samplers (`SobolQMCNormalSampler`, `IIDNormalSampler`), also "
        "through `ModelList`",
    ),
    Feature(
        "fantasies",
        "`qKnowledgeGradient`, `qNegIntegratedPosteriorVariance` (`fantasize`), optimised "
        "with the candidate moving",
    ),
    Feature(
        "append-features",
        "`AppendFeatures` with fantasies (`qMultiFidelityKnowledgeGradient` with a risk measure)",
    ),
    Feature(
        "max-value-entropy",
        "`qMaxValueEntropy`, `qLowerBoundMaxValueEntropy` (GIBBON) with q = 2 and 3",
    ),
    Feature(
        "gibbon-batch",
        "BoTorch's GIBBON tutorial's batches of 3 (`qLowerBoundMaxValueEntropy` and "
        "`qMaxValueEntropy` sequential, `qLogNoisyExpectedImprovement` joint): 3 distinct "
        "points",
    ),
    Feature(
        "gaussian-access",
        "`model(X)` and `posterior.mvn` (custom acquisitions, cost models)",
    ),
    Feature(
        "multi-objective",
        "`qLogExpectedHypervolumeImprovement`, `qLogNoisyExpectedHypervolumeImprovement`, "
        "`qLogNParEGO` on a `ModelList`",
    ),
    Feature(
        "max-posterior-sampling",
        "`MaxPosteriorSampling` (Thompson sampling on a candidate set)",
    ),
    Feature(
        "batch-thompson-sampling",
        "`batch_thompson_sampling` (q distinct points for any q)",
    ),
    Feature(
        "constrained-thompson-sampling",
        "`ConstrainedMaxPosteriorSampling` in a trust region",
    ),
    Feature("model-list", "`ModelList` with GPs, with outcome constraints"),
    Feature(
        "default-outcome-transform",
        "Outcomes standardised by default (`Standardize(m)`; `outcome_transform=None` "
        "trains on raw outcomes), BoTorch's input-scaling warnings",
    ),
    Feature("transforms", "Input and outcome transforms (`Normalize`, `Standardize`, `Log`, ...)"),
    Feature("learnable-transforms", "Learnable input transforms (`Warp`)"),
    Feature("input-batches", "Batches of inputs (`batch_shape x q x d`)"),
    Feature("batched-models", "Batched training data (`batch_shape x n x d`)"),
    Feature(
        "tensor-outputs",
        "Tensor-valued outputs (`train_Y` of `n x o1 x o2`, as `HigherOrderGP` takes them) "
        "with an MC objective over them",
    ),
    Feature("dtypes", "`float32` and `float64`"),
    Feature("output-subsets", "`output_indices`, `subset_output`"),
    Feature(
        "observation-noise",
        "`observation_noise` (`True` or a tensor of noise variances)",
    ),
    Feature(
        "known-noise",
        "Known observation noise: `train_Yvar`, third argument or keyword, as "
        "`SingleTaskGP(train_X, train_Y, train_Yvar)` takes it (also from Ax's `Yvar`)",
    ),
    Feature(
        "posterior-transform",
        "`posterior_transform` (`ScalarizedPosteriorTransform`)",
    ),
    Feature("state-dict", "`state_dict` checkpoints"),
    Feature("ax-model-config", "Ax `ModelConfig(botorch_model_class=...)`"),
    Feature(
        "ax-model-selection",
        "Ax model selection (several `model_configs`, scored by cross-validation)",
    ),
    Feature(
        "shift-adaptation",
        "Members selected for an expected dataset shift (`validation_shift_severity`), "
        "selected again per severity without training (`reselect`)",
    ),
)

_FEATURE_KEYS = tuple(feature.key for feature in FEATURES)
if len(set(_FEATURE_KEYS)) != len(_FEATURE_KEYS):
    raise ValueError("Feature keys must be unique.")

#: The mini-batches of the registered networks (:class:`BODefaults`): they train on at
#: most this many rows per optimizer step for a budget of steps, so a fit costs the same at
#: n = 500 and n = 10,000. Up to 256 points a mini-batch is the whole data set and the fit
#: is exactly the full-batch fit of the class defaults (500 epochs = 500 steps), as in
#: every protocol-1 result.
SCALABLE_BATCH: Mapping[str, Any] = {"batch_size": 256}

#: The joint samples of the registered function banks' published BO runs: one function of
#: the bank per MC sample (``joint_samples="functions"``). The cards keep them so that the
#: published rows reproduce; the model classes default to continuous samples
#: (:mod:`botorch_nn_uq.posteriors.continuous`).
FINITE_FUNCTION_SAMPLES: Mapping[str, Any] = {"joint_samples": "functions"}

#: A cell of a feature that simply works.
WORKS = Support(Status.WORKS)

#: The cells that every model built on
#: :class:`~botorch_nn_uq.models.base.NeuralSurrogateModel` shares (the base class
#: provides these features); a family states its other cells itself.
NEURAL_MODEL_SUPPORT: Mapping[str, Support] = {
    "append-features": Support(
        Status.APPROXIMATE, "fantasies by the last-layer update, as for `qKnowledgeGradient`"
    ),
    "model-list": WORKS,
    "default-outcome-transform": WORKS,
    "input-batches": WORKS,
    "batched-models": Support(
        Status.UNSUPPORTED,
        "a single network: refused at construction, naming the remedy (a `ModelList` of "
        "one model per batch element, or a `DeepEnsemble`)",
        error=ValueError,
        error_match="does not take batched training data.*ModelList.*DeepEnsemble",
    ),
    "tensor-outputs": Support(
        Status.WORKS,
        "trained on the flattened outputs, served in their shape as `HigherOrderGP` serves "
        "them (fantasies and `posterior.mvn`, over the flattened outputs, too); outcome "
        "transform `FlattenedStandardize`, `Standardize(m)` "
        "or none; no `output_indices` or `subset_output`",
    ),
    "dtypes": WORKS,
    "output-subsets": Support(Status.WORKS, "exact"),
    "posterior-transform": WORKS,
    "state-dict": Support(
        Status.WORKS, "load into a new model of the same class and configuration"
    ),
    "ax-model-config": WORKS,
    "ax-model-selection": Support(Status.WORKS, "scored on the posterior's mean and variance"),
    "shift-adaptation": Support(
        Status.UNSUPPORTED,
        "one trained network, no pool of members to select from (Neural Ensemble Search's)",
        error=TypeError,
        error_match="validation_shift_severity",
    ),
    "known-noise": Support(
        Status.WORKS,
        "trained on weighted least squares with weights `1 / Yvar` (per point and output); "
        "`observation_noise=True` and fantasies use the mean known variance, as a "
        "fixed-noise GP does",
    ),
}

#: The cells that the models whose posterior is a finite set of functions
#: (:class:`~botorch_nn_uq.posteriors.FunctionEnsemblePosterior`: ensembles, MC dropout,
#: NEON) share, besides :data:`NEURAL_MODEL_SUPPORT`.
FUNCTION_BANK_SUPPORT: Mapping[str, Support] = {
    "normal-samplers": Support(
        Status.WORKS,
        'a finite set (`joint_samples="functions"`): each sample\'s normal draw picks a whole '
        "function (inverse CDF of the weights); continuous samples: the first point's normal "
        "draws weight the functions' deviations; the sampler's count and seed are kept",
    ),
    "gibbon-batch": Support(
        Status.APPROXIMATE,
        "GIBBON gives 3 distinct points; `qMaxValueEntropy` can repeat one where the noise "
        "estimate exceeds the functions' spread; the joint `qLogNoisyExpectedImprovement` "
        "can repeat one where no function improves away from the best point by more than "
        "BoTorch's smoothed maximum rewards a duplicate (continuous joint samples, MC "
        "dropout's and NEON's default, repeat less often)",
    ),
    "fantasies": Support(
        Status.APPROXIMATE,
        "exact, differentiable update of each function's Bayesian last layer; the hidden "
        "layers are not refitted",
    ),
    "max-value-entropy": Support(
        Status.APPROXIMATE,
        "noisy observations and `model(X)` as the moment-matched Gaussian of the functions; "
        "a batch can repeat a point where the noise estimate exceeds the functions' spread "
        "(give a noiseless objective a small `noise_variance`)",
    ),
    "gaussian-access": Support(
        Status.APPROXIMATE,
        "the moment-matched Gaussian of the functions, joint across points and outputs; "
        "`model(X)` in the transformed outcome space, as a GP's",
    ),
    "transforms": Support(
        Status.APPROXIMATE,
        "`observation_noise=True` (a mixture) needs a linear outcome transform",
    ),
}


def resampled_bank_support(bank_entry: str, bank_entries: str) -> dict[str, Support]:
    r"""The cells that a model whose posterior is a fixed bank of functions, drawn afresh
    beyond the bank's size, states besides :data:`NEURAL_MODEL_SUPPORT` and
    :data:`FUNCTION_BANK_SUPPORT` (the models of
    :class:`~botorch_nn_uq.models.function_bank.ResizableFunctionBank`: MC dropout's
    masks, NEON's epistemic indices).

    Args:
        bank_entry: What selects one function of the bank, e.g. ``"mask"``.
        bank_entries: Its plural, e.g. ``"masks"``.

    Returns:
        The cells, by feature key.
    """
    bank_average = Support(Status.WORKS, f"average over the {bank_entry} bank")
    fresh_draws = Support(
        Status.WORKS, f"fresh {bank_entries} beyond the bank: a distinct function per sample"
    )
    return {
        "analytic-acquisitions": Support(
            Status.APPROXIMATE, f"moment-matched Gaussian of the {bank_entry} bank"
        ),
        "mc-acquisitions": bank_average,
        "noisy-ei-pending": bank_average,
        "multi-objective": bank_average,
        "max-posterior-sampling": fresh_draws,
        "batch-thompson-sampling": Support(Status.WORKS),
        "constrained-thompson-sampling": fresh_draws,
        "learnable-transforms": Support(Status.WORKS, "trained with the network"),
        "observation-noise": Support(
            Status.WORKS, "homoscedastic noise estimated from the residuals"
        ),
    }


@dataclass(frozen=True)
class Family:
    r"""A column of the feature table: models that support BoTorch's and Ax's features
    alike (one serving base, say), with one cell per feature.

    Args:
        key: Identifier (a test suite's drop-in scenarios take it).
        title: The column header (markdown).
        support: A :class:`Support` for the key of every :data:`FEATURES` row.

    Raises:
        ValueError: If a feature is not stated, or a key is not a feature's.
    """

    key: str
    title: str
    support: Mapping[str, Support]

    def __post_init__(self) -> None:
        missing = [key for key in _FEATURE_KEYS if key not in self.support]
        unknown = sorted(set(self.support) - set(_FEATURE_KEYS))
        if missing or unknown:
            raise ValueError(
                f"Family {self.key!r} must state every feature of FEATURES and no other: "
                f"missing {missing}, unknown {unknown}."
            )
        for key, cell in self.support.items():
            if not isinstance(cell, Support):
                raise TypeError(f"Family {self.key!r}: the cell of {key!r} must be a Support.")


@dataclass(frozen=True)
class BODefaults:
    r"""How the BO loop builds and fits a model (its entry in the registry of
    surrogates): ``model_class(train_X, train_Y, input_transform=Normalize(d, bounds),
    outcome_transform=Standardize(m), **constructor_options)``, fitted with
    ``fit_options``. Published benchmark results rest on these values: change them only
    with the results.

    Args:
        constructor_options: Hyperparameters set at construction.
        fit_options: Hyperparameter overrides of every fit (``fit(**fit_options)``).
        supports_warm_start: Whether the model's ``fit`` takes ``warm_start`` and a
            ``max_steps`` override (the continual fit policy needs both).
        after_fit: ``after_fit(model, train_Y)``, called after every fit (e.g. NOMU's
            mean-width scaling of its calibration constant to the data's spread).
    """

    constructor_options: Mapping[str, Any] = field(default_factory=dict)
    fit_options: Mapping[str, Any] = field(default_factory=dict)
    supports_warm_start: bool = False
    after_fit: Callable[[Model, Tensor], None] | None = None


@dataclass(frozen=True)
class FastSettings:
    r"""Settings under which the model fits toy data (a few dozen points in two
    dimensions) in well under a second, for tests and examples; a test may override some
    (fewer ``epochs``, say).

    Args:
        hyperparameters: Constructor hyperparameters.
        observation_noise_model: Whether, with these settings, ``observation_noise=True``
            adds a noise variance to the posterior (a noiseless NOMU adds nothing).
    """

    hyperparameters: Mapping[str, Any] = field(default_factory=dict)
    observation_noise_model: bool = True


@dataclass(frozen=True)
class ModelCard:
    r"""The catalogue entry of a model.

    Args:
        name: The registry key (e.g. ``"mc-dropout"``; the CLI's ``--model``).
        description: One line for ``botorch-nn-uq list`` and ``--help``, naming the BO
            defaults.
        model_class: The model's class.
        family: Its column of the feature table (shared by the cards of one family).
        summary: What the model is (markdown, a sentence or two), for the catalogue.
        posterior: What its posterior is (markdown), for the catalogue.
        bo: How the BO loop builds and fits it.
        fast: Settings that fit it on toy data in well under a second.
        takes_bounds: Whether the constructor takes the input box as ``bounds`` (NOMU:
            the box of its artificial points); the BO loop passes the problem's bounds
            (:meth:`constructor_options`) and tests the bounds of their data
            (:meth:`fast_options`).

    Raises:
        ValueError: If the name is not lower-case words joined by hyphens, or the
            description is not one line.

    Example:
        >>> from botorch_nn_uq.models import MODEL_CARDS
        >>> [card.name for card in MODEL_CARDS][:3]
        ['gp', 'mc-dropout', 'deep-ensemble']
    """

    name: str
    description: str
    model_class: type[Model]
    family: Family
    summary: str
    posterior: str
    bo: BODefaults = field(default_factory=BODefaults)
    fast: FastSettings = field(default_factory=FastSettings)
    takes_bounds: bool = False

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", self.name):
            raise ValueError(
                f"A card's name is lower-case words joined by hyphens; got {self.name!r}."
            )
        if not self.description or "\n" in self.description:
            raise ValueError(f"Card {self.name!r}: the description must be one line.")

    def constructor_options(self, bounds: Tensor) -> dict[str, Any]:
        r"""The constructor options of the BO loop's model (:class:`BODefaults`).

        Args:
            bounds: The ``2 x d`` box of the problem, in problem units.

        Returns:
            ``bo.constructor_options``, with ``bounds`` where the model takes them.
        """
        return {**self.bo.constructor_options, **self.box_arguments(bounds)}

    def fast_options(self, bounds: Tensor, **overrides: Any) -> dict[str, Any]:
        r"""Constructor arguments that fit toy data in well under a second.

        Args:
            bounds: The ``2 x d`` box of the inputs (passed where the model takes it).
            **overrides: Hyperparameters that replace the card's fast ones.

        Returns:
            The fast hyperparameters, the overrides and ``bounds`` where the model
            takes them.
        """
        return {**self.fast.hyperparameters, **overrides, **self.box_arguments(bounds)}

    def box_arguments(self, bounds: Tensor) -> dict[str, Tensor]:
        r"""The constructor's arguments that give the model its input box.

        Args:
            bounds: The ``2 x d`` box of the inputs.

        Returns:
            ``{"bounds": bounds}`` where the model takes them (:attr:`takes_bounds`),
            else an empty dict.
        """
        return {"bounds": bounds} if self.takes_bounds else {}


def catalogue(*cards: ModelCard) -> tuple[ModelCard, ...]:
    r"""The cards as a catalogue, checked.

    Args:
        *cards: The cards, in the registry's order.

    Returns:
        The cards as a tuple.

    Raises:
        ValueError: If two cards have one name, or two cards of one family key state
            different families (titles or cells).
    """
    names, families = set(), {}
    for card in cards:
        if card.name in names:
            raise ValueError(f"Two model cards are named {card.name!r}.")
        names.add(card.name)
        known = families.setdefault(card.family.key, card.family)
        if known != card.family:
            raise ValueError(
                f"The cards of family {card.family.key!r} must share its title and cells; "
                f"{card.name!r} states others."
            )
    return tuple(cards)
