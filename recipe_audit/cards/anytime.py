"""Anytime cards: the cells of an open-ended sweep, read with the confidence sequence.

A sweep that added seeds until the card looked good (``hydra/sweeper=curtail
hydra.sweeper.stop_on=anytime``), or any cell asked with ``recipe-audit card --anytime``, is read
with the confidence sequence of :mod:`recipe_audit.stats.anytime`: bounds ``U_n`` and ``L_n``
valid at every number of reruns at once, so reading the card after every batch does not break its
promise. Such an entry is marked ``"reading": "anytime"``; its ``upper_bound``, ``lower_bound``,
``sample_floor`` (the anytime floor) and ``verdict`` are the sequence's, and an ``anytime`` object
carries the looks the sweep took, the stopping rule, the method, and the fixed-N reading of the
same counts for comparison (valid only for an N fixed before the sweep), which is also the
entry's ``pointwise`` object (with its reason). A fixed-N card has no ``reading`` field (or
``"fixed-n"``).

A card never mixes the two readings: a cell of an open-ended sweep beside cells read at a fixed N,
or a curtailed sweep (which planned its N) read as open-ended, refuse with one sentence.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from recipe_audit import stats
from recipe_audit.cards.document import AnytimeReading
from recipe_audit.cards.model import CardError
from recipe_audit.stats.anytime import ANYTIME_METHOD, ANYTIME_RULE
from recipe_audit.stats.exact import shown_beside

if TYPE_CHECKING:
    from recipe_audit.cards.document import RecipeCard
    from recipe_audit.cards.model import Cell

ANYTIME = "anytime"


def _reason(ab, extra: str) -> str:
    v = ab.verdict
    if v == stats.SUPPORTED:
        core = (f"{ab.k} of {ab.n} reruns failed; the confidence sequence (valid however often the card was "
                f"read) bounds the next rerun's failure probability by U_n = "
                f"{shown_beside(ab.upper, ab.eps, False, digits=3, fixed=True)} ≤ ε = {ab.eps:g}.")
    elif v == stats.STRONG_UNSUPPORTED:
        core = (f"{ab.k} of {ab.n} reruns failed; even the confidence sequence's lower bound L_n = {ab.lower:.3f} "
                f"exceeds ε = {ab.eps:g}: the recipe fails too often.")
    elif v == stats.INSUFFICIENT:
        core = (f"{ab.n} reruns are fewer than the anytime floor {ab.sample_floor} for ε = {ab.eps:g}, "
                f"δ = {ab.delta:g}: an open-ended sweep certifies nothing before it.")
    else:
        core = (f"{ab.k} of {ab.n} reruns failed; the confidence sequence's U_n = "
                f"{shown_beside(ab.upper, ab.eps, True, digits=3, fixed=True)} exceeds "
                f"ε = {ab.eps:g}.")
    return core + extra


def look_groups(cell: Cell) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """The looks an open-ended sweep took at its cell, for the confidence sequence's reading
    (:func:`recipe_audit.stats.cell.cell_readings_at`): at each look, the seeds launched so far
    (launch order) that are among the cell's reruns, each as the positions of its reruns in the
    cell (a seed named twice is one group). Empty when the sweep recorded no looks."""
    info = cell.extra.get(ANYTIME) or {}
    seeds, ns = info.get("launched_seeds") or [], info.get("look_ns") or []
    if not seeds or not ns:
        return ()
    where: dict[str, list[int]] = {}
    for i, s in enumerate(cell.seeds):
        where.setdefault(str(s), []).append(i)
    return tuple(tuple(tuple(where[str(x)]) for x in seeds[:n] if str(x) in where) for n in ns)


def read_as_anytime(cells: Sequence[Cell], opts) -> bool:
    """Whether the card reads its cells with the confidence sequence: every cell of an open-ended
    sweep, or every cell with ``opts.anytime``. A card that would mix the two readings, or read a
    curtailed sweep (which planned its N) as open-ended, refuses with one sentence."""
    marked = [bool(c.extra.get(ANYTIME)) for c in cells]
    if not opts.anytime and not any(marked):
        return False
    for c in cells:
        if c.extra.get("curtailment"):
            raise CardError(f"The reruns of {c.label} come from a curtailing sweep that planned N = "
                            f"{c.extra['curtailment']['n_planned']}: a card cannot mix that fixed-N reading with "
                            "an anytime one (drop --anytime, or card the sweeps apart with --sweep-id).")
    if not opts.anytime and not all(marked):
        plain = next(c for c, m in zip(cells, marked, strict=True) if not m)
        raise CardError(f"This card would mix an open-ended (anytime) sweep with reruns read at a fixed N "
                        f"({plain.label}); pass --anytime to read every cell as open-ended, or card the sweeps "
                        "apart with --sweep-id.")
    return True


def anytime_reading(cell: Cell, ab, looks, fixed_n: dict[str, Any]) -> tuple[AnytimeReading, str]:
    """The ``anytime`` object of an entry of an open-ended cell (the sequence's bounds ``ab``, its
    ``looks`` from :func:`~recipe_audit.stats.cell.cell_readings_at`, the sweep's record, and the
    fixed-N reading ``fixed_n`` for comparison) and the entry's reason."""
    info = cell.extra.get(ANYTIME) or {}
    shown = [{"n": b.n, "k": b.k, "upper": b.upper, "lower": b.lower, "verdict": b.verdict} for b in looks or (ab,)]
    obj = AnytimeReading.of(
        method=ANYTIME_METHOD, rule=ANYTIME_RULE, upper_bound=ab.upper, lower_bound=ab.lower,
        sample_floor=ab.sample_floor, verdict=ab.verdict, n_looks=len(shown), looks=shown,
        batch_size=info.get("batch_size"), max_reruns=info.get("max_reruns"), stop_reason=info.get("stop_reason"),
        sweep_run_id=info.get("sweep_run_id"), sweep_taus=info.get("sweep_taus"), fixed_n=fixed_n)
    swept = (f" The sweep looked {len(shown)} time(s), in batches of {info.get('batch_size')}, up to "
             f"{info.get('max_reruns')} reruns" + (f", and stopped: {info['stop_reason']}." if
                                                    info.get("stop_reason") else ".")) if info else ""
    return obj, _reason(ab, swept)


def markdown_lines(doc: RecipeCard) -> list[str]:
    """The notice an anytime card opens with ([] for a fixed-N card)."""
    if not any(e.reading == ANYTIME for e in doc.cells):
        return []
    e0 = next(e for e in doc.cells if e.reading == ANYTIME)
    floor = e0.anytime.sample_floor if e0.anytime and e0.anytime.has("sample_floor") else e0.sample_floor
    return ["**Anytime card (open-ended sweep).** The reruns were added until the card looked good, so "
            "the bounds here are a confidence sequence: U_n and L_n hold at every number of reruns at once, "
            "however often the card was read. They are wider than a fixed-N card's, and the floor is the "
            f"anytime floor ({floor} reruns at these ε and δ). Rule: {ANYTIME_RULE}.", ""]
