"""A Hydra app's command line run in this process, as ``python -m recipe_audit ARGS`` or
``python train.py ARGS`` runs it, for the tests of bad input: the same entry point, Hydra's own
parsing, composition and error report, the callback and the app's checks, without the seconds a
new interpreter takes to import Hydra, MLflow and torch.

What a process would leave behind is put back afterwards: the environment, ``sys.argv``, the
working directory, the logging handlers Hydra configured, the run the callback opened for a job,
MLflow's tracking URI, torch's thread count. ``gc.freeze`` (the app freezes its
set-up once per process) is a no-op meanwhile. An exception that escapes is reported as the
interpreter reports it: its traceback on stderr and exit status 1. What the project's code
registers with ``atexit`` (a sweep that stopped before its end is closed so) runs when the command
ends, as at a process's exit, its output in the command's, not at the test session's end; a
library's registrations (made once, on its first import) are left to the session's end.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import io
import logging
import os
import runpy
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Ran:
    """What the command did: ``subprocess.CompletedProcess``'s fields the tests read."""

    returncode: int
    stdout: str
    stderr: str


def run_module_here(args: list[str], cwd: Path, env_extra: dict | None = None) -> Ran:
    """``python -m recipe_audit ARGS``, in this process."""
    return _run(lambda: runpy.run_module("recipe_audit", run_name="__main__", alter_sys=True),
                ["recipe_audit", *args], cwd, env_extra)


def run_script_here(script: Path, args: list[str], env_extra: dict | None = None) -> Ran:
    """``python SCRIPT ARGS`` from the script's folder, in this process."""
    return _run(lambda: runpy.run_path(str(script), run_name="__main__"), [str(script), *args],
                script.parent, env_extra)


def _exit_status(exc: SystemExit, err: io.StringIO) -> int:
    if exc.code is None or isinstance(exc.code, int):
        return exc.code or 0
    print(exc.code, file=err)  # sys.exit("message"): the interpreter prints it, exit 1
    return 1


def _run(target: Callable[[], object], argv: list[str], cwd: Path, env_extra: dict | None) -> Ran:
    from mlflow.tracking._tracking_service import utils as tracking_utils

    from recipe_audit.app import seams

    saved_env, saved_argv, saved_cwd = dict(os.environ), sys.argv[:], os.getcwd()
    root = logging.getLogger()
    saved_root = (root.level, root.handlers[:])
    saved_loggers = {name: (lg.level, lg.handlers[:], lg.propagate, lg.disabled)
                     for name, lg in logging.root.manager.loggerDict.items() if isinstance(lg, logging.Logger)}
    saved_uri = tracking_utils._tracking_uri
    import torch  # the app sets its threads (threads=1): put back the test process's own after

    saved_threads = torch.get_num_threads()
    freeze = gc.freeze
    out, err = io.StringIO(), io.StringIO()
    # as from a user's shell: no run or sweep of another test's process
    for key in [k for k in os.environ if k.startswith(("MLFLOW_RUN", "RECIPE_AUDIT_SWEEP"))]:
        del os.environ[key]
    os.environ.update({"HYDRA_FULL_ERROR": "0", **(env_extra or {})})
    gc.freeze = lambda: None
    at_exit = []
    register = atexit.register

    def register_here(func, *args, **kwargs):
        if not getattr(func, "__module__", "").startswith("recipe_audit."):
            return register(func, *args, **kwargs)
        at_exit.append((func, args, kwargs))
        return func

    atexit.register = register_here
    try:
        os.chdir(cwd)
        sys.argv = argv
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                target()
                rc = 0
            except SystemExit as exc:
                rc = _exit_status(exc, err)
            except Exception:  # what the interpreter would print
                traceback.print_exc(file=err)
                rc = 1
            for func, args, kwargs in reversed(at_exit):  # as the interpreter does at exit
                try:
                    func(*args, **kwargs)
                except Exception:  # noqa: BLE001 - printed, as the interpreter prints it, and the next one runs
                    traceback.print_exc(file=err)
    finally:
        seams.restore_left()  # what a job whose task stopped the process left installed (Hydra skipped its end)
        atexit.register = register
        gc.freeze = freeze
        sys.argv = saved_argv
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        for lg in [root, *(logging.root.manager.loggerDict.values())]:
            if not isinstance(lg, logging.Logger):
                continue
            name = lg.name if lg is not root else None
            keep = saved_root[1] if lg is root else saved_loggers.get(name, (0, [], True, False))[1]
            for handler in lg.handlers:
                if handler not in keep:
                    handler.close()
        root.setLevel(saved_root[0])
        root.handlers[:] = saved_root[1]
        for name, lg in logging.root.manager.loggerDict.items():
            if isinstance(lg, logging.Logger):
                level, handlers, propagate, disabled = saved_loggers.get(name, (logging.NOTSET, [], True, False))
                lg.setLevel(level)
                lg.handlers[:] = handlers
                lg.propagate, lg.disabled = propagate, disabled
        tracking_utils._tracking_uri = saved_uri
        torch.set_num_threads(saved_threads)
    return Ran(rc, out.getvalue(), err.getvalue())
