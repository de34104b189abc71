"""Fixtures every test gets: its own MLflow store under tmp_path, no active run left behind, no
sweep handed to the next test; nothing touches ./mlruns. Helpers the test modules import are in
``tests/helpers/``."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest


@pytest.fixture(scope="session", autouse=True)
def _store_template_cache(tmp_path_factory):
    """The empty MLflow store new SQLite stores are copied from (``store.sqlite.template``) is made
    once for the session in its own folder, for the test process and every process it starts: not
    in the user's cache folder."""
    from recipe_audit.store.sqlite import CACHE_ENV

    saved = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(tmp_path_factory.mktemp("recipe_audit_cache"))
    yield
    if saved is None:
        os.environ.pop(CACHE_ENV, None)
    else:
        os.environ[CACHE_ENV] = saved


@pytest.fixture(autouse=True)
def _no_sweep_leaks():
    """A test that opens a sweep in this process (sweeps.start_sweep publishes it in the
    environment for its jobs) must not hand it to the next test's subprocesses."""
    creds = {k: os.environ.get(k) for k in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")}
    yield
    os.environ.pop("RECIPE_AUDIT_SWEEP", None)
    # a tracking URI with user:password moves them there (store.uris.credentials_to_env): not to the next test
    for k, v in creds.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def migrated_mlflow_db(tmp_path_factory) -> Path:
    """An empty MLflow SQLite database with its tables made, once per session: creating them runs
    MLflow's migrations (about 7 s on a quiet 2-core machine, most of it waiting for the disk, which
    its commits skip here: helpers/fast_sqlite.py), a copy of the file takes milliseconds."""
    from helpers.fast_sqlite import commits_without_sync
    from mlflow.tracking import MlflowClient

    db = tmp_path_factory.mktemp("mlflow_template") / "mlflow.db"
    with commits_without_sync():
        MlflowClient(tracking_uri=f"sqlite:///{db}").search_experiments()
    return db


@pytest.fixture
def new_store(tmp_path, monkeypatch):
    """A SQLite tracking URI whose database does not exist yet (the first sweep creates it);
    MLFLOW_TRACKING_URI points at it for the test's duration."""
    yield from _store(tmp_path, monkeypatch, None)


@pytest.fixture
def store(tmp_path, monkeypatch, migrated_mlflow_db):
    """A fresh, empty SQLite tracking store (a copy of ``migrated_mlflow_db``); MLFLOW_TRACKING_URI
    points at it for the test's duration."""
    yield from _store(tmp_path, monkeypatch, migrated_mlflow_db)


def _store(tmp_path, monkeypatch, template):
    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    (tmp_path / "store").mkdir()
    if template is not None:
        shutil.copy(template, tmp_path / "store" / "mlflow.db")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)  # MLflow's default artifact root is relative to the working directory
    yield uri
    import mlflow
    from mlflow.tracking._tracking_service import utils as tracking_utils

    # a test that called mlflow.set_tracking_uri must not pin the store of the next test
    tracking_utils._tracking_uri = None
    assert mlflow.active_run() is None, "a test leaked an active MLflow run"
