"""Recipe cards: from resolved reruns to a card document.

A card (:class:`~recipe_audit.cards.document.RecipeCard`) is what one card computation produces:
entries, one per (cell, τ), each with the exact tail bound, the verdict and the comparison rules,
plus the reruns behind it and their digest. Its JSON (``to_json()``) is validated against the
schema shipped in ``recipe_audit/schemas``; rendering and storage live in sibling modules.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from typing import Any

import numpy as np

from recipe_audit import stats
from recipe_audit.cards.anytime import apply_anytime
from recipe_audit.cards.band import band_fields
from recipe_audit.cards.curtail import curtailed_fields
from recipe_audit.cards.digest import seal
from recipe_audit.cards.document import RecipeCard
from recipe_audit.cards.family import apply_family
from recipe_audit.cards.jsontext import json_number
from recipe_audit.cards.model import CARD_KIND, SCHEMA_VERSION, CardError, CardOptions, Cell
from recipe_audit.stats.array_checks import make_rng
from recipe_audit.stats.cell import CellStatistics, cell_statistics_at
from recipe_audit.stats.exact import shown_beside
from recipe_audit.stats.floors import floor_of


def _seed_json(s: Any) -> Any:
    return int(s) if isinstance(s, (int, np.integer)) else s


def _duplicate_json(d, tau: float) -> dict[str, Any]:
    """A re-run seed (``reruns.Duplicate``) on the card at ``tau``: its runs, which of them are
    results, the run the seed counts and its value, what that makes the seed at ``tau``, and
    whether its results disagree about the bar (then the seed counts as failing)."""
    return {"seed": _seed_json(d.seed), "run_ids": list(d.run_ids), "values": [json_number(v) for v in d.values],
            "results": list(d.results), "decided_by": d.decided_by, "counted_value": json_number(d.counted_value),
            "counted_as": d.counts_as(tau), "disagree": bool(d.disagrees(tau)),
            "nondeterministic": bool(d.nondeterministic)}


def cell_entries(cell: Cell, opts: CardOptions) -> list[dict[str, Any]]:
    """The entries of one cell in the document's ``cells`` list, one per τ of ``opts``. Their
    statistics come from one call of :func:`~recipe_audit.stats.cell.cell_statistics_at` (the
    bounds, the rules and the band at every τ); a cell refused for its audit set has none."""
    if cell.shift_refusal is not None:
        floor = floor_of(opts.eps, opts.delta)
        return [{**_entry_base(cell, tau, opts),
                 "n_failures": None, "n_unfinished": len(cell.unfinished), **_never_ran_field(cell),
                 "failed_seeds": [],
                 "upper_bound": None, "lower_bound": None, "sample_floor": floor,
                 "more_clean_reruns_needed": None, "verdict": stats.REFUSED_SHIFT,
                 "reason": cell.shift_refusal,
                 "rules": {r: False for r in stats.RULES}, "rule_statistics": None} for tau in opts.taus]
    info = cell.extra.get("curtailment")
    # a curtailed cell's band is taken at the planned N, the unlaunched reruns counted as failures
    extra = max(0, int(info["n_planned"]) - cell.n) if info else 0
    # the options were checked at the door (CardOptions), the reruns' values are floats (Cell): the
    # statistics take them as they are
    cs = cell_statistics_at(cell.values, opts.taus, opts.eps, opts.delta, opts.higher_is_better, opts.bootstrap_B,
                            make_rng(np.random.default_rng(opts.bootstrap_seed)), opts.band_method, extra)
    return [_entry(cell, tau, opts, cs, i) for i, tau in enumerate(opts.taus)]


def _entry_base(cell: Cell, tau: float, opts: CardOptions) -> dict[str, Any]:
    """What an entry says of its cell and τ before any statistic."""
    return {
        "group": {k: (None if v is None else str(v)) for k, v in cell.group.items()},
        "label": cell.label,
        "recipe_id": cell.recipe_id,
        "recipe_summary": cell.recipe_summary,
        "audit_set": cell.audit_set,
        "metric": cell.metric,
        "higher_is_better": opts.higher_is_better,
        "tau": float(tau),
        "eps": opts.eps,
        "delta": opts.delta,
        "n_reruns": cell.n,
        "planned_seeds": [_seed_json(s) for s in cell.planned_seeds],
        "unfinished": [{"seed": _seed_json(s), "reason": r, "run_id": rid} for s, r, rid in cell.unfinished],
        "duplicates": [_duplicate_json(d, tau) for d in cell.duplicates],
        "nondeterministic": bool(cell.disagreeing_duplicates),
        "sweep_run_ids": list(cell.sweep_run_ids),
        "reruns": [{"seed": _seed_json(s), "run_id": rid, "value": json_number(v), "status": st}
                   for s, v, rid, st in zip(cell.seeds, cell.values.tolist(), cell.run_ids, cell.statuses,
                                            strict=True)],
        "digest": cell.digest,
    }


def _entry(cell: Cell, tau: float, opts: CardOptions, cs: CellStatistics, i: int) -> dict[str, Any]:
    """The entry of ``cell`` at ``tau``, the ``i``-th bar of its statistics ``cs``."""
    base = _entry_base(cell, tau, opts)
    failed, bound, rules = cs.failed[i], cs.bounds[i], cs.rules[i]
    k, ships = bound.k, rules.ships
    base.update({
        "n_failures": k,
        "n_unfinished": len(cell.unfinished),
        **_never_ran_field(cell),
        "failed_seeds": [_seed_json(s) for s, f in zip(cell.seeds, failed, strict=True) if f],
        "upper_bound": bound.upper,
        "lower_bound": bound.lower,
        "sample_floor": bound.sample_floor,
        "more_clean_reruns_needed": bound.more_clean_reruns_needed,
        "verdict": bound.verdict,
        "reason": _reason(bound, cell, opts),
        "rules": {r: bool(ships[r]) for r in stats.RULES},
        "rule_statistics": {
            "mean": json_number(rules.mean), "median": json_number(rules.median), "sd": json_number(rules.sd),
            "bootstrap_limit": json_number(rules.bootstrap_limit), "two_sd_limit": json_number(rules.two_sd_limit),
            "bootstrap_percentile": rules.bootstrap_percentile, "bootstrap_B": rules.B,
            "bootstrap_seed": opts.bootstrap_seed, "n_finished": rules.n_finished,
            "n_ignored_by_practice_rules": rules.n_ignored,
        },
    })

    if cell.extra.get("curtailment"):  # the verdict at the planned N of a curtailed sweep
        base.update(curtailed_fields(cell, k, tau, opts, base["rules"]))
    base["band"] = band_fields(cs.band, i)  # the bound valid for every τ at once
    return base


def _u(x: float, eps: float, above: bool) -> str:
    """A bound to three decimals, more where three would read on the wrong side of ε."""
    return shown_beside(x, eps, above, digits=3, fixed=True)


def never_ran(cell: Cell) -> int:
    """How many of the cell's planned reruns never started (unfinished as ``never-logged``: the
    seeds an interrupted sweep did not reach; a curtailed sweep's unlaunched seeds are not among
    them)."""
    return sum(1 for u in cell.unfinished if u[1] == "never-logged")


def _never_ran_field(cell: Cell) -> dict[str, int]:
    """``n_never_ran`` for an entry with planned reruns that never started; absent otherwise (so
    the JSON of every other card is as it was)."""
    m = never_ran(cell)
    return {"n_never_ran": m} if m else {}


def _reason(bound, cell: Cell, opts: CardOptions) -> str:
    k, n = bound.k, bound.n
    m = never_ran(cell)
    unf = f" ({len(cell.unfinished)} unfinished, counted as failures" + (
        f": {m} never ran; resume=true runs them)" if m else ")") if cell.unfinished else ""
    if bound.verdict == stats.SUPPORTED:
        return (f"{k} of {n} reruns failed{unf}; with confidence {1 - opts.delta:.0%} the next rerun "
                f"fails with probability at most {_u(bound.upper, opts.eps, False)} ≤ ε = {opts.eps:g}.")
    if bound.verdict == stats.STRONG_UNSUPPORTED:
        return (f"{k} of {n} reruns failed{unf}; even the lower bound {_u(bound.lower, opts.eps, True)} exceeds "
                f"ε = {opts.eps:g}: the recipe fails too often.")
    if bound.verdict == stats.INSUFFICIENT:
        return (f"{n} reruns are fewer than the sample floor {bound.sample_floor} for ε = {opts.eps:g}, "
                f"δ = {opts.delta:g}: nothing can be certified; at least "
                f"{bound.more_clean_reruns_needed} more clean reruns are needed.")
    return (f"{k} of {n} reruns failed{unf}; the upper bound {_u(bound.upper, opts.eps, True)} exceeds ε = {opts.eps:g}"
            + (f"; {bound.more_clean_reruns_needed} more clean reruns would be needed." if
               bound.more_clean_reruns_needed else "."))


# the packages whose versions a card records (those installed), in this order
RECIPE_CARD_PACKAGES = ("recipe_audit", "mlflow", "numpy", "scipy", "torch", "transformers", "peft", "hydra-core")


def software_versions(packages: Sequence[str] = RECIPE_CARD_PACKAGES) -> dict[str, str]:
    """``{package: version}`` for those of ``packages`` that are installed, in the order given."""
    from importlib import metadata

    out = {}
    for pkg in packages:
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return out


def build_card(cells: Sequence[Cell], opts: CardOptions, source: dict[str, Any]) -> RecipeCard:
    """The recipe card for ``cells`` × ``opts.taus``. Unfinished reruns refuse the card when
    ``opts.unfinished == "refuse"`` (raises ``CardError`` naming them). The entries are assembled
    as JSON objects (the readings of :mod:`~recipe_audit.cards.anytime`, :mod:`~recipe_audit.cards.family`
    and :mod:`~recipe_audit.cards.curtail` complete them in place), then sealed and typed."""
    if not cells:
        raise CardError("There are no reruns to compute a card from.")
    if opts.unfinished == "refuse":
        pending = [(c.label, u) for c in cells for u in c.unfinished if c.shift_refusal is None]
        if pending:
            shown = ", ".join(f"seed {u[0]} ({u[1]})" for _, u in pending[:6])
            raise CardError(f"The card refuses: {len(pending)} rerun(s) are unfinished: {shown}"
                            f"{' ...' if len(pending) > 6 else ''}.")
    entries = [e for c in cells for e in cell_entries(c, opts)]

    apply_anytime(entries, cells, opts)  # an open-ended sweep's cells: the confidence sequence
    apply_family(entries, opts.eps, opts.delta, source.get("family_recipe_ids") or (), opts.family_size)
    doc = {
        "schema_version": SCHEMA_VERSION,
        "kind": CARD_KIND,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "software": software_versions(),
        "source": source,
        "options": {"taus": [float(t) for t in opts.taus], "eps": opts.eps, "delta": opts.delta,
                    "higher_is_better": opts.higher_is_better, "unfinished": opts.unfinished,
                    "bootstrap_B": opts.bootstrap_B, "bootstrap_seed": opts.bootstrap_seed,
                    "band_method": opts.band_method,
                    **({"family_size": opts.family_size} if opts.family_size is not None else {}),
                    **({"anytime": True} if opts.anytime else {})},
        "cells": entries,
    }
    return RecipeCard.from_json(seal(doc))


def summarise_recipe(params: dict[str, Any]) -> str:
    """A readable one-line summary from a rerun's flattened params (recipe_audit runs)."""
    g = params.get
    if g("recipe.name") is None:
        return ""
    lora = "LoRA r={} alpha={} on {}".format(g("recipe.lora.r"), g("recipe.lora.alpha"),
                                           g("recipe.lora.target_modules")) \
        if str(g("recipe.lora.enabled")).lower() == "true" else "full fine-tune"
    length = f"{g('recipe.max_steps')} steps" if g("recipe.max_steps") not in (None, "None") \
        else f"{g('recipe.epochs')} epochs"
    return (f"{g('recipe.name')}: {g('model.name')} on {g('task.name')}, {g('recipe.optimizer')} "
            f"lr={g('recipe.lr')} {g('recipe.schedule')} warmup={g('recipe.warmup_ratio')}, {length}, "
            f"batch {g('recipe.batch_size')}, {lora}")
