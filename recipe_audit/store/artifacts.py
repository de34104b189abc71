"""Files in an MLflow artifact store, and the few run lookups that are not a read of reruns.

Everything here is best effort where it says so and otherwise raises :class:`ArtifactError`
with one sentence; callers put it in their own words (a records file, a card, a model).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from recipe_audit.errors import first_line

__all__ = ["MLFLOW_SCHEMES", "ArtifactError", "download", "experiment_id", "is_artifact_uri", "keys_of_runs",
           "list_files", "runs_with_artifact"]

# URI schemes that name an MLflow artifact (not a local path)
MLFLOW_SCHEMES = ("runs:/", "models:/", "mlflow-artifacts:/", "dbfs:/")


class ArtifactError(ValueError):
    """An artifact that cannot be read (one sentence)."""


def is_artifact_uri(text: str) -> bool:
    """True for ``runs:/…``, ``models:/…``, ``mlflow-artifacts:/…`` and ``dbfs:/…``."""
    return str(text).startswith(MLFLOW_SCHEMES)



@contextlib.contextmanager
def _no_progress_bar() -> Iterator[None]:
    """MLflow's download progress bar off for the call (it would write to the user's stderr)."""
    old = os.environ.get("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR")
    os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", None)
        else:
            os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = old


def download(uri: str, dst: str | Path, tracking_uri: str | None = None) -> Path:
    """Download the artifact (file or directory) ``uri`` into ``dst``; its local path."""
    import mlflow.artifacts

    with _no_progress_bar():
        try:
            return Path(mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=str(dst),
                                                            tracking_uri=tracking_uri))
        except Exception as exc:  # MlflowException, OSError, ...: one sentence for the user
            raise ArtifactError(f"Cannot download the MLflow artifact {uri}: {first_line(exc, 300)}") from None


def list_files(uri: str, tracking_uri: str | None = None) -> list[str] | None:
    """The names of the files (not folders) directly under the artifact folder ``uri``; None
    when the store cannot list it (best effort)."""
    import mlflow.artifacts

    try:  # runs:/<run id> lists only with the trailing slash
        return [Path(f.path).name for f in mlflow.artifacts.list_artifacts(artifact_uri=uri.rstrip("/") + "/",
                                                                           tracking_uri=tracking_uri)
                if not f.is_dir]
    except Exception:  # noqa: BLE001 - best effort: a store that cannot list shows no files
        return None


def runs_with_artifact(experiment: str, artifact_file: str, tracking_uri: str | None = None) -> list[str]:
    """``runs:/<run id>/<artifact_file>`` of every run of ``experiment`` that logged that file
    (a run whose artifacts cannot be listed counts as not having it)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        raise ArtifactError(f"There is no MLflow experiment named '{experiment}'.")
    parent = str(Path(artifact_file).parent).replace("\\", "/")
    parent = "" if parent == "." else parent
    leaf = Path(artifact_file).name
    uris = []
    for run in client.search_runs([exp.experiment_id], max_results=50000):
        try:
            listing = client.list_artifacts(run.info.run_id, parent or None)
        except Exception:  # noqa: BLE001 - an unreachable artifact store for one run: not logged
            continue
        if any(Path(f.path).name == leaf and not f.is_dir for f in listing):
            uris.append(f"runs:/{run.info.run_id}/{artifact_file}")
    return uris


def experiment_id(tracking_uri: str | None, name: str) -> str | None:
    """The id of the experiment ``name``; None when it does not exist or the store will not say."""
    from mlflow.tracking import MlflowClient

    try:
        exp = MlflowClient(tracking_uri=tracking_uri).get_experiment_by_name(name)
    except Exception:  # noqa: BLE001 - used for links and messages only
        return None
    return exp.experiment_id if exp is not None else None


def keys_of_runs(tracking_uri: str | None, run_ids: Sequence[str], kind: str, limit: int = 20) -> list[str]:
    """The ``kind`` keys (``params``, ``metrics`` or ``tags``; MLflow's own ``mlflow.*`` tags left
    out) that the first ``limit`` of ``run_ids`` have, in first-seen order: for a message that
    lists what exists."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    found: dict[str, None] = {}
    for rid in list(run_ids)[:limit]:
        found.update(dict.fromkeys(sorted(getattr(client.get_run(rid).data, kind))))
    if kind == "tags":
        found = {k: None for k in found if not k.startswith("mlflow.")}
    return list(found)
