"""A shared MLflow tracking server for teams and clusters: PostgreSQL backend store, a shared
artifact root, recipe_audit's server app (MLflow's basic-auth app plus recipe_audit's reads in SQL
on the server's store). Everything listens on 127.0.0.1 unless told otherwise.

    python launchers/tracking_server.py start --dir /srv/mlflow --port 5000 --pg-port 5433
        # prints the tracking URI; the admin password is read from $MLFLOW_AUTH_ADMIN_PASSWORD
        # (or generated and written to DIR/admin_password, mode 600)
    MLFLOW_TRACKING_USERNAME=admin MLFLOW_TRACKING_PASSWORD=... \\
        python -m recipe_audit -m hydra/launcher=local_parallel threads=1 tracking.uri=http://127.0.0.1:5000
    python launchers/tracking_server.py stop --dir /srv/mlflow

``start`` initialises a PostgreSQL cluster in ``DIR/pg`` (initdb, run as the ``postgres`` user when
started as root) on loopback, creates the databases ``mlflow`` (runs) and ``mlflow_auth`` (the auth app's
users and permissions), writes the auth app's config (``DIR/basic_auth.ini``,
``default_permission = READ``) and starts ``mlflow server --app-name recipe-audit`` (basic-auth, which
keeps deciding who may do what, with recipe_audit's reads added: recipe_audit/store/server_app.py) with
``--artifacts-destination DIR/artifacts`` (clients upload and download artifacts through the
server: nothing else is shared). A second ``start`` on the same DIR reuses the cluster and the
data. State (pids, ports, paths) is in ``DIR/server.json``; ``stop`` stops both servers.

``start`` is also the restart, and works after a crash without a ``stop``: what is left of the
MLflow server that ``server.json`` names (its process group: uvicorn and its workers, recognised by
their command lines, so a pid reused by another program is left alone) is stopped; a PostgreSQL of
the cluster that still runs is kept, and a ``postmaster.pid`` left by one that died is removed. The
server runs without MLflow's job runner (``MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false``: no huey
consumers), with one worker per CPU (2 to 8; ``--workers``), and its workers remember a checked
password for ``--auth-cache-s`` seconds (60; basic auth hashes the password on every request
otherwise).

No secret goes on a command line (``ps -eo args`` shows every local user every process's argv) or
into a log. PostgreSQL listens on 127.0.0.1 and asks the ``mlflow`` role for its password
(scram-sha-256); that password lives only in ``DIR/pgpass``, PostgreSQL's own password file (mode
600), which the server finds through ``PGPASSFILE``: the backend store URI and the auth app's
``database_uri`` carry no password. The admin password reaches the server in its environment
(``MLFLOW_AUTH_ADMIN_PASSWORD``), which only its user can read. Every file that holds a secret
(``pgpass``, ``admin_password``, ``basic_auth.ini``, ``server.json``) is created mode 600, as is
the server's log; ``DIR`` and ``DIR/artifacts`` are 0700 (as root, ``DIR`` is 0710 for the
``postgres`` group, to reach ``DIR/pg``), and the server writes with umask 077.
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
import time
import urllib.request
from pathlib import Path

from recipe_audit.store.uris import mask_credentials

PG_USER = "mlflow"
APP_NAME = "recipe-audit"  # pyproject's mlflow.app entry point: basic-auth plus recipe_audit's reads


def _pg_bin() -> Path:
    found = shutil.which("initdb")
    if found:
        return Path(os.path.realpath(found)).parent
    cands = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not cands:
        raise SystemExit("tracking_server: PostgreSQL's initdb was not found (Debian: apt-get install postgresql).")
    return Path(cands[-1]).parent


def _pg_cmd(cmd: list[str]) -> list[str]:
    """A PostgreSQL server command, run as the ``postgres`` user when we are root."""
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


def _as_pg(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    """Run a PostgreSQL server command (as the ``postgres`` user when we are root)."""
    return subprocess.run(_pg_cmd(cmd), check=True, capture_output=True, text=True, **kw)


def _finished(proc: subprocess.Popen) -> None:
    """Wait for a command started with ``_pg_cmd``; CalledProcessError, as ``_as_pg``'s, if it failed."""
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, proc.args, out, err)


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, readable by its owner only (mode 600) before a byte is written."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        os.fchmod(fd, 0o600)  # an existing file keeps its mode through O_TRUNC
        f.write(text)


def _pgpass_escape(field: str) -> str:
    return field.replace("\\", "\\\\").replace(":", "\\:")


def _pgpass_password(path: Path) -> str | None:
    """The password of the line ``_write_pgpass`` wrote to ``path`` (None when there is no file)."""
    lines = path.read_text().splitlines() if path.exists() else []
    if not lines:
        return None
    fields, cur, esc = [], "", False
    for ch in lines[0]:
        if esc:
            cur, esc = cur + ch, False
        elif ch == "\\":
            esc = True
        elif ch == ":":
            fields, cur = [*fields, cur], ""
        else:
            cur += ch
    return cur if len(fields) == 4 and cur else None


def _write_pgpass(path: Path, port: int, password: str) -> None:
    """PostgreSQL's password file (libpq reads it through PGPASSFILE and ignores it unless mode 600)."""
    _write_private(path, f"127.0.0.1:{port}:*:{_pgpass_escape(PG_USER)}:{_pgpass_escape(password)}\n")


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
        time.sleep(0.1)  # a refused connection costs nothing: the server is up within 0.1 s of listening
    raise SystemExit(f"tracking_server: {mask_credentials(url)} did not answer within {timeout_s:.0f} s.")


def _private_dir(d: Path) -> None:
    """DIR is its user's alone (0700); as root, the postgres group may pass through it (0710) to
    reach the cluster under it, and list or read nothing."""
    if os.geteuid() == 0:
        shutil.chown(d, group="postgres")
        os.chmod(d, 0o710)
    else:
        os.chmod(d, 0o700)


def _cmdline(pid: int) -> str:
    """A process's argv joined by spaces ('' when it is gone or cannot be read)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _pg_running(data: Path) -> bool:
    """Whether the cluster in ``data`` has a server running: ``postmaster.pid`` names a live
    PostgreSQL process. A lock file left by a PostgreSQL that died (killed, a crash, a reboot; its
    pid perhaps reused by another program since) is removed, so the cluster can start again."""
    lock = data / "postmaster.pid"
    try:
        first = lock.read_text().split("\n", 1)[0].strip()
    except OSError:
        return False
    if first.isdigit() and ("postgres" in _cmdline(int(first)) or "postmaster" in _cmdline(int(first))):
        return True
    lock.unlink(missing_ok=True)  # a dead server's: PostgreSQL would refuse to start over a live pid
    # and the lock of its socket (DIR/pg/sock): until the dead postmaster is reaped (a zombie's pid
    # still exists), PostgreSQL refuses a socket lock that names it ("lock file ... already exists")
    for sock_lock in glob.glob(str(data.parent / "sock" / ".s.PGSQL.*.lock")):
        try:
            if Path(sock_lock).read_text().split("\n", 1)[0].strip() == first:
                Path(sock_lock).unlink()
        except OSError:
            pass
    return False


_SERVER_WORDS = ("mlflow", "uvicorn", "gunicorn", "huey", "multiprocessing")  # the server's processes


def _server_processes(pgid: int | None) -> list[int]:
    """The live processes of the MLflow server started as ``pgid`` (its own process group: the
    server, uvicorn and its worker processes), recognised by their group and their command line,
    so a pid reused since by another program is never touched."""
    if not pgid:
        return []
    out = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            fields = Path(stat).read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        pid = int(stat.split("/")[2])
        argv = _cmdline(pid)
        if len(fields) > 2 and int(fields[2]) == pgid and any(w in argv for w in _SERVER_WORDS):
            out.append(pid)
    return out


def _signal(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _stop_server(pgid: int | None, grace_s: float = 10.0) -> None:
    """Stop the MLflow server of process group ``pgid`` and everything it started (SIGTERM, then
    SIGKILL after ``grace_s``); nothing when it is gone. Once what serves (uvicorn and its workers)
    has stopped, ``mlflow server`` itself, which only waited for it, is killed: tearing its
    interpreter down took 5 to 8 s more here at a load average of 9."""
    pids = _server_processes(pgid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        _signal(pids, sig)
        deadline = time.monotonic() + grace_s
        while pids and time.monotonic() < deadline:
            time.sleep(0.05)
            pids = [p for p in pids if _cmdline(p)]
            if pids == [pgid]:
                _signal(pids, signal.SIGKILL)
        if not pids:
            return


def _default_workers() -> int:
    """Uvicorn workers for this machine: one per two CPUs this process may use, 1 to 8. Each worker
    imports MLflow and the app on its own (about 4 s of CPU, on every start) and serves many
    requests at once on its threads; PostgreSQL's backends, one process per connection, do the
    queries on the other CPUs."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 2
    return max(1, min(8, cpus // 2))


def start(d: Path, port: int, pg_port: int, host: str = "127.0.0.1", workers: int | None = None,
          auth_cache_s: int = 60) -> dict:
    try:
        import psycopg2  # noqa: F401 - checked before anything starts
    except ImportError:
        raise SystemExit("tracking_server: psycopg2 is not installed (pip install 'recipe_audit[server]').") from None
    os.environ.pop("PGPASSWORD", None)  # it would win over the password file, here and in the server
    d = d.resolve()
    d.mkdir(parents=True, exist_ok=True)
    _private_dir(d)
    state_file = d / "server.json"
    state = json.loads(state_file.read_text()) if state_file.exists() else {}
    pw_file = d / "admin_password"
    admin_pw = os.environ.get("MLFLOW_AUTH_ADMIN_PASSWORD") or (
        pw_file.read_text().strip() if pw_file.exists() else secrets.token_urlsafe(18))
    _write_private(pw_file, admin_pw)
    pgpass = d / "pgpass"
    # a DIR started by an older version of this script kept the password in server.json
    db_pw = _pgpass_password(pgpass) or state.get("db_password") or secrets.token_urlsafe(18)
    _write_pgpass(pgpass, pg_port, db_pw)
    pgbin = _pg_bin()
    # the cluster lives under DIR (0700, its user's alone; as root, PostgreSQL's own user may pass
    # through DIR to DIR/pg and nothing else); a DIR started by an older version keeps its cluster
    pg_dir = Path(state.get("pg_dir") or d / "pg")
    pg_dir.mkdir(mode=0o700, exist_ok=True)
    data, sock = pg_dir / "data", pg_dir / "sock"
    if os.geteuid() == 0:
        shutil.chown(pg_dir, "postgres", "postgres")
        if subprocess.run(["runuser", "-u", "postgres", "--", "test", "-x", str(pg_dir)],
                          capture_output=True).returncode != 0:
            raise SystemExit(f"tracking_server: PostgreSQL runs as the postgres user, which cannot reach {pg_dir} "
                             "(a folder above it is closed to other users); give a --dir it can reach, e.g. under /srv.")
    # a restart, or a start after a crash: a PostgreSQL of this cluster that still runs is kept (on
    # its port), a dead one's lock files removed; the MLflow server recorded in server.json (alive or
    # not, its workers perhaps still holding the port) is stopped
    pg_up = _pg_running(data)
    if pg_up and state.get("pg_port") and state["pg_port"] != pg_port:
        pg_port = int(state["pg_port"])  # the running cluster listens where it was started
        _write_pgpass(pgpass, pg_port, db_pw)
    if not (data / "PG_VERSION").exists():
        pwfile = pg_dir / "pw"
        _write_private(pwfile, db_pw)
        if os.geteuid() == 0:
            shutil.chown(pwfile, "postgres", "postgres")
        _as_pg([str(pgbin / "initdb"), "-D", str(data), "-U", PG_USER, f"--pwfile={pwfile}",
                "--auth-host=scram-sha-256", "--auth-local=peer", "-E", "UTF8", "--no-instructions"])
        pwfile.unlink()
        _as_pg(["mkdir", "-p", str(sock)])
    pg_start = None
    if not pg_up:
        opts = f"-c listen_addresses=127.0.0.1 -p {pg_port} -k {sock}"
        if sys.platform == "linux" and int((data / "PG_VERSION").read_text().split(".")[0]) >= 14:
            # after a crash, PostgreSQL makes the whole data directory durable before it replays its
            # log: file by file (fsync), 9.5 to 11.3 s here at a load average of 9; syncfs, one call
            # per file system, did the same in 0.5 to 0.8 s (PostgreSQL 14+, Linux)
            opts += " -c recovery_init_sync_method=syncfs"
        pg_start = subprocess.Popen(_pg_cmd([str(pgbin / "pg_ctl"), "-D", str(data), "-l", str(pg_dir / "postgres.log"),
                                             "-w", "-t", "60", "-o", opts, "start"]),
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _stop_server(state.get("pid"))  # meanwhile PostgreSQL starts (its crash recovery: disk, not CPU)
    # the databases made by an earlier start: the MLflow server starts while PostgreSQL does (its
    # import takes seconds of CPU before it connects, and it waits for a database that is starting)
    dbs = ("mlflow", "mlflow_auth")
    early = pg_start is not None and state.get("databases") == list(dbs)
    if not early:
        _databases(pg_start, pg_port, pgpass, dbs)
    # no password in either URI: libpq takes it from PGPASSFILE
    backend = f"postgresql+psycopg2://{PG_USER}@127.0.0.1:{pg_port}/mlflow"
    _write_private(d / "basic_auth.ini",
                   "[mlflow]\ndefault_permission = READ\n"
                   f"database_uri = postgresql+psycopg2://{PG_USER}@127.0.0.1:{pg_port}/mlflow_auth\n"
                   "admin_username = admin\n"
                   "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
                   # a checked password is remembered this long per worker (its hash costs tens of
                   # milliseconds of CPU on every request otherwise); 0: checked on every request
                   f"auth_cache_ttl_seconds = {int(auth_cache_s)}\n")
    (d / "artifacts").mkdir(mode=0o700, exist_ok=True)
    os.chmod(d / "artifacts", 0o700)  # only through the server, whose auth decides who reads what
    secret = state.get("flask_secret") or secrets.token_urlsafe(32)  # CSRF key of the auth app's forms
    env = {**os.environ, "MLFLOW_AUTH_CONFIG_PATH": str(d / "basic_auth.ini"), "MLFLOW_AUTH_ADMIN_PASSWORD": admin_pw,
           "MLFLOW_FLASK_SERVER_SECRET_KEY": os.environ.get("MLFLOW_FLASK_SERVER_SECRET_KEY", secret),
           "PGPASSFILE": str(pgpass),
           # no job runner and no huey consumers (MLflow's GenAI jobs): a tracking server for sweeps
           # never runs one, and they took seven processes on the same cores
           "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    env.pop("MLFLOW_TRACKING_URI", None)
    log = os.fdopen(os.open(d / "mlflow_server.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab")
    proc = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--backend-store-uri", backend,
                             "--artifacts-destination", str(d / "artifacts"), "--serve-artifacts",
                             "--app-name", APP_NAME, "--host", host, "--port", str(port),
                             "--workers", str(workers or _default_workers())],
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=d,
                            umask=0o077)  # artifacts and files it writes: 0600 in 0700 folders
    state = {"pid": proc.pid, "port": port, "pg_port": pg_port, "pg_dir": str(pg_dir), "pg_bin": str(pgbin),
             "flask_secret": secret, "uri": f"http://{host}:{port}", "databases": list(dbs)}
    _write_private(state_file, json.dumps(state))
    try:
        if early:
            _databases(pg_start, pg_port, pgpass, dbs)
        _wait_http(f"http://{host}:{port}/health", 120, proc)
    except BaseException:  # PostgreSQL did not start, the server did not answer, ...: nothing left running
        stop(d)
        raise
    return state


def _databases(pg_start: subprocess.Popen | None, pg_port: int, pgpass: Path, dbs: tuple[str, ...]) -> None:
    """Wait for PostgreSQL's start (``pg_start``, when it was started), then make the databases
    ``dbs`` that do not exist yet, connecting as the server will."""
    if pg_start is not None:
        _finished(pg_start)
    import psycopg2

    # through the password file, as the server will: a file libpq ignores fails here, not in the server
    conn = psycopg2.connect(host="127.0.0.1", port=pg_port, user=PG_USER, passfile=str(pgpass), dbname="postgres")
    conn.autocommit = True
    with conn.cursor() as cur:
        for db in dbs:
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (db,))
            if cur.fetchone() is None:
                cur.execute(f"CREATE DATABASE {db}")
    conn.close()


def stop(d: Path) -> None:
    state_file = d.resolve() / "server.json"
    if not state_file.exists():
        return
    state = json.loads(state_file.read_text())
    _stop_server(state.get("pid"))  # the server and its workers (its own process group)
    data = Path(state["pg_dir"]) / "data"
    if _pg_running(data):
        _as_pg([str(Path(state["pg_bin"]) / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"])
    state["pid"] = None
    _write_private(state_file, json.dumps(state))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=["start", "stop"])
    ap.add_argument("--dir", type=Path, required=True, help="server state, auth config and shared artifact root")
    ap.add_argument("--port", type=int, default=5000)
    ap.add_argument("--pg-port", type=int, default=5433)
    ap.add_argument("--host", default="127.0.0.1", help="address the MLflow server listens on")
    ap.add_argument("--workers", type=int, default=None,
                    help="the server's worker processes (default: one per CPU, 2 to 8)")
    ap.add_argument("--auth-cache-s", type=int, default=60,
                    help="seconds a worker remembers a checked password (0: checked on every request)")
    a = ap.parse_args(argv)
    try:
        if a.action == "start":
            state = start(a.dir, a.port, a.pg_port, a.host, a.workers, a.auth_cache_s)
            print(mask_credentials(state["uri"]))
        else:
            stop(a.dir)
    except subprocess.CalledProcessError as exc:  # a PostgreSQL tool refused: its own last line
        said = (exc.stderr or exc.stdout or "").strip().splitlines()
        tool = Path(str(exc.cmd[exc.cmd.index("--") + 1] if "--" in exc.cmd else exc.cmd[0])).name
        raise SystemExit(f"tracking_server: {tool} failed (exit {exc.returncode})"
                         + (f": {said[-1]}" if said else "") + ".") from None
    except OSError as exc:
        raise SystemExit(f"tracking_server: {exc.strerror or exc} ({exc.filename or a.dir}).") from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
