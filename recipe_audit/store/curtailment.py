"""The curtailment record of a sweep in the store: written on the sweep's parent run by a
curtailing sweeper (a tag, or an artifact when it is long), read back when a card is computed."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from recipe_audit import keys

__all__ = ["RECORD_FILE", "publish", "read_curtailment_records"]

RECORD_FILE = "recipe_audit_curtailment.json"
_MAX_TAG = 7900  # MLflow refuses tag values above 8,000 characters


def publish(tracking_uri: str, parent_run_id: str, record_json: str, summary: str) -> None:
    """Put the record (JSON text) and its one-line summary on the sweep's parent run."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    value = record_json
    if len(record_json) > _MAX_TAG:
        client.log_text(parent_run_id, record_json, RECORD_FILE)
        value = keys.CURTAILMENT_ARTIFACT_PREFIX + RECORD_FILE
    for k, v in ((keys.TAG_CURTAILMENT, value), (keys.TAG_CURTAIL_SUMMARY, summary)):
        client.set_tag(parent_run_id, k, v)


def read_curtailment_records(tracking_uri: str | None, parent_run_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The curtailment record of each sweep parent run that has one; a run that cannot be read,
    or a record that cannot be understood, is left out (its cells are carded as usual)."""
    if not parent_run_ids:
        return {}
    import mlflow.artifacts
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    out: dict[str, dict[str, Any]] = {}
    for pid in sorted(set(parent_run_ids)):
        try:
            tag = client.get_run(pid).data.tags.get(keys.TAG_CURTAILMENT)
            if not tag:
                continue
            if tag.startswith(keys.CURTAILMENT_ARTIFACT_PREFIX):
                with tempfile.TemporaryDirectory() as tmp:
                    path = mlflow.artifacts.download_artifacts(
                        run_id=pid, artifact_path=tag[len(keys.CURTAILMENT_ARTIFACT_PREFIX):], dst_path=tmp,
                        tracking_uri=tracking_uri)
                    tag = Path(path).read_text(encoding="utf-8")
            out[pid] = json.loads(tag)
        except (MlflowException, OSError, ValueError):
            continue
    return out
