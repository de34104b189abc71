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


def _app(args: list[str], env_extra: dict | None) -> tuple[list[str], dict]:
    """The command line and environment of ``python -m recipe_audit ARGS`` as a user runs it."""
    return [sys.executable, "-m", "recipe_audit", *args], {**os.environ, "HYDRA_FULL_ERROR": "0", **(env_extra or {})}


def run_app(args: list[str], cwd: Path, env_extra: dict | None = None, timeout: int = 600):
    """``python -m recipe_audit ARGS`` in a subprocess, as a user runs it."""
    cmd, env = _app(args, env_extra)
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def start_app(args: list[str], cwd: Path, output: Path, env_extra: dict | None = None) -> subprocess.Popen:
    """``python -m recipe_audit ARGS`` started as ``run_app`` runs it, without waiting for it: the
    ``Popen``. It leads a process group of its own, so ``os.killpg(proc.pid, ...)`` ends it and every
    process it started (launcher jobs too). stdout and stderr go, together, to the file ``output``:
    not to a pipe, which nobody reads while a test polls, and which would block the app once full."""
    cmd, env = _app(args, env_extra)
    with open(output, "w") as out:
        return subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)


def synthetic_sweep(uri: str, values: dict, *, experiment: str = "exp", recipe_id: str = "r" * 16,
                    planned=None, statuses: dict | None = None, metric: str = "accuracy/calibration",
                    extra_params: dict | None = None) -> str:
    """Log a sweep the way recipe_audit does (keys.py contract), without training: a parent run
    with planned seeds and one nested rerun per ``values`` item (seed -> metric or None for
    'never logged the metric'). ``statuses`` maps seed -> final status (default FINISHED)."""
    import json

    from mlflow.entities import Metric, Param, RunTag
    from mlflow.tracking import MlflowClient

    from recipe_audit import keys

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    exp_id = exp.experiment_id if exp else client.create_experiment(experiment)
    planned = sorted(values) if planned is None else list(planned)
    sweep_id = f"sw{recipe_id[:6]}"
    parent = client.create_run(exp_id, tags={keys.TAG_KIND: keys.KIND_SWEEP, keys.TAG_SWEEP_ID: sweep_id,
                                             keys.TAG_PLANNED_SEEDS: json.dumps(planned)}).info.run_id
    for seed, value in values.items():
        run = client.create_run(exp_id, run_name=f"seed{seed}", tags={
            keys.TAG_KIND: keys.KIND_RERUN, keys.TAG_RECIPE_ID: recipe_id, keys.TAG_SEED: str(seed),
            keys.TAG_PARENT: parent, keys.TAG_SWEEP_ID: sweep_id, keys.TAG_MODEL: "m", keys.TAG_TASK: "t"})
        params = [Param("seed", str(seed)), Param("recipe.name", "r")] + [
            Param(k, str(v)) for k, v in (extra_params or {}).items()]
        metrics = [] if value is None else [Metric(metric, float(value), 0, 0)]
        client.log_batch(run.info.run_id, metrics=metrics, params=params, tags=[RunTag("x", "y")])
        status = (statuses or {}).get(seed, "FINISHED")
        if status != "RUNNING":
            client.set_terminated(run.info.run_id, status)
    client.set_terminated(parent, "FINISHED")
    return parent
