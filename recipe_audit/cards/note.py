"""The experiment's own description in MLflow (``mlflow.note.content``): a short block of the
latest cards' verdicts, found again by a marker so that text a person wrote is kept and the
block is replaced, never appended, when a card is logged again.

MLflow 3's UI shows an experiment's description at the top of every view of it, the GenAI
overview it opens on by default included, folded to its first line, and the experiments list
shows its first characters as plain text: so the block goes first, one plain line per card, the
verdict first, and its marker (an HTML comment, which the rendered description does not show)
goes last, saying how many lines above it are the block.

>>> rows = [{"recipe": "default", "metric": "accuracy/calibration", "tau": 0.7, "k": 6, "n": 59,
...          "upper_bound": 0.1717, "verdict": "unsupported", "time": "2026-12-02 08:10 UTC"}]
>>> block = note_block(rows, "#/experiments/1/runs?workflowType=machine_learning")
>>> print(with_block("My notes.", block))  # doctest: +NORMALIZE_WHITESPACE
unsupported · 6/59 failed τ 0.7 · U 0.172 · recipe default · accuracy/calibration · 2026-12-02 08:10 UTC
<BLANKLINE>
The latest recipe cards, by recipe_audit; the card runs are in [the runs table](#/experiments/1/runs?workflowType=machine_learning).
<!-- recipe_audit cards: the 3 lines above; rewritten whenever a card is logged, text outside them is kept -->
<BLANKLINE>
My notes.
>>> again = with_block(with_block("My notes.", block), block)
>>> again.count("<!-- recipe_audit cards:"), again.endswith("My notes.")
(1, True)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from recipe_audit.cards.render import shown_u

# the block's marker, its last line: how many lines above it are the block
NOTE_MARK = "<!-- recipe_audit cards: the {n} line{s} above; rewritten whenever a card is logged, text outside them is kept -->"
_MARK_RE = re.compile(r"^<!-- recipe_audit cards: the (\d+) lines? above;[^\n]*-->$", re.MULTILINE)
# blocks written before 2026-12-06 sat between two markers, the first at the top (the experiments
# list showed it as text): found and replaced where they are
NOTE_BEGIN = "<!-- recipe_audit cards: begin; rewritten whenever a card is logged, text outside the markers is kept -->"
NOTE_END = "<!-- recipe_audit cards: end -->"
MAX_ROWS = 8  # one line per card; the card runs hold the rest
MAX_NOTE = 5000  # MLflow's experiment tag values


def headline(entry: Mapping[str, Any]) -> tuple[str, str | None, float | None]:
    """The verdict a card leads with, how it reads, and its U: the anytime verdict for an
    open-ended sweep, the family-wise verdict for a recipe chosen among several, else the
    pointwise verdict (reading None)."""
    anytime = entry.get("anytime") or {}
    if anytime.get("verdict"):
        return anytime["verdict"], "anytime", anytime.get("upper_bound")
    family = entry.get("family") or {}
    if family.get("verdict") and int(family.get("size") or 1) > 1:
        return family["verdict"], "family-wise", family.get("upper_bound")
    return entry["verdict"], None, entry.get("upper_bound")


def note_rows(entries: Iterable[Mapping[str, Any]], when: str) -> list[dict[str, Any]]:
    """One row per card entry (a card's JSON ``cells``): what a line of the block says, at time
    ``when``."""
    rows = []
    for e in entries:
        verdict, reading, upper = headline(e)
        rows.append({"recipe": str(e.get("label") or e.get("recipe_id") or ""), "recipe_id": e.get("recipe_id"),
                     "group": sorted((e.get("group") or {}).items()),
                     "metric": str(e.get("audit_set") or e.get("metric") or ""), "tau": float(e["tau"]),
                     "k": e.get("n_failures"), "n": e.get("n_reruns"), "upper_bound": upper, "eps": e.get("eps"),
                     "verdict": verdict,
                     "reading": reading, "pointwise": e["verdict"] if reading else None, "time": when})
        never = never_ran(e)
        if never:
            rows[-1]["never_ran"] = never
    return rows


def never_ran(entry: Mapping[str, Any]) -> int:
    """How many of a card entry's planned reruns never started (its ``unfinished`` reruns that
    never logged a run: an interrupted sweep's seeds; counted as failures)."""
    return sum(1 for u in entry.get("unfinished") or () if u.get("reason") == "never-logged")


def _key(row: Mapping[str, Any]) -> tuple:
    return (row.get("recipe_id") or row.get("recipe"), str(row.get("group")), row.get("metric"), row.get("tau"))


def merge_rows(new: Sequence[Mapping[str, Any]], old: Iterable[Mapping[str, Any]],
               limit: int = MAX_ROWS) -> list[dict[str, Any]]:
    """The latest row per (recipe, metric, τ): the new rows first, then the old ones they do not
    replace, at most ``limit``.

    >>> a = {"recipe": "r", "metric": "m", "tau": 0.7, "verdict": "unsupported"}
    >>> b = {"recipe": "r", "metric": "m", "tau": 0.8, "verdict": "unsupported"}
    >>> [r["verdict"] for r in merge_rows([{**a, "verdict": "release-supported"}], [a, b])]
    ['release-supported', 'unsupported']
    """
    seen, out = set(), []
    for row in [*new, *old]:
        if _key(row) not in seen and len(out) < limit:
            seen.add(_key(row))
            out.append(dict(row))
    return out


def _plain(text: str) -> str:
    """``text`` as it reads both as plain text (the experiments list) and as Markdown (the
    experiment's header): backticks become quotes; ``*``, ``<`` and the ``(`` of ``](`` are
    escaped. Brackets alone (a label such as ``[b3f34a05]``) and an underscore inside a word (as
    in ``val_accuracy``) are no Markdown: left as they are."""
    text = text.replace("`", "'")
    return re.sub(r"([*<\\]|(?<=\])\()", r"\\\1", text)


def note_line(row: Mapping[str, Any]) -> str:
    """One card in a plain line, what matters first: the verdict, failures/N at τ, U; then the
    recipe, the audit set and when (the UI folds the description to its first line; the
    experiments list shows its first characters as text). Planned reruns that never ran are
    counted apart."""
    verdict = str(row["verdict"])
    if row.get("reading"):
        verdict += f" ({row['reading']}; pointwise {row.get('pointwise')})"
    recipe = str(row.get("recipe") or "")
    recipe = recipe if recipe.startswith("recipe") else f"recipe {recipe}"  # labels may say it
    k, n = row.get("k"), row.get("n")
    u, eps = row.get("upper_bound"), row.get("eps")
    if u is not None and eps is None:  # a row written before rows kept their ε
        u_text = f"{float(u):.3f}"
    else:  # as the card prints it: never on the wrong side of ε beside its verdict
        u_text = shown_u(None if u is None else float(u), float(eps or 0), row["verdict"])
    failed = f"{'—' if k is None else k}/{n} failed τ {float(row['tau']):g}"
    if row.get("never_ran"):
        failed += f" ({row['never_ran']} never ran: resume=true runs them)"
    parts = [verdict, failed, f"U {u_text}", _plain(recipe), _plain(str(row.get("metric") or "")),
             str(row.get("time") or "")]
    return " · ".join(p for p in parts if p)


def note_block(rows: Sequence[Mapping[str, Any]], runs_link: str | None) -> str:
    """The block: one line per card (each ending in a Markdown line break), where the card runs
    are, and its marker last."""
    lines = [note_line(r) + ("  " if i < len(rows) - 1 else "") for i, r in enumerate(rows)]
    where = f"[the runs table]({runs_link})" if runs_link else "the experiment's runs table"
    lines += ["", f"The latest recipe cards, by recipe_audit; the card runs are in {where}."] if rows else [
        f"The latest recipe cards, by recipe_audit, go here; the card runs are in {where}."]
    return "\n".join([*lines, NOTE_MARK.format(n=len(lines), s="s" if len(lines) != 1 else "")])


def _span(previous: str) -> tuple[int, int] | None:
    """Where the block is in ``previous``: its marker and the lines it counts above it, or an
    older block between its two markers; None when there is none (or a marker counts more lines
    than there are)."""
    m = _MARK_RE.search(previous)
    if m:
        start, n = m.start(), int(m.group(1))
        for _ in range(n):
            if start == 0:
                return None
            start = previous.rfind("\n", 0, start - 1) + 1
        return start, m.end()
    i = previous.find(NOTE_BEGIN)
    j = previous.find(NOTE_END, i + 1) if i >= 0 else -1
    if i >= 0 and j >= 0:
        return i, j + len(NOTE_END)
    return None


def with_block(previous: str | None, block: str) -> str:
    """``previous`` with its block replaced by ``block`` (where it was), or ``block`` put first
    when it has none; the rest of ``previous`` is kept as written. An older block's begin marker
    without its end marker after it (hand-edited) keeps everything: the block goes first again."""
    previous = previous or ""
    span = _span(previous)
    if span is not None:
        return previous[:span[0]] + block + previous[span[1]:]
    rest = previous.strip("\n")
    return block + ("\n\n" + rest if rest else "")


def fit(previous: str | None, rows: Sequence[Mapping[str, Any]], runs_link: str | None,
        limit: int = MAX_NOTE) -> str:
    """:func:`with_block` with as many rows as keep the description within ``limit``
    characters; the person's own text is never cut (with no room, the block has no rows)."""
    rows = list(rows)
    while True:
        text = with_block(previous, note_block(rows, runs_link))
        if len(text) <= limit or not rows:
            return text
        rows.pop()


def updated_note(previous: str | None, old_rows: Sequence[Mapping[str, Any]], entries: Iterable[Mapping[str, Any]],
                 when: str, runs_link: str | None) -> tuple[str, list[dict[str, Any]]] | None:
    """The experiment's description after a card: the verdicts of ``entries`` (a card's JSON
    ``cells``, at time ``when``) first in the block, the latest cards logged before them
    (``old_rows``, one per recipe, metric and τ) after, ``previous`` (the description now) kept
    around it; with the rows to record beside it. None when the person's own text alone fills
    the description (it is left as it is)."""
    import json

    rows = merge_rows(note_rows(entries, when), old_rows)
    while rows and len(json.dumps(rows, separators=(",", ":"))) > MAX_NOTE:  # long group names
        rows.pop()
    text = fit(previous, rows, runs_link)
    if len(text) > MAX_NOTE:
        return None
    return text, rows
