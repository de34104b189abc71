"""Reading reruns through a REST tracking server: recipe_audit vs a plain ``mlflow.search_runs``.

Builds (or reuses) the store of ``bench_query.py``, serves it with a real ``mlflow server`` on
loopback with the server's default number of workers, and times, in turns (median of
``--repeat`` rounds, one by default: each side reads the whole experiment):

(a) ``mlflow.search_runs(experiment_names=[...])`` over HTTP (pages of 10,000 runs, one after
    another, turned into protobuf messages, entities and a DataFrame);
(c) ``read_runs`` + ``collect_reruns`` for the card's metric over HTTP (recipe_audit's REST path:
    the experiment split into start-time slices fetched concurrently in 500-run pages, the answers
    read as plain JSON).

Both sides ask the server for every run with all its params, tags and metrics: MLflow's
``runs/search`` has no way to ask for less, and the server's cost per run dominates. The server's
uvicorn supervisor kills a worker that misses its 5 s health check, which a worker busy with a
10,000-run page of (a) does on a loaded machine; ``--healthcheck-timeout`` (default 60 s) raises
that limit so that (a) completes; the number of workers stays the default.

Run as ``python bench/bench_query_rest.py [--n-runs N]``; exit status 0 when (a)/(c) >= 4.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_query import EXPERIMENT, METRIC, _interleaved, build_store  # noqa: E402

from recipe_audit.reruns import collect_reruns  # noqa: E402
from recipe_audit.store.read import read_runs  # noqa: E402

TARGET = 4.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, default=Path(tempfile.gettempdir()) / "recipe_audit_bench")
    ap.add_argument("--n-runs", type=int, default=10_000, help="reruns in the store (default 10000)")
    ap.add_argument("--repeat", type=int, default=1, help="timed rounds of (a) and (c) (default 1)")
    ap.add_argument("--healthcheck-timeout", type=int, default=60,
                    help="seconds uvicorn waits for a busy worker's health check (its default: 5)")
    args = ap.parse_args(argv)
    if args.n_runs < 1 or args.repeat < 1:
        ap.error("--n-runs and --repeat must be at least 1")
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    args.store.mkdir(parents=True, exist_ok=True)
    db = args.store / f"bench_{args.n_runs}.db"
    if not db.exists():
        build_store(db, args.n_runs)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(args.store / "mlflow_server.log", "w")  # noqa: SIM115 (open while the server runs)
    t0 = time.perf_counter()
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{db}",
         "--default-artifact-root", str(args.store / "artifacts"), "--host", "127.0.0.1",
         "--port", str(port), "--uvicorn-opts", f"--timeout-worker-healthcheck {args.healthcheck_timeout}"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                urllib.request.urlopen(url + "/health", timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    print(f"the mlflow server did not start (log: {log.name})")
                    return 2
                time.sleep(0.5)
        import mlflow
        from mlflow.tracking import MlflowClient

        mlflow.set_tracking_uri(url)
        os.environ["MLFLOW_TRACKING_URI"] = url
        client = MlflowClient(url)
        exp_id = client.get_experiment_by_name(EXPERIMENT).experiment_id
        with ThreadPoolExecutor(8) as pool:  # every worker opens its store before the clock runs
            list(pool.map(lambda _: client.search_runs([exp_id], max_results=1), range(16)))
        print(f"mlflow server with its default workers up in {time.perf_counter() - t0:.0f} s")

        def plain():
            return mlflow.search_runs(experiment_names=[EXPERIMENT])

        def ours():
            return collect_reruns(read_runs(url, EXPERIMENT, [METRIC]), METRIC)

        timed = _interleaved({"a": plain, "c": ours}, args.repeat, warm_up=False)
        (t_a, frame), (t_c, cells) = timed["a"], timed["c"]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=120)
        log.close()
    ratio = t_a / t_c
    ok = ratio >= TARGET
    print(f"REST server, {args.n_runs} reruns, median of {args.repeat} round(s), (a) then (c):")
    print(f"(a) mlflow.search_runs          {t_a:8.2f} s  ({len(frame)} runs)")
    print(f"(c) read_runs + collect_reruns  {t_c:8.2f} s  ({len(cells)} cells, {sum(c.n for c in cells)} seeds)")
    print(f"(a)/(c) = {ratio:.2f}  target >= {TARGET:g}  {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
