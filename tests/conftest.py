"""Shared fixtures: every test gets its own MLflow store under tmp_path and must leave no
active run behind; nothing touches ./mlruns."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# small sizes so an end-to-end rerun takes about a second
SMALL = [
    "task.options.n_train=240", "task.options.n_audit=120", "recipe.max_steps=12",
    "progress=false", "threads=1",
]


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A fresh SQLite tracking URI; MLFLOW_TRACKING_URI points at it for the test's duration."""
    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    (tmp_path / "store").mkdir()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    yield uri
    import mlflow

    assert mlflow.active_run() is None, "a test leaked an active MLflow run"


def run_app(args: list[str], cwd: Path, env_extra: dict | None = None, timeout: int = 600):
    """``python -m recipe_audit ARGS`` in a subprocess, as a user runs it."""
    env = {**os.environ, "HYDRA_FULL_ERROR": "0", **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "recipe_audit", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)
