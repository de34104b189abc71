"""Benchmark: how long ``recipe-audit bound`` and each ``recipe-audit ... --help`` take, against
``python -c pass`` in the same run.

    python bench/bench_cli.py               # best of 7 runs of each command
    python bench/bench_cli.py --runs 15

Every command runs as a user runs it: a fresh process of the ``recipe-audit`` console script
installed beside this interpreter (``python -m recipe_audit.cli`` when there is none), stdout and
stderr discarded. The commands alternate round by round, so a busy machine slows all of them
alike; the best run of each is reported, in milliseconds and as a multiple of ``python -c pass``
(the interpreter's own start-up, the floor for any command). Exits 1 when a command fails or
takes longer than ``--limit-ms`` (default 300).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

COMMANDS = [
    ("bound -k 6 -n 59", ["bound", "-k", "6", "-n", "59"]),
    ("bound -k 0 -n 59 --eps 1e-12", ["bound", "-k", "0", "-n", "59", "--eps", "1e-12"]),
    ("bound -k 250 -n 1000 --json", ["bound", "-k", "250", "-n", "1000", "--json"]),
    ("bound -k 0 -n 44 --family-size 10", ["bound", "-k", "0", "-n", "44", "--family-size", "10"]),
    ("bound -k 3 -n 59 --anytime", ["bound", "-k", "3", "-n", "59", "--anytime"]),
    ("bound -k 250 -n 1000 --anytime", ["bound", "-k", "250", "-n", "1000", "--anytime"]),
    ("--help", ["--help"]),
    ("bound --help", ["bound", "--help"]),
    ("card --help", ["card", "--help"]),
    ("acceptance --help", ["acceptance", "--help"]),
    ("attach --help", ["attach", "--help"]),
    ("gate --help", ["gate", "--help"]),
    ("verify --help", ["verify", "--help"]),
]


def _entry() -> list[str]:
    script = Path(sys.executable).with_name("recipe-audit")
    if script.is_file():
        return [str(script)]
    found = shutil.which("recipe-audit")
    return [found] if found else [sys.executable, "-m", "recipe_audit.cli"]


def _once(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=os.environ)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.decode()[-300:]}")
    return elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=7, help="runs of each command; the best counts (default 7)")
    ap.add_argument("--limit-ms", type=float, default=300.0, help="slowest acceptable command (default 300)")
    a = ap.parse_args()

    entry = _entry()
    runs = {"python -c pass": [sys.executable, "-c", "pass"]}
    runs.update({f"recipe-audit {label}": [*entry, *args] for label, args in COMMANDS})
    best = {name: float("inf") for name in runs}
    for cmd in runs.values():  # warm-up: the file cache, compiled bytecode
        _once(cmd)
    for _ in range(a.runs):
        for name, cmd in runs.items():
            best[name] = min(best[name], _once(cmd))

    base = best["python -c pass"]
    print(f"{'command':<46} {'best ms':>8} {'× python -c pass':>17}")
    for name, t in best.items():
        print(f"{name:<46} {t * 1e3:8.1f} {t / base:17.2f}")
    print(f"(best of {a.runs} runs each, alternating; entry point: {' '.join(entry)})")
    slow = [name for name, t in best.items() if name != "python -c pass" and t * 1e3 > a.limit_ms]
    if slow:
        print(f"slower than {a.limit_ms:g} ms: {', '.join(slow)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
