"""Benchmark: a rerun's four store calls on SQLite: rollback journal (SQLite's default), write-ahead log, log without syncs.

Per rerun the recipe_audit callback makes four calls to MLflow's client: ``create_run`` (with its
tags), one ``log_batch`` (params, returned metrics, pass/fail tags), ``get_run`` and
``set_terminated``. This script makes the same calls on three fresh SQLite stores: one left in
SQLite's default journal mode, one switched to the write-ahead log with SQLite's default sync at
every commit (``synchronous=FULL``), and one as ``tracking.open_store`` leaves a store: the log,
and commits that do not wait for the disk (``synchronous=NORMAL``). It alternates rerun by rerun
so other load on a shared machine hits all three alike, and prints the median time of each call
and of the four together, and their ratios.

Run: ``python bench/bench_store_writes.py [--reruns 40] [--params 12]``
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path


def _store(path: Path, mode: str):
    from mlflow import MlflowClient

    from recipe_audit.store import sqlite

    uri = f"sqlite:///{path}"
    client = MlflowClient(uri)
    exp = client.create_experiment("bench")
    if mode != "journal":
        sqlite.write_ahead_log(uri)
    if mode == "wal+normal":
        sqlite.commit_without_sync(uri)
    return client, exp


def _rerun(client, exp: str, n_params: int) -> list[float]:
    from mlflow.entities import Metric, Param, RunTag

    t = [time.perf_counter()]
    run_id = client.create_run(exp, tags={"recipe_audit.kind": "rerun", "recipe_audit.seed": "0"}).info.run_id
    t.append(time.perf_counter())
    client.log_batch(run_id, metrics=[Metric("val_accuracy", 0.9, 0, 0)],
                     params=[Param(f"p{i}", str(i)) for i in range(n_params)],
                     tags=[RunTag("recipe_audit.fails.val_accuracy.tau_0.7", "false")])
    t.append(time.perf_counter())
    client.get_run(run_id)
    t.append(time.perf_counter())
    client.set_terminated(run_id, "FINISHED")
    t.append(time.perf_counter())
    return [(b - a) * 1000 for a, b in zip(t, t[1:], strict=False)]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reruns", type=int, default=40)
    ap.add_argument("--params", type=int, default=12)
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-store-writes-") as tmp:
        stores = {mode: _store(Path(tmp) / f"{mode}.db", mode) for mode in ("journal", "wal", "wal+normal")}
        for client, exp in stores.values():  # warm up (first statements, caches)
            _rerun(client, exp, a.params)
        times: dict[str, list[list[float]]] = {mode: [] for mode in stores}
        for _ in range(a.reruns):
            for mode, (client, exp) in stores.items():
                times[mode].append(_rerun(client, exp, a.params))
    names = ("create_run", "log_batch", "get_run", "set_terminated")
    print(f"{a.reruns} reruns per mode, {a.params} params each, medians in ms")
    print(f"{'mode':<12}" + "".join(f"{n:>16}" for n in names) + f"{'all four':>12}")
    total = {}
    for mode, rows in times.items():
        cols = [statistics.median(c) for c in zip(*rows, strict=True)]
        total[mode] = statistics.median(sum(r) for r in rows)
        print(f"{mode:<12}" + "".join(f"{c:16.1f}" for c in cols) + f"{total[mode]:12.1f}")
    print(f"rollback journal / write-ahead log (all four): {total['journal'] / total['wal']:.2f}x")
    print(f"write-ahead log, synced / not synced (all four): {total['wal'] / total['wal+normal']:.2f}x")
    print(f"rollback journal / log not synced, as recipe_audit opens a store (all four): "
          f"{total['journal'] / total['wal+normal']:.2f}x")


if __name__ == "__main__":
    main()
