"""Where cards go: validated JSON, Markdown and PNGs on disk (written whole or not at all), and
card runs in MLflow next to the reruns they were computed from."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from .. import keys
from . import schemas
from .build import CardError, seal
from .render import band_plot, cell_groups, histogram, responsiveness_plot, to_markdown

SCHEMA_FILE = "recipe_card.v1.json"
TAG_VERDICT = keys.PREFIX + "verdict"
TAG_CARD_ID = keys.PREFIX + "card_id"


def schema() -> dict[str, Any]:
    return schemas.load(SCHEMA_FILE)


def validate(doc: dict[str, Any]) -> None:
    """Raise ``CardError`` (one sentence) when ``doc`` is not a valid recipe card."""
    schemas.check(doc, SCHEMA_FILE, CardError, "recipe card")


def _slug(text: str) -> str:
    keep = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in text)
    return keep.strip("_")[:80] or "cell"


def render_files(doc: dict[str, Any], out_dir: Path, stem: str = "card") -> dict[str, Path]:
    """Write ``<stem>.json``, ``<stem>.md`` and per cell a histogram PNG and a band PNG into ``out_dir``.

    The JSON written is ``doc`` sealed with the manifest of the other files (name -> sha256), so
    its digest covers every file of the card (``doc`` itself is not changed). Everything is
    rendered into a temporary directory first and moved into place only when all of it
    succeeded, so a failure never leaves a half-written card."""
    validate(doc)
    out_dir.mkdir(parents=True, exist_ok=True)
    card = seal(copy.deepcopy(doc))  # the content digest the Markdown names; the manifest is added below
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
        (tmp_dir / f"{stem}.md").write_text(to_markdown(card, images, band_images), encoding="utf-8")
        seal(card, {p.name: file_sha256(p) for p in sorted(tmp_dir.iterdir())})
        (tmp_dir / f"{stem}.json").write_text(json.dumps(card, indent=2, allow_nan=False), encoding="utf-8")
        files["json"], files["markdown"] = out_dir / f"{stem}.json", out_dir / f"{stem}.md"
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
    tmp.write_text(json.dumps(doc, indent=2, allow_nan=False), encoding="utf-8")
    os.replace(tmp, path)


def log_card_runs(doc: dict[str, Any], tracking_uri: str, experiment: str) -> list[str]:
    """One MLflow run per cell of the card (kind ``card``), in the reruns' experiment, nested
    under the sweep they came from, with the cell's card as JSON, Markdown and PNG artifacts and
    the verdict, U, N and k as tags and metrics (so the runs table shows verdicts). All runs of
    one computation share the tag ``recipe_audit.card_id``. Returns the run ids."""
    return [rid for rid, _ in log_card_runs_with_digests(doc, tracking_uri, experiment)]


def cell_documents(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The card of each cell of ``doc`` (all its τ), sealed: what one card run holds."""
    out = []
    for entries in cell_groups(doc).values():
        cell_doc = {k: v for k, v in doc.items() if k not in ("split_audit", "responsiveness", "shift")}
        cell_doc["cells"] = entries  # the split audit and the shift table are about the other cells too
        out.append(seal(copy.deepcopy(cell_doc)))
    return out


def log_card_runs_with_digests(doc: dict[str, Any], tracking_uri: str, experiment: str) -> list[tuple[str, str]]:
    """:func:`log_card_runs`, returning (run id, digest of the ``card.json`` logged in it) per cell."""
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
        tags = {keys.TAG_KIND: keys.KIND_CARD, TAG_CARD_ID: card_id, TAG_VERDICT: e0["verdict"],
                keys.PREFIX + "audit_set": str(e0["audit_set"] or e0["metric"]), keys.PREFIX + "metric": e0["metric"],
                keys.PREFIX + "tau": f"{e0['tau']:g}"}
        if e0["recipe_id"]:
            tags[keys.TAG_RECIPE_ID] = e0["recipe_id"]
        if len(e0["sweep_run_ids"]) == 1:
            tags[keys.TAG_PARENT] = e0["sweep_run_ids"][0]
            tags[keys.TAG_SWEEP_RUN_ID] = e0["sweep_run_ids"][0]
        for k, v in e0["group"].items():
            tags[keys.PREFIX + "group." + k] = str(v)
        run = client.create_run(exp.experiment_id, run_name=f"card-{_slug(e0['label'])}-{e0['audit_set']}",
                                tags=tags)
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
            client.log_batch(rid, metrics=metrics, tags=more_tags)
            with tempfile.TemporaryDirectory() as tmp:
                files = render_files(cell_doc, Path(tmp))
                digest = json.loads(files["json"].read_text(encoding="utf-8"))["digest"]
                client.log_artifacts(rid, tmp)
            client.set_terminated(rid, "FINISHED")
        except Exception:
            client.set_terminated(rid, "FAILED")
            raise
        out.append((rid, digest))
    return out
