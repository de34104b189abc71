"""Cards at the end of a multirun (called by the Hydra callback): from the tracking store; where
people land afterwards (the experiment's description, the store's URI)."""

from __future__ import annotations

import datetime as _dt
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from recipe_audit.cards import note
from recipe_audit.cards.document import RecipeCard
from recipe_audit.cards.model import CardOptions
from recipe_audit.cards.summary import print_card_summary
from recipe_audit.errors import first_line
from recipe_audit.release.card_runs import CardOutput
from recipe_audit.release.compute import CardRequest, compute_card
from recipe_audit.store import artifacts
from recipe_audit.store.cards import ui_experiment_link
from recipe_audit.store.experiment_note import read_experiment_note, write_experiment_note
from recipe_audit.store.uris import store_lines


def cards_for_sweep(sweep, metric: str, opts: CardOptions, sweep_dir: Path | None = None,
                    stem: str = "card", signer=None) -> RecipeCard:
    """Compute, write and log the card of one sweep on ``metric``; print the verdict table.
    Raises :class:`CardError` (one sentence) when the sweep's reruns cannot make a card. Each
    file is rendered once (:class:`CardOutput`); the sweep's callback has tagged its reruns
    pass/fail at the sweep's bars as each job ended, so the card runs do not tag them again.
    ``signer`` (a :class:`recipe_audit.cards.signing.SigningKey`): each card is signed, its
    bundle beside it (``card.sig`` in the folder and in every card run)."""
    req = CardRequest(experiment=sweep.experiment_name, tracking_uri=sweep.tracking_uri, metric=metric,
                      sweep_id=sweep.sweep_id, planned_seeds=tuple(sweep.planned_seeds))
    doc = compute_card(req, opts)
    out = CardOutput(doc, signer)
    files = out.write(sweep_dir / stem) if sweep_dir else None
    logged = out.log(sweep.tracking_uri, sweep.experiment_name, tag_reruns=False)
    print_card_summary(doc, files)
    print(f"Card runs in MLflow: {', '.join(c.run_id for c in logged)}")
    if signer is not None:
        print(f"Signed with key sha256:{signer.fingerprint[:16]} ({signer.name}): card.sig beside each card.")
    return doc


def publish_cards(tracking_uri: str, experiment: str, docs: list[RecipeCard]) -> None:
    """Where people land: the verdicts of ``docs`` first in the experiment's description (the
    top of every view of it in MLflow's UI), then print the link to its runs table. A store that
    refuses the description gets a warning on stderr: the cards are logged already."""
    entries = [e for d in docs for e in d.to_json()["cells"]]
    try:
        publish_experiment_note(tracking_uri, experiment, entries)
    except Exception as exc:  # noqa: BLE001 - the card runs hold the cards; the description is a pointer
        print(f"recipe_audit: warning: the experiment's description was not updated ({first_line(exc, 200)})",
              file=sys.stderr)
    exp_id = artifacts.experiment_id(tracking_uri, experiment)
    if exp_id is not None:  # the runs table, in the model-training view
        print(f"In the MLflow UI: {ui_experiment_link(tracking_uri, exp_id)}")


def print_store(tracking_uri: str) -> None:
    """The end of a command that wrote to a store: which store, and the line that points
    ``mlflow ui``, ``MlflowClient()`` and the docs' snippets at it."""
    for line in store_lines(tracking_uri):
        print(line)




def publish_experiment_note(tracking_uri: str, experiment: str, entries: Iterable[Mapping[str, Any]],
                            when: _dt.datetime | None = None) -> str | None:
    """Put the verdicts of ``entries`` (a card's JSON ``cells``) first in the block on
    ``experiment``'s description, with the latest cards logged before them (one per recipe,
    metric and τ): the text made by :func:`recipe_audit.cards.note.updated_note`, written by the
    store as it is. Returns the description written, or None when the experiment is not there or
    its own text fills the description."""
    got = read_experiment_note(tracking_uri, experiment)
    if got is None:
        return None
    stamp = (when or _dt.datetime.now(_dt.timezone.utc)).strftime("%Y-%m-%d %H:%M UTC")
    made = note.updated_note(got.text, got.rows, entries, stamp, got.runs_link)
    if made is None:
        return None
    write_experiment_note(got, *made)
    return made[0]
