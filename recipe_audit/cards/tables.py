"""Tables in the two places a card is read: the terminal (aligned plain text) and Markdown."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any


def text_table(rows: Sequence[Sequence[Any]], header: Sequence[str]) -> str:
    """Columns padded to their widest cell, a dashed rule under the header.

    >>> print(text_table([["a", 1]], ["name", "n"]))
    name  n
    ----  -
    a     1
    """
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(r: Sequence[Any]) -> str:
        return "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True))

    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


def md_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table; a ``|`` inside a cell is escaped so it cannot split the cell.

    >>> print(md_table(["recipe", "verdict"], [["a|b", "ships"]]))
    | recipe | verdict |
    |---|---|
    | a\\|b | ships |
    """
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows]
    return "\n".join(out)


_PIPE = re.compile(r"(?<!\\)\|")
SPACE = "&nbsp;&nbsp;"  # MLflow's Markdown renderer draws table cells with no padding and trims spaces


def spaced_tables(markdown: str) -> str:
    """``markdown`` with two non-breaking spaces after each table cell but the last, so that the
    columns of a table do not run together in MLflow's renderer (which draws cells with no
    padding: ``0.7`` and ``1/5`` read ``0.71/5``). For text MLflow shows (a description), not
    for files: the Markdown of a card is left as written.

    >>> print(spaced_tables("| τ | k/N |\\n|---|---|\\n| 0.7 | 1/5 |\\nprose | kept"))
    | τ&nbsp;&nbsp; | k/N |
    |---|---|
    | 0.7&nbsp;&nbsp; | 1/5 |
    prose | kept
    """
    out = []
    for line in markdown.split("\n"):
        s = line.strip()
        if s.startswith("|") and s.endswith("|") and len(s) > 1 and set(s) - set("|-: "):
            cells = _PIPE.split(s)[1:-1]
            s = "|" + "|".join(c.rstrip() + SPACE + " " if i < len(cells) - 1 else c
                               for i, c in enumerate(cells)) + "|"
            out.append(s)
        else:
            out.append(line)
    return "\n".join(out)
