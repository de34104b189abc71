"""Check a card against itself, and a card entry against the same cell recomputed
(:func:`recipe_audit.release.verify.verify_card` recomputes the card's cells from the tracking store
with the request and options the card records and compares them here, cell by cell: the reruns'
run ids, seeds, metrics and statuses, and the numbers the card states). A finding says *which*
thing differs:

- ``hand-edited``: the card no longer matches its own content (its digest over every field of the
  JSON and every file beside it: Markdown, plots, HTML; or a cell's rerun digest over its listed
  reruns), a file of the card is missing or one not covered by the digest was added to its card
  run, or it states numbers, verdicts or a recipe summary that its reruns, unchanged in the
  store, do not give;
- ``old-digest``: the card was written under the previous digest scheme, which covers its numbers
  and verdicts only (not its other fields, Markdown or plots): it is still read and compared
  with the store, but it does not verify; recompute it and attach it again;
- ``metric-changed``: the same runs, with another metric value or status in the store;
- ``rerun-added`` / ``rerun-removed``: the cell's set of runs differs (a seed rerun, a run
  deleted, a planned seed logged since);
- ``not-recomputable``: the store cannot give the card any more (experiment gone, the card
  refuses on unfinished reruns, ...).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from recipe_audit.cards.digest import content_digest, document_digest, is_legacy, legacy_document_digest
from recipe_audit.cards.model import audit_name

HAND_EDITED = "hand-edited"
OLD_DIGEST = "old-digest"
METRIC_CHANGED = "metric-changed"
RERUN_ADDED = "rerun-added"
RERUN_REMOVED = "rerun-removed"
NOT_RECOMPUTABLE = "not-recomputable"
KINDS = (HAND_EDITED, OLD_DIGEST, METRIC_CHANGED, RERUN_ADDED, RERUN_REMOVED, NOT_RECOMPUTABLE)

# numbers a card entry states that its reruns determine
_STATED = ("n_reruns", "n_failures", "upper_bound", "lower_bound", "sample_floor", "verdict", "rules",
           "recipe_summary")


@dataclass(frozen=True)
class Finding:
    kind: str  # one of KINDS
    cell: str  # which cell (label, audit set, τ), or "" for the whole card
    message: str  # one sentence

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "cell": self.cell, "message": self.message}


@dataclass(frozen=True)
class Verification:
    """The outcome of :func:`verify_card`: ``ok`` when nothing differs."""

    n_cells: int
    digest: str
    findings: tuple[Finding, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.findings

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(f.kind for f in self.findings))

    def summary(self) -> str:
        if self.ok:
            return (f"The card verifies: its {self.n_cells} cell(s) match the tracking store "
                    f"(card digest {self.digest[:16]}).")
        shown = "; ".join(f"{f.kind}: {f.message}" for f in self.findings[:4])
        more = f"; and {len(self.findings) - 4} more" if len(self.findings) > 4 else ""
        return f"The card does not verify ({', '.join(self.kinds)}): {shown}{more}."

    def to_dict(self) -> dict[str, Any]:
        return {"verified": self.ok, "n_cells": self.n_cells, "digest": self.digest,
                "kinds": list(self.kinds), "findings": [f.to_dict() for f in self.findings],
                "summary": self.summary()}


# ------------------------------------------------------------------------------------------
# Loading
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CardFiles:
    """A card as read from where it is kept: the validated document and what lies beside it.

    ``files`` maps each file the card's manifest lists and that was found beside the card to the
    sha256 of its bytes; ``own_place`` is True when that place holds this card alone (the top of a
    card run's artifacts), and then ``files`` also names (with None) every other file there: one
    the manifest does not list was added afterwards."""

    doc: dict[str, Any]
    files: dict[str, str | None] = field(default_factory=dict)  # None: present, not listed, not read
    own_place: bool = False
    # the bytes of the listed files found beside the card: the Markdown and the page are rendered
    # again from the JSON and compared with them (:func:`self_check`)
    contents: dict[str, bytes] = field(default_factory=dict, repr=False)
    # the card JSON's own name and bytes as read, and the signature bundle found beside it (None:
    # none), for a check of the card's signature (:mod:`recipe_audit.cards.signing`)
    name: str = "card.json"
    raw: bytes = field(default=b"", repr=False)
    signature: bytes | None = field(default=None, repr=False)

    def signed_files(self) -> dict[str, bytes]:
        """The files a signature of this card covers, as read: its JSON and each file its
        manifest lists that was found beside it."""
        listed = self.doc.get("artifacts") or {}
        return {self.name: self.raw, **{n: b for n, b in self.contents.items() if n in listed}}


# ------------------------------------------------------------------------------------------
# Checks
# ------------------------------------------------------------------------------------------


def reruns_digest(reruns: Sequence[dict[str, Any]]) -> str:
    """The digest of a card entry's listed reruns, computed as ``query.RerunSet.digest`` does."""
    h = hashlib.sha256()
    for r in reruns:
        value = math.nan if r["value"] is None else float(r["value"])
        h.update(json.dumps([r["seed"], r["run_id"], repr(value)]).encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


def cell_key(e: dict[str, Any]) -> tuple:
    audit = e["audit_set"] or audit_name(e["metric"])  # cards of schema 1.0 left a metric's audit set empty
    return (e["recipe_id"], tuple(sorted(e["group"].items())), audit, e["metric"], float(e["tau"]))


def cell_name(e: dict[str, Any], tau: bool = True) -> str:
    name = f"{e.get('label') or e['recipe_id']}, audit {e['audit_set'] or e['metric']}"
    return f"{name}, τ = {e['tau']:g}" if tau else name


OLD_DIGEST_MESSAGE = ("the card was written by an earlier recipe_audit whose digest covers only its numbers and "
                      "verdicts, not its other fields, Markdown or plots; recompute it with recipe-audit card "
                      "and attach it again")


def self_check(doc: dict[str, Any], card: CardFiles | None = None) -> list[Finding]:
    """Findings when the card does not match its own content (no store needed). With ``card``
    (where the card was read from), the files its digest covers are checked byte for byte."""
    out = []
    if is_legacy(doc):
        out.append(Finding(OLD_DIGEST, "", OLD_DIGEST_MESSAGE))
        if legacy_document_digest(doc) != doc["digest"]:
            out.append(Finding(HAND_EDITED, "", "the card's digest does not match the numbers and verdicts it "
                                                "states"))
    else:
        if doc.get("content_digest") != content_digest(doc):
            out.append(Finding(HAND_EDITED, "", "the card's content does not match its digest (a field of the "
                                                "card JSON was changed after it was written)"))
        elif document_digest(doc) != doc["digest"]:
            out.append(Finding(HAND_EDITED, "", "the card's digest does not match its content and files"))
        out += _file_findings(doc, card)
        if not out and card is not None:  # all as sealed: is each derived file what the JSON renders?
            out += _derived_findings(doc, card)
    if doc.get("shift"):
        from recipe_audit.cards.document import RecipeCard
        from recipe_audit.cards.shift import shift_section

        if shift_section(RecipeCard.from_json(doc).cells, doc["shift"]["audits"]) != doc["shift"]:
            out.append(Finding(HAND_EDITED, "", "the card's shift table does not match its cells"))
    for e in doc["cells"]:
        if reruns_digest(e["reruns"]) != e["digest"]:
            out.append(Finding(HAND_EDITED, cell_name(e), f"the reruns listed for {cell_name(e)} do not match "
                                                          f"their digest"))
    return out


def _file_findings(doc: dict[str, Any], card: CardFiles | None) -> list[Finding]:
    """The card's files (its ``artifacts`` manifest) against those found beside it."""
    if card is None:
        return []
    listed = doc.get("artifacts") or {}
    out = []
    changed = [n for n, sha in listed.items() if card.files.get(n) not in (None, sha)]
    missing = [n for n in listed if card.files.get(n) is None]
    added = [n for n in card.files if n not in listed] if card.own_place else []
    if changed:
        out.append(Finding(HAND_EDITED, "", f"{', '.join(changed[:4])} changed after the card was written (not "
                                            f"the bytes its digest covers)"))
    if missing:
        out.append(Finding(HAND_EDITED, "", f"{', '.join(missing[:4])} of the card is missing beside it"))
    if added:
        out.append(Finding(HAND_EDITED, "", f"{', '.join(added[:4])} was added beside the card after it was "
                                            f"written (its digest does not cover it)"))
    return out


def _derived_findings(doc: dict[str, Any], card: CardFiles) -> list[Finding]:
    """The Markdown and HTML found beside the card against the same files rendered again from its
    JSON: they are derived from it, so an edit shows however the manifest and digest were
    resealed afterwards."""
    listed = doc.get("artifacts") or {}
    md = [n for n in listed if n.endswith(".md") and n in card.contents]
    if len(md) != 1:
        return []
    stem = md[0][:-3]
    from recipe_audit.cards.files import derived_texts

    try:
        expected = derived_texts(doc, stem, {n: b for n, b in card.contents.items() if n.endswith(".png")})
    except Exception as exc:  # a card that validates but cannot be rendered again was not written by us
        return [Finding(HAND_EDITED, "", f"the card's Markdown cannot be rendered again from its JSON ({exc})")]
    differ = [n for n, data in expected.items() if n in card.contents and card.contents[n] != data]
    if not differ:
        return []
    return [Finding(HAND_EDITED, "", f"{', '.join(differ)} differ(s) from what the card's JSON renders (a derived "
                                     f"file was edited; card.md and card.html are rendered from card.json)")]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or abs(a - b) <= 1e-12 * max(1.0, abs(a))
    return a == b


def _fmt(v: Any) -> str:
    return "none" if v is None else f"{v:.6g}" if isinstance(v, float) else str(v)


def compare_cell(old: dict[str, Any], new: dict[str, Any]) -> list[Finding]:
    """What differs between a card entry and the same cell recomputed from the store."""
    name = cell_name(old, tau=False)  # the reruns are the same at every τ

    def key(r):
        return r["run_id"] if r["run_id"] else ("never-logged", r["seed"])

    before = {key(r): r for r in old["reruns"]}
    after = {key(r): r for r in new["reruns"]}
    out = []
    added = [after[k] for k in after if k not in before]
    logged_now = {r["seed"] for r in added}
    # a planned seed that was never logged and has a run now is an addition, not a removal
    removed = [before[k] for k in before if k not in after
               and not (before[k]["run_id"] is None and before[k]["seed"] in logged_now)]

    def seeds(rs):
        return ", ".join(f"seed {r['seed']}" + (f" (run {r['run_id'][:12]})" if r["run_id"] else " (never logged)")
                         for r in rs[:5]) + (" ..." if len(rs) > 5 else "")

    if added:
        out.append(Finding(RERUN_ADDED, name, f"{len(added)} rerun(s) added to {name}: {seeds(added)}"))
    if removed:
        out.append(Finding(RERUN_REMOVED, name, f"{len(removed)} rerun(s) of {name} no longer in the store: "
                                                f"{seeds(removed)}"))
    changed = []
    for k in before.keys() & after.keys():
        a, b = before[k], after[k]
        if not _same(a["value"], b["value"]) or a["status"] != b["status"] or a["seed"] != b["seed"]:
            what = (f"{_fmt(a['value'])} -> {_fmt(b['value'])}" if not _same(a["value"], b["value"])
                    else f"status {a['status']} -> {b['status']}" if a["status"] != b["status"]
                    else f"seed {a['seed']} -> {b['seed']}")
            changed.append(f"seed {a['seed']} (run {str(a['run_id'])[:12]}): {what}")
    if changed:
        out.append(Finding(METRIC_CHANGED, name, f"{old['metric']} changed for {len(changed)} rerun(s) of {name}: "
                                                 + "; ".join(sorted(changed)[:5])))
    if not out and new["digest"] != old["digest"]:
        out.append(Finding(METRIC_CHANGED, name, f"the reruns of {name} resolve differently in the store"))
    if not out:
        stated = [f for f in _STATED if f in old and f in new and not _same(old[f], new[f])]
        if stated:
            f, name = stated[0], cell_name(old)
            out.append(Finding(HAND_EDITED, name, f"{name} states {f} = {_fmt(old[f])}, but its reruns, unchanged "
                                                  f"in the store, give {_fmt(new[f])}"))
    return out


