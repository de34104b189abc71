"""The shared tracking server (launchers/tracking_server.py): PostgreSQL backend, basic auth, reruns
from parallel workers, concurrent writers."""

from __future__ import annotations

import base64
import configparser
import importlib
import importlib.util
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import urllib.error
import urllib.request
from glob import glob
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from helpers import procs
from helpers.app import REPO, SMALL, run_app
from test_launchers import ENV

SCRIPT = REPO / "launchers" / "tracking_server.py"

ADMIN_PW = "s3cret-Admin-pw"  # what the fixture gives the server in MLFLOW_AUTH_ADMIN_PASSWORD
SECRET_FILES = ("pgpass", "admin_password", "basic_auth.ini", "server.json")


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
    # DIR holds the PostgreSQL cluster; as root, PostgreSQL runs as its own user, which must pass
    # through the folders above DIR (a pytest tmp dir is root-only): a base it may traverse, not list
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="recipe_audit_server_"))
    base.chmod(0o711)
    d = base / "server"
    env = {**os.environ, "MLFLOW_AUTH_ADMIN_PASSWORD": ADMIN_PW}
    env.pop("MLFLOW_TRACKING_URI", None)
    port, pg_port = _free_port(), _free_port()

    def start():
        proc = procs.run([sys.executable, str(SCRIPT), "start", "--dir", str(d), "--port", str(port),
                               "--pg-port", str(pg_port)], env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:] + (d / "mlflow_server.log").read_text()[-3000:]
        return proc.stdout.strip().splitlines()[-1]

    try:
        uri = start()
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
        yield uri, d, start
    finally:
        procs.run([sys.executable, str(SCRIPT), "stop", "--dir", str(d)], timeout=120)
        shutil.rmtree(base, ignore_errors=True)


def _argvs() -> dict[int, str]:
    """Every process's full argv (/proc/PID/cmdline, what ``ps -eo args`` shows), by pid."""
    out = {}
    for path in glob("/proc/[0-9]*/cmdline"):
        try:
            out[int(path.split("/")[2])] = Path(path).read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # the process ended meanwhile
            pass
    return out


def test_no_secret_in_argv_logs_or_readable_files(server, monkeypatch):
    """Also: the server runs recipe_audit's app, whose reads are PostgreSQL's (``_reads_through_the_app``).
    While the server runs, neither PostgreSQL's password nor the admin password (nor the auth
    app's secret key) is in any process's argv or in a log; the files that hold them are mode 600;
    PostgreSQL listens on loopback only and refuses the mlflow role without its password. Also (at
    the end): start after a crash brings the server back without a stop."""
    import psycopg2

    uri, d, restart = server
    state = json.loads((d / "server.json").read_text())
    pgpass = (d / "pgpass").read_text().strip()
    prefix = f"127.0.0.1:{state['pg_port']}:*:mlflow:"
    assert pgpass.startswith(prefix), pgpass[:40]
    db_pw = pgpass[len(prefix):]
    assert len(db_pw) >= 16
    secrets = {"PostgreSQL password": db_pw, "admin password": ADMIN_PW, "flask secret": state["flask_secret"]}

    # the server works through these secrets: it reaches both databases, it checks the admin's password
    auth = base64.b64encode(f"admin:{ADMIN_PW}".encode()).decode()
    req = urllib.request.Request(uri + "/api/2.0/mlflow/experiments/search?max_results=5",
                                 headers={"Authorization": f"Basic {auth}"})
    with urllib.request.urlopen(req, timeout=procs.timeout(30)) as r:
        assert r.status == 200 and "experiments" in json.loads(r.read())
    _reads_through_the_app(uri, d, state, monkeypatch)

    argvs = _argvs()
    # the scan saw the servers (a scan that saw nothing would find no secret either)
    assert any("mlflow server" in a and "--backend-store-uri postgresql" in a for a in argvs.values()), \
        "no mlflow server process"
    assert any("uvicorn" in a and f"--port {state['port']}" in a for a in argvs.values()), "no uvicorn process"
    assert any("postgres" in a and f"-p {state['pg_port']}" in a for a in argvs.values()), "no postgres process"
    # a leak is reported by name and place, the secret itself blanked out
    leaks = [(name, pid, a.replace(s, f"<{name}>")[:300]) for pid, a in argvs.items()
             for name, s in secrets.items() if s in a]
    assert leaks == []
    ps = shutil.which("ps") and procs.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    if ps:
        assert "mlflow server" in ps and not [n for n, s in secrets.items() if s in ps]

    logs = [*d.rglob("*.log"), Path(state["pg_dir"]) / "postgres.log"]
    assert (d / "mlflow_server.log") in logs and "Uvicorn running" in (d / "mlflow_server.log").read_text()
    for log in logs:
        text = log.read_text(errors="replace")
        assert [n for n, s in secrets.items() if s in text] == [], log

    for name in (*SECRET_FILES, "mlflow_server.log"):
        assert stat.S_IMODE((d / name).stat().st_mode) == 0o600, name
    # the cluster lives under DIR, not in /tmp; DIR and the artifact root are closed to other users
    # (as root, PostgreSQL's group may pass through DIR to its cluster, and read nothing there)
    assert Path(state["pg_dir"]) == d / "pg" and (d / "pg" / "data" / "PG_VERSION").is_file()
    assert stat.S_IMODE(d.stat().st_mode) == (0o710 if os.geteuid() == 0 else 0o700)
    assert stat.S_IMODE((d / "artifacts").stat().st_mode) == 0o700
    assert stat.S_IMODE((d / "pg").stat().st_mode) == 0o700
    # the PostgreSQL password is in the password file and nowhere else under DIR
    assert {p.name for p in d.rglob("*") if p.is_file() and db_pw in p.read_text(errors="replace")} == {"pgpass"}
    cfg = configparser.ConfigParser()
    cfg.read(d / "basic_auth.ini")
    db_uri = urlsplit(cfg["mlflow"]["database_uri"])
    assert db_uri.username == "mlflow" and db_uri.password is None and db_uri.hostname == "127.0.0.1"
    assert (d / "admin_password").read_text() == ADMIN_PW

    # PostgreSQL: loopback only; no pg_hba rule trusts anyone; the mlflow role needs its password
    monkeypatch.delenv("PGPASSWORD", raising=False)
    conn = psycopg2.connect(host="127.0.0.1", port=state["pg_port"], user="mlflow", dbname="postgres",
                            passfile=str(d / "pgpass"))
    with conn.cursor() as cur:
        cur.execute("SHOW listen_addresses")
        assert cur.fetchone()[0] == "127.0.0.1"
        cur.execute("SELECT DISTINCT auth_method FROM pg_hba_file_rules")
        methods = {m for (m,) in cur.fetchall()}
    conn.close()
    assert "trust" not in methods and "scram-sha-256" in methods
    for kw in ({"passfile": os.devnull}, {"password": "not-the-password"}):
        with pytest.raises(psycopg2.OperationalError):
            psycopg2.connect(host="127.0.0.1", port=state["pg_port"], user="mlflow", dbname="postgres",
                             connect_timeout=10, **kw).close()

    # a crash: the MLflow server's own process killed (SIGKILL), its uvicorn workers and its
    # PostgreSQL left running. start, with no stop first, stops what is left of the old server,
    # keeps PostgreSQL and is up again within 30 s on a quiet machine (a restart was stop + start,
    # 94-115 s, and start refused while PostgreSQL ran); checked on this test's server, which costs
    # a server start less than a test of its own
    import signal
    import time

    old_pid = state["pid"]
    old_group = [p for p, a in _argvs().items() if _pgid(p) == old_pid]
    pg_pid = int((Path(state["pg_dir"]) / "data" / "postmaster.pid").read_text().split()[0])
    os.kill(old_pid, signal.SIGKILL)
    t0 = time.monotonic()
    restart()
    took = time.monotonic() - t0
    assert took < procs.timeout(30), took
    assert [p for p in old_group if p in _argvs() and _pgid(p) == old_pid] == []  # nothing of the old server left
    assert int((Path(state["pg_dir"]) / "data" / "postmaster.pid").read_text().split()[0]) == pg_pid  # kept
    new_pid = json.loads((d / "server.json").read_text())["pid"]
    # no job runner, no huey consumer: only the server, uvicorn and its workers
    group = {p: a for p, a in _argvs().items() if _pgid(p) == new_pid}
    assert not [a for a in group.values() if "huey" in a or "job_runner" in a], group
    environ = Path(f"/proc/{new_pid}/environ").read_bytes().split(b"\0")
    assert b"MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false" in environ
    with urllib.request.urlopen(req, timeout=procs.timeout(30)) as r:
        assert r.status == 200


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def _reads_through_the_app(uri, d, state, monkeypatch):
    """The server runs recipe_audit's app: the reads of a card and of the gate go through it, and
    give what PostgreSQL gives read directly (the SQL reader on PostgreSQL, here and in the server)."""
    import pandas as pd
    from helpers.store import synthetic_sweep

    from recipe_audit import keys
    from recipe_audit.store import read_server
    from recipe_audit.store.history import read_history
    from recipe_audit.store.read import read_runs
    from recipe_audit.store.read_sql import clear_engine_cache, snapshot

    pid = json.loads((d / "server.json").read_text())["pid"]
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    assert argv[argv.index("--app-name") + 1] == "recipe-audit"
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "admin")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", ADMIN_PW)
    monkeypatch.setenv("PGPASSFILE", str(d / "pgpass"))
    metric = keys.accuracy_key("calibration")
    synthetic_sweep(uri, {0: 0.9, 1: 0.5, 2: float("nan"), 3: None}, sweep_id="s", bar_taus=(0.7,))
    db = f"postgresql+psycopg2://mlflow@127.0.0.1:{state['pg_port']}/mlflow"
    read_server.forget_servers()
    try:
        served, direct = read_runs(uri, "exp", [metric]), read_runs(db, "exp", [metric])
        rest = read_runs(uri, "exp", [metric], backend="rest")  # MLflow's own reads: not our SQL
        assert served.attrs["path"] == "server" and direct.attrs["path"] == "sql" and len(served) == 4
        pd.testing.assert_frame_equal(served, direct, check_exact=True)
        pd.testing.assert_frame_equal(rest, direct, check_exact=True)
        with snapshot(db) as conn:  # the planner told that MLflow's pages are in memory: its indexes are probed
            assert conn.exec_driver_sql("SHOW random_page_cost").scalar() == "1.1"
        fails = keys.fails_tag(metric, 0.7)
        h_srv, h_db = (read_history(u, "exp", metric, fails_tag=fails) for u in (uri, db))
        shown = [h.frame.assign(history=h.frame["history"].map(repr)) for h in (h_srv, h_db)]
        pd.testing.assert_frame_equal(*shown, check_exact=True)
        assert h_db.frame["fails_tag"].tolist().count("true") == 3 and h_srv.directions == h_db.directions
    finally:
        clear_engine_cache()
        read_server.forget_servers()
        for k in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "PGPASSFILE"):
            monkeypatch.delenv(k)


def test_private_files_and_pgpass_roundtrip(tmp_path):
    """The helpers behind DIR's secret files: mode 600 even over a file that was world-readable,
    and a password with pgpass's special characters reads back as written."""
    spec = importlib.util.spec_from_file_location("tracking_server", SCRIPT)
    ts = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ts)
    f = tmp_path / "pgpass"
    f.write_text("old")
    f.chmod(0o644)
    ts._write_pgpass(f, 5433, "a:b\\c@d")
    assert stat.S_IMODE(f.stat().st_mode) == 0o600
    assert f.read_text() == "127.0.0.1:5433:*:mlflow:a\\:b\\\\c@d\n"
    assert ts._pgpass_password(f) == "a:b\\c@d"
    assert ts._pgpass_password(tmp_path / "absent") is None
    f.write_text("")
    assert ts._pgpass_password(f) is None


@pytest.mark.slow
def test_tracking_server_postgres_auth_parallel_ci(server, tmp_path, monkeypatch):
    uri, d, _ = server
    # the backend store is PostgreSQL: the server process was started with a postgresql URI
    pid = json.loads((d / "server.json").read_text())["pid"]
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    assert argv[argv.index("--backend-store-uri") + 1].startswith("postgresql+psycopg2://")
    # without credentials: refused
    req = urllib.request.Request(uri + "/api/2.0/mlflow/experiments/search?max_results=1")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=10)
    assert err.value.code == 401
    no_creds = {k: "" for k in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")}
    refused = run_app(["-m", "seed=range(2)", f"hydra.sweep.dir={tmp_path / 'refused'}", *SMALL], cwd=tmp_path,
                      env_extra={**ENV, **no_creds, "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"}, timeout=300)
    assert refused.returncode != 0
    # the password in the tracking URI: refused before anything is written or sent
    host = urlsplit(uri).netloc
    in_uri = run_app(["-m", "seed=range(2)", f"hydra.sweep.dir={tmp_path / 'in_uri'}", *SMALL,
                      f"tracking.uri=http://admin:{ADMIN_PW}@{host}"], cwd=tmp_path,
                     env_extra={**ENV, **no_creds}, timeout=300)
    assert in_uri.returncode == 2 and "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD" in in_uri.stderr
    assert ADMIN_PW not in in_uri.stdout + in_uri.stderr and not (tmp_path / "in_uri").exists()
    # with them in the environment: a parallel sweep logs every rerun, the card is computed once from
    # the server; the password is in no process's arguments while it runs (the launcher's workers
    # included), in no file of the sweep folder, no logged artifact and nothing printed
    import threading
    import time

    creds = {"MLFLOW_TRACKING_USERNAME": "admin", "MLFLOW_TRACKING_PASSWORD": ADMIN_PW}
    sweep_dir = tmp_path / "sweep"
    seen_args, leaks, done = [0], [], threading.Event()

    def ppid(pid):
        try:
            return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            return None

    def watch():  # every process's arguments, every 0.2 s while the sweep runs
        while not done.is_set():
            argvs = _argvs()
            app = {pid for pid, a in argvs.items() if "-m recipe_audit" in a and str(sweep_dir) in a}
            workers = [pid for pid in argvs if ppid(pid) in app]  # the launcher's loky workers
            seen_args[0] = max(seen_args[0], len(workers) if app else 0)
            leaks.extend(a.replace(ADMIN_PW, "<admin password>")[:300] for a in argvs.values() if ADMIN_PW in a)
            time.sleep(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        proc = run_app(["-m", "hydra/launcher=local_parallel", "seed=range(4)", f"hydra.sweep.dir={sweep_dir}",
                        f"tracking.uri={uri}", *SMALL], cwd=tmp_path, env_extra={**ENV, **creds}, timeout=600)
    finally:
        done.set()
        watcher.join(timeout=10)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (proc.stdout + proc.stderr).count("Recipe cards (") == 1
    cell = json.loads((sweep_dir / "card" / "card.json").read_text())["cells"][0]
    assert cell["n_reruns"] == 4 and cell["unfinished"] == []
    assert seen_args[0] >= 1 and leaks == []  # the app and its workers were seen, without the password
    assert ADMIN_PW not in proc.stdout + proc.stderr
    written = [f for f in sweep_dir.rglob("*") if f.is_file()]
    assert any(f.name == "multirun.yaml" for f in written)
    assert [str(f) for f in written if ADMIN_PW.encode() in f.read_bytes()] == []
    from mlflow.tracking import MlflowClient

    for k, v in creds.items():
        monkeypatch.setenv(k, v)
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("recipe_audit")
    reruns = client.search_runs([exp.experiment_id], "tags.`recipe_audit.kind` = 'rerun'")
    got = Path(client.download_artifacts(reruns[0].info.run_id, "", str(tmp_path / "artifacts")))
    artifacts = [f for f in got.rglob("*") if f.is_file()]
    assert any(f.name == "config.yaml" for f in artifacts), artifacts  # the rerun's resolved config
    assert [str(f) for f in artifacts if ADMIN_PW.encode() in f.read_bytes()] == []
    assert all(ADMIN_PW not in json.dumps([r.data.params, r.data.tags]) for r in reruns)
    # four concurrent writers into the server lose no run and no metric
    for k, v in creds.items():
        monkeypatch.setenv(k, v)
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    bench = importlib.import_module("bench_writers")
    res = bench.run_writers(uri, 4, 5, 20)
    assert res["got"]["runs"] == 20 and res["got"]["steps"] == 400 and res["got"]["final_metrics"] == 20
    assert not any(res["lost"].values())

    # PostgreSQL crashes (its postmaster killed): start, with no stop first, starts it again (its
    # crash recovery syncing the data directory with syncfs, PostgreSQL 14+) while the MLflow
    # server starts, and nothing that was committed is lost
    import signal

    state = json.loads((d / "server.json").read_text())
    pg_data = Path(state["pg_dir"]) / "data"
    postmaster = int((pg_data / "postmaster.pid").read_text().split()[0])
    os.kill(postmaster, signal.SIGKILL)
    t0 = time.monotonic()
    _, _, restart = server
    restart()
    took = time.monotonic() - t0
    assert took < procs.timeout(30), took
    assert int((pg_data / "postmaster.pid").read_text().split()[0]) != postmaster
    assert "automatic recovery in progress" in (Path(state["pg_dir"]) / "postgres.log").read_text()
    if int((pg_data / "PG_VERSION").read_text()) >= 14:
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", port=state["pg_port"], user="mlflow", dbname="postgres",
                                passfile=str(d / "pgpass"))
        with conn.cursor() as cur:
            cur.execute("SHOW recovery_init_sync_method")
            assert cur.fetchone()[0] == "syncfs"
        conn.close()
    again = client.search_runs([exp.experiment_id], "tags.`recipe_audit.kind` = 'rerun'")
    assert sorted(r.info.run_id for r in again) == sorted(r.info.run_id for r in reruns)


@pytest.mark.slow
def test_server_gone_mid_sweep_stops_clearly_and_resumes(server, tmp_path):
    """The server stops after two reruns finished: the sweep stops with one sentence naming the
    way out; no finished rerun is lost; relaunched with tracking.resume=true once the server is
    back, it trains only the seeds with no finished rerun and the card has every seed once."""
    import time

    from mlflow.tracking import MlflowClient

    uri, d, start = server
    # MLflow's own retry settings left unset: the sweep bounds them for its processes (each later
    # seed spent about 4 minutes in MLflow's retries before)
    creds = {"MLFLOW_TRACKING_USERNAME": "admin", "MLFLOW_TRACKING_PASSWORD": "s3cret-Admin-pw"}
    sweep_dir = tmp_path / "sweep"
    args = ["-m", "seed=range(8)", f"hydra.sweep.dir={sweep_dir}", *SMALL]
    # the sweep waits 20 s for a server that went away (120 s unless set), then stops
    env = {**os.environ, "HYDRA_FULL_ERROR": "0", **ENV, **creds, "RECIPE_AUDIT_SERVER_WAIT_S": "20"}
    proc = procs.spawn([sys.executable, "-m", "recipe_audit", *args], cwd=tmp_path, env=env,
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
        procs.run([sys.executable, str(SCRIPT), "stop", "--dir", str(d)], timeout=120, check=True)
        stopped = time.monotonic()
        out, err = proc.communicate(timeout=procs.timeout(300))
        took = time.monotonic() - stopped
    finally:
        if proc.poll() is None:
            proc.kill()
        for k in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
            os.environ.pop(k, None)
    assert proc.returncode == 2, err[-3000:]
    assert "relaunch the same command with tracking.resume=true" in err
    assert took < procs.timeout(60) + 20, took  # within a minute of its wait for the server
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
        # the parent run and the attempt the server's end cut short are closed too
        assert [r.info.run_id for r in client.search_runs([exp.experiment_id], "attributes.status = 'RUNNING'")] == []
    finally:
        for k in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
            os.environ.pop(k, None)
    done = [r for r in runs if r.info.status == "FINISHED"]
    assert before <= {r.info.run_id for r in done}
    assert sorted(int(r.data.tags["recipe_audit.seed"]) for r in done) == list(range(8))  # each seed once
    cell = json.loads((sweep_dir / "card" / "card.json").read_text())["cells"][0]
    assert cell["n_reruns"] == 8 and cell["unfinished"] == []


def _script():
    spec = importlib.util.spec_from_file_location("tracking_server", SCRIPT)
    ts = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ts)
    return ts


def _started(ts, *ps) -> None:
    """Wait until each process shows its command line (a busy machine may take a moment)."""
    import time

    deadline = time.monotonic() + procs.timeout(10)
    while not all(ts._cmdline(p.pid) for p in ps) and time.monotonic() < deadline:
        time.sleep(0.05)


def test_start_after_a_crash_finds_what_is_left(tmp_path):
    """The helpers behind start after a crash: a postmaster.pid naming a dead process (or a live
    process that is not PostgreSQL: its pid reused) is a dead server's lock, removed; one naming a
    live PostgreSQL is a running server. The old server's processes are those of its process group
    with a server's command line; a process of another group, or one whose pid was reused, is not."""
    ts = _script()
    data = tmp_path / "data"
    data.mkdir()
    lock = data / "postmaster.pid"
    assert not ts._pg_running(data)  # no lock file
    dead = procs.spawn([sys.executable, "-c", "pass"])
    dead.wait()
    lock.write_text(f"{dead.pid}\n{data}\n")
    assert not ts._pg_running(data) and not lock.exists()
    lock.write_text(f"{os.getpid()}\n{data}\n")  # a live process, not PostgreSQL
    assert not ts._pg_running(data) and not lock.exists()
    fake_pg = procs.spawn([sys.executable, "-c", "import time; time.sleep(60)", "postgres", "-D", str(data)])
    try:
        _started(ts, fake_pg)
        lock.write_text(f"{fake_pg.pid}\n{data}\n")
        assert ts._pg_running(data) and lock.exists()
    finally:
        fake_pg.kill()
        fake_pg.wait()
    server = procs.spawn([sys.executable, "-c", "import time; time.sleep(60)", "mlflow", "server"],
                         start_new_session=True)
    other = procs.spawn([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        _started(ts, server, other)
        assert ts._server_processes(server.pid) == [server.pid]
        assert ts._server_processes(other.pid) == []  # its group, but not a server's command line
        assert ts._server_processes(None) == []
        ts._stop_server(server.pid, grace_s=5)
        assert server.wait(timeout=procs.timeout(10)) is not None and other.poll() is None
    finally:
        for p in (server, other):
            p.kill()
            p.wait()


def test_start_after_a_crash_cleans_up_quickly(tmp_path, monkeypatch):
    """A dead postmaster's socket lock goes with its postmaster.pid (PostgreSQL refuses one that
    names a pid not yet reaped); another postmaster's stays. Stopping the old server does not wait
    for ``mlflow server`` to tear itself down once what it served has stopped. One worker per two
    CPUs, 1 to 8."""
    import time

    ts = _script()
    data, sock = tmp_path / "pg" / "data", tmp_path / "pg" / "sock"
    data.mkdir(parents=True)
    sock.mkdir()
    dead = procs.spawn([sys.executable, "-c", "pass"])
    dead.wait()
    (data / "postmaster.pid").write_text(f"{dead.pid}\n{data}\n")
    (sock / ".s.PGSQL.5433.lock").write_text(f"{dead.pid}\n{data}\n")
    (sock / ".s.PGSQL.5434.lock").write_text(f"{os.getpid()}\n/elsewhere\n")  # another cluster's
    assert not ts._pg_running(data)
    assert sorted(p.name for p in sock.iterdir()) == [".s.PGSQL.5434.lock"]

    # `mlflow server` forwards SIGTERM to its server (here a child that stops at once), waits for
    # it, then takes its time to exit (its interpreter's teardown; 60 s here, longer than the grace)
    leader = ("import signal, subprocess, sys, time\n"
              "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', 'uvicorn'])\n"
              "signal.signal(signal.SIGTERM, lambda *a: child.terminate())\n"
              "print('ready', flush=True)\n"
              "child.wait()\n"
              "time.sleep(60)\n")
    server = procs.spawn([sys.executable, "-c", leader, "mlflow", "server"], start_new_session=True,
                         stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "ready"
        assert len(ts._server_processes(server.pid)) == 2  # the leader and its uvicorn
        t0 = time.monotonic()
        ts._stop_server(server.pid, grace_s=50)
        took = time.monotonic() - t0
        assert server.wait(timeout=5) == -9 and ts._server_processes(server.pid) == []
        assert took < procs.timeout(10), took  # at most 40 s: not the grace of 50 s the leader would take
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()

    for cpus, workers in ((1, 1), (2, 1), (3, 1), (4, 2), (16, 8), (64, 8)):
        monkeypatch.setattr(os, "sched_getaffinity", lambda _pid, n=cpus: set(range(n)))
        assert ts._default_workers() == workers, cpus


@pytest.mark.slow
def test_sweeps_at_once_ride_through_a_server_crash_and_a_postgres_restart_ci(server, tmp_path):
    """Four sweeps start at once into one new experiment (they race to create it), the MLflow
    server is killed mid-sweep and started again (start, no stop), then its PostgreSQL is
    restarted: every sweep waits them out, saying so, and ends with every seed FINISHED once and its
    card; nothing is left RUNNING (bench/bench_server_load.py does the same at 1, 4 and 8 sweeps)."""
    import time

    uri, d, start = server
    spec = importlib.util.spec_from_file_location("bench_server_load", REPO / "bench" / "bench_server_load.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    bench.ADMIN_PW = ADMIN_PW
    n, seeds = 4, 6
    dirs = [tmp_path / f"sweep{i}" for i in range(n)]
    sweeps = [bench.launch(uri, "at-once", sd, seeds) for sd in dirs]
    events, restart_s = [], None
    try:
        deadline = time.monotonic() + procs.timeout(900)
        while any(p.poll() is None for p in sweeps) and time.monotonic() < deadline:
            time.sleep(1)
            done = bench.finished_reruns(uri, "at-once")
            if not events and done >= 4:
                bench.crash_server(d)
                t0 = time.monotonic()
                start()
                restart_s = time.monotonic() - t0
                events.append(("server", done))
            elif len(events) == 1 and done >= 12:
                bench.restart_postgres(d)
                events.append(("postgres", done))
    finally:
        for p in sweeps:
            if p.poll() is None:
                p.kill()
            p.wait()
        for k in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
            os.environ.pop(k, None)
    logs = [(tmp_path / f"sweep{i}.log").read_text() for i in range(n)]
    assert [p.returncode for p in sweeps] == [0] * n, [lg[-2000:] for lg in logs]
    assert [e for e, _ in events] == ["server", "postgres"] and max(done for _, done in events) < n * seeds, events
    assert restart_s < procs.timeout(30), restart_s
    got = bench.count(uri, "at-once", dirs, seeds)
    for k in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
        os.environ.pop(k, None)
    assert got["seeds_finished"] == n * seeds and got["cards"] == n and got["running"] == 0, got
    assert got["reruns_not_finished"] == 0, got
    # a sweep whose call met the outage says it waits and then that the server answers again; on a
    # quiet machine the new server can be up before any call fails for longer than MLflow's own
    # retries cover (seen: 0 of 4 sweeps waited, 2026-12-06), so no sweep need have waited
    # (the wait and its two lines are tested in process: tests/store/test_retrying.py)
    waited = [lg for lg in logs if "; waiting for it, up to 120 s" in lg]
    assert all("answers again (after" in lg for lg in waited), [lg[-2000:] for lg in waited]
