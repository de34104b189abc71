"""Where the time of ``python -m recipe_audit -m ...`` goes, per job and once a sweep.

Runs the built-in app in this process, as ``python -m recipe_audit`` does, with the arguments
after ``--``, and prints one table: a job's whole time in its runner (the seed launcher's
``run_seed_job``, or Hydra's ``run_job`` for a job it does not run), its training, and
the per-job work around it (threads, the prepared task, the callback's hooks, the rerun logger's
``log_result``, the seed launcher's job config), then the sweep's start and end. Three ways:

* default: under ``cProfile`` (wall-clock timer), as ``python -m cProfile -m recipe_audit ...``;
  the profiler inflates Python-heavy code more than torch's kernels;
* ``--cpu``: under ``cProfile`` timed in this process's CPU seconds (less sensitive to other load
  on a shared machine; the timer's own system calls inflate everything further);
* ``--timers``: no profiler: the same functions wrapped with a wall-clock and a CPU timer (what
  they cost, as near as one can tell from inside);
* ``--phases``: no profiler: the process's CPU time cut at the callback's hooks into the sweep's
  phases (start-up, ``on_multirun_start``, each job's ``on_job_start``, its task with the
  training (``train_rerun``) apart, ``on_job_end``, what lies between two jobs: the job runner
  around the hooks and the launcher's job config, ``on_multirun_end``), with the
  garbage collector's CPU time and collections (generation 0, 1, 2) in each; the phases add up
  to the process's CPU time from the start of this script. A last line gives the median span from
  one job's ``on_job_end`` to the next one's ``on_job_start``, and the span before the first job
  (the sweeper, the first recipe's composition, the launch), which the between-jobs row also holds.

A time "a job" is the total over the sweep's jobs divided by their number: a function that does
its work in the first job only (an import, a cache filled once) shows there as its one-off cost
spread over the jobs; the ``calls`` column and ``--out FILE.prof`` (for ``pstats``) tell which.
``--compare A.prof B.prof`` prints two saved profiles side by side.

Run: ``python bench/profile_sweep.py [--cpu | --timers | --phases] [--out FILE.prof] -- -m 'seed=range(12)' threads=1 progress=false``
"""

from __future__ import annotations

import argparse
import itertools
import re
import runpy
import sys
import time
from collections import defaultdict

#: (label, the function as pstats names it, per job?)
ROWS = [
    ("a job, whole (run_seed_job or Hydra's run_job)",
     r"hydra/core/utils\.py:\d+\(run_job\)|app/launchers\.py:\d+\(run_seed_job\)", True),
    ("train_rerun: training and scoring", r"train/loop\.py:\d+\(train_rerun\)", True),
    ("app/threads.py: apply", r"app/threads\.py:\d+\(apply\)", True),
    ("train/loop.py: prepare_task", r"train/loop\.py:\d+\(prepare_task\)", True),
    ("callback: on_job_start", r"app/callback\.py:\d+\(on_job_start\)", True),
    ("callback: on_job_end", r"app/callback\.py:\d+\(on_job_end\)", True),
    ("store/rerun_log.py: log_result", r"store/rerun_log\.py:\d+\(log_result\)", True),
    ("seed launcher: job_config", r"app/launchers\.py:\d+\(job_config\)", True),
    ("callback: on_multirun_start (once)", r"app/callback\.py:\d+\(on_multirun_start\)", False),
    ("  of which store/sqlite.py: create_store", r"store/sqlite\.py:\d+\(create_store\)", False),
    ("callback: on_multirun_end (once)", r"app/callback\.py:\d+\(on_multirun_end\)", False),
]


def _from_stats(stats: dict, pattern: str) -> tuple[float, int]:
    total, calls = 0.0, 0
    for (fn, line, name), (_cc, nc, _tt, ct, _callers) in stats.items():
        if re.search(pattern, f"{fn.replace(chr(92), '/')}:{line}({name})"):
            total, calls = total + ct, calls + nc
    return total, calls


def _jobs(stats: dict) -> int:
    return _from_stats(stats, ROWS[0][1])[1] or 1


def table(profiles: dict[str, dict]) -> str:
    heads = list(profiles)
    lines = ["| | " + " | ".join(heads) + " |", "|---|" + "---|" * len(heads)]
    for label, pattern, per_job in ROWS:
        cells = []
        for stats in profiles.values():
            t, n = _from_stats(stats, pattern)
            jobs = _jobs(stats)
            cells.append(f"{t * 1000 / jobs:,.0f} ms a job ({n} calls)" if per_job else f"{t:,.2f} s")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _run_app(args: list[str]) -> None:
    sys.argv = ["recipe_audit", *args]
    try:
        runpy.run_module("recipe_audit", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise


def _timed_run(args: list[str]) -> str:
    from recipe_audit.app import callback, launchers, threads
    from recipe_audit.store import rerun_log, sqlite
    from recipe_audit.train import loop

    spent: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])

    def wrap(owner, name, label):
        real = getattr(owner, name)

        def timed(*a, **k):
            c0, w0 = time.process_time(), time.perf_counter()
            try:
                return real(*a, **k)
            finally:
                s = spent[label]
                s[0] += 1
                s[1] += time.process_time() - c0
                s[2] += time.perf_counter() - w0

        setattr(owner, name, timed)

    targets = {  # label -> (owner, attribute); run_job where the seed launcher calls it
        ROWS[0][0]: (launchers, "run_job"), ROWS[1][0]: (loop, "train_rerun"), ROWS[2][0]: (threads, "apply"),
        ROWS[3][0]: (loop, "prepare_task"), ROWS[4][0]: (callback.RecipeAuditCallback, "on_job_start"),
        ROWS[5][0]: (callback.RecipeAuditCallback, "on_job_end"), ROWS[6][0]: (rerun_log.RerunLogger, "log_result"),
        ROWS[7][0]: (launchers.SeedLauncherBase, "job_config"),
        ROWS[8][0]: (callback.RecipeAuditCallback, "on_multirun_start"), ROWS[9][0]: (sqlite, "create_store"),
        ROWS[10][0]: (callback.RecipeAuditCallback, "on_multirun_end"),
    }
    for label, (owner, attr) in targets.items():
        wrap(owner, attr, label)
    wrap(launchers, "run_seed_job", ROWS[0][0])  # the seed launcher's jobs; run_job runs any other
    _run_app(args)
    jobs = int(spent[ROWS[0][0]][0]) or 1
    lines = ["| | calls | CPU | wall |", "|---|---|---|---|"]
    for label, _pattern, per_job in ROWS:
        n, cpu, wall = spent.get(label, (0, 0.0, 0.0))
        unit = (lambda s: f"{s * 1000 / jobs:,.1f} ms a job") if per_job else (lambda s: f"{s:,.2f} s")
        lines.append(f"| {label} | {int(n)} | {unit(cpu)} | {unit(wall)} |")
    return "\n".join(lines)


def _phases_run(args: list[str]) -> str:
    import gc

    from recipe_audit.app import callback
    from recipe_audit.train import loop

    collected = {"cpu": 0.0, "n": [0, 0, 0], "t0": 0.0}

    def on_gc(phase, info):
        if phase == "start":
            collected["t0"] = time.process_time()
        else:
            collected["cpu"] += time.process_time() - collected["t0"]
            collected["n"][info["generation"]] += 1

    marks: list[tuple[str, float, float, tuple[int, ...]]] = []

    def mark(what: str) -> None:
        marks.append((what, time.process_time(), collected["cpu"], tuple(collected["n"])))

    hooks = ("on_multirun_start", "on_job_start", "on_job_end", "on_multirun_end")
    for name in hooks:
        real = getattr(callback.RecipeAuditCallback, name)

        def hook(self, *a, _real=real, _name=name, **k):
            mark(f"{_name} starts")
            try:
                return _real(self, *a, **k)
            finally:
                mark(f"{_name} ends")

        setattr(callback.RecipeAuditCallback, name, hook)
    real_train = loop.train_rerun

    def train(*a, **k):
        mark("train_rerun starts")
        try:
            return real_train(*a, **k)
        finally:
            mark("train_rerun ends")

    loop.train_rerun = train
    gc.callbacks.append(on_gc)
    mark("start")
    try:
        _run_app(args)
    finally:
        gc.callbacks.remove(on_gc)
        mark("end")
    between = "between jobs (job runner, job config)"
    names = {  # the span between two marks -> its phase
        ("start", "on_multirun_start starts"): "start-up (Hydra, the app's config)",
        ("on_multirun_start starts", "on_multirun_start ends"): "on_multirun_start (once)",
        ("on_multirun_start ends", "on_job_start starts"): between,
        ("on_job_end ends", "on_job_start starts"): between,
        ("on_job_start starts", "on_job_start ends"): "on_job_start",
        ("on_job_start ends", "train_rerun starts"): "the task before training",
        ("train_rerun starts", "train_rerun ends"): "train_rerun: training and scoring",
        ("train_rerun ends", "on_job_end starts"): "the task after training",
        ("on_job_end starts", "on_job_end ends"): "on_job_end",
        ("on_job_end ends", "on_multirun_end starts"): between,
        ("on_multirun_end starts", "on_multirun_end ends"): "on_multirun_end (once: the card)",
        ("on_multirun_end ends", "end"): "after the sweep",
    }
    spans: dict[str, list] = {}
    from_job_to_job = []  # CPU seconds of each span from one job's on_job_end to the next's on_job_start
    first = None  # the span before the first job's on_job_start: the sweeper, compositions, the launch
    for (a, ca, ga, na), (b, cb, gb, nb) in itertools.pairwise(marks):
        if (a, b) == ("on_job_end ends", "on_job_start starts"):
            from_job_to_job.append(cb - ca)
        elif (a, b) == ("on_multirun_start ends", "on_job_start starts"):
            first = cb - ca
        row = spans.setdefault(names.get((a, b), f"{a} -> {b}"), [0, 0.0, 0.0, [0, 0, 0]])
        row[0] += 1
        row[1] += cb - ca
        row[2] += gb - ga
        row[3] = [x + nb[i] - na[i] for i, x in enumerate(row[3])]
    lines = ["| phase | times | CPU | of which gc | collections (gen 0, 1, 2) |", "|---|---|---|---|---|"]
    for name, (n, cpu, gc_cpu, counts) in spans.items():
        lines.append(f"| {name} | {n} | {cpu:,.3f} s | {gc_cpu:,.3f} s | {', '.join(map(str, counts))} |")
    total = marks[-1][1] - marks[0][1]
    lines.append(f"| all | | {total:,.3f} s | {marks[-1][2] - marks[0][2]:,.3f} s | "
                 f"{', '.join(str(x - y) for x, y in zip(marks[-1][3], marks[0][3], strict=True))} |")
    if from_job_to_job:  # the between-jobs row less its first span (the sweeper, the recipes' compositions)
        ms = sorted(x * 1000 for x in from_job_to_job)
        lines.append(f"\nbetween jobs, from one job's on_job_end to the next's on_job_start ({len(ms)} times): "
                     f"median {ms[len(ms) // 2]:,.1f} ms CPU (min {ms[0]:,.1f}, max {ms[-1]:,.1f}); before the "
                     f"first job: {(first or 0) * 1000:,.1f} ms")
    return "\n".join(lines)


def main() -> None:
    argv = sys.argv[1:]
    app_args = argv[argv.index("--") + 1:] if "--" in argv else []
    mine = argv[:argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    how = ap.add_mutually_exclusive_group()
    how.add_argument("--cpu", action="store_true", help="cProfile timed in CPU seconds")
    how.add_argument("--timers", action="store_true", help="no profiler: timers around the functions of the table")
    how.add_argument("--phases", action="store_true",
                     help="no profiler: the process's CPU time cut at the callback's hooks, with the gc's share")
    how.add_argument("--compare", nargs="+", metavar="FILE.prof", help="print saved profiles side by side")
    ap.add_argument("--out", help="save the profile here (pstats format)")
    opts = ap.parse_args(mine)
    import os

    load = f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs"
    if opts.compare:
        import pstats

        print(table({f: pstats.Stats(f).stats for f in opts.compare}))
        return
    if not app_args:
        ap.error("give the app's arguments after --, e.g. -- -m 'seed=range(12)' threads=1 progress=false")
    if opts.timers:
        out = _timed_run(app_args)
    elif opts.phases:
        out = _phases_run(app_args)
    else:
        import cProfile
        import pstats

        prof = cProfile.Profile(time.process_time) if opts.cpu else cProfile.Profile()
        prof.enable()
        try:
            _run_app(app_args)
        finally:
            prof.disable()
        if opts.out:
            prof.dump_stats(opts.out)
        out = table({"CPU (cProfile)" if opts.cpu else "wall (cProfile)": pstats.Stats(prof).stats})
    print(f"\nprofile_sweep: python -m recipe_audit {' '.join(app_args)}; before: {load}; after: "
          f"load average {os.getloadavg()[0]:.2f}")
    print(out)


if __name__ == "__main__":
    main()
