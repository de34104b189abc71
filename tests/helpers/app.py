"""``python -m recipe_audit`` as a user runs it, in a subprocess, and the small sizes that make an
end-to-end rerun take about a second."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from helpers import procs

REPO = Path(__file__).resolve().parents[2]

# small sizes so an end-to-end rerun takes about a second
SMALL = [
    "task.options.n_train=240", "task.options.n_audit=120", "recipe.max_steps=12",
    "progress=false", "threads=1",
]


def _app(args: list[str], env_extra: dict | None) -> tuple[list[str], dict]:
    """The command line and environment of ``python -m recipe_audit ARGS`` as a user runs it."""
    return [sys.executable, "-m", "recipe_audit", *args], {**os.environ, "HYDRA_FULL_ERROR": "0", **(env_extra or {})}


def run_app(args: list[str], cwd: Path, env_extra: dict | None = None, timeout: int = 600):
    """``python -m recipe_audit ARGS`` in a subprocess, as a user runs it (``timeout``: a quiet
    machine's seconds, scaled by ``helpers.procs.timeout``)."""
    cmd, env = _app(args, env_extra)
    return procs.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def start_app(args: list[str], cwd: Path, output: Path, env_extra: dict | None = None) -> subprocess.Popen:
    """``python -m recipe_audit ARGS`` started as ``run_app`` runs it, without waiting for it: the
    ``Popen``. It leads a process group of its own, so ``os.killpg(proc.pid, ...)`` ends it and every
    process it started (launcher jobs too). stdout and stderr go, together, to the file ``output``:
    not to a pipe, which nobody reads while a test polls, and which would block the app once full."""
    cmd, env = _app(args, env_extra)
    with open(output, "w") as out:
        return procs.spawn(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                           stderr=subprocess.STDOUT, text=True, start_new_session=True)
