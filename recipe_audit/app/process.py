"""This process's place in a launch and how it stops: its rank under ``accelerate launch`` /
``torchrun``, and one sentence on stderr with a non-zero exit."""

from __future__ import annotations

import os
import sys


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


def one_line(exc: BaseException) -> str:
    """``Type: first line`` of an error, in plain text, at most 500 characters (the error tag of a rerun that raised).

    >>> one_line(ValueError("bad seed\\nmore"))
    'ValueError: bad seed'
    """
    from recipe_audit.errors import plain

    lines = [ln for ln in plain(str(exc)).strip().splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:500]
