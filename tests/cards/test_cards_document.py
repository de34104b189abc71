"""The typed card (cards/document.py): one serialiser, to_json(), and from_json() reads a card's
JSON back exactly (key order included), on cards of every shape the builder makes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from recipe_audit.cards.build import build_card
from recipe_audit.cards.document import Band, CardEntry, FrozenMap, RecipeCard, Rerun
from recipe_audit.cards.model import CardOptions, Cell

CUR = {"sweep_run_id": "p" * 32, "n_planned": 30, "n_launched": 10, "stopped_early": True, "stop_on": "decision",
       "batch_size": 4, "sweep_reason": "why", "sweep_audit_set": "calibration", "sweep_taus": [0.7],
       "sweep_eps": 0.1, "sweep_delta": 0.1}
ANY = {"sweep_run_id": "p" * 32, "batch_size": 10, "max_reruns": 100, "n_launched": 40,
       "launched_seeds": list(range(40)), "look_ns": [10, 20, 30, 40], "stop_reason": "looked good",
       "sweep_taus": [0.7], "sweep_eps": 0.1, "sweep_delta": 0.1}


def _cell(vals, extra=None, recipe_id="r" * 16, refused=None):
    vals = np.asarray(vals, dtype=float)
    n = vals.size
    return Cell(group={"lr": "0.1"}, recipe_id=recipe_id, recipe_summary="", audit_set="calibration",
                metric="accuracy/calibration", seeds=tuple(range(n)), values=vals,
                run_ids=tuple(f"run{i}" for i in range(n)), statuses=("FINISHED",) * n,
                sweep_run_ids=("p" * 32,), planned_seeds=tuple(range(n)), digest="0" * 64, extra=extra or {},
                unfinished=((n, "killed", None),), shift_refusal=refused)


def _cards():
    src = {"experiment": "exp", "metric": "accuracy/calibration"}
    return {
        "curtailed": build_card([_cell([0.5] * 6 + [0.9] * 4, {"curtailment": CUR})],
                                CardOptions(taus=(0.7, 0.4), bootstrap_B=50), src),
        "anytime": build_card([_cell([0.9] * 39 + [0.5], {"anytime": ANY})], CardOptions(taus=(0.7,), bootstrap_B=50),
                              src),
        "family": build_card([_cell([0.9] * 40), _cell([0.9] * 39 + [0.5], recipe_id="b" * 16),
                              _cell([0.9] * 3, recipe_id="c" * 16, refused="not scored")],
                             CardOptions(taus=(0.7, 0.8), bootstrap_B=50), src),
    }


@pytest.mark.parametrize("name", ["curtailed", "anytime", "family"])
def test_from_json_reads_back_exactly_what_to_json_wrote(name):
    card = _cards()[name]
    doc = card.to_json()
    again = RecipeCard.from_json(doc)
    assert again == card and again.to_json() == doc
    assert json.dumps(again.to_json()) == json.dumps(doc)  # key order, at every depth
    text = json.loads(json.dumps(doc))  # as read back from card.json
    assert json.dumps(RecipeCard.from_json(text).to_json()) == json.dumps(doc)


def test_the_card_is_frozen_and_typed():
    card = _cards()["family"]
    e = card.cells[0]
    assert isinstance(e, CardEntry) and isinstance(e.band, Band) and isinstance(e.reruns[0], Rerun)
    assert isinstance(card.cells, tuple) and isinstance(e.group, FrozenMap) and e.family.size == 3
    with pytest.raises(AttributeError):
        e.verdict = "release-supported"  # type: ignore[misc]
    with pytest.raises(TypeError):
        e.group["lr"] = "1"  # type: ignore[index]
    refused = card.cells[-1]
    assert refused.verdict == "refused-shift" and refused.band is None and not refused.has("band")
    assert refused.has("rule_statistics") and refused.rule_statistics is None  # present, null


def test_unknown_fields_and_other_shapes_are_kept_as_read():
    doc = _cards()["curtailed"].to_json()
    doc["cells"][0]["note"] = {"by": ["hand"]}
    doc["cells"][0]["reruns"][0] = {"value": 0.5, "seed": 0, "run_id": "run0", "status": "FINISHED"}
    del doc["cells"][1]["label"]
    doc["later"] = 1
    card = RecipeCard.from_json(doc)
    assert card.extra["later"] == 1 and card.cells[0].extra["note"]["by"] == ("hand",)
    assert json.dumps(card.to_json()) == json.dumps(doc)


def test_updated_adds_a_section_at_the_end_as_a_dict_update_would():
    card = _cards()["anytime"]
    doc = card.to_json()
    doc["split_audit"] = {"n_cells": 1}
    assert json.dumps(card.updated(split_audit={"n_cells": 1}).to_json()) == json.dumps(doc)
    assert card.sealed().to_json()["digest"] == card.digest


def test_a_card_of_schema_1_0_reads_back_exactly():
    doc = _cards()["family"].to_json()
    for k in ("digest_scheme", "content_digest", "artifacts"):
        doc.pop(k, None)
    doc["schema_version"] = "1.0"
    assert json.dumps(RecipeCard.from_json(doc).to_json()) == json.dumps(doc)


@pytest.mark.parametrize("name", ["curtailed", "anytime", "family"])
def test_with_seal_of_is_the_card_typed_again_from_its_sealed_json(name):
    from recipe_audit.cards.digest import seal

    card = _cards()[name].updated(split_audit={"n_splits": 3})  # a change after sealing
    for artifacts in (None, {"card.md": "a" * 64, "card_hist_0.png": "b" * 64}):
        doc = seal(card.to_json(), artifacts)
        fast, typed = card.with_seal_of(doc), RecipeCard.from_json(doc)
        assert fast == typed and json.dumps(fast.to_json()) == json.dumps(doc)
        assert fast.content_digest != card.content_digest  # the split audit is covered
        assert (fast.artifacts is None) == (artifacts is None)
    assert card.sealed() == RecipeCard.from_json(seal(card.to_json()))
