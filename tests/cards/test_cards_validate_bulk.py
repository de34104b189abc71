"""Card validation checks an entry's per-rerun arrays in bulk and the rest with jsonschema: it
accepts and refuses exactly what validating the whole document with jsonschema does, with the
same sentence."""

from __future__ import annotations

import copy
import functools

import jsonschema
import numpy as np
import pytest

from recipe_audit.cards import files as store
from recipe_audit.cards import schemas
from recipe_audit.cards.build import build_card
from recipe_audit.cards.model import CardError, CardOptions, Cell


@functools.cache
def _built(n: int = 300) -> dict:
    rng = np.random.default_rng(0)
    values = rng.normal(0.85, 0.05, n)
    values[::37] = np.nan
    statuses = tuple("FAILED" if np.isnan(v) else "FINISHED" for v in values)
    cell = Cell(group={}, recipe_id="r1", recipe_summary="", audit_set="calibration",
                metric="accuracy/calibration", seeds=tuple(range(n)), values=values,
                run_ids=tuple(f"{i:032x}" for i in range(n)), statuses=statuses,
                unfinished=tuple((s, "failed", f"{s:032x}") for s in range(0, n, 37)),
                planned_seeds=tuple(range(n)), digest="0" * 64)
    return build_card([cell], CardOptions(taus=(0.8, 0.9), bootstrap_B=50), {"experiment": "exp"}).to_json()


def _doc() -> dict:
    """A card of 300 reruns (every 37th failed), built once: each test edits its own copy."""
    return copy.deepcopy(_built())


def _jsonschema_says(doc) -> str | None:
    try:
        jsonschema.validate(doc, schemas.load(store.SCHEMA_FILE))
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "the top level"
        return f"Not a valid recipe card: at {where}, {exc.message}."
    return None


def _ours_says(doc) -> str | None:
    try:
        store.validate(doc)
    except CardError as exc:
        return str(exc)
    return None


def test_the_bulk_check_applies_to_the_shipped_schema_and_skips_the_per_rerun_arrays():
    doc = _doc()
    assert store._bulk_check_applies()
    skeleton = store._skeleton(doc)
    assert skeleton is not None and skeleton["cells"][0]["reruns"] == [] and skeleton["cells"][1]["failed_seeds"] == []
    assert len(doc["cells"][0]["reruns"]) == 300  # the document itself is untouched
    assert _ours_says(doc) is None and _jsonschema_says(doc) is None


def _set(path, value):
    def edit(doc):
        *head, last = path
        target = doc
        for p in head:
            target = target[p]
        target[last] = value
    return edit


def _delete(path):
    def edit(doc):
        *head, last = path
        target = doc
        for p in head:
            target = target[p]
        del target[last]
    return edit


EDITS = {
    "rerun value a string": _set(["cells", 0, "reruns", 17, "value"], "0.9"),
    "rerun value a bool": _set(["cells", 0, "reruns", 5, "value"], True),
    "rerun value a NumPy float (valid)": _set(["cells", 0, "reruns", 5, "value"], np.float64(0.5)),
    "rerun value an int (valid)": _set(["cells", 1, "reruns", 5, "value"], 1),
    "rerun without a status": _delete(["cells", 0, "reruns", 299, "status"]),
    "rerun status null": _set(["cells", 1, "reruns", 0, "status"], None),
    "rerun run_id a number": _set(["cells", 0, "reruns", 3, "run_id"], 3),
    "rerun seed a list": _set(["cells", 0, "reruns", 3, "seed"], [3]),
    "rerun seed a string (valid)": _set(["cells", 0, "reruns", 3, "seed"], "s3"),
    "rerun not an object": _set(["cells", 0, "reruns", 9], [9, "x", 0.5, "FINISHED"]),
    "rerun extra field (valid)": _set(["cells", 0, "reruns", 9, "note"], {"any": "thing"}),
    "reruns not an array": _set(["cells", 0, "reruns"], {"0": 1}),
    "failed seed null": _set(["cells", 0, "failed_seeds", 2], None),
    "failed seed a bool": _set(["cells", 1, "failed_seeds", 0], False),
    "planned seed an object": _set(["cells", 0, "planned_seeds", 250], {}),
    "unfinished reason unknown": _set(["cells", 0, "unfinished", 1, "reason"], "tired"),
    "unfinished without a reason": _delete(["cells", 1, "unfinished", 0, "reason"]),
    "unfinished run_id a number": _set(["cells", 0, "unfinished", 2, "run_id"], 7),
    "unfinished without a run_id (valid)": _delete(["cells", 0, "unfinished", 2, "run_id"]),
    "verdict unknown, per-rerun arrays valid": _set(["cells", 0, "verdict"], "ship-it"),
    "entry without its digest": _delete(["cells", 1, "digest"]),
    "entry not an object": _set(["cells", 1], "entry"),
    "upper bound above 1 and a bad rerun": lambda d: (_set(["cells", 0, "upper_bound"], 2.0)(d),
                                                      _set(["cells", 0, "reruns", 1, "value"], "x")(d)),
    "no cells": _set(["cells"], []),
    "duplicates item without run_ids": _set(["cells", 0, "duplicates"], [{"seed": 1, "values": []}]),
}


@pytest.mark.parametrize("name", list(EDITS))
def test_accepts_and_refuses_exactly_as_jsonschema_on_the_whole_document(name):
    doc = _doc()
    EDITS[name](doc)
    want = _jsonschema_says(doc)
    assert _ours_says(doc) == want
    assert (want is None) == name.endswith("(valid)")
