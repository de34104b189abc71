"""The latest cards on the experiment's own description (``mlflow.note.content``), which MLflow's
UI shows at the top of every view of an experiment: read and written here, as plain text and rows
(:mod:`recipe_audit.cards.note` makes the text; :func:`recipe_audit.release.sweep.publish_experiment_note`
joins the two)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from recipe_audit import keys

TAG_NOTE = "mlflow.note.content"
TAG_NOTE_ROWS = "mlflow." + keys.PREFIX + "latest_cards"
LEGACY_TAG_NOTE_ROWS = keys.PREFIX + "latest_cards"


@dataclass(frozen=True)
class ExperimentNote:
    """What an experiment's description holds now: its text (None: none yet), the rows of the
    latest cards recorded beside it, and the path of its runs table in MLflow's UI."""

    client: Any
    experiment_id: str
    text: str | None
    rows: list[dict[str, Any]]
    runs_link: str
    legacy: bool  # the rows are under the tag written before 2026-12-06


def read_experiment_note(tracking_uri: str, experiment: str) -> ExperimentNote | None:
    """The description of ``experiment`` and its recorded rows; None when there is no such
    experiment. Rows that do not read as the cards' rows (a hand-edited tag) are left out."""
    from recipe_audit.store.cards import ui_experiment_path
    from recipe_audit.store.tracking import client_for

    client = client_for(tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return None
    try:
        old = json.loads(exp.tags.get(TAG_NOTE_ROWS) or exp.tags.get(LEGACY_TAG_NOTE_ROWS) or "[]")
        old = [r for r in old if isinstance(r, dict) and "tau" in r and "verdict" in r]
    except ValueError:  # a hand-edited tag: start the list again
        old = []
    return ExperimentNote(client, exp.experiment_id, exp.tags.get(TAG_NOTE), old,
                          ui_experiment_path(exp.experiment_id), LEGACY_TAG_NOTE_ROWS in exp.tags)


def write_experiment_note(note: ExperimentNote, text: str, rows: list[dict[str, Any]]) -> None:
    """Write ``text`` as the experiment's description and ``rows`` beside it (the legacy tag removed)."""
    note.client.set_experiment_tag(note.experiment_id, TAG_NOTE, text)
    note.client.set_experiment_tag(note.experiment_id, TAG_NOTE_ROWS, json.dumps(rows, separators=(",", ":")))
    if note.legacy:
        note.client.delete_experiment_tag(note.experiment_id, LEGACY_TAG_NOTE_ROWS)
