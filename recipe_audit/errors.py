"""One sentence from a library's error: the project reports every failure as one line."""

from __future__ import annotations


def first_line(exc: BaseException, limit: int | None = None) -> str:
    """The first non-empty line of ``exc``'s message (its type's name when it has none), cut at
    ``limit`` characters.

    >>> first_line(ValueError("no such table: runs\\n[SQL: SELECT ...]"))
    'no such table: runs'
    >>> first_line(KeyError()), first_line(OSError("x" * 9), limit=4)
    ('KeyError', 'xxxx')
    """
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    return (lines[0] if lines else type(exc).__name__)[:limit]
