"""This process's place in a launch and how it stops: its rank under ``accelerate launch`` /
``torchrun``, and one sentence on stderr with a non-zero exit; its garbage collector paused
while a sweep starts."""

from __future__ import annotations

import functools
import gc
import os
import sys
from collections.abc import Callable
from typing import TypeVar

_F = TypeVar("_F", bound=Callable)


def rank() -> int:
    """This process's rank under ``accelerate launch`` / ``torchrun`` (0 when alone)."""
    try:
        return int(os.environ.get("RANK", "0") or 0)
    except ValueError:
        return 0


def stop(message: str, code: int = 2) -> None:
    """One sentence on stderr and a non-zero exit. ``SystemExit`` passes through Hydra's callback
    dispatcher, which turns any ``Exception`` of a callback into a warning and goes on."""
    from recipe_audit.store.uris import mask_in_text

    print(f"recipe_audit: error: {mask_in_text(message)}", file=sys.stderr)
    sys.exit(code)


def collector_paused(hook: _F) -> _F:
    """``hook`` with Python's cyclic garbage collector paused while it runs, and as it was after it
    (also when the hook raises or exits the process). For the start of a sweep, which imports
    MLflow and SQLAlchemy and opens the store: what it builds lives as long as the sweep, so every
    automatic collection meanwhile (five full ones under MLflow's imports) walks objects that are
    not garbage; the start freezes them (``gc.freeze``) at its end. (Not for the end of a sweep:
    each card's figures are reference cycles that only a collection frees, megabytes each, and a
    sweep of many recipes draws many.)"""

    @functools.wraps(hook)
    def paused(*args, **kwargs):
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return hook(*args, **kwargs)
        finally:
            if was_enabled:
                gc.enable()

    return paused  # type: ignore[return-value]


def one_line(exc: BaseException) -> str:
    """``Type: first line`` of an error, in plain text, at most 500 characters (the error tag of a rerun that raised).

    >>> one_line(ValueError("bad seed\\nmore"))
    'ValueError: bad seed'
    """
    from recipe_audit.errors import plain

    lines = [ln for ln in plain(str(exc)).strip().splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:500]


_SAID_AT_EXIT: list[Callable[[], bool]] = []  # whether the sweep's own line follows at exit


def quiet_interrupts(said_at_exit: Callable[[], bool]) -> None:
    """Ctrl-C ends this process with one line, not the traceback of the ``KeyboardInterrupt``
    that climbs through Hydra and the task: the interpreter's hook for an uncaught exception
    prints nothing for it when ``said_at_exit()`` (a sweep that stopped before its end says so at
    exit, :func:`recipe_audit.app.sweep_end.abandon_sweep`), else ``recipe_audit: interrupted
    (Ctrl-C).``; any other exception is printed as before. The exit status stays the
    interpreter's for an interrupt (130 in a shell). Installed once a process; a later sweep
    gives its own ``said_at_exit``."""
    _SAID_AT_EXIT[:] = [said_at_exit]
    if getattr(sys.excepthook, "recipe_audit_quiet", False):
        return
    previous = sys.excepthook

    def hook(kind, value, tb) -> None:
        if not issubclass(kind, KeyboardInterrupt):
            previous(kind, value, tb)
        elif not (_SAID_AT_EXIT and _SAID_AT_EXIT[0]()):
            print("recipe_audit: interrupted (Ctrl-C).", file=sys.stderr)

    hook.recipe_audit_quiet = True
    sys.excepthook = hook
