"""A strategy's one spelling: parsed, printed canonically, checked, and built into the
surrogate, proposer and fit policy that the core runs."""

import pytest
import torch

from botorch_nn_uq.bo import (
    AcquisitionProposer,
    ColdFit,
    ContinualFit,
    ContinualTraining,
    HitTarget,
    Minimize,
    RandomProposer,
    TrustRegionProposer,
    TurboProposer,
)
from botorch_nn_uq.bo.spelling import format_value, parse_part, parse_value
from botorch_nn_uq.bo.strategy import Strategy
from botorch_nn_uq.bo.surrogates import get_surrogate


@pytest.mark.parametrize(
    ("spelled", "canonical"),
    [
        (
            "deep-ensemble(max_steps=200):ts+turbo+bts+local",
            "deep-ensemble(max_steps=200):ts+turbo+bts+local(4)",
        ),
        ("deep-ensemble:ts+continual+tr", "deep-ensemble:ts+tr+continual"),
        ("gp:qlogei(raw_samples=256)+seq", "gp:qlogei(raw_samples=256)+seq"),
        ("mc-dropout", "mc-dropout:logei"),
        ("random", "random"),
        (
            "deep-ensemble:ts+turbo(success_tolerance=3)",
            "deep-ensemble:ts+turbo(success_tolerance=3)",
        ),
        (
            "deep-ensemble:ts(num_candidates=512)+tr(length_init=0.4)+local(2.5)"
            "+continual(warm_start_steps=50)",
            "deep-ensemble:ts(num_candidates=512)+tr(length_init=0.4)+local(2.5)"
            "+continual(warm_start_steps=50)",
        ),
        ("gp:ucb( beta = 2 , raw_samples=64)", "gp:ucb(beta=2,raw_samples=64)"),
    ],
)
def test_a_strategy_reads_and_prints_one_canonical_spelling(spelled, canonical) -> None:
    strategy = Strategy.parse(spelled)
    assert str(strategy) == canonical
    assert Strategy.parse(canonical) == strategy


@pytest.mark.parametrize(
    ("spelled", "message"),
    [
        ("deep-ensemble(max_stepz=200):ts", "Unknown hyperparameter(s) ['max_stepz']"),
        ("deep-ensemble(max_steps=-1):ts", "deep-ensemble"),
        ("gp(max_steps=3):ts", "takes no hyperparameter options"),
        ("deep-ensemble:ts+bts", "bts (batch Thompson sampling) applies to turbo only"),
        ("deep-ensemble:qlogei+turbo", "turbo proposes by Thompson sampling"),
        ("deep-ensemble:ts+tr+turbo", "turbo has its own trust region"),
        ("foo:ts", "Unknown model 'foo'"),
        ("deep-ensemble:bar", "bar"),
        ("deep-ensemble:ts+tr+tr", "option 'tr' is given twice"),
        ("deep-ensemble:ts+local", "local needs a trust region"),
        ("deep-ensemble:ts+tr+local(0.5)", "local's factor must be a finite number >= 1"),
        ("deep-ensemble:ts+wat", "unknown option 'wat'"),
        ("deep-ensemble:(ts", "unbalanced '('"),
        ("deep-ensemble:ts(beta=2)", "ts takes num_candidates; got beta"),
        ("gp:qlogei(raw_samples=0)", "raw_samples must be a positive integer"),
        ("gp:ts+continual", "continual needs a warm-startable model"),
        ("random:ts", "random search takes no acquisition"),
        ("deep-ensemble:ts+tr(surprise=1)", "tr takes"),
        ("deep-ensemble:ts+continual(sooner=1)", "continual"),
        ("Deep-Ensemble:ts", "is not NAME or NAME(ARGUMENTS)"),
        ("", "A strategy is spelled"),
    ],
)
def test_a_bad_spelling_is_refused_with_the_part_named(spelled, message) -> None:
    with pytest.raises(ValueError) as error:
        Strategy.parse(spelled)
    assert message in str(error.value)


def test_values_read_back_as_they_are_written() -> None:
    for value in (200, -3, 1e-3, 0.1, 2.5, float("inf"), True, False, None, "relu", "tanh"):
        assert parse_value(format_value(value)) == value
    assert parse_part("local(4)") == ("local", [4], {})
    with pytest.raises(ValueError, match="given twice"):
        parse_part("x(a=1,a=2)")


def test_the_components_are_the_ones_the_spelling_names() -> None:
    strategy = Strategy.parse("deep-ensemble:ts(num_candidates=512)+tr+local(2)+continual")
    proposer = strategy.proposer()
    expected = TrustRegionProposer(
        AcquisitionProposer("ts", options={"num_candidates": 512}), local_fit=2.0
    )
    assert proposer.to_config() == expected.to_config()
    assert isinstance(strategy.fit_policy(), ContinualFit)
    assert strategy.fit_policy().to_config() == ContinualFit(ContinualTraining()).to_config()
    assert strategy.surrogate() is get_surrogate("deep-ensemble")

    turbo = Strategy.parse("deep-ensemble:ts+turbo(success_tolerance=3)+bts+local")
    expected_turbo = TurboProposer(success_tolerance=3, batch_thompson=True, local_fit=4.0)
    assert turbo.proposer().to_config() == expected_turbo.to_config()
    assert isinstance(turbo.fit_policy(), ColdFit)

    gp = Strategy.parse("gp:qlogei(num_restarts=2,raw_samples=16)+seq").proposer()
    assert (
        gp.to_config()
        == AcquisitionProposer(
            "qlogei", num_restarts=2, raw_samples=16, sequential=True
        ).to_config()
    )
    assert isinstance(Strategy.parse("random").proposer(), RandomProposer)
    assert Strategy.parse("random").surrogate() is None


def test_model_options_reach_every_fit_and_a_fits_own_override_wins() -> None:
    named = get_surrogate("deep-ensemble(max_steps=7)")
    assert named is get_surrogate("deep-ensemble(max_steps=7)")
    assert named.name == "deep-ensemble(max_steps=7)"
    train_X = torch.rand(12, 2, dtype=torch.float64)
    train_Y = train_X.sum(-1, keepdim=True)
    bounds = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
    model = named.build(train_X, train_Y, bounds, seed=0)
    assert model.hyperparameters.max_steps == 7
    warm = named.build(train_X, train_Y, bounds, seed=1, warm_start=model, max_steps=3)
    assert warm.hyperparameters.max_steps == 3


def test_a_strategy_checks_itself_against_an_objective() -> None:
    Strategy.parse("gp:robust-ei").check(HitTarget(1.0))
    with pytest.raises(ValueError, match="needs a target value"):
        Strategy.parse("gp:robust-ei").check(Minimize())
    with pytest.raises(ValueError, match="needs a target-value acquisition"):
        Strategy.parse("gp:logei").check(HitTarget(1.0))
    with pytest.raises(ValueError, match="turbo minimises or maximises"):
        Strategy.parse("gp:ts+turbo").check(HitTarget(1.0))


#: The modules that may build proposers and fit policies: the strategy (the one
#: translation of names), the components' own modules (their configurations round-trip),
#: the optimizer (a bare acquisition name as ``proposer=``, the default cold fit), and the
#: NEON runner, whose surrogate and acquisition are code, not names.
COMPONENT_BUILDERS = {
    "botorch_nn_uq/bo/strategy.py",
    "botorch_nn_uq/bo/proposers.py",
    "botorch_nn_uq/bo/proposer_configs.py",
    "botorch_nn_uq/bo/turbo.py",
    "botorch_nn_uq/bo/fitting.py",
    "botorch_nn_uq/bo/optimizer.py",
    "benchmarks/neon_composite.py",
}
COMPONENTS = {
    "AcquisitionProposer",
    "TrustRegionProposer",
    "TurboProposer",
    "RandomProposer",
    "ColdFit",
    "ContinualFit",
}


def test_no_second_translation_of_strategy_names_appears() -> None:
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    offences = []
    for path in [*root.glob("botorch_nn_uq/**/*.py"), *root.glob("benchmarks/**/*.py")]:
        relative = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            function = node.func
            name = getattr(function, "id", None) or getattr(function, "attr", None)
            if name in COMPONENTS and relative not in COMPONENT_BUILDERS:
                offences.append(f"{relative}:{node.lineno} builds {name}")
            # Splitting a spelling at its options is the spelling module's job.
            if (
                name == "split"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and node.args[0].value == "+"
                and relative != "botorch_nn_uq/bo/spelling.py"
            ):
                offences.append(f"{relative}:{node.lineno} splits a spelling at '+'")
    assert not offences, "build strategies through Strategy: " + "; ".join(offences)
