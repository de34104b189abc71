"""A recipe card as files: its JSON Schema check and the folder it is written to (``card.json``,
``card.md``, ``card.html`` and the plots), each file's digest sealed into the card.

Only this module writes a card to disk; :mod:`recipe_audit.store.cards` logs those files to MLflow.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from itertools import repeat
from operator import itemgetter
from pathlib import Path
from typing import Any

from recipe_audit.cards import schemas
from recipe_audit.cards.digest import seal
from recipe_audit.cards.document import RecipeCard
from recipe_audit.cards.html import to_html
from recipe_audit.cards.jsontext import dumps_indented
from recipe_audit.cards.model import CardError
from recipe_audit.cards.render import band_plot, cell_groups, histogram, responsiveness_plot, to_markdown

SCHEMA_FILE = "recipe_card.v1.json"


def schema() -> dict[str, Any]:
    return schemas.load(SCHEMA_FILE)


def validate(doc: dict[str, Any]) -> None:
    """Raise ``CardError`` (one sentence) when ``doc`` is not a valid recipe card.

    Every card is checked against the schema file with ``jsonschema``. The per-rerun arrays of
    an entry (``reruns``, ``failed_seeds``, ``planned_seeds``, ``unfinished``: one item per rerun,
    100,000 on a large card) are checked item by item in bulk instead (:func:`_per_rerun_ok`,
    the exact types their item schemas allow), and ``jsonschema`` checks the rest of the document
    with those arrays left empty; an array that is not plainly valid sends the whole document to
    ``jsonschema``, so a card is accepted exactly when ``jsonschema`` accepts it and a refusal
    names the same place and reason."""
    skeleton = _skeleton(doc)
    schemas.check(doc if skeleton is None else skeleton, SCHEMA_FILE, CardError, "recipe card")


# The item schemas of an entry's per-rerun arrays, as the schema file states them; the bulk check
# below holds for exactly these (a schema file that says otherwise is checked by jsonschema alone).
_SEED = {"$ref": "#/$defs/seed"}
_SEED_TYPES = {"type": ["integer", "number", "string"]}
_PER_RERUN_ITEMS = {
    "reruns": {"type": "object", "required": ["seed", "run_id", "value", "status"],
               "properties": {"seed": _SEED, "run_id": {"type": ["string", "null"]},
                              "value": {"type": ["number", "null"]}, "status": {"type": "string"}}},
    "failed_seeds": _SEED,
    "planned_seeds": _SEED,
    "unfinished": {"type": "object", "required": ["seed", "reason"],
                   "properties": {"seed": _SEED, "reason": {"enum": ["failed", "killed", "running", "stale-running",
                                                                     "nan-metric", "missing-metric", "never-logged"]},
                                  "run_id": {"type": ["string", "null"]}}},
}
# the Python types that are certainly valid for each JSON type named above (bool is not a number
# to JSON Schema; anything else, e.g. a NumPy scalar, goes to jsonschema)
_SEED_OK = frozenset({int, float, str})
_STR_OR_NULL = frozenset({str, type(None)})
_NUM_OR_NULL = frozenset({int, float, type(None)})


def _bulk_check_applies() -> bool:
    """Whether the schema file states the per-rerun arrays as :data:`_PER_RERUN_ITEMS` (arrays with
    an ``items`` schema and nothing else: no length or uniqueness rule)."""
    defs = schema().get("$defs", {})
    props = defs.get("entry", {}).get("properties", {})
    for name, items in _PER_RERUN_ITEMS.items():
        spec = props.get(name, {})
        if {k: v for k, v in spec.items() if k != "description"} != {"type": "array", "items": items}:
            return False
    return {k: v for k, v in defs.get("seed", {}).items() if k != "description"} == _SEED_TYPES


def _types(values) -> set[type]:
    return set(map(type, values))


def _per_rerun_ok(name: str, items: list) -> bool:
    """True when every item of the per-rerun array ``name`` is certainly valid against its item
    schema (one pass per column, no Python code per item); False means "ask jsonschema"."""
    if not items:
        return True
    if name in ("failed_seeds", "planned_seeds"):
        return _types(items) <= _SEED_OK
    if _types(items) != {dict}:
        return False

    def column(key: str) -> set[type]:
        return _types(map(itemgetter(key), items))

    try:
        if name == "reruns":
            return (column("seed") <= _SEED_OK and column("run_id") <= _STR_OR_NULL
                    and column("value") <= _NUM_OR_NULL and column("status") == {str})
        allowed = _PER_RERUN_ITEMS["unfinished"]["properties"]["reason"]["enum"]
        return (column("seed") <= _SEED_OK and column("reason") == {str}
                and set(map(itemgetter("reason"), items)) <= set(allowed)
                and _types(map(dict.get, items, repeat("run_id"))) <= _STR_OR_NULL)
    except KeyError:  # a required property is missing
        return False


def _skeleton(doc: Any) -> dict[str, Any] | None:
    """``doc`` with each entry's per-rerun arrays emptied when all their items are valid (a shallow
    copy; ``doc`` is not changed), or None when there is nothing to empty or an item is not
    plainly valid (then jsonschema checks the whole document)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("cells"), list) or not _bulk_check_applies():
        return None
    cells, emptied = [], False
    for e in doc["cells"]:
        if isinstance(e, dict):
            bulky = [k for k in _PER_RERUN_ITEMS if isinstance(e.get(k), list) and e[k]]
            for k in bulky:
                if not _per_rerun_ok(k, e[k]):
                    return None
            if bulky:
                e = {**e, **dict.fromkeys(bulky, [])}
                emptied = True
        cells.append(e)
    return {**doc, "cells": cells} if emptied else None


def _slug(text: str) -> str:
    keep = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in text)
    return keep.strip("_")[:80] or "cell"


def plot_names(view: RecipeCard, stem: str = "card") -> tuple[dict[tuple, str], dict[tuple, str]]:
    """The file names of a card's plots, by cell key: its histograms and its bands (a cell
    refused for shift has none; a band only where every entry of the cell has one)."""
    images: dict[tuple, str] = {}
    band_images: dict[tuple, str] = {}
    for i, (key, entries) in enumerate(cell_groups(view).items()):
        if entries[0].n_failures is None:  # refused-shift: nothing measured to plot
            continue
        images[key] = f"{stem}_hist_{i}_{_slug(entries[0].label)}.png"
        if all(e.band for e in entries):
            band_images[key] = f"{stem}_band_{i}_{_slug(entries[0].label)}.png"
    return images, band_images


def derived_texts(doc: dict[str, Any], stem: str, images: dict[str, bytes]) -> dict[str, bytes]:
    """What ``<stem>.md`` and ``<stem>.html`` of the card ``doc`` (a card's JSON as written)
    hold when rendered from it: the Markdown, and the page with the plots of ``images`` (file
    name -> bytes, read beside the card) embedded. A verifier compares these with the files
    found beside the card: the Markdown and the page are derived from the JSON, never edited."""
    view = RecipeCard.from_json(doc)
    names, band_names = plot_names(view, stem)
    markdown = to_markdown(view, names, band_names)
    with tempfile.TemporaryDirectory(prefix=".card-check-") as tmp:
        for name, data in images.items():
            if name.endswith(".png") and "/" not in name and "\\" not in name and name not in (".", ".."):
                (Path(tmp) / name).write_bytes(data)
        page = to_html(markdown, Path(tmp))
    return {f"{stem}.md": markdown.encode("utf-8"), f"{stem}.html": page.encode("utf-8")}


def render_files(card: RecipeCard | dict[str, Any], out_dir: Path, stem: str = "card") -> dict[str, Path]:
    """Write ``<stem>.json``, ``<stem>.md``, ``<stem>.html`` (the Markdown with its plots embedded)
    and per cell a histogram PNG and a band PNG into ``out_dir``. ``card``: the typed card, or a
    card's JSON (read back from a file).

    The JSON written is the card's (``to_json()``) sealed with the manifest of the other files
    (name -> sha256), so its digest covers every file of the card (``card`` itself is not changed).
    Everything is rendered into a temporary directory first and moved into place only when all of
    it succeeded, so a failure never leaves a half-written card."""
    doc = card.to_json() if isinstance(card, RecipeCard) else {**card, "cells": [dict(e) for e in card["cells"]]}
    validate(doc)
    out_dir.mkdir(parents=True, exist_ok=True)
    # the content digest the Markdown names; the manifest is added below (``doc`` is a copy of the
    # card's JSON down to its entries: sealing changes neither the entries nor anything below them)
    seal(doc)
    content = doc["content_digest"]
    # what is rendered: the sealed card (a typed card is not typed again from its JSON)
    view = card.with_seal_of(doc) if isinstance(card, RecipeCard) else RecipeCard.from_json(doc)
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".card-") as tmp:
        tmp_dir = Path(tmp)
        images, band_images = plot_names(view, stem)
        files: dict[str, Path] = {}
        for i, (key, entries) in enumerate(cell_groups(view).items()):
            if key in images:
                histogram(entries).savefig(tmp_dir / images[key])
                files[f"hist_{i}"] = out_dir / images[key]
            if key in band_images:  # the band beside the pointwise bound
                band_plot(entries).savefig(tmp_dir / band_images[key])
                files[f"band_{i}"] = out_dir / band_images[key]
        if view.responsiveness:
            name = f"{stem}_responsiveness.png"
            responsiveness_plot(view.responsiveness).savefig(tmp_dir / name)
            files["responsiveness"] = out_dir / name
        markdown = to_markdown(view, images, band_images)
        (tmp_dir / f"{stem}.md").write_text(markdown, encoding="utf-8")
        # the same card with its plots embedded: MLflow's artifact viewer shows it whole
        (tmp_dir / f"{stem}.html").write_text(to_html(markdown, tmp_dir), encoding="utf-8")
        # the content is what was sealed above (rendering only reads it): its digest is reused
        seal(doc, {p.name: file_sha256(p) for p in sorted(tmp_dir.iterdir())}, content_digest=content)
        (tmp_dir / f"{stem}.json").write_text(dumps_indented(doc), encoding="utf-8")
        files["json"], files["markdown"] = out_dir / f"{stem}.json", out_dir / f"{stem}.md"
        files["html"] = out_dir / f"{stem}.html"
        for p in tmp_dir.iterdir():
            os.replace(p, out_dir / p.name)
    return files


def file_sha256(path: Path) -> str:
    """sha256 (hex) of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_json(card: RecipeCard | dict[str, Any], path: Path) -> None:
    """Validate and write the card JSON alone (``card.to_json()``, or a card's JSON), atomically."""
    doc = card.to_json() if isinstance(card, RecipeCard) else card
    validate(doc)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(dumps_indented(doc), encoding="utf-8")
    os.replace(tmp, path)


