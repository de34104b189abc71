"""Cards at the end of a multirun (called by the Hydra callback): from the tracking store."""

from __future__ import annotations

from pathlib import Path

from recipe_audit.cards.document import RecipeCard
from recipe_audit.cards.files import render_files
from recipe_audit.cards.model import CardOptions
from recipe_audit.cards.summary import print_card_summary
from recipe_audit.release.compute import CardRequest, compute_card
from recipe_audit.store import artifacts
from recipe_audit.store.cards import log_card_runs, ui_experiment_link


def cards_for_sweep(sweep, metric: str, opts: CardOptions, sweep_dir: Path | None = None,
                    stem: str = "card") -> RecipeCard:
    """Compute, write and log the card of one sweep on ``metric``; print the verdict table.
    Raises :class:`CardError` (one sentence) when the sweep's reruns cannot make a card."""
    req = CardRequest(experiment=sweep.experiment_name, tracking_uri=sweep.tracking_uri, metric=metric,
                      sweep_id=sweep.sweep_id, planned_seeds=tuple(sweep.planned_seeds))
    doc = compute_card(req, opts)
    files = render_files(doc, (sweep_dir or Path(".")) / stem, stem="card") if sweep_dir else None
    run_ids = log_card_runs(doc.to_json(), sweep.tracking_uri, sweep.experiment_name)
    print_card_summary(doc, files)
    print(f"Card runs in MLflow: {', '.join(run_ids)}")
    exp_id = artifacts.experiment_id(sweep.tracking_uri, sweep.experiment_name)
    if exp_id is not None:  # the runs table, in the model-training view
        print(f"In the MLflow UI: {ui_experiment_link(sweep.tracking_uri, exp_id)}")
    return doc


