"""Where cards go: validated JSON, Markdown and PNGs on disk (written whole or not at all), and
card runs in MLflow next to the reruns they were computed from."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from itertools import repeat
from operator import itemgetter
from pathlib import Path
from typing import Any

from recipe_audit import keys
from recipe_audit.cards import schemas
from recipe_audit.cards.build import CardError, seal
from recipe_audit.cards.html import to_html
from recipe_audit.cards.jsontext import dumps_indented
from recipe_audit.cards.render import band_plot, cell_groups, histogram, responsiveness_plot, to_markdown

SCHEMA_FILE = "recipe_card.v1.json"
TAG_VERDICT = keys.PREFIX + "verdict"
TAG_CARD_ID = keys.PREFIX + "card_id"
TAG_CARD_KEY = keys.PREFIX + "card_key"  # on a card run: card_key(), what makes two card runs the same card
TAG_CARD_DIGEST = keys.PREFIX + "card_digest"  # on a card run: the digest of its card.json
TAG_ATTACHED_TO = keys.PREFIX + "attached_to"  # on a card run attached to a model version: <model>/<version>


def schema() -> dict[str, Any]:
    return schemas.load(SCHEMA_FILE)


def ui_experiment_path(experiment_id: str) -> str:
    """Where an experiment's runs table is in MLflow's UI, relative to the UI's address. MLflow's
    UI (3.17, as tested) opens an experiment in its GenAI or its model-training view by a switch
    of its own (kept in the browser, GenAI unless a person changed it), no longer by the
    experiment's ``mlflow.experimentKind`` tag (which recipe_audit still sets, for the MLflow
    versions that read it); the link names the model-training view."""
    return f"#/experiments/{experiment_id}/runs?workflowType=machine_learning"


def ui_experiment_link(tracking_uri: str, experiment_id: str) -> str:
    """:func:`ui_experiment_path` as a person opens it: on a tracking server, its full address;
    on a local store, the ``mlflow ui`` command first."""
    from recipe_audit.store.uris import mask_credentials

    path = ui_experiment_path(experiment_id)
    if tracking_uri.startswith(("http://", "https://")):
        return f"{mask_credentials(tracking_uri).rstrip('/')}/{path}"
    return f"mlflow ui --backend-store-uri {mask_credentials(tracking_uri)}, then http://127.0.0.1:5000/{path}"


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


def render_files(doc: dict[str, Any], out_dir: Path, stem: str = "card") -> dict[str, Path]:
    """Write ``<stem>.json``, ``<stem>.md``, ``<stem>.html`` (the Markdown with its plots embedded)
    and per cell a histogram PNG and a band PNG into ``out_dir``.

    The JSON written is ``doc`` sealed with the manifest of the other files (name -> sha256), so
    its digest covers every file of the card (``doc`` itself is not changed). Everything is
    rendered into a temporary directory first and moved into place only when all of it
    succeeded, so a failure never leaves a half-written card."""
    validate(doc)
    out_dir.mkdir(parents=True, exist_ok=True)
    # the content digest the Markdown names; the manifest is added below. A copy of the document
    # and its entries (sealing and rendering change neither the entries' contents nor anything
    # below them: no deep copy of 100,000 reruns)
    card = seal({**doc, "cells": [dict(e) for e in doc["cells"]]})
    content = card["content_digest"]
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".card-") as tmp:
        tmp_dir = Path(tmp)
        images: dict[tuple, str] = {}
        band_images: dict[tuple, str] = {}
        files: dict[str, Path] = {}
        for i, (key, entries) in enumerate(cell_groups(card).items()):
            if entries[0]["n_failures"] is None:  # refused-shift: nothing measured to plot
                continue
            name = f"{stem}_hist_{i}_{_slug(entries[0]['label'])}.png"
            fig = histogram(entries)
            fig.savefig(tmp_dir / name)
            images[key] = name
            files[f"hist_{i}"] = out_dir / name
            if all(e.get("band") for e in entries):  # the band beside the pointwise bound
                name = f"{stem}_band_{i}_{_slug(entries[0]['label'])}.png"
                band_plot(entries).savefig(tmp_dir / name)
                band_images[key] = name
                files[f"band_{i}"] = out_dir / name
        if card.get("responsiveness"):
            name = f"{stem}_responsiveness.png"
            responsiveness_plot(card["responsiveness"]).savefig(tmp_dir / name)
            files["responsiveness"] = out_dir / name
        markdown = to_markdown(card, images, band_images)
        (tmp_dir / f"{stem}.md").write_text(markdown, encoding="utf-8")
        # the same card with its plots embedded: MLflow's artifact viewer shows it whole
        (tmp_dir / f"{stem}.html").write_text(to_html(markdown, tmp_dir), encoding="utf-8")
        # the content is what was sealed above (rendering only reads it): its digest is reused
        seal(card, {p.name: file_sha256(p) for p in sorted(tmp_dir.iterdir())}, content_digest=content)
        (tmp_dir / f"{stem}.json").write_text(dumps_indented(card), encoding="utf-8")
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


def write_json(doc: dict[str, Any], path: Path) -> None:
    """Validate and write the card JSON alone, atomically."""
    validate(doc)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(dumps_indented(doc), encoding="utf-8")
    os.replace(tmp, path)


def log_card_runs(doc: dict[str, Any], tracking_uri: str, experiment: str) -> list[str]:
    """One MLflow run per cell of the card (kind ``card``), in the reruns' experiment, nested
    under the sweep they came from, with the cell's card as JSON, Markdown, HTML and PNG
    artifacts, the card's Markdown as the run's description, and the verdict, U, N and k as
    tags and metrics (so the runs table shows verdicts). A cell whose card (same reruns, same
    options) is already logged as a card run reuses that run. All runs of one computation share
    the tag ``recipe_audit.card_id``. Returns the run ids."""
    # (the sweep's callback has tagged its reruns pass/fail at the sweep's bars as each job ended)
    return [c.run_id for c in log_cell_card_runs(doc, tracking_uri, experiment, tag_reruns=False)]


def cell_documents(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The card of each cell of ``doc`` (all its τ), sealed: what one card run holds."""
    out = []
    for entries in cell_groups(doc).values():
        cell_doc = {k: v for k, v in doc.items() if k not in ("split_audit", "responsiveness", "shift")}
        cell_doc["cells"] = entries  # the split audit and the shift table are about the other cells too
        out.append(seal(copy.deepcopy(cell_doc)))
    return out


@dataclass(frozen=True)
class LoggedCard:
    """One cell's card run: its id, the digest of the ``card.json`` in it, and whether an
    existing run with the same card was reused (nothing was written then)."""

    run_id: str
    digest: str
    reused: bool = False


def card_key(cell_doc: dict[str, Any]) -> str:
    """What makes two card runs the same card: the card format, the options, and per entry its
    cell, τ and the digest of its reruns (16 hex digits). Two computations over the same reruns
    with the same options give the same key, whenever and however they were asked."""
    from recipe_audit.cards.build import _canonical

    ident = {"schema": cell_doc.get("schema_version"), "software": (cell_doc.get("software") or {}).get("recipe_audit"),
             "options": cell_doc["options"],
             "cells": [[e["recipe_id"], sorted(e["group"].items()), e["audit_set"], e["metric"], float(e["tau"]),
                        e["digest"]] for e in cell_doc["cells"]]}
    return hashlib.sha256(_canonical(ident)).hexdigest()[:16]


def card_run_name(cell_doc: dict[str, Any], key: str, attached_to: str | None = None) -> str:
    """``card · <recipe> · <audit set> · τ 0.7, 0.8 · <key[:8]>`` (and ``· attached to
    <model>/<version>``): unique per card, readable in the runs table."""
    e0 = cell_doc["cells"][0]
    taus = ", ".join(f"{e['tau']:g}" for e in cell_doc["cells"])
    name = f"card · {e0['label']} · {e0['audit_set'] or e0['metric']} · τ {taus} · {key[:8]}"
    return name + (f" · attached to {attached_to}" if attached_to else "")


MAX_RUN_DESCRIPTION = 8000  # MLflow keeps at most this many characters of a run tag


def card_description(markdown: str, html_name: str = "card.html") -> str:
    """A card run's description (``mlflow.note.content``): the card's Markdown without its image
    lines (the run page cannot show them; ``card.html`` in the run's artifacts has them), cut at
    a section boundary when it would not fit a run tag."""
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


def _reusable(client, tracking_uri: str, experiment_id: str, key: str,
              attached_to: str | None) -> LoggedCard | None:
    """A finished card run of ``key`` (attached to ``attached_to``, or to nothing) whose card
    still matches its own digest and files, or None."""
    from recipe_audit.cards.verify import read_card, self_check

    flt = (f"tags.`{TAG_CARD_KEY}` = '{key}' and attributes.status = 'FINISHED' and "
           f"tags.`{keys.TAG_KIND}` = '{keys.KIND_CARD}'")
    try:
        runs = client.search_runs([experiment_id], flt, max_results=20, order_by=["attributes.start_time DESC"])
    except Exception:  # noqa: BLE001 - a store that cannot search: log a new run
        return None
    for run in runs:
        if run.data.tags.get(TAG_ATTACHED_TO) != attached_to or TAG_CARD_DIGEST not in run.data.tags:
            continue
        try:
            card = read_card(f"runs:/{run.info.run_id}/card.json", tracking_uri)
        except CardError:
            continue
        if card.doc["digest"] == run.data.tags[TAG_CARD_DIGEST] and not self_check(card.doc, card):
            return LoggedCard(run.info.run_id, card.doc["digest"], reused=True)
    return None


def log_card_runs_with_digests(doc: dict[str, Any], tracking_uri: str, experiment: str) -> list[tuple[str, str]]:
    """:func:`log_card_runs`, returning (run id, digest of the ``card.json`` logged in it) per cell."""
    return [(c.run_id, c.digest) for c in log_cell_card_runs(doc, tracking_uri, experiment)]


def log_cell_card_runs(doc: dict[str, Any], tracking_uri: str, experiment: str, *, reuse: bool = True,
                       attached_to: str | None = None, tag_reruns: bool = True) -> list[LoggedCard]:
    """:func:`log_card_runs`, one :class:`LoggedCard` per cell. With ``reuse``, a cell whose card
    (:func:`card_key`) is already logged, in a finished card run attached to the same
    ``attached_to`` (``<model>/<version>``, or nothing), reuses that run; ``attached_to`` also
    tags new runs (``recipe_audit.attached_to``) and names them. With ``tag_reruns``, each rerun of a
    new card run is tagged pass/fail at each τ of its card (:func:`tag_reruns_at_bars`)."""
    from mlflow.entities import Metric, RunTag
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        raise CardError(f"No experiment named '{experiment}' to log the card in.")
    card_id = doc["digest"][:12]
    out = []
    import time

    for cell_doc in cell_documents(doc):
        entries = cell_doc["cells"]
        e0 = entries[0]
        key = card_key(cell_doc)
        if reuse:
            found = _reusable(client, tracking_uri, exp.experiment_id, key, attached_to)
            if found is not None:
                out.append(found)
                continue
        tags = {keys.TAG_KIND: keys.KIND_CARD, TAG_CARD_ID: card_id, TAG_CARD_KEY: key, TAG_VERDICT: e0["verdict"],
                keys.PREFIX + "audit_set": str(e0["audit_set"] or e0["metric"]), keys.PREFIX + "metric": e0["metric"],
                keys.PREFIX + "tau": f"{e0['tau']:g}"}
        if attached_to:
            tags[TAG_ATTACHED_TO] = attached_to
        if e0["recipe_id"]:
            tags[keys.TAG_RECIPE_ID] = e0["recipe_id"]
        if len(e0["sweep_run_ids"]) == 1:
            tags[keys.TAG_PARENT] = e0["sweep_run_ids"][0]
            tags[keys.TAG_SWEEP_RUN_ID] = e0["sweep_run_ids"][0]
        for k, v in e0["group"].items():
            tags[keys.PREFIX + "group." + k] = str(v)
        run = client.create_run(exp.experiment_id, run_name=card_run_name(cell_doc, key, attached_to), tags=tags)
        rid = run.info.run_id
        try:
            now = int(time.time() * 1000)
            metrics, more_tags = [], []
            for e in entries:
                sfx = "" if e is e0 else f"/tau_{e['tau']:g}"
                more_tags.append(RunTag(TAG_VERDICT + sfx, e["verdict"]))
                for name in ("upper_bound", "lower_bound", "n_reruns", "n_failures"):
                    if e[name] is not None:
                        metrics.append(Metric(name + sfx, float(e[name]), now, 0))
            with tempfile.TemporaryDirectory() as tmp:
                files = render_files(cell_doc, Path(tmp))
                digest = json.loads(files["json"].read_text(encoding="utf-8"))["digest"]
                description = card_description(files["markdown"].read_text(encoding="utf-8"), files["html"].name)
                more_tags += [RunTag("mlflow.note.content", description), RunTag(TAG_CARD_DIGEST, digest)]
                client.log_batch(rid, metrics=metrics, tags=more_tags)
                client.log_artifacts(rid, tmp)
            client.set_terminated(rid, "FINISHED")
        except Exception:
            client.set_terminated(rid, "FAILED")
            raise
        out.append(LoggedCard(rid, digest))
        if tag_reruns:
            tag_reruns_at_bars(client, entries)
    return out


def rerun_bar_tags(entries: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """Per rerun (run id) of one cell, ``recipe_audit.fails.<metric>.tau_<τ>`` = ``true``/``false``
    for each τ of the card: the rerun's own result against the bar (one that did not finish, or
    has no value, fails every bar, as the card counts it)."""
    out: dict[str, dict[str, str]] = {}
    for e in entries:
        for r in e["reruns"]:
            if not r["run_id"]:
                continue
            v = r["value"] if r["status"] == "FINISHED" else None
            fails = v is None or (v < e["tau"] if e["higher_is_better"] else v > e["tau"])
            out.setdefault(r["run_id"], {})[f"{keys.PREFIX}fails.{e['metric']}.tau_{e['tau']:g}"] = str(fails).lower()
    return out


def tag_reruns_at_bars(client, entries: list[dict[str, Any]]) -> None:
    """Tag each rerun of a logged card pass/fail at each τ of the card (:func:`rerun_bar_tags`), so
    a search such as ``tags.`recipe_audit.fails.accuracy/calibration.tau_0.8` = 'true'`` lists the
    failures. Best effort: a rerun that cannot be tagged (deleted since) is skipped."""
    from mlflow.entities import RunTag

    for run_id, tags in rerun_bar_tags(entries).items():
        try:
            client.log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items()])
        except Exception:  # noqa: BLE001 - the card run is written; a tag is a convenience
            continue
