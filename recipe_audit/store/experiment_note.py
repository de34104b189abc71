"""The latest cards on the experiment's own description (``mlflow.note.content``), which MLflow's
UI shows at the top of every view of an experiment (:mod:`recipe_audit.cards.note` writes the
block). Called wherever cards are logged: the end of a sweep, ``recipe-audit card --log-run``,
``attach``."""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Iterable, Mapping
from typing import Any

from recipe_audit import keys
from recipe_audit.cards import note

TAG_NOTE = "mlflow.note.content"
# on the experiment: the block's rows, as JSON, under a name MLflow's UI does not show among the
# experiment's tags (it hides "mlflow."-prefixed tags); rows written before 2026-12-06 were in
# LEGACY_TAG_NOTE_ROWS, which the experiments list showed: read once, then removed
TAG_NOTE_ROWS = "mlflow." + keys.PREFIX + "latest_cards"
LEGACY_TAG_NOTE_ROWS = keys.PREFIX + "latest_cards"


def publish_experiment_note(tracking_uri: str, experiment: str, entries: Iterable[Mapping[str, Any]],
                            when: _dt.datetime | None = None) -> str | None:
    """Put the verdicts of ``entries`` (a card's JSON ``cells``) first in the block on
    ``experiment``'s description, with the latest cards logged before them (one per recipe,
    metric and τ); returns the description written, or None when the experiment is not there."""
    from recipe_audit.store.cards import ui_experiment_path
    from recipe_audit.store.tracking import client_for

    client = client_for(tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return None
    stamp = (when or _dt.datetime.now(_dt.timezone.utc)).strftime("%Y-%m-%d %H:%M UTC")
    try:
        old = json.loads(exp.tags.get(TAG_NOTE_ROWS) or exp.tags.get(LEGACY_TAG_NOTE_ROWS) or "[]")
        old = [r for r in old if isinstance(r, dict) and "tau" in r and "verdict" in r]
    except ValueError:  # a hand-edited tag: start the list again
        old = []
    rows = note.merge_rows(note.note_rows(entries, stamp), old)
    while rows and len(json.dumps(rows, separators=(",", ":"))) > note.MAX_NOTE:  # long group names
        rows.pop()
    text = note.fit(exp.tags.get(TAG_NOTE), rows, ui_experiment_path(exp.experiment_id))
    if len(text) > note.MAX_NOTE:  # the person's own text alone fills the description: leave it
        return None
    client.set_experiment_tag(exp.experiment_id, TAG_NOTE, text)
    client.set_experiment_tag(exp.experiment_id, TAG_NOTE_ROWS, json.dumps(rows, separators=(",", ":")))
    if LEGACY_TAG_NOTE_ROWS in exp.tags:
        client.delete_experiment_tag(exp.experiment_id, LEGACY_TAG_NOTE_ROWS)
    return text
