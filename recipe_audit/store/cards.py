"""Card runs in MLflow, next to the reruns they were computed from: the files of a cell's card
as :func:`recipe_audit.cards.files.render_card` rendered them, logged as they are (this module
renders nothing), its verdict as tags and metrics, its Markdown as the run's description, and
pass/fail tags on the reruns. :meth:`recipe_audit.release.card_runs.CardOutput.log` is the path that
renders each cell once and hands its files here."""

from __future__ import annotations

import hashlib
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from recipe_audit import keys
from recipe_audit.cards.document import CardEntry, RecipeCard, thaw
from recipe_audit.cards.files import RenderedCard
from recipe_audit.cards.model import CardError

TAG_VERDICT = keys.PREFIX + "verdict"
TAG_CARD_ID = keys.PREFIX + "card_id"
TAG_CARD_KEY = keys.PREFIX + "card_key"  # on a card run: card_key(), what makes two card runs the same card
TAG_CARD_DIGEST = keys.PREFIX + "card_digest"  # on a card run: the digest of its card.json
TAG_ATTACHED_TO = keys.PREFIX + "attached_to"  # on a card run attached to a model version: <model>/<version>


def ui_experiment_path(experiment_id: str) -> str:
    """Where an experiment's runs table is in MLflow's UI, relative to the UI's address. MLflow's
    UI (3.17, as tested) opens an experiment in its GenAI or its model-training view by a switch
    of its own (kept in the browser, GenAI unless a person changed it), no longer by the
    experiment's ``mlflow.experimentKind`` tag (which recipe_audit still sets, for the MLflow
    versions that read it); the link names the model-training view."""
    return f"#/experiments/{experiment_id}/runs?workflowType=machine_learning"


def ui_experiment_link(tracking_uri: str, experiment_id: str) -> str:
    """:func:`ui_experiment_path` as a person opens it: on a tracking server, its full address;
    on a local store, the ``mlflow ui`` command first (:func:`recipe_audit.store.uris.ui_command`)."""
    from recipe_audit.store.uris import mask_credentials, ui_command

    path = ui_experiment_path(experiment_id)
    if tracking_uri.startswith(("http://", "https://")):
        return f"{mask_credentials(tracking_uri).rstrip('/')}/{path}"
    return f"{ui_command(tracking_uri)}, then http://127.0.0.1:5000/{path}"


@dataclass(frozen=True)
class LoggedCard:
    """One cell's card run: its id, the digest of the ``card.json`` in it, whether an existing
    run with the same card was reused (nothing was written then), and the key its ``card.sig``
    names (sha256 of the public key; None: not signed)."""

    run_id: str
    digest: str
    reused: bool = False
    signed_by: str | None = None


def card_key(card: RecipeCard) -> str:
    """What makes two card runs the same card: the card format, the options, and per entry its
    cell, τ and the digest of its reruns (16 hex digits). Two computations over the same reruns
    with the same options give the same key, whenever and however they were asked."""
    from recipe_audit.cards.digest import canonical_json

    ident = {"schema": card.schema_version, "software": card.software.get("recipe_audit"),
             "options": thaw(card.options),
             "cells": [[e.recipe_id, sorted(e.group.items()), e.audit_set, e.metric, float(e.tau), e.digest]
                       for e in card.cells]}
    return hashlib.sha256(canonical_json(ident)).hexdigest()[:16]


def card_run_name(card: RecipeCard, key: str, attached_to: str | None = None) -> str:
    """``card · <recipe> · <audit set> · τ 0.7, 0.8 · <key[:8]>`` (and ``· attached to
    <model>/<version>``): unique per card, readable in the runs table."""
    e0 = card.cells[0]
    taus = ", ".join(f"{e.tau:g}" for e in card.cells)
    name = f"card · {e0.label} · {e0.audit_set or e0.metric} · τ {taus} · {key[:8]}"
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


def card_experiment(tracking_uri: str, experiment: str):
    """An ``MlflowClient`` of ``tracking_uri`` and the id of ``experiment``, where card runs are
    logged; ``CardError`` when there is no such experiment."""
    from recipe_audit.store.tracking import client_for

    client = client_for(tracking_uri)  # a server's: waits out a restart, writes a retry cannot double
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        raise CardError(f"No experiment named '{experiment}' to log the card in.")
    return client, exp.experiment_id


def find_card_run(client, tracking_uri: str, experiment_id: str, key: str,
                  attached_to: str | None, signed_by: str | None = None) -> LoggedCard | None:
    """A finished card run of ``key`` (:func:`card_key`; attached to ``attached_to``, or to
    nothing) whose card still matches its own digest and files, or None. With ``signed_by`` (a
    key's fingerprint, :attr:`recipe_audit.cards.signing.SigningKey.fingerprint`), only a card
    run whose signature bundle names that key."""
    from recipe_audit.cards.signing import key_hint
    from recipe_audit.cards.verify import self_check
    from recipe_audit.store.card_files import read_card

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
        if signed_by is not None and key_hint(card.signature) != signed_by:
            continue
        if card.doc["digest"] == run.data.tags[TAG_CARD_DIGEST] and not self_check(card.doc, card):
            return LoggedCard(run.info.run_id, card.doc["digest"], reused=True, signed_by=key_hint(card.signature))
    return None


def log_card_run(client, experiment_id: str, card: RecipeCard, rendered: RenderedCard, *, key: str,
                 card_id: str, attached_to: str | None = None, signature: bytes | None = None) -> LoggedCard:
    """One card run (kind ``card``) in ``experiment_id`` for the cell card ``card`` (one cell, all
    its τ: :func:`recipe_audit.cards.files.cell_cards`), nested under the sweep it came from, with
    the files of ``rendered`` (its rendering) as artifacts, the card's Markdown as the run's
    description, and the verdict, U, N and k as tags and metrics (so the runs table shows
    verdicts). ``key``: its :func:`card_key`; ``card_id``: the tag shared by the card runs of one
    computation; ``attached_to`` (``<model>/<version>``) tags and names the run; ``signature``:
    the card's signature bundle (:func:`recipe_audit.cards.signing.sign`), logged beside
    ``card.json`` as ``card.sig``."""
    from mlflow.entities import Metric, RunTag

    from recipe_audit.cards.signing import key_hint, signature_name

    entries = card.cells
    e0 = entries[0]
    tags = {keys.TAG_KIND: keys.KIND_CARD, TAG_CARD_ID: card_id, TAG_CARD_KEY: key, TAG_VERDICT: e0.verdict,
            keys.PREFIX + "audit_set": str(e0.audit_set or e0.metric), keys.PREFIX + "metric": e0.metric,
            keys.PREFIX + "tau": f"{e0.tau:g}"}
    if attached_to:
        tags[TAG_ATTACHED_TO] = attached_to
    if e0.recipe_id:
        tags[keys.TAG_RECIPE_ID] = e0.recipe_id
    if len(e0.sweep_run_ids) == 1:
        tags[keys.TAG_PARENT] = e0.sweep_run_ids[0]
        tags[keys.TAG_SWEEP_RUN_ID] = e0.sweep_run_ids[0]
    for k, v in e0.group.items():
        tags[keys.PREFIX + "group." + k] = str(v)
    run = client.create_run(experiment_id, run_name=card_run_name(card, key, attached_to), tags=tags)
    rid = run.info.run_id
    try:
        now = int(time.time() * 1000)
        metrics, more_tags = [], []
        for e in entries:
            sfx = "" if e is e0 else f"/tau_{e.tau:g}"
            more_tags.append(RunTag(TAG_VERDICT + sfx, e.verdict))
            for name in ("upper_bound", "lower_bound", "n_reruns", "n_failures"):
                if getattr(e, name) is not None:
                    metrics.append(Metric(name + sfx, float(getattr(e, name)), now, 0))
        description = card_description(rendered.text("markdown"), rendered.kinds["html"])
        more_tags += [RunTag("mlflow.note.content", description), RunTag(TAG_CARD_DIGEST, rendered.digest)]
        client.log_batch(rid, metrics=metrics, tags=more_tags)
        with tempfile.TemporaryDirectory() as tmp:
            for name, data in rendered.files.items():
                (Path(tmp) / name).write_bytes(data)
            if signature is not None:
                (Path(tmp) / signature_name(rendered.kinds["json"])).write_bytes(signature)
            client.log_artifacts(rid, tmp)
        client.set_terminated(rid, "FINISHED")
    except Exception:
        client.set_terminated(rid, "FAILED")
        raise
    return LoggedCard(rid, rendered.digest, signed_by=key_hint(signature))


def rerun_bar_tags(entries: list[CardEntry]) -> dict[str, dict[str, str]]:
    """Per rerun (run id) of one cell, ``recipe_audit.fails.<metric>.tau_<τ>`` = ``true``/``false``
    (:func:`recipe_audit.keys.fails_tag`, the name the sweep writes too) for each τ of the card: the
    rerun's own result against the bar (one that did not finish, or has no value, fails every bar,
    as the card counts it)."""
    out: dict[str, dict[str, str]] = {}
    for e in entries:
        for r in e.reruns:
            if not r.run_id:
                continue
            v = r.value if r.status == "FINISHED" else None
            fails = v is None or (v < e.tau if e.higher_is_better else v > e.tau)
            out.setdefault(r.run_id, {})[keys.fails_tag(e.metric, e.tau)] = str(fails).lower()
    return out


def tag_reruns_at_bars(client, entries: list[CardEntry], experiment_id: str | None = None) -> None:
    """Tag each rerun of a logged card pass/fail at each τ of the card (:func:`rerun_bar_tags`), so
    a search such as ``tags.`recipe_audit.fails.accuracy/calibration.tau_0.8` = 'true'`` lists the
    failures. A rerun already recorded as failing a bar (by its sweep as it ended, or by an earlier
    card) keeps that record: the release gate reads it as evidence, and a later card never clears
    it. Best effort: a rerun that cannot be tagged (deleted since) is skipped."""
    from mlflow.entities import RunTag, ViewType

    wanted = rerun_bar_tags(entries)
    recorded: dict[str, dict[str, str]] = {}
    if experiment_id is not None:
        ids = sorted(wanted)
        for i in range(0, len(ids), 100):
            chunk = ", ".join(f"'{r}'" for r in ids[i:i + 100])
            try:
                for run in client.search_runs([experiment_id], f"attributes.run_id IN ({chunk})",
                                              run_view_type=ViewType.ALL, max_results=1000):
                    recorded[run.info.run_id] = run.data.tags
            except Exception:  # noqa: BLE001 - then every rerun is looked at on its own below
                recorded.clear()
                break
    for run_id, tags in wanted.items():
        try:
            have = recorded[run_id] if run_id in recorded else client.get_run(run_id).data.tags
            write = {k: v for k, v in tags.items() if not (v == "false" and have.get(k) == "true")}
            if write:
                client.log_batch(run_id, tags=[RunTag(k, v) for k, v in write.items()])
        except Exception:  # noqa: BLE001 - the card run is written; a tag is a convenience
            continue
