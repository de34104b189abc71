"""Parallel efficiency: 2 local workers (joblib, one torch thread each) vs the sequential launcher.

    python bench/bench_parallel.py                   # 16 reruns of the default recipe, 2 rounds
    python bench/bench_parallel.py --reruns 8 --rounds 3
    python bench/bench_parallel.py --reruns 59 --rounds 1 --ceiling   # and the machine's ceiling
    python bench/bench_parallel.py --reruns 8 --rounds 2 --ray        # and hydra/launcher=ray_local
    python bench/bench_parallel.py --threads-only --reruns 16 --rounds 4 --pause 60
        # the sequential launcher only: threads=auto vs threads=1 vs threads=0, interleaved

Both sides run the same command, ``python -m recipe_audit -m 'seed=range(N)'`` with the default
recipe, model and task, each into its own fresh SQLite store, card included: end-to-end wall time
as a user sees it. The machine is shared, so the sides are interleaved (sequential, parallel,
sequential, ...) and the load average is printed with each measurement. Target: ratio >= 1.6.
The sequential side is timed three times: with the default ``threads=auto`` (what ``python -m
recipe_audit -m`` does: decided when the sweep starts, from the free CPUs; the decision and the load
average the sweep started at are printed each round), ``threads=1`` and ``threads=0`` (torch's own
choice, one thread per core); the verdict is against the fastest, and the lines "auto / threads=1",
"auto / threads=0" and "threads=0 / threads=1" are their ratios in the same run. A sweep leaves its
own load in the 1-minute load average for a minute or two, which ``threads=auto`` would count as
another user's: ``--pause S`` waits S seconds before each sweep. ``--ceiling`` also
times the trainings alone (bench_sweep.py's bare loop, no Hydra, no MLflow, no card): one process
with every seed and torch's default threads, against two processes at once with half the seeds
and one thread each: the most any two-worker launcher could gain here.
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


SEQUENTIAL = {"sequential-auto": "threads=auto", "sequential-1": "threads=1", "sequential-0": "threads=0"}
DECISION = re.compile(r"\] (?:- )?(\d+ torch threads? per rerun \(.*\))$", re.M)  # the line auto logs


def one(side: str, reruns: int, tmp: Path, i: int) -> tuple[float, str]:
    """Wall seconds of one sweep, and what threads=auto decided (empty for other sides)."""
    d = tmp / f"{side}{i}"
    d.mkdir()
    args = [sys.executable, "-m", "recipe_audit", "-m", f"seed=range({reruns})", "progress=false",
            f"hydra.sweep.dir={d / 'sweep'}"]
    if side == "parallel":
        args += ["hydra/launcher=local_parallel", "hydra.launcher.n_jobs=2", "threads=1"]
    elif side in SEQUENTIAL:  # the sequential launcher: threads=auto (the default), 1, 0 (torch's own)
        args += [SEQUENTIAL[side]]
    elif side == "ray":  # hydra/launcher=ray_local: a local Ray instance, one CPU per rerun
        args += ["hydra/launcher=ray_local", "threads=1"]
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{d / 'mlflow.db'}",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    if side.startswith("bare"):  # the ceiling: the trainings alone (bench_sweep.py's bare loop)
        bare = [sys.executable, str(REPO / "bench" / "bench_sweep.py"), "--bare"]
        if side == "bare-sequential":  # one process, all seeds, torch's default threads
            cmds = [bare + ["--seeds", str(reruns), "--threads", "0"]]
        else:  # two processes at once, half the seeds each, one thread each
            cmds = [bare + ["--seeds", str(n), "--threads", "1"] for n in (reruns - reruns // 2, reruns // 2)]
        t0 = time.perf_counter()
        procs = [subprocess.Popen(c, cwd=d, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                 for c in cmds]
        errs = [p.communicate()[1] for p in procs]
        wall = time.perf_counter() - t0
        if any(p.returncode for p in procs):
            raise SystemExit(f"{side} failed:\n{errs[0][-3000:]}")
        return wall, ""
    t0 = time.perf_counter()
    proc = subprocess.run(args, cwd=d, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0 or proc.stdout.count("Recipe cards (") != 1:
        raise SystemExit(f"{side} sweep failed:\n{proc.stderr[-3000:]}")
    found = DECISION.search(proc.stdout + proc.stderr) if side == "sequential-auto" else None
    return wall, found.group(1) if found else ""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reruns", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--no-torch-threads", action="store_true",
                    help="do not also time the sequential launcher with threads=0 and threads=1 (only auto)")
    ap.add_argument("--threads-only", action="store_true",
                    help="only the sequential launcher: threads=auto vs threads=1 vs threads=0 (no workers)")
    ap.add_argument("--pause", type=float, default=0.0,
                    help="seconds to wait before each sweep, so the previous one's load fades from the "
                         "1-minute load average that threads=auto reads")
    ap.add_argument("--ceiling", action="store_true",
                    help="also time the trainings alone (no Hydra, no MLflow): one process with all seeds "
                         "vs two processes at once with half the seeds each, one thread each")
    ap.add_argument("--ray", action="store_true",
                    help="also time hydra/launcher=ray_local threads=1 (pip install 'recipe_audit[ray]')")
    a = ap.parse_args(argv)
    sides = ["sequential-auto"] + ([] if a.no_torch_threads else ["sequential-1", "sequential-0"])
    sides += [] if a.threads_only else ["parallel"]
    sides += ["bare-sequential", "bare-2x1"] if a.ceiling else []
    sides += ["ray"] if a.ray else []
    times: dict[str, list[float]] = {side: [] for side in sides}
    print(f"cores: {os.cpu_count()}; {a.reruns} reruns of the default recipe per sweep; "
          f"load average at start {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.rounds):
            for side in sides:
                time.sleep(a.pause)
                before = os.getloadavg()[0]
                t, decided = one(side, a.reruns, Path(tmp), i)
                times[side].append(t)
                print(f"round {i} {side:15s} {t:6.1f} s   load average {before:.2f} before, "
                      f"{os.getloadavg()[0]:.2f} after" + (f"   auto: {decided}" if decided else ""), flush=True)
    t_auto = statistics.median(times["sequential-auto"])
    if "sequential-1" in times:  # the new default against the old one and torch's own choice
        t1, t0 = statistics.median(times["sequential-1"]), statistics.median(times["sequential-0"])
        print(f"sequential auto / threads=1 (medians): {t_auto:.1f} s / {t1:.1f} s = {t_auto / t1:.2f}x")
        print(f"sequential auto / threads=0 (medians): {t_auto:.1f} s / {t0:.1f} s = {t_auto / t0:.2f}x")
        print(f"sequential threads=0 / threads=1 (medians): {t0:.1f} s / {t1:.1f} s = {t0 / t1:.2f}x "
              "(above 1: one thread a rerun is faster)")
    if a.threads_only:
        print(f"load average now {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
        return 0
    par = statistics.median(times["parallel"])
    if a.ceiling:  # what two one-thread processes can gain over one process on this machine, at best
        b1, b2 = (statistics.median(times.pop(x)) for x in ("bare-sequential", "bare-2x1"))
        sides = [x for x in sides if not x.startswith("bare")]
        print(f"ceiling, trainings alone: one process {b1:.1f} s vs two processes x 1 thread {b2:.1f} s: "
              f"{b1 / b2:.2f}x")
    if a.ray:  # reported, not judged: the target is about the local workers
        ray = statistics.median(times.pop("ray"))
        sides = [x for x in sides if x != "ray"]
        print(f"ray_local (median) {ray:.1f} s; sequential (median) {t_auto:.1f} s")
    for side in [x for x in sides if x != "parallel"]:
        seq = statistics.median(times[side])
        print(f"{side} (median) {seq:.1f} s vs 2 workers x 1 thread (median) {par:.1f} s: ratio {seq / par:.2f}x")
    # the verdict is against the faster sequential variant: a sequential sweep slowed down by its own
    # threads fighting for the cores (or other users' processes) is no fair baseline
    best = min(statistics.median(times[x]) for x in sides if x != "parallel")
    print(f"ratio against the faster sequential run: {best / par:.2f}x ({'PASS' if best / par >= 1.6 else 'FAIL'} "
          f">= 1.6); load average now {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
