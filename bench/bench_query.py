"""Benchmark of the query layer on large SQLite stores: 1,000, 10,000 and 100,000 reruns.

Builds (once, cached under ``--store``) an SQLite MLflow store per size with that many reruns in one
experiment, shaped like a real recipe_audit sweep: sweep parents with planned seeds, reruns with the
tags of :mod:`recipe_audit.keys`, ~25 params, the final metrics and a ``train_loss`` curve. A few
runs are written with the real MLflow client (so the schema and every column value come from
MLflow itself); the rest are bulk-inserted into the same tables with SQLAlchemy ``executemany`` in
one transaction, copying the column layout of the client-written rows.

Then, per size, in one process:

(a) ``mlflow.search_runs(experiment_names=[...])`` of the whole experiment (what a naive reader
    does; only up to ``--search-runs-max`` reruns, it takes minutes at 100,000);
(b) one raw SQL SELECT joining ``runs`` and ``latest_metrics`` for the card's metric, on a plain
    SQLAlchemy engine (the floor: one value per run, where (c) also needs the kind, parent, recipe
    and seed tags of each run);
(c) :func:`recipe_audit.store.read.read_runs` + :func:`recipe_audit.reruns.collect_reruns`.

(b) and (c) are timed in interleaved rounds (median), so load on the machine hits both alike; the
ratio (c)/(b) is the number that matters on a shared machine. It also prints the time per rerun of
(c) at each size (the cost should grow linearly) and the peak memory one (c) allocates (tracemalloc,
in a separate untimed call). For reference it times the SELECT of (b) on a connection set up the
way read_runs sets up its own (memory-mapped reads).

``--card`` also times a card over 100,000 reruns end to end: ``recipe-audit card`` as a separate
process (interpreter start, imports, read, statistics, card.json, card.md and the plots), on a copy
of the largest store whose reruns are relabelled as one recipe with seeds 0..N-1 (one cell of N
reruns; the planned-seed tags are dropped).

Targets: (c)/(b) <= 1.5 at 10,000 and 100,000 reruns; the card <= 3 s. Run as
``python bench/bench_query.py [--sizes 1000,10000,100000] [--card]``; the exit status is 0 when the
targets of the sizes (and card) measured are met.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from recipe_audit import keys  # noqa: E402
from recipe_audit.reruns import collect_reruns  # noqa: E402
from recipe_audit.store.read import read_runs  # noqa: E402

EXPERIMENT = "recipe_audit_bench"
AUDIT_SETS = ("calibration", "target")
METRIC = keys.accuracy_key("calibration")
SEEDS_PER_RECIPE = 50
RECIPES_PER_SWEEP = 10
LOSS_STEPS = 20
N_PARAMS = 25


def _params(recipe: int, seed: int) -> dict[str, str]:
    """~25 flattened resolved-config params of one rerun."""
    out = {
        "model.name": f"model-{recipe % 3}",
        "model.revision": "main",
        "task.name": f"task-{recipe % 2}",
        "recipe.name": f"recipe-{recipe}",
        "recipe.lr": f"{1e-4 * (1 + recipe % 7):.6g}",
        "recipe.epochs": str(1 + recipe % 3),
        "recipe.batch_size": "16",
        "recipe.warmup_ratio": "0.1",
        "recipe.weight_decay": "0.01",
        "recipe.lora.r": str(4 * (1 + recipe % 4)),
        "recipe.lora.alpha": "16",
        "recipe.lora.dropout": "0.05",
        "recipe.max_steps": "200",
        "seed": str(seed),
    }
    i = 0
    while len(out) < N_PARAMS:
        out[f"extra.p{i}"] = str(i)
        i += 1
    return out


def _log_template_runs(uri: str) -> tuple[str, str, str]:
    """Write one sweep parent and one rerun with the real client; return (exp id, parent, child)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    exp_id = client.create_experiment(EXPERIMENT)
    parent = client.create_run(
        exp_id,
        tags={
            keys.TAG_KIND: keys.KIND_SWEEP,
            keys.TAG_SWEEP_ID: "sweep-0",
            keys.TAG_PLANNED_SEEDS: json.dumps(list(range(SEEDS_PER_RECIPE))),
        },
        run_name="sweep-0",
    )
    pid = parent.info.run_id
    child = client.create_run(
        exp_id,
        tags={
            keys.TAG_PARENT: pid,
            keys.TAG_KIND: keys.KIND_RERUN,
            keys.TAG_RECIPE_ID: "recipe-0000",
            keys.TAG_SEED: "0",
            keys.TAG_MODEL: "model-0",
            keys.TAG_TASK: "task-0",
            keys.TAG_RECIPE_NAME: "recipe-0",
            keys.TAG_SWEEP_ID: "sweep-0",
            keys.TAG_AUDIT_SETS: ",".join(AUDIT_SETS),
        },
        run_name="rerun-0-0",
    )
    cid = child.info.run_id
    for k, v in _params(0, 0).items():
        client.log_param(cid, k, v)
    for step in range(LOSS_STEPS):
        client.log_metric(cid, keys.METRIC_TRAIN_LOSS, 1.0 / (step + 1), step=step)
    for audit in AUDIT_SETS:
        client.log_metric(cid, keys.accuracy_key(audit), 0.9)
        client.log_metric(cid, keys.majority_rate_key(audit), 0.5)
        client.log_metric(cid, keys.constant_fraction_key(audit), 0.55)
    client.log_metric(cid, keys.METRIC_TRAIN_SECONDS, 12.0)
    client.set_terminated(cid, "FINISHED")
    client.set_terminated(pid, "FINISHED")
    return exp_id, pid, cid


def _rows(conn: sa.Connection, table: str, run_id: str) -> list[dict[str, Any]]:
    res = conn.execute(sa.text(f"SELECT * FROM {table} WHERE run_uuid = :r"), {"r": run_id})
    return [dict(r._mapping) for r in res]


def build_store(path: Path, n_runs: int) -> None:
    """Create the SQLite store at ``path`` with ``n_runs`` reruns (a temp file renamed at the end)."""
    tmp = path.with_suffix(".tmp.db")
    if tmp.exists():
        tmp.unlink()
    uri = f"sqlite:///{tmp}"
    t0 = time.perf_counter()
    exp_id, tpl_parent, tpl_child = _log_template_runs(uri)
    engine = sa.create_engine(uri, poolclass=NullPool)
    rng = np.random.default_rng(0)
    with engine.begin() as conn:
        run_tpl = _rows(conn, "runs", tpl_child)[0]
        parent_tpl = _rows(conn, "runs", tpl_parent)[0]
        tag_tpl = {r["key"]: r for r in _rows(conn, "tags", tpl_child)}
        ptag_tpl = {r["key"]: r for r in _rows(conn, "tags", tpl_parent)}
        lm_tpl = _rows(conn, "latest_metrics", tpl_child)[0]
        m_tpl = _rows(conn, "metrics", tpl_child)[0]
        p_tpl = _rows(conn, "params", tpl_child)[0]
        base_time = int(run_tpl["start_time"])

        runs: list[dict[str, Any]] = []
        tags: list[dict[str, Any]] = []
        params: list[dict[str, Any]] = []
        metrics: list[dict[str, Any]] = []
        latest: list[dict[str, Any]] = []

        def tag(tpl: dict[str, dict[str, Any]], rid: str, key: str, value: str) -> None:
            row = dict(tpl.get(key) or next(iter(tpl.values())))
            row.update(key=key, value=value, run_uuid=rid)
            tags.append(row)

        n_recipes = max(1, -(-(n_runs - 1) // SEEDS_PER_RECIPE))
        left = n_runs - 1  # the template rerun is the first one
        parents: dict[int, str] = {0: tpl_parent}
        for recipe in range(n_recipes):
            sweep = recipe // RECIPES_PER_SWEEP
            if sweep not in parents:
                pid = uuid.uuid4().hex
                parents[sweep] = pid
                row = dict(parent_tpl)
                row.update(
                    run_uuid=pid,
                    name=f"sweep-{sweep}",
                    start_time=base_time + sweep,
                    end_time=base_time + sweep + 1000,
                    artifact_uri=parent_tpl["artifact_uri"].replace(tpl_parent, pid),
                )
                runs.append(row)
                for key, tpl_row in ptag_tpl.items():
                    value = tpl_row["value"]
                    if key == keys.TAG_SWEEP_ID:
                        value = f"sweep-{sweep}"
                    elif key == "mlflow.runName":
                        value = f"sweep-{sweep}"
                    tag(ptag_tpl, pid, key, value)
            pid = parents[sweep]
            collapsed_share = 0.05 + 0.4 * (recipe % 5) / 4
            for seed in range(SEEDS_PER_RECIPE):
                if recipe == 0 and seed == 0:
                    continue  # the template rerun
                if left == 0:
                    break
                left -= 1
                rid = uuid.uuid4().hex
                start = base_time + 10 * (recipe * SEEDS_PER_RECIPE + seed)
                u = rng.random()
                status = "FAILED" if u < 0.01 else "RUNNING" if u < 0.012 else "FINISHED"
                row = dict(run_tpl)
                row.update(
                    run_uuid=rid,
                    name=f"rerun-{recipe}-{seed}",
                    status=status,
                    start_time=start,
                    end_time=None if status == "RUNNING" else start + 5000,
                    artifact_uri=run_tpl["artifact_uri"].replace(tpl_child, rid),
                )
                runs.append(row)
                values = {
                    keys.TAG_PARENT: pid,
                    keys.TAG_RECIPE_ID: f"recipe-{recipe:04d}",
                    keys.TAG_SEED: str(seed),
                    keys.TAG_MODEL: f"model-{recipe % 3}",
                    keys.TAG_TASK: f"task-{recipe % 2}",
                    keys.TAG_RECIPE_NAME: f"recipe-{recipe}",
                    keys.TAG_SWEEP_ID: f"sweep-{sweep}",
                    "mlflow.runName": f"rerun-{recipe}-{seed}",
                }
                for key, tpl_row in tag_tpl.items():
                    tag(tag_tpl, rid, key, values.get(key, tpl_row["value"]))
                if status == "FAILED":
                    tag(tag_tpl, rid, keys.TAG_ERROR, "RuntimeError: CUDA error: out of memory")
                for k, v in _params(recipe, seed).items():
                    p = dict(p_tpl)
                    p.update(key=k, value=v, run_uuid=rid)
                    params.append(p)
                if status != "FINISHED":
                    continue
                ts = start + 100
                for step in range(LOSS_STEPS):
                    m = dict(m_tpl)
                    m.update(
                        key=keys.METRIC_TRAIN_LOSS,
                        value=1.0 / (step + 1),
                        timestamp=ts + step,
                        step=step,
                        is_nan=False,
                        run_uuid=rid,
                    )
                    metrics.append(m)
                final = {
                    keys.METRIC_TRAIN_LOSS: (1.0 / LOSS_STEPS, LOSS_STEPS - 1),
                    keys.METRIC_TRAIN_SECONDS: (float(rng.uniform(10, 20)), 0),
                }
                for audit in AUDIT_SETS:
                    collapsed = rng.random() < collapsed_share
                    acc = 0.5 + rng.normal(0, 0.01) if collapsed else 0.88 + rng.normal(0, 0.02)
                    final[keys.accuracy_key(audit)] = (float(acc), 0)
                    final[keys.majority_rate_key(audit)] = (0.5, 0)
                    final[keys.constant_fraction_key(audit)] = (0.98 if collapsed else 0.55, 0)
                for k, (v, step) in final.items():
                    if k != keys.METRIC_TRAIN_LOSS:
                        m = dict(m_tpl)
                        m.update(key=k, value=v, timestamp=ts + 50, step=step, is_nan=False, run_uuid=rid)
                        metrics.append(m)
                    lm = dict(lm_tpl)
                    lm.update(key=k, value=v, timestamp=ts + 50, step=step, is_nan=False, run_uuid=rid)
                    latest.append(lm)
        md = sa.MetaData()
        for name, rows in (
            ("runs", runs),
            ("tags", tags),
            ("params", params),
            ("metrics", metrics),
            ("latest_metrics", latest),
        ):
            table = sa.Table(name, md, autoload_with=conn)
            if rows:
                conn.execute(table.insert(), rows)
        n_in_db = conn.execute(
            sa.text("SELECT count(*) FROM runs WHERE experiment_id = :e"), {"e": int(exp_id)}
        ).scalar_one()
    engine.dispose()
    tmp.replace(path)
    print(f"built {path} with {n_in_db} runs ({n_runs} reruns) in {time.perf_counter() - t0:.1f} s")


def _interleaved(
    fns: dict[str, Callable[[], Any]], repeat: int, warm_up: bool = True
) -> dict[str, tuple[float, Any]]:
    """Median wall time of each function over ``repeat`` rounds, calling them in turn each round
    (after one warm-up round unless ``warm_up`` is False), so that load on the machine hits all of
    them alike."""
    out: dict[str, Any] = {name: fn() for name, fn in fns.items()} if warm_up else {}
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            out[name] = fn()
            times[name].append(time.perf_counter() - t0)
    return {name: (statistics.median(times[name]), out[name]) for name in fns}


SQLITE_MMAP_BYTES = 1 << 31  # what read_runs maps of an SQLite file
TUNED = "b'"


def build_card_store(src: Path, dst: Path) -> None:
    """A copy of ``src`` whose reruns are one recipe with seeds 0..N-1 (by start time, run id)."""
    import shutil
    import sqlite3

    tmp = dst.with_suffix(".tmp.db")
    shutil.copyfile(src, tmp)
    con = sqlite3.connect(tmp)
    with con:
        con.execute("UPDATE tags SET value = 'recipe-all' WHERE key = ?", (keys.TAG_RECIPE_ID,))
        con.execute(
            "UPDATE tags SET value = s.seed FROM (SELECT r.run_uuid AS id, CAST(row_number() OVER"
            " (ORDER BY r.start_time, r.run_uuid) - 1 AS TEXT) AS seed FROM runs r JOIN tags t"
            " ON t.run_uuid = r.run_uuid AND t.key = ?) AS s WHERE tags.key = ? AND tags.run_uuid = s.id",
            (keys.TAG_SEED, keys.TAG_SEED),
        )
        con.execute("DELETE FROM tags WHERE key = ?", (keys.TAG_PLANNED_SEEDS,))
    con.close()
    tmp.replace(dst)


def time_card(db: Path, out: Path) -> tuple[float, int, str]:
    """Wall time of ``recipe-audit card`` on ``db`` in its own process; (seconds, exit status, tail)."""
    import subprocess

    cmd = [sys.executable, "-m", "recipe_audit.cli", "card", "--experiment-name", EXPERIMENT,
           "--tracking-uri", f"sqlite:///{db}", "--out", str(out)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    return time.perf_counter() - t0, proc.returncode, (proc.stdout + proc.stderr)[-600:]


def _peak_mib(fn: Callable[[], Any]) -> float:
    import tracemalloc

    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def bench_size(args: argparse.Namespace, n_runs: int) -> dict[str, Any]:
    """Times (a), (b), (c) and (b') on the store of ``n_runs`` reruns; returns them."""
    db = args.store / f"bench_{n_runs}.db"
    if args.rebuild and db.exists():
        db.unlink()
    if not db.exists():
        build_store(db, n_runs)
    uri = f"sqlite:///{db}"
    out: dict[str, Any] = {"n": n_runs, "db": db}

    if n_runs <= args.search_runs_max:
        import mlflow

        previous_uri = mlflow.get_tracking_uri()
        mlflow.set_tracking_uri(uri)
        try:
            t0 = time.perf_counter()
            frame_a = mlflow.search_runs(experiment_names=[EXPERIMENT])
            out["a"] = time.perf_counter() - t0
            out["a_rows"] = len(frame_a)
        finally:
            mlflow.set_tracking_uri(previous_uri)

    raw_engine = sa.create_engine(uri, poolclass=NullPool)
    raw_sql = sa.text(
        "SELECT r.run_uuid, m.value, m.is_nan FROM runs r"
        " JOIN experiments e ON e.experiment_id = r.experiment_id"
        " JOIN latest_metrics m ON m.run_uuid = r.run_uuid"
        " WHERE e.name = :name AND r.lifecycle_stage = 'active' AND m.key = :key"
    )
    # for reference only: the same SELECT on a connection set up like read_runs's own
    tuned_engine = sa.create_engine(uri, poolclass=NullPool)

    @sa.event.listens_for(tuned_engine, "connect")
    def _tune(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.execute(f"PRAGMA mmap_size = {SQLITE_MMAP_BYTES}")

    def raw() -> list[Any]:
        with raw_engine.connect() as conn:
            return conn.execute(raw_sql, {"name": EXPERIMENT, "key": METRIC}).all()

    def raw_tuned() -> list[Any]:
        with tuned_engine.connect() as conn:
            return conn.execute(raw_sql, {"name": EXPERIMENT, "key": METRIC}).all()

    def ours() -> list[Any]:
        frame = read_runs(uri, EXPERIMENT, [METRIC])
        return collect_reruns(frame, METRIC)

    repeat = args.repeat if args.repeat else max(3, min(15, 150_000 // n_runs))
    timed = _interleaved({"b": raw, "c": ours, TUNED: raw_tuned}, repeat)
    (out["b"], rows_b), (out["c"], cells), (out[TUNED], _) = timed["b"], timed["c"], timed[TUNED]
    raw_engine.dispose()
    tuned_engine.dispose()
    out.update(repeat=repeat, b_rows=len(rows_b), cells=len(cells), seeds=sum(c.n for c in cells))
    out["peak_mib"] = _peak_mib(ours)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--store",
        type=Path,
        default=Path(tempfile.gettempdir()) / "recipe_audit_bench",
        help="folder holding the cached stores (default: a folder in the temp dir)",
    )
    ap.add_argument(
        "--sizes", default="1000,10000,100000", help="reruns per store, comma-separated (default 1000,10000,100000)"
    )
    ap.add_argument("--n-runs", type=int, help="a single size (same as --sizes N)")
    ap.add_argument(
        "--repeat", type=int, default=0,
        help="timed rounds of (b) and (c), interleaved (median); default 15 up to 10,000 reruns, 3 at 100,000",
    )
    ap.add_argument(
        "--search-runs-max", type=int, default=10_000,
        help="time (a) mlflow.search_runs only up to this many reruns (default 10000; 0: never)",
    )
    ap.add_argument("--card", action="store_true", help="also time a card over the largest size, end to end")
    ap.add_argument("--rebuild", action="store_true", help="rebuild the stores even if cached")
    args = ap.parse_args(argv)
    try:
        sizes = [args.n_runs] if args.n_runs else [int(x) for x in args.sizes.split(",") if x.strip()]
    except ValueError:
        ap.error("--sizes must be comma-separated integers, e.g. 1000,10000")
    if not sizes or min(sizes) < 1:
        ap.error("every size must be at least 1")
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    args.store.mkdir(parents=True, exist_ok=True)

    results = [bench_size(args, n) for n in sizes]

    print(f"\nreading reruns from SQLite, metric {METRIC!r}; (b) and (c): median of interleaved rounds")
    print(f"{'reruns':>8} {'(b) raw SQL':>12} {'(c) ours':>10} {'(c)/(b)':>8} {'(c) per rerun':>14} "
          f"{'peak (c)':>9} {'(a) search_runs':>16} {'(a)/(c)':>8} {'rounds':>6}")
    ok = True
    for r in results:
        a = f"{r['a']:14.2f} s" if "a" in r else f"{'-':>16}"
        ac = f"{r['a'] / r['c']:8.0f}" if "a" in r else f"{'-':>8}"
        ratio = r["c"] / r["b"]
        print(f"{r['n']:>8,} {r['b'] * 1e3:9.1f} ms {r['c'] * 1e3:7.1f} ms {ratio:8.2f} "
              f"{r['c'] / r['n'] * 1e6:11.2f} us {r['peak_mib']:5.1f} MiB {a} {ac} {r['repeat']:>6}")
    for r in results:
        if r["n"] >= 10_000:
            ratio = r["c"] / r["b"]
            passed = ratio <= 1.5
            ok &= passed
            print(f"(c)/(b) at {r['n']:,} reruns = {ratio:.2f}  target <= 1.5  {'PASS' if passed else 'FAIL'}")
    tuned = ", ".join(f"{r['n']:,}: {r[TUNED] * 1e3:.1f} ms" for r in results)
    print(f"for reference, (b') the SELECT of (b) on a memory-mapped connection like read_runs's: {tuned}")
    print(f"(c) reads per run the kind, parent, recipe and seed tags and the metric; (b) the metric only; "
          f"(c) gives {results[-1]['cells']} cells, {results[-1]['seeds']} seeds at {results[-1]['n']:,}")
    if args.card:
        largest = max(results, key=lambda r: r["n"])
        card_db = args.store / f"bench_card_{largest['n']}.db"
        if args.rebuild and card_db.exists():
            card_db.unlink()
        if not card_db.exists():
            build_card_store(largest["db"], card_db)
        with tempfile.TemporaryDirectory() as out_dir:
            seconds, status, tail = time_card(card_db, Path(out_dir) / "card")
        passed = status == 0 and seconds <= 3.0
        ok &= passed
        if status != 0:
            print(tail)
        print(f"card over {largest['n']:,} reruns of one recipe, recipe-audit card in its own process: "
              f"{seconds:.2f} s (exit {status})  target <= 3 s  {'PASS' if passed else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
