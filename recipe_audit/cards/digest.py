"""The digests that seal a recipe card: its content (every field, canonical JSON) and the files
written with it (Markdown, plots, HTML), so an edit to any of them shows."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from recipe_audit.cards.model import DIGEST_SCHEME, SCHEMA_VERSION

SEAL_FIELDS = ("digest", "content_digest", "artifacts")


def canonical_json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def content_digest(doc: dict[str, Any]) -> str:
    """sha256 (hex) of the card's JSON content: every field except :data:`SEAL_FIELDS`, as
    canonical JSON (sorted keys, no whitespace, UTF-8). Any edit of any field changes it."""
    return hashlib.sha256(canonical_json({k: v for k, v in doc.items() if k not in SEAL_FIELDS})).hexdigest()


_content_digest = content_digest  # the name seal's keyword hides


def is_legacy(doc: dict[str, Any]) -> bool:
    """Whether the card was written under the previous digest scheme (numbers and verdicts only)."""
    return doc.get("digest_scheme") != DIGEST_SCHEME


def document_digest(doc: dict[str, Any], content: str | None = None) -> str:
    """The card digest: sha256 over its content digest and, for every other file of the card
    (Markdown, plots, HTML: the ``artifacts`` manifest, file name -> sha256 of its bytes), the
    name and hash. The JSON is covered field by field, the files byte for byte; a card written
    as JSON alone has an empty manifest.

    The hashed text is ``"recipe_audit card digest 2\n" + content_digest + "\n"`` followed by
    ``"<name>\t<sha256>\n"`` per artifact in name order, UTF-8 encoded. ``content``: the
    :func:`content_digest` of ``doc`` when the caller has just computed it (it is then not
    computed again: it is the costliest part of sealing a large card)."""
    lines = ["recipe_audit card digest 2", content or content_digest(doc)]
    lines += [f"{name}\t{sha}" for name, sha in sorted((doc.get("artifacts") or {}).items())]
    return hashlib.sha256(("\n".join(lines) + "\n").encode("utf-8")).hexdigest()


def legacy_document_digest(doc: dict[str, Any]) -> str:
    """The digest of cards of schema 1.0: the cells' rerun digests and the numbers and verdicts
    they state only (not the other fields, not the Markdown or plots)."""
    h = hashlib.sha256()
    for e in doc["cells"]:
        h.update(json.dumps([e["digest"], e["tau"], e["n_reruns"], e["n_failures"], e["upper_bound"],
                             e["lower_bound"], e["verdict"], e["rules"]], sort_keys=True).encode())
    return h.hexdigest()


def seal(doc: dict[str, Any], artifacts: dict[str, str] | None = None, *,
         content_digest: str | None = None) -> dict[str, Any]:
    """Set the card's digest fields in place (and return it): ``schema_version``,
    ``digest_scheme``, ``content_digest``, the ``artifacts`` manifest (dropped when None or
    empty: the card is then its JSON alone) and ``digest`` (:func:`document_digest`). Call it
    after the last change to the content. ``content_digest``: the content digest of this very
    content, from a :func:`seal` of it with no change since (it is then not computed again)."""
    for k in SEAL_FIELDS:
        doc.pop(k, None)
    doc["schema_version"] = SCHEMA_VERSION
    doc["digest_scheme"] = DIGEST_SCHEME
    doc["content_digest"] = content_digest or _content_digest(doc)
    if artifacts:
        doc["artifacts"] = dict(sorted(artifacts.items()))
    doc["digest"] = document_digest(doc, doc["content_digest"])
    return doc
