"""The acceptance audit: evaluation records (+ mechanism inputs) → the four gates → an acceptance card.

One function, :func:`run_acceptance`, used by the ``recipe-audit acceptance`` command and by
Python callers alike (no second copy of the logic).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from recipe_audit.acceptance.records import (
    FRESH,
    HELDOUT,
    RecordsError,
    paired_records,
    read_experiment_tables,
    read_records,
    records_digest,
)
from recipe_audit.stats import acceptance as gates

if TYPE_CHECKING:
    from recipe_audit.cards.acceptance import AcceptanceCard

__all__ = ["AcceptanceError", "AcceptanceRequest", "Pair", "attach_mechanisms", "evaluate_pairs", "run_acceptance"]


_NO_MECHANISM = "no mechanism input (weights or α) was declared for this defense cell"


class AcceptanceError(ValueError):
    """The acceptance audit was asked something it cannot answer (one sentence)."""


@dataclass(frozen=True)
class AcceptanceRequest:
    """What one acceptance audit is asked; every field is declared before the audit.

    ``defense``/``baseline``: cells as named in the records' ``cell`` column; one baseline is shared
    by every defense, or one baseline per defense (paired in order). ``cross_defense`` and
    ``cross_baseline`` name the cells on ``cross_task`` (default: the same names).
    ``cross_restricted``: True (all) or the defense cells whose cross-task run used a restricted
    recipe variant. ``mechanism``: a mechanism config (diagnostic (c) from weights); ``alphas``: a
    JSON of α computed elsewhere (not both).
    """

    records: tuple = ()
    defense: tuple[str, ...] = ()
    baseline: tuple[str, ...] = ()
    task: str | None = None
    cross_task: str | None = None
    cross_defense: tuple[str, ...] = ()
    cross_baseline: tuple[str, ...] = ()
    cross_restricted: bool | tuple[str, ...] = False
    mechanism: str | None = None
    alphas: str | None = None
    claimed_class: str | None = None
    resamples: int = gates.DEFAULT_RESAMPLES
    seed: int = 0
    level: float = gates.DEFAULT_LEVEL
    sensitivity_level: float = gates.SENSITIVITY_LEVEL
    boundary: float = gates.DEFAULT_BOUNDARY
    margin: float = gates.DEFAULT_MARGIN
    item_level: bool = True
    records_experiment: str | None = None
    records_table: str = "eval_records.json"
    tracking_uri: str | None = None
    extra_source: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Pair:
    defense: str
    baseline: str
    cross_defense: str | None = None
    cross_baseline: str | None = None
    restricted: bool = False
    label: str = ""


def _pairs(req: AcceptanceRequest) -> list[Pair]:
    d, b = list(req.defense), list(req.baseline)
    if not d or not b:
        raise AcceptanceError("Name at least one --defense cell and one --baseline cell.")
    if len(b) == 1:
        b = b * len(d)
    elif len(b) != len(d):
        raise AcceptanceError(f"Give one --baseline for all defenses or one per --defense ({len(d)} defenses, "
                              f"{len(b)} baselines).")
    xd, xb = list(req.cross_defense), list(req.cross_baseline)
    if (xd or xb) and not req.cross_task:
        raise AcceptanceError("--cross-defense and --cross-baseline need --cross-task.")
    xd = xd or d
    xb = xb or b
    if len(xb) == 1:
        xb = xb * len(d)
    if len(xd) != len(d) or len(xb) != len(d):
        raise AcceptanceError("Give one --cross-defense and one --cross-baseline per --defense (or one baseline).")
    restricted = req.cross_restricted
    if not isinstance(restricted, bool):
        unknown = sorted(set(restricted) - set(d))
        if unknown:
            raise AcceptanceError(f"--cross-restricted names '{unknown[0]}', which is not a --defense cell.")
    seen: dict[str, int] = {}
    for x in d:
        seen[x] = seen.get(x, 0) + 1
    out = []
    for i, (r, z) in enumerate(zip(d, b, strict=True)):
        if r == z:
            raise AcceptanceError(f"Cell '{r}' is named as both the defense and its baseline.")
        label = r if seen[r] == 1 else f"{r} vs {z}"
        rs = restricted if isinstance(restricted, bool) else r in restricted
        out.append(Pair(r, z, xd[i] if req.cross_task else None, xb[i] if req.cross_task else None, bool(rs), label))
    return out


def _primary_task(df: pd.DataFrame, pairs: Sequence[Pair], task: str | None, cross: str | None) -> str:
    cells = {p.defense for p in pairs} | {p.baseline for p in pairs}
    tasks = sorted(set(df.loc[df["cell"].isin(cells), "task"]))
    if task is not None:
        if task not in tasks:
            raise AcceptanceError(f"The named cells have no records on task '{task}' (they have: "
                                  f"{', '.join(tasks) or 'none'}).")
        return task
    cand = [t for t in tasks if t != cross]
    if len(cand) != 1:
        raise AcceptanceError(f"The records of these cells span tasks {cand}; name the primary one with --task.")
    return cand[0]


def _check_cells(df: pd.DataFrame, pairs: Sequence[Pair]) -> None:
    have = set(df["cell"])
    for p in pairs:
        for c in (p.defense, p.baseline, p.cross_defense, p.cross_baseline):
            if c is not None and c not in have:
                shown = ", ".join(f"'{x}'" for x in sorted(have)[:8]) + (" …" if len(have) > 8 else "")
                raise AcceptanceError(f"There are no records for cell '{c}' (the records hold cells {shown}).")


def evaluate_pairs(df: pd.DataFrame, pairs: Sequence[Pair], *, task: str, cross_task: str | None = None,
                   mechanisms: Mapping | None = None, resamples: int = gates.DEFAULT_RESAMPLES, seed: int = 0,
                   level: float = gates.DEFAULT_LEVEL, sensitivity_level: float = gates.SENSITIVITY_LEVEL,
                   boundary: float = gates.DEFAULT_BOUNDARY, margin: float = gates.DEFAULT_MARGIN,
                   item_level: bool = True) -> list[gates.AcceptanceResult]:
    """Run the four gates for each pair on validated records ``df``; gate (c) from ``mechanisms``
    (cell -> :class:`~.mechanism.CellMechanism`), missing for cells without one."""
    mechanisms = mechanisms or {}
    results = []
    for p in pairs:
        held = paired_records(df, p.defense, p.baseline, task, HELDOUT)
        fresh = paired_records(df, p.defense, p.baseline, task, FRESH)
        if held is None and fresh is None:
            raise AcceptanceError(f"Cells '{p.defense}' and '{p.baseline}' have no records on task '{task}'.")
        primary = gates.installability(held if held is not None else fresh)
        missing = {}
        a = b = c = d = None
        if held is not None:
            a = gates.gate_a(held, B=resamples, rng=int(seed), level=level, sensitivity_level=sensitivity_level,
                          item_level=item_level)
        else:
            missing["a"] = f"no held-out records for these cells on task '{task}'"
        if fresh is not None:
            b = gates.gate_b(fresh)
        else:
            missing["b"] = f"no fresh-subject records for these cells on task '{task}'"
        mech = mechanisms.get(p.defense)
        if mech is not None:
            c = gates.gate_c(mech.signature, mech.claimed_class, boundary=boundary, notes=mech.notes)
        else:
            missing["c"] = _NO_MECHANISM
        if cross_task is not None:
            xh = paired_records(df, p.cross_defense, p.cross_baseline, cross_task, HELDOUT)
            xs = xh if xh is not None else paired_records(df, p.cross_defense, p.cross_baseline, cross_task, FRESH)
            if xs is None:
                raise AcceptanceError(f"Cells '{p.cross_defense}' and '{p.cross_baseline}' have no records on the "
                                      f"cross task '{cross_task}'.")
            d = gates.gate_d(held if held is not None else fresh, xs, restricted=p.restricted, margin=margin)
        else:
            missing["d"] = "no cross task was given (--cross-task)"
        results.append(gates.acceptance(primary, a=a, b=b, c=c, d=d, missing_reasons=missing))
    return results


def attach_mechanisms(results: Sequence[gates.AcceptanceResult], pairs: Sequence[Pair], mechanisms: Mapping, *,
                      boundary: float = gates.DEFAULT_BOUNDARY) -> list[gates.AcceptanceResult]:
    """Add gate (c) to results computed without it, from ``mechanisms`` (cell -> CellMechanism)."""
    out = []
    for res, p in zip(results, pairs, strict=True):
        mech = mechanisms.get(p.defense)
        if mech is None:
            out.append(res)
            continue
        c = gates.gate_c(mech.signature, mech.claimed_class, boundary=boundary, notes=mech.notes)
        reasons = tuple((g, r) for g, r in res.missing_reasons if g != "c")
        out.append(replace(res, c=c, missing_reasons=reasons))
    return out


def run_acceptance(req: AcceptanceRequest, *, records: pd.DataFrame | None = None,
                   mechanisms: Mapping | None = None) -> AcceptanceCard:
    """Compute the acceptance card for ``req`` (:class:`~recipe_audit.cards.acceptance.AcceptanceCard`;
    its document is ``.to_json()``).

    ``records`` (already read) replaces ``req.records``; ``mechanisms`` (cell -> CellMechanism,
    e.g. from :func:`~.mechanism.mechanism_from_models`) replaces ``req.mechanism``/``req.alphas``.
    Every input is checked before any model is loaded; nothing is written.
    """
    from recipe_audit.cards import acceptance as card
    from recipe_audit.stats.array_checks import check_positive_int, check_scalar_prob

    check_positive_int("the number of resamples", req.resamples)
    check_scalar_prob("the interval level", req.level)
    check_scalar_prob("the sensitivity interval level", req.sensitivity_level)
    if not (isinstance(req.seed, (int, np.integer)) and req.seed >= 0):
        raise AcceptanceError(f"The seed must be a non-negative integer, not {req.seed!r}.")
    if not 0 <= req.margin < 0.5:
        raise AcceptanceError(f"The degeneracy margin must lie in [0, 0.5), not {req.margin}.")
    if not req.boundary > 0:
        raise AcceptanceError(f"The ρ_AT boundary must be positive, not {req.boundary}.")
    if req.claimed_class is not None and req.claimed_class not in gates.MECHANISM_CLASSES:
        raise AcceptanceError(f"The claimed class must be 'shrinkage' or 'attack-targeted', not {req.claimed_class!r}.")
    if req.mechanism and req.alphas:
        raise AcceptanceError("Give the mechanism inputs as weights (--mechanism) or as α (--alphas), not both.")
    pairs = _pairs(req)

    sources = [str(s) if not isinstance(s, pd.DataFrame) else "a DataFrame" for s in req.records]
    if records is None:
        frames = []
        if req.records:
            frames.append(read_records(list(req.records), tracking_uri=req.tracking_uri))
        if req.records_experiment:
            frames.append(read_experiment_tables(req.records_experiment, req.records_table, tracking_uri=req.tracking_uri))
            sources.append(f"experiment '{req.records_experiment}', table '{req.records_table}'")
        if not frames:
            raise RecordsError("Give at least one records source (--records FILE or --records-experiment NAME).")
        df = frames[0] if len(frames) == 1 else read_records(frames)
    else:
        df = read_records([records])
        sources = sources or ["a DataFrame"]
    _check_cells(df, pairs)
    task = _primary_task(df, pairs, req.task, req.cross_task)
    if req.cross_task is not None:
        if req.cross_task == task:
            raise AcceptanceError(f"The cross task must differ from the primary task '{task}'.")
        if req.cross_task not in set(df["task"]):
            raise AcceptanceError(f"There are no records on the cross task '{req.cross_task}'.")

    # Every record gate runs before any model is loaded, so bad records fail fast; (c) follows.
    results = evaluate_pairs(df, pairs, task=task, cross_task=req.cross_task, mechanisms=None,
                             resamples=req.resamples, seed=req.seed, level=req.level,
                             sensitivity_level=req.sensitivity_level, margin=req.margin,
                             item_level=req.item_level)
    defense_cells = [p.defense for p in pairs]
    mech_source = None
    if mechanisms is None:
        mechanisms = {}
        from recipe_audit.acceptance.mechanism import compute_signatures, read_alphas
        from recipe_audit.acceptance.mechanism_spec import load_mechanism_spec

        if req.mechanism:
            spec = load_mechanism_spec(req.mechanism, defense_cells=defense_cells)
            mechanisms = compute_signatures(spec, tracking_uri=req.tracking_uri)
            mech_source = {"kind": "weights", **spec.describe()}
        elif req.alphas:
            mechanisms = read_alphas(req.alphas, defense_cells, claimed_class=req.claimed_class)
            mech_source = {"kind": "alphas", "source": str(req.alphas)}
    else:
        unknown = sorted(set(mechanisms) - set(defense_cells))
        if unknown:
            raise AcceptanceError(f"A mechanism input names cell '{unknown[0]}', which is not a defense cell.")
        mech_source = {"kind": "in-memory"}
    results = attach_mechanisms(results, pairs, mechanisms, boundary=req.boundary)
    source = {"records": sources, "n_records": int(len(df)), "records_digest": records_digest(df),
              "mechanism": mech_source, **req.extra_source}
    options = {"resamples": int(req.resamples), "seed": int(req.seed), "level": float(req.level),
               "sensitivity_level": float(req.sensitivity_level), "se_multiplier": gates.SE_MULTIPLIER,
               "screen_se_multiplier": gates.SCREEN_SE_MULTIPLIER, "boundary": float(req.boundary),
               "sensitivity_boundaries": list(gates.SENSITIVITY_BOUNDARIES), "degenerate_margin": float(req.margin),
               "primary_task": task, "cross_task": req.cross_task, "item_level_comparison": bool(req.item_level)}
    mech_inputs = {c: m.inputs for c, m in mechanisms.items()}
    return card.build_card(pairs, results, options=options, source=source, mechanism_inputs=mech_inputs)
