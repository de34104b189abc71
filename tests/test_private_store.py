"""A local SQLite store recipe_audit creates is its owner's alone: the store's folder (when
recipe_audit makes it) and the artifacts' folder 0700, the database 0600 (SQLite gives its
write-ahead log the database's mode), so another local user can neither copy the database nor read
an artifact. ``RECIPE_AUDIT_SHARE_STORE=1`` keeps the umask's modes, for a store others read."""

from __future__ import annotations

import os
import stat

import pytest
from helpers.fast_sqlite import commits_without_sync


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("shared", [False, True], ids=["private", "shared"])
def test_the_default_store_is_its_owners_alone(tmp_path, monkeypatch, shared):
    from recipe_audit.store import sqlite, tracking

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    if shared:
        monkeypatch.setenv(sqlite.SHARE_ENV, "1")
    else:
        monkeypatch.delenv(sqlite.SHARE_ENV, raising=False)
    umask = os.umask(0o022)  # a usual umask: others may read what it creates
    try:
        with commits_without_sync():
            store = tracking.open_store(None, "exp")  # the default store, ./mlruns/mlflow.db
            run = store.client.create_run(store.experiment_id)
            store.client.log_text(run.info.run_id, "weights", "model/weights.txt")
            store.client.set_terminated(run.info.run_id)
            db = tmp_path / "mlruns" / "mlflow.db"
            logs = [p for p in (db.with_name("mlflow.db-wal"), db.with_name("mlflow.db-shm")) if p.exists()]
            log_modes = {p.name: _mode(p) for p in logs}
    finally:
        os.umask(umask)
        sqlite.checkpoint_store(store.uri)
    assert store.uri == f"sqlite:///{db}"
    art = tmp_path / "mlruns" / "artifacts"
    weights = next(art.rglob("weights.txt"))
    if shared:  # as the umask says
        assert (_mode(tmp_path / "mlruns"), _mode(db), _mode(art)) == (0o755, 0o644, 0o755)
        assert set(log_modes.values()) <= {0o644}
    else:
        assert (_mode(tmp_path / "mlruns"), _mode(db), _mode(art)) == (0o700, 0o600, 0o700)
        assert logs and set(log_modes.values()) == {0o600}, log_modes  # the write-ahead log follows the database
        # what MLflow writes inside the artifacts' folder keeps the umask's modes: the folder closes it
        assert weights.is_relative_to(art) and _mode(weights) == 0o644


def test_an_existing_folder_keeps_its_mode(tmp_path, monkeypatch):
    """A store named in a folder that exists (the checkout's mlruns/ with its README, /tmp) leaves
    the folder as it is; the database and the artifacts' folder are still the owner's."""
    from recipe_audit.store import sqlite, tracking

    monkeypatch.delenv(sqlite.SHARE_ENV, raising=False)
    (tmp_path / "shared_dir").mkdir(mode=0o755)
    os.chmod(tmp_path / "shared_dir", 0o755)
    with commits_without_sync():
        store = tracking.open_store(f"sqlite:///{tmp_path / 'shared_dir' / 'mlflow.db'}", "exp")
    sqlite.checkpoint_store(store.uri)
    d = tmp_path / "shared_dir"
    assert (_mode(d), _mode(d / "mlflow.db"), _mode(d / "artifacts")) == (0o755, 0o600, 0o700)
