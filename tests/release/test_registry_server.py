"""The same flows against a real ``mlflow server`` on loopback: attach (registering the rerun's
logged model), the gate, verify, MLflow's own loader, a changed store, bad input."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from helpers import procs
from helpers.cli import run_cli
from helpers.registry_world import EXP, make_world
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

from recipe_audit.release import registry


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory, migrated_mlflow_db):
    """``mlflow server`` (SQLite backend, local artifact root) on a free loopback port, serving the
    registry world (``helpers.registry_world``); stopped, with its whole process group, after the
    module. The world is written into the server's SQLite file directly while the server starts (it
    is the flows' data, not what they test; through the server it took as long as the start)."""
    from recipe_audit.store import tracking

    root = tmp_path_factory.mktemp("server")
    shutil.copy(migrated_mlflow_db, root / "mlflow.db")  # MLflow's tables made: neither side migrates
    db = f"sqlite:///{root / 'mlflow.db'}"
    # the world's experiment made before the server starts (its artifacts beside the file, as the
    # server's are): the project's store switches the file to SQLite's write-ahead log, so the
    # server's reads and the world's writes do not block each other
    tracking.open_store(db, EXP)
    port = _free_port()
    exe = shutil.which("mlflow")
    cmd = ([exe] if exe else [sys.executable, "-m", "mlflow"]) + [
        "server", "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}", "--default-artifact-root",
        str(root / "artifacts"), "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    log = open(root / "server.log", "wb")
    # without MLflow's job runner (seven more processes importing MLflow while the tests run)
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    proc = procs.spawn(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=root, env=env)
    uri = f"http://127.0.0.1:{port}"
    try:
        world = make_world(db, root)
        deadline = time.monotonic() + procs.timeout(120)
        while True:
            if proc.poll() is not None:
                pytest.fail(f"mlflow server exited: {(root / 'server.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(uri + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"mlflow server did not answer: {(root / 'server.log').read_text()[-2000:]}")
            time.sleep(0.3)
        yield uri, world
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=1)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        log.close()


@pytest.fixture(scope="module")
def world(server):
    return server[1]


def test_attach_gate_verify_over_http(server, world, capsys):
    uri, _ = server
    rc, out, err = run_cli(["attach", "--model-name", "clf", "--run-id", world.runs[("good", 0)], "--card",
                            str(world.card), "--set-alias", "candidate", "--tracking-uri", uri], capsys)
    assert rc == 0 and "registered as new version 1" in out, err
    mv = MlflowClient(tracking_uri=uri, registry_uri=uri).get_model_version_by_alias("clf", "candidate")
    cards = registry.attached_cards(mv.tags, uri)
    assert cards["recipe_audit.card.calibration.tau_0.7"]["verdict"] == "release-supported"
    assert cards["recipe_audit.card.shift_x.tau_0.7"]["verdict"] == "strong-unsupported"
    gate = ["gate", "--model-name", "clf", "--alias", "candidate", "--tracking-uri", uri]
    rc, out, err = run_cli([*gate, "--audit", "calibration", "--tau", "0.7"], capsys)
    assert rc == 0 and "PASS" in out, err
    rc, _, err = run_cli([*gate, "--audit", "shift_x", "--tau", "0.7"], capsys)
    assert rc == 1 and "FAIL (unsupported)" in err
    rc, _, err = run_cli([*gate, "--audit", "entailment/calibration", "--tau", "0.7"], capsys)
    assert rc == 1 and "FAIL (refused-shift)" in err
    rc, _, err = run_cli([*gate, "--tau", "0.7"], capsys)  # which audit set is the release judged on? the gate's
    assert rc == 2 and "The metric the release is judged on is the gate's" in err and err.count("\n") == 1
    card_uri = cards["recipe_audit.card.calibration.tau_0.7"]["card_uri"]
    for card in (card_uri, str(world.card)):
        rc, out, err = run_cli(["verify", card, "--tracking-uri", uri], capsys)
        assert rc == 0 and "verifies" in out, err
    # MLflow's own loader, through the server's registry
    import mlflow

    from recipe_audit.store.tracking import use_tracking_uri

    with use_tracking_uri(uri):
        pipe = mlflow.transformers.load_model("models:/clf@candidate")
    assert pipe("not good")[0]["label"] in ("negative", "positive")


def test_bad_input_over_http(server, world, capsys):
    uri, _ = server
    bar = ["--audit", "calibration", "--tau", "0.7"]
    for args, needle in [(["gate", "--model-name", "nope", "--version", "1", *bar], "no registered model named"),
                         (["gate", "--model-name", "clf", "--alias", "prod", *bar], "has no alias 'prod'"),
                         (["attach", "--model-name", "clf", "--version", "1", "--card", str(world.card_bad)],
                          "card is of recipe")]:
        rc, out, err = run_cli([*args, "--tracking-uri", uri], capsys)
        assert rc == 2 and needle in err and err.count("\n") == 1, (args, err)
    rc, _, err = run_cli(["gate", "--model-name", "clf", "--version", "1", *bar, "--tracking-uri",
                          f"http://127.0.0.1:{_free_port()}"], capsys)
    assert rc == 2 and "not reachable" in err


def test_a_changed_store_fails_the_gate_over_http(server, world, capsys):
    """Runs last in the module: it changes the server's store."""
    uri, _ = server
    MlflowClient(tracking_uri=uri).log_batch(world.runs[("good", 5)],
                                             metrics=[Metric("accuracy/calibration", 0.2, 0, 99)])
    rc, _, err = run_cli(["gate", "--model-name", "clf", "--alias", "candidate", "--audit", "calibration",
                          "--tau", "0.7", "--tracking-uri", uri], capsys)
    assert rc == 1 and "FAIL (unsupported)" in err and "failing seeds: 5" in err
    rc, out, _ = run_cli(["verify", str(world.card), "--tracking-uri", uri, "--json"], capsys)
    assert rc == 1 and json.loads(out)["kinds"] == ["metric-changed"]
