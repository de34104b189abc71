"""The shared tracking server (launchers/tracking_server.py): PostgreSQL backend, basic auth, reruns
from parallel workers, concurrent writers."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from glob import glob

import pytest
from conftest import REPO, SMALL, run_app
from test_launchers import ENV

SCRIPT = REPO / "launchers" / "tracking_server.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(tmp_path, monkeypatch):
    pytest.importorskip("psycopg2")
    if not (shutil.which("initdb") or glob("/usr/lib/postgresql/*/bin/initdb")):
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql)")
    if os.geteuid() == 0 and not shutil.which("runuser"):
        pytest.skip("runuser is needed to run PostgreSQL as root")
    d = tmp_path / "server"
    env = {**os.environ, "MLFLOW_AUTH_ADMIN_PASSWORD": "s3cret-Admin-pw"}
    env.pop("MLFLOW_TRACKING_URI", None)
    port, pg_port = _free_port(), _free_port()

    def start():
        proc = subprocess.run([sys.executable, str(SCRIPT), "start", "--dir", str(d), "--port", str(port),
                               "--pg-port", str(pg_port)], env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:] + (d / "mlflow_server.log").read_text()[-3000:]
        return proc.stdout.strip().splitlines()[-1]

    try:
        uri = start()
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
        yield uri, d, start
    finally:
        subprocess.run([sys.executable, str(SCRIPT), "stop", "--dir", str(d)], timeout=120)
        state = json.loads((d / "server.json").read_text())
        shutil.rmtree(state["pg_dir"], ignore_errors=True)


@pytest.mark.slow
def test_tracking_server_postgres_auth_parallel_ci(server, tmp_path, monkeypatch):
    uri, d, _ = server
    # the backend store is PostgreSQL
    assert "postgresql://" in (d / "mlflow_server.log").read_text() or json.loads((d / "server.json").read_text())
    # without credentials: refused
    req = urllib.request.Request(uri + "/api/2.0/mlflow/experiments/search?max_results=1")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=10)
    assert err.value.code == 401
    no_creds = {k: "" for k in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")}
    refused = run_app(["-m", "seed=range(2)", f"hydra.sweep.dir={tmp_path / 'refused'}", *SMALL], cwd=tmp_path,
                      env_extra={**ENV, **no_creds, "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"}, timeout=300)
    assert refused.returncode != 0
    # with them: a parallel sweep logs every rerun, the card is computed once from the server
    creds = {"MLFLOW_TRACKING_USERNAME": "admin", "MLFLOW_TRACKING_PASSWORD": "s3cret-Admin-pw"}
    sweep_dir = tmp_path / "sweep"
    proc = run_app(["-m", "hydra/launcher=local_parallel", "seed=range(4)", f"hydra.sweep.dir={sweep_dir}", *SMALL],
                   cwd=tmp_path, env_extra={**ENV, **creds}, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (proc.stdout + proc.stderr).count("Recipe cards (") == 1
    cell = json.loads((sweep_dir / "card" / "card.json").read_text())["cells"][0]
    assert cell["n_reruns"] == 4 and cell["unfinished"] == []
    # four concurrent writers into the server lose no run and no metric
    for k, v in creds.items():
        monkeypatch.setenv(k, v)
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    bench = importlib.import_module("bench_writers")
    res = bench.run_writers(uri, 4, 5, 20)
    assert res["got"]["runs"] == 20 and res["got"]["steps"] == 400 and res["got"]["final_metrics"] == 20
    assert not any(res["lost"].values())


@pytest.mark.slow
def test_server_gone_mid_sweep_stops_clearly_and_resumes(server, tmp_path):
    """The server stops after two reruns finished: the sweep stops with one sentence naming the
    way out; no finished rerun is lost; relaunched with tracking.resume=true once the server is
    back, it trains only the seeds with no finished rerun and the card has every seed once."""
    import time

    from mlflow.tracking import MlflowClient

    uri, d, start = server
    creds = {"MLFLOW_TRACKING_USERNAME": "admin", "MLFLOW_TRACKING_PASSWORD": "s3cret-Admin-pw",
             "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}
    sweep_dir = tmp_path / "sweep"
    args = ["-m", "seed=range(8)", f"hydra.sweep.dir={sweep_dir}", *SMALL]
    env = {**os.environ, "HYDRA_FULL_ERROR": "0", **ENV, **creds}
    proc = subprocess.Popen([sys.executable, "-m", "recipe_audit", *args], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    os.environ.update({k: v for k, v in creds.items() if k.startswith("MLFLOW_TRACKING")})
    try:
        client = MlflowClient(tracking_uri=uri)
        finished = []
        t0 = time.time()
        while len(finished) < 2 and time.time() - t0 < 300 and proc.poll() is None:
            time.sleep(0.5)
            exp = client.get_experiment_by_name("recipe_audit")
            if exp is not None:
                finished = client.search_runs([exp.experiment_id], "attributes.status = 'FINISHED' and "
                                              "tags.`recipe_audit.kind` = 'rerun'")
        assert len(finished) >= 2, "the sweep did not get going"
        subprocess.run([sys.executable, str(SCRIPT), "stop", "--dir", str(d)], timeout=120, check=True)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
        for k in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
            os.environ.pop(k, None)
    assert proc.returncode == 2, err[-3000:]
    assert "relaunch the same command with tracking.resume=true" in err
    start()  # the server is back, same store
    os.environ.update({k: v for k, v in creds.items() if k.startswith("MLFLOW_TRACKING")})
    try:
        client = MlflowClient(tracking_uri=uri)
        exp = client.get_experiment_by_name("recipe_audit")
        before = {r.info.run_id for r in client.search_runs([exp.experiment_id], "attributes.status = 'FINISHED' "
                                                            "and tags.`recipe_audit.kind` = 'rerun'")}
        assert len(before) >= 2  # nothing that finished was lost
        again = run_app([*args, "tracking.resume=true"], cwd=tmp_path, env_extra={**ENV, **creds}, timeout=600)
        assert again.returncode == 0, again.stderr[-3000:]
        runs = client.search_runs([exp.experiment_id], "tags.`recipe_audit.kind` = 'rerun'")
    finally:
        for k in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
            os.environ.pop(k, None)
    done = [r for r in runs if r.info.status == "FINISHED"]
    assert before <= {r.info.run_id for r in done}
    assert sorted(int(r.data.tags["recipe_audit.seed"]) for r in done) == list(range(8))  # each seed once
    cell = json.loads((sweep_dir / "card" / "card.json").read_text())["cells"][0]
    assert cell["n_reruns"] == 8 and cell["unfinished"] == []
