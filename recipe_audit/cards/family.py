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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from recipe_audit.cards.document import FamilyReading
from recipe_audit.cards.model import CardError, group_json
from recipe_audit.stats import checks, exact, floors
from recipe_audit.stats.family import BONFERRONI, HOLM, FamilyMember, FamilySeat, family_seats_at

if TYPE_CHECKING:
    from recipe_audit.cards.document import RecipeCard
    from recipe_audit.cards.model import Cell
    from recipe_audit.stats.anytime import AnytimeBound


class FamilyError(CardError):
    """A family that cannot be read (one sentence)."""


def _identity(cell: Cell) -> str:
    """A recipe identity on the card: its recipe id, with the group values when there are any."""
    group = ",".join(f"{k}={v}" for k, v in sorted(group_json(cell).items()))
    rid = cell.recipe_id or ""
    return f"{rid}|{group}" if group else (rid or cell.label or "")


def family_why(size: int, delta: float) -> str:
    """The one sentence that says why the family-wise verdict leads."""
    return (f"This card covers {size} recipe identities: shipping whichever looks best is a choice among "
            f"them, so each is bounded at δ/M = {delta / size:.3g} (Holm's step-down) and the family-wise "
            f"verdict holds whichever one is shipped; the pointwise verdict holds only for a recipe fixed "
            f"before the sweep.")


@dataclass(frozen=True)
class FamilyPlace:
    """What the ``family`` object of every entry of one family (audit set, τ) shares: its size M,
    δ/M, the family-wise floor, the members' labels and recipe ids, how many have no reading."""

    size: int
    delta: float
    sample_floor: int
    members: tuple[str, ...]
    recipe_ids: tuple[str | None, ...]
    untested: int
    why: str


def family_places(cells: Sequence[Cell], taus: Sequence[float], counts: Sequence[Sequence[tuple[int, int]] | None],
                  eps: float, delta: float, other_identities: Sequence[str] = (),
                  family_size: int | None = None) -> list[list[tuple[FamilyPlace, FamilySeat | None] | None]]:
    """The family of each entry (cell × τ, in card order) whose (audit set, τ) covers more than one
    recipe identity, with the entry's seat in the family's test (None for a refused cell); None for
    an entry without a family. ``counts``: per cell, its (failures, reruns) at each τ for the test
    (a curtailed cell's at the planned N, the unlaunched counted as failing), None for a refused
    cell. ``other_identities``: recipe identities looked at that have no cell on the card (they
    count in M); ``family_size``: an M the user states (at least the identities counted)."""
    out: list[list[Any]] = [[None] * len(taus) for _ in cells]
    groups: OrderedDict[tuple, list[tuple[int, int]]] = OrderedDict()
    for ci, c in enumerate(cells):
        for ti, tau in enumerate(taus):
            groups.setdefault((c.audit_set or c.metric, float(tau)), []).append((ci, ti))
    for (audit, tau), group in groups.items():
        members = list(dict.fromkeys(_identity(cells[ci]) for ci, _ in group))
        ids_here = {cells[ci].recipe_id for ci, _ in group}
        extra = [x for x in dict.fromkeys(other_identities) if x not in ids_here]
        m = len(members) + len(extra)
        if family_size is not None:
            if family_size < m:
                raise FamilyError(f"The family size M = {family_size} is smaller than the {m} recipe identities "
                                  f"the card covers on '{audit}' at τ = {tau:g}.")
            m = family_size
        if m <= 1:
            continue
        tested = [(ci, ti) for ci, ti in group if counts[ci] is not None]
        seats = family_seats_at([counts[ci][ti] for ci, ti in tested], eps, delta, m, HOLM) if tested else ()
        fd = checks.scaled(delta, m)  # δ/M as the exact number it stands for (its floor's ties are ties)
        place = FamilyPlace(size=m, delta=fd, sample_floor=floors.floor_of(eps, fd),
                            members=tuple([cells[ci].label for ci, _ in group] + [f"recipe {x[:8]}" for x in extra]),
                            recipe_ids=tuple([cells[ci].recipe_id for ci, _ in group] + list(extra)),
                            untested=m - len(tested), why=family_why(m, delta))
        seat_of = dict(zip(tested, seats, strict=True))
        for ci, ti in group:
            out[ci][ti] = (place, seat_of.get((ci, ti)))
    return out


def family_reading(place: FamilyPlace, pointwise_verdict: str, mem: FamilyMember | None = None,
                   ab: AnytimeBound | None = None) -> FamilyReading:
    """The ``family`` object of an entry: its family's ``place``, the verdict the entry states
    without the family, and its reading as a member (``mem``; None: a refused cell stays refused)
    or, read as open-ended, the confidence sequence at δ/M (``ab``)."""
    head = {"size": place.size, "method": HOLM, "delta": place.delta, "members": place.members,
            "recipe_ids": place.recipe_ids, "untested": place.untested, "sample_floor": place.sample_floor,
            "pointwise_verdict": pointwise_verdict, "why": place.why}
    if mem is None:
        return FamilyReading.of(**head, upper_bound=None, lower_bound=None, level=None, p_value=None, rank=None,
                                verdict=pointwise_verdict, more_clean_reruns_needed=None)
    if ab is not None:  # an open-ended sweep: the sequence at δ/M (Bonferroni)
        return FamilyReading.of(**{**head, "method": BONFERRONI, "sample_floor": ab.sample_floor},
                                upper_bound=ab.upper, lower_bound=ab.lower, level=place.delta, p_value=None,
                                rank=None, verdict=ab.verdict, more_clean_reruns_needed=None)
    at = {"upper_bound_level": mem.upper_level} if mem.upper_level != mem.family_delta else {}
    return FamilyReading.of(**head, upper_bound=mem.upper, lower_bound=mem.lower, level=mem.level,
                            p_value=mem.p_value, rank=mem.rank, verdict=mem.verdict,
                            more_clean_reruns_needed=mem.more_clean_reruns_needed, **at)


#: The values of an entry that the reading asked for (family-wise, anytime) takes over; the
#: pointwise ones move under ``pointwise``.
LEAD_KEYS = ("upper_bound", "lower_bound", "sample_floor", "verdict", "more_clean_reruns_needed", "reason")


def own_reading(e: Any) -> Any:
    """The entry's own (pointwise) values: its ``pointwise`` object where a family-wise reading the
    user asked for leads it, else the entry itself (a plain card, or an anytime one, leads with its
    own reading)."""
    return e["pointwise"] if e.get("family") and e.get("pointwise") else e


def family_lead(fam: FamilyReading, own: dict[str, Any], k: int, n: int, upper_at_fd: float | None,
                eps: float) -> dict[str, Any]:
    """The values of an entry that the family-wise reading ``fam`` takes over when the user stated
    the family (``--family-size``, ``family_size=``), as :data:`LEAD_KEYS`: the bounds, the floor,
    the verdict and the reason are the family's. ``own``: the entry's own reading (the pointwise
    object it keeps, named so); ``k`` of ``n`` reruns failed; ``upper_at_fd``: the upper bound at
    δ/M where Holm's step-down certified the recipe at its own level
    (:attr:`~recipe_audit.stats.cell.CellReadings.family_upper`)."""
    v = fam.verdict
    u, lo = fam.upper_bound, fam.lower_bound
    m, fd = fam.size, fam.delta
    head = f"Chosen from a family of M = {m} recipe identities, each bounded at δ/M = {fd:.3g}: "
    at = fam.upper_bound_level
    if v == exact.SUPPORTED and at is not None:  # certified by Holm's step-down at a level above δ/M
        u_fd = exact.shown_beside(upper_at_fd, eps, above=True)
        head = f"Chosen from a family of M = {m} recipe identities, tested by Holm's step-down: "
        why = (f"{k} of {n} reruns failed; at the level that certified it, δ/(M − r + 1) = {at:.3g} "
               f"(rank r = {fam.rank} of {m}), U = {exact.shown_beside(u, eps, above=False)} ≤ ε = {eps:g} "
               f"(at δ/M = {fd:.3g} it is {u_fd}), so the recipe is release-supported whichever of the family "
               "was chosen.")
    elif v == exact.SUPPORTED:
        why = (f"{k} of {n} reruns failed, U = {exact.shown_beside(u, eps, above=False)} ≤ ε = {eps:g}, "
               "so the recipe is release-supported whichever of the family was chosen.")
    elif v == exact.STRONG_UNSUPPORTED:
        why = f"{k} of {n} reruns failed; even L = {exact.shown_beside(lo, eps, above=True)} exceeds ε = {eps:g}."
    elif v == exact.INSUFFICIENT:
        why = (f"{n} reruns are fewer than the family-wise floor {fam.sample_floor}: a recipe chosen from "
               f"{m} certifies nothing before it.")
    else:
        why = f"{k} of {n} reruns failed, U = {exact.shown_beside(u, eps, above=True)} > ε = {eps:g}."
    return {"upper_bound": u, "lower_bound": lo, "sample_floor": fam.sample_floor, "verdict": v,
            "more_clean_reruns_needed": fam.more_clean_reruns_needed,
            "reason": head + why + f" The pointwise verdict, for a recipe fixed before the sweep: "
                                   f"{own['verdict']}."}


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
