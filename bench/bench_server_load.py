"""Sweeps at once against the team tracking server, and the server or its PostgreSQL restarted
mid-sweep: reruns per minute, and whether every sweep ends with its reruns and its card.

    python bench/bench_server_load.py --sweeps 1,4,8 --seeds 12          # reruns per minute
    python bench/bench_server_load.py --sweeps 4 --seeds 12 --restart server     # killed, started again
    python bench/bench_server_load.py --sweeps 4 --seeds 12 --restart postgres   # PostgreSQL restarted
    python bench/bench_server_load.py --restarts 3      # start after a crash, timed, no sweeps

It starts the team server (``launchers/tracking_server.py start``, PostgreSQL and basic auth) in a
fresh folder, then, for each count N of ``--sweeps``, launches N sweeps of the built-in recipe at
once (``python -m recipe_audit -m 'seed=range(S)'``, small runs, one torch thread, the sequential
launcher), all into one new experiment, as N people or N CI jobs of a team would. When every
sweep has exited it reads the store back and prints, per N: the wall time, the reruns FINISHED
out of N × S, reruns per minute, the cards written (one per sweep, every seed once), the runs left
RUNNING, the second copies a retried create made (closed as duplicates), and the exit statuses.

``--restart server`` kills the MLflow server (SIGKILL, a crash) once ``--after`` reruns have
finished and runs ``start`` again at once, timing it; ``--restart postgres`` restarts its
PostgreSQL (``pg_ctl restart -m fast``). A sweep that stopped (exit 2) is relaunched with
``tracking.resume=true`` and the store read again. ``--restarts K`` runs no sweep: K times, the
MLflow server is killed (SIGKILL) and ``start`` run again, timed, with the CPU seconds the new
server's processes used to get there and the load average before. Needs PostgreSQL's server binaries and
``pip install 'recipe_audit[server]'``; everything listens on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "launchers" / "tracking_server.py"
SMALL = ["task.options.n_train=240", "task.options.n_audit=120", "recipe.max_steps=12", "progress=false",
         "threads=1"]
ADMIN_PW = "bench-Admin-pw-1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_env() -> dict:
    env = {**os.environ, "MLFLOW_AUTH_ADMIN_PASSWORD": ADMIN_PW}
    env.pop("MLFLOW_TRACKING_URI", None)
    return env


WORKERS: list[str] = []  # ["--workers", N] when given


def start_server(d: Path, port: int, pg_port: int) -> tuple[str, float]:
    """``tracking_server.py start``: the URI and the seconds it took."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, str(SCRIPT), "start", "--dir", str(d), "--port", str(port),
                           "--pg-port", str(pg_port), *WORKERS], env=server_env(), capture_output=True, text=True)
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"the server did not start: {proc.stderr[-2000:]}")
    return proc.stdout.strip().splitlines()[-1], took


def stop_server(d: Path) -> None:
    subprocess.run([sys.executable, str(SCRIPT), "stop", "--dir", str(d)], env=server_env(), capture_output=True)


def crash_server(d: Path) -> None:
    """The MLflow server's own process killed (SIGKILL), its workers left behind: a crash."""
    os.kill(json.loads((d / "server.json").read_text())["pid"], signal.SIGKILL)


def restart_postgres(d: Path) -> float:
    state = json.loads((d / "server.json").read_text())
    # its log where start put it: without -l, the new postmaster would hold this process's pipes open
    cmd = [str(Path(state["pg_bin"]) / "pg_ctl"), "-D", str(Path(state["pg_dir"]) / "data"), "-l",
           str(Path(state["pg_dir"]) / "postgres.log"), "-m", "fast", "-w", "restart"]
    if os.geteuid() == 0:
        cmd = ["runuser", "-u", "postgres", "--", *cmd]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def creds() -> dict:
    return {"MLFLOW_TRACKING_USERNAME": "admin", "MLFLOW_TRACKING_PASSWORD": ADMIN_PW}


def launch(uri: str, experiment: str, sweep_dir: Path, seeds: int, resume: bool = False) -> subprocess.Popen:
    sweep_dir.mkdir(parents=True, exist_ok=True)
    args = [sys.executable, "-m", "recipe_audit", "-m", f"seed=range({seeds})", f"hydra.sweep.dir={sweep_dir}",
            f"tracking.uri={uri}", f"tracking.experiment_name={experiment}", *SMALL]
    if resume:
        args.append("tracking.resume=true")
    env = {**os.environ, **creds(), "HYDRA_FULL_ERROR": "0",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    env.pop("MLFLOW_TRACKING_URI", None)
    log = open(sweep_dir.parent / f"{sweep_dir.name}{'-resume' if resume else ''}.log", "w")
    return subprocess.Popen(args, cwd=sweep_dir.parent, env=env, stdout=log, stderr=subprocess.STDOUT)


def client(uri: str):
    from mlflow.tracking import MlflowClient

    os.environ.update(creds())
    return MlflowClient(tracking_uri=uri)


def finished_reruns(uri: str, experiment: str) -> int:
    try:
        c = client(uri)
        exp = c.get_experiment_by_name(experiment)
        if exp is None:
            return 0
        return len(c.search_runs([exp.experiment_id], "attributes.status = 'FINISHED' and "
                                 "tags.`recipe_audit.kind` = 'rerun'", max_results=5000))
    except Exception:  # noqa: BLE001 - the server is being restarted
        return 0


def count(uri: str, experiment: str, dirs: list[Path], seeds: int) -> dict:
    """What the store and the sweep folders hold once the sweeps have exited."""
    c = client(uri)
    exp = c.get_experiment_by_name(experiment)
    runs = c.search_runs([exp.experiment_id], "", max_results=50000) if exp is not None else []
    kind = [r.data.tags.get("recipe_audit.kind") for r in runs]
    reruns = [r for r, k in zip(runs, kind, strict=True) if k == "rerun"]
    cards = 0
    for d in dirs:
        f = d / "card" / "card.json"
        if f.is_file():
            cell = json.loads(f.read_text())["cells"][0]
            cards += cell["n_reruns"] == seeds and cell["unfinished"] == []
    by_sweep: dict[str, set] = {}
    for r in reruns:
        if r.info.status == "FINISHED":
            by_sweep.setdefault(r.data.tags.get("recipe_audit.sweep_id"), set()).add(r.data.tags["recipe_audit.seed"])
    return {"reruns_finished": sum(r.info.status == "FINISHED" for r in reruns),
            "seeds_finished": sum(len(s) for s in by_sweep.values()),
            "reruns_not_finished": sum(r.info.status != "FINISHED" for r in reruns),
            "cards": cards, "running": sum(r.info.status == "RUNNING" for r in runs),
            "duplicates": sum(k == "duplicate_create" for k in kind)}


def round_of(uri: str, d: Path, n: int, seeds: int, restart: str | None, after: int) -> dict:
    experiment = f"load-{n}x{seeds}-{int(time.time())}"
    dirs = [d / f"{experiment}-sweep{i}" for i in range(n)]
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    procs = [launch(uri, experiment, sd, seeds) for sd in dirs]
    event = None
    while any(p.poll() is None for p in procs):
        time.sleep(1.0)
        if restart and event is None and finished_reruns(uri, experiment) >= after:
            t = time.perf_counter() - t0
            if restart == "server":
                crash_server(d / "server")
                _, took = start_server(d / "server", *_ports(d))
                event = f"server killed at {t:.0f} s, start again took {took:.1f} s"
            else:
                event = f"PostgreSQL restarted at {t:.0f} s in {restart_postgres(d / 'server'):.1f} s"
            print("  " + event, flush=True)
    wall = time.perf_counter() - t0
    codes = [p.returncode for p in procs]
    got = count(uri, experiment, dirs, seeds)
    out = {"sweeps": n, "seeds": seeds, "wall_s": round(wall, 1), "exit": codes, **got,
           "reruns_per_min": round(got["seeds_finished"] / wall * 60, 1), "load_before": round(load0, 2),
           "load_after": round(os.getloadavg()[0], 2), "event": event}
    stopped = [sd for sd, c in zip(dirs, codes, strict=True) if c != 0]
    if stopped:  # relaunched with resume=true, one after another
        t1 = time.perf_counter()
        again = [launch(uri, experiment, sd, seeds, resume=True) for sd in stopped]
        out["resume_exit"] = [p.wait() for p in again]
        out["resume_s"] = round(time.perf_counter() - t1, 1)
        out["after_resume"] = count(uri, experiment, dirs, seeds)
    return out


def server_cpu_s(d: Path) -> float:
    """CPU seconds used so far by the processes of the MLflow server ``d/server.json`` names."""
    pgid = json.loads((d / "server.json").read_text())["pid"]
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            f = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(f[2]) == pgid:
            total += (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    return total


def restarts(base: Path, k: int) -> None:
    for i in range(k):
        load = os.getloadavg()[0]
        crash_server(base / "server")
        _, took = start_server(base / "server", *_ports(base))
        print(f"restart {i + 1}: start after a crash {took:.1f} s, the new server's CPU {server_cpu_s(base / 'server'):.1f} s, "
              f"load average before {load:.2f}", flush=True)


def _ports(d: Path) -> tuple[int, int]:
    state = json.loads((d / "server" / "server.json").read_text())
    return state["port"], state["pg_port"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweeps", default="1,4,8", help="comma-separated counts of sweeps at once")
    ap.add_argument("--seeds", type=int, default=12)
    ap.add_argument("--restart", choices=["server", "postgres"], default=None)
    ap.add_argument("--after", type=int, default=8, help="--restart once this many reruns have finished")
    ap.add_argument("--restarts", type=int, default=0, help="no sweeps: time start after a crash this many times")
    ap.add_argument("--dir", type=Path, default=None, help="where the server and the sweeps live (default: a temp dir)")
    ap.add_argument("--workers", type=int, default=None, help="the server's workers (default: the launcher's)")
    a = ap.parse_args(argv)
    WORKERS[:] = ["--workers", str(a.workers)] if a.workers else []
    base = Path(a.dir or tempfile.mkdtemp(prefix="recipe_audit_load_"))
    base.mkdir(parents=True, exist_ok=True)
    base.chmod(0o711)  # as root, PostgreSQL's own user passes through to DIR/server/pg
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), "?")
    print(f"cpu: {cpu}, {os.cpu_count()} cores; load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}",
          flush=True)
    uri, took = start_server(base / "server", free_port(), free_port())
    print(f"server {uri} started in {took:.1f} s ({' '.join(WORKERS) or 'default workers'})", flush=True)
    ok = True
    try:
        if a.restarts:
            restarts(base, a.restarts)
            return 0
        for n in [int(x) for x in a.sweeps.split(",")]:
            res = round_of(uri, base, n, a.seeds, a.restart, a.after)
            print(json.dumps(res), flush=True)
            final = res.get("after_resume", res)
            good = (final["seeds_finished"] == n * a.seeds and final["cards"] == n and final["running"] == 0)
            ok &= good
            print(f"{n} sweep(s) x {a.seeds} seeds: {res['wall_s']} s, {res['seeds_finished']}/{n * a.seeds} reruns "
                  f"FINISHED, {res['reruns_per_min']} reruns/min; exit {res['exit']}"
                  + (f"; resumed: exit {res['resume_exit']} in {res['resume_s']} s" if "resume_exit" in res else "")
                  + f"; {final['cards']} cards, {final['running']} RUNNING, {final['duplicates']} duplicates closed: "
                  + ("PASS" if good else "FAIL"), flush=True)
    finally:
        stop_server(base / "server")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
