"""A recipe card as files: its JSON Schema check and the folder it is written to (``card.json``,
``card.md``, ``card.html`` and the plots), each file's digest sealed into the card.

Only this module renders a card's files (once each: :func:`render_card`) and writes them to disk;
:mod:`recipe_audit.store.cards` logs those same bytes to MLflow.
"""

from __future__ import annotations

import hashlib
import io
import os
import tempfile
from dataclasses import dataclass, replace
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
    plots = {name: data for name, data in images.items()
             if name.endswith(".png") and "/" not in name and "\\" not in name}
    return {f"{stem}.md": markdown.encode("utf-8"), f"{stem}.html": to_html(markdown, plots).encode("utf-8")}


class Plots:
    """The PNG bytes of a card's plots, each drawn once: the card's own folder and the card run of
    each of its cells (:func:`cell_cards`) show the same histogram and band, under other names.
    A plot is keyed by what it is drawn from (its kind and the cell's entries), so one instance
    may serve any cards; ``drawn`` counts the figures drawn."""

    def __init__(self) -> None:
        self._png: dict[tuple, bytes] = {}
        self.drawn = 0

    def png(self, kind: str, entries: list, draw) -> bytes:
        """The PNG of ``draw(entries)`` (a matplotlib figure), drawn the first time it is asked."""
        key = (kind, tuple(entries))
        data = self._png.get(key)
        if data is None:
            data = self._png[key] = figure_png(draw(entries))
            self.drawn += 1
        return data


def figure_png(fig) -> bytes:
    """A matplotlib figure as PNG bytes (what ``fig.savefig("x.png")`` writes).

    A figure laid out by ``tight_layout`` keeps a placeholder layout engine, and ``savefig`` lays
    out a figure that has an engine by drawing it once before it draws it into the PNG; the
    placeholder lays out nothing, so it is taken off first: the same bytes, one draw fewer."""
    import matplotlib
    from matplotlib.layout_engine import PlaceHolderLayoutEngine

    if isinstance(fig.get_layout_engine(), PlaceHolderLayoutEngine):
        with matplotlib.rc_context({"figure.autolayout": False, "figure.constrained_layout.use": False}):
            fig.set_layout_engine(None)  # no engine (whatever a matplotlibrc asks of new figures)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


@dataclass(frozen=True)
class RenderedCard:
    """A card rendered once, in memory: every file's bytes by name (``files``; ``<stem>.json`` is
    the card's JSON sealed with the manifest of the others) and which file is which (``kinds``:
    ``hist_<i>``, ``band_<i>``, ``responsiveness``, ``json``, ``markdown``, ``html``). The same
    bytes are written to a folder (:func:`write_files`) and logged to MLflow
    (:mod:`recipe_audit.store.cards`)."""

    files: dict[str, bytes]
    kinds: dict[str, str]
    digest: str

    def text(self, kind: str) -> str:
        return self.files[self.kinds[kind]].decode("utf-8")


def render_card(card: RecipeCard | dict[str, Any], stem: str = "card", plots: Plots | None = None) -> RenderedCard:
    """Render ``<stem>.json``, ``<stem>.md``, ``<stem>.html`` (the Markdown with its plots embedded)
    and per cell a histogram PNG and a band PNG, in memory. ``card``: the typed card, or a card's
    JSON (read back from a file); ``plots``: the plots already drawn for another document of the
    same cells (else they are drawn here).

    The JSON rendered is the card's (``to_json()``) sealed with the manifest of the other files
    (name -> sha256), so its digest covers every file of the card (``card`` itself is not changed)."""
    plots = plots if plots is not None else Plots()
    doc = card.to_json() if isinstance(card, RecipeCard) else {**card, "cells": [dict(e) for e in card["cells"]]}
    validate(doc)
    # the content digest the Markdown names; the manifest is added below (``doc`` is a copy of the
    # card's JSON down to its entries: sealing changes neither the entries nor anything below them)
    seal(doc)
    content = doc["content_digest"]
    # what is rendered: the sealed card (a typed card is not typed again from its JSON)
    view = card.with_seal_of(doc) if isinstance(card, RecipeCard) else RecipeCard.from_json(doc)
    images, band_images = plot_names(view, stem)
    files: dict[str, bytes] = {}
    kinds: dict[str, str] = {}
    for i, (key, entries) in enumerate(cell_groups(view).items()):
        if key in images:
            files[images[key]] = plots.png("hist", entries, histogram)
            kinds[f"hist_{i}"] = images[key]
        if key in band_images:  # the band beside the pointwise bound
            files[band_images[key]] = plots.png("band", entries, band_plot)
            kinds[f"band_{i}"] = band_images[key]
    if view.responsiveness:
        name = f"{stem}_responsiveness.png"
        files[name] = figure_png(responsiveness_plot(view.responsiveness))
        kinds["responsiveness"] = name
    markdown = to_markdown(view, images, band_images)
    # the same card with its plots embedded: MLflow's artifact viewer shows it whole
    page = to_html(markdown, dict(files))
    files[f"{stem}.md"], files[f"{stem}.html"] = markdown.encode("utf-8"), page.encode("utf-8")
    # the content is what was sealed above (rendering only reads it): its digest is reused
    seal(doc, {name: hashlib.sha256(data).hexdigest() for name, data in sorted(files.items())},
         content_digest=content)
    files[f"{stem}.json"] = dumps_indented(doc).encode("utf-8")
    kinds.update(json=f"{stem}.json", markdown=f"{stem}.md", html=f"{stem}.html")
    return RenderedCard(files, kinds, doc["digest"])


def write_files(rendered: RenderedCard, out_dir: Path) -> dict[str, Path]:
    """Write the files of ``rendered`` into ``out_dir``; returns their paths by kind. They are
    written into a temporary folder first and moved into place only when all of them are, so a
    failure never leaves a half-written card."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".card-") as tmp:
        for name, data in rendered.files.items():
            (Path(tmp) / name).write_bytes(data)
        for name in rendered.files:
            os.replace(Path(tmp) / name, out_dir / name)
    return {kind: out_dir / name for kind, name in rendered.kinds.items()}


def render_files(card: RecipeCard | dict[str, Any], out_dir: Path, stem: str = "card",
                 plots: Plots | None = None) -> dict[str, Path]:
    """:func:`render_card` written into ``out_dir`` (:func:`write_files`): the card's files by kind."""
    return write_files(render_card(card, stem, plots), out_dir)


def cell_cards(card: RecipeCard) -> list[RecipeCard]:
    """The card of each cell of ``card`` (all its τ), sealed: what one card run holds. The split
    audit, the responsiveness plot and the shift table are about the other cells too: a cell's
    card leaves them out."""
    drop = ("split_audit", "responsiveness", "shift", "artifacts")
    order = tuple(k for k in card.key_order if k not in drop)
    return [replace(card, cells=tuple(entries), split_audit=None, responsiveness=None, shift=None, artifacts=None,
                    key_order=order).sealed()
            for entries in card.cell_groups().values()]


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


MAX_RUN_DESCRIPTION = 8000  # MLflow keeps at most this many characters of a run tag


def run_description(markdown: str, html_name: str = "card.html") -> str:
    """A card run's description (``mlflow.note.content``), the text the store writes as it is: the
    card's Markdown without its image lines (the run page cannot show them; ``card.html`` in the
    run's artifacts has them), cut at a section boundary when it would not fit a run tag."""
    head = (f"The card with its plots: `{html_name}` in this run's artifacts; `card.json` is the "
            "document its digest covers.\n\n")
    body = "\n".join(ln for ln in markdown.splitlines() if not ln.startswith("!["))
    text = head + body
    if len(text) <= MAX_RUN_DESCRIPTION:
        return text
    note = f"\n\n(The rest of the card is in `{html_name}` and `card.md`.)"
    sections = text.split("\n## ")
    out = sections[0]
    for sec in sections[1:]:
        if len(out) + len(sec) + 4 + len(note) > MAX_RUN_DESCRIPTION:
            break
        out += "\n## " + sec
    return (out + note)[:MAX_RUN_DESCRIPTION]
