"""Tables in the two places a card is read: the terminal (aligned plain text) and Markdown."""

from __future__ import annotations

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
