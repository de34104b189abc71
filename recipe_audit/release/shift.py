"""Cards of one recipe on several audit sets side by side, computed from the tracking store."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from recipe_audit import keys
from recipe_audit.cards.document import RecipeCard
from recipe_audit.cards.model import CardError, CardOptions
from recipe_audit.cards.shift import shift_section
from recipe_audit.release.compute import CardRequest, compute_card


def scored_audit_sets(req: CardRequest) -> list[str]:
    """The audit sets the request's reruns were scored on (their ``recipe_audit.audit_sets``
    tags), the calibration audit first, then in the order the reruns list them."""
    from recipe_audit.store.read import QueryError, read_runs

    scored_on = "tags." + keys.TAG_AUDIT_SETS
    sweep = "tags." + keys.TAG_SWEEP_ID
    try:
        frame = read_runs(req.tracking_uri, req.experiment, [keys.METRIC_TRAIN_SECONDS], seed_key=req.seed_key,
                          extra_keys=[scored_on, sweep], require_metrics=False)
    except QueryError as exc:
        raise CardError(str(exc)) from None
    if req.recipe_id is not None:
        frame = frame[frame["recipe_id"] == req.recipe_id]
    if req.sweep_id is not None:
        frame = frame[frame[sweep] == req.sweep_id]
    found: dict[str, None] = {}
    for tag in frame[scored_on].tolist():
        if isinstance(tag, str):
            found.update(dict.fromkeys(a for a in tag.split(",") if a))
    if not found:
        raise CardError(f"No rerun in experiment '{req.experiment}' says which audit sets it was scored on "
                        f"(tag {keys.TAG_AUDIT_SETS}); name them with --audit.")
    ordered = sorted(found, key=lambda a: (a != keys.DEFAULT_AUDIT, keys.TASK_SHIFT_SEP in a))
    return ordered


def compute_shift_card(req: CardRequest, opts: CardOptions, audits: Sequence[str], **kwargs: Any) -> RecipeCard:
    """One card holding the cells of every audit set in ``audits`` (the first is the
    calibration audit the others are compared with) and the ``shift`` section. Extra keyword
    arguments (split audit, responsiveness) apply to the first audit set."""
    audits = list(dict.fromkeys(audits))
    if not audits:
        raise CardError("Name at least one audit set.")
    bad = [a for a in audits if not a or "," in a]
    if bad:
        raise CardError(f"Audit set names must be non-empty and contain no comma, not {bad[0]!r}.")
    cards = [compute_card(replace(req, metric=keys.accuracy_key(a)), opts, **(kwargs if i == 0 else {}))
             for i, a in enumerate(audits)]
    cells = tuple(e for c in cards for e in c.cells)
    return cards[0].updated(source={**cards[0].source, "audits": audits}, cells=cells,
                            shift=shift_section(cells, audits)).sealed()
