"""The card's words, the same in the terminal, the Markdown and the JSON's human text: a rule
"ships" or "does not ship", the budget is ε and the risk δ, and each sentence says why."""

from __future__ import annotations

import io

import numpy as np

from recipe_audit.cards.build import build_card
from recipe_audit.cards.document import RecipeCard
from recipe_audit.cards.model import CardOptions, Cell
from recipe_audit.cards.render import RULE_LABELS, to_markdown
from recipe_audit.cards.summary import print_card_summary, story


def _cell(values, recipe_id="a" * 16) -> Cell:
    n = len(values)
    return Cell(group={}, recipe_id=recipe_id, recipe_summary="default: lr 3e-3", audit_set="calibration",
                metric="accuracy/calibration", seeds=tuple(range(n)), values=np.asarray(values, dtype=float),
                run_ids=tuple(f"run{i}" for i in range(n)), statuses=("FINISHED",) * n, digest="d" * 64)


def _doc(*cells):
    return build_card(list(cells), CardOptions(taus=(0.7,), bootstrap_B=200),
                      {"experiment": "exp", "metric": "accuracy/calibration"}).to_json()


def _terminal(doc) -> str:
    out = io.StringIO()
    print_card_summary(RecipeCard.from_json(doc), stream=out)
    return out.getvalue()


def test_too_few_clean_reruns_say_why_the_card_does_not_ship():
    """3 reruns, none failed, the mean ships: the card does not, because 3 < N_min = 22 (not
    because reruns failed)."""
    (e,) = (doc := _doc(_cell([0.82, 0.83, 0.84])))["cells"]
    assert e["verdict"] == "insufficient-evidence" and e["n_failures"] == 0 and e["sample_floor"] == 22
    (line,) = story(RecipeCard.from_json(doc))
    assert line.endswith("the mean (0.830) ships; the card does not: 3 reruns are fewer than the 22 needed to "
                         "certify anything at ε = 0.1, δ = 0.1 (none failed; insufficient-evidence).")
    assert "0 of 3 reruns failed" not in line


def test_failures_say_u_exceeds_eps():
    values = [0.5] * 6 + [0.85] * 53  # the README's default recipe: 6 of 59 collapse
    (e,) = (doc := _doc(_cell(values)))["cells"]
    assert (e["n_failures"], e["verdict"]) == (6, "unsupported")
    (line,) = story(RecipeCard.from_json(doc))
    assert line.endswith(f"the mean ({np.mean(values):.3f}) ships; the card does not: 6 of 59 reruns failed, "
                         f"so U = {e['upper_bound']:.3f} > ε = 0.1 (unsupported).")
    assert "ε = 0.1" in e["reason"] and "eps" not in e["reason"]  # the JSON's sentence too


def test_terminal_shows_every_rule_in_the_cards_words():
    doc = _doc(_cell([0.5] * 6 + [0.85] * 53))
    text = _terminal(doc)
    for label in RULE_LABELS.values():  # the five rules, as the README's table has them
        assert label in text
    rules_part = text[text.index("What common practice decides"):]
    assert rules_part.count("does not ship") == 2  # mean - 2 sd and the card
    assert rules_part.count("ships") - rules_part.count("does not ship") == 3  # mean, median, bootstrap
    assert "holds" not in text and "eps" not in text
    md = to_markdown(RecipeCard.from_json(doc))
    assert "| holds |" not in md and "exceeds eps" not in md and "ships at τ = 0.7?" in md
    grid = text[text.index("Recipe cards ("):text.index("What common practice decides")]
    assert "mean ≥ τ" in grid and "ships" in grid  # the grid's mean column: ships / does not ship
