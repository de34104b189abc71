"""Family-wise readings on a card that covers several recipe identities.

When a card covers more than one recipe identity for the same audit set and τ (a grid sweep,
``recipe-audit card`` over an experiment, ``--group-by``), shipping the recipe whose card looks
best is a choice among them, and the pointwise verdict of the chosen one no longer keeps its
promise. Every entry of such a card gets a ``family`` object: the family (every identity looked
at, finished or not: the cells of the card on that audit set and τ, plus the identities of the
experiment that have no cell there), its size M, the bounds at δ/M, the family-wise floor and the
family-wise verdict (Holm's step-down, :mod:`recipe_audit.stats.family`) beside the pointwise one.

For a curtailed cell the family-wise reading is taken like its pointwise one, at the planned N
with the unlaunched reruns counted as failing for the upper bound. For a cell read as an
open-ended sweep (``"reading": "anytime"``) it is the confidence sequence at δ/M (Bonferroni).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from recipe_audit.cards.model import CardError
from recipe_audit.stats import checks, exact, floors
from recipe_audit.stats.anytime import anytime_bound_at
from recipe_audit.stats.family import BONFERRONI, HOLM, family_bounds_at

if TYPE_CHECKING:
    from recipe_audit.cards.document import RecipeCard


class FamilyError(CardError):
    """A family that cannot be read (one sentence)."""


def _identity(e: dict[str, Any]) -> str:
    """A recipe identity on the card: its recipe id, with the group values when there are any."""
    group = ",".join(f"{k}={v}" for k, v in sorted((e.get("group") or {}).items()))
    rid = e.get("recipe_id") or ""
    return f"{rid}|{group}" if group else (rid or e.get("label") or "")


def _counts(e: dict[str, Any]) -> tuple[int, int, int] | None:
    """(k for the upper side, k for the lower side, N) of an entry; None for a refused cell."""
    if e.get("n_failures") is None:
        return None
    cur = e.get("curtailment") or {}
    if cur.get("n_planned"):  # the verdict at the planned N, the unlaunched counted as failing for U
        return int(e["n_failures"]) + int(cur.get("remaining", 0)), int(e["n_failures"]), int(cur["n_planned"])
    return int(e["n_failures"]), int(e["n_failures"]), int(e["n_reruns"])


def family_why(size: int, delta: float) -> str:
    """The one sentence that says why the family-wise verdict leads."""
    return (f"This card covers {size} recipe identities: shipping whichever looks best is a choice among "
            f"them, so each is bounded at δ/M = {delta / size:.3g} (Holm's step-down) and the family-wise "
            f"verdict holds whichever one is shipped; the pointwise verdict holds only for a recipe fixed "
            f"before the sweep.")


def apply_family(entries: list[dict[str, Any]], eps: float, delta: float,
                 other_identities: Sequence[str] = (), family_size: int | None = None) -> int:
    """Add the ``family`` object to every entry whose (audit set, τ) covers more than one recipe
    identity (in place); returns the largest M. ``other_identities``: recipe identities looked at
    that have no cell on the card (they count in M); ``family_size``: an M the user states (at
    least the identities counted)."""
    groups: OrderedDict[tuple, list[dict[str, Any]]] = OrderedDict()
    for e in entries:
        groups.setdefault((e["audit_set"] or e["metric"], float(e["tau"])), []).append(e)
    largest = 1
    for (audit, tau), group in groups.items():
        members = list(dict.fromkeys(_identity(e) for e in group))
        ids_here = {e.get("recipe_id") for e in group}
        extra = [x for x in dict.fromkeys(other_identities) if x not in ids_here]
        m = len(members) + len(extra)
        if family_size is not None:
            if family_size < m:
                raise FamilyError(f"The family size M = {family_size} is smaller than the {m} recipe identities "
                                  f"the card covers on '{audit}' at τ = {tau:g}.")
            m = family_size
        if m <= 1:
            continue
        largest = max(largest, m)
        counted = [(e, _counts(e)) for e in group]
        tested = [(e, c) for e, c in counted if c is not None]
        card = family_bounds_at([(c[0], c[2]) for _, c in tested], eps, delta, m, HOLM) if tested else None
        labels = [e["label"] for e in group] + [f"recipe {x[:8]}" for x in extra]
        by_entry = {id(e): mem for (e, _), mem in zip(tested, card.members if card else (), strict=True)}
        fd = checks.scaled(delta, m)  # δ/M as the exact number it stands for (its floor's ties are ties)
        floor = floors.floor_of(eps, fd)
        for e, c in counted:
            mem = by_entry.get(id(e))
            obj: dict[str, Any] = {
                "size": m, "method": HOLM, "delta": fd, "members": labels,
                "recipe_ids": [x.get("recipe_id") for x in group] + list(extra),
                "untested": m - len(tested), "sample_floor": floor,
                "pointwise_verdict": e["verdict"], "why": family_why(m, delta),
            }
            if mem is None:  # a refused cell stays refused
                obj.update({"upper_bound": None, "lower_bound": None, "level": None, "p_value": None,
                            "rank": None, "verdict": e["verdict"], "more_clean_reruns_needed": None})
            else:
                verdict = mem.verdict
                lower = mem.lower
                if c[1] != c[0]:  # curtailed: L from the failures seen, at the planned N
                    lower = exact.lower_at(c[1], c[2], fd)
                    if verdict == exact.STRONG_UNSUPPORTED and not lower > eps:
                        verdict = exact.UNSUPPORTED if c[2] >= floor else exact.INSUFFICIENT
                    elif lower > eps:
                        verdict = exact.STRONG_UNSUPPORTED
                obj.update({"upper_bound": mem.upper, "lower_bound": lower, "level": mem.level,
                            "p_value": mem.p_value, "rank": mem.rank, "verdict": verdict,
                            "more_clean_reruns_needed": mem.more_clean_reruns_needed})
                if mem.upper_level != mem.family_delta:  # certified by Holm at its own level only
                    obj["upper_bound_level"] = mem.upper_level
            if mem is not None and e.get("reading") == "anytime":  # an open-ended sweep: the sequence at δ/M
                obj.pop("upper_bound_level", None)
                ab = anytime_bound_at(c[1], c[2], eps, fd)
                obj.update({"method": BONFERRONI, "level": fd, "p_value": None, "rank": None,
                            "upper_bound": ab.upper, "lower_bound": ab.lower, "sample_floor": ab.sample_floor,
                            "verdict": ab.verdict, "more_clean_reruns_needed": None})
            e["family"] = obj
            if family_size is not None and mem is not None:  # asked for: the family-wise reading leads
                lead_family(e, obj, eps)
    return largest


#: The values of an entry that the reading asked for (family-wise, anytime) takes over; the
#: pointwise ones move under ``pointwise``.
LEAD_KEYS = ("upper_bound", "lower_bound", "sample_floor", "verdict", "more_clean_reruns_needed", "reason")


def own_reading(e: Any) -> Any:
    """The entry's own (pointwise) values: its ``pointwise`` object where a family-wise reading the
    user asked for leads it, else the entry itself (a plain card, or an anytime one, leads with its
    own reading)."""
    return e["pointwise"] if e.get("family") and e.get("pointwise") else e


def pointwise_of(e: dict[str, Any]) -> dict[str, Any]:
    """The entry's own (pointwise, fixed-N) reading, before another one leads."""
    return e.get("pointwise") or {k: e.get(k) for k in LEAD_KEYS}


def lead_family(e: dict[str, Any], fam: dict[str, Any], eps: float) -> None:
    """Put the family-wise reading at the top of entry ``e`` (a family the user stated, with
    ``--family-size`` or ``family_size=``): ``verdict``, the bounds, the floor and the reason are the
    family's; the pointwise ones are kept under ``pointwise``, named so."""
    e["pointwise"] = pointwise_of(e)
    v = fam["verdict"]
    u, lo = fam["upper_bound"], fam["lower_bound"]
    m, fd = fam["size"], fam["delta"]
    k, n = e.get("n_failures"), e.get("n_reruns")
    head = f"Chosen from a family of M = {m} recipe identities, each bounded at δ/M = {fd:.3g}: "
    at = fam.get("upper_bound_level")
    if v == exact.SUPPORTED and at is not None:  # certified by Holm's step-down at a level above δ/M
        k_up, _, n_up = _counts(e)
        u_fd = exact.shown_beside(exact.upper_at(k_up, n_up, fd), eps, above=True)
        head = f"Chosen from a family of M = {m} recipe identities, tested by Holm's step-down: "
        why = (f"{k} of {n} reruns failed; at the level that certified it, δ/(M − r + 1) = {at:.3g} "
               f"(rank r = {fam['rank']} of {m}), U = {exact.shown_beside(u, eps, above=False)} ≤ ε = {eps:g} "
               f"(at δ/M = {fd:.3g} it is {u_fd}), so the recipe is release-supported whichever of the family "
               "was chosen.")
    elif v == exact.SUPPORTED:
        why = (f"{k} of {n} reruns failed, U = {exact.shown_beside(u, eps, above=False)} ≤ ε = {eps:g}, "
               "so the recipe is release-supported whichever of the family was chosen.")
    elif v == exact.STRONG_UNSUPPORTED:
        why = f"{k} of {n} reruns failed; even L = {exact.shown_beside(lo, eps, above=True)} exceeds ε = {eps:g}."
    elif v == exact.INSUFFICIENT:
        why = (f"{n} reruns are fewer than the family-wise floor {fam['sample_floor']}: a recipe chosen from "
               f"{m} certifies nothing before it.")
    else:
        why = f"{k} of {n} reruns failed, U = {exact.shown_beside(u, eps, above=True)} > ε = {eps:g}."
    e.update({"upper_bound": u, "lower_bound": lo, "sample_floor": fam["sample_floor"], "verdict": v,
              "more_clean_reruns_needed": fam.get("more_clean_reruns_needed"),
              "reason": head + why + f" The pointwise verdict, for a recipe fixed before the sweep: "
                                     f"{e['pointwise']['verdict']}.",
              "rules": {**e["rules"], "card": v == exact.SUPPORTED}})


def lead_rows(doc: RecipeCard) -> list[list[str]]:
    """Rows (cell, audit, τ, failures/N, family-wise U, family-wise verdict, pointwise verdict)
    of the entries that carry a family."""
    rows = []
    for e in doc.cells:
        f = e.family
        if not f:
            continue
        k = "—" if e.n_failures is None else str(e.n_failures)
        u = "—" if f.upper_bound is None or not math.isfinite(f.upper_bound) else \
            exact.shown_beside(f.upper_bound, e.eps, above=f.verdict != exact.SUPPORTED, digits=3, fixed=True)
        if f.upper_bound_level is not None and u != "—":  # certified by Holm at its own level: stated there
            u += f" at Holm's level {f.upper_bound_level:.3g}"
        rows.append([e.label, e.audit_set or e.metric, f"{e.tau:g}", f"{k}/{e.n_reruns}", u,
                     f.verdict, f.pointwise_verdict])
    return rows


LEAD_HEADER = ["cell", "audit", "τ", "failures/N", "U at δ/M", "family-wise verdict", "pointwise verdict"]


def lead_lines(doc: RecipeCard, markdown: bool = False) -> list[str]:
    """The family-wise verdicts first, with the sentence that says why; [] for a card of one recipe."""
    fams = [e.family for e in doc.cells if e.family]
    if not fams:
        return []
    m = max(f.size for f in fams)
    delta = doc.options["delta"]
    floor = max(f.sample_floor for f in fams)
    head = (f"Family-wise verdicts (M = {m} recipe identities, each at δ/M = {delta / m:.3g}, "
            f"family-wise floor {floor} reruns):")
    from recipe_audit.cards.tables import text_table

    rows = lead_rows(doc)
    members = list(dict.fromkeys(m for f in fams for m in f.members))
    family = "The family: " + ", ".join(members) + (f" (and {m - len(members)} more identities without reruns "
                                                      "here)" if m > len(members) else "") + "."
    if markdown:
        table = ["| " + " | ".join(LEAD_HEADER) + " |", "|" + "---|" * len(LEAD_HEADER)]
        table += ["| " + " | ".join(f"**{c}**" if i == 5 else c.replace("|", "/") for i, c in enumerate(r)) + " |"
                  for r in rows]
        return ["## Family-wise verdicts", "", family_why(m, delta), "", head, "", *table, "",
                family.replace("|", "/"), ""]
    return [head, family_why(m, delta), text_table(rows, LEAD_HEADER), family]
