"""Verify a card against the tracking store it was computed from: recompute its cells with the
request and options the card records and compare them, cell by cell, with what it states (the
checks and the kinds of difference are :mod:`recipe_audit.cards.verify`'s)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from recipe_audit.cards.model import CardError, CardOptions
from recipe_audit.cards.signing import signature_name
from recipe_audit.cards.verify import (
    NOT_RECOMPUTABLE,
    RERUN_REMOVED,
    CardFiles,
    Finding,
    Verification,
    cell_key,
    cell_name,
    compare_cell,
    self_check,
)


def request_of(doc: dict[str, Any], tracking_uri: str | None = None):
    """The ``CardRequest`` and ``CardOptions`` the card was computed with."""
    from recipe_audit.release.compute import CardRequest

    src, o = doc["source"], doc["options"]
    planned = src.get("planned_seeds")
    req = CardRequest(
        experiment=src["experiment"], metric=src["metric"], tracking_uri=tracking_uri or src.get("tracking_uri"),
        seed_key=src.get("seed_key") or CardRequest.seed_key, group_by=tuple(src.get("group_by") or ()),
        recipe_id=src.get("recipe_id"), sweep_id=src.get("sweep_id"),
        planned_seeds=None if planned is None else tuple(planned),
    )
    return req, CardOptions.from_config(o)


def recompute(doc: dict[str, Any], tracking_uri: str | None = None) -> dict[tuple, dict[str, Any]]:
    """The card's cells recomputed from the store, by :func:`cell_key`. Cells are independent per
    metric and recipe, so only the card's own metrics (and its recipe, when the card holds one)
    are read. Raises ``CardError`` when the store cannot give them."""
    from recipe_audit.release.compute import compute_cards

    req, opts = request_of(doc, tracking_uri)
    recipes = {e["recipe_id"] for e in doc["cells"]}
    if req.recipe_id is None and len(recipes) == 1 and None not in recipes:
        req = replace(req, recipe_id=next(iter(recipes)))
    out: dict[tuple, dict[str, Any]] = {}
    for metric in dict.fromkeys(e["metric"] for e in doc["cells"]):
        try:
            new = compute_cards(replace(req, metric=metric), opts)
        except CardError:
            if req.recipe_id is None:
                raise
            # no rerun of the recipe is left: the experiment's other recipes show it cell by cell
            new = compute_cards(replace(req, metric=metric, recipe_id=None), opts)
        out.update({cell_key(e): e for e in new["cells"]})
    return out


def signature_check(doc: dict[str, Any], card: CardFiles, fresh: dict[tuple, dict[str, Any]], trusted):
    """Whether ``card`` is signed by ``trusted`` (a :class:`recipe_audit.cards.signing.TrustedKey`)
    over its files as read and over the reruns its cells resolve to in the store now (``fresh``:
    :func:`recompute`'s cells; a cell the store no longer gives keeps the card's own digest, and
    its removal is :func:`verify_card`'s finding). A :class:`recipe_audit.cards.signing.SignatureCheck`."""
    from recipe_audit.cards.signing import check

    now = [(fresh.get(cell_key(e)) or e)["digest"] for e in doc["cells"]]
    return check(card.signed_files(), now, card.signature, trusted, where=signature_name(card.name))


def verify_card(doc: dict[str, Any], tracking_uri: str | None = None, card: CardFiles | None = None,
                trusted=None, fresh: dict[tuple, dict[str, Any]] | None = None) -> Verification:
    """Self-check the card (with the files beside it, when ``card`` says where it was read from),
    recompute it from the store and compare (see the module docstring). With a ``trusted`` key
    (:class:`recipe_audit.cards.signing.TrustedKey`; ``card`` then required), the card must also
    be signed by it over its files and over the reruns the store gives now
    (:func:`signature_check`): else a finding whose kind says which check failed. ``fresh``: the
    card's cells recomputed from this store just now (:func:`recompute`), when the caller has them."""
    findings = self_check(doc, card)
    if fresh is None:
        try:
            fresh = recompute(doc, tracking_uri)
        except CardError as exc:
            return Verification(len(doc["cells"]), doc["digest"],
                                tuple(findings) + (Finding(NOT_RECOMPUTABLE, "", str(exc).rstrip(".")),))
    if trusted is not None and card is not None:
        sig = signature_check(doc, card, fresh, trusted)
        if not sig.ok:
            findings.insert(0, Finding(sig.kind, "", f"the card {sig.message}"))
    for e in doc["cells"]:
        new = fresh.get(cell_key(e))
        if new is None:
            findings.append(Finding(RERUN_REMOVED, cell_name(e),
                                    f"no rerun of {cell_name(e)} is in the store any more"))
            continue
        findings.extend(compare_cell(e, new))
    unique = tuple(dict.fromkeys(findings))  # a cell's reruns differ alike at every τ
    return Verification(len(doc["cells"]), doc["digest"], unique)
