"""A new SQLite store is a copy of an empty store MLflow made once (``store.sqlite.template``):
the same store MLflow makes itself, the template keyed by MLflow's version and schema revision,
checked before each use and made again when it does not pass; without a usable cache folder MLflow
makes the tables as before."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from recipe_audit.store import sqlite

TIMES = ("creation_time", "last_update_time")


def _dump(db: Path) -> tuple[list, dict]:
    """(the schema, every table's rows), the experiments' creation times left out. A table's
    constraints are compared in any order: MLflow's migrations write them in an order that varies
    from one process to the next (the runs table's checks)."""
    con = sqlite3.connect(db)
    try:
        schema = sorted((kind, name, sorted(line.strip().rstrip(",") for line in (sql or "").splitlines()))
                        for kind, name, sql in con.execute("SELECT type, name, sql FROM sqlite_master "
                                                           "WHERE name NOT LIKE 'sqlite_%'"))
        rows = {}
        for (table,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
            cur = con.execute(f'SELECT * FROM "{table}"')
            cols = [d[0] for d in cur.description]
            rows[table] = sorted(tuple(None if c in TIMES else v for c, v in zip(cols, r, strict=True))
                                 for r in cur.fetchall())
    finally:
        con.close()
    return schema, rows


def _new_store(folder: Path) -> Path:
    """A store made by create_store and opened by MLflow, as a sweep's first look does."""
    from mlflow.tracking import MlflowClient

    folder.mkdir()
    db = folder / "mlflow.db"
    sqlite.create_store(f"sqlite:///{db}")
    MlflowClient(tracking_uri=f"sqlite:///{db}").search_experiments()
    return db


def test_a_store_made_from_the_template_is_the_one_mlflow_makes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # MLflow's default artifact root: ./mlruns
    made = sqlite.template()  # the session's (tests/conftest.py), made on first use
    assert made is not None and made.parent == Path(sqlite.cache_dir())
    before = made.read_bytes()
    from_template = _new_store(tmp_path / "a")
    monkeypatch.setenv(sqlite.CACHE_ENV, str(tmp_path / "a" / "mlflow.db" / "cache"))  # a file: no cache
    assert sqlite.template() is None
    by_mlflow = _new_store(tmp_path / "b")  # MLflow's migrations, as without the template
    assert _dump(from_template) == _dump(by_mlflow)
    con = sqlite3.connect(from_template)
    (location,), = con.execute("SELECT artifact_location FROM experiments WHERE experiment_id = 0").fetchall()
    con.close()
    assert Path(location.removeprefix("file://")) == tmp_path / "mlruns" / "0"  # MLflow's, for this process
    assert made.read_bytes() == before  # the template itself is never written
    assert not list(tmp_path.glob("*/.mlflow.db.*.new"))


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    """An empty cache folder, with the session's template (made by MLflow) to copy from."""
    good = sqlite.template()
    assert good is not None
    monkeypatch.setenv(sqlite.CACHE_ENV, str(tmp_path / "cache"))
    made = []

    def make(path: Path) -> None:  # as _make_template does, without running the migrations again
        made.append(path.name)
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(good, path)

    monkeypatch.setattr(sqlite, "_make_template", make)
    return made


def _edit(db: Path, sql: str) -> None:
    con = sqlite3.connect(db)
    with con:
        con.execute(sql)
    con.close()


def test_the_template_is_made_once_and_again_when_it_does_not_pass(own_cache, tmp_path):
    path = sqlite.template()
    assert own_cache == [path.name] and sqlite.template() == path and own_cache == [path.name]  # once
    bad = [
        "INSERT INTO experiments (experiment_id, name, lifecycle_stage) VALUES (7, 'x', 'active')",
        "UPDATE alembic_version SET version_num = 'older'",  # another schema revision under this name
        "DROP TABLE runs",
    ]
    for i, sql in enumerate(bad):
        _edit(path, sql)
        assert sqlite.template() == path and len(own_cache) == i + 2, sql
    path.write_bytes(b"not a database" * 100)
    assert sqlite.template() == path and len(own_cache) == len(bad) + 2
    assert sqlite._is_template(path, sqlite.template().stem.rsplit("-", 1)[1])


def test_the_template_is_keyed_by_mlflows_version_and_schema(own_cache, monkeypatch):
    import mlflow
    from mlflow.store.db import utils

    first = sqlite.template()
    head = utils._get_latest_schema_revision()  # the revision MLflow migrates to, not read off the name
    assert first.name == f"mlflow-{mlflow.__version__}-{head}.db"
    monkeypatch.setattr(mlflow, "__version__", "0.0.other")
    assert sqlite.template().name == f"mlflow-0.0.other-{head}.db"
    # a newer schema under the same version: another file, which a template at `head` cannot pass for
    monkeypatch.setattr(sqlite, "schema_head", lambda: "newer")  # MLflow's, read once per process
    assert sqlite.template() is None and own_cache[-1] == "mlflow-0.0.other-newer.db"
    assert len(own_cache) == 3
