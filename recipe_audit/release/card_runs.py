"""The one path from a computed card to its files and its card runs: each file is rendered once
(:func:`recipe_audit.cards.files.render_card`), and the same bytes are written to a folder and
logged to MLflow (:mod:`recipe_audit.store.cards`, which renders nothing and imports nothing of
cards: the run's name, tags and description are made here).

The end of a sweep (:func:`recipe_audit.release.sweep.cards_for_sweep`), ``recipe-audit card
--out/--log-run`` and ``recipe-audit attach`` all go through :class:`CardOutput`: the card's own
folder and the card run of each of its cells share one drawing of each plot (:class:`Plots`).
With a signing key, each card's files are signed as they are rendered, and the bundle is kept
beside its JSON (``card.sig``: :mod:`recipe_audit.cards.signing`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from recipe_audit import keys
from recipe_audit.cards.digest import canonical_json
from recipe_audit.cards.document import CardEntry, RecipeCard, thaw
from recipe_audit.cards.files import (
    Plots,
    RenderedCard,
    cell_cards,
    render_card,
    run_description,
    write_files,
)
from recipe_audit.cards.model import CardError
from recipe_audit.cards.signing import SigningKey, covers, key_hint, sign, signature_name
from recipe_audit.cards.verify import self_check
from recipe_audit.release.card_files import read_card
from recipe_audit.store import cards as card_store
from recipe_audit.store.cards import LoggedCard


class CardOutput:
    """The outputs of one computed card: its folder (:meth:`write`) and its card runs
    (:meth:`log`), every plot drawn once for both."""

    def __init__(self, card: RecipeCard, signer: SigningKey | None = None, signed: bytes | None = None) -> None:
        self.card = card
        self.plots = Plots()
        self.signer = signer
        self.signed = signed  # the bundle of the card this one was read from (attach): kept where it still fits

    def _signature(self, card: RecipeCard, rendered: RenderedCard) -> bytes | None:
        """The bundle signing ``rendered`` (the files of ``card``) and its cells' reruns digests:
        made with the signing key, else the bundle the card was read with when it covers these
        very bytes (a card run attached as it was logged), else None."""
        reruns = [e.digest for e in card.cells]
        if self.signer is not None:
            return sign(rendered.files, reruns, self.signer)
        return self.signed if covers(self.signed, rendered.files, reruns) else None

    def write(self, out_dir: Path, stem: str = "card") -> dict[str, Path]:
        """The card's files in ``out_dir`` (``<stem>.json``, ``.md``, ``.html``, the plots), by kind;
        with a signing key, the bundle beside them (``<stem>.sig``, kind ``signature``)."""
        rendered = render_card(self.card, stem, self.plots)
        bundle = self._signature(self.card, rendered)
        sig = signature_name(rendered.kinds["json"])
        if bundle is not None:
            rendered = RenderedCard({**rendered.files, sig: bundle}, {**rendered.kinds, "signature": sig},
                                    rendered.digest)
        files = write_files(rendered, out_dir)
        if bundle is None:  # a bundle an earlier card left there signs other files
            (out_dir / sig).unlink(missing_ok=True)
        return files

    def log(self, tracking_uri: str, experiment: str, *, reuse: bool = True, attached_to: str | None = None,
            tag_reruns: bool = True) -> list[LoggedCard]:
        """One card run per cell of the card (:func:`recipe_audit.cards.files.cell_cards`), in
        ``experiment``, one :class:`LoggedCard` per cell in card order. With ``reuse``, a cell
        whose card (:func:`card_key`) is already logged, in a finished
        card run attached to the same ``attached_to`` (``<model>/<version>``, or nothing), reuses
        that run (nothing is rendered for it); ``attached_to`` also tags and names new runs. With
        ``tag_reruns``, each rerun of a new card run is tagged pass/fail at each τ of its card
        (:func:`rerun_bar_tags`, written by :func:`recipe_audit.store.cards.tag_reruns`). All runs of one computation share
        the tag ``recipe_audit.card_id``. With a signing key, each new card run holds its card's
        bundle, and only a card run signed by the same key is reused."""
        found_experiment = card_store.card_experiment(tracking_uri, experiment)
        if found_experiment is None:
            raise CardError(f"No experiment named '{experiment}' to log the card in.")
        client, experiment_id = found_experiment
        card_id = self.card.digest[:12]
        out = []
        for cell in cell_cards(self.card):
            key = card_key(cell)
            signed_by = self.signer.fingerprint if self.signer is not None else None
            found = (find_card_run(client, tracking_uri, experiment_id, key, attached_to, signed_by)
                     if reuse else None)
            if found is not None:
                out.append(found)
                continue
            rendered = render_card(cell, "card", self.plots)
            out.append(log_card_run(client, experiment_id, cell, rendered, key=key, card_id=card_id,
                                    attached_to=attached_to, signature=self._signature(cell, rendered)))
            if tag_reruns:
                card_store.tag_reruns(client, rerun_bar_tags(list(cell.cells)), experiment_id)
        return out


def card_key(card: RecipeCard) -> str:
    """What makes two card runs the same card: the card format, the options, and per entry its
    cell, τ and the digest of its reruns (16 hex digits). Two computations over the same reruns
    with the same options give the same key, whenever and however they were asked."""
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


def find_card_run(client, tracking_uri: str, experiment_id: str, key: str,
                  attached_to: str | None, signed_by: str | None = None) -> LoggedCard | None:
    """A finished card run of ``key`` (:func:`card_key`; attached to ``attached_to``, or to
    nothing) whose card still matches its own digest and files, or None. With ``signed_by`` (a
    key's fingerprint, :attr:`recipe_audit.cards.signing.SigningKey.fingerprint`), only a card
    run whose signature bundle names that key."""
    for run_id, tags in card_store.card_runs_with_key(client, experiment_id, key):
        if tags.get(card_store.TAG_ATTACHED_TO) != attached_to or card_store.TAG_CARD_DIGEST not in tags:
            continue
        try:
            card = read_card(f"runs:/{run_id}/card.json", tracking_uri)
        except CardError:
            continue
        if signed_by is not None and key_hint(card.signature) != signed_by:
            continue
        if card.doc["digest"] == tags[card_store.TAG_CARD_DIGEST] and not self_check(card.doc, card):
            return LoggedCard(run_id, card.doc["digest"], reused=True, signed_by=key_hint(card.signature))
    return None


def log_card_run(client, experiment_id: str, card: RecipeCard, rendered: RenderedCard, *, key: str,
                 card_id: str, attached_to: str | None = None, signature: bytes | None = None) -> LoggedCard:
    """One card run (kind ``card``) in ``experiment_id`` for the cell card ``card`` (one cell, all
    its τ: :func:`recipe_audit.cards.files.cell_cards`), nested under the sweep it came from, with
    the files of ``rendered`` (its rendering) as artifacts, the card's Markdown as the run's
    description (:func:`recipe_audit.cards.files.run_description`), and the verdict, U, N and k as
    tags and metrics (so the runs table shows verdicts). ``key``: its :func:`card_key`;
    ``card_id``: the tag shared by the card runs of one computation; ``attached_to``
    (``<model>/<version>``) tags and names the run; ``signature``: the card's signature bundle
    (:func:`recipe_audit.cards.signing.sign`), logged beside ``card.json`` as ``card.sig``."""
    entries = card.cells
    e0 = entries[0]
    tags = {keys.TAG_KIND: keys.KIND_CARD, card_store.TAG_CARD_ID: card_id, card_store.TAG_CARD_KEY: key,
            card_store.TAG_VERDICT: e0.verdict, keys.PREFIX + "audit_set": str(e0.audit_set or e0.metric),
            keys.PREFIX + "metric": e0.metric, keys.PREFIX + "tau": f"{e0.tau:g}"}
    if attached_to:
        tags[card_store.TAG_ATTACHED_TO] = attached_to
    if e0.recipe_id:
        tags[keys.TAG_RECIPE_ID] = e0.recipe_id
    if len(e0.sweep_run_ids) == 1:
        tags[keys.TAG_PARENT] = e0.sweep_run_ids[0]
        tags[keys.TAG_SWEEP_RUN_ID] = e0.sweep_run_ids[0]
    for k, v in e0.group.items():
        tags[keys.PREFIX + "group." + k] = str(v)
    metrics, more_tags = [], {}
    for e in entries:
        sfx = "" if e is e0 else f"/tau_{e.tau:g}"
        more_tags[card_store.TAG_VERDICT + sfx] = e.verdict
        for name in ("upper_bound", "lower_bound", "n_reruns", "n_failures"):
            if getattr(e, name) is not None:
                metrics.append((name + sfx, float(getattr(e, name))))
    more_tags["mlflow.note.content"] = run_description(rendered.text("markdown"), rendered.kinds["html"])
    more_tags[card_store.TAG_CARD_DIGEST] = rendered.digest
    files = dict(rendered.files)
    if signature is not None:
        files[signature_name(rendered.kinds["json"])] = signature
    return card_store.log_card_run(client, experiment_id, run_name=card_run_name(card, key, attached_to), tags=tags,
                                   more_tags=more_tags, metrics=metrics, files=files, digest=rendered.digest,
                                   signed_by=key_hint(signature))
