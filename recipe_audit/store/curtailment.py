"""The curtailment record of a sweep in the store: written on the sweep's parent run by a
curtailing sweeper (a tag, or an artifact when it is long), read back when a card is computed."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from recipe_audit import keys

__all__ = ["RECORD_FILE", "curtailment_records", "publish"]

RECORD_FILE = "recipe_audit_curtailment.json"
_MAX_TAG = 7900  # MLflow refuses tag values above 8,000 characters


def publish(tracking_uri: str, parent_run_id: str, record_json: str, summary: str) -> None:
    """Put the record (JSON text) and its one-line summary on the sweep's parent run."""
    from recipe_audit.store.tracking import client_for

    client = client_for(tracking_uri)
    value = record_json
    if len(record_json) > _MAX_TAG:
        client.log_text(parent_run_id, record_json, RECORD_FILE)
        value = keys.CURTAILMENT_ARTIFACT_PREFIX + RECORD_FILE
    for k, v in ((keys.TAG_CURTAILMENT, value), (keys.TAG_CURTAIL_SUMMARY, summary)):
        client.set_tag(parent_run_id, k, v)


def curtailment_records(tracking_uri: str | None, tags: dict[str, str],
                        parent_run_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The curtailment record of each of ``parent_run_ids`` that has one, from ``tags`` (parent
    run id -> its curtailment tag, as :func:`recipe_audit.store.read.read_runs` read them with the
    runs: ``frame.attrs["curtailment"]``); a record kept as an artifact (a long one) is downloaded.
    A record that cannot be read or understood is left out (its cells are carded as usual)."""
    out: dict[str, dict[str, Any]] = {}
    for pid in sorted(set(parent_run_ids)):
        tag = tags.get(pid)
        if not tag:
            continue
        try:
            if tag.startswith(keys.CURTAILMENT_ARTIFACT_PREFIX):
                tag = _download_record(tracking_uri, pid, tag[len(keys.CURTAILMENT_ARTIFACT_PREFIX):])
            out[pid] = json.loads(tag)
        except (OSError, ValueError):
            continue
    return out


def _download_record(tracking_uri: str | None, run_id: str, artifact_path: str) -> str:
    import mlflow.artifacts
    from mlflow.exceptions import MlflowException

    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=artifact_path, dst_path=tmp,
                                                       tracking_uri=tracking_uri)
        except MlflowException as exc:
            raise OSError(str(exc)) from None
        return Path(path).read_text(encoding="utf-8")
