"""The card's JSON text is written in bulk for the per-rerun lists, and is byte for byte what
``json.dumps(doc, indent=2, allow_nan=False)`` writes (or refuses)."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from recipe_audit.cards import jsontext
from recipe_audit.cards.jsontext import dumps_indented

N = 80


def _doc() -> dict:
    reruns = [{"seed": s, "run_id": f"{s:032x}" if s % 9 else None, "value": None if s % 7 == 0 else 0.5 + s / 1e3,
               "status": "FINISHED" if s % 7 else "FAILED"} for s in range(N)]
    entry = {"label": "r [é]", "tau": 0.7, "reruns": reruns, "failed_seeds": list(range(0, N, 3)),
             "planned_seeds": list(range(N)), "duplicates": [{"seed": 1, "values": [0.5, None]}],
             "unfinished": [{"seed": s, "reason": "failed", "run_id": f"{s:032x}"} for s in range(0, N, 2)],
             "band": {"c": None, "k": 3}, "empty": []}
    return {"kind": "recipe_card", "cells": [entry, copy.deepcopy(entry)], "software": {"numpy": "2"}}


def _same(doc) -> None:
    assert dumps_indented(doc) == json.dumps(doc, indent=2, allow_nan=False)


def test_bulk_lists_are_written_as_json_writes_them():
    doc = _doc()
    _same(doc)
    assert jsontext._bulk_text(doc["cells"][0]["reruns"], 6) is not None  # the bulk path, not the fallback


EDITS = {
    "string seeds": lambda e: e["reruns"][4].update(seed="s-4"),
    "float seeds and bools": lambda e: e["failed_seeds"].extend([2.5, True, False]),
    "unicode and quotes": lambda e: e["reruns"][5].update(run_id='ä"\\%s\n'),
    "keys in another order": lambda e: e["reruns"].__setitem__(3, dict(reversed(list(e["reruns"][3].items())))),
    "an extra key": lambda e: e["reruns"][3].update(note="x"),
    "a nested value": lambda e: e["reruns"][3].update(value=[1.0]),
    "a NumPy float": lambda e: e["reruns"][3].update(value=np.float64(0.25)),
    "a large int and -0.0": lambda e: e["reruns"][3].update(seed=10**30, value=-0.0),
    "an empty object": lambda e: e["unfinished"].__setitem__(0, {}),
    "a short list": lambda e: e.__setitem__("reruns", e["reruns"][:3]),
    "a key with %": lambda e: [r.update({"100%": 1}) for r in e["unfinished"]],
    "a tuple": lambda e: e.__setitem__("planned_seeds", tuple(e["planned_seeds"])),
}


@pytest.mark.parametrize("name", list(EDITS))
def test_any_shape_gives_json_dumps_text(name):
    doc = _doc()
    EDITS[name](doc["cells"][1])
    _same(doc)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_numbers_are_refused_as_json_refuses_them(bad):
    doc = _doc()
    doc["cells"][0]["reruns"][10]["value"] = bad
    with pytest.raises(ValueError) as want:
        json.dumps(doc, indent=2, allow_nan=False)
    with pytest.raises(ValueError) as got:
        dumps_indented(doc)
    assert str(got.value) == str(want.value)


def test_documents_without_cells_are_plain_json_dumps():
    for doc in ({"a": [1.5] * 50}, {"cells": "x"}, {"cells": [1, 2]}):
        _same(doc)
