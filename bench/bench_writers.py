"""Concurrent writers into one tracking store: does every run and every metric arrive?

    python bench/bench_writers.py --writers 4 --runs 25 --steps 50            # a fresh SQLite store
    python bench/bench_writers.py --uri http://127.0.0.1:5000 --writers 8 --runs 100 --steps 50

Each writer is its own process and logs reruns the way a sweep's job does (``rerun_log.RerunLogger``:
params in batches, per-step ``train_loss``, the final metrics, FINISHED). At the end the store is
read back: runs and metric rows are counted per writer and compared with what was sent. Prints
the throughput (runs/s, metric rows/s) and the slowest single client call.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path


def _writer(args) -> dict:
    uri, experiment, wid, n_runs, n_steps = args
    from recipe_audit.store import rerun_log, tracking

    store = tracking.open_store(uri, experiment)
    slowest = 0.0
    t0 = time.perf_counter()
    calls = 0
    for r in range(n_runs):
        cfg = {"model": {"name": "m"}, "task": {"name": "t"}, "recipe": {"name": f"w{wid}"}, "seed": r}
        t = time.perf_counter()
        logger = rerun_log.RerunLogger(store, cfg, r, recipe_id=f"writer{wid:02d}")
        slowest, calls = max(slowest, time.perf_counter() - t), calls + 1
        for step in range(n_steps):
            logger.log_step(step, 1.0 / (step + 1))
        t = time.perf_counter()
        logger.flush()
        slowest, calls = max(slowest, time.perf_counter() - t), calls + 1
        t = time.perf_counter()
        store.client.log_metric(logger.run_id, "accuracy/calibration", 0.5 + r / (2 * n_runs))
        slowest, calls = max(slowest, time.perf_counter() - t), calls + 1
        t = time.perf_counter()
        logger.finish()
        slowest, calls = max(slowest, time.perf_counter() - t), calls + 1
    return {"writer": wid, "seconds": time.perf_counter() - t0, "slowest_call_s": slowest, "calls": calls}


def count(uri: str, experiment: str) -> dict:
    """Runs (by status) and metric rows per writer, read back through the client."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    runs = []
    token = None
    while True:
        page = client.search_runs([exp.experiment_id], max_results=1000, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            break
    out: dict = {"runs": len(runs), "finished": sum(r.info.status == "FINISHED" for r in runs), "steps": 0,
                 "final_metrics": 0}
    for r in runs:
        out["steps"] += len(client.get_metric_history(r.info.run_id, "train_loss"))
        out["final_metrics"] += "accuracy/calibration" in r.data.metrics
    return out


def run_writers(uri: str, n_writers: int, n_runs: int, n_steps: int, experiment: str = "writers") -> dict:
    from recipe_audit.store import tracking

    tracking.open_store(uri, experiment)  # create the experiment once, before the writers race
    t0 = time.perf_counter()
    ctx = mp.get_context("spawn")
    with ctx.Pool(n_writers) as pool:
        per = pool.map(_writer, [(uri, experiment, w, n_runs, n_steps) for w in range(n_writers)])
    wall = time.perf_counter() - t0
    print(f"writing done: {n_writers} writers x {n_runs} reruns in {wall:.1f} s, slowest client call "
          f"{max(p['slowest_call_s'] for p in per):.3f} s; reading back...", file=sys.stderr, flush=True)
    got = count(uri, experiment)
    sent = {"runs": n_writers * n_runs, "steps": n_writers * n_runs * n_steps, "final_metrics": n_writers * n_runs}
    return {"uri": uri.split("@")[-1], "writers": n_writers, "sent": sent, "got": got, "wall_s": round(wall, 2),
            "runs_per_s": round(sent["runs"] / wall, 1),
            "metric_rows_per_s": round((sent["steps"] + sent["final_metrics"]) / wall, 1),
            "slowest_call_s": round(max(p["slowest_call_s"] for p in per), 3),
            "lost": {k: sent[k] - got[k] for k in sent} | {"not_finished": sent["runs"] - got["finished"]}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--uri", default=None, help="tracking URI (default: a fresh SQLite store)")
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--runs", type=int, default=25)
    ap.add_argument("--steps", type=int, default=50)
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        uri = a.uri or f"sqlite:///{Path(tmp) / 'mlflow.db'}"
        res = run_writers(uri, a.writers, a.runs, a.steps, experiment=f"writers-{os.getpid()}-{int(time.time())}")
    print(json.dumps(res, indent=1))
    ok = not any(res["lost"].values())
    print(f"{'PASS' if ok else 'FAIL'}: {res['writers']} writers, {res['got']['runs']}/{res['sent']['runs']} runs, "
          f"{res['got']['steps']}/{res['sent']['steps']} step metrics; {res['runs_per_s']} runs/s, "
          f"{res['metric_rows_per_s']} metric rows/s; slowest client call {res['slowest_call_s']} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
