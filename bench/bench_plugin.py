"""Benchmark: what the recipe_audit callback costs a user's own Hydra app, per job.

The same example app (``examples/bare_function`` by default: a task function of a few ms that
returns its metric, so the callback's own cost is not lost in the noise of training;
``--app examples/plain_mlflow --metric val_accuracy`` for an app that logs to MLflow itself) is
swept over the same seeds twice, in subprocesses, as a user runs it, each on a fresh SQLite store
named by ``MLFLOW_TRACKING_URI``:

    A  python train.py -m 'seed=range(N)' hydra/callbacks=recipe_audit hydra.callbacks.recipe_audit.metric=M
    B  python train.py -m 'seed=range(N)'

Side A opens the sweep's parent run, every rerun's run (tags, params, status) and the card at the
end; side B is the app alone (with nothing of MLflow for the bare function; the plain-MLflow
app's own ``mlflow.start_run()`` creates a run per job). Both sides
are run at two sweep sizes, N1 and N2, so the fixed cost (start-up, the parent run, the card)
separates from the cost per job:

    per-job overhead (wall) = ((A(N2) - A(N1)) - (B(N2) - B(N1))) / (N2 - N1)

and, less sensitive to other load on a shared machine, from the launcher's own log: the median
time from one job's start to the next's (Hydra logs ``#i : ...`` with a millisecond timestamp as it
launches job i), A minus B, at N2. Each side runs ``--repeat`` times in alternation (B then A) and the minimum is kept, since other
load on a shared machine only adds time. The script prints both ratios A/B and the per-job
overhead in ms; target: at most 50 ms a job.

Run: ``python bench/bench_plugin.py [--app examples/bare_function] [--metric val_accuracy]
[--n1 5] [--n2 85] [--repeat 3]``
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


_LAUNCH = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})\]\[HYDRA\] \t#(\d+) :", re.M)


def job_interval_ms(output: str) -> tuple[float, float]:
    """Median and mean time between consecutive job launches in a sweep's log, in ms."""
    import datetime as dt

    starts = sorted((int(m.group(3)), dt.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").timestamp()
                     + int(m.group(2)) / 1000) for m in _LAUNCH.finditer(output))
    gaps = [(b[1] - a[1]) * 1000 for a, b in zip(starts, starts[1:], strict=False)]
    return (statistics.median(gaps), statistics.mean(gaps)) if gaps else (float("nan"), float("nan"))


def sweep(app: Path, n: int, plugin: bool, metric: str, workdir: Path) -> tuple[float, tuple[float, float]]:
    workdir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{workdir / 'mlflow.db'}", "HYDRA_FULL_ERROR": "1"}
    env.pop("MLFLOW_RUN_ID", None)
    args = [sys.executable, str(app / "train.py"), "-m", f"seed=range({n})", f"hydra.sweep.dir={workdir / 'sweep'}"]
    if plugin:
        args += ["hydra/callbacks=recipe_audit", f"hydra.callbacks.recipe_audit.metric={metric}"]
    t0 = time.perf_counter()
    proc = subprocess.run(args, cwd=workdir, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"bench_plugin: the sweep failed ({'with' if plugin else 'without'} the callback, N={n}):\n"
                         + proc.stderr[-2000:])
    return wall, job_interval_ms(proc.stdout + proc.stderr)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--app", default=str(REPO / "examples" / "bare_function"))
    ap.add_argument("--metric", default="val_accuracy")
    ap.add_argument("--n1", type=int, default=5)
    ap.add_argument("--n2", type=int, default=85)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    app = Path(args.app).resolve()
    best: dict[tuple[str, int], float] = {}
    gaps: dict[str, list[tuple[float, float]]] = {"A": [], "B": []}
    with tempfile.TemporaryDirectory(prefix="bench-plugin-") as tmp:
        for r in range(args.repeat):
            for n in (args.n1, args.n2):
                for side, plugin in (("B", False), ("A", True)):
                    t, gap = sweep(app, n, plugin, args.metric, Path(tmp) / f"{side}{n}-{r}")
                    best[(side, n)] = min(best.get((side, n), float("inf")), t)
                    if n == args.n2:
                        gaps[side].append(gap)
                    print(f"round {r + 1}: {side} ({'with' if plugin else 'without'} the callback), "
                          f"N = {n}: {t:.2f} s, job-to-job median {gap[0]:.1f} ms, mean {gap[1]:.1f} ms", flush=True)
    a1, a2, b1, b2 = best[("A", args.n1)], best[("A", args.n2)], best[("B", args.n1)], best[("B", args.n2)]
    per_job_ms = ((a2 - a1) - (b2 - b1)) / (args.n2 - args.n1) * 1000
    fixed_s = (a1 - b1) - per_job_ms / 1000 * args.n1
    print(f"\napp {app.relative_to(REPO) if app.is_relative_to(REPO) else app}, best of {args.repeat}:")
    print(f"  N = {args.n1}: with {a1:.2f} s, without {b1:.2f} s, ratio {a1 / b1:.3f}")
    print(f"  N = {args.n2}: with {a2:.2f} s, without {b2:.2f} s, ratio {a2 / b2:.3f}")
    print(f"  the app's own time per job (without): {(b2 - b1) / (args.n2 - args.n1) * 1000:.1f} ms")
    ga, gb = min(g[0] for g in gaps["A"]), min(g[0] for g in gaps["B"])
    ma, mb = min(g[1] for g in gaps["A"]), min(g[1] for g in gaps["B"])
    print(f"  job-to-job at N = {args.n2} (best round): median with {ga:.1f} ms, without {gb:.1f} ms "
          f"(ratio {ga / gb:.3f}); mean with {ma:.1f} ms, without {mb:.1f} ms (ratio {ma / mb:.3f})")
    print(f"  callback overhead per job (target <= 50 ms): {ga - gb:.1f} ms from the job-to-job medians, "
          f"{ma - mb:.1f} ms from the means; {per_job_ms:.1f} ms from the wall times, which also count what the "
          f"end of the sweep does per rerun (the card reads and bounds every rerun); fixed (parent run, card): "
          f"{fixed_s:.2f} s")


if __name__ == "__main__":
    main()
