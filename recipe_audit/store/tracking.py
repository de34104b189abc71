"""Writes reruns and sweeps to MLflow (the reading side is ``query.py``; the contract is ``keys.py``).

Every function here owns the runs it opens: runs are created and terminated explicitly through
an ``MlflowClient``; nothing relies on a global active run surviving between multirun jobs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import posixpath
import re
import socket
import time
import traceback
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from recipe_audit import keys
from recipe_audit.errors import error_line, first_line


class TrackingError(RuntimeError):
    """The tracking store cannot be used (one sentence)."""


class StoreGone(TrackingError):
    """The store a sweep was writing to is no longer the one it opened (deleted, replaced)."""


DEFAULT_STORE_DIR = "mlruns"
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
_MAX_PARAMS_PER_CALL = 100
_MAX_METRICS_PER_CALL = 1000


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


def check_reachable(uri: str, timeout_s: float = 5.0) -> None:
    """Fail fast, with one sentence, when an ``http(s)://`` tracking server does not answer
    (MLflow's own client would retry for minutes) or a SQLite store cannot be written."""
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
            db.parent.mkdir(parents=True, exist_ok=True)
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
        return _client(self.uri)


_STORES: dict[tuple[str, str], Store] = {}
_CLIENTS: dict[str, Any] = {}


def _client(uri: str):
    client = _CLIENTS.get(uri)
    if client is None:
        from mlflow.tracking import MlflowClient

        client = _CLIENTS[uri] = MlflowClient(tracking_uri=uri)
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


def open_store(uri: str | None, experiment_name: str) -> Store:
    """Resolve the URI, check it, and get or create the experiment (cached per process). For a
    server, MLflow's HTTP retries are bounded first (:func:`bound_http_retries`)."""
    uri = resolve_tracking_uri(uri)
    if uri.startswith(("http://", "https://")):
        bound_http_retries()
    quiet_store_errors()
    key = (uri, experiment_name)
    if key in _STORES:
        return _STORES[key]
    check_reachable(uri)
    from mlflow.exceptions import MlflowException

    try:
        # several sweeps starting together on a new SQLite store would race to create MLflow's
        # tables and the experiment: the first does it, under a lock, the others then find both
        for attempt in range(_CREATE_TRIES):
            try:
                with _store_lock(uri):
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
    if uri.startswith("sqlite:///") and uri not in _SQLITE_FILES:
        st = os.stat(uri[len("sqlite:///"):])
        _SQLITE_FILES[uri] = (st.st_dev, st.st_ino)
        # a process that wrote through the log folds it back as it exits, so the database file
        # alone is whole once no one writes (a copy of mlflow.db, an archive)
        import atexit

        atexit.register(checkpoint_store, uri)
    return store


_SQLITE_FILES: dict[str, tuple[int, int]] = {}
_CREATE_TRIES = 8  # first looks at a SQLite store another process is creating: 0.5 + 1 + ... + 3.5 s apart


def _new_sqlite_store(uri: str) -> None:
    """A SQLite store that does not exist yet is made whole beside its place and linked there at
    once (``os.link`` refuses when the name exists): a process that opens the store afterwards,
    a plain ``MlflowClient`` too, finds every table at the latest revision and migrates nothing.
    When another process created the file first (MLflow creates and migrates it unlocked), its
    migration is waited for before MLflow looks at the file here: two migrations of one file
    break each other ("Online migration expected to match one row", "table ... already exists")."""
    db = Path(uri[len("sqlite:///"):])
    if not db.exists():
        from mlflow.tracking import MlflowClient

        tmp = db.with_name(f".{db.name}.{os.getpid()}.new")
        tmp.unlink(missing_ok=True)
        try:
            MlflowClient(tracking_uri=f"sqlite:///{tmp}").search_experiments(max_results=1)  # every table, at head
            try:
                os.link(tmp, db)
            except FileExistsError:
                pass
        finally:
            tmp.unlink(missing_ok=True)
    _wait_for_migration(db)


def _wait_for_migration(db: Path, quiet_s: float = 10.0, limit_s: float = 120.0) -> None:
    """Return once ``db``'s MLflow tables are at the latest revision, or the file has not changed
    for ``quiet_s`` seconds (an old store that needs ``mlflow db upgrade``: MLflow then says so)."""
    import sqlite3

    if time.time() - db.stat().st_mtime > quiet_s:  # a store no one is writing: nothing to wait for
        return
    from mlflow.store.db.utils import _get_latest_schema_revision

    head = _get_latest_schema_revision()
    t0 = time.monotonic()
    while True:
        try:
            con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
            try:
                tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
                rev = (con.execute("SELECT version_num FROM alembic_version").fetchone() or [None])[0] \
                    if "alembic_version" in tables else None
            finally:
                con.close()
        except sqlite3.Error:
            rev, tables = None, set()
        if rev == head and not any(t.startswith("_alembic_tmp") for t in tables):
            return
        if time.time() - db.stat().st_mtime > quiet_s:
            return
        if time.monotonic() - t0 > limit_s:
            raise TrackingError(f"The tracking store {db} is being created by another process that has not "
                                f"finished in {limit_s:.0f} s; launch again once it has.")
        time.sleep(0.25)


def _first_look(uri: str, experiment_name: str):
    """The experiment, created when missing (MLflow's tables created or migrated on the way)."""
    if uri.startswith("sqlite:///"):
        _new_sqlite_store(uri)
    client = _client(uri)
    exp = client.get_experiment_by_name(experiment_name)
    if exp is None:
        # MLflow 3's UI opens an experiment of this kind on its runs table ("Model
        # training"), not on the GenAI overview (traces, an assistant)
        client.create_experiment(experiment_name, artifact_location=_default_artifact_location(uri),
                                 tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND})
        exp = client.get_experiment_by_name(experiment_name)
    _write_ahead_log(uri)
    if uri.startswith("sqlite:///"):
        _commit_without_sync(uri)
    return exp


def disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it wraps) says the store's disk is full (SQLite's "database or disk
    is full", ENOSPC)."""
    import errno

    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            return True
        if "disk is full" in str(exc) or "No space left on device" in str(exc):
            return True
        exc, seen = exc.__cause__ or exc.__context__ or getattr(exc, "orig", None), seen + 1
    return False


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


def check_store_file(uri: str) -> None:
    """Raise :class:`TrackingError` when the SQLite file this process opened was deleted or
    replaced since. SQLite goes on writing into a deleted file's inode without a word, so a sweep
    would record its reruns and its card into nothing and exit 0."""
    opened = _SQLITE_FILES.get(uri)
    if opened is None:
        return
    db = uri[len("sqlite:///"):]
    try:
        st = os.stat(db)
        same = (st.st_dev, st.st_ino) == opened
    except OSError:
        same = False
    if not same:
        raise StoreGone(f"The tracking store {db} was deleted or replaced while this sweep was writing to it; "
                            "what the sweep recorded since is lost.")


def check_sweep_parent(store: Store, sweep: SweepInfo) -> None:
    """Raise :class:`StoreGone` when the sweep's parent run is not in ``store``: a job process
    opening a store recreated since the sweep started would file its rerun under no sweep."""
    from mlflow.exceptions import MlflowException

    try:
        store.client.get_run(sweep.parent_run_id)
    except MlflowException:
        raise StoreGone(f"The sweep's parent run {sweep.parent_run_id} is not in the tracking store "
                        f"{store.uri}: the store was deleted or replaced since the sweep started.") from None


def _sqlite_pragma(uri: str, pragma: str) -> None:
    """Run one ``PRAGMA`` on a local SQLite store, best effort: a store that is busy or read-only
    works as it is (only slower, or with its log not yet folded in). Other stores: nothing."""
    if not uri.startswith("sqlite:///"):
        return
    import sqlite3

    try:
        con = sqlite3.connect(uri[len("sqlite:///"):], timeout=5)
        try:
            con.execute(f"PRAGMA {pragma}")
        finally:
            con.close()
    except sqlite3.Error:
        pass


def _write_ahead_log(uri: str) -> None:
    """Switch a local SQLite store to SQLite's write-ahead log (the mode is kept in the file; the
    pragma is a no-op on a store already in it).

    In its default rollback-journal mode SQLite syncs the disk several times a commit and a
    writer locks out readers; a rerun makes about a dozen commits (its run, its params, its
    metrics, its status), and parallel workers wait on each other's locks. With the log, a commit
    is one append and readers (``mlflow ui``, a card) do not block writers;
    ``bench/bench_store_writes.py`` times a rerun's store calls in each mode. The log needs the processes that share the file to
    share one machine's memory, as a SQLite store already does to be safe; a store shared across
    machines belongs on a server."""
    _sqlite_pragma(uri, "journal_mode=WAL")


_SYNC_NORMAL: set[str] = set()  # real paths of the SQLite stores this process commits to without a sync


def _commit_without_sync(uri: str) -> None:
    """Let this process's commits to a local SQLite store in write-ahead-log mode skip the disk
    sync (``PRAGMA synchronous=NORMAL``, the setting SQLite recommends with the log).

    With the log, a commit is an append to ``mlflow.db-wal``; SQLite's default (``FULL``) then
    waits for the disk to sync it, at every commit (a rerun makes several). ``NORMAL`` syncs only when
    the log is folded back. Nothing committed is lost when a process dies, SIGKILL included: the log is in the
    operating system's cache and the next reader replays it. What a power cut or a kernel crash can
    undo is the last commits before it, never the consistency of the file. The setting belongs to
    a connection, so it is set as MLflow's engine hands one out; only for the stores opened here
    and only while the file is in write-ahead-log mode (in rollback mode ``NORMAL`` could corrupt
    the file on a power cut)."""
    from sqlalchemy import event
    from sqlalchemy.pool import Pool

    try:
        path = os.path.realpath(uri[len("sqlite:///"):])
    except (TypeError, ValueError):
        return
    if not _SYNC_NORMAL:
        event.listen(Pool, "checkout", _sync_normal_on_checkout)
    _SYNC_NORMAL.add(path)


def _sync_normal_on_checkout(dbapi_connection, connection_record, _proxy) -> None:
    if connection_record.info.get("recipe_audit.sync_checked") or not _SYNC_NORMAL:
        return
    import sqlite3

    if not isinstance(dbapi_connection, sqlite3.Connection):
        connection_record.info["recipe_audit.sync_checked"] = True
        return
    try:
        files = {os.path.realpath(row[2]) for row in dbapi_connection.execute("PRAGMA database_list")
                 if row[1] == "main" and row[2]}
        if not files & _SYNC_NORMAL:
            connection_record.info["recipe_audit.sync_checked"] = True
            return
        if dbapi_connection.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal":
            dbapi_connection.execute("PRAGMA synchronous=NORMAL")
            connection_record.info["recipe_audit.sync_checked"] = True
    except sqlite3.Error:
        pass  # a busy or odd file: this connection keeps SQLite's default; asked again next time


def checkpoint_store(uri: str) -> None:
    """Fold a SQLite store's write-ahead log back into the database file, so that ``mlflow.db``
    alone holds the whole sweep (to copy, to archive) once the sweep is over. Best effort: a
    store busy with another sweep keeps its log, which SQLite folds in later by itself."""
    _sqlite_pragma(uri, "wal_checkpoint(TRUNCATE)")


@contextmanager
def _store_lock(uri: str):
    """An exclusive lock beside a local SQLite store (``mlflow.db.lock``) for the first look at it;
    other stores (servers, PostgreSQL) serialise on their own."""
    if not uri.startswith("sqlite:///"):
        yield
        return
    import fcntl

    db = Path(uri[len("sqlite:///"):])
    with open(db.parent / (db.name + ".lock"), "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


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


# ------------------------------------------------------------------------------------------
# Recipe identity and params
# ------------------------------------------------------------------------------------------


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": "1"}``; lists are kept whole, as JSON."""
    from recipe_audit.store.uris import mask_in_text

    out: dict[str, str] = {}
    for k, v in d.items():
        name = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out.update(flatten(v, name + "."))
        else:
            # recorded as params: a password in a URI (tracking.uri=http://user:pw@host) masked
            out[name] = mask_in_text(json.dumps(v) if isinstance(v, (list, tuple, dict)) else str(v))
    return out


RECIPE_SECTIONS = ("model", "task", "recipe")


def recipe_identity(config: Mapping[str, Any]) -> str:
    """A stable hash of what determines a training run except its seed: the model, task and
    recipe sections of the resolved config. Seed, audit, tracking and runtime settings (progress
    bars, thread count) are excluded, so every seed of one recipe has the same identity."""
    payload = {k: config[k] for k in RECIPE_SECTIONS}
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# raw (unresolved) values that depend on where and when a job runs, not on what it trains
_RUNTIME_INTERPOLATIONS = ("${hydra:", "${now:", "${oc.env:MLFLOW_")


def config_identity(resolved: Mapping[str, Any], exclude: Iterable[str] = (), *,
                    raw: Mapping[str, Any] | None = None, runtime_paths: Iterable[str] = ()) -> str:
    """A stable hash of a job's resolved config without the keys that do not make the recipe:
    the dotted paths in ``exclude`` (the seed, for one), every value whose unresolved form
    (``raw``) reads Hydra's runtime, the clock or MLflow's run variables, and every string value
    that lies under one of ``runtime_paths`` (the job's output directory, the sweep directory):
    a value that differs between two seeds of one recipe only because each job writes elsewhere.

    >>> a = {"seed": 1, "lr": 0.1, "out": "/sweep/0/ckpt"}
    >>> b = {"seed": 2, "lr": 0.1, "out": "/sweep/1/ckpt"}
    >>> config_identity(a, ["seed"], runtime_paths=["/sweep"]) == config_identity(b, ["seed"], runtime_paths=["/sweep"])
    True
    >>> config_identity(a, ["seed"]) == config_identity({**a, "lr": 0.2}, ["seed"])
    False
    """
    roots = tuple(str(p).rstrip("/") for p in runtime_paths if p)
    drop = {tuple(k.split(".")) for k in exclude}

    def keep(path: tuple[str, ...], value: Any, raw_value: Any) -> bool:
        if path in drop:
            return False
        if isinstance(raw_value, str) and any(m in raw_value for m in _RUNTIME_INTERPOLATIONS):
            return False
        return not (isinstance(value, str) and any(value == r or value.startswith(r + "/") for r in roots))

    def prune(node: Any, raw_node: Any, path: tuple[str, ...]) -> Any:
        if isinstance(node, Mapping):
            out = {}
            for k, v in node.items():
                rv = raw_node.get(k) if isinstance(raw_node, Mapping) else None
                if keep(path + (str(k),), v, rv):
                    out[k] = prune(v, rv, path + (str(k),))
            return out
        return node

    payload = prune(resolved, raw if raw is not None else {}, ())
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]




# ------------------------------------------------------------------------------------------
# Sweeps
# ------------------------------------------------------------------------------------------

SWEEP_ENV = "RECIPE_AUDIT_SWEEP"
SWEEP_FILE = "recipe_audit_sweep.json"


@dataclass(frozen=True)
class SweepInfo:
    sweep_id: str
    parent_run_id: str
    tracking_uri: str
    experiment_name: str
    planned_seeds: tuple[int, ...]

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "planned_seeds": list(self.planned_seeds)})

    @classmethod
    def from_json(cls, text: str) -> SweepInfo:
        d = json.loads(text)
        d["planned_seeds"] = tuple(d["planned_seeds"])
        return cls(**d)


def _write_private(path: Path, text: str) -> None:
    """``text`` to ``path``, readable by its owner only (0600, whatever the umask)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # a file that existed keeps its mode otherwise
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


def start_sweep(store: Store, planned_seeds: Iterable[int], sweep_dir: Path, overrides: list[str],
                tags: Mapping[str, str] | None = None) -> SweepInfo:
    """Open the parent run of a multirun (with ``tags`` besides its own) and publish it to the
    jobs (environment and a file in the sweep directory, so launchers in other processes or on
    other hosts find it)."""
    import uuid

    from recipe_audit.store.uris import mask_in_text

    seeds = tuple(sorted(set(int(s) for s in planned_seeds)))
    sweep_id = uuid.uuid4().hex[:12]
    client = store.client
    run = client.create_run(
        store.experiment_id, run_name=f"sweep-{sweep_id}",
        tags={keys.TAG_KIND: keys.KIND_SWEEP, keys.TAG_SWEEP_ID: sweep_id,
              keys.TAG_PLANNED_SEEDS: json.dumps(list(seeds), separators=(",", ":")),
              "recipe_audit.sweep_dir": str(sweep_dir.resolve()),
              "recipe_audit.overrides": mask_in_text(" ".join(overrides))[:5000], **(tags or {})},
    )
    client.log_param(run.info.run_id, "planned_seeds", _compact_seeds(seeds))
    info = SweepInfo(sweep_id, run.info.run_id, store.uri, store.experiment_name, seeds)
    os.environ[SWEEP_ENV] = info.to_json()
    sweep_dir.mkdir(parents=True, exist_ok=True)
    _write_private(sweep_dir / SWEEP_FILE, info.to_json())
    return info


def tag_sweep(info: SweepInfo, tags: Mapping[str, str]) -> None:
    """Set tags on the sweep's parent run (a resumed sweep's new decisions)."""
    from mlflow.entities import RunTag

    _client(info.tracking_uri).log_batch(info.parent_run_id, tags=[RunTag(k, v) for k, v in tags.items()])


def sweep_running(info: SweepInfo) -> bool:
    """Whether the sweep's parent run is still open."""
    return _client(info.tracking_uri).get_run(info.parent_run_id).info.status == "RUNNING"


def end_sweep(info: SweepInfo, status: str = "FINISHED", error: str | None = None) -> None:
    """Close the sweep's parent run; ``error`` (one sentence) is why a sweep stopped early."""
    if error:
        _client(info.tracking_uri).set_tag(info.parent_run_id, keys.TAG_ERROR, error[:5000])
    _client(info.tracking_uri).set_terminated(info.parent_run_id, status)
    if os.environ.get(SWEEP_ENV) == info.to_json():
        del os.environ[SWEEP_ENV]


def current_sweep(sweep_dir: Path | None) -> SweepInfo | None:
    """The sweep a multirun job belongs to, if the sweep callback opened one."""
    text = os.environ.get(SWEEP_ENV)
    if not text and sweep_dir is not None and (sweep_dir / SWEEP_FILE).is_file():
        text = (sweep_dir / SWEEP_FILE).read_text()
    return SweepInfo.from_json(text) if text else None


def _compact_seeds(seeds: tuple[int, ...]) -> str:
    if seeds and list(seeds) == list(range(seeds[0], seeds[-1] + 1)):
        return f"range({seeds[0]}, {seeds[-1] + 1})"
    return ",".join(map(str, seeds))[:6000]


# ------------------------------------------------------------------------------------------
# Reruns
# ------------------------------------------------------------------------------------------


class RerunLogger:
    """Owns the MLflow run of one rerun: open, log, close (FINISHED or FAILED)."""

    def __init__(self, store: Store, config: Mapping[str, Any], seed: int, *, recipe_id: str,
                 sweep: SweepInfo | None = None, audit_sets: Iterable[str] = ()):
        from mlflow.entities import Param, RunTag

        self.store = store
        self.client = store.client
        tags = {
            keys.TAG_KIND: keys.KIND_RERUN,
            keys.TAG_RECIPE_ID: recipe_id,
            keys.TAG_RECIPE_NAME: str(config["recipe"]["name"]),
            keys.TAG_SEED: str(seed),
            keys.TAG_MODEL: str(config["model"]["name"]),
            keys.TAG_TASK: str(config["task"]["name"]),
            keys.TAG_AUDIT_SETS: ",".join(audit_sets),
            keys.TAG_HOST: socket.gethostname(),
            keys.TAG_PID: str(os.getpid()),
        }
        if os.environ.get("SLURM_JOB_ID"):
            tags[keys.TAG_SLURM_JOB_ID] = os.environ["SLURM_JOB_ID"]
        if sweep is not None:
            tags[keys.TAG_SWEEP_ID] = sweep.sweep_id
            tags[keys.TAG_PARENT] = sweep.parent_run_id
        run = self.client.create_run(store.experiment_id, run_name=f"{config['recipe']['name']}-seed{seed}",
                                     tags=tags)
        self._attach(run.info.run_id, run.info.artifact_uri)
        params = [Param(k, v[:6000]) for k, v in sorted(flatten(config).items())]
        for i in range(0, len(params), _MAX_PARAMS_PER_CALL):
            self.client.log_batch(self.run_id, params=params[i:i + _MAX_PARAMS_PER_CALL])
        self._tag = RunTag

    @classmethod
    def attach(cls, store: Store, run_id: str, artifact_uri: str) -> RerunLogger:
        """A logger that writes into a rerun's run someone else opened (the Hydra callback does,
        for every job) and will close."""
        self = cls.__new__(cls)
        self.store = store
        self.client = store.client
        self._attach(run_id, artifact_uri)
        return self

    def _attach(self, run_id: str, artifact_uri: str) -> None:
        self.run_id = run_id
        self._artifact_uri = artifact_uri
        self._artifacts = None
        self._pending: list = []
        self._last_flush = time.monotonic()
        self._started = False  # a training step has been written

    def log_step(self, step: int, loss: float, flush_every_s: float = 15.0) -> None:
        """Buffer the training loss; flushed in batches (per-step calls would dominate a
        second-long rerun on a SQLite store), and at once after the first step, so a live run
        shows in the store (and the MLflow UI) that training has started."""
        from mlflow.entities import Metric

        value = loss if math.isfinite(loss) else float("nan")
        self._pending.append(Metric(keys.METRIC_TRAIN_LOSS, value, int(time.time() * 1000), step))
        if not self._started or time.monotonic() - self._last_flush > flush_every_s:
            self._started = True
            self.flush()

    def flush(self) -> None:
        while self._pending:
            batch, self._pending = self._pending[:_MAX_METRICS_PER_CALL], self._pending[_MAX_METRICS_PER_CALL:]
            self.client.log_batch(self.run_id, metrics=batch)
        self._last_flush = time.monotonic()

    def log_result(self, result) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(keys.METRIC_TRAIN_SECONDS, result.train_seconds, now, 0)]
        for name, score in result.audits.items():
            metrics += [Metric(keys.accuracy_key(name), score.accuracy, now, result.steps),
                        Metric(keys.majority_rate_key(name), score.majority_rate, now, result.steps),
                        Metric(keys.constant_fraction_key(name), score.pred_mode_share, now, result.steps)]
        self._pending.extend(metrics)
        self.flush()

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Log params (values as strings, cut to MLflow's 6,000 characters)."""
        from mlflow.entities import Param

        batch = [Param(k, str(v)[:6000]) for k, v in sorted(params.items())]
        for i in range(0, len(batch), _MAX_PARAMS_PER_CALL):
            self.client.log_batch(self.run_id, params=batch[i:i + _MAX_PARAMS_PER_CALL])

    def log_metrics(self, metrics: Mapping[str, float], step: int = 0) -> None:
        """Log the finite values of ``metrics`` at ``step``, in batches, at once."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self._pending.extend(Metric(k, float(v), now, step) for k, v in metrics.items() if math.isfinite(v))
        self.flush()

    def log_artifacts(self, local_dir: str | Path, artifact_path: str | None = None) -> None:
        """Upload the files under ``local_dir`` to the run's artifacts (under ``artifact_path``)."""
        self._artifact_repo().log_artifacts(str(local_dir), artifact_path)

    def log_table(self, data, artifact_file: str) -> None:
        """Log a DataFrame as an MLflow table artifact (``mlflow.load_table`` reads it back)."""
        self.client.log_table(self.run_id, data, artifact_file)

    def log_text(self, text: str, artifact_file: str) -> None:
        """Write ``text`` to the run's artifact ``artifact_file``, as ``MlflowClient.log_text``
        does, without its per-call look-up of the run (the artifact URI came with the run)
        and, for a local artifact store, without its temporary copy."""
        repo = self._artifact_repo()
        from mlflow.store.artifact.local_artifact_repo import LocalArtifactRepository

        if type(repo) is LocalArtifactRepository:
            path = Path(repo.artifact_dir).joinpath(*posixpath.normpath(artifact_file).split("/"))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        else:
            self.client.log_text(self.run_id, text, artifact_file)

    def _artifact_repo(self):
        if self._artifacts is None:
            from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository
            from mlflow.utils.uri import add_databricks_profile_info_to_artifact_uri

            uri = add_databricks_profile_info_to_artifact_uri(self._artifact_uri, self.store.uri)
            self._artifacts = get_artifact_repository(uri, tracking_uri=self.store.uri)
        return self._artifacts

    def log_model(self, model, tokenizer, labels=None) -> str:
        """Log the trained model with MLflow's transformers flavor as the run's model ``model``
        (an MLflow 3 LoggedModel whose source run is this rerun), so that
        ``mlflow.transformers.load_model(f"runs:/{run_id}/model")`` (a text-classification
        pipeline) and ``mlflow.pyfunc.load_model`` load it back. A LoRA (peft) model is merged
        into its base weights first: MLflow would otherwise save the adapter alone and reload the
        base from the hub, which a model built from a config is not on. Returns the model URI
        (``models:/<model id>``). ``labels`` (the task's label names, in id order) name the
        pipeline's outputs."""
        from importlib import metadata

        import mlflow

        if hasattr(model, "merge_and_unload"):  # peft: plain transformers weights, adapters merged
            model = model.merge_and_unload()
        model.eval()
        if labels:
            model.config.id2label = dict(enumerate(labels))
            model.config.label2id = {name: i for i, name in enumerate(labels)}
        # stated, not inferred: inference would reload the model in a subprocess (seconds)
        reqs = []
        for pkg in ("torch", "transformers", "tokenizers"):
            try:
                reqs.append(f"{pkg}=={metadata.version(pkg)}")
            except metadata.PackageNotFoundError:
                pass
        # resumes this rerun's run as the active run only for the call (MLflow 3 links the
        # LoggedModel to the active run); ``finish``/``fail`` set the final status after it
        with use_tracking_uri(self.store.uri), mlflow.start_run(run_id=self.run_id, log_system_metrics=False):
            info = mlflow.transformers.log_model(
                transformers_model={"model": model, "tokenizer": tokenizer},
                name="model", task="text-classification", pip_requirements=reqs,
                model_card=self._model_card(model),
            )
        return info.model_uri

    def _model_card(self, model):
        """The model card MLflow stores beside the weights. A model built from a config (no
        ``name_or_path``) or from a local checkpoint has no hub repository: without a card,
        MLflow would look one up on the hub under that name and warn twice per rerun (no card
        for an empty repo id; no license information). Such a model gets the checkpoint's own
        card (its ``README.md``) or one naming this rerun; a hub model (None here) gets its hub
        card from MLflow."""
        from huggingface_hub import ModelCard

        name = str(getattr(model, "name_or_path", "") or "")
        if name and not Path(name).exists():
            return None  # a hub id: MLflow fetches the model's own card and license
        readme = Path(name) / "README.md" if name else None
        if readme is not None and readme.is_file():
            try:
                return ModelCard.load(readme)
            except Exception:  # noqa: BLE001 - an unreadable card: ours below
                pass
        return ModelCard(
            "---\nlibrary_name: transformers\npipeline_tag: text-classification\ntags:\n- recipe_audit\n---\n"
            f"# recipe_audit rerun {self.run_id}\n\n"
            "A text classifier trained by one rerun (one seed) of a fine-tuning recipe and logged by "
            f"recipe_audit. MLflow run `{self.run_id}` holds its resolved configuration (`config.yaml`), "
            "its metrics on every audit set and, through its recipe, the recipe card: how often the "
            "next rerun of the same recipe fails the release bar.\n"
            + (f"\nFine-tuned from the local checkpoint `{name}`.\n" if name else
               "\nBuilt from a model config and trained from scratch: no pretrained weights, no hub "
               "repository.\n"))

    def finish(self) -> None:
        self.flush()
        self.client.set_terminated(self.run_id, "FINISHED")

    def fail(self, exc: BaseException) -> None:
        try:
            self.flush()
        except Exception:  # the run is failing anyway; keep the error that matters
            pass
        self.client.set_tag(self.run_id, keys.TAG_ERROR, error_line(exc))
        self.log_text("".join(traceback.format_exception(exc)), "error.txt")
        self.client.set_terminated(self.run_id, "FAILED")


# ------------------------------------------------------------------------------------------
# Scale-out: resumed sweeps, reruns whose process died (launchers/README.md)
# ------------------------------------------------------------------------------------------

_RESUME_IGNORED = ("tracking.resume", "hydra.")


def _overrides_key(overrides: Iterable[str]) -> str:
    from recipe_audit.store.uris import mask_in_text

    # as the sweep's tag records them: a password in an override masked
    return " ".join(mask_in_text(o) for o in overrides if not o.lstrip("+~").startswith(_RESUME_IGNORED))


class ResumeMismatch(TrackingError):
    """``resume=true`` in the directory of a sweep of another recipe (one sentence, naming both)."""


def _recipe_overrides(overrides: Iterable[str], seed_key: str) -> str:
    """The overrides that choose the recipe: without the seeds (a resumed sweep may plan more)."""
    return _overrides_key(o for o in overrides if o.split("=", 1)[0].lstrip("+~") != seed_key)


def reopen_sweep(store: Store, planned_seeds: Iterable[int], sweep_dir: Path,
                 overrides: list[str], write: bool = True, seed_key: str = "seed") -> SweepInfo | None:
    """The interrupted sweep to continue (``tracking.resume=true``): the one recorded in
    ``sweep_dir`` (relaunch with the same ``hydra.sweep.dir``), else the most recent sweep of the
    experiment launched with the same overrides. Its parent run is reopened (RUNNING), its planned
    seeds become the union of both plans, and it is published to the jobs as ``start_sweep``
    does. None when there is nothing to resume. Raises ``ResumeMismatch`` when the sweep recorded
    in ``sweep_dir`` was launched with other overrides than ``overrides`` (the seeds aside): its
    card would be shown for a recipe this launch did not ask for."""
    from mlflow.entities import RunStatus

    client = store.client
    old: SweepInfo | None = None
    if (sweep_dir / SWEEP_FILE).is_file():
        old = SweepInfo.from_json((sweep_dir / SWEEP_FILE).read_text())
        if (old.tracking_uri, old.experiment_name) != (store.uri, store.experiment_name):
            old = None
    if old is not None:
        try:
            recorded = client.get_run(old.parent_run_id).data.tags.get("recipe_audit.overrides")
        except Exception:  # noqa: BLE001 - a parent run that is gone: nothing recorded to compare
            recorded = None
        if recorded is not None:
            was, now = _recipe_overrides(recorded.split(), seed_key), _recipe_overrides(overrides, seed_key)
            if was != now:
                raise ResumeMismatch(
                    f"resume=true: the sweep in {sweep_dir} (sweep {old.sweep_id}) ran the recipe "
                    f"'{was or 'with no overrides'}', this launch asks for '{now or 'with no overrides'}'; "
                    "relaunch with that sweep's overrides to resume it, or give another hydra.sweep.dir to "
                    "start a new sweep.")
    if old is None:
        want = _overrides_key(overrides)
        for run in client.search_runs([store.experiment_id],
                                      filter_string=f"tags.`{keys.TAG_KIND}` = '{keys.KIND_SWEEP}'",
                                      order_by=["attributes.start_time DESC"], max_results=200):
            tags = run.data.tags
            if _overrides_key(tags.get("recipe_audit.overrides", "").split()) == want:
                old = SweepInfo(tags[keys.TAG_SWEEP_ID], run.info.run_id, store.uri, store.experiment_name,
                                tuple(json.loads(tags.get(keys.TAG_PLANNED_SEEDS, "[]"))))
                break
    if old is None:
        return None
    seeds = tuple(sorted(set(old.planned_seeds) | {int(s) for s in planned_seeds}))
    info = SweepInfo(old.sweep_id, old.parent_run_id, store.uri, store.experiment_name, seeds)
    if not write:  # another rank under accelerate launch: the same decision, the main process writes
        return info
    client.update_run(old.parent_run_id, status=RunStatus.to_string(RunStatus.RUNNING))
    client.set_tag(old.parent_run_id, keys.TAG_PLANNED_SEEDS, json.dumps(list(seeds), separators=(",", ":")))
    os.environ[SWEEP_ENV] = info.to_json()
    sweep_dir.mkdir(parents=True, exist_ok=True)
    _write_private(sweep_dir / SWEEP_FILE, info.to_json())
    return info


def _process_alive(host: str | None, pid: str | None) -> bool:
    """Whether the process that opened a rerun still runs (True when it ran on another host or
    its pid is unknown: only a process of this host can be looked at)."""
    if host != socket.gethostname() or not (pid or "").isdigit():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def close_dead_reruns(info: SweepInfo, only_dead_processes: bool = False,
                      kind: str = keys.KIND_RERUN) -> list[str]:
    """At the end of a multirun every job has returned, so a rerun of the sweep still RUNNING
    belongs to a process that died without closing it (SIGKILL, out of memory, node lost):
    mark it KILLED, with the reason, so the card lists it as unfinished (counted as a failure) under its
    true cause. Returns the run ids closed."""
    client = _client(info.tracking_uri)
    exp = client.get_experiment_by_name(info.experiment_name)
    if exp is None:
        return []
    filt = (f"tags.`{keys.TAG_SWEEP_ID}` = '{info.sweep_id}' and tags.`{keys.TAG_KIND}` = '{kind}' "
            "and attributes.status = 'RUNNING'")
    closed = []
    for run in client.search_runs([exp.experiment_id], filter_string=filt, max_results=50000):
        host, pid = run.data.tags.get(keys.TAG_HOST), run.data.tags.get(keys.TAG_PID)
        exiting = host == socket.gethostname() and pid == str(os.getpid())  # this process, at exit
        if only_dead_processes and not exiting and _process_alive(host, pid):
            continue  # mid-sweep: only the reruns whose process is gone
        client.set_tag(run.info.run_id, keys.TAG_ERROR, "the rerun's process died before it finished")
        client.set_terminated(run.info.run_id, "KILLED")
        closed.append(run.info.run_id)
    return closed


def finished_seeds(store: Store, sweep: SweepInfo, metrics: Iterable[str]) -> dict[int, set[str]]:
    """Seed -> the recipe identities of ``sweep`` with a FINISHED rerun of that seed whose every
    metric in ``metrics`` is finite: what a resumed sweep need not run again."""
    metrics = list(metrics)
    filt = (f"tags.`{keys.TAG_SWEEP_ID}` = '{sweep.sweep_id}' and tags.`{keys.TAG_KIND}` = '{keys.KIND_RERUN}' "
            "and attributes.status = 'FINISHED'")
    out: dict[int, set[str]] = {}
    for run in _search_all(store.client, store.experiment_id, filt):
        vals = [run.data.metrics.get(m) for m in metrics]
        if not all(v is not None and math.isfinite(v) for v in vals):
            continue
        try:
            seed = int(run.data.tags.get(keys.TAG_SEED, ""))
        except ValueError:
            continue
        out.setdefault(seed, set()).add(run.data.tags.get(keys.TAG_RECIPE_ID, ""))
    return out


def failed_reruns(info: SweepInfo, kind: str = keys.KIND_RERUN) -> list[tuple[int | str, str, str]]:
    """(seed, recipe identity, status) of each rerun of ``info`` whose latest attempt ended
    FAILED or KILLED (a seed a resumed sweep ran again to the end is not listed; the card still
    sees every attempt). ``kind``: the runs' ``recipe_audit.kind`` (an acceptance sweep's cells)."""
    client = _client(info.tracking_uri)
    exp = client.get_experiment_by_name(info.experiment_name)
    if exp is None:
        return []
    filt = f"tags.`{keys.TAG_SWEEP_ID}` = '{info.sweep_id}' and tags.`{keys.TAG_KIND}` = '{kind}'"
    latest: dict[tuple[str, str], Any] = {}
    for run in _search_all(client, exp.experiment_id, filt):
        key = (run.data.tags.get(keys.TAG_RECIPE_ID, ""), run.data.tags.get(keys.TAG_SEED, "?"))
        if key not in latest or run.info.start_time > latest[key].info.start_time:
            latest[key] = run
    out = []
    for (recipe, seed), run in latest.items():
        if run.info.status in ("FAILED", "KILLED"):
            out.append((int(seed) if seed.lstrip("-").isdigit() else seed, recipe, run.info.status))
    return sorted(out, key=str)


def killed_attempts(info: SweepInfo, since_ms: int, kind: str = keys.KIND_RERUN) -> list[int | str]:
    """The seeds of ``info`` with an attempt started since ``since_ms`` that ended KILLED (its
    process died: a killed worker, whose job the launcher ran again)."""
    client = _client(info.tracking_uri)
    exp = client.get_experiment_by_name(info.experiment_name)
    if exp is None:
        return []
    filt = (f"tags.`{keys.TAG_SWEEP_ID}` = '{info.sweep_id}' and tags.`{keys.TAG_KIND}` = '{kind}' "
            f"and attributes.status = 'KILLED' and attributes.start_time >= {int(since_ms)}")
    seeds = {run.data.tags.get(keys.TAG_SEED, "?") for run in _search_all(client, exp.experiment_id, filt)}
    return sorted((int(s) if s.lstrip("-").isdigit() else s for s in seeds), key=str)


def sweep_runs(info: SweepInfo, kind: str, status: str | None = "FINISHED") -> list:
    """The runs of ``info`` whose ``recipe_audit.kind`` is ``kind`` (and status ``status``; None: any)."""
    client = _client(info.tracking_uri)
    exp = client.get_experiment_by_name(info.experiment_name)
    if exp is None:
        return []
    filt = f"tags.`{keys.TAG_SWEEP_ID}` = '{info.sweep_id}' and tags.`{keys.TAG_KIND}` = '{kind}'"
    if status is not None:
        filt += f" and attributes.status = '{status}'"
    return _search_all(client, exp.experiment_id, filt)


def log_sweep_files_run(info: SweepInfo, run_name: str, tags: Mapping[str, str], local_dir: str | Path,
                        metrics: Mapping[str, float] | None = None) -> str:
    """A run nested under the sweep's parent holding the files under ``local_dir`` (a card the
    sweep computed at its end), its tags and metrics; FINISHED, or FAILED with the error when a
    write fails (which is raised). Returns its run id."""
    from mlflow.entities import Metric

    client = _client(info.tracking_uri)
    exp = client.get_experiment_by_name(info.experiment_name)
    all_tags = {keys.TAG_SWEEP_ID: info.sweep_id, keys.TAG_SWEEP_RUN_ID: info.parent_run_id,
                keys.TAG_PARENT: info.parent_run_id, **tags}
    run = client.create_run(exp.experiment_id, run_name=run_name, tags=all_tags)
    rid = run.info.run_id
    try:
        client.log_artifacts(rid, str(local_dir))
        now = int(time.time() * 1000)
        client.log_batch(rid, metrics=[Metric(k, float(v), now, 0) for k, v in (metrics or {}).items()])
        client.set_terminated(rid, "FINISHED")
    except Exception as exc:
        try:
            client.set_tag(rid, keys.TAG_ERROR, f"{type(exc).__name__}: {first_line(exc, 500)}")
            client.set_terminated(rid, "FAILED")
        except Exception:  # noqa: BLE001 - the write that failed is the error to raise
            pass
        raise
    return rid


def _search_all(client, experiment_id: str, filt: str) -> list:
    runs, token = [], None
    while True:
        page = client.search_runs([experiment_id], filter_string=filt, max_results=5000, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs


_PARAM_KEY_OK = re.compile(r"^[\w./\- ]{1,250}$")


def close_rerun(store: Store, run_id: str, *, params: Mapping[str, str] | None = None,
                returned: Mapping[str, float] | None = None, error: BaseException | None = None,
                metrics: Iterable[str] = (), tags_for=None, no_metric=None) -> dict[str, Any]:
    """End a rerun's run with the truth, whatever the job's code did to it: the params and the
    returned metrics it did not log itself, the error (FAILED) or FINISHED. Returns the outcome:
    ``{"run_id", "status", "metrics": {metric: last value or None}, "error"}``. ``tags_for``
    maps that outcome to tags set on the run before it closes (the pass/fail tags per bar).
    ``no_metric``: for a job that ended without error but with some of ``metrics`` neither logged
    nor returned, maps those metrics to the error the run is then recorded FAILED with (what the
    job returned and what is accepted)."""
    from mlflow.entities import Metric, Param, RunTag

    client = store.client
    run = client.get_run(run_id)
    logged = dict(run.data.metrics)
    now = int(time.time() * 1000)
    batch_metrics = [Metric(k, float(v), now, 0) for k, v in (returned or {}).items()
                     if k not in logged and _PARAM_KEY_OK.match(k)]
    for m in batch_metrics:
        logged[m.key] = m.value
    have = set(run.data.params)
    batch_params = [Param(k, v[:6000]) for k, v in sorted((params or {}).items())
                    if k not in have and _PARAM_KEY_OK.match(k)]
    outcome: dict[str, Any] = {"run_id": run_id, "status": "FINISHED",
                               "metrics": {m: logged.get(m) for m in metrics}, "error": None}
    if error is not None:
        outcome["status"] = "FAILED"
        outcome["error"] = error_line(error)  # the innermost cause first (Hydra wraps instantiation errors)
    elif no_metric is not None and (missing := [m for m, v in outcome["metrics"].items() if v is None]):
        outcome["status"] = "FAILED"
        outcome["error"] = no_metric(missing)
    tags = dict(tags_for(outcome)) if tags_for is not None else {}
    if outcome["error"]:
        tags[keys.TAG_ERROR] = outcome["error"]
    batch_tags = [RunTag(k, v) for k, v in tags.items()]
    error_text = "".join(traceback.format_exception(error)) if error is not None else None

    def write() -> None:
        # one write for all of it (params, metrics and tags go in one transaction on a SQL store)
        for i in range(0, max(len(batch_params), len(batch_metrics), len(batch_tags), 1), _MAX_PARAMS_PER_CALL):
            client.log_batch(run_id, metrics=batch_metrics[i:i + _MAX_PARAMS_PER_CALL],
                             params=batch_params[i:i + _MAX_PARAMS_PER_CALL],
                             tags=batch_tags[i:i + _MAX_PARAMS_PER_CALL])
        if error_text is not None:
            try:
                client.log_text(run_id, error_text, "error.txt")
            except Exception:  # noqa: BLE001 - the status matters more than the traceback
                pass
        client.set_terminated(run_id, outcome["status"])

    write()
    return outcome



def tag_sweep_with_cards(info: SweepInfo, entries: list[dict[str, Any]], description: str) -> None:
    """Put the sweep's card where the runs table shows it: on the sweep's parent run, the verdict
    as a tag and U, L, N, k as metrics (for one cell; several cells get one tag each, keyed by
    the cell's label and τ) and the card's summary as the run's description."""
    from mlflow.entities import Metric, RunTag

    client = _client(info.tracking_uri)
    now = int(time.time() * 1000)
    tags, metrics = [RunTag("mlflow.note.content", description[:20000])], []
    cells = {e["label"] for e in entries}
    for i, e in enumerate(entries):
        if len(cells) == 1:  # one recipe: the first τ plain, like a card run; others suffixed
            sfx = "" if i == 0 else f"/tau_{e['tau']:g}"
        else:
            slug = "".join(c if c.isalnum() or c in "-_." else "_" for c in str(e["label"]))[:120]
            sfx = f"/{slug}/tau_{e['tau']:g}"
        tags.append(RunTag(keys.PREFIX + "verdict" + sfx, str(e["verdict"])))
        for name in ("upper_bound", "lower_bound", "n_reruns", "n_failures"):
            if e.get(name) is not None:
                metrics.append(Metric(name + sfx, float(e[name]), now, 0))
    if len(cells) > 1:
        ok = sum(1 for e in entries if e["verdict"] == "release-supported")
        tags.append(RunTag(keys.PREFIX + "verdict", f"{ok} of {len(entries)} cells release-supported"))
    tags.append(RunTag("mlflow.runName", sweep_run_name(info.sweep_id, entries)))
    for i in range(0, max(len(tags), len(metrics)), _MAX_PARAMS_PER_CALL):
        client.log_batch(info.parent_run_id, metrics=metrics[i:i + _MAX_PARAMS_PER_CALL],
                         tags=tags[i:i + _MAX_PARAMS_PER_CALL])


def sweep_run_name(sweep_id: str, entries: list[dict[str, Any]]) -> str:
    """The sweep's run name once its card is known, verdict first, so the runs table's one default
    text column (narrow: it shows the first twenty characters or so) shows it: ``unsupported at
    τ 0.7 (6/59 failed, U 0.172) · sweep-<id>``; several recipes or metrics: ``1 of 4 cells
    release-supported · sweep-<id>``."""
    if len({(e["label"], e["metric"]) for e in entries}) > 1:
        ok = sum(1 for e in entries if e["verdict"] == "release-supported")
        verdict = f"{ok} of {len(entries)} cells release-supported"
    else:
        verdict = "; ".join(f"{e['verdict']} at τ {e['tau']:g}" + (
            "" if e.get("upper_bound") is None else f" ({e['n_failures']}/{e['n_reruns']} failed, U {e['upper_bound']:.3f})")
            for e in entries)
    tail = f" · sweep-{sweep_id}"
    if len(verdict) + len(tail) > 250:  # MLflow's run_name column holds 250
        verdict = verdict[:249 - len(tail)] + "…"
    return verdict + tail


# ------------------------------------------------------------------------------------------
# The rerun a job's own fluent MLflow calls land in
# ------------------------------------------------------------------------------------------

_RESUMABLE: dict[str, Any] = {"run_id": None}
_MLFLOW_END_RUN: list = []  # MLflow's own ``end_run``, kept the first time it is wrapped


def keep_rerun_resumable(run_id: str | None) -> None:
    """While a job runs, keep its rerun the run MLflow's fluent API resumes (None: the job ended).

    ``mlflow.start_run()`` resumes ``$MLFLOW_RUN_ID`` and ``mlflow.end_run()`` unsets it, so once
    the job's code ends the rerun's run (the Hugging Face ``Trainer``'s MLflowCallback does at the
    end of ``train()``) the next fluent call (the metrics of a ``trainer.evaluate()``, an
    ``mlflow.log_metric``, a ``mlflow.start_run()``) would open a new top-level run outside the
    sweep. For the job's duration ``mlflow.end_run`` is wrapped: when the run it ends is the
    rerun's and no other run is left active, ``$MLFLOW_RUN_ID`` names the rerun again, so that
    call resumes the rerun (the callback closes the run with its true status when the job ends).
    With None, MLflow's own ``end_run`` is put back (unless someone wrapped it since)."""
    import mlflow
    from mlflow.tracking import fluent

    _RESUMABLE["run_id"] = run_id
    if not _MLFLOW_END_RUN:
        if run_id is None:
            return
        _MLFLOW_END_RUN.append(fluent.end_run)
    own = _MLFLOW_END_RUN[0]
    new, old = (_resuming_end_run, own) if run_id is not None else (own, _resuming_end_run)
    for module in (fluent, mlflow):
        if module.end_run is old:
            module.end_run = new


def _resuming_end_run(status: str = "FINISHED") -> None:
    """``mlflow.end_run`` while a job runs (:func:`keep_rerun_resumable`)."""
    from mlflow.tracking import fluent

    ended = fluent.active_run()
    _MLFLOW_END_RUN[0](status)
    rerun = _RESUMABLE["run_id"]
    if rerun and ended is not None and ended.info.run_id == rerun and fluent.active_run() is None:
        os.environ["MLFLOW_RUN_ID"] = rerun
