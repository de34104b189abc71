"""SQLite stores for in-process tests: committed without waiting for the disk, and written once
for the tests of a module that each need their own copy of the same runs.

SQLite's default (``synchronous=FULL`` in its rollback-journal mode) syncs the disk several times
a commit, and MLflow's client makes a few commits a call: on this project's 2-core VMs a test that
logs 30 runs spends most of its time waiting for those syncs. ``PRAGMA synchronous=OFF`` hands
each commit to the operating system and moves on; readers, in this process or another, see the
same data, and only a power cut could lose it, which a test's temporary store does not outlive.

Only while a test module runs (``no_sync_module``, an autouse fixture that a folder's
``conftest.py`` or a module imports) or inside ``commits_without_sync()``, and only for the
connections opened meanwhile: ``tests/test_sweep.py`` checks what the project's own stores commit
with, under SQLite's defaults. The project's own setting for its write-ahead-log stores
(``store.sqlite.commit_without_sync``: ``NORMAL`` when a connection is checked out) still applies
on top.

``written_once`` writes a module's runs into a copy of the suite's empty tables
(``migrated_mlflow_db`` of ``tests/conftest.py``), and ``own_copy`` gives a test its own copy of
them in the store the suite's ``store`` fixture made: a copy of a file takes milliseconds, writing
30 runs through MLflow's client about a second."""

from __future__ import annotations

import os
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import pytest

__all__ = ["commits_without_sync", "no_sync_module", "own_copy", "written_once"]

T = TypeVar("T")


def _off(dbapi_connection, _record) -> None:
    if isinstance(dbapi_connection, sqlite3.Connection):
        dbapi_connection.execute("PRAGMA synchronous=OFF")


@contextmanager
def commits_without_sync() -> Iterator[None]:
    """SQLite connections SQLAlchemy opens meanwhile (MLflow's stores) commit without a disk sync."""
    from sqlalchemy import event
    from sqlalchemy.pool import Pool

    if event.contains(Pool, "connect", _off):  # nested: the outer one removes it
        yield
        return
    event.listen(Pool, "connect", _off)
    try:
        yield
    finally:
        event.remove(Pool, "connect", _off)


@pytest.fixture(scope="module", autouse=True)
def no_sync_module() -> Iterator[None]:
    """For a whole test module, its module-scoped stores included (autouse fixtures of a scope are
    set up before the others of that scope)."""
    with commits_without_sync():
        yield


def written_once(folder: Path, empty_db: Path, write: Callable[[str], T]) -> tuple[Path, T]:
    """``folder/mlflow.db``: a copy of ``empty_db`` (the suite's ``migrated_mlflow_db``) that
    ``write(uri)`` wrote, with ``folder`` as the working directory meanwhile (MLflow puts a new
    experiment's artifacts under it), committing without a disk sync. Returns the file and what
    ``write`` returned (run ids, say)."""
    db = folder / "mlflow.db"
    shutil.copy(empty_db, db)
    here = os.getcwd()
    os.chdir(folder)
    try:
        with commits_without_sync():
            made = write(f"sqlite:///{db}")
    finally:
        os.chdir(here)
    return db, made


def own_copy(db: Path, uri: str) -> str:
    """The store at ``uri`` (a test's, from the suite's ``store`` fixture) becomes a copy of ``db``,
    its write-ahead log included; returns ``uri``."""
    with sqlite3.connect(db) as src, sqlite3.connect(uri.removeprefix("sqlite:///")) as dst:
        src.backup(dst)
    src.close()
    dst.close()
    return uri
