"""The README's feature table is ``botorch_nn_uq.features`` rendered, and every cell holds:
each feature's drop-in scenario (``tests/drop_in/scenarios.py``) runs on a small fitted
model of each family, or raises the stated error."""

from pathlib import Path

import pytest

from botorch_nn_uq import features
from botorch_nn_uq.features import FAMILIES, FEATURES, Status
from tests.drop_in.scenarios import SCENARIOS

README = Path(__file__).resolve().parents[1] / "README.md"

CELLS = [(feature, family) for feature in FEATURES for family in FAMILIES]


@pytest.mark.parametrize(
    ("feature", "family"), CELLS, ids=[f"{feature.key}-{family.key}" for feature, family in CELLS]
)
def test_the_cell_holds(feature: features.Feature, family: features.Family) -> None:
    support = feature.support[family.key]
    run = SCENARIOS[feature.key]
    if support.status is Status.UNSUPPORTED:
        with pytest.raises(support.error, match=support.error_match):
            run(family.key)
    else:
        run(family.key)


def test_every_feature_has_a_scenario() -> None:
    assert set(SCENARIOS) == {feature.key for feature in FEATURES}


def test_the_readme_shows_the_rendered_table() -> None:
    text = README.read_text(encoding="utf-8")
    assert features.replace_table(text) == text, (
        "The README's feature table is stale: run `python -m botorch_nn_uq.features README.md`."
    )


def test_replace_table_needs_both_markers_once() -> None:
    with pytest.raises(ValueError, match="must contain"):
        features.replace_table("no table here")
    with pytest.raises(ValueError, match="must contain"):
        features.replace_table(features.END_MARKER + "\n" + features.BEGIN_MARKER)
    block = f"{features.BEGIN_MARKER}\nold\n{features.END_MARKER}"
    assert features.render_markdown() in features.replace_table(f"intro\n{block}\noutro")


def test_cells_state_a_note_and_an_error_where_needed() -> None:
    with pytest.raises(ValueError, match="needs a note"):
        features.Support(Status.APPROXIMATE)
    with pytest.raises(ValueError, match="error type"):
        features.Support(Status.UNSUPPORTED, "why")
    with pytest.raises(ValueError, match="error type"):
        features.Support(Status.WORKS, error=ValueError)
