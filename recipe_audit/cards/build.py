"""Recipe cards: from resolved reruns to a card document.

A card (:class:`~recipe_audit.cards.document.RecipeCard`) is what one card computation produces:
entries, one per (cell, τ), each with the exact tail bound, the verdict and the comparison rules,
plus the reruns behind it and their digest. Its JSON (``to_json()``) is validated against the
schema shipped in ``recipe_audit/schemas``; rendering and storage live in sibling modules.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from recipe_audit import stats
from recipe_audit.cards.anytime import ANYTIME, anytime_reading, look_groups, read_as_anytime
from recipe_audit.cards.band import band_fields
from recipe_audit.cards.curtail import curtailed_reason, curtailed_stop_on, curtailment_section
from recipe_audit.cards.document import (
    Band,
    CardEntry,
    Duplicate,
    FrozenMap,
    RecipeCard,
    Rerun,
    RuleStatistics,
    UnfinishedRerun,
)
from recipe_audit.cards.family import LEAD_KEYS, family_lead, family_places, family_reading
from recipe_audit.cards.jsontext import json_number
from recipe_audit.cards.model import CARD_KIND, SCHEMA_VERSION, CardError, CardOptions, Cell, group_json
from recipe_audit.stats.array_checks import make_rng
from recipe_audit.stats.cell import CellReadings, cell_readings_at, failure_counts_at
from recipe_audit.stats.exact import shown_beside
from recipe_audit.stats.floors import floor_of


def _seed_json(s: Any) -> Any:
    return int(s) if isinstance(s, (int, np.integer)) else s


def _duplicate(d, tau: float) -> Duplicate:
    """A re-run seed (``reruns.Duplicate``) on the card at ``tau``: its runs, which of them are
    results, the run the seed counts and its value, what that makes the seed at ``tau``, and
    whether its results disagree about the bar (then the seed counts as failing)."""
    return Duplicate.of(seed=_seed_json(d.seed), run_ids=tuple(d.run_ids),
                        values=tuple(json_number(v) for v in d.values), results=tuple(d.results),
                        decided_by=d.decided_by, counted_value=json_number(d.counted_value),
                        counted_as=d.counts_as(tau), disagree=bool(d.disagrees(tau)),
                        nondeterministic=bool(d.nondeterministic))


@dataclass(frozen=True)
class _CellFields:
    """What every entry of a cell states alike, typed once for the cell (immutable: its entries
    share it)."""

    group: FrozenMap
    planned_seeds: tuple
    unfinished: tuple[UnfinishedRerun, ...]
    sweep_run_ids: tuple[str, ...]
    reruns: tuple[Rerun, ...]

    @classmethod
    def of(cls, cell: Cell) -> _CellFields:
        return cls(group=FrozenMap(group_json(cell)), planned_seeds=tuple(_seed_json(s) for s in cell.planned_seeds),
                   unfinished=tuple(UnfinishedRerun(_seed_json(s), r, rid) for s, r, rid in cell.unfinished),
                   sweep_run_ids=tuple(cell.sweep_run_ids),
                   reruns=tuple(Rerun(_seed_json(s), rid, json_number(v), st)
                                for s, v, rid, st in zip(cell.seeds, cell.values.tolist(), cell.run_ids,
                                                         cell.statuses, strict=True)))


def _base(cell: Cell, shared: _CellFields, tau: float, opts: CardOptions, n_failures: int | None) -> dict[str, Any]:
    """What an entry says of its cell and τ, up to its failures ``n_failures`` (its first fields,
    typed; ``shared``: the cell's own, alike in each of its entries)."""
    return {
        "group": shared.group,
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
        "planned_seeds": shared.planned_seeds,
        "unfinished": shared.unfinished,
        "duplicates": tuple(_duplicate(d, tau) for d in cell.duplicates),
        "nondeterministic": bool(cell.disagreeing_duplicates),
        "sweep_run_ids": shared.sweep_run_ids,
        "reruns": shared.reruns,
        "digest": cell.digest,
        "n_failures": n_failures,
        "n_unfinished": len(cell.unfinished),
        **_never_ran_field(cell),
    }


def _refused_entries(cell: Cell, opts: CardOptions, anytime: bool, places) -> list[CardEntry]:
    """The entries of a cell refused for its audit set: no statistics, the refusal as the reason."""
    floor = floor_of(opts.eps, opts.delta)
    shared = _CellFields.of(cell)
    out = []
    for tau, place in zip(opts.taus, places, strict=True):
        fam = {"family": family_reading(place[0], stats.REFUSED_SHIFT)} if place else {}
        out.append(CardEntry.of(
            **_base(cell, shared, tau, opts, None), failed_seeds=(), upper_bound=None, lower_bound=None, sample_floor=floor,
            more_clean_reruns_needed=None, verdict=stats.REFUSED_SHIFT, reason=cell.shift_refusal,
            rules=FrozenMap({r: False for r in stats.RULES}), rule_statistics=None,
            **({"reading": ANYTIME} if anytime else {}), **fam))
    return out


def _family_counts(cell: Cell, opts: CardOptions) -> tuple[tuple[int, int], ...] | None:
    """The cell's (failures, reruns) at each τ for its family's test: at the planned N for a
    curtailed cell (its unlaunched reruns counted as failing); None for a refused cell."""
    if cell.shift_refusal is not None:
        return None
    r = _unlaunched(cell) if curtailed_stop_on(cell) is not None else 0
    ks = failure_counts_at(cell.values, opts.taus, opts.higher_is_better)
    return tuple((k + r, cell.n + r) for k in ks)


def _unlaunched(cell: Cell) -> int:
    """A curtailed cell's reruns planned but never launched (0 for any other cell): its band, and
    its verdict at the planned N, count them as failures."""
    info = cell.extra.get("curtailment")
    return max(0, int(info["n_planned"]) - cell.n) if info else 0


def cell_entries(cell: Cell, opts: CardOptions, anytime: bool = False, places=None) -> list[CardEntry]:
    """The entries of one cell in the card's ``cells``, one per τ of ``opts``, built typed. Every
    reading of the cell (pointwise, at the planned N of a curtailed sweep, the confidence sequence
    when ``anytime``, family-wise at each τ with a family in ``places``: :func:`~.family.family_places`)
    comes from one call of :func:`~recipe_audit.stats.cell.cell_readings_at`; a cell refused for its
    audit set has none."""
    places = places or [None] * len(opts.taus)
    if cell.shift_refusal is not None:
        return _refused_entries(cell, opts, anytime, places)
    # the options were checked at the door (CardOptions), the reruns' values are floats (Cell): the
    # statistics take them as they are
    readings = cell_readings_at(cell.values, opts.taus, opts.eps, opts.delta, opts.higher_is_better,
                                opts.bootstrap_B, make_rng(np.random.default_rng(opts.bootstrap_seed)),
                                opts.band_method, _unlaunched(cell), curtail_stop_on=curtailed_stop_on(cell),
                                anytime=anytime, looks=look_groups(cell) if anytime else (),
                                family=tuple(p and p[1] for p in places))
    shared = _CellFields.of(cell)
    return [_entry(cell, shared, tau, opts, readings, i, places[i]) for i, tau in enumerate(opts.taus)]


def _entry(cell: Cell, shared: _CellFields, tau: float, opts: CardOptions, rd: CellReadings, i: int,
           place) -> CardEntry:
    """The entry of ``cell`` at ``tau``, the ``i``-th bar of its readings ``rd``; ``place``: its
    family and seat (None: no family)."""
    cs = rd.statistics
    failed, bound, rules = cs.failed[i], cs.bounds[i], cs.rules[i]
    k, ships = bound.k, rules.ships
    # the entry's own reading: the pointwise one, or a curtailed sweep's at the planned N
    own = {"upper_bound": bound.upper, "lower_bound": bound.lower, "sample_floor": bound.sample_floor,
           "more_clean_reruns_needed": bound.more_clean_reruns_needed, "verdict": bound.verdict,
           "reason": _reason(bound, cell, opts)}
    st = rd.curtailed[i]
    if st is not None and st.remaining:  # stopped early: the verdict and bounds at the planned N
        own = {**own, "upper_bound": st.upper, "lower_bound": st.lower, "verdict": st.verdict,
               "reason": curtailed_reason(st), "more_clean_reruns_needed": None}
    curtailment = {} if st is None else {"curtailment": curtailment_section(cell, st)}
    lead, pointwise, anytime, family = own, None, {}, {}
    ab = rd.anytime[i]
    if ab is not None:  # an open-ended sweep: the confidence sequence leads
        fixed_n = {key: own[key] for key in ("upper_bound", "lower_bound", "sample_floor", "verdict")}
        obj, reason = anytime_reading(cell, ab, rd.looks[i], fixed_n)
        pointwise = {**fixed_n, "more_clean_reruns_needed": own["more_clean_reruns_needed"], "reason": own["reason"]}
        lead = {"upper_bound": ab.upper, "lower_bound": ab.lower, "sample_floor": ab.sample_floor,
                "verdict": ab.verdict, "more_clean_reruns_needed": None, "reason": reason}
        anytime = {"reading": ANYTIME, "anytime": obj, "pointwise": pointwise}
    if place is not None:
        fam = family_reading(place[0], lead["verdict"], rd.family[i], rd.family_anytime[i])
        family = {"family": fam}
        if opts.family_size is not None:  # asked for: the family-wise reading leads
            lead = family_lead(fam, pointwise or {key: lead[key] for key in LEAD_KEYS}, k, cell.n,
                               rd.family_upper[i], opts.eps)
            # the entry's own reading moves under ``pointwise`` (an anytime entry has it already)
            family = {"family": fam, **({} if anytime else {"pointwise": {key: own[key] for key in LEAD_KEYS}})}
    return CardEntry.of(
        **_base(cell, shared, tau, opts, k),
        failed_seeds=tuple(_seed_json(s) for s, f in zip(cell.seeds, failed, strict=True) if f),
        upper_bound=lead["upper_bound"], lower_bound=lead["lower_bound"], sample_floor=lead["sample_floor"],
        more_clean_reruns_needed=lead["more_clean_reruns_needed"], verdict=lead["verdict"], reason=lead["reason"],
        rules=FrozenMap({**{r: bool(ships[r]) for r in stats.RULES}, "card": lead["verdict"] == stats.SUPPORTED}),
        rule_statistics=RuleStatistics.of(
            mean=json_number(rules.mean), median=json_number(rules.median), sd=json_number(rules.sd),
            bootstrap_limit=json_number(rules.bootstrap_limit), two_sd_limit=json_number(rules.two_sd_limit),
            bootstrap_percentile=rules.bootstrap_percentile, bootstrap_B=rules.B,
            bootstrap_seed=opts.bootstrap_seed, n_finished=rules.n_finished,
            n_ignored_by_practice_rules=rules.n_ignored),
        **curtailment,
        band=Band.of(**band_fields(cs.band, i)),  # the bound valid for every τ at once
        **anytime,
        **family,
    )


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
    ``opts.unfinished == "refuse"`` (raises ``CardError`` naming them). The entries are built typed,
    each cell's from one stats call (:func:`cell_entries`), then the card is sealed."""
    if not cells:
        raise CardError("There are no reruns to compute a card from.")
    if opts.unfinished == "refuse":
        pending = [(c.label, u) for c in cells for u in c.unfinished if c.shift_refusal is None]
        if pending:
            shown = ", ".join(f"seed {u[0]} ({u[1]})" for _, u in pending[:6])
            raise CardError(f"The card refuses: {len(pending)} rerun(s) are unfinished: {shown}"
                            f"{' ...' if len(pending) > 6 else ''}.")
    anytime = read_as_anytime(cells, opts)  # an open-ended sweep's cells: the confidence sequence
    places = family_places(cells, opts.taus, [_family_counts(c, opts) for c in cells], opts.eps, opts.delta,
                           source.get("family_recipe_ids") or (), opts.family_size)
    entries = tuple(e for c, p in zip(cells, places, strict=True) for e in cell_entries(c, opts, anytime, p))
    card = RecipeCard.of(
        schema_version=SCHEMA_VERSION,
        kind=CARD_KIND,
        created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        software=software_versions(),
        source=source,
        options={"taus": [float(t) for t in opts.taus], "eps": opts.eps, "delta": opts.delta,
                 "higher_is_better": opts.higher_is_better, "unfinished": opts.unfinished,
                 "bootstrap_B": opts.bootstrap_B, "bootstrap_seed": opts.bootstrap_seed,
                 "band_method": opts.band_method,
                 **({"family_size": opts.family_size} if opts.family_size is not None else {}),
                 **({"anytime": True} if opts.anytime else {})},
        cells=entries,
    )
    return card.sealed()


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
