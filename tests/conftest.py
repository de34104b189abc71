"""Fixtures every test gets: its own MLflow store under tmp_path, no active run left behind, no
sweep handed to the next test; nothing touches ./mlruns. Helpers the test modules import are in
``tests/helpers/``."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def _no_sweep_leaks():
    """A test that opens a sweep in this process (tracking.start_sweep publishes it in the
    environment for its jobs) must not hand it to the next test's subprocesses."""
    yield
    os.environ.pop("RECIPE_AUDIT_SWEEP", None)


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A fresh SQLite tracking URI; MLFLOW_TRACKING_URI points at it for the test's duration."""
    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    (tmp_path / "store").mkdir()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)  # MLflow's default artifact root is relative to the working directory
    yield uri
    import mlflow
    from mlflow.tracking._tracking_service import utils as tracking_utils

    # a test that called mlflow.set_tracking_uri must not pin the store of the next test
    tracking_utils._tracking_uri = None
    assert mlflow.active_run() is None, "a test leaked an active MLflow run"
