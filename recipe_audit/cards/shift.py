"""Shift: a card holds only for its audit set, so one card per audit set, and the audits side by side.

A card is valid only for the audit set it was computed on. Reruns are scored at training time on
every configured audit set: the calibration audit ``D_P`` (``calibration``), the task's domain
shifts (``shift_*``: same task, another distribution) and, with ``audit.extra_tasks``, other tasks'
audit sets (``<task>/<audit set>``: a task shift). :func:`compute_shift_card` computes the card of
each requested audit set from the same reruns and adds a ``shift`` section that puts them side by
side per recipe and τ. A recipe that was not scored on an audit set gets ``refused-shift`` there,
never a verdict carried over from another audit set.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from recipe_audit import keys
from recipe_audit.cards.document import CardEntry
from recipe_audit.cards.tables import md_table
from recipe_audit.stats.exact import SUPPORTED, shown_beside

CALIBRATION = "calibration"
DOMAIN = "domain"
TASK = "task"


def shift_kind(audit_set: str, calibration: str = keys.DEFAULT_AUDIT) -> str:
    """``calibration`` for the calibration audit, ``task`` for another task's audit set
    (``<task>/<set>``), ``domain`` for the rest (the task's own shifted audits)."""
    if audit_set == calibration:
        return CALIBRATION
    return TASK if keys.TASK_SHIFT_SEP in audit_set else DOMAIN


def shift_section(entries: Sequence[CardEntry], audits: Sequence[str]) -> dict[str, Any]:
    """Per recipe cell and τ, each audit set's failures/N, U and verdict, in ``audits`` order."""
    rows: dict[tuple, dict[str, Any]] = {}
    for e in entries:
        key = (e.recipe_id, tuple(sorted(e.group.items())), e.tau)
        row = rows.setdefault(key, {"recipe_id": e.recipe_id, "label": e.label, "group": dict(e.group),
                                    "tau": e.tau, "audits": []})
        row["audits"].append({
            "audit_set": e.audit_set, "shift": shift_kind(e.audit_set or "", audits[0]),
            "n_failures": e.n_failures, "n_reruns": e.n_reruns, "upper_bound": e.upper_bound,
            "verdict": e.verdict,
        })
    order = {a: i for i, a in enumerate(audits)}
    for row in rows.values():
        row["audits"].sort(key=lambda a: order.get(a["audit_set"], len(order)))
    return {"calibration": audits[0], "audits": list(audits), "rows": list(rows.values())}


def _cell_text(a: dict[str, Any], bold: bool, eps: float | None = None) -> str:
    if a["n_failures"] is None:
        return "refused-shift (not scored)"
    if a["upper_bound"] is None:
        u = "—"
    elif eps is None:
        u = f"{a['upper_bound']:.3f}"
    else:  # on the side of ε its verdict says (more decimals where three would read 0.100 beside unsupported)
        u = shown_beside(a["upper_bound"], eps, a["verdict"] != SUPPORTED, digits=3, fixed=True)
    v = f"**{a['verdict']}**" if bold else a["verdict"]
    return f"{a['n_failures']}/{a['n_reruns']} · U {u} · {v}"


def shift_table(shift: dict[str, Any], markdown: bool = True,
                eps: float | None = None) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the side-by-side table: one row per recipe cell and τ, one column per
    audit set (failures/N, upper bound U, verdict); ``eps``: the card's, so that U reads on the side
    of ε its verdict says."""
    shown = {CALIBRATION: "calibration audit", DOMAIN: "domain shift", TASK: "task shift"}
    header = ["recipe", "τ"] + [f"{a} ({shown[shift_kind(a, shift['calibration'])]})" for a in shift["audits"]]
    rows = []
    for r in shift["rows"]:
        by = {a["audit_set"]: a for a in r["audits"]}
        rows.append([r["label"], f"{r['tau']:g}"]
                    + [_cell_text(by[a], markdown, eps) if a in by else "—" for a in shift["audits"]])
    return header, rows


def shift_markdown(shift: dict[str, Any], eps: float | None = None) -> list[str]:
    """The Markdown lines of the card's shift section."""

    header, rows = shift_table(shift, eps=eps)
    return ["## Shift: calibration audit vs target audits", "",
            f"Each cell: failures/N · one-sided upper bound U · verdict, on that audit set alone. "
            f"`{shift['calibration']}` is the calibration audit; a *domain shift* is the same task on "
            f"another distribution, a *task shift* another task's audit set. A card is valid only for "
            f"its own audit set: where a recipe was not scored the verdict is `refused-shift`.", "",
            md_table(header, rows), ""]
