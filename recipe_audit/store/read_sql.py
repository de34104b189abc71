"""Reading runs out of an SQL-backed MLflow store (``sqlite:``, ``postgresql:``, ``mysql:``,
``mssql:``): MLflow's own tables through SQLAlchemy Core, in a handful of queries in one snapshot.

SQLite, when the experiment is most of the store: whole-table scans (:func:`sqlite_scan`);
otherwise one wide SELECT with a LEFT JOIN per requested key (:func:`sql_joins`).

Over 400 lines, kept whole: the two plans (scans and joins) share the engine cache, MLflow's table
definitions and the assembly of columns into :class:`RawRuns`; each plan is one function.
"""

from __future__ import annotations

import itertools
import json
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from recipe_audit import keys
from recipe_audit.reruns import QueryError
from recipe_audit.store.raw_runs import ATTRIBUTES, RawRuns, floats, objects, redact

__all__ = ["SCAN_SHARE", "SQL_SCHEMES", "clear_engine_cache", "experiment_row", "keys_of_runs", "is_sql_uri", "read_history_sql",
           "read_params", "read_sql", "runs_of_experiment", "snapshot", "sql_joins", "sqlite_scan"]

_ID_CHUNK = 500  # run ids per IN (...) list
_JOINS_PER_QUERY = 40  # LEFT JOINs per SELECT (SQLite allows 64 tables in a join)
SCAN_SHARE = 0.25
"""SQLite: read whole tables when the experiment has at least this share of the store's runs."""
_SQLITE_MMAP_BYTES = 1 << 31  # SQLite read connections map up to this much of the file (SQLite caps it)
_PG_RANDOM_PAGE_COST = 1.1
"""PostgreSQL: the planner's ``random_page_cost`` in a read's own transaction (``SET LOCAL``; the
server's setting elsewhere). With the default 4 (a page read from a spinning disk) PostgreSQL joins
the runs of a 10,000-run experiment to their tags by hashing every run's tags of each key; in a
store that also holds a 100,000-run experiment that took about 3x the time and CPU of probing
MLflow's (key, run_uuid) indexes, which it chooses at 1.1 (pages in memory or on SSD, PostgreSQL's
own advice for those) and which gives the same rows (profiled on 2026-12-06 on bench_server_reads.py's
store, 7 interleaved rounds; docs/benchmarks.md, "Through the team server's app")."""

SQL_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")
"""URI schemes of the databases MLflow stores runs in (a driver may follow: ``postgresql+psycopg2``)."""


def is_sql_uri(uri: str) -> bool:
    """True when ``uri`` names a database MLflow stores runs in (read by the SQL fast path)."""
    scheme = uri.split(":", 1)[0].lower() if "://" in uri else ""
    return scheme.split("+", 1)[0] in SQL_SCHEMES


_ENGINES: dict[str, Any] = {}
_ENGINES_LOCK = threading.Lock()
_HAS_WORKSPACE: dict[str, bool] = {}  # URI -> experiments has MLflow 3's workspace column


def _engine(uri: str) -> Any:
    """One cached SQLAlchemy engine per URI, whose connections read one snapshot per transaction.

    SQLite: NullPool (no file handle outlives a call); each connection is read-only
    (``PRAGMA query_only``), reads the file through a memory map (``PRAGMA mmap_size``: pages are
    read in place instead of copied into SQLite's page cache; the table scans of
    :func:`sqlite_scan` on the 10,000-rerun bench store took about 30 % less time than with a
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


def _sql_tables() -> dict[str, Any]:
    import sqlalchemy as sa

    return {
        "experiments": sa.table(
            "experiments", sa.column("experiment_id"), sa.column("name"), sa.column("lifecycle_stage")
        ),
        "runs": sa.table("runs", *(sa.column(c) for c in sorted(set(ATTRIBUTES.values())))),
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


def experiment_row(conn: Any, uri: str, experiment_name: str) -> tuple[Any, str]:
    """(experiment id, lifecycle stage) of the experiment named ``experiment_name`` (in the active
    workspace where the store has workspaces); ``QueryError`` when there is none."""
    import sqlalchemy as sa

    exp = _sql_tables()["experiments"]
    where = [exp.c.name == experiment_name]
    if _experiment_has_workspace(_engine(uri), uri):
        where.append(sa.column("workspace") == _active_workspace())
    found = conn.execute(sa.select(exp.c.experiment_id, exp.c.lifecycle_stage).where(*where)).all()
    if not found:
        raise QueryError(f"No experiment named {experiment_name!r} in {redact(uri)}.")
    return found[0][0], found[0][1]


def runs_of_experiment(conn: Any, experiment_id: Any, run_ids: Sequence[str]) -> list[str]:
    """Those of ``run_ids`` that are runs of the experiment (any lifecycle stage), in their order."""
    import sqlalchemy as sa

    runs = _sql_tables()["runs"]
    mine: set[str] = set()
    ids = list(dict.fromkeys(run_ids))
    for i in range(0, len(ids), _ID_CHUNK):
        stmt = sa.select(runs.c.run_uuid).where(runs.c.experiment_id == experiment_id,
                                                runs.c.run_uuid.in_(ids[i : i + _ID_CHUNK]))
        mine.update(r for (r,) in conn.execute(stmt))
    return [r for r in run_ids if r in mine]


@contextmanager
def snapshot(uri: str, experiment_name: str | None = None) -> Iterator[Any]:
    """One connection to the store at ``uri`` reading one snapshot (one transaction): what is read
    through it, in any number of queries, is the store as it was at one moment. The database's
    errors become ``QueryError`` (one sentence); a SQLite file that does not exist is said so
    (naming ``experiment_name``, the one looked for) and not created."""
    import sqlalchemy as sa

    if uri.lower().startswith("sqlite"):
        database = sa.engine.make_url(uri).database
        if database and database != ":memory:" and not database.startswith("file:"):
            if not os.path.exists(database):
                looked_for = f"No experiment named {experiment_name!r}" if experiment_name else "No MLflow store"
                raise QueryError(f"{looked_for} in {redact(uri)} (no such file).")
    try:
        engine = _engine(uri)
    except (ImportError, sa.exc.ArgumentError) as exc:
        raise QueryError(f"Cannot open {redact(uri)}: {exc}.") from exc
    try:
        with engine.connect() as conn:
            if conn.dialect.name == "postgresql":
                conn.exec_driver_sql(f"SET LOCAL random_page_cost = {_PG_RANDOM_PAGE_COST}")
            yield conn
    except QueryError:
        raise
    except (sa.exc.SQLAlchemyError, sqlite3.Error) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise QueryError(f"Cannot read MLflow's tables in {redact(uri)}: {first}.") from exc


def read_sql(
    uri: str,
    experiment_name: str,
    tag_names: list[str],
    param_names: list[str],
    metric_names: list[str],
    attr_names: list[str],
    conn: Any = None,
) -> RawRuns:
    """Read through MLflow's tables: experiment, one wide SELECT, then the few parents and errors;
    through ``conn`` (a :func:`snapshot`) when given, else in a snapshot of its own."""

    if conn is None:
        with snapshot(uri, experiment_name) as own:
            return read_sql(uri, experiment_name, tag_names, param_names, metric_names, attr_names, own)
    t = _sql_tables()
    experiment_id, stage = experiment_row(conn, uri, experiment_name)
    if stage != "active":
        raise QueryError(f"Experiment {experiment_name!r} in {redact(uri)} is deleted.")
    raw = RawRuns(str(experiment_id), {}, keys_of=lambda kind, ids: keys_of_runs(uri, kind, ids))
    scanned = uri.lower().startswith("sqlite") and sqlite_scan(
        conn, int(experiment_id), tag_names, param_names, metric_names, attr_names, raw
    )
    if not scanned:
        sql_joins(conn, t, int(experiment_id), tag_names, param_names, metric_names, attr_names, raw)
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
    raw.parents, raw.curtailment = _sql_parents(conn, t, parent_ids)
    return raw


def sqlite_scan(
    conn: Any,
    experiment_id: int,
    tag_names: list[str],
    param_names: list[str],
    metric_names: list[str],
    attr_names: list[str],
    raw: RawRuns,
) -> bool:
    """SQLite, when the experiment holds most of the store's runs: read each table once, in order.

    SQLite runs the LEFT JOINs of :func:`sql_joins` as nested loops: per run and key, one search of
    the (key, run_uuid) index and one of the table for the value: profiled on the 10,000-rerun
    bench store, those joins were two thirds of ``read_runs`` + ``collect_reruns``. Reading
    ``runs``, ``tags`` and ``params`` front to back once each (``latest_metrics`` once per metric)
    and keeping the requested keys took about a third less time there. Strings come back as one
    JSON array per column, built by SQLite (``json_group_array``), so Python parses a few long
    strings instead of building a tuple per row (SQLite builds these arrays faster than the
    same values joined by ``group_concat``, measured); metric values come back as rows, because SQLite's float-to-text conversion
    does not always round-trip. Values are placed by run id; the frame is the one
    :func:`sql_joins` would read.

    Returns False, having read nothing into ``raw``, when the experiment holds less than
    ``SCAN_SHARE`` of the store's runs (the joins read less then) or when this SQLite lacks
    JSON functions.
    """
    base = {
        "run_id": "run_uuid",
        "run_name": "name",
        "status": "status",
        "start_time": "start_time",
        "end_time": "end_time",
        **{f"attributes.{a}": ATTRIBUTES[a] for a in attr_names},
    }
    mine = "experiment_id = ? AND lifecycle_stage = 'active'"
    db = conn.connection.driver_connection  # sqlite3's own rows: no SQLAlchemy Row per metric row
    (n_all,) = db.execute("SELECT count(*) FROM runs").fetchone()
    try:
        row = db.execute(
            f"SELECT count(*), {', '.join(f'json_group_array({c})' for c in base.values())} FROM runs WHERE {mine}",
            (experiment_id,),
        ).fetchone()
    except sqlite3.OperationalError:  # no JSON functions (SQLite built without them)
        return False
    if row[0] == 0 or row[0] < SCAN_SHARE * n_all:
        return False
    for name, text in zip(base, row[1:], strict=True):
        values = json.loads(text)
        if name == "attributes.experiment_id":
            values = [None if v is None else str(v) for v in values]
        raw.columns[name] = objects(values)
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
        # one scan, three arrays (which key, run, value): with a FILTER clause per key and array
        # SQLite would test every row once per key and array (bench/bench_query.py times this read)
        which = "CASE key " + " ".join(f"WHEN ? THEN {i}" for i in range(len(names))) + " END"
        row = db.execute(
            f"SELECT json_group_array({which}), json_group_array(run_uuid), json_group_array(value) "
            f"FROM {table} NOT INDEXED WHERE {' OR '.join('key = ?' for _ in names)}",
            (*names, *names),
        ).fetchone()
        codes = np.array(json.loads(row[0]), dtype=np.int64)
        where = place(json.loads(row[1]))
        found = objects(json.loads(row[2]))
        for i, name in enumerate(names):
            keep = (codes == i) & (where >= 0)
            out = np.full(n, None, dtype=object)
            out[where[keep]] = found[keep]
            raw.columns[f"{table}.{name}"] = out
    for name in metric_names:
        rows = db.execute(
            "SELECT run_uuid, value, is_nan FROM latest_metrics NOT INDEXED WHERE key = ?", (name,)
        ).fetchall()
        ids, values, is_nan = zip(*rows, strict=True) if rows else ((), (), ())
        where = place(list(ids))
        keep = where >= 0
        value = np.full(n, np.nan)
        value[where[keep]] = floats(values)[keep]
        logged = np.zeros(n, dtype=bool)
        logged[where[keep]] = True
        value[where[keep & (np.array(is_nan, dtype=float) == 1)]] = np.nan  # is_nan rows store 0
        raw.columns[f"metrics.{name}"] = value
        raw.columns[f"logged.{name}"] = logged
    return True


def sql_joins(
    conn: Any,
    t: dict[str, Any],
    experiment_id: int,
    tag_names: list[str],
    param_names: list[str],
    metric_names: list[str],
    attr_names: list[str],
    raw: RawRuns,
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
    ] + [r.c[ATTRIBUTES[a]].label(f"attributes.{a}") for a in attr_names]
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
                raw.columns[c.name] = objects(values)
            if len(chunks) > 1:
                position = {rid: i for i, rid in enumerate(columns[0])}
            perm = None
            j = len(base)
        else:
            perm = np.fromiter((position[rid] for rid in columns[0]), dtype=np.int64, count=len(rows))
            j = 1
        for kind, name in chunk:
            if kind == "metrics":
                value = floats(columns[j])  # NULL (not logged) -> NaN
                logged = ~np.isnan(value)  # MLflow's value column is NOT NULL
                value[np.array(columns[j + 1], dtype=float) == 1] = np.nan  # is_nan rows store 0
                _put(raw, f"metrics.{name}", value, perm)
                _put(raw, f"logged.{name}", logged, perm)
                j += 2
            else:
                _put(raw, f"{kind}.{name}", objects(columns[j]), perm)
                j += 1


def _put(raw: RawRuns, name: str, values: np.ndarray, perm: np.ndarray | None) -> None:
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
) -> tuple[dict[str, tuple[str | None, str | None]], dict[str, str]]:
    """(sweep id, planned seeds) tag values of the parent runs, whatever experiment they are in,
    and the curtailment tag of those that have one."""
    import sqlalchemy as sa

    tags = t["tags"]
    found: dict[str, dict[str, Any]] = {p: {} for p in parent_ids}
    for i in range(0, len(parent_ids), _ID_CHUNK):
        stmt = sa.select(tags.c.run_uuid, tags.c.key, tags.c.value).where(
            tags.c.key.in_([keys.TAG_SWEEP_ID, keys.TAG_PLANNED_SEEDS, keys.TAG_CURTAILMENT]),
            tags.c.run_uuid.in_(list(parent_ids[i : i + _ID_CHUNK])),
        )
        for rid, key, value in conn.execute(stmt):
            found[rid][key] = value
    parents = {p: (d.get(keys.TAG_SWEEP_ID), d.get(keys.TAG_PLANNED_SEEDS)) for p, d in found.items()}
    return parents, {p: d[keys.TAG_CURTAILMENT] for p, d in found.items() if d.get(keys.TAG_CURTAILMENT)}


def keys_of_runs(uri: str, kind: str, run_ids: list[str], conn: Any = None) -> set[str]:
    """The ``kind`` keys (``metrics``, ``params``, ``tags``) some of ``run_ids`` have (for messages);
    through ``conn`` (a :func:`snapshot`, the one the runs were read in) when given."""
    import sqlalchemy as sa

    if conn is None:
        with _engine(uri).connect() as own:
            return keys_of_runs(uri, kind, run_ids, own)
    table = _sql_tables()["latest_metrics" if kind == "metrics" else kind]
    found: set[str] = set()
    for i in range(0, len(run_ids), _ID_CHUNK):
        stmt = sa.select(table.c.key).distinct().where(table.c.run_uuid.in_(run_ids[i : i + _ID_CHUNK]))
        found.update(k for (k,) in conn.execute(stmt))
    return found


def read_params(
    uri: str, run_ids: Sequence[str], names: Sequence[str], conn: Any = None
) -> dict[str, dict[str, str]]:
    """The params ``names`` of each of ``run_ids`` (a name a run did not log is left out): a point
    read of a few runs, for what is needed of one run per cell only (a card's recipe summary);
    through ``conn`` (a :func:`snapshot`, the one the runs were read in) when given."""
    import sqlalchemy as sa

    if conn is None:
        with snapshot(uri) as own:
            return read_params(uri, run_ids, names, own)
    table = _sql_tables()["params"]
    out: dict[str, dict[str, str]] = {r: {} for r in run_ids}
    ids = list(out)
    for i in range(0, len(ids), _ID_CHUNK):
        stmt = sa.select(table.c.run_uuid, table.c.key, table.c.value).where(
            table.c.run_uuid.in_(ids[i : i + _ID_CHUNK]), table.c.key.in_(list(names))
        )
        for rid, key, value in conn.execute(stmt):
            out[rid][key] = value
    return out


def read_history_sql(uri: str, experiment_name: str, metric: str, tag_names: Sequence[str],
                     param_names: Sequence[str], conn: Any = None) -> dict[str, Any]:
    """What the release gate reads of an experiment (:func:`recipe_audit.store.history.read_history`),
    in SQL and one snapshot: every run, deleted ones included, in ``search_runs``' order (start
    time, newest first, then run id), with its tags ``tag_names`` and params ``param_names``,
    whether it logged ``metric``, whether it holds nothing (a run tagged as a retried request's
    copy: no param, no metric; False for the other runs), and the metric's every value in ``get_metric_history``'s order
    (timestamp, step, value; a NaN stored as such reads NaN, other values as stored). Returns the
    JSON-able form of :class:`recipe_audit.store.history.HistoryRead` (what the server app sends)."""
    import sqlalchemy as sa

    if conn is None:
        with snapshot(uri, experiment_name) as own:
            return read_history_sql(uri, experiment_name, metric, tag_names, param_names, own)
    t = _sql_tables()
    experiment_id, _stage = experiment_row(conn, uri, experiment_name)
    runs = sa.table("runs", *(sa.column(c) for c in ("run_uuid", "name", "status", "start_time", "end_time",
                                                      "lifecycle_stage", "experiment_id")))
    mine = sa.select(runs.c.run_uuid).where(runs.c.experiment_id == experiment_id).scalar_subquery()
    rows = conn.execute(
        sa.select(runs.c.run_uuid, runs.c.name, runs.c.status, runs.c.start_time, runs.c.end_time,
                  runs.c.lifecycle_stage)
        .where(runs.c.experiment_id == experiment_id)
        .order_by(runs.c.start_time.desc(), runs.c.run_uuid)
    ).all()
    out = {r[0]: [list(r), {}, {}, False, False, []] for r in rows}
    for kind, names, slot in (("tags", tag_names, 1), ("params", param_names, 2)):
        if names:
            table = t[kind]
            stmt = sa.select(table.c.run_uuid, table.c.key, table.c.value).where(
                table.c.key.in_(list(names)), table.c.run_uuid.in_(mine))
            for rid, key, value in conn.execute(stmt):
                out[rid][slot][key] = value
    latest = t["latest_metrics"]
    for (rid,) in conn.execute(sa.select(latest.c.run_uuid).where(latest.c.key == metric,
                                                                   latest.c.run_uuid.in_(mine))):
        out[rid][3] = True
    # a copy a retried request made holds nothing: asked of the runs tagged as such copies only
    copies = [rid for rid, run in out.items() if run[1].get(keys.TAG_KIND) == keys.KIND_DUPLICATE]
    if copies:
        held = {r for table in (t["params"], latest) for (r,) in conn.execute(
            sa.select(table.c.run_uuid).distinct().where(table.c.run_uuid.in_(copies)))}
        for rid in copies:
            out[rid][4] = rid not in held
    m = sa.table("metrics", *(sa.column(c) for c in ("run_uuid", "key", "value", "is_nan", "timestamp", "step")))
    stmt = (sa.select(m.c.run_uuid, m.c.value, m.c.is_nan, m.c.timestamp, m.c.step)
            .where(m.c.key == metric, m.c.run_uuid.in_(mine))
            .order_by(m.c.run_uuid, m.c.timestamp, m.c.step, m.c.value))
    for rid, value, is_nan, timestamp, step in conn.execute(stmt):
        if out[rid][3]:
            out[rid][5].append([float("nan") if is_nan else float(value), timestamp, step])
    return {"experiment_id": str(experiment_id), "runs": list(out.values())}
