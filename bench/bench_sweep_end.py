"""Benchmark: what the end of a sweep costs, step by step, and how it grows with the reruns.

For each N of ``--n`` the example app ``examples/bare_function`` is swept once with the callback
(``seed=range(N)``, a fresh SQLite store), as ``bench/bench_plugin.py`` sweeps it. Then, on a copy of
that store (its card runs hidden, as at the end of a sweep that has not logged its card yet), the
steps of the callback's end of the sweep run ``--repeat`` times in this process (after one untimed
pass, which imports what the card needs), each timed in wall
time and in CPU time (CPU time counts this process only, so other load on a shared machine changes
it little): closing dead reruns, closing the sweep run, the card (computed, written, logged:
``cards_for_sweep``), the sweep run's verdict tags, the experiment's description, the failed and
killed reruns, the store's checkpoint. It prints the medians per step and the CPU time each step
adds per rerun between the smallest and the largest N.

Run: ``python bench/bench_sweep_end.py [--n 10 40 85] [--repeat 5]``
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
APP = REPO / "examples" / "bare_function"
METRIC = "val_accuracy"


def make_store(n: int, workdir: Path) -> Path:
    """A store holding one finished sweep of ``n`` seeds of the example app, with the callback."""
    workdir.mkdir(parents=True)
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{workdir / 'mlflow.db'}", "HYDRA_FULL_ERROR": "1"}
    env.pop("MLFLOW_RUN_ID", None)
    args = [sys.executable, str(APP / "train.py"), "-m", f"seed=range({n})", f"hydra.sweep.dir={workdir / 'sweep'}",
            "hydra/callbacks=recipe_audit", f"hydra.callbacks.recipe_audit.metric={METRIC}"]
    proc = subprocess.run(args, cwd=workdir, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"bench_sweep_end: the sweep of {n} seeds failed:\n{proc.stderr[-2000:]}")
    return workdir / "mlflow.db"


def copy_without_cards(db: Path, tmp: Path):
    """A copy of ``db`` whose card runs are deleted, and the sweep's ``SweepInfo``."""
    import mlflow

    from recipe_audit import keys
    from recipe_audit.store import sweeps

    shutil.copy(db, tmp / "mlflow.db")
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    con = sqlite3.connect(tmp / "mlflow.db")
    con.execute("update runs set lifecycle_stage = 'deleted' where run_uuid in "
                "(select run_uuid from tags where key = ? and value = ?)", (keys.TAG_KIND, keys.KIND_CARD))
    con.commit()
    parent = con.execute("select run_uuid from tags where key = ? and value = ?",
                         (keys.TAG_KIND, keys.KIND_SWEEP)).fetchone()[0]
    sweep_id = con.execute("select value from tags where run_uuid = ? and key = ?",
                           (parent, keys.TAG_SWEEP_ID)).fetchone()[0]
    n = con.execute("select count(*) from tags where key = ? and value = ?",
                    (keys.TAG_KIND, keys.KIND_RERUN)).fetchone()[0]
    con.close()
    client = mlflow.MlflowClient(uri)
    experiment = client.get_experiment(client.get_run(parent).info.experiment_id).name
    return sweeps.SweepInfo(sweep_id, parent, uri, experiment, tuple(range(n))), n


def _step(wall: dict, cpu: dict, name: str, fn, *args):
    """``fn(*args)``, its wall and CPU milliseconds appended under ``name``."""
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn(*args)
    wall.setdefault(name, []).append((time.perf_counter() - t0) * 1000)
    cpu.setdefault(name, []).append((time.process_time() - c0) * 1000)
    return out


def time_end(db: Path, repeat: int) -> tuple[int, dict[str, list[float]], dict[str, list[float]]]:
    """Wall and CPU milliseconds of each step of the end of the sweep in ``db``, ``repeat`` times."""
    from recipe_audit.cards.model import CardOptions
    from recipe_audit.cards.summary import summary_markdown
    from recipe_audit.release import sweep as release_sweep
    from recipe_audit.store import rerun_runs, sqlite, sweeps

    opts = CardOptions.from_config(taus=(0.7,), eps=0.1, delta=0.1, metrics=[METRIC])
    wall: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    n = 0
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="bench-end-") as tmp:
            info, n = copy_without_cards(db, Path(tmp))

            with contextlib.redirect_stdout(io.StringIO()):
                _step(wall, cpu, "close_dead_reruns", rerun_runs.close_dead_reruns, info)
                _step(wall, cpu, "end_sweep", sweeps.end_sweep, info)
                card = _step(wall, cpu, "cards_for_sweep", release_sweep.cards_for_sweep, info, METRIC, opts,
                             Path(tmp) / "sweep")
                _step(wall, cpu, "tag_sweep_with_cards", sweeps.tag_sweep_with_cards, info,
                      [e.to_json() for e in card.cells], summary_markdown([card]))
                _step(wall, cpu, "publish_cards", release_sweep.publish_cards, info.tracking_uri,
                      info.experiment_name, [card])
                _step(wall, cpu, "failed_reruns", rerun_runs.failed_reruns, info)
                _step(wall, cpu, "killed_attempts", rerun_runs.killed_attempts, info, 0)
                _step(wall, cpu, "checkpoint_store", sqlite.checkpoint_store, info.tracking_uri)
    for d in (wall, cpu):
        d["total"] = [sum(v[i] for k, v in d.items() if k != "total") for i in range(repeat)]
    return n, wall, cpu


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[10, 40, 85])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    if len(args.n) < 2 or min(args.n) < 2 or args.repeat < 1:
        raise SystemExit("bench_sweep_end: give two or more sweep sizes of at least 2 seeds and --repeat ≥ 1.")
    print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-end-stores-") as stores:
        for n in sorted(set(args.n)):
            db = make_store(n, Path(stores) / f"n{n}")
            if not results:  # one untimed pass first: the imports of the first card are not the end's cost
                time_end(db, 1)
            results[n] = time_end(db, args.repeat)
            _, wall, cpu = results[n]
            print(f"\nN = {n} reruns, medians of {args.repeat} (ms):  wall / CPU", flush=True)
            for step in wall:
                print(f"  {step:22s} {statistics.median(wall[step]):8.1f} / {statistics.median(cpu[step]):8.1f}")
    lo, hi = min(results), max(results)
    print(f"\nCPU time each step adds per rerun, N = {lo} to {hi} (ms a rerun, from the medians):")
    for step in results[lo][2]:
        a, b = statistics.median(results[lo][2][step]), statistics.median(results[hi][2][step])
        print(f"  {step:22s} {(b - a) / (hi - lo):6.2f}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
