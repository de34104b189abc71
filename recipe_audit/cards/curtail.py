"""Cards of curtailed sweeps: the verdict at the planned N, not at the seeds launched.

A curtailing sweep (``recipe_audit/app/curtailing.py``) records on its sweep parent run, per recipe, the
planned N, the seeds it launched and why it stopped (``keys.TAG_CURTAILMENT``). For such a cell:

* seeds the sweep never launched are not unfinished reruns: they are dropped from the cell (a
  launched seed that never logged stays an unfinished failure, as always);
* the card states the verdict at the planned N (:func:`recipe_audit.stats.curtail_state`): with
  ``m`` reruns launched, ``k`` failures and ``r = N - m`` never launched, ``U = U(k + r, N)`` and
  ``L = L(k, N)`` are valid bounds whatever the ``r`` would have done, and the verdict rules
  applied to them give the verdict. At the sweep's own bars that verdict is settled (it is the
  full sweep's, or, with ``stop_on: decision``, the most favourable one still possible); at any
  other τ, ε or δ asked later it may not be, and the card says so;
* the entry carries a ``curtailment`` object: planned N, launched m, where and why it stopped.

An open-ended sweep (``stop_on: anytime``) writes the same kind of record without a planned N; its
cells drop the seeds never launched and are read with the confidence sequence (``cards/anytime.py``).

A cell whose reruns come from more than one sweep is carded as usual.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from recipe_audit import stats
from recipe_audit.cards.document import Curtailment

if TYPE_CHECKING:
    from recipe_audit.cards.model import Cell


def _norm(seed: Any) -> Any:
    if isinstance(seed, (int, np.integer)):
        return int(seed)
    try:
        f = float(seed)
    except (TypeError, ValueError):
        return seed
    return int(f) if f.is_integer() else seed


def curtail_reason(st: stats.CurtailState) -> str:
    """Where a curtailed sweep stands, in one sentence (for the card and the sweep's record)."""
    k, m, n, r, a = st.k, st.m, st.n_planned, st.remaining, st.supported_max_k
    possible = st.possible_verdicts
    head = f"{k} of {m} reruns failed, {r} of the planned {n} remain"
    if r == 0:
        return f"all {n} planned reruns ran ({k} failed): the verdict is the ordinary card's."
    if st.decision_determined and k + r <= a:
        return (f"{head}: even if all {r} fail, {k + r} failures at N = {n} are within the {a} that "
                f"release-supported allows, so the verdict at N is release-supported.")
    if st.verdict_determined:
        return f"{head}: whatever they do, the verdict at N = {n} is {possible[0]}."
    if st.decision_determined:
        allowed = f"at most {a}" if a >= 0 else f"none (N = {n} cannot certify at all)"
        return (f"{head}: release-supported at N = {n} allows {allowed} failures, so whatever they "
                f"do the recipe is not release-supported at N (still possible: {', '.join(possible)}).")
    return f"{head}: the verdict at N = {n} is not settled yet (still possible: {', '.join(possible)})."


def _group_of(record: dict[str, Any], cell: Cell) -> dict[str, Any] | None:
    groups = record.get("groups") or []
    hits = [g for g in groups if g.get("recipe_id") is not None and g.get("recipe_id") == cell.recipe_id]
    if not hits and len(groups) == 1 and (groups[0].get("recipe_id") is None or cell.recipe_id is None):
        hits = groups
    return hits[0] if len(hits) == 1 else None


def _curtailed_cell(cell: Cell, record: dict[str, Any], group: dict[str, Any], parent: str) -> Cell:
    from recipe_audit.reruns import NEVER_LOGGED, RerunSet

    launched = {_norm(s) for s in group.get("launched_seeds", [])}
    keep = [i for i, (s, rid, st) in enumerate(zip(cell.seeds, cell.run_ids, cell.statuses, strict=True))
            if not (rid is None and st == NEVER_LOGGED and _norm(s) not in launched)]
    seeds = tuple(cell.seeds[i] for i in keep)
    values = np.asarray(cell.values)[keep].copy()
    values.setflags(write=False)
    run_ids = tuple(cell.run_ids[i] for i in keep)
    statuses = tuple(cell.statuses[i] for i in keep)
    unfinished = tuple(u for u in cell.unfinished if not (u[1] == "never-logged" and _norm(u[0]) not in launched))
    planned = tuple(s for s in cell.planned_seeds if _norm(s) in launched)
    digest = RerunSet(group=cell.group, recipe_id=cell.recipe_id, metric_key=cell.metric, seeds=seeds,
                      values=values, run_ids=run_ids, statuses=statuses, unfinished=unfinished,
                      duplicates=cell.duplicates, disagreeing_duplicates=cell.disagreeing_duplicates,
                      sweep_run_ids=cell.sweep_run_ids, planned_seeds=planned).digest()
    info = {
        "sweep_run_id": parent, "n_planned": int(group["n_planned"]), "n_launched": int(group["n_launched"]),
        "stopped_early": bool(group.get("stopped_early")), "stop_on": record.get("stop_on", "decision"),
        "batch_size": record.get("batch_size"), "sweep_reason": group.get("reason", ""),
        "sweep_audit_set": record.get("audit_set"), "sweep_taus": record.get("taus"),
        "sweep_eps": record.get("eps"), "sweep_delta": record.get("delta"),
    }
    return replace(cell, seeds=seeds, values=values, run_ids=run_ids, statuses=statuses, unfinished=unfinished,
                   planned_seeds=planned, digest=digest, extra={**cell.extra, "curtailment": info})


def _anytime_cell(cell: Cell, record: dict[str, Any], group: dict[str, Any], parent: str) -> Cell:
    """A cell of an open-ended sweep: the seeds it never launched dropped (as for a curtailed
    sweep), and what the card needs to read it with the confidence sequence (``cards/anytime.py``):
    the looks the sweep took, its batch size, maximum and why it stopped."""
    trimmed = _curtailed_cell(cell, record, {**group, "n_planned": group.get("max_reruns") or group["n_launched"]},
                              parent)
    extra = {k: v for k, v in trimmed.extra.items() if k != "curtailment"}
    extra["anytime"] = {
        "sweep_run_id": parent, "batch_size": record.get("batch_size"), "max_reruns": group.get("max_reruns"),
        "n_launched": int(group["n_launched"]), "launched_seeds": [_norm(x) for x in group.get("launched_seeds", [])],
        "look_ns": [int(x["n"]) for x in group.get("looks", [])], "stop_reason": group.get("reason") or None,
        "sweep_taus": record.get("taus"), "sweep_eps": record.get("eps"), "sweep_delta": record.get("delta"),
    }
    return replace(trimmed, extra=extra)


def sweep_parents(cells: Sequence[Cell]) -> list[str]:
    """The sweep parent runs whose curtailment records :func:`apply_curtailment` needs: those of
    the cells whose reruns all come from one sweep."""
    return sorted({c.sweep_run_ids[0] for c in cells if len(c.sweep_run_ids) == 1})


def apply_curtailment(cells: Sequence[Cell], records: dict[str, dict[str, Any]]) -> list[Cell]:
    """Cells of curtailed sweeps become curtailed cells (module docstring); others are unchanged.
    ``records``: the curtailment record of each sweep parent run that has one
    (:func:`recipe_audit.store.curtailment.curtailment_records` of :func:`sweep_parents`)."""
    out = []
    for c in cells:
        rec = records.get(c.sweep_run_ids[0]) if len(c.sweep_run_ids) == 1 else None
        group = _group_of(rec, c) if rec else None
        if group is not None and rec.get("stop_on") == "anytime":  # an open-ended sweep: no planned N
            out.append(_anytime_cell(c, rec, group, c.sweep_run_ids[0]))
            continue
        if group is None or int(group.get("n_launched", 0)) > int(group.get("n_planned", 0)):
            out.append(c)
        else:
            out.append(_curtailed_cell(c, rec, group, c.sweep_run_ids[0]))
    return out


def curtailed_stop_on(cell: Cell) -> str | None:
    """The stopping rule a curtailed cell's verdict at the planned N is read with
    (:func:`recipe_audit.stats.cell.cell_readings_at`); None for a cell read as usual (not
    curtailed, or more reruns launched than planned, or none)."""
    info = cell.extra.get("curtailment")
    if not info or cell.n > info["n_planned"] or cell.n < 1:
        return None
    return info["stop_on"] if info["stop_on"] in stats.STOP_ON else "decision"


def curtailment_section(cell: Cell, st: stats.CurtailState) -> Curtailment:
    """The ``curtailment`` object of a curtailed cell's entry: the plan, where the sweep stopped and
    what its state ``st`` at the entry's τ leaves possible at the planned N."""
    info = cell.extra["curtailment"]
    return Curtailment.of(
        n_planned=st.n_planned, n_launched=st.m, remaining=st.remaining, stopped_early=st.remaining > 0,
        stop_on=st.stop_on, batch_size=info.get("batch_size"), sweep_run_id=info["sweep_run_id"],
        sweep_reason=info["sweep_reason"], sweep_audit_set=info["sweep_audit_set"],
        sweep_taus=info["sweep_taus"], sweep_eps=info["sweep_eps"], sweep_delta=info["sweep_delta"],
        k_range_at_n=list(st.k_range_at_n), possible_verdicts=list(st.possible_verdicts),
        verdict_determined=st.verdict_determined, decision_determined=st.decision_determined,
        upper_if_rest_pass=st.upper_if_rest_pass, explanation=curtail_reason(st))


def curtailed_reason(st: stats.CurtailState) -> str:
    """The reason of a curtailed entry whose sweep stopped early (``st.remaining > 0``): its verdict
    and bounds are those at the planned N (they replace the ordinary card's, which would be the
    card at the reruns launched)."""
    settled = ("the verdict at N is settled" if st.verdict_determined else
               "the release decision at N is settled" if st.decision_determined else
               "the verdict at N is NOT settled at this τ (the sweep stopped on another bar, ε or δ)")
    return (f"Curtailed sweep: {st.m} of {st.n_planned} planned reruns launched, {st.k} failed; {settled}. "
            f"Bounds at N = {st.n_planned} with the {st.remaining} unlaunched reruns counted as failing: "
            f"U = {st.upper:.3f} (it would be {st.upper_if_rest_pass:.3f} if they all passed), "
            f"L = {st.lower:.3f}.")
