"""The user guide's generated tables, rendered from the model cards
(:data:`botorch_nn_uq.models.MODEL_CARDS`): the feature table of ``docs/guide/features.md``
(one column per model family, one row per feature of
:data:`botorch_nn_uq.models.card.FEATURES`) and the table of registered models of
``docs/guide/models.md``. ``tests/test_features.py`` and ``tests/test_docs.py`` check that
the pages show them as rendered here.

Refresh the pages after changing a card with ``python -m tests.guide_tables`` (from the
repository's root).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path

import botorch.models

import botorch_nn_uq.models
from botorch_nn_uq.bo.surrogates import RANDOM_SEARCH
from botorch_nn_uq.models import MODEL_CARDS, ModelCard
from botorch_nn_uq.models.card import FEATURES, Status, Support
from tests.cards import families

FEATURE_TABLE = (
    "<!-- feature table: generated from the model cards by tests/guide_tables.py, do not edit -->",
    "<!-- end of feature table -->",
)
MODELS_TABLE = (
    "<!-- models table: generated from the model cards by tests/guide_tables.py, do not edit -->",
    "<!-- end of models table -->",
)
SYMBOLS = {Status.WORKS: "✅", Status.APPROXIMATE: "⚠️", Status.UNSUPPORTED: "❌"}

#: The row of the strategy without a surrogate, which has no card.
RANDOM_ROW = (
    f"| `{RANDOM_SEARCH}` | none: uniform random search, the CLI's and `run_bo`'s baseline "
    "without a surrogate (`--acquisition` is ignored) | none |"
)


def render_cell(cell: Support) -> str:
    r"""A cell's markdown: the status's symbol and the note."""
    return f"{SYMBOLS[cell.status]} {cell.note}".strip()


def render_feature_table(cards: Iterable[ModelCard] = MODEL_CARDS) -> str:
    r"""The feature table as markdown: a legend line, then one row per feature and one
    column per family of ``cards``."""
    columns = [family for family, _ in families(cards).values()]
    legend = " · ".join(f"{SYMBOLS[status]} {status.value}" for status in Status)
    header = "| feature | " + " | ".join(family.title for family in columns) + " |"
    separator = "| --- " * (len(columns) + 1) + "|"
    rows = [
        f"| {feature.title} | "
        + " | ".join(render_cell(family.support[feature.key]) for family in columns)
        + " |"
        for feature in FEATURES
    ]
    return "\n".join([legend, "", header, separator, *rows])


def class_path(model_class: type) -> str:
    r"""Where users import ``model_class`` from: ``botorch_nn_uq.models``,
    ``botorch.models``, or else its defining module."""
    for package in (botorch_nn_uq.models, botorch.models):
        if getattr(package, model_class.__name__, None) is model_class:
            return f"{package.__name__}.{model_class.__name__}"
    return f"{model_class.__module__}.{model_class.__qualname__}"


def render_models_table(cards: Iterable[ModelCard] = MODEL_CARDS) -> str:
    r"""The table of registered models as markdown: one row per card (name, class and
    summary, posterior), then random search."""
    rows = [
        f"| `{card.name}` | `{class_path(card.model_class)}`: {card.summary} | {card.posterior} |"
        for card in cards
    ]
    header = ["| name (CLI) | class | posterior |", "| --- | --- | --- |"]
    return "\n".join([*header, *rows, RANDOM_ROW])


#: The user guide's pages.
GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guide"

#: Each generated block's markers, the page that shows it, and what renders it from the
#: cards.
BLOCKS = {
    FEATURE_TABLE: (GUIDE / "features.md", render_feature_table),
    MODELS_TABLE: (GUIDE / "models.md", render_models_table),
}


def replace_block(text: str, markers: tuple[str, str], block: str) -> str:
    r"""``text`` with the lines between ``markers`` (begin, end) replaced by ``block``.

    Raises:
        ValueError: If the markers are missing, repeated or out of order.
    """
    begin_marker, end_marker = markers
    begin, end = text.find(begin_marker), text.find(end_marker)
    if begin < 0 or end < begin or text.count(begin_marker) != 1 or text.count(end_marker) != 1:
        raise ValueError(
            f"The text must contain {begin_marker!r} once, followed by {end_marker!r} once."
        )
    return text[: begin + len(begin_marker)] + "\n" + block + "\n" + text[end:]


def refresh(text: str, page: Path, cards: Iterable[ModelCard] = MODEL_CARDS) -> str:
    r"""``text`` (the guide page ``page``) with each of its generated blocks rendered from
    ``cards``."""
    cards = tuple(cards)
    for markers, (shown_on, render) in BLOCKS.items():
        if shown_on == page:
            text = replace_block(text, markers, render(cards))
    return text


def update_pages() -> list[Path]:
    r"""Rewrite the generated blocks of the guide's pages; returns the pages that
    changed."""
    changed = []
    for page in dict.fromkeys(page for page, _ in BLOCKS.values()):
        text = page.read_text(encoding="utf-8")
        updated = refresh(text, page)
        if updated != text:
            page.write_text(updated, encoding="utf-8")
            changed.append(page)
    return changed


if __name__ == "__main__":
    if len(sys.argv) != 1:
        raise SystemExit("usage: python -m tests.guide_tables")
    changed = update_pages()
    print("updated " + ", ".join(map(str, changed)) if changed else "up to date")
