"""A shared MLflow tracking server for teams and clusters: PostgreSQL backend store, a shared
artifact root, MLflow's basic-auth app. Everything listens on 127.0.0.1 unless told otherwise.

    python launchers/tracking_server.py start --dir /srv/mlflow --port 5000 --pg-port 5433
        # prints the tracking URI; the admin password is read from $MLFLOW_AUTH_ADMIN_PASSWORD
        # (or generated and written to DIR/admin_password, mode 600)
    MLFLOW_TRACKING_USERNAME=admin MLFLOW_TRACKING_PASSWORD=... \\
        python -m recipe_audit -m hydra/launcher=local_parallel threads=1 tracking.uri=http://127.0.0.1:5000
    python launchers/tracking_server.py stop --dir /srv/mlflow

``start`` initialises a PostgreSQL cluster (initdb, run as the ``postgres`` user when started as
root) on loopback, creates the databases ``mlflow`` (runs) and ``mlflow_auth`` (the auth app's
users and permissions), writes the auth app's config (``DIR/basic_auth.ini``,
``default_permission = READ``) and starts ``mlflow server --app-name basic-auth`` with
``--artifacts-destination DIR/artifacts`` (clients upload and download artifacts through the
server: nothing else is shared). A second ``start`` on the same DIR reuses the cluster and the
data. State (pids, ports, paths) is in ``DIR/server.json``; ``stop`` stops both servers.
Needs PostgreSQL's server binaries (Debian: ``apt-get install postgresql``) and
``pip install 'recipe_audit[server]'`` (psycopg2).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

PG_USER = "mlflow"


def _pg_bin() -> Path:
    found = shutil.which("initdb")
    if found:
        return Path(os.path.realpath(found)).parent
    cands = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not cands:
        raise SystemExit("tracking_server: PostgreSQL's initdb was not found (Debian: apt-get install postgresql).")
    return Path(cands[-1]).parent


def _as_pg(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    """Run a PostgreSQL server command, as the ``postgres`` user when we are root."""
    if os.geteuid() == 0:
        cmd = ["runuser", "-u", "postgres", "--", *cmd]
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def _wait_http(url: str, timeout_s: float, proc: subprocess.Popen | None = None) -> None:
    t0 = time.time()
    while time.time() - t0 < timeout_s:
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"tracking_server: the server exited (status {proc.returncode}); see its log.")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"tracking_server: {url} did not answer within {timeout_s:.0f} s.")


def start(d: Path, port: int, pg_port: int, host: str = "127.0.0.1", workers: int = 2) -> dict:
    d = d.resolve()
    d.mkdir(parents=True, exist_ok=True)
    state_file = d / "server.json"
    state = json.loads(state_file.read_text()) if state_file.exists() else {}
    pw_file = d / "admin_password"
    admin_pw = os.environ.get("MLFLOW_AUTH_ADMIN_PASSWORD") or (
        pw_file.read_text().strip() if pw_file.exists() else secrets.token_urlsafe(18))
    pw_file.write_text(admin_pw)
    pw_file.chmod(0o600)
    db_pw = state.get("db_password") or secrets.token_urlsafe(18)
    pgbin = _pg_bin()
    # the cluster lives where the postgres user can reach it (a pytest tmp dir is root-only)
    pg_dir = Path(state.get("pg_dir") or tempfile.mkdtemp(prefix="recipe_audit_pg_"))
    data, sock = pg_dir / "data", pg_dir / "sock"
    if os.geteuid() == 0:
        shutil.chown(pg_dir, "postgres", "postgres")
    if not (data / "PG_VERSION").exists():
        pwfile = pg_dir / "pw"
        pwfile.write_text(db_pw)
        if os.geteuid() == 0:
            shutil.chown(pwfile, "postgres", "postgres")
        _as_pg([str(pgbin / "initdb"), "-D", str(data), "-U", PG_USER, f"--pwfile={pwfile}",
                "--auth-host=scram-sha-256", "--auth-local=peer", "-E", "UTF8", "--no-instructions"])
        pwfile.unlink()
        _as_pg(["mkdir", "-p", str(sock)])
    _as_pg([str(pgbin / "pg_ctl"), "-D", str(data), "-l", str(pg_dir / "postgres.log"), "-w", "-t", "60",
            "-o", f"-c listen_addresses=127.0.0.1 -p {pg_port} -k {sock}", "start"])
    import psycopg2  # pip install 'recipe_audit[server]'

    conn = psycopg2.connect(host="127.0.0.1", port=pg_port, user=PG_USER, password=db_pw, dbname="postgres")
    conn.autocommit = True
    with conn.cursor() as cur:
        for db in ("mlflow", "mlflow_auth"):
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (db,))
            if cur.fetchone() is None:
                cur.execute(f"CREATE DATABASE {db}")
    conn.close()
    backend = f"postgresql+psycopg2://{PG_USER}:{db_pw}@127.0.0.1:{pg_port}/mlflow"
    (d / "basic_auth.ini").write_text(
        "[mlflow]\ndefault_permission = READ\n"
        f"database_uri = postgresql+psycopg2://{PG_USER}:{db_pw}@127.0.0.1:{pg_port}/mlflow_auth\n"
        "admin_username = admin\nauthorization_function = mlflow.server.auth:authenticate_request_basic_auth\n")
    (d / "basic_auth.ini").chmod(0o600)
    (d / "artifacts").mkdir(exist_ok=True)
    secret = state.get("flask_secret") or secrets.token_urlsafe(32)  # CSRF key of the auth app's forms
    env = {**os.environ, "MLFLOW_AUTH_CONFIG_PATH": str(d / "basic_auth.ini"), "MLFLOW_AUTH_ADMIN_PASSWORD": admin_pw,
           "MLFLOW_FLASK_SERVER_SECRET_KEY": os.environ.get("MLFLOW_FLASK_SERVER_SECRET_KEY", secret)}
    env.pop("MLFLOW_TRACKING_URI", None)
    log = open(d / "mlflow_server.log", "ab")
    proc = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--backend-store-uri", backend,
                             "--artifacts-destination", str(d / "artifacts"), "--serve-artifacts",
                             "--app-name", "basic-auth", "--host", host, "--port", str(port),
                             "--workers", str(workers)],
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=d)
    state = {"pid": proc.pid, "port": port, "pg_port": pg_port, "pg_dir": str(pg_dir), "pg_bin": str(pgbin),
             "db_password": db_pw, "flask_secret": secret, "uri": f"http://{host}:{port}"}
    state_file.write_text(json.dumps(state))
    state_file.chmod(0o600)
    try:
        _wait_http(f"http://{host}:{port}/health", 120, proc)
    except SystemExit:
        stop(d)
        raise
    return state


def stop(d: Path) -> None:
    state_file = d.resolve() / "server.json"
    if not state_file.exists():
        return
    state = json.loads(state_file.read_text())
    pid = state.get("pid")
    if pid:
        try:
            os.killpg(pid, signal.SIGTERM)  # the server and its workers (its own session)
            for _ in range(40):
                os.kill(pid, 0)
                time.sleep(0.25)
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    data = Path(state["pg_dir"]) / "data"
    if (data / "postmaster.pid").exists():
        _as_pg([str(Path(state["pg_bin"]) / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"])
    state["pid"] = None
    state_file.write_text(json.dumps(state))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=["start", "stop"])
    ap.add_argument("--dir", type=Path, required=True, help="server state, auth config and shared artifact root")
    ap.add_argument("--port", type=int, default=5000)
    ap.add_argument("--pg-port", type=int, default=5433)
    ap.add_argument("--host", default="127.0.0.1", help="address the MLflow server listens on")
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args(argv)
    if a.action == "start":
        state = start(a.dir, a.port, a.pg_port, a.host, a.workers)
        print(state["uri"])
    else:
        stop(a.dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
