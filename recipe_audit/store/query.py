"""Read reruns from an MLflow tracking store and resolve them to one result per seed.

Two steps, both pure reads of the store:

1. :func:`read_runs` returns one row per lifecycle-active MLflow run of an experiment, with only the
   tags, params and latest metric values the caller asked for. For SQL-backed stores (``sqlite:``,
   ``postgresql:``, ``mysql:``, ``mssql:``) it reads MLflow's own tables in a handful of queries
   (SQLite: whole-table scans when the experiment is most of the store); for tracking servers
   (``http:``, ``https:``) it asks the server's ``runs/search`` endpoint for start-time slices of
   the experiment concurrently and reads the answers as plain JSON; for file stores and
   ``databricks`` it pages through :meth:`mlflow.tracking.MlflowClient.search_runs`. Every path
   returns the same frame.
2. :func:`collect_reruns` groups the rows into cells (one recipe identity x one combination of the
   ``group_by`` values) and resolves each cell to a :class:`RerunSet`: one result per seed, with the
   unfinished reruns (crashed, killed, still running, NaN metric, metric missing, planned but never
   logged) and the duplicated seeds listed. A seed with several finished results counts its worst
   one (a rerun of a seed is another draw, not a second chance); :class:`Duplicate` says which run
   decided and whether the results disagree about a bar.

Key naming follows MLflow's: ``params.X``, ``tags.X``, ``metrics.X``, ``attributes.X`` (for example
``params.seed`` or ``tags.recipe_audit.seed``). Metric keys of :func:`read_runs` are bare metric
names (``accuracy/calibration``); a ``metrics.`` prefix is accepted and dropped.

The store layout written by recipe_audit is the contract of :mod:`recipe_audit.keys`.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import pandas as pd

from recipe_audit import keys

__all__ = [
    "AUTO",
    "Duplicate",
    "QueryError",
    "REASONS",
    "RerunSet",
    "check_single_recipe",
    "clear_engine_cache",
    "collect_reruns",
    "is_sql_uri",
    "read_runs",
]

AUTO = "auto"
"""Default of ``filter_kind`` (see :func:`read_runs`) and of ``backend``."""

REASONS = ("failed", "killed", "running", "stale-running", "nan-metric", "missing-metric", "never-logged")
"""Why a seed is unfinished (the second item of each :attr:`RerunSet.unfinished` entry)."""

NEVER_LOGGED = "NEVER_LOGGED"
"""The :attr:`RerunSet.statuses` entry of a planned seed that no run logged."""

SQL_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")
_ATTRIBUTES = {
    # attribute name -> column of MLflow's ``runs`` table
    "run_id": "run_uuid",
    "run_name": "name",
    "status": "status",
    "start_time": "start_time",
    "end_time": "end_time",
    "user_id": "user_id",
    "artifact_uri": "artifact_uri",
    "lifecycle_stage": "lifecycle_stage",
    "experiment_id": "experiment_id",
}
_PREFIXES = {
    "params.": "params",
    "param.": "params",
    "tags.": "tags",
    "tag.": "tags",
    "metrics.": "metrics",
    "metric.": "metrics",
    "attributes.": "attributes",
    "attribute.": "attributes",
}
_DBL_MAX = 1.7976931348623157e308  # MLflow's SQL store writes +/-inf as +/-DBL_MAX
_PAGE_SIZE = 50_000  # MLflow's SEARCH_MAX_RESULTS_THRESHOLD
_SMALL_PAGE_SIZE = 1_000  # MLflow's SEARCH_MAX_RESULTS_DEFAULT, for servers that refuse larger pages
_ID_CHUNK = 500  # run ids per IN (...) list
_REST_THREADS = 4  # concurrent requests to a tracking server (the default of `mlflow server --workers`)
_REST_SLICES = 16  # start-time slices of an experiment read over REST (uneven slices balance out)
_REST_PAGE = 500  # runs per REST request
_JOINS_PER_QUERY = 40  # LEFT JOINs per SELECT (SQLite allows 64 tables in a join)
_SCAN_SHARE = 0.25  # SQLite: read whole tables when the experiment has this share of the runs
_SQLITE_MMAP_BYTES = 1 << 31  # SQLite read connections map up to this much of the file (SQLite caps it)


class QueryError(ValueError):
    """The store cannot answer the question as asked; the message says why in one sentence."""


# --------------------------------------------------------------------------------------------------
# keys and URIs


@dataclass(frozen=True)
class _Key:
    """A parsed ``params.X`` / ``tags.X`` / ``metrics.X`` / ``attributes.X`` key."""

    text: str  # as the caller wrote it: the frame column name
    kind: str  # params | tags | metrics | attributes
    name: str  # X


def _parse_key(text: str) -> _Key:
    for prefix, kind in _PREFIXES.items():
        if text.startswith(prefix) and len(text) > len(prefix):
            name = text[len(prefix) :]
            if kind == "attributes" and name not in _ATTRIBUTES:
                raise QueryError(
                    f"Unknown run attribute {text!r}; the attributes are {', '.join(sorted(_ATTRIBUTES))}."
                )
            return _Key(text, kind, name)
    raise QueryError(
        f"Key {text!r} must start with params., tags., metrics. or attributes. (MLflow's naming)."
    )


def _metric_name(key: str) -> str:
    for prefix in ("metrics.", "metric."):
        if key.startswith(prefix):
            return key[len(prefix) :]
    return key


def is_sql_uri(uri: str) -> bool:
    """True when ``uri`` names a database MLflow stores runs in (read by the SQL fast path)."""
    scheme = uri.split(":", 1)[0].lower() if "://" in uri else ""
    return scheme.split("+", 1)[0] in SQL_SCHEMES


def _is_http_uri(uri: str) -> bool:
    """True for a tracking server's ``http://`` or ``https://`` URI (read by the REST path)."""
    return uri.lower().startswith(("http://", "https://"))


def _redact(uri: str) -> str:
    """The URI without a password, for messages."""
    try:
        parts = urlsplit(uri)
    except ValueError:
        return uri
    if parts.password is None:
        return uri
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))


def _resolve_uri(tracking_uri: str | None) -> str:
    if tracking_uri:
        return str(tracking_uri)
    import mlflow

    return mlflow.get_tracking_uri()


# --------------------------------------------------------------------------------------------------
# SQL engines

_ENGINES: dict[str, Any] = {}
_ENGINES_LOCK = threading.Lock()
_HAS_WORKSPACE: dict[str, bool] = {}  # URI -> experiments has MLflow 3's workspace column


def _engine(uri: str) -> Any:
    """One cached SQLAlchemy engine per URI, whose connections read one snapshot per transaction.

    SQLite: NullPool (no file handle outlives a call); each connection is read-only
    (``PRAGMA query_only``), reads the file through a memory map (``PRAGMA mmap_size``: pages are
    read in place instead of copied into SQLite's page cache; the table scans of
    :func:`_sqlite_scan` on the 10,000-rerun bench store took about 30 % less time than with a
    64 MiB page cache) and really begins its transactions (pysqlite would not emit ``BEGIN``
    before a SELECT, leaving each statement its own snapshot). PostgreSQL and MySQL: REPEATABLE READ
    and a small pre-pinged pool.
    """
    import sqlalchemy as sa
    from sqlalchemy.pool import NullPool

    with _ENGINES_LOCK:
        engine = _ENGINES.get(uri)
        if engine is None:
            if uri.lower().startswith("sqlite"):
                engine = sa.create_engine(uri, poolclass=NullPool)

                @sa.event.listens_for(engine, "connect")
                def _on_connect(dbapi_connection: Any, _record: Any) -> None:
                    dbapi_connection.isolation_level = None  # we emit BEGIN ourselves
                    cursor = dbapi_connection.cursor()
                    cursor.execute("PRAGMA query_only = 1")
                    cursor.execute(f"PRAGMA mmap_size = {_SQLITE_MMAP_BYTES}")
                    cursor.close()

                @sa.event.listens_for(engine, "begin")
                def _on_begin(conn: Any) -> None:
                    conn.exec_driver_sql("BEGIN")

            else:
                options: dict[str, Any] = {}
                if uri.lower().startswith(("postgresql", "mysql")):
                    options["isolation_level"] = "REPEATABLE READ"
                engine = sa.create_engine(
                    uri, pool_size=2, max_overflow=2, pool_pre_ping=True, pool_recycle=1800, **options
                )
            _ENGINES[uri] = engine
        return engine


def clear_engine_cache() -> None:
    """Dispose of every cached engine (tests, or after a store was moved)."""
    with _ENGINES_LOCK:
        for engine in _ENGINES.values():
            engine.dispose()
        _ENGINES.clear()
        _HAS_WORKSPACE.clear()


def _active_workspace() -> str:
    enabled = os.environ.get("MLFLOW_ENABLE_WORKSPACES", "").strip().lower() in ("1", "true", "yes")
    if enabled:
        return os.environ.get("MLFLOW_WORKSPACE", "").strip() or "default"
    return "default"


# --------------------------------------------------------------------------------------------------
# the raw table both paths produce


@dataclass
class _Raw:
    """What a path read: one entry per active run of the experiment, column-wise.

    ``columns`` holds numpy arrays: ``run_id``, ``run_name``, ``status``, ``start_time``,
    ``end_time`` (object) and one array per requested key, named ``tags.X`` / ``params.X`` /
    ``attributes.X`` (object, None when absent) or ``metrics.X`` (float, NaN when absent or logged
    as NaN, +/-inf for +/-DBL_MAX) with ``logged.X`` (bool: was metric X logged at all).
    ``parents`` maps a parent run id to its (sweep id, planned seeds) tag values and ``errors`` a run
    id to its error tag (runs that did not finish only).
    """

    experiment_id: str
    columns: dict[str, np.ndarray]
    parents: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    # the client path: ``{"metrics" | "params" | "tags": {run id: its keys}}`` (for messages);
    # the SQL path asks the database when a message needs them
    keys_by_run: dict[str, dict[str, list[str]]] | None = None


def _objects(values: Iterable[Any]) -> np.ndarray:
    """An object array (never a str array), for values that may be None."""
    values = list(values)
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def _floats(values: Iterable[Any]) -> np.ndarray:
    """Floats with None -> NaN and MLflow's +/-DBL_MAX -> +/-inf."""
    out = np.array(list(values), dtype=float)
    out[out >= _DBL_MAX] = np.inf
    out[out <= -_DBL_MAX] = -np.inf
    return out


def _needed(
    metric_names: Sequence[str], other: Sequence[_Key]
) -> tuple[list[str], list[str], list[str], list[str]]:
    """Tag, param, metric and attribute names to read (the kind/parent/recipe tags always)."""
    buckets: dict[str, list[str]] = {
        "tags": [keys.TAG_KIND, keys.TAG_PARENT, keys.TAG_RECIPE_ID],
        "params": [],
        "metrics": list(metric_names),
        "attributes": [],
    }
    for k in other:
        if k.name not in buckets[k.kind]:
            buckets[k.kind].append(k.name)
    return buckets["tags"], buckets["params"], buckets["metrics"], buckets["attributes"]


# --------------------------------------------------------------------------------------------------
# fast path: MLflow's tables through SQLAlchemy Core


def _sql_tables() -> dict[str, Any]:
    import sqlalchemy as sa

    return {
        "experiments": sa.table(
            "experiments", sa.column("experiment_id"), sa.column("name"), sa.column("lifecycle_stage")
        ),
        "runs": sa.table("runs", *(sa.column(c) for c in sorted(set(_ATTRIBUTES.values())))),
        "tags": sa.table("tags", sa.column("key"), sa.column("value"), sa.column("run_uuid")),
        "params": sa.table("params", sa.column("key"), sa.column("value"), sa.column("run_uuid")),
        "latest_metrics": sa.table(
            "latest_metrics", sa.column("key"), sa.column("value"), sa.column("is_nan"), sa.column("run_uuid")
        ),
    }


def _experiment_has_workspace(engine: Any, uri: str) -> bool:
    """Whether ``experiments`` has MLflow 3's ``workspace`` column (names are unique per workspace)."""
    import sqlalchemy as sa

    if uri not in _HAS_WORKSPACE:
        columns = {c["name"] for c in sa.inspect(engine).get_columns("experiments")}
        _HAS_WORKSPACE[uri] = "workspace" in columns
    return _HAS_WORKSPACE[uri]


def _read_sql(
    uri: str,
    experiment_name: str,
    tag_names: list[str],
    param_names: list[str],
    metric_names: list[str],
    attr_names: list[str],
) -> _Raw:
    """Read through MLflow's tables: experiment, one wide SELECT, then the few parents and errors."""
    import sqlalchemy as sa

    if uri.lower().startswith("sqlite"):
        database = sa.engine.make_url(uri).database
        if database and database != ":memory:" and not database.startswith("file:"):
            if not os.path.exists(database):
                raise QueryError(f"No experiment named {experiment_name!r} in {_redact(uri)} (no such file).")
    try:
        engine = _engine(uri)
    except (ImportError, sa.exc.ArgumentError) as exc:
        raise QueryError(f"Cannot open {_redact(uri)}: {exc}.") from exc
    t = _sql_tables()
    try:
        with engine.connect() as conn:
            exp = t["experiments"]
            where = [exp.c.name == experiment_name]
            if _experiment_has_workspace(engine, uri):
                where.append(sa.column("workspace") == _active_workspace())
            found = conn.execute(sa.select(exp.c.experiment_id, exp.c.lifecycle_stage).where(*where)).all()
            if not found:
                raise QueryError(f"No experiment named {experiment_name!r} in {_redact(uri)}.")
            experiment_id, stage = found[0]
            if stage != "active":
                raise QueryError(f"Experiment {experiment_name!r} in {_redact(uri)} is deleted.")
            raw = _Raw(str(experiment_id), {})
            scanned = uri.lower().startswith("sqlite") and _sqlite_scan(
                conn, int(experiment_id), tag_names, param_names, metric_names, attr_names, raw
            )
            if not scanned:
                _sql_wide(conn, t, int(experiment_id), tag_names, param_names, metric_names, attr_names, raw)
            run_ids = raw.columns["run_id"]
            if len(run_ids) == 0:
                return raw
            # the rare extras: error tags of runs that did not finish, run names kept only in a tag
            unfinished = run_ids[raw.columns["status"] != "FINISHED"].tolist()
            raw.errors = {
                r: v for r, v in _sql_tag_values(conn, t, unfinished, keys.TAG_ERROR) if v is not None
            }
            names = raw.columns["run_name"]
            nameless = [i for i, n in enumerate(names.tolist()) if not n]
            if nameless:
                found_names = dict(_sql_tag_values(conn, t, run_ids[nameless].tolist(), "mlflow.runName"))
                for i in nameless:
                    names[i] = found_names.get(run_ids[i], names[i])
            parent_ids = sorted({p for p in raw.columns[f"tags.{keys.TAG_PARENT}"].tolist() if p})
            raw.parents = _sql_parents(conn, t, parent_ids)
    except QueryError:
        raise
    except (sa.exc.SQLAlchemyError, sqlite3.Error) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise QueryError(f"Cannot read MLflow's tables in {_redact(uri)}: {first}.") from exc
    return raw


def _sqlite_scan(
    conn: Any,
    experiment_id: int,
    tag_names: list[str],
    param_names: list[str],
    metric_names: list[str],
    attr_names: list[str],
    raw: _Raw,
) -> bool:
    """SQLite, when the experiment holds most of the store's runs: read each table once, in order.

    SQLite runs the LEFT JOINs of :func:`_sql_wide` as nested loops: per run and key, one search of
    the (key, run_uuid) index and one of the table for the value: profiled on the 10,000-rerun
    bench store, those joins were two thirds of ``read_runs`` + ``collect_reruns``. Reading
    ``runs``, ``tags`` and ``params`` front to back once each (``latest_metrics`` once per metric)
    and keeping the requested keys took about a third less time there. Strings come back as one JSON array per column, built
    by SQLite (``json_group_array``), so Python parses a few long strings instead of building a
    tuple per row; metric values come back as rows, because SQLite's float-to-text conversion
    does not always round-trip. Values are placed by run id; the frame is the one
    :func:`_sql_wide` would read.

    Returns False, having read nothing into ``raw``, when the experiment holds less than
    ``_SCAN_SHARE`` of the store's runs (the joins read less then) or when this SQLite lacks
    JSON functions or aggregate ``FILTER`` clauses.
    """
    base = {
        "run_id": "run_uuid",
        "run_name": "name",
        "status": "status",
        "start_time": "start_time",
        "end_time": "end_time",
        **{f"attributes.{a}": _ATTRIBUTES[a] for a in attr_names},
    }
    mine = "experiment_id = ? AND lifecycle_stage = 'active'"
    arrays = ", ".join(f"json_group_array({c}) FILTER (WHERE {mine})" for c in base.values())
    db = conn.connection.driver_connection  # sqlite3's own rows: no SQLAlchemy Row per metric row
    try:
        row = db.execute(
            f"SELECT count(*), count(*) FILTER (WHERE {mine}), {arrays} FROM runs",
            (experiment_id,) * (len(base) + 1),
        ).fetchone()
    except sqlite3.OperationalError:  # no JSON functions or FILTER (SQLite before 3.30)
        return False
    if row[1] == 0 or row[1] < _SCAN_SHARE * row[0]:
        return False
    for name, text in zip(base, row[2:], strict=True):
        values = json.loads(text)
        if name == "attributes.experiment_id":
            values = [None if v is None else str(v) for v in values]
        raw.columns[name] = _objects(values)
    run_ids = raw.columns["run_id"].tolist()
    n = len(run_ids)
    position = dict(zip(run_ids, range(n), strict=True))

    def place(ids: list[str]) -> np.ndarray:
        """Row of each run id (-1 for runs of other experiments or deleted runs)."""
        if ids == run_ids:
            return np.arange(n)
        return np.fromiter(map(position.get, ids, itertools.repeat(-1)), dtype=np.int64, count=len(ids))

    for table, names in (("tags", tag_names), ("params", param_names)):
        if not names:
            continue
        pairs = ", ".join(
            "json_group_array(run_uuid) FILTER (WHERE key = ?), json_group_array(value) FILTER (WHERE key = ?)"
            for _ in names
        )
        row = db.execute(
            f"SELECT {pairs} FROM {table} NOT INDEXED WHERE key IN ({', '.join('?' * len(names))})",
            (*(k for k in names for _ in range(2)), *names),
        ).fetchone()
        for i, name in enumerate(names):
            where = place(json.loads(row[2 * i]))
            keep = where >= 0
            out = np.full(n, None, dtype=object)
            out[where[keep]] = _objects(json.loads(row[2 * i + 1]))[keep]
            raw.columns[f"{table}.{name}"] = out
    for name in metric_names:
        rows = db.execute(
            "SELECT run_uuid, value, is_nan FROM latest_metrics NOT INDEXED WHERE key = ?", (name,)
        ).fetchall()
        ids, values, is_nan = zip(*rows, strict=True) if rows else ((), (), ())
        where = place(list(ids))
        keep = where >= 0
        value = np.full(n, np.nan)
        value[where[keep]] = _floats(values)[keep]
        logged = np.zeros(n, dtype=bool)
        logged[where[keep]] = True
        value[where[keep & (np.array(is_nan, dtype=float) == 1)]] = np.nan  # is_nan rows store 0
        raw.columns[f"metrics.{name}"] = value
        raw.columns[f"logged.{name}"] = logged
    return True


def _sql_wide(
    conn: Any,
    t: dict[str, Any],
    experiment_id: int,
    tag_names: list[str],
    param_names: list[str],
    metric_names: list[str],
    attr_names: list[str],
    raw: _Raw,
) -> None:
    """One SELECT over ``runs`` with one LEFT JOIN per requested key: the pivot happens in the DB.

    Every join is an equality on MLflow's (key, run_uuid) primary key, so each value costs one index
    lookup and nothing of another key or experiment is read. More than ``_JOINS_PER_QUERY`` keys are
    split over several SELECTs merged on run id (in the same transaction, so the same snapshot).
    """
    import sqlalchemy as sa

    r = t["runs"].alias("r")
    wanted = (
        [("tags", n) for n in tag_names]
        + [("params", n) for n in param_names]
        + [("metrics", n) for n in metric_names]
    )
    base = [
        r.c.run_uuid.label("run_id"),
        r.c.name.label("run_name"),
        r.c.status.label("status"),
        r.c.start_time.label("start_time"),
        r.c.end_time.label("end_time"),
    ] + [r.c[_ATTRIBUTES[a]].label(f"attributes.{a}") for a in attr_names]
    active = (r.c.experiment_id == experiment_id, r.c.lifecycle_stage == "active")
    chunks = [wanted[i : i + _JOINS_PER_QUERY] for i in range(0, len(wanted), _JOINS_PER_QUERY)] or [[]]
    position: dict[str, int] = {}
    for n_chunk, chunk in enumerate(chunks):
        cols: list[Any] = list(base) if n_chunk == 0 else [r.c.run_uuid.label("run_id")]
        source = r
        for i, (kind, name) in enumerate(chunk):
            table = t["latest_metrics" if kind == "metrics" else kind].alias(f"k{i}")
            source = source.outerjoin(table, sa.and_(table.c.run_uuid == r.c.run_uuid, table.c.key == name))
            cols.append(table.c.value.label(f"v{i}"))
            if kind == "metrics":
                cols.append(table.c.is_nan.label(f"n{i}"))
        rows = conn.execute(sa.select(*cols).select_from(source).where(*active)).all()
        columns = list(zip(*rows, strict=True)) if rows else [() for _ in cols]
        if n_chunk == 0:
            for j, c in enumerate(base):
                values = columns[j]
                if c.name == "attributes.experiment_id":
                    values = [None if v is None else str(v) for v in values]
                raw.columns[c.name] = _objects(values)
            if len(chunks) > 1:
                position = {rid: i for i, rid in enumerate(columns[0])}
            perm = None
            j = len(base)
        else:
            perm = np.fromiter((position[rid] for rid in columns[0]), dtype=np.int64, count=len(rows))
            j = 1
        for kind, name in chunk:
            if kind == "metrics":
                value = _floats(columns[j])  # NULL (not logged) -> NaN
                logged = ~np.isnan(value)  # MLflow's value column is NOT NULL
                value[np.array(columns[j + 1], dtype=float) == 1] = np.nan  # is_nan rows store 0
                _put(raw, f"metrics.{name}", value, perm)
                _put(raw, f"logged.{name}", logged, perm)
                j += 2
            else:
                _put(raw, f"{kind}.{name}", _objects(columns[j]), perm)
                j += 1


def _put(raw: _Raw, name: str, values: np.ndarray, perm: np.ndarray | None) -> None:
    """Store a column read in row order ``perm`` (None: the order of the first SELECT)."""
    if perm is None:
        raw.columns[name] = values
        return
    out = np.empty(len(raw.columns["run_id"]), dtype=values.dtype)
    if values.dtype == object:
        out[:] = None
    elif values.dtype == bool:
        out[:] = False
    else:
        out[:] = np.nan
    out[perm] = values
    raw.columns[name] = out


def _sql_tag_values(conn: Any, t: dict[str, Any], run_ids: Sequence[str], key: str) -> list[tuple[str, Any]]:
    """(run id, value) of one tag of the given runs, ``_ID_CHUNK`` run ids per SELECT."""
    import sqlalchemy as sa

    tags = t["tags"]
    out: list[tuple[str, Any]] = []
    for i in range(0, len(run_ids), _ID_CHUNK):
        stmt = sa.select(tags.c.run_uuid, tags.c.value).where(
            tags.c.key == key, tags.c.run_uuid.in_(list(run_ids[i : i + _ID_CHUNK]))
        )
        out.extend((rid, value) for rid, value in conn.execute(stmt))
    return out


def _sql_parents(
    conn: Any, t: dict[str, Any], parent_ids: Sequence[str]
) -> dict[str, tuple[str | None, str | None]]:
    """(sweep id, planned seeds) tag values of the parent runs, whatever experiment they are in."""
    import sqlalchemy as sa

    tags = t["tags"]
    found: dict[str, dict[str, Any]] = {p: {} for p in parent_ids}
    for i in range(0, len(parent_ids), _ID_CHUNK):
        stmt = sa.select(tags.c.run_uuid, tags.c.key, tags.c.value).where(
            tags.c.key.in_([keys.TAG_SWEEP_ID, keys.TAG_PLANNED_SEEDS]),
            tags.c.run_uuid.in_(list(parent_ids[i : i + _ID_CHUNK])),
        )
        for rid, key, value in conn.execute(stmt):
            found[rid][key] = value
    return {p: (d.get(keys.TAG_SWEEP_ID), d.get(keys.TAG_PLANNED_SEEDS)) for p, d in found.items()}


def _keys_of_runs(uri: str, raw: _Raw, kind: str, run_ids: list[str]) -> list[str]:
    """The ``kind`` keys (``metrics``, ``params``, ``tags``) some of ``run_ids`` have, sorted: for a
    message that names what the runs a card reads do have (not what other runs in the
    experiment, such as recipe_audit's own card runs, logged). MLflow's own tags are left out."""
    if raw.keys_by_run is not None:
        per_run = raw.keys_by_run[kind]
        found = {k for rid in run_ids for k in per_run.get(rid, ())}
    else:
        import sqlalchemy as sa

        table = _sql_tables()["latest_metrics" if kind == "metrics" else kind]
        found = set()
        with _engine(uri).connect() as conn:
            for i in range(0, len(run_ids), _ID_CHUNK):
                stmt = sa.select(table.c.key).distinct().where(table.c.run_uuid.in_(run_ids[i : i + _ID_CHUNK]))
                found.update(k for (k,) in conn.execute(stmt))
    return sorted(k for k in found if not (kind == "tags" and k.startswith("mlflow.")))


def _listing(names: list[str], limit: int = 5) -> str:
    shown = ", ".join(repr(k) for k in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


# --------------------------------------------------------------------------------------------------
# portable path: MlflowClient.search_runs


def _read_client(
    uri: str,
    experiment_name: str,
    tag_names: list[str],
    param_names: list[str],
    metric_names: list[str],
    attr_names: list[str],
) -> _Raw:
    """Read through ``MlflowClient.search_runs`` (paged), for REST servers and file stores."""
    from mlflow.entities import ViewType
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment_name)
    if exp is None:
        raise QueryError(f"No experiment named {experiment_name!r} in {_redact(uri)}.")
    if exp.lifecycle_stage != "active":
        raise QueryError(f"Experiment {experiment_name!r} in {_redact(uri)} is deleted.")
    runs: list[Any] = []
    token: str | None = None
    page_size = _PAGE_SIZE
    while True:
        try:
            page = client.search_runs(
                [exp.experiment_id],
                filter_string="",
                run_view_type=ViewType.ACTIVE_ONLY,
                max_results=page_size,
                page_token=token,
            )
        except MlflowException:
            if token is not None or page_size == _SMALL_PAGE_SIZE:
                raise
            page_size = _SMALL_PAGE_SIZE  # a server that caps pages lower than MLflow's own
            continue
        runs.extend(page)
        token = page.token
        if not token:
            break
    infos = [run.info for run in runs]
    tags = [run.data.tags for run in runs]
    params = [run.data.params for run in runs]
    metrics = [run.data.metrics for run in runs]
    return _raw_from_runs(
        client, str(exp.experiment_id), infos, tags, params, metrics, tag_names, param_names, metric_names,
        attr_names,
    )


def _raw_from_runs(
    client: Any,
    experiment_id: str,
    infos: Sequence[Any],
    tags: Sequence[dict[str, str]],
    params: Sequence[dict[str, str]],
    metrics: Sequence[dict[str, float]],
    tag_names: list[str],
    param_names: list[str],
    metric_names: list[str],
    attr_names: list[str],
) -> _Raw:
    """The raw table of runs read as MLflow's run infos and tag, param and metric dicts."""
    from mlflow.exceptions import MlflowException

    cols: dict[str, np.ndarray] = {
        "run_id": _objects(i.run_id for i in infos),
        "run_name": _objects(i.run_name for i in infos),
        "status": _objects(i.status for i in infos),
        "start_time": _objects(i.start_time for i in infos),
        "end_time": _objects(i.end_time for i in infos),
    }
    for a in attr_names:
        values = [getattr(i, a) for i in infos]
        if a == "experiment_id":
            values = [None if v is None else str(v) for v in values]
        cols[f"attributes.{a}"] = _objects(values)
    for n in tag_names:
        cols[f"tags.{n}"] = _objects(d.get(n) for d in tags)
    for n in param_names:
        cols[f"params.{n}"] = _objects(d.get(n) for d in params)
    for n in metric_names:
        cols[f"metrics.{n}"] = _floats(d.get(n) for d in metrics)
        cols[f"logged.{n}"] = np.array([n in d for d in metrics], dtype=bool)
    raw = _Raw(experiment_id, cols)
    raw.errors = {
        i.run_id: d[keys.TAG_ERROR]
        for i, d in zip(infos, tags, strict=True)
        if i.status != "FINISHED" and d.get(keys.TAG_ERROR) is not None
    }
    by_id = dict(zip(cols["run_id"].tolist(), tags, strict=True))
    for pid in sorted({p for p in cols[f"tags.{keys.TAG_PARENT}"].tolist() if p}):
        ptags = by_id.get(pid)
        if ptags is None:  # a parent in another experiment, or deleted
            try:
                ptags = client.get_run(pid).data.tags
            except MlflowException:
                ptags = {}
        raw.parents[pid] = (ptags.get(keys.TAG_SWEEP_ID), ptags.get(keys.TAG_PLANNED_SEEDS))
    raw.keys_by_run = {
        kind: {i.run_id: list(d) for i, d in zip(infos, dicts, strict=True)}
        for kind, dicts in (("metrics", metrics), ("params", params), ("tags", tags))
    }
    return raw


# --------------------------------------------------------------------------------------------------
# REST path: MLflow's runs/search endpoint, concurrently, parsed as plain JSON


class _Info(NamedTuple):
    """The run-info fields read from a ``runs/search`` response, as MLflow's RunInfo gives them."""

    run_id: str
    run_name: str
    status: str
    start_time: int
    end_time: int | None
    user_id: str
    artifact_uri: str
    lifecycle_stage: str
    experiment_id: str


def _info_from_json(info: dict[str, Any]) -> _Info:
    """Absent fields as MLflow's RunInfo.from_proto fills them: "" and 0, an end time of 0 as None."""
    return _Info(
        info.get("run_id") or info.get("run_uuid", ""),
        info.get("run_name", ""),
        info.get("status", "RUNNING"),
        int(info.get("start_time", 0)),
        int(info.get("end_time", 0)) or None,
        info.get("user_id", ""),
        info.get("artifact_uri", ""),
        info.get("lifecycle_stage", ""),
        str(info.get("experiment_id", "")),
    )


def _rest_search(creds: Any, body: dict[str, Any]) -> dict[str, Any]:
    """One ``runs/search`` request, its JSON answer as dicts (no protobuf messages, no entities)."""
    from mlflow.utils.rest_utils import http_request, verify_rest_response

    endpoint = "/api/2.0/mlflow/runs/search"
    return verify_rest_response(http_request(creds, endpoint, "POST", json=body), endpoint).json()


def _rest_slices(creds: Any, experiment_id: str) -> list[str]:
    """Filters that split the experiment's active runs by start time into disjoint slices.

    The first and last start times come from two one-run searches; the range between them is cut
    into ``_REST_SLICES`` equal parts, the first slice open below and the last open above, so
    every run is in exactly one slice (MLflow gives every run a start time).
    """
    ends = []
    for order in ("ASC", "DESC"):
        body = {"experiment_ids": [experiment_id], "run_view_type": "ACTIVE_ONLY", "max_results": 1,
                "order_by": [f"attributes.start_time {order}"]}
        runs = _rest_search(creds, body).get("runs", [])
        if not runs:
            return []
        ends.append(int(runs[0]["info"].get("start_time", 0)))
    lo, hi = ends
    n = max(1, min(_REST_SLICES, hi - lo + 1))
    cuts = sorted({lo + (hi - lo + 1) * i // n for i in range(1, n)})
    bounds = [None, *cuts, None]
    filters = []
    for below, above in itertools.pairwise(bounds):
        parts = [] if below is None else [f"attributes.start_time >= {below}"]
        parts += [] if above is None else [f"attributes.start_time < {above}"]
        filters.append(" AND ".join(parts))
    return filters


def _read_rest(
    uri: str,
    experiment_name: str,
    tag_names: list[str],
    param_names: list[str],
    metric_names: list[str],
    attr_names: list[str],
) -> _Raw:
    """Read a tracking server's runs through its REST API, the slices of the experiment concurrently.

    MLflow's ``runs/search`` cannot leave anything out: every run comes with all its params, tags
    and latest metrics, and the server spends about as much time per run whatever the page size
    (measured on the bench store, on a 2-core machine shared with other jobs: about 3 ms of CPU
    per run, two thirds loading the run and one third writing JSON, for pages of 250 to 4,000).
    ``MlflowClient.search_runs`` asks for one page after another and turns the answer into
    protobuf messages and entities; here the experiment is split by start time into disjoint
    slices (:func:`_rest_slices`) whose pages are fetched by ``_REST_THREADS`` threads at once,
    ``_REST_PAGE`` runs a request (short requests: a uvicorn worker that does not answer its
    supervisor's health check for 5 s is killed, and with it a long request), and the JSON is read
    as plain dicts. The frame is the one :func:`_read_client` reads (a test compares them).
    """
    from concurrent.futures import ThreadPoolExecutor

    from mlflow.tracking import MlflowClient
    from mlflow.tracking._tracking_service.utils import _get_store

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment_name)
    if exp is None:
        raise QueryError(f"No experiment named {experiment_name!r} in {_redact(uri)}.")
    if exp.lifecycle_stage != "active":
        raise QueryError(f"Experiment {experiment_name!r} in {_redact(uri)} is deleted.")
    creds = _get_store(uri).get_host_creds()
    experiment_id = str(exp.experiment_id)

    def fetch(filter_string: str) -> list[dict[str, Any]]:
        body: dict[str, Any] = {"experiment_ids": [experiment_id], "filter": filter_string,
                                "run_view_type": "ACTIVE_ONLY", "max_results": _REST_PAGE}
        out: list[dict[str, Any]] = []
        while True:
            page = _rest_search(creds, body)
            out.extend(page.get("runs", []))
            token = page.get("next_page_token")
            if not token:
                return out
            body["page_token"] = token

    slices = _rest_slices(creds, experiment_id)
    with ThreadPoolExecutor(max_workers=min(_REST_THREADS, max(1, len(slices)))) as pool:
        pages = list(pool.map(fetch, slices))
    seen: set[str] = set()
    infos: list[_Info] = []
    tags: list[dict[str, str]] = []
    params: list[dict[str, str]] = []
    metrics: list[dict[str, float]] = []
    for run in itertools.chain.from_iterable(pages):
        info = _info_from_json(run.get("info", {}))
        if info.run_id in seen:  # a run cannot be in two slices; keep one copy should it be
            continue
        seen.add(info.run_id)
        data = run.get("data", {})
        infos.append(info)
        tags.append({t["key"]: t.get("value", "") for t in data.get("tags", ())})
        params.append({t["key"]: t.get("value", "") for t in data.get("params", ())})
        metrics.append({m["key"]: float(m.get("value", 0.0)) for m in data.get("metrics", ())})
    return _raw_from_runs(
        client, experiment_id, infos, tags, params, metrics, tag_names, param_names, metric_names, attr_names
    )


# --------------------------------------------------------------------------------------------------
# read_runs


def read_runs(
    tracking_uri: str | None,
    experiment_name: str,
    metric_keys: Sequence[str],
    seed_key: str = "tags." + keys.TAG_SEED,
    group_by: Sequence[str] = (),
    extra_keys: Sequence[str] = (),
    filter_kind: str | None = AUTO,
    *,
    backend: str = AUTO,
    require_seed: bool = True,
    require_metrics: bool = True,
) -> pd.DataFrame:
    """One row per lifecycle-active run of ``experiment_name``, with the requested values only.

    Args:
        tracking_uri: MLflow tracking URI; ``None`` uses ``mlflow.get_tracking_uri()`` (which honours
            ``MLFLOW_TRACKING_URI``). SQL URIs (``sqlite``, ``postgresql``, ``mysql``, ``mssql``) are
            read directly from MLflow's tables; ``http(s)://`` tracking servers through their
            ``runs/search`` endpoint, concurrently; anything else (``databricks``, ``file:`` or a
            plain path) through ``MlflowClient.search_runs``.
        experiment_name: the experiment.
        metric_keys: metric names (``accuracy/calibration``; a ``metrics.`` prefix is dropped); each
            becomes a float column holding the run's latest value (NaN when absent), plus a bool
            column ``logged[<key>]`` saying whether the run logged it at all (a logged NaN is NaN
            with ``logged`` True).
        seed_key: where the seed is, in MLflow naming (``tags.recipe_audit.seed``, ``params.seed``).
        group_by: keys (MLflow naming) whose values, with the recipe identity, define a cell; one
            column each, named as given.
        extra_keys: more keys (MLflow naming) to carry along as columns.
        filter_kind: which runs become rows. ``"auto"`` (default): if any run of the experiment is
            tagged ``recipe_audit.kind=rerun``, those runs; otherwise (runs logged by the user's own
            code) every run without a ``recipe_audit.kind`` tag that is not the parent of another
            run (so the card runs recipe_audit logs into a user's experiment never hide the user's
            runs). Another string: the runs of that kind. ``None``: every active run.
        backend: ``"auto"`` (by URI), ``"sql"`` (SQL URIs only), ``"rest"`` (``http(s)://``
            tracking servers only) or ``"client"`` (any URI).
        require_seed: raise when some rows have no value under ``seed_key`` (default); when False
            they keep ``seed=None`` (and :func:`collect_reruns` refuses them).
        require_metrics: raise when no selected run logged one of ``metric_keys`` (default); when
            False such a metric is an all-NaN column with ``logged`` False (a card on an audit set
            no recipe was scored on is then refused per cell: a card is valid only
            for the audit set it was computed on).

    Returns:
        A DataFrame sorted by (start_time, run_id), with columns ``run_id``, ``run_name``,
        ``status`` (FINISHED/FAILED/KILLED/RUNNING/SCHEDULED), ``start_time``, ``end_time`` (ms since
        the epoch, nullable Int64), ``parent_run_id``, ``seed`` (the raw value under ``seed_key``: a
        str for params and tags), ``recipe_id`` (the tag), ``sweep_id`` and ``planned_seeds`` (the
        parent run's ``recipe_audit.sweep_id`` tag and its ``recipe_audit.planned_seeds`` tag parsed
        to a tuple of ints), ``error`` (the ``recipe_audit.error`` tag of a run that did not finish),
        one float column per metric key, one ``logged[<key>]`` column per metric key, then one
        column per group_by and extra key (float for ``metrics.X``, else object). Absent values
        are None in object columns. MLflow's SQL stores write +/-inf as +/-DBL_MAX; both read back
        as +/-inf. ``frame.attrs`` holds ``experiment``, ``experiment_id``, ``uri`` (password
        removed), ``metric_keys``, ``seed_key``, ``group_by``, ``extra_keys`` and ``path`` (the
        path that read it: ``"sql"``, ``"rest"`` or ``"client"``).

    Raises:
        QueryError: unknown or deleted experiment, an experiment without runs, no run of the
            requested kind, a metric key no selected run has, a seed key missing on some runs, a
            malformed key, an unreadable ``planned_seeds`` tag, or a database without MLflow's tables.
    """
    uri = _resolve_uri(tracking_uri)
    metric_keys, group_by, extra_keys = (
        [k] if isinstance(k, str) else list(k) for k in (metric_keys, group_by, extra_keys)
    )
    metric_names = list(dict.fromkeys(_metric_name(k) for k in metric_keys))
    if not metric_names:
        raise QueryError("Ask for at least one metric key.")
    seed = _parse_key(seed_key)
    group_keys = [_parse_key(k) for k in dict.fromkeys(group_by)]
    extra = [_parse_key(k) for k in dict.fromkeys(extra_keys) if k not in group_by]
    tag_names, param_names, metric_all, attr_names = _needed(metric_names, [seed, *group_keys, *extra])

    if backend == AUTO:
        backend = "sql" if is_sql_uri(uri) else "rest" if _is_http_uri(uri) else "client"
    if backend == "sql":
        if not is_sql_uri(uri):
            raise QueryError(f"The SQL path needs a database URI, not {_redact(uri)}.")
        raw = _read_sql(uri, experiment_name, tag_names, param_names, metric_all, attr_names)
    elif backend == "rest":
        if not _is_http_uri(uri):
            raise QueryError(f"The REST path needs an http(s) tracking server URI, not {_redact(uri)}.")
        raw = _read_rest(uri, experiment_name, tag_names, param_names, metric_all, attr_names)
    elif backend == "client":
        raw = _read_client(uri, experiment_name, tag_names, param_names, metric_all, attr_names)
    else:
        raise QueryError(f"Unknown backend {backend!r}; use 'auto', 'sql', 'rest' or 'client'.")
    frame = _frame(
        raw, uri, experiment_name, metric_names, seed, [*group_keys, *extra], filter_kind, require_seed,
        require_metrics,
    )
    frame.attrs.update(
        experiment=experiment_name,
        experiment_id=raw.experiment_id,
        uri=_redact(uri),
        metric_keys=tuple(metric_names),
        seed_key=seed.text,
        group_by=tuple(k.text for k in group_keys),
        extra_keys=tuple(k.text for k in extra),
        path=backend,
    )
    return frame


def _frame(
    raw: _Raw,
    uri: str,
    experiment: str,
    metric_names: list[str],
    seed: _Key,
    other_keys: list[_Key],
    filter_kind: str | None,
    require_seed: bool,
    require_metrics: bool = True,
) -> pd.DataFrame:
    """Select the rows (kind filter), check them, and lay out the frame; shared by both paths."""
    cols = raw.columns
    n_all = len(cols["run_id"])
    if n_all == 0:
        raise QueryError(f"Experiment {experiment!r} has no runs.")
    kind = cols[f"tags.{keys.TAG_KIND}"]
    parent = cols[f"tags.{keys.TAG_PARENT}"]
    if filter_kind == AUTO:
        keep = kind == keys.KIND_RERUN
        wanted = (
            f"no rerun: none is tagged {keys.TAG_KIND}={keys.KIND_RERUN}, and none is an untagged run "
            "that is not the parent of another run"
        )
        if not keep.any():  # the user's own runs; recipe_audit's sweeps and cards are not among them
            parents = {p for p in parent.tolist() if p}
            keep = np.equal(kind, None) & np.array(
                [r not in parents for r in cols["run_id"].tolist()], dtype=bool
            )
    elif filter_kind is None:
        keep = np.ones(n_all, dtype=bool)
        wanted = ""
    else:
        keep = kind == filter_kind
        wanted = f"none tagged {keys.TAG_KIND}={filter_kind}"
    idx = np.flatnonzero(keep)
    if len(idx) == 0:
        runs = "run" if n_all == 1 else "runs"
        raise QueryError(f"Experiment {experiment!r} has {n_all} {runs} but {wanted}.")
    start_all = _int_array(cols["start_time"])
    idx = idx[_by_start_then_id(start_all[idx].to_numpy(dtype=np.int64, na_value=-1), cols["run_id"][idx])]

    def take(name: str) -> np.ndarray:
        return cols[name][idx]

    run_ids = take("run_id")
    for name in metric_names if require_metrics else ():
        if not take(f"logged.{name}").any():
            # the metrics of the runs a card would read (the user's), not every run's of the experiment
            existing = _keys_of_runs(uri, raw, "metrics", run_ids.tolist())
            have = f"; metrics logged there: {_listing(existing)}" if existing else "; no run there logged any metric"
            raise QueryError(f"No run in experiment {experiment!r} has the metric {name!r}{have}.")

    if seed.kind == "metrics":
        seeds = _objects(
            v if ok else None
            for v, ok in zip(
                take(f"metrics.{seed.name}").tolist(), take(f"logged.{seed.name}").tolist(), strict=True
            )
        )
    else:
        seeds = take(f"{seed.kind}.{seed.name}")
        seeds[seeds == ""] = None
    missing = run_ids[np.equal(seeds, None)]
    if len(missing) and require_seed:
        if len(missing) == len(run_ids):
            raise QueryError(
                f"None of the {len(run_ids)} runs in experiment {experiment!r} has the seed key {seed.text!r}"
                f"{_seed_candidates(uri, raw, seed, run_ids.tolist())}."
            )
        raise QueryError(
            f"{len(missing)} of {len(run_ids)} runs in experiment {experiment!r} lack the seed key "
            f"{seed.text!r} (for example run {missing[0]})."
        )

    parents_of = take(f"tags.{keys.TAG_PARENT}")
    sweep_of = {pid: sweep for pid, (sweep, _planned) in raw.parents.items()}
    planned_of = {pid: _parse_planned(planned, pid) for pid, (_sweep, planned) in raw.parents.items()}
    parent_codes, found_parents = pd.factorize(parents_of)
    parent_ids = found_parents.tolist()
    status = take("status")
    error = np.full(len(idx), None, dtype=object)
    if raw.errors:
        for i in np.flatnonzero(status != "FINISHED").tolist():
            error[i] = raw.errors.get(run_ids[i])

    def obj(values: np.ndarray) -> pd.Series:
        return pd.Series(values, dtype=object, copy=False)

    out: dict[str, Any] = {
        "run_id": obj(run_ids),
        "run_name": obj(take("run_name")),
        "status": obj(status),
        "start_time": start_all[idx],
        "end_time": _int_array(take("end_time")),
        "parent_run_id": obj(parents_of),
        "seed": obj(seeds),
        "recipe_id": obj(take(f"tags.{keys.TAG_RECIPE_ID}")),
        "sweep_id": obj(_lookup(parent_codes, parent_ids, sweep_of)),
        "planned_seeds": obj(_lookup(parent_codes, parent_ids, planned_of)),
        "error": obj(error),
    }
    for name in metric_names:
        out[name] = take(f"metrics.{name}")
    for name in metric_names:
        out[f"logged[{name}]"] = take(f"logged.{name}")
    for k in other_keys:
        if k.text not in out:
            values = take(f"{k.kind}.{k.name}")
            out[k.text] = values if k.kind == "metrics" else obj(values)
    return pd.DataFrame(out)


def _seed_candidates(uri: str, raw: _Raw, seed: _Key, run_ids: list[str]) -> str:
    """What a wrong seed key could have been: the runs' params (and their tags or metrics when
    the key named one of those), keys with "seed" in their name first."""
    kinds = ["params"] + ([seed.kind] if seed.kind in ("tags", "metrics") else [])
    found = [f"{kind}.{k}" for kind in kinds for k in _keys_of_runs(uri, raw, kind, run_ids)]
    if not found:
        return "; they have no params" if kinds == ["params"] else f"; they have no params or {seed.kind}"
    found.sort(key=lambda k: "seed" not in k.lower())  # stable: otherwise in kind, then name order
    return f"; the {' and '.join(kinds)} there: {_listing(found, 8)}"


def _int_array(values: np.ndarray) -> pd.arrays.IntegerArray:
    """Object array of ints and None -> nullable Int64."""
    mask = np.equal(values, None)
    return pd.arrays.IntegerArray(np.where(mask, 0, values).astype(np.int64), mask)


def _lookup(codes: np.ndarray, ids: list[Any], table: dict[str, Any]) -> np.ndarray:
    """``table[ids[code]]`` for each code of ``pd.factorize`` (None for code -1 or unknown ids)."""
    found = np.empty(len(ids) + 1, dtype=object)
    found[:] = [table.get(u) for u in ids] + [None]
    return found[codes]  # code -1 (None) picks the trailing None


def _by_start_then_id(start: np.ndarray, run_ids: np.ndarray) -> np.ndarray:
    """Order of rows by (start time, run id); the run ids are compared only when start times tie."""
    order = np.argsort(start, kind="stable")
    if len(order) > 1 and not np.all(np.diff(start[order]) > 0):
        order = np.lexsort((run_ids.astype(str), start))
    return order


def _parse_planned(value: str | None, parent_id: str) -> tuple[int, ...] | None:
    if value is None:
        return None
    try:
        seeds = json.loads(value)
        if not isinstance(seeds, list):
            raise ValueError
        out = []
        for s in seeds:
            if isinstance(s, bool) or not isinstance(s, (int, str)):
                raise ValueError
            out.append(int(s))
    except ValueError as exc:
        raise QueryError(
            f"Run {parent_id} has an unreadable {keys.TAG_PLANNED_SEEDS} tag {value[:80]!r} "
            "(expected a JSON list of ints)."
        ) from exc
    return tuple(out)


# --------------------------------------------------------------------------------------------------
# RerunSet and collect_reruns


def _norm_seed(value: Any) -> int | float | str:
    """A seed as an int when it is one (``"7"``, ``7.0``), else as given."""
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        f = float(value)
        return int(f) if f.is_integer() else f
    s = str(value).strip()
    try:
        return int(s)
    except ValueError:
        pass
    try:
        f = float(s)
    except ValueError:
        return s
    return int(f) if f.is_integer() else s


def _seed_order(seed: int | float | str) -> tuple[int, Any]:
    return (1, seed) if isinstance(seed, str) else (0, seed)


class Duplicate(NamedTuple):
    """A seed logged by more than one run of one cell, and how it was resolved.

    A *result* of a seed is a run that FINISHED and logged the metric (a finite value, or NaN/inf,
    which fails every bar). A re-run seed is another draw from the recipe, not a second chance: the
    seed counts its worst result (the lowest value, the highest for a lower-is-better metric; a
    non-finite value is worse than any), so it fails a bar when ANY of its results fails it. Runs
    that are not results (failed, killed, still running, finished without logging the metric) are
    attempts, not draws: a killed attempt followed by a finished rerun counts the finished one. A
    seed without any result counts its most recent run, unfinished.

    Fields:
        seed: the seed.
        run_ids: its runs, oldest first (by start time, then run id).
        values: the metric each run logged, NaN when absent.
        results: per run, whether it is a result (FINISHED with the metric logged).
        decided_by: the run the seed counts (the chosen run of :attr:`RerunSet.run_ids`).
        higher_is_better: direction of the metric.
    """

    seed: Any
    run_ids: tuple[str, ...]
    values: tuple[float, ...]
    results: tuple[bool, ...]
    decided_by: str
    higher_is_better: bool = True

    @property
    def counted_value(self) -> float:
        """The value of the run the seed counts (NaN when it is not a result)."""
        i = self.run_ids.index(self.decided_by)
        return self.values[i] if self.results[i] else math.nan

    def counts_as(self, tau: float) -> str:
        """What the seed is at ``tau``: ``fail``, ``pass``, or ``unfinished`` (no result)."""
        i = self.run_ids.index(self.decided_by)
        if not self.results[i]:
            return "unfinished"
        return "fail" if _fails(self.values[i], tau, self.higher_is_better) else "pass"

    def result_values(self) -> tuple[float, ...]:
        """The values of the seed's results, oldest first."""
        return tuple(v for v, ok in zip(self.values, self.results, strict=True) if ok)

    @property
    def nondeterministic(self) -> bool:
        """Whether the seed's results differ (non-deterministic training)."""
        return len({_value_key(v) for v in self.result_values()}) > 1

    def fails(self, tau: float) -> list[bool]:
        """Per result (in :meth:`result_values` order): does it fail the bar ``tau``?"""
        return [_fails(v, tau, self.higher_is_better) for v in self.result_values()]

    def disagrees(self, tau: float) -> bool:
        """Whether the seed's results disagree about the bar ``tau`` (some fail it, some pass):
        the seed then counts as failing, decided by :attr:`decided_by`."""
        verdicts = set(self.fails(tau))
        return len(verdicts) > 1


def _value_key(v: float) -> Any:
    return v if math.isfinite(v) else repr(v)


def _fails(value: float, tau: float, higher_is_better: bool) -> bool:
    """A result fails ``tau`` when it is non-finite or on the wrong side of the bar (equal passes)."""
    if not math.isfinite(value):
        return True
    return value < tau if higher_is_better else value > tau


def _badness(value: float, higher_is_better: bool) -> tuple[int, float]:
    """Sort key of a result: larger is worse (non-finite worst of all)."""
    if not math.isfinite(value):
        return (1, 0.0)
    return (0, -value if higher_is_better else value)


@dataclass(frozen=True, eq=False)
class RerunSet:
    """The reruns of one cell (recipe identity x group_by values), one result per seed.

    Fields:
        group: group_by key -> value of this cell.
        recipe_id: the ``recipe_audit.recipe_id`` tag, or None for runs without it (their identity
            is then their group_by values).
        metric_key: the metric resolved.
        seeds: the distinct seeds, sorted (ints where the seed is an integer), including planned
            seeds that no run logged.
        values: float array aligned with ``seeds``; the metric of the seed's chosen run, NaN when the
            seed is unfinished (read-only).
        run_ids: the chosen run per seed, None for a never-logged seed.
        statuses: MLflow status of the chosen run per seed (``NEVER_LOGGED`` when there is none).
        unfinished: (seed, reason, run_id or None) for every unfinished seed, reason in
            :data:`REASONS`.
        duplicates: a :class:`Duplicate` for every seed logged by more than one run (its runs,
            values, which of them are results, and the run the seed counts).
        disagreeing_duplicates: seeds whose results (FINISHED, metric logged) differ
            (non-determinism); whether they disagree about a bar is :meth:`Duplicate.disagrees`.
        sweep_run_ids: parent runs of this cell's runs.
        planned_seeds: the planned seeds that applied (from the argument or the parents' tags).
        higher_is_better: direction of the metric (used by :meth:`failures`).
        experiment: experiment name when known.
    """

    group: dict[str, Any]
    recipe_id: str | None
    metric_key: str
    seeds: tuple[Any, ...]
    values: np.ndarray
    run_ids: tuple[str | None, ...]
    statuses: tuple[str, ...]
    unfinished: tuple[tuple[Any, str, str | None], ...]
    duplicates: tuple[Duplicate, ...]
    disagreeing_duplicates: tuple[Any, ...]
    sweep_run_ids: tuple[str, ...]
    planned_seeds: tuple[Any, ...] = ()
    higher_is_better: bool = True
    experiment: str | None = None

    @property
    def n(self) -> int:
        """Number of distinct seeds launched or planned (the card's N: a planned seed that never
        logged counts, or the card would be biased toward success)."""
        return len(self.seeds)

    @property
    def finished_values(self) -> np.ndarray:
        """Metrics of the finished seeds (finite values only), in seed order."""
        return self.values[np.isfinite(self.values)]

    def failures(self, tau: float) -> int:
        """The card's k: seeds whose metric is below ``tau`` (above it when lower is better), plus
        every unfinished seed."""
        done = self.finished_values
        bad = int(np.count_nonzero(done < tau if self.higher_is_better else done > tau))
        return bad + len(self.unfinished)

    def digest(self) -> str:
        """sha256 (hex) of the resolved results, to check a card against the store later.

        The hashed text is, for each seed in ``seeds`` order, ``json.dumps([seed, run_id,
        repr(float(value))])`` followed by a newline, UTF-8 encoded.
        """
        rows = list(zip(self.seeds, self.run_ids, map(repr, map(float, self.values.tolist())), strict=True))
        return hashlib.sha256(_digest_text(rows).encode("utf-8")).hexdigest()


def _digest_text(rows: list[tuple[Any, Any, str]]) -> str:
    """``json.dumps([seed, run_id, value_repr]) + "\\n"`` for each row, joined: one ``json.dumps``
    of all the rows (``"[" + ", ".join(row texts) + "]"``) with the separators between rows turned
    into newlines. A row's own text can hold ``"], ["`` only inside a string; when the count of
    ``"], ["`` shows one, each row is written alone (the same text)."""
    if not rows:
        return ""
    whole = json.dumps(rows)
    if whole.count("], [") == len(rows) - 1:
        return whole[1:-1].replace("], [", "]\n[") + "\n"
    return "".join(json.dumps(list(r)) + "\n" for r in rows)


def _reason(status: str, logged: bool, value: float, start: int | None, now_ms: int, stale_ms: float) -> str:
    """Why a chosen run does not count as finished (it is not FINISHED with a finite metric)."""
    if status == "FINISHED":
        return "nan-metric" if logged and not math.isfinite(value) else "missing-metric"
    if status == "FAILED":
        return "failed"
    if status == "KILLED":
        return "killed"
    # RUNNING or SCHEDULED
    if start is not None and now_ms - start > stale_ms:
        return "stale-running"
    return "running"


def collect_reruns(
    frame: pd.DataFrame,
    metric_key: str,
    higher_is_better: bool = True,
    planned_seeds: Iterable[Any] | None = None,
    stale_after_s: float = 86400,
    now_ms: int | None = None,
    *,
    group_by: Sequence[str] | None = None,
) -> list[RerunSet]:
    """Group the rows of :func:`read_runs` into cells and resolve each to one result per seed.

    A cell is (recipe identity, values of the group_by keys). The recipe identity is the
    ``recipe_id`` column (the ``recipe_audit.recipe_id`` tag); runs without it (bring-your-own runs)
    take the identity of their group_by values. Runs of two identities are never pooled: runs with
    equal group_by values but different recipe ids are separate cells, and so are runs with and
    without a recipe id.

    Per seed, the chosen run is the seed's worst *result* (a FINISHED run that logged the metric):
    the lowest value (the highest when lower is better), a NaN/inf value being worse than any, ties
    going to the most recent run (by start time, then run id). A re-run seed is another draw, not a
    second chance, so the seed fails a bar when any of its results fails it; runs that are not
    results (failed, killed, running, metric never logged) are attempts and never outvote a result
    (see :class:`Duplicate`). When a seed has no result, the chosen run is its most recent run,
    and the seed is unfinished with reason
    ``failed`` (FAILED), ``killed`` (KILLED), ``running`` / ``stale-running`` (RUNNING or SCHEDULED,
    started less / more than ``stale_after_s`` before ``now_ms``), ``nan-metric`` (FINISHED, metric
    NaN or +/-inf) or ``missing-metric`` (FINISHED, metric never logged). Planned seeds no run logged
    are added as ``never-logged`` (run id None, value NaN). Planned seeds are ``planned_seeds`` when
    given (for every cell), else the union of the ``planned_seeds`` column (the sweep parents' tags)
    over the cell's runs. Seeds compare as ints when they are integers (``"7"`` == ``7``).

    Args:
        frame: output of :func:`read_runs` (needs ``run_id``, ``status``, ``start_time``, ``seed``,
            ``recipe_id``, the metric column and the group_by columns; ``parent_run_id``,
            ``planned_seeds`` and ``logged[<metric>]`` are used when present; without
            ``logged[<metric>]`` a NaN metric counts as missing).
        metric_key: the metric column.
        higher_is_better: direction: which result of a re-run seed is the worst, and the
            comparison of :meth:`RerunSet.failures`.
        planned_seeds: seeds planned for every cell, overriding the parents' tags.
        stale_after_s: age after which a RUNNING run counts as stale.
        now_ms: the present, in ms since the epoch (default: now).
        group_by: group_by keys (default: those :func:`read_runs` recorded in ``frame.attrs``).

    Returns:
        One RerunSet per cell, sorted by (recipe_id, group values).

    Raises:
        QueryError: the metric or a group_by column is not in the frame, or a row has no seed.
    """
    metric = _metric_name(metric_key)
    if metric not in frame.columns:
        raise QueryError(f"The runs were read without the metric {metric!r}; pass it to read_runs.")
    group_cols = tuple(frame.attrs.get("group_by", ()) if group_by is None else group_by)
    for g in group_cols:
        if g not in frame.columns:
            raise QueryError(f"The runs were read without the group key {g!r}; pass it to read_runs.")
    if frame.empty:
        return []
    if frame["seed"].isna().any():
        n_missing = int(frame["seed"].isna().sum())
        raise QueryError(
            f"{n_missing} of {len(frame)} runs have no seed, so they cannot be resolved per seed."
        )
    now = int(time.time() * 1000) if now_ms is None else int(now_ms)
    stale_ms = float(stale_after_s) * 1000.0
    forced = (
        None
        if planned_seeds is None
        else tuple(sorted({_norm_seed(s) for s in planned_seeds}, key=_seed_order))
    )

    n_rows = len(frame)
    run_id = frame["run_id"].to_numpy(dtype=object)
    status = frame["status"].to_numpy(dtype=object)
    start = frame["start_time"].astype("Float64").to_numpy(dtype=float, na_value=np.nan)
    value = frame[metric].to_numpy(dtype=float)
    logged_col = f"logged[{metric}]"
    logged = frame[logged_col].to_numpy(dtype=bool) if logged_col in frame.columns else ~np.isnan(value)
    parent = _column(frame, "parent_run_id", n_rows)
    planned_col = _column(frame, "planned_seeds", n_rows)
    recipe = _column(frame, "recipe_id", n_rows)

    # seeds as ints where they are integers, ranked in seed order
    seed_codes, seed_uniques = pd.factorize(frame["seed"].to_numpy(dtype=object))
    normalized_uniques = [_norm_seed(v) for v in seed_uniques.tolist()]
    uniq = sorted(set(normalized_uniques), key=_seed_order)
    rank_of = {v: i for i, v in enumerate(uniq)}
    seed_rank = np.array([rank_of[v] for v in normalized_uniques], dtype=np.int64)[seed_codes]

    # cells: (recipe identity, group values), numbered in sorted order of their keys
    key_columns = [recipe, *(frame[g].to_numpy(dtype=object) for g in group_cols)]
    combined = np.zeros(n_rows, dtype=np.int64)
    for column in key_columns:
        codes, uniques = pd.factorize(column)  # None and NaN -> -1
        codes = np.where(codes < 0, len(uniques), codes)
        combined = pd.factorize(combined * (len(uniques) + 1) + codes)[0]  # stays below n_rows
    _, cell_first, cell_raw = np.unique(combined, return_index=True, return_inverse=True)
    keys_of = [tuple(_cell_value(col[f]) for col in key_columns) for f in cell_first.tolist()]
    by_key = sorted(
        range(len(keys_of)),
        key=lambda i: tuple((v is not None, type(v).__name__, str(v)) for v in keys_of[i]),
    )
    cell_rank = np.empty(len(keys_of), dtype=np.int64)
    cell_rank[by_key] = np.arange(len(keys_of))
    cell = cell_rank[cell_raw]
    cell_keys = [keys_of[i] for i in by_key]  # key of cell number c

    # per (cell, seed): the row, or for a seed launched more than once the preferred row
    ok = (status == "FINISHED") & logged & np.isfinite(value)
    start_rank = np.where(np.isnan(start), -np.inf, start)
    order = np.lexsort((seed_rank, cell))
    c_sorted, s_sorted = cell[order], seed_rank[order]
    new_group = np.r_[True, (c_sorted[1:] != c_sorted[:-1]) | (s_sorted[1:] != s_sorted[:-1])]
    group_first = np.flatnonzero(new_group)
    group_last = np.r_[group_first[1:] - 1, n_rows - 1]
    chosen = order[group_first].copy()
    # a result: FINISHED with the metric logged (finite or not); the seed counts its worst result
    result = (status == "FINISHED") & logged
    hib = bool(higher_is_better)
    dup_rows: list[tuple[list[int], int]] = []  # a re-run seed's rows, oldest first, and its chosen row
    for g in np.flatnonzero(group_last > group_first).tolist():
        rows = sorted(
            order[group_first[g] : group_last[g] + 1].tolist(), key=lambda i: (start_rank[i], run_id[i])
        )
        chosen[g] = max(
            rows,
            key=lambda i: (bool(result[i]), _badness(float(value[i]), hib) if result[i] else (0, 0.0),
                           start_rank[i], run_id[i]),
        )
        dup_rows.append((rows, int(chosen[g])))
    chosen_cell = cell[chosen]
    cell_bounds = np.r_[0, np.flatnonzero(np.diff(chosen_cell)) + 1, len(chosen)]

    # everything per chosen run at once, then per cell only list slices
    chosen_seeds = [uniq[r] for r in seed_rank[chosen].tolist()]
    chosen_vals = np.where(ok[chosen], value[chosen], np.nan)
    chosen_ids = run_id[chosen].tolist()
    chosen_stats = status[chosen].tolist()
    unfinished_of: dict[int, list[tuple[Any, str, str | None]]] = {}
    for j in np.flatnonzero(~ok[chosen]).tolist():
        i = int(chosen[j])
        st = None if np.isnan(start[i]) else int(start[i])
        reason = _reason(status[i], bool(logged[i]), float(value[i]), st, now, stale_ms)
        unfinished_of.setdefault(int(cell[i]), []).append((chosen_seeds[j], reason, run_id[i]))
    duplicates_of: dict[int, list[Duplicate]] = {}
    disagree_of: dict[int, list[Any]] = {}
    for rows, decided in dup_rows:
        c = int(cell[rows[0]])
        seed = uniq[int(seed_rank[rows[0]])]
        dup = Duplicate(
            seed,
            tuple(run_id[i] for i in rows),
            tuple(float(value[i]) for i in rows),
            tuple(bool(result[i]) for i in rows),
            run_id[decided],
            hib,
        )
        duplicates_of.setdefault(c, []).append(dup)
        if dup.nondeterministic:
            disagree_of.setdefault(c, []).append(seed)
    parents_of = _members(cell, parent, by_identity=False)
    planned_of = _members(cell, planned_col, by_identity=True)
    planned_memo: dict[tuple[int, ...], tuple[Any, ...]] = {}  # ids of planned tuples -> their union

    experiment = frame.attrs.get("experiment")
    out: list[RerunSet] = []
    for c in range(len(cell_bounds) - 1):
        lo, hi = int(cell_bounds[c]), int(cell_bounds[c + 1])
        key = cell_keys[c]
        cell_seeds = chosen_seeds[lo:hi]
        vals = chosen_vals[lo:hi].copy()
        ids: list[str | None] = chosen_ids[lo:hi]
        stats: list[str] = chosen_stats[lo:hi]
        unfinished = unfinished_of.get(c, [])
        if forced is not None:
            planned = forced
        else:
            tuples = {id(p): p for p in planned_of.get(c, ())}
            memo_key = tuple(sorted(tuples))
            if memo_key not in planned_memo:
                union = {_norm_seed(seed) for p in tuples.values() for seed in p}
                planned_memo[memo_key] = tuple(sorted(union, key=_seed_order))
            planned = planned_memo[memo_key]
        never = set(planned).difference(cell_seeds)
        if never:
            for s in never:
                unfinished.append((s, "never-logged", None))
            merged = sorted(
                [(s, v, r, st) for s, v, r, st in zip(cell_seeds, vals.tolist(), ids, stats, strict=True)]
                + [(s, math.nan, None, NEVER_LOGGED) for s in never],
                key=lambda t: _seed_order(t[0]),
            )
            cell_seeds = [m[0] for m in merged]
            vals = np.array([m[1] for m in merged], dtype=float)
            ids = [m[2] for m in merged]
            stats = [m[3] for m in merged]
            position = {s: i for i, s in enumerate(cell_seeds)}
            unfinished.sort(key=lambda u: position[u[0]])
        vals.setflags(write=False)
        out.append(
            RerunSet(
                group=dict(zip(group_cols, key[1:], strict=True)),
                recipe_id=key[0],
                metric_key=metric,
                seeds=tuple(cell_seeds),
                values=vals,
                run_ids=tuple(ids),
                statuses=tuple(stats),
                unfinished=tuple(unfinished),
                duplicates=tuple(duplicates_of.get(c, ())),
                disagreeing_duplicates=tuple(disagree_of.get(c, ())),
                sweep_run_ids=tuple(sorted({p for p in parents_of.get(c, ()) if p})),
                planned_seeds=planned,
                higher_is_better=bool(higher_is_better),
                experiment=experiment,
            )
        )
    return out


def _members(cell: np.ndarray, values: np.ndarray, by_identity: bool) -> dict[int, list[Any]]:
    """Distinct non-None values of ``values`` per cell number (compared by identity or by value)."""
    if by_identity:
        ids = np.fromiter(map(id, values.tolist()), dtype=np.int64, count=len(values))
        uniq_ids, first = np.unique(ids, return_index=True)
        codes = np.searchsorted(uniq_ids, ids)
        distinct = values[first]
    else:
        codes, found = pd.factorize(values)  # None -> -1
        codes = np.where(codes < 0, len(found), codes)
        distinct = np.empty(len(found) + 1, dtype=object)
        distinct[:] = [*found.tolist(), None]
    width = len(distinct)
    out: dict[int, list[Any]] = {}
    for pair in np.unique(cell * width + codes).tolist():
        c, k = divmod(pair, width)
        if distinct[k] is not None:
            out.setdefault(c, []).append(distinct[k])
    return out


def _column(frame: pd.DataFrame, name: str, n_rows: int) -> np.ndarray:
    if name in frame.columns:
        return frame[name].to_numpy(dtype=object)
    return np.full(n_rows, None, dtype=object)


def _cell_value(v: Any) -> Any:
    """Group values as hashable cell keys: NaN and None are the same (absent)."""
    if v is None:
        return None
    if isinstance(v, float) and math.isnan(v):
        return None
    return v


def check_single_recipe(cells: Sequence[RerunSet], where: str | None = None) -> None:
    """Raise :class:`QueryError` unless every cell belongs to one recipe identity.

    For the command-line path that makes one card: the identity of a cell is its recipe id, or its
    group values when it has none. ``where`` names the place in the message (default: the
    experiment recorded on the cells).
    """
    if not cells:
        raise QueryError("There are no reruns to make a card from.")
    identities = {
        c.recipe_id if c.recipe_id is not None else ("group", tuple(sorted(c.group.items(), key=str)))
        for c in cells
    }
    if len(identities) > 1:
        if where is None:
            exp = cells[0].experiment
            where = f"experiment {exp!r}" if exp else "these runs"
        raise QueryError(
            f"Runs of {len(identities)} recipes are mixed in {where}; group them with --group-by "
            "or pick one with --recipe-id."
        )
