"""Cards from a tracking store alone: read the reruns, resolve them per seed, build the card.

This is the one place that turns "experiment + keys + options" into a card
(:class:`~recipe_audit.cards.document.RecipeCard`); the Hydra callback and the ``recipe-audit
card`` command both call :func:`compute_card` (:func:`compute_cards` gives its JSON).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from recipe_audit import keys, stats
from recipe_audit.cards.build import build_card, summarise_recipe
from recipe_audit.cards.document import RecipeCard
from recipe_audit.cards.model import CardError, CardOptions, Cell, audit_set_of, cell_from_rerun_set

# params read along with the reruns to describe the recipe on the card
SUMMARY_PARAMS = ("recipe.name", "model.name", "task.name", "recipe.optimizer", "recipe.lr", "recipe.schedule",
                  "recipe.warmup_ratio", "recipe.epochs", "recipe.max_steps", "recipe.batch_size",
                  "recipe.lora.enabled", "recipe.lora.r", "recipe.lora.alpha", "recipe.lora.target_modules")


@dataclass(frozen=True)
class CardRequest:
    """Where the reruns are and how to read them (bring-your-own runs name their own keys)."""

    experiment: str
    metric: str = keys.DEFAULT_METRIC
    tracking_uri: str | None = None
    seed_key: str = "tags." + keys.TAG_SEED
    group_by: tuple[str, ...] = ()
    recipe_id: str | None = None  # keep only this recipe
    sweep_id: str | None = None  # keep only the reruns of this sweep
    planned_seeds: tuple[int, ...] | None = None
    stale_after_s: float = 86400.0


def _metric_name(metric: str) -> str:
    return metric[len("metrics."):] if metric.startswith("metrics.") else metric


@dataclass(frozen=True)
class _Cells:
    """The cells a card is computed for, resolved from the runs read (before their recipes'
    params are looked at): the runs the card is about, every run read, the family's recipe
    identities, the rerun sets and each set's rows."""

    frame: Any  # the runs of the card (recipe_id and sweep_id applied)
    everything: Any  # every run read
    family_ids: list[str]
    sets: list[Any]
    rows_of: list[Any]

    @property
    def first_runs(self) -> list[str]:
        """The run whose params describe each cell's recipe: its first chosen run."""
        return [rows["run_id"].iloc[0] for rows in self.rows_of if len(rows)]


@dataclass(frozen=True)
class CardRuns:
    """What a card reads of the store, in one read (:func:`read_card_runs`): the runs (``frame``,
    which the command line's checks look at too), the card's cells resolved from them while they
    were read (or the ``CardError`` that refuses them, raised when the card is computed) and, in
    ``frame.attrs["params"]``, the :data:`SUMMARY_PARAMS` of each cell's first chosen run.

    ``CardRuns(frame)`` with no cells: runs read otherwise (the release gate's history, carrying
    the params as ``params.X`` columns); the cells are resolved when the card is computed."""

    frame: Any
    cells: _Cells | CardError | None = None


def read_card_runs(req: CardRequest, opts: CardOptions) -> CardRuns:
    """The runs of ``req`` and the params that describe each cell's recipe, in one read of the
    store (:func:`~recipe_audit.store.read.read_runs`: the metric, the seed, group and extra keys
    of every run; on SQL stores in one snapshot). The cells are resolved from the runs inside that
    read, so the params are read for each cell's first chosen run only: reading them with every
    rerun costs more than the card at 100,000 reruns. Raises ``QueryError``."""
    from recipe_audit.store.read import read_runs

    resolved: list[_Cells | CardError] = []

    def first_runs(frame) -> list[str]:
        try:
            resolved.append(_resolve(req, opts, frame))
        except CardError as exc:  # said when the card is computed, after what the caller checks
            resolved.append(exc)
            return []
        return resolved[-1].first_runs

    extra = ["tags." + keys.TAG_SWEEP_ID, _SCORED_ON]
    # an audit set no rerun was scored on is a question for refused-shift cells, not an error
    frame = read_runs(req.tracking_uri, req.experiment, [_metric_name(req.metric)], seed_key=req.seed_key,
                      group_by=list(req.group_by), extra_keys=extra, require_metrics=False,
                      params=SUMMARY_PARAMS, params_of=first_runs)
    return CardRuns(frame, resolved[-1])


def compute_cards(req: CardRequest, opts: CardOptions, **kwargs: Any) -> dict[str, Any]:
    """The JSON of :func:`compute_card` (``RecipeCard.to_json()``), for callers that want the document."""
    return compute_card(req, opts, **kwargs).to_json()


def compute_card(req: CardRequest, opts: CardOptions, *, split_audit: bool = False,
                 responsiveness: bool = False, n_splits: int = 1000, rng_seed: int = 0,
                 runs: CardRuns | None = None) -> RecipeCard:
    """The recipe card for every cell of ``req`` at every τ of ``opts``. ``runs``: what the caller
    has read already with :func:`read_card_runs` ``(req, opts)`` (else read here).

    What it reads of the store: one read (:func:`read_card_runs`): the runs with their sweeps'
    tags (the curtailment records among them) and the few params that describe each recipe, for
    one run per cell. Everything else is computed from those."""
    from recipe_audit.reruns import QueryError

    try:
        if runs is None:
            runs = read_card_runs(req, opts)
    except QueryError as exc:
        raise CardError(str(exc)) from None
    cells_read = runs.cells if runs.cells is not None else _resolve(req, opts, runs.frame)
    if isinstance(cells_read, CardError):
        raise cells_read
    frame = cells_read.frame
    params_of = _summary_params(runs.frame, cells_read.first_runs)
    cells: list[Cell] = []
    for rs, rows in zip(cells_read.sets, cells_read.rows_of, strict=True):
        params = params_of[rows["run_id"].iloc[0]] if len(rows) else {}
        cells.append(_shift_checked(cell_from_rerun_set(rs, summarise_recipe(params)), rows[_SCORED_ON]))
    source = {
        "tracking_uri": frame.attrs.get("uri"), "experiment": req.experiment, "metric": _metric_name(req.metric),
        "seed_key": req.seed_key, "group_by": list(req.group_by), "recipe_id": req.recipe_id,
        "sweep_id": req.sweep_id,
        "planned_seeds": None if req.planned_seeds is None else list(req.planned_seeds),
        "family_recipe_ids": cells_read.family_ids,
    }
    from recipe_audit.cards.curtail import apply_curtailment, sweep_parents
    from recipe_audit.store.curtailment import curtailment_records

    # unlaunched seeds are not failures (the records were read with the runs, on their sweeps' runs)
    records = curtailment_records(req.tracking_uri, cells_read.everything.attrs.get("curtailment", {}),
                                  sweep_parents(cells))
    cells = apply_curtailment(cells, records)
    card = build_card(cells, opts, source)
    if split_audit or responsiveness:
        sections = _split_audit(cells, opts, split_audit, responsiveness, n_splits, rng_seed)
        if sections:
            card = card.updated(**sections).sealed()  # the digest covers the split audit too
    return card


def _resolve(req: CardRequest, opts: CardOptions, frame) -> _Cells:
    """The cells of the card of ``req`` from the runs ``frame`` (every run read); raises
    ``CardError`` when they make no card (no run logged the metric, no run of the recipe or
    sweep asked for, reruns that cannot be resolved, group keys that mix recipes)."""
    from recipe_audit.reruns import QueryError, collect_reruns

    metric = _metric_name(req.metric)
    if (not frame[f"logged[{metric}]"].any() and not frame[_SCORED_ON].notna().any()
            and not _only_crashed(frame, req)):  # reruns that all crashed are a card of failures (1.2)
        why = frame.attrs["unlogged"].get(metric) if "unlogged" in frame.attrs else _why_unlogged(req, metric)
        if why:
            raise CardError(why)  # what the runs there did log
    everything = frame
    if req.recipe_id is not None:
        frame = frame[frame["recipe_id"] == req.recipe_id]
        if frame.empty:
            raise CardError(f"No rerun of recipe '{req.recipe_id}' in experiment '{req.experiment}'.")
    if req.sweep_id is not None:
        frame = frame[frame["tags." + keys.TAG_SWEEP_ID] == req.sweep_id]
        if frame.empty:
            raise CardError(f"No rerun of sweep '{req.sweep_id}' in experiment '{req.experiment}'.")
    # the family: every recipe identity looked at (in the sweep, else the experiment), finished or not
    scope = everything if req.sweep_id is None else everything[everything["tags." + keys.TAG_SWEEP_ID] == req.sweep_id]
    family_ids = sorted({x for x in scope["recipe_id"].tolist() if isinstance(x, str) and x})
    try:
        sets = collect_reruns(frame, metric, higher_is_better=opts.higher_is_better,
                              planned_seeds=req.planned_seeds, stale_after_s=req.stale_after_s,
                              group_by=list(req.group_by))
    except QueryError as exc:
        raise CardError(str(exc)) from None
    _refuse_mixed_groups(sets, req)
    rows_of = [frame[frame["run_id"].isin([r for r in rs.run_ids if r])] for rs in sets]
    return _Cells(frame, everything, family_ids, sets, rows_of)


_SCORED_ON = "tags." + keys.TAG_AUDIT_SETS


def _only_crashed(frame, req: CardRequest) -> bool:
    """Whether every run of the card (its recipe and sweep, when ``req`` names them) crashed or
    was killed (:func:`recipe_audit.reruns.only_crashed`): the card counts them as failures (1.2)."""
    from recipe_audit.reruns import only_crashed

    scope = frame
    if req.recipe_id is not None:
        scope = scope[scope["recipe_id"] == req.recipe_id]
    if req.sweep_id is not None:
        scope = scope[scope["tags." + keys.TAG_SWEEP_ID] == req.sweep_id]
    return only_crashed(scope, keys.NO_METRIC_ERROR_LEAD)


def _why_unlogged(req: CardRequest, metric: str) -> str | None:
    """For a frame read otherwise than by :func:`read_card_runs` (the release gate's history), in
    which no run logged ``metric``: the sentence the store's own read of the runs gives (None when
    that read finds the metric)."""
    from recipe_audit.reruns import QueryError
    from recipe_audit.store.read import read_runs

    try:
        read_runs(req.tracking_uri, req.experiment, [metric], seed_key=req.seed_key)
    except QueryError as exc:
        return str(exc)
    return None


def _summary_params(frame, run_ids: list[str]) -> dict[str, dict[str, Any]]:
    """``{run id: {param: value or None}}`` of the :data:`SUMMARY_PARAMS` of ``run_ids`` (each
    cell's first chosen run), from what the read put in ``frame``: ``frame.attrs["params"]``
    (:func:`read_card_runs`) or ``params.X`` columns (the gate's history). Nothing is read here."""
    found = frame.attrs.get("params")
    if found is not None and all(r in found for r in run_ids):
        return {r: {p: found[r].get(p) for p in SUMMARY_PARAMS} for r in run_ids}
    columns = [f"params.{p}" for p in SUMMARY_PARAMS]
    if not all(c in frame.columns for c in columns):
        raise TypeError("The runs were read without the params that describe each recipe "
                        "(read them with read_card_runs, or as params.X columns).")
    rows = frame[frame["run_id"].isin(run_ids)].drop_duplicates("run_id").set_index("run_id")
    return {r: {p: rows.at[r, c] for p, c in zip(SUMMARY_PARAMS, columns, strict=True)} for r in run_ids}


def _shift_checked(cell: Cell, scored_on) -> Cell:
    """Where the reruns say which audit sets they were configured to be scored on (the
    ``recipe_audit.audit_sets`` tag), a cell none of whose reruns logged the metric is refused
    exactly when none was configured for its audit set, whatever else happened to
    them (a crashed rerun of a recipe never scored there is no evidence about it); and a cell
    whose reruns were configured for it but never logged it is unfinished, not refused (1.2)."""
    tags = [t for t in scored_on.tolist() if isinstance(t, str)]
    if audit_set_of(cell.metric) is None or not tags:  # a metric of the user's own, not an audit set
        return cell
    scored = sorted({a for t in tags for a in t.split(",") if a})
    configured = cell.audit_set in scored
    logged = bool(np.isfinite(cell.values).any())
    if not configured and not logged:
        others = ", ".join(scored) or "nothing"
        return replace(cell, shift_refusal=(
            f"None of the {cell.n} reruns of this recipe was scored on audit set '{cell.audit_set}' "
            f"(they were scored on {others}); no card can be carried over from another audit set."))
    if configured and cell.shift_refusal is not None:
        return replace(cell, shift_refusal=None)
    return cell


def _refuse_mixed_groups(sets, req: CardRequest) -> None:
    """Cells are (recipe identity, group values). When the user names group keys, one group
    value holding reruns of two recipe identities means the keys do not separate the recipes:
    the card would show two cells under one label. Refuse, naming the group."""
    if not req.group_by:
        return
    seen: dict[tuple, set] = {}
    for rs in sets:
        key = tuple(str(rs.group.get(g)) for g in req.group_by)
        seen.setdefault(key, set()).add(rs.recipe_id)
    for key, ids in seen.items():
        if len(ids) > 1:
            label = ", ".join(f"{g}={v}" for g, v in zip(req.group_by, key, strict=True))
            raise CardError(f"Runs of {len(ids)} recipes are mixed in the cell {label}; add a --group-by key "
                            f"that separates them or pick one with --recipe-id.")


def _split_audit(cells: Sequence[Cell], opts: CardOptions, split_audit: bool,
                 responsiveness: bool, n_splits: int, rng_seed: int) -> dict[str, Any]:
    """The ``split_audit`` and ``responsiveness`` sections asked for ({} when no cell is usable)."""
    sections: dict[str, Any] = {}
    usable = [c for c in cells if c.shift_refusal is None]
    audit_cells = [stats.AuditCell(c.values, t) for c in usable for t in opts.taus]
    if not audit_cells:
        return sections
    if split_audit:
        res = stats.held_out_split_audit(audit_cells, opts.eps, opts.delta, n_splits=n_splits,
                                         rng=np.random.default_rng(rng_seed),
                                         higher_is_better=opts.higher_is_better)
        sections["split_audit"] = res.to_dict()
    if responsiveness:
        n_max = max(c.n for c in audit_cells)
        sizes = sorted({int(s) for s in np.linspace(2, n_max, num=min(12, max(n_max - 1, 1)))})
        res = stats.evidence_responsiveness(audit_cells, sizes, n_splits=n_splits, eps=opts.eps,
                                            delta=opts.delta, rng=np.random.default_rng(rng_seed),
                                            higher_is_better=opts.higher_is_better)
        sections["responsiveness"] = res.to_dict()
    return sections
