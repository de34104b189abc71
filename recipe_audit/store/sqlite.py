"""A local SQLite store, made and kept the way several processes can share it safely.

A new store is made whole beside its place and linked there at once (:func:`create_store`), from
a copy of an empty store whose tables MLflow made once for this MLflow version (:func:`template`);
the first look at it is taken under a lock beside the file (:func:`store_lock`); it is switched to
SQLite's write-ahead log (:func:`write_ahead_log`), whose commits skip the disk sync
(:func:`commit_without_sync`) and whose log is folded back when a process is done with the store
(:func:`checkpoint_store`); the file this process opened is remembered (:func:`remember_file`),
so that a store deleted or replaced under a sweep is told (:func:`check_store_file`).
"""

from __future__ import annotations

import functools
import os
import shutil
import time
from contextlib import contextmanager
from pathlib import Path

from recipe_audit.store.errors import FileStoreRefused, StoreGone, TrackingError

PREFIX = "sqlite:///"


def is_sqlite(uri: str) -> bool:
    """Whether ``uri`` names a local SQLite store (``sqlite:///PATH``)."""
    return uri.startswith(PREFIX)


_SQLITE_FILES: dict[str, tuple[int, int]] = {}  # URI -> (device, inode) of the file this process opened


def remember_file(uri: str) -> None:
    """Remember which file ``uri`` is now (for :func:`check_store_file`), once a process; a
    process that wrote through the log folds it back as it exits, so the database file alone is
    whole once no one writes (a copy of mlflow.db, an archive)."""
    if not is_sqlite(uri) or uri in _SQLITE_FILES:
        return
    st = os.stat(uri[len(PREFIX):])
    _SQLITE_FILES[uri] = (st.st_dev, st.st_ino)
    import atexit

    atexit.register(checkpoint_store, uri)


#: Set to 1 (or true, yes) to create a local store as the umask says, for other users to read;
#: by default a store recipe_audit creates is its owner's alone.
SHARE_ENV = "RECIPE_AUDIT_SHARE_STORE"


def private_store() -> bool:
    """Whether a local store created now is readable by its owner only (the default; ``$RECIPE_AUDIT_SHARE_STORE``
    set to 1 keeps the umask's modes)."""
    return os.environ.get(SHARE_ENV, "").strip().lower() not in ("1", "true", "yes")


def make_store_dir(path: Path) -> None:
    """The folder of a local store (or its artifacts), created when missing: mode 0700 unless the
    store is shared (:func:`private_store`); a folder that exists is left as it is."""
    path = Path(path)
    if path.is_dir():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir(mode=0o700 if private_store() else 0o777)  # 0777: as the umask says
    except FileExistsError:
        return  # another process made it first


def create_store(uri: str) -> None:
    """A SQLite store that does not exist yet is made whole beside its place and linked there at
    once (``os.link`` refuses when the name exists): a process that opens the store afterwards,
    a plain ``MlflowClient`` too, finds every table at the latest revision and migrates nothing.
    When another process created the file first (MLflow creates and migrates it unlocked), its
    migration is waited for before MLflow looks at the file here: two migrations of one file
    break each other ("Online migration expected to match one row", "table ... already exists")."""
    db = Path(uri[len(PREFIX):])
    if not db.exists():
        tmp = db.with_name(f".{db.name}.{os.getpid()}.new")
        tmp.unlink(missing_ok=True)
        try:
            made = template()
            if made is not None:  # MLflow's tables at head, no experiment yet: MLflow adds its default one
                shutil.copyfile(made, tmp)
            else:
                from mlflow.tracking import MlflowClient

                MlflowClient(tracking_uri=f"sqlite:///{tmp}").search_experiments(max_results=1)  # every table, at head
            if private_store():  # before it is linked in place: SQLite gives its -wal and -shm files its mode
                os.chmod(tmp, 0o600)
            try:
                os.link(tmp, db)
            except FileExistsError:
                pass
        finally:
            tmp.unlink(missing_ok=True)
    _wait_for_migration(db)


#: Where :func:`template` keeps its empty stores, unless set: the user's cache folder.
CACHE_ENV = "RECIPE_AUDIT_CACHE_DIR"


def cache_dir() -> Path:
    """``$RECIPE_AUDIT_CACHE_DIR``, else the user's cache folder for recipe_audit
    (``~/.cache/recipe_audit`` on Linux)."""
    env = os.environ.get(CACHE_ENV, "").strip()
    if env:
        return Path(env)
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("recipe_audit", appauthor=False))


def template() -> Path | None:
    """An empty SQLite store with every MLflow table at the latest revision and no experiment, made
    once per MLflow version and schema revision in :func:`cache_dir` (MLflow's migrations take
    seconds; a copy, milliseconds). ``None`` when it cannot be made or read (a read-only cache
    folder, say): the caller then lets MLflow make the tables, as without it.

    The file holds MLflow's schema only: MLflow creates its ``Default`` experiment (artifact folder,
    creation time) when a process first opens the copy, as it does for a database it has just
    migrated, so a store made from it is the one MLflow makes (``tests/test_store_template.py``
    compares the two). It is checked before every use (the revision, the tables, no experiment or
    run in them) and made again beside its place and renamed over it when it does not pass; several
    processes making it at once each rename a whole file."""
    try:
        import mlflow

        head = schema_head()
        path = cache_dir() / f"mlflow-{mlflow.__version__}-{head}.db"
        if not _is_template(path, head):
            _make_template(path)
            if not _is_template(path, head):
                return None
        return path
    except Exception:  # noqa: BLE001 - no cache: MLflow makes the store's tables itself
        return None


@functools.cache
def schema_head() -> str:
    """The latest revision of MLflow's tables, as this MLflow's migrations name it: read once per
    process (alembic loads every migration script to find it, 15 ms each time)."""
    from mlflow.store.db.utils import _get_latest_schema_revision

    return _get_latest_schema_revision()


def _make_template(path: Path) -> None:
    from mlflow.store.db.utils import _initialize_tables, create_sqlalchemy_engine

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.new")
    tmp.unlink(missing_ok=True)
    try:
        engine = create_sqlalchemy_engine(f"sqlite:///{tmp}")
        try:
            _initialize_tables(engine)  # what MLflow's store does on a database without its tables
        finally:
            engine.dispose()
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _is_template(path: Path, head: str) -> bool:
    """Whether ``path`` is an empty MLflow store at revision ``head``: every table MLflow's models
    declare, no experiment and no run (the migrations' own rows, MLflow's default workspace, are
    kept), the file intact."""
    import sqlite3

    if not path.is_file():
        return False
    from mlflow.store.db.base_sql_model import Base

    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            if con.execute("PRAGMA quick_check").fetchone()[0] != "ok":
                return False
            tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not set(Base.metadata.tables) <= tables or "alembic_version" not in tables:
                return False
            if [r[0] for r in con.execute("SELECT version_num FROM alembic_version")] != [head]:
                return False
            return not any(con.execute(f"SELECT 1 FROM {t} LIMIT 1").fetchone() for t in ("experiments", "runs"))
        finally:
            con.close()
    except sqlite3.Error:
        return False


def _wait_for_migration(db: Path, quiet_s: float = 10.0, limit_s: float = 120.0) -> None:
    """Return once ``db``'s MLflow tables are at the latest revision, or the file has not changed
    for ``quiet_s`` seconds (an old store that needs ``mlflow db upgrade``: MLflow then says so)."""
    import sqlite3

    if time.time() - db.stat().st_mtime > quiet_s:  # a store no one is writing: nothing to wait for
        return
    head = schema_head()
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


def check_store_file(uri: str) -> None:
    """Raise :class:`TrackingError` when the SQLite file this process opened was deleted or
    replaced since. SQLite goes on writing into a deleted file's inode without a word, so a sweep
    would record its reruns and its card into nothing and exit 0."""
    opened = _SQLITE_FILES.get(uri)
    if opened is None:
        return
    db = uri[len(PREFIX):]
    try:
        st = os.stat(db)
        same = (st.st_dev, st.st_ino) == opened
    except OSError:
        same = False
    if not same:
        raise StoreGone(f"The tracking store {db} was deleted or replaced while this sweep was writing to it; "
                            "what the sweep recorded since is lost.")


def _pragma(uri: str, pragma: str) -> None:
    """Run one ``PRAGMA`` on a local SQLite store, best effort: a store that is busy or read-only
    works as it is (only slower, or with its log not yet folded in). Other stores: nothing."""
    if not is_sqlite(uri):
        return
    import sqlite3

    try:
        con = sqlite3.connect(uri[len(PREFIX):], timeout=5)
        try:
            con.execute(f"PRAGMA {pragma}")
        finally:
            con.close()
    except sqlite3.Error:
        pass


def write_ahead_log(uri: str) -> None:
    """Switch a local SQLite store to SQLite's write-ahead log (the mode is kept in the file; the
    pragma is a no-op on a store already in it).

    In its default rollback-journal mode SQLite syncs the disk several times a commit and a
    writer locks out readers; a rerun makes about a dozen commits (its run, its params, its
    metrics, its status), and parallel workers wait on each other's locks. With the log, a commit
    is one append and readers (``mlflow ui``, a card) do not block writers;
    ``bench/bench_store_writes.py`` times a rerun's store calls in each mode. The log needs the processes that share the file to
    share one machine's memory, as a SQLite store already does to be safe; a store shared across
    machines belongs on a server."""
    _pragma(uri, "journal_mode=WAL")


_SYNC_NORMAL: set[str] = set()  # real paths of the SQLite stores this process commits to without a sync


def commit_without_sync(uri: str) -> None:
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
        path = os.path.realpath(uri[len(PREFIX):])
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
    _pragma(uri, "wal_checkpoint(TRUNCATE)")


@contextmanager
def store_lock(uri: str):
    """An exclusive lock beside a local SQLite store (``mlflow.db.lock``) for the first look at it;
    other stores (servers, PostgreSQL) serialise on their own."""
    if not is_sqlite(uri):
        yield
        return
    import fcntl

    db = Path(uri[len(PREFIX):])
    with open(db.parent / (db.name + ".lock"), "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


_GUARDED: list[Path] = []  # while a job runs: its local SQLite store's file
_FILE_STORE = "mlflow.store.tracking.file_store"


def refuse_file_stores_beside(uri: str | None) -> None:
    """While a job runs (``uri``: its rerun's store; None when the job has ended), an MLflow file
    store made in the folder of that SQLite store, or inside it (``file:./mlruns`` beside the
    default store's ``mlruns/mlflow.db``: MLflow's own hint, ``MLFLOW_ALLOW_FILE_STORE=true``,
    leads there), is refused with one sentence: its runs would lie in the same folder as the
    sweep's database, outside the sweep. MLflow's ``FileStore`` is wrapped once a process, when
    its module is first imported (a wrapt post-import hook); outside a job it does what it does."""
    _GUARDED.clear()
    if uri is None or not is_sqlite(uri):
        return
    _GUARDED.append(_resolved(uri[len(PREFIX):], os.getcwd()))
    if not _HOOKED:
        import wrapt

        _HOOKED.append(True)
        wrapt.register_post_import_hook(_guard_file_store, _FILE_STORE)


@functools.lru_cache(maxsize=16)
def _resolved(path: str, cwd: str) -> Path:
    """``path`` resolved from the directory ``cwd`` (this process's own): once a store and
    directory, not at every job (a sweep's jobs share one store)."""
    return Path(path).resolve()


_HOOKED: list[bool] = []


def _guard_file_store(module) -> None:
    import functools

    cls = module.FileStore
    own = cls.__init__

    @functools.wraps(own)
    def __init__(self, root_directory=None, *args, **kwargs):
        if _GUARDED:
            _refuse_in(_GUARDED[0], root_directory, module)
        own(self, root_directory, *args, **kwargs)

    cls.__init__ = __init__


def _refuse_in(db: Path, root_directory, module) -> None:
    """Raise :class:`FileStoreRefused` when the file store at ``root_directory`` (MLflow's
    default root when None) is the folder of the SQLite file ``db`` or lies inside it."""
    from mlflow.utils.file_utils import local_file_uri_to_path

    default = getattr(module, "_default_root_dir", None)
    try:
        root = Path(local_file_uri_to_path(root_directory or (default() if default else "mlruns"))).resolve()
    except Exception:  # noqa: BLE001 - a root MLflow cannot read: MLflow's own error follows
        return
    folder = db.parent
    if root == folder or folder in root.parents:
        raise FileStoreRefused(
            f"An MLflow file store in {root} is refused while a rerun runs: that is the folder of the sweep's "
            f"tracking store {db}, where its runs would lie outside the sweep; log to "
            "the rerun's run (mlflow.start_run() and $MLFLOW_TRACKING_URI point at it) or give that store a "
            "folder of its own.")
