"""Benchmark: what MLflow's own work costs a sweep, whatever recipe_audit does around it.

A sweep that records every rerun in an MLflow SQL store pays, at least:

* once: importing MLflow and its SQL tracking store (SQLAlchemy, alembic), measured in a fresh
  process after Hydra and OmegaConf are imported (as at a sweep's start), with the garbage
  collector off (the sweep's start runs with it paused);
* per rerun: the three calls a rerun's run needs at the least, on a fresh SQLite store (write-ahead
  log, as recipe_audit sets it): ``create_run`` with a rerun's tags, one ``log_batch`` with the
  built-in trainer's final metrics, its params and its closing tags, and ``set_terminated``.

It prints both, and what they come to for ``--seeds`` reruns of ``--rerun-seconds`` each (default:
59 reruns of 1.75 s, the bare loop's time per rerun in ``bench_sweep.py`` on a quiet 2-core AMD EPYC
VM): the share of a bare loop that no sweep recording its reruns through MLflow can go below.

Run: ``python bench/bench_mlflow_floor.py [--seeds 59] [--rerun-seconds 1.75] [--imports 5] [--reruns 30]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

IMPORT = """
import gc, time
gc.disable()
import hydra, omegaconf  # what a sweep has imported before its start
t = time.perf_counter()
import mlflow
from mlflow.tracking import MlflowClient
import mlflow.store.tracking.sqlalchemy_store
print(time.perf_counter() - t)
"""


def import_seconds(times: int) -> list[float]:
    out = []
    for _ in range(times):
        proc = subprocess.run([sys.executable, "-c", IMPORT], capture_output=True, text=True, check=True)
        out.append(float(proc.stdout.split()[-1]))
    return out


def rerun_calls(reruns: int, metrics: int, params: int, tags: int) -> list[list[float]]:
    """Per rerun: the seconds of create_run, log_batch and set_terminated (after 5 unrecorded)."""
    import gc

    from mlflow.entities import Metric, Param, RunTag

    from recipe_audit.store import tracking

    gc.disable()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_mlflow_floor_") as tmp:
        store = tracking.open_store(f"sqlite:///{tmp}/mlflow.db", "floor")
        client = store.client
        for i in range(reruns + 5):
            t0 = time.perf_counter()
            run = client.create_run(store.experiment_id, run_name=f"r-seed{i}",
                                    tags={f"recipe_audit.tag{k}": "value" for k in range(10)})
            t1 = time.perf_counter()
            now = int(time.time() * 1000)
            client.log_batch(run.info.run_id, metrics=[Metric(f"accuracy/set{k}", 0.5, now, 126) for k in range(metrics)],
                             params=[Param(f"section.key{k}", str(k)) for k in range(params)],
                             tags=[RunTag(f"recipe_audit.close{k}", "value") for k in range(tags)])
            t2 = time.perf_counter()
            client.set_terminated(run.info.run_id, "FINISHED")
            t3 = time.perf_counter()
            if i >= 5:
                rows.append([t1 - t0, t2 - t1, t3 - t2])
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=59, help="reruns of the sweep to price (default 59)")
    ap.add_argument("--rerun-seconds", type=float, default=1.75, help="a rerun's time in the bare loop (default 1.75)")
    ap.add_argument("--imports", type=int, default=5, help="fresh processes timing the import (default 5)")
    ap.add_argument("--reruns", type=int, default=30, help="reruns timed on the store (default 30)")
    ap.add_argument("--metrics", type=int, default=135, help="metrics in the closing log_batch (default 135)")
    ap.add_argument("--params", type=int, default=56, help="params in it (default 56)")
    ap.add_argument("--tags", type=int, default=6, help="tags in it (default 6)")
    args = ap.parse_args()
    print(f"bench_mlflow_floor: load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    imports = import_seconds(args.imports)
    imp = statistics.median(imports)
    print(f"import mlflow + its SQL store (fresh process, after Hydra, collector off): median {imp:.3f} s "
          f"of {args.imports} ({', '.join(f'{s:.3f}' for s in imports)})")
    rows = rerun_calls(args.reruns, args.metrics, args.params, args.tags)
    med = [statistics.median(col) for col in zip(*rows, strict=True)]
    per = sum(med)
    print(f"a rerun's calls on SQLite, medians of {args.reruns}: create_run {med[0] * 1000:.1f} ms, log_batch "
          f"({args.metrics} metrics, {args.params} params, {args.tags} tags) {med[1] * 1000:.1f} ms, "
          f"set_terminated {med[2] * 1000:.1f} ms: {per * 1000:.1f} ms")
    bare = args.seeds * args.rerun_seconds
    floor = imp + args.seeds * per
    print(f"for {args.seeds} reruns of {args.rerun_seconds:.2f} s (a bare loop of {bare:.1f} s): MLflow's own work "
          f"{floor:.2f} s = {floor / bare * 100:.1f} % of the bare loop ({imp:.2f} s once, "
          f"{args.seeds * per:.2f} s in the reruns)")


if __name__ == "__main__":
    main()
