"""The team server's start after a crash, timed: the MLflow server's process killed (SIGKILL), or
its PostgreSQL's postmaster killed (SIGKILL), then ``launchers/tracking_server.py start`` at once,
no ``stop``, until the server answers an authenticated request.

    python bench/bench_server_restart.py --rounds 3                      # this checkout's launcher
    python bench/bench_server_restart.py --rounds 3 --baseline main      # ... and main's, interleaved
    python bench/bench_server_restart.py --rounds 2 --workers 2,1        # ... with 2 and 1 workers

It starts the team server once in a fresh folder (PostgreSQL, the ``recipe-audit`` app, basic
auth), then, in each round, for each launcher (``--baseline REV``: the launcher of git revision REV
too, ``git show REV:launchers/tracking_server.py``, run first in each round) and each
``--workers`` count: kills the MLflow server and runs ``start``, then kills PostgreSQL and runs
``start``. Each line: ``start``'s own time, the time until ``GET experiments/search`` as the admin
answers 200, the CPU seconds the new server's processes used to get there (its process group:
``mlflow server``, uvicorn and its workers) and the launcher's own (with the PostgreSQL commands it
waited for), and the load average before the kill. Then medians per launcher, workers and kill,
and each one's ratio to the baseline's. The bench waits until a killed process is gone (reaped)
before it starts again, so that a launcher which does not clean up after an unreaped postmaster
is timed as well. Needs PostgreSQL's server binaries and ``pip install 'recipe_audit[server]'``;
everything listens on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench_server_load import ADMIN_PW, REPO, SCRIPT, free_port, server_cpu_s, server_env, stop_server


def authenticated_ok(uri: str) -> bool:
    auth = base64.b64encode(f"admin:{ADMIN_PW}".encode()).decode()
    req = urllib.request.Request(uri + "/api/2.0/mlflow/experiments/search?max_results=1",
                                 headers={"Authorization": f"Basic {auth}"})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status == 200
    except OSError:
        return False


def gone(pid: int, timeout_s: float = 30.0) -> None:
    """Wait until ``pid`` no longer exists (not even as a zombie)."""
    deadline = time.monotonic() + timeout_s
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.05)


def kill(d: Path, what: str) -> None:
    state = json.loads((d / "server.json").read_text())
    if what == "server":
        pid = state["pid"]
    else:
        pid = int((Path(state["pg_dir"]) / "data" / "postmaster.pid").read_text().split()[0])
    os.kill(pid, signal.SIGKILL)
    gone(pid)


def start(launcher: Path, d: Path, workers: int | None) -> tuple[float, float]:
    """Run ``launcher start``: its seconds, and the seconds until the server answers an
    authenticated request."""
    state = json.loads((d / "server.json").read_text())
    cmd = [sys.executable, str(launcher), "start", "--dir", str(d), "--port", str(state["port"]),
           "--pg-port", str(state["pg_port"])]
    if workers:
        cmd += ["--workers", str(workers)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=server_env(), capture_output=True, text=True)
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"start failed ({launcher}): {proc.stderr[-2000:]}")
    uri = proc.stdout.strip().splitlines()[-1]
    while not authenticated_ok(uri):
        if time.perf_counter() - t0 > 600:
            raise SystemExit("the server did not answer an authenticated request within 600 s")
        time.sleep(0.05)
    return took, time.perf_counter() - t0


def launcher_cpu(before: os.times_result) -> float:
    now = os.times()
    return (now.children_user - before.children_user) + (now.children_system - before.children_system)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline", default=None, help="git revision whose launcher is timed too")
    ap.add_argument("--workers", default="", help="comma-separated --workers counts (default: the launcher's)")
    ap.add_argument("--kills", default="server,postgres", help="what is killed, in each round: server, postgres")
    ap.add_argument("--dir", type=Path, default=None)
    a = ap.parse_args(argv)
    base = Path(a.dir or tempfile.mkdtemp(prefix="recipe_audit_restart_"))
    base.mkdir(parents=True, exist_ok=True)
    base.chmod(0o711)  # as root, PostgreSQL's own user passes through to DIR/server/pg
    launchers = {}
    if a.baseline:
        rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", a.baseline], capture_output=True,
                             text=True, check=True).stdout.strip()
        old = base / f"tracking_server_{rev}.py"
        old.write_text(subprocess.run(["git", "-C", str(REPO), "show", f"{a.baseline}:launchers/tracking_server.py"],
                                      capture_output=True, text=True, check=True).stdout)
        launchers[f"baseline {rev}"] = old
    launchers["this checkout"] = SCRIPT
    workers = [int(w) for w in a.workers.split(",") if w] or [None]
    kills = [k for k in a.kills.split(",") if k]
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), "?")
    print(f"cpu: {cpu}, {os.cpu_count()} cores; load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", flush=True)
    d = base / "server"
    t0 = time.perf_counter()
    first = subprocess.run([sys.executable, str(SCRIPT), "start", "--dir", str(d), "--port", str(free_port()),
                            "--pg-port", str(free_port())], env=server_env(), capture_output=True, text=True)
    if first.returncode != 0:
        raise SystemExit(f"the server did not start: {first.stderr[-2000:]}")
    print(f"server {first.stdout.strip().splitlines()[-1]} started in {time.perf_counter() - t0:.1f} s", flush=True)
    rows = []
    try:
        for r in range(a.rounds):
            for label, launcher in launchers.items():
                for w in workers:
                    for what in kills:
                        load = os.getloadavg()[0]
                        kill(d, what)
                        before = os.times()
                        took, up = start(launcher, d, w)
                        own = launcher_cpu(before)
                        srv = server_cpu_s(d)
                        row = {"round": r + 1, "launcher": label, "workers": w or "default", "killed": what,
                               "start_s": round(took, 2), "auth_s": round(up, 2), "server_cpu_s": round(srv, 2),
                               "launcher_cpu_s": round(own, 2), "load_before": round(load, 2)}
                        rows.append(row)
                        print(json.dumps(row), flush=True)
    finally:
        stop_server(d)
    print(f"medians over {a.rounds} round(s); load average now {os.getloadavg()[0]:.2f}")
    groups: dict[tuple, list] = {}
    for row in rows:
        groups.setdefault((row["launcher"], row["workers"], row["killed"]), []).append(row)
    ref = {}
    for (label, w, what), rs in groups.items():
        med = {k: statistics.median(x[k] for x in rs) for k in ("start_s", "auth_s", "server_cpu_s", "launcher_cpu_s")}
        if a.baseline and label.startswith("baseline"):
            ref.setdefault(what, med)
        ratio = (f"; up / baseline's {med['auth_s'] / ref[what]['auth_s']:.2f}, server CPU / baseline's "
                 f"{med['server_cpu_s'] / ref[what]['server_cpu_s']:.2f}") if what in ref else ""
        print(f"{label}, workers {w}, {what} killed: start {med['start_s']:.1f} s, authenticated answer "
              f"{med['auth_s']:.1f} s (max {max(x['auth_s'] for x in rs):.1f}), server CPU {med['server_cpu_s']:.1f} s, "
              f"launcher CPU {med['launcher_cpu_s']:.2f} s, load before {min(x['load_before'] for x in rs):.1f} to "
              f"{max(x['load_before'] for x in rs):.1f}{ratio}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
