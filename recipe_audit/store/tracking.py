"""Opening the tracking store: the URI resolved and checked, the experiment found or created, one
``MlflowClient`` per store and process.

What is written there lives beside this module: the sweep's parent run (``sweeps.py``), the
reruns' runs (``rerun_runs.py``), the built-in trainer's rerun logger (``rerun_log.py``), a local
SQLite store's settings (``sqlite.py``); the names they share are ``recipe_audit.keys``. Every
run is created and terminated explicitly through an ``MlflowClient``; nothing relies on a global
active run surviving between multirun jobs.
"""

from __future__ import annotations

import logging
import os
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recipe_audit.errors import first_line
from recipe_audit.store import sqlite
from recipe_audit.store.errors import StoreGone as StoreGone  # the door's errors, raised through it
from recipe_audit.store.errors import TrackingError

DEFAULT_STORE_DIR = "mlruns"
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
MAX_PARAMS_PER_CALL = 100  # params (and tags) per log_batch call
MAX_METRICS_PER_CALL = 1000


def default_tracking_uri(cwd: Path | None = None) -> str:
    """The project's default store: SQLite under ``./mlruns`` (artifacts beside it)."""
    base = (cwd or Path.cwd()) / DEFAULT_STORE_DIR
    return f"sqlite:///{base.resolve() / 'mlflow.db'}"


def resolve_tracking_uri(uri: str | None) -> str:
    """``uri`` if given, else ``$MLFLOW_TRACKING_URI``, else the default SQLite store; a server's
    user and password moved to ``$MLFLOW_TRACKING_USERNAME`` / ``_PASSWORD``
    (:func:`recipe_audit.store.uris.credentials_to_env`), so the URI returned holds none."""
    from recipe_audit.store.uris import credentials_to_env

    return credentials_to_env(uri or os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri())


def _default_artifact_location(uri: str) -> str | None:
    """Artifacts of a local SQLite store live in ``<store dir>/artifacts`` (None: server decides)."""
    if uri.startswith("sqlite:///"):
        db = Path(uri[len("sqlite:///"):])
        return (db.parent / "artifacts").resolve().as_uri()
    return None


def check_reachable(uri: str, timeout_s: float = 5.0, wait_s: float = 0.0) -> None:
    """Fail fast, with one sentence, when an ``http(s)://`` tracking server does not answer
    (MLflow's own client would retry for minutes) or a SQLite store cannot be written. ``wait_s``:
    a server that does not answer is asked again every 2 s for that long first (a job of a sweep
    in progress waits out a restart of its server), saying so."""
    if wait_s > 0 and uri.startswith(("http://", "https://")):
        from recipe_audit.store.uris import mask_credentials

        deadline, said = time.monotonic() + wait_s, False
        while True:
            try:
                check_reachable(uri, timeout_s)
                if said:
                    logging.getLogger("recipe_audit").warning("recipe_audit: the tracking server %s answers again",
                                                              mask_credentials(uri))
                return
            except TrackingError as exc:
                if time.monotonic() >= deadline:
                    raise
                if not said:
                    said = True
                    logging.getLogger("recipe_audit").warning("recipe_audit: %s Waiting for it, up to %.0f s",
                                                              exc, wait_s)
                time.sleep(2.0)
    if uri.startswith(("http://", "https://")):
        from recipe_audit.store.uris import mask_in_text, without_credentials

        health = without_credentials(uri).rstrip("/") + "/health"  # urllib takes no user info in a URL
        uri = mask_in_text(uri)  # named in the sentences below
        try:
            with urllib.request.urlopen(health, timeout=timeout_s) as resp:
                resp.read(64)
        except urllib.error.HTTPError as exc:
            if exc.code >= 500:
                raise TrackingError(f"The MLflow tracking server at {uri} answered HTTP {exc.code}.") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise TrackingError(f"The MLflow tracking server at {uri} is not reachable ({reason}).") from None
    elif uri.startswith("sqlite:///"):
        db = Path(uri[len("sqlite:///"):])
        try:
            sqlite.make_store_dir(db.parent)  # 0700 when recipe_audit makes it (unless shared)
        except OSError as exc:
            raise TrackingError(f"Cannot create the tracking store directory {db.parent} ({exc.strerror}).") from None
        if not os.access(db.parent, os.W_OK) or (db.exists() and not os.access(db, os.W_OK)):
            raise TrackingError(f"The tracking store {db} is not writable.")


@dataclass(frozen=True)
class Store:
    uri: str
    experiment_id: str
    experiment_name: str

    @property
    def client(self):
        """The process's ``MlflowClient`` for this store (one per URI, made once per sweep)."""
        return client_for(self.uri)


_STORES: dict[tuple[str, str], Store] = {}
_CLIENTS: dict[str, Any] = {}


def client_for(uri: str):
    """The process's ``MlflowClient`` for the store at ``uri`` (made once). For a server
    (``http(s)://``), one whose calls wait out a restart and whose writes a retry cannot double
    (:class:`recipe_audit.store.retrying.RetryingClient`)."""
    from mlflow.tracking import MlflowClient

    if not uri:  # MLflow's own default, whatever it is at the time: not kept
        return MlflowClient()
    client = _CLIENTS.get(uri)
    if client is None:
        client = MlflowClient(tracking_uri=uri)
        if str(uri).startswith(("http://", "https://")):
            from recipe_audit.store.retrying import RetryingClient
            from recipe_audit.store.uris import mask_credentials

            client = RetryingClient(client, mask_credentials(uri))
        _CLIENTS[uri] = client
    return client


#: MLflow's HTTP retries for a server, unless set: a lost server is told within seconds (connection
#: refused: 1 + 2 + 4 s of back-off) or about a minute (a server that hangs: 4 tries of 15 s),
#: where MLflow's own defaults (7 retries, back-off factor 2, 120 s a try) spend minutes per request.
HTTP_RETRIES = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "3", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                "MLFLOW_HTTP_REQUEST_TIMEOUT": "15"}


def bound_http_retries() -> None:
    """Set :data:`HTTP_RETRIES` in this process's environment where unset (its jobs inherit them)."""
    for k, v in HTTP_RETRIES.items():
        os.environ.setdefault(k, v)


def open_store(uri: str | None, experiment_name: str, wait_for_server: bool = False) -> Store:
    """Resolve the URI, check it, and get or create the experiment (cached per process). For a
    server, MLflow's HTTP retries are bounded first (:func:`bound_http_retries`); a server that
    does not answer is an error at once, or, with ``wait_for_server`` (a job of a sweep in
    progress), once it has not answered for :func:`recipe_audit.store.retrying.wait_budget` seconds."""
    uri = resolve_tracking_uri(uri)
    if uri.startswith(("http://", "https://")):
        bound_http_retries()
    quiet_store_errors()
    key = (uri, experiment_name)
    if key in _STORES:
        return _STORES[key]
    # a loaded server may take seconds to answer /health (eight sweeps starting at once): as
    # long as MLflow's own requests may take
    try:
        health_s = float(os.environ.get("MLFLOW_HTTP_REQUEST_TIMEOUT") or 15)
    except ValueError:
        health_s = 15.0
    if wait_for_server:
        from recipe_audit.store.retrying import wait_budget

        check_reachable(uri, timeout_s=health_s, wait_s=wait_budget())
    else:
        check_reachable(uri, timeout_s=health_s)
    from mlflow.exceptions import MlflowException

    try:
        # several sweeps starting together on a new SQLite store would race to create MLflow's
        # tables and the experiment: the first does it, under a lock, the others then find both
        for attempt in range(_CREATE_TRIES):
            try:
                with sqlite.store_lock(uri):
                    exp = _first_look(uri, experiment_name)
                break
            except Exception as exc:  # noqa: BLE001 - another process creating the same store
                # a process that does not take the lock (a plain MlflowClient, `mlflow ui`) creating
                # MLflow's tables at the same time: "table ... already exists", "Online migration
                # expected to match one row", an out-of-date schema; wait until it is done
                _CLIENTS.pop(uri, None)
                if not uri.startswith("sqlite:///") or attempt == _CREATE_TRIES - 1 or isinstance(exc, TrackingError):
                    raise
                time.sleep(0.5 * (attempt + 1))
        if exp.lifecycle_stage != "active":
            raise TrackingError(f"Experiment '{experiment_name}' in {uri} is deleted; restore it or pick another name.")
        else:
            exp_id = exp.experiment_id
    except MlflowException as exc:
        raise TrackingError(f"Cannot use the tracking store {uri}: {first_line(exc, 500)}") from None
    except Exception as exc:  # sqlalchemy / OS errors from the store itself
        if isinstance(exc, TrackingError):
            raise
        raise TrackingError(f"Cannot use the tracking store {uri}: {first_line(exc, 500)}") from None
    store = Store(uri, exp_id, experiment_name)
    _STORES[key] = store
    sqlite.remember_file(uri)
    return store


_CREATE_TRIES = 8  # first looks at a SQLite store another process is creating: 0.5 + 1 + ... + 3.5 s apart


def _first_look(uri: str, experiment_name: str):
    """The experiment, created when missing (MLflow's tables created or migrated on the way)."""
    if sqlite.is_sqlite(uri):
        sqlite.create_store(uri)
    from mlflow.exceptions import MlflowException

    client = client_for(uri)
    exp = client.get_experiment_by_name(experiment_name)
    if exp is None:
        location = _default_artifact_location(uri)
        if location is not None:  # the artifacts' folder, its owner's alone (unless shared)
            from urllib.parse import unquote, urlsplit

            sqlite.make_store_dir(Path(unquote(urlsplit(location).path)))
        try:
            # MLflow 3's UI opens an experiment of this kind on its runs table ("Model
            # training"), not on the GenAI overview (traces, an assistant)
            client.create_experiment(experiment_name, artifact_location=location,
                                     tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND})
        except MlflowException as exc:
            # another sweep created it meanwhile, or a retried request did: it exists, as wanted
            if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
        exp = client.get_experiment_by_name(experiment_name)
    sqlite.write_ahead_log(uri)
    if sqlite.is_sqlite(uri):
        sqlite.commit_without_sync(uri)
    return exp


class _OneLine(logging.Filter):
    """MLflow's SQL store logs each database error with its whole traceback before raising it
    (14 tracebacks for a full disk in one sweep): the record keeps its first line; what is raised
    is said once, by recipe_audit, in a sentence."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.exc_info, record.exc_text = None, None
        return True


def quiet_store_errors() -> None:
    """Install :class:`_OneLine` on MLflow's SQL store logger (once a process)."""
    logger = logging.getLogger("mlflow.store.db.utils")
    if not any(isinstance(f, _OneLine) for f in logger.filters):
        logger.addFilter(_OneLine())


@contextmanager
def use_tracking_uri(uri: str):
    """MLflow's process-wide tracking URI is ``uri`` inside the block, and exactly what it was
    after it (its global and ``$MLFLOW_TRACKING_URI``), for the MLflow calls that read the global
    rather than a client's URI (fluent runs, model logging, resolving ``models:/`` sources)."""
    import mlflow
    from mlflow.tracking._tracking_service import utils as _tu

    old_global, old_env = getattr(_tu, "_tracking_uri", None), os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(uri)
    try:
        yield
    finally:
        mlflow.set_tracking_uri(old_global)  # None unsets the environment variable too
        if old_env is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = old_env
