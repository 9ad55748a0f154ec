"""The README's feature table is the model cards' cells rendered
(``tests/readme_tables.py``), and every cell holds: each feature's drop-in scenario
(``tests/drop_in/scenarios.py``) runs on a small fitted model of each family, or raises
the stated error."""

from pathlib import Path

import pytest

from botorch_nn_uq.models.card import FEATURES, Family, Feature, Status, Support
from tests import readme_tables
from tests.cards import families
from tests.drop_in.scenarios import SCENARIOS

README = Path(__file__).resolve().parents[1] / "README.md"

CELLS = [(feature, family) for feature in FEATURES for family, _ in families().values()]


@pytest.mark.parametrize(
    ("feature", "family"), CELLS, ids=[f"{feature.key}-{family.key}" for feature, family in CELLS]
)
def test_the_cell_holds(feature: Feature, family: Family) -> None:
    support = family.support[feature.key]
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
    block = readme_tables.replace_block(
        text, readme_tables.FEATURE_TABLE, readme_tables.render_feature_table()
    )
    assert block == text, (
        "The README's feature table is stale: run `python -m tests.readme_tables README.md`."
    )


def test_replace_block_needs_both_markers_once() -> None:
    markers = readme_tables.FEATURE_TABLE
    with pytest.raises(ValueError, match="must contain"):
        readme_tables.replace_block("no table here", markers, "table")
    with pytest.raises(ValueError, match="must contain"):
        readme_tables.replace_block(markers[1] + "\n" + markers[0], markers, "table")
    text = f"intro\n{markers[0]}\nold\n{markers[1]}\noutro"
    assert readme_tables.replace_block(text, markers, "new") == (
        f"intro\n{markers[0]}\nnew\n{markers[1]}\noutro"
    )


def test_cells_state_a_note_and_an_error_where_needed() -> None:
    with pytest.raises(ValueError, match="needs a note"):
        Support(Status.APPROXIMATE)
    with pytest.raises(ValueError, match="error type"):
        Support(Status.UNSUPPORTED, "why")
    with pytest.raises(ValueError, match="error type"):
        Support(Status.WORKS, error=ValueError)


def test_a_family_states_every_feature_and_no_other() -> None:
    cells = {feature.key: Support(Status.WORKS) for feature in FEATURES}
    Family("toy", "Toy", cells)
    with pytest.raises(ValueError, match=r"missing \['dtypes'\]"):
        Family("toy", "Toy", {key: cell for key, cell in cells.items() if key != "dtypes"})
    with pytest.raises(ValueError, match=r"unknown \['teleportation'\]"):
        Family("toy", "Toy", {**cells, "teleportation": Support(Status.WORKS)})
