"""Card runs in MLflow, next to the reruns they were computed from: a run of kind ``card`` with the
files it is given as artifacts, its tags and metrics and its description, and pass/fail tags on
the reruns. This module writes what it is given, as it is: the card's files, names, tags and
description text are made from the card in :mod:`recipe_audit.release.card_runs` (and
:mod:`recipe_audit.cards`), which calls it."""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recipe_audit import keys

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


def card_experiment(tracking_uri: str, experiment: str) -> tuple[Any, str] | None:
    """An ``MlflowClient`` of ``tracking_uri`` and the id of ``experiment``, where card runs are
    logged; None when there is no such experiment."""
    from recipe_audit.store.tracking import client_for

    client = client_for(tracking_uri)  # a server's: waits out a restart, writes a retry cannot double
    exp = client.get_experiment_by_name(experiment)
    return None if exp is None else (client, exp.experiment_id)


def card_runs_with_key(client, experiment_id: str, key: str) -> list[tuple[str, dict[str, str]]]:
    """The finished card runs tagged with card key ``key``, newest first (at most 20): each run's id
    and tags; none when the store cannot search."""
    flt = (f"tags.`{TAG_CARD_KEY}` = '{key}' and attributes.status = 'FINISHED' and "
           f"tags.`{keys.TAG_KIND}` = '{keys.KIND_CARD}'")
    try:
        runs = client.search_runs([experiment_id], flt, max_results=20, order_by=["attributes.start_time DESC"])
    except Exception:  # noqa: BLE001 - a store that cannot search: log a new run
        return []
    return [(run.info.run_id, dict(run.data.tags)) for run in runs]


def log_card_run(client, experiment_id: str, *, run_name: str, tags: dict[str, str], more_tags: dict[str, str],
                 metrics: list[tuple[str, float]], files: dict[str, bytes], digest: str,
                 signed_by: str | None = None) -> LoggedCard:
    """One card run (kind ``card``) in ``experiment_id``, created with ``tags``, then given
    ``metrics`` and ``more_tags`` (its description among them) in one batch and ``files`` as its
    artifacts, and finished (FAILED, and the error raised, when a write fails). ``digest``: its
    ``card.json``'s; ``signed_by``: the key its ``card.sig`` names."""
    from mlflow.entities import Metric, RunTag

    run = client.create_run(experiment_id, run_name=run_name, tags=tags)
    rid = run.info.run_id
    try:
        now = int(time.time() * 1000)
        client.log_batch(rid, metrics=[Metric(name, value, now, 0) for name, value in metrics],
                         tags=[RunTag(k, v) for k, v in more_tags.items()])
        with tempfile.TemporaryDirectory() as tmp:
            for name, data in files.items():
                (Path(tmp) / name).write_bytes(data)
            client.log_artifacts(rid, tmp)
        client.set_terminated(rid, "FINISHED")
    except Exception:
        client.set_terminated(rid, "FAILED")
        raise
    return LoggedCard(rid, digest, signed_by=signed_by)


def tag_reruns(client, wanted: dict[str, dict[str, str]], experiment_id: str | None = None) -> None:
    """Tag each rerun of ``wanted`` (run id -> ``recipe_audit.fails.<metric>.tau_<τ>`` ->
    ``true``/``false``), so a search such as ``tags.`recipe_audit.fails.accuracy/calibration.tau_0.8`
    = 'true'`` lists the failures. A rerun already recorded as failing a bar (by its sweep as it
    ended, or by an earlier card) keeps that record: the release gate reads it as evidence, and a
    later card never clears it. Best effort: a rerun that cannot be tagged (deleted since) is skipped."""
    from mlflow.entities import RunTag, ViewType

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
