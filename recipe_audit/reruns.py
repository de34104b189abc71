"""Resolve reruns to one result per seed: plain data, no store.

:func:`collect_reruns` groups the rows :func:`recipe_audit.store.read.read_runs` read into cells
(one recipe identity x one combination of the ``group_by`` values) and resolves each cell to a
:class:`RerunSet`: one result per seed, with the unfinished reruns (crashed, killed, still running,
NaN metric, metric missing, planned but never logged) and the duplicated seeds listed. A seed with
several finished results counts its worst one (a rerun of a seed is another draw, not a second
chance); :class:`Duplicate` says which run decided and whether the results disagree about a bar.
:meth:`RerunSet.digest` is the hash a card records to be checked against the store later.

This module imports neither MLflow nor SQLAlchemy: it works on a DataFrame, whatever read it.

Over 400 lines, kept whole: it has one subject, which run stands for each seed. About half is
:func:`collect_reruns`, whose docstring states those rules; :class:`RerunSet` and :class:`Duplicate`
are what it returns.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

__all__ = [
    "NEVER_LOGGED",
    "REASONS",
    "Duplicate",
    "QueryError",
    "RerunSet",
    "check_single_recipe",
    "collect_reruns",
    "metric_name",
    "only_crashed",
]

REASONS = ("failed", "killed", "running", "stale-running", "nan-metric", "missing-metric", "never-logged")
"""Why a seed is unfinished (the second item of each :attr:`RerunSet.unfinished` entry)."""

NEVER_LOGGED = "NEVER_LOGGED"
"""The :attr:`RerunSet.statuses` entry of a planned seed that no run logged."""


def only_crashed(frame: pd.DataFrame, no_metric_lead: str) -> bool:
    """Whether every run of ``frame`` (its ``status`` and ``error`` columns, as ``read_runs``
    gives them) crashed or was killed: none finished and none ended for want of the metric (an
    error that begins with ``no_metric_lead``). Such runs logged no card metric, and that says
    nothing about the metric's name: a card counts them as the failures they are, where a metric
    no finished run logged is refused as a likely misnomer.

    >>> runs = pd.DataFrame({"status": ["FAILED", "KILLED"], "error": ["OSError: disk", None]})
    >>> only_crashed(runs, "the task returned "), only_crashed(runs.iloc[:0], "the task returned ")
    (True, False)
    """
    if frame.empty or "status" not in frame.columns or not frame["status"].isin(["FAILED", "KILLED"]).all():
        return False
    errors = frame["error"].tolist() if "error" in frame.columns else []
    return not any(isinstance(e, str) and e.startswith(no_metric_lead) for e in errors)


class QueryError(ValueError):
    """The store (or the rows read from it) cannot answer the question as asked; the message says
    why in one sentence. Raised by the read path and by :func:`collect_reruns`."""


def metric_name(key: str) -> str:
    """A metric key without its ``metrics.`` (or ``metric.``) prefix."""
    for prefix in ("metrics.", "metric."):
        if key.startswith(prefix):
            return key[len(prefix) :]
    return key


def _norm_seed(value: Any) -> int | float | str:
    """A seed as an int when it is one (``"7"``, ``7.0``), else as given."""
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        f = float(value)
        return int(f) if f.is_integer() else f
    s = str(value).strip()
    try:
        return int(s)
    except ValueError:
        pass
    try:
        f = float(s)
    except ValueError:
        return s
    return int(f) if f.is_integer() else s


def _seed_order(seed: int | float | str) -> tuple[int, Any]:
    return (1, seed) if isinstance(seed, str) else (0, seed)


class Duplicate(NamedTuple):
    """A seed logged by more than one run of one cell, and how it was resolved.

    A *result* of a seed is a run that FINISHED and logged the metric (a finite value, or NaN/inf,
    which fails every bar). A re-run seed is another draw from the recipe, not a second chance: the
    seed counts its worst result (the lowest value, the highest for a lower-is-better metric; a
    non-finite value is worse than any), so it fails a bar when ANY of its results fails it. Runs
    that are not results (failed, killed, still running, finished without logging the metric) are
    attempts, not draws: a killed attempt followed by a finished rerun counts the finished one. A
    seed without any result counts its most recent run, unfinished.

    Fields:
        seed: the seed.
        run_ids: its runs, oldest first (by start time, then run id).
        values: the metric each run logged, NaN when absent.
        results: per run, whether it is a result (FINISHED with the metric logged).
        decided_by: the run the seed counts (the chosen run of :attr:`RerunSet.run_ids`).
        higher_is_better: direction of the metric.
    """

    seed: Any
    run_ids: tuple[str, ...]
    values: tuple[float, ...]
    results: tuple[bool, ...]
    decided_by: str
    higher_is_better: bool = True

    @property
    def counted_value(self) -> float:
        """The value of the run the seed counts (NaN when it is not a result)."""
        i = self.run_ids.index(self.decided_by)
        return self.values[i] if self.results[i] else math.nan

    def counts_as(self, tau: float) -> str:
        """What the seed is at ``tau``: ``fail``, ``pass``, or ``unfinished`` (no result)."""
        i = self.run_ids.index(self.decided_by)
        if not self.results[i]:
            return "unfinished"
        return "fail" if _fails(self.values[i], tau, self.higher_is_better) else "pass"

    def result_values(self) -> tuple[float, ...]:
        """The values of the seed's results, oldest first."""
        return tuple(v for v, ok in zip(self.values, self.results, strict=True) if ok)

    @property
    def nondeterministic(self) -> bool:
        """Whether the seed's results differ (non-deterministic training)."""
        return len({_value_key(v) for v in self.result_values()}) > 1

    def fails(self, tau: float) -> list[bool]:
        """Per result (in :meth:`result_values` order): does it fail the bar ``tau``?"""
        return [_fails(v, tau, self.higher_is_better) for v in self.result_values()]

    def disagrees(self, tau: float) -> bool:
        """Whether the seed's results disagree about the bar ``tau`` (some fail it, some pass):
        the seed then counts as failing, decided by :attr:`decided_by`."""
        verdicts = set(self.fails(tau))
        return len(verdicts) > 1


def _value_key(v: float) -> Any:
    return v if math.isfinite(v) else repr(v)


def _fails(value: float, tau: float, higher_is_better: bool) -> bool:
    """A result fails ``tau`` when it is non-finite or on the wrong side of the bar (equal passes)."""
    if not math.isfinite(value):
        return True
    return value < tau if higher_is_better else value > tau


def _badness(value: float, higher_is_better: bool) -> tuple[int, float]:
    """Sort key of a result: larger is worse (non-finite worst of all)."""
    if not math.isfinite(value):
        return (1, 0.0)
    return (0, -value if higher_is_better else value)


@dataclass(frozen=True, eq=False)
class RerunSet:
    """The reruns of one cell (recipe identity x group_by values), one result per seed.

    Fields:
        group: group_by key -> value of this cell.
        recipe_id: the ``recipe_audit.recipe_id`` tag, or None for runs without it (their identity
            is then their group_by values).
        metric_key: the metric resolved.
        seeds: the distinct seeds, sorted (ints where the seed is an integer), including planned
            seeds that no run logged.
        values: float array aligned with ``seeds``; the metric of the seed's chosen run, NaN when the
            seed is unfinished (read-only).
        run_ids: the chosen run per seed, None for a never-logged seed.
        statuses: MLflow status of the chosen run per seed (``NEVER_LOGGED`` when there is none).
        unfinished: (seed, reason, run_id or None) for every unfinished seed, reason in
            :data:`REASONS`.
        duplicates: a :class:`Duplicate` for every seed logged by more than one run (its runs,
            values, which of them are results, and the run the seed counts).
        disagreeing_duplicates: seeds whose results (FINISHED, metric logged) differ
            (non-determinism); whether they disagree about a bar is :meth:`Duplicate.disagrees`.
        sweep_run_ids: parent runs of this cell's runs.
        planned_seeds: the planned seeds that applied (from the argument or the parents' tags).
        higher_is_better: direction of the metric (used by :meth:`failures`).
        experiment: experiment name when known.
    """

    group: dict[str, Any]
    recipe_id: str | None
    metric_key: str
    seeds: tuple[Any, ...]
    values: np.ndarray
    run_ids: tuple[str | None, ...]
    statuses: tuple[str, ...]
    unfinished: tuple[tuple[Any, str, str | None], ...]
    duplicates: tuple[Duplicate, ...]
    disagreeing_duplicates: tuple[Any, ...]
    sweep_run_ids: tuple[str, ...]
    planned_seeds: tuple[Any, ...] = ()
    higher_is_better: bool = True
    experiment: str | None = None

    @property
    def n(self) -> int:
        """Number of distinct seeds launched or planned (the card's N: a planned seed that never
        logged counts, or the card would be biased toward success)."""
        return len(self.seeds)

    @property
    def finished_values(self) -> np.ndarray:
        """Metrics of the finished seeds (finite values only), in seed order."""
        return self.values[np.isfinite(self.values)]

    def failures(self, tau: float) -> int:
        """The card's k: seeds whose metric is below ``tau`` (above it when lower is better), plus
        every unfinished seed."""
        done = self.finished_values
        bad = int(np.count_nonzero(done < tau if self.higher_is_better else done > tau))
        return bad + len(self.unfinished)

    def digest(self) -> str:
        """sha256 (hex) of the resolved results, to check a card against the store later.

        The hashed text is, for each seed in ``seeds`` order, ``json.dumps([seed, run_id,
        repr(float(value))])`` followed by a newline, UTF-8 encoded.
        """
        rows = list(zip(self.seeds, self.run_ids, map(repr, map(float, self.values.tolist())), strict=True))
        return hashlib.sha256(_digest_text(rows).encode("utf-8")).hexdigest()


def _digest_text(rows: list[tuple[Any, Any, str]]) -> str:
    """``json.dumps([seed, run_id, value_repr]) + "\\n"`` for each row, joined: one ``json.dumps``
    of all the rows (``"[" + ", ".join(row texts) + "]"``) with the separators between rows turned
    into newlines. A row's own text can hold ``"], ["`` only inside a string; when the count of
    ``"], ["`` shows one, each row is written alone (the same text)."""
    if not rows:
        return ""
    whole = json.dumps(rows)
    if whole.count("], [") == len(rows) - 1:
        return whole[1:-1].replace("], [", "]\n[") + "\n"
    return "".join(json.dumps(list(r)) + "\n" for r in rows)


def _reason(status: str, logged: bool, value: float, start: int | None, now_ms: int, stale_ms: float) -> str:
    """Why a chosen run does not count as finished (it is not FINISHED with a finite metric)."""
    if status == "FINISHED":
        return "nan-metric" if logged and not math.isfinite(value) else "missing-metric"
    if status == "FAILED":
        return "failed"
    if status == "KILLED":
        return "killed"
    # RUNNING or SCHEDULED
    if start is not None and now_ms - start > stale_ms:
        return "stale-running"
    return "running"


def collect_reruns(
    frame: pd.DataFrame,
    metric_key: str,
    higher_is_better: bool = True,
    planned_seeds: Iterable[Any] | None = None,
    stale_after_s: float = 86400,
    now_ms: int | None = None,
    *,
    group_by: Sequence[str] | None = None,
) -> list[RerunSet]:
    """Group the rows of :func:`~recipe_audit.store.read.read_runs` into cells and resolve each to one
    result per seed.

    A cell is (recipe identity, values of the group_by keys). The recipe identity is the
    ``recipe_id`` column (the ``recipe_audit.recipe_id`` tag); runs without it (bring-your-own runs)
    take the identity of their group_by values. Runs of two identities are never pooled: runs with
    equal group_by values but different recipe ids are separate cells, and so are runs with and
    without a recipe id.

    Per seed, the chosen run is the seed's worst *result* (a FINISHED run that logged the metric):
    the lowest value (the highest when lower is better), a NaN/inf value being worse than any, ties
    going to the most recent run (by start time, then run id). A re-run seed is another draw, not a
    second chance, so the seed fails a bar when any of its results fails it; runs that are not
    results (failed, killed, running, metric never logged) are attempts and never outvote a result
    (see :class:`Duplicate`). When a seed has no result, the chosen run is its most recent run,
    and the seed is unfinished with reason
    ``failed`` (FAILED), ``killed`` (KILLED), ``running`` / ``stale-running`` (RUNNING or SCHEDULED,
    started less / more than ``stale_after_s`` before ``now_ms``), ``nan-metric`` (FINISHED, metric
    NaN or +/-inf) or ``missing-metric`` (FINISHED, metric never logged). Planned seeds no run logged
    are added as ``never-logged`` (run id None, value NaN). Planned seeds are ``planned_seeds`` when
    given (for every cell), else the union of the ``planned_seeds`` column (the sweep parents' tags)
    over the cell's runs. Seeds compare as ints when they are integers (``"7"`` == ``7``).

    Args:
        frame: output of :func:`~recipe_audit.store.read.read_runs` (needs ``run_id``, ``status``,
            ``start_time``, ``seed``, ``recipe_id``, the metric column and the group_by columns;
            ``parent_run_id``, ``planned_seeds`` and ``logged[<metric>]`` are used when present;
            without ``logged[<metric>]`` a NaN metric counts as missing).
        metric_key: the metric column.
        higher_is_better: direction: which result of a re-run seed is the worst, and the
            comparison of :meth:`RerunSet.failures`.
        planned_seeds: seeds planned for every cell, overriding the parents' tags.
        stale_after_s: age after which a RUNNING run counts as stale.
        now_ms: the present, in ms since the epoch (default: now).
        group_by: group_by keys (default: those ``read_runs`` recorded in ``frame.attrs``).

    Returns:
        One RerunSet per cell, sorted by (recipe_id, group values).

    Raises:
        QueryError: the metric or a group_by column is not in the frame, or a row has no seed.
    """
    metric = metric_name(metric_key)
    if metric not in frame.columns:
        raise QueryError(f"The runs were read without the metric {metric!r}; pass it to read_runs.")
    group_cols = tuple(frame.attrs.get("group_by", ()) if group_by is None else group_by)
    for g in group_cols:
        if g not in frame.columns:
            raise QueryError(f"The runs were read without the group key {g!r}; pass it to read_runs.")
    if frame.empty:
        return []
    if frame["seed"].isna().any():
        n_missing = int(frame["seed"].isna().sum())
        raise QueryError(
            f"{n_missing} of {len(frame)} runs have no seed, so they cannot be resolved per seed."
        )
    now = int(time.time() * 1000) if now_ms is None else int(now_ms)
    stale_ms = float(stale_after_s) * 1000.0
    forced = (
        None
        if planned_seeds is None
        else tuple(sorted({_norm_seed(s) for s in planned_seeds}, key=_seed_order))
    )

    n_rows = len(frame)
    run_id = frame["run_id"].to_numpy(dtype=object)
    status = frame["status"].to_numpy(dtype=object)
    start = frame["start_time"].astype("Float64").to_numpy(dtype=float, na_value=np.nan)
    value = frame[metric].to_numpy(dtype=float)
    logged_col = f"logged[{metric}]"
    logged = frame[logged_col].to_numpy(dtype=bool) if logged_col in frame.columns else ~np.isnan(value)
    parent = _column(frame, "parent_run_id", n_rows)
    planned_col = _column(frame, "planned_seeds", n_rows)
    recipe = _column(frame, "recipe_id", n_rows)

    # seeds as ints where they are integers, ranked in seed order
    seed_codes, seed_uniques = pd.factorize(frame["seed"].to_numpy(dtype=object))
    normalized_uniques = [_norm_seed(v) for v in seed_uniques.tolist()]
    uniq = sorted(set(normalized_uniques), key=_seed_order)
    rank_of = {v: i for i, v in enumerate(uniq)}
    seed_rank = np.array([rank_of[v] for v in normalized_uniques], dtype=np.int64)[seed_codes]

    # cells: (recipe identity, group values), numbered in sorted order of their keys
    key_columns = [recipe, *(frame[g].to_numpy(dtype=object) for g in group_cols)]
    combined = np.zeros(n_rows, dtype=np.int64)
    for column in key_columns:
        codes, uniques = pd.factorize(column)  # None and NaN -> -1
        codes = np.where(codes < 0, len(uniques), codes)
        combined = pd.factorize(combined * (len(uniques) + 1) + codes)[0]  # stays below n_rows
    _, cell_first, cell_raw = np.unique(combined, return_index=True, return_inverse=True)
    keys_of = [tuple(_cell_value(col[f]) for col in key_columns) for f in cell_first.tolist()]
    by_key = sorted(
        range(len(keys_of)),
        key=lambda i: tuple((v is not None, type(v).__name__, str(v)) for v in keys_of[i]),
    )
    cell_rank = np.empty(len(keys_of), dtype=np.int64)
    cell_rank[by_key] = np.arange(len(keys_of))
    cell = cell_rank[cell_raw]
    cell_keys = [keys_of[i] for i in by_key]  # key of cell number c

    # per (cell, seed): the row, or for a seed launched more than once the preferred row
    ok = (status == "FINISHED") & logged & np.isfinite(value)
    start_rank = np.where(np.isnan(start), -np.inf, start)
    order = np.lexsort((seed_rank, cell))
    c_sorted, s_sorted = cell[order], seed_rank[order]
    new_group = np.r_[True, (c_sorted[1:] != c_sorted[:-1]) | (s_sorted[1:] != s_sorted[:-1])]
    group_first = np.flatnonzero(new_group)
    group_last = np.r_[group_first[1:] - 1, n_rows - 1]
    chosen = order[group_first].copy()
    # a result: FINISHED with the metric logged (finite or not); the seed counts its worst result
    result = (status == "FINISHED") & logged
    hib = bool(higher_is_better)
    dup_rows: list[tuple[list[int], int]] = []  # a re-run seed's rows, oldest first, and its chosen row
    for g in np.flatnonzero(group_last > group_first).tolist():
        rows = sorted(
            order[group_first[g] : group_last[g] + 1].tolist(), key=lambda i: (start_rank[i], run_id[i])
        )
        chosen[g] = max(
            rows,
            key=lambda i: (bool(result[i]), _badness(float(value[i]), hib) if result[i] else (0, 0.0),
                           start_rank[i], run_id[i]),
        )
        dup_rows.append((rows, int(chosen[g])))
    chosen_cell = cell[chosen]
    cell_bounds = np.r_[0, np.flatnonzero(np.diff(chosen_cell)) + 1, len(chosen)]

    # everything per chosen run at once, then per cell only list slices
    chosen_seeds = [uniq[r] for r in seed_rank[chosen].tolist()]
    chosen_vals = np.where(ok[chosen], value[chosen], np.nan)
    chosen_ids = run_id[chosen].tolist()
    chosen_stats = status[chosen].tolist()
    unfinished_of: dict[int, list[tuple[Any, str, str | None]]] = {}
    for j in np.flatnonzero(~ok[chosen]).tolist():
        i = int(chosen[j])
        st = None if np.isnan(start[i]) else int(start[i])
        reason = _reason(status[i], bool(logged[i]), float(value[i]), st, now, stale_ms)
        unfinished_of.setdefault(int(cell[i]), []).append((chosen_seeds[j], reason, run_id[i]))
    duplicates_of: dict[int, list[Duplicate]] = {}
    disagree_of: dict[int, list[Any]] = {}
    for rows, decided in dup_rows:
        c = int(cell[rows[0]])
        seed = uniq[int(seed_rank[rows[0]])]
        dup = Duplicate(
            seed,
            tuple(run_id[i] for i in rows),
            tuple(float(value[i]) for i in rows),
            tuple(bool(result[i]) for i in rows),
            run_id[decided],
            hib,
        )
        duplicates_of.setdefault(c, []).append(dup)
        if dup.nondeterministic:
            disagree_of.setdefault(c, []).append(seed)
    parents_of = _members(cell, parent, by_identity=False)
    planned_of = _members(cell, planned_col, by_identity=True)
    planned_memo: dict[tuple[int, ...], tuple[Any, ...]] = {}  # ids of planned tuples -> their union

    experiment = frame.attrs.get("experiment")
    out: list[RerunSet] = []
    for c in range(len(cell_bounds) - 1):
        lo, hi = int(cell_bounds[c]), int(cell_bounds[c + 1])
        key = cell_keys[c]
        cell_seeds = chosen_seeds[lo:hi]
        vals = chosen_vals[lo:hi].copy()
        ids: list[str | None] = chosen_ids[lo:hi]
        stats: list[str] = chosen_stats[lo:hi]
        unfinished = unfinished_of.get(c, [])
        if forced is not None:
            planned = forced
        else:
            tuples = {id(p): p for p in planned_of.get(c, ())}
            memo_key = tuple(sorted(tuples))
            if memo_key not in planned_memo:
                union = {_norm_seed(seed) for p in tuples.values() for seed in p}
                planned_memo[memo_key] = tuple(sorted(union, key=_seed_order))
            planned = planned_memo[memo_key]
        never = set(planned).difference(cell_seeds)
        if never:
            for s in never:
                unfinished.append((s, "never-logged", None))
            merged = sorted(
                [(s, v, r, st) for s, v, r, st in zip(cell_seeds, vals.tolist(), ids, stats, strict=True)]
                + [(s, math.nan, None, NEVER_LOGGED) for s in never],
                key=lambda t: _seed_order(t[0]),
            )
            cell_seeds = [m[0] for m in merged]
            vals = np.array([m[1] for m in merged], dtype=float)
            ids = [m[2] for m in merged]
            stats = [m[3] for m in merged]
            position = {s: i for i, s in enumerate(cell_seeds)}
            unfinished.sort(key=lambda u: position[u[0]])
        vals.setflags(write=False)
        out.append(
            RerunSet(
                group=dict(zip(group_cols, key[1:], strict=True)),
                recipe_id=key[0],
                metric_key=metric,
                seeds=tuple(cell_seeds),
                values=vals,
                run_ids=tuple(ids),
                statuses=tuple(stats),
                unfinished=tuple(unfinished),
                duplicates=tuple(duplicates_of.get(c, ())),
                disagreeing_duplicates=tuple(disagree_of.get(c, ())),
                sweep_run_ids=tuple(sorted({p for p in parents_of.get(c, ()) if p})),
                planned_seeds=planned,
                higher_is_better=bool(higher_is_better),
                experiment=experiment,
            )
        )
    return out


def _members(cell: np.ndarray, values: np.ndarray, by_identity: bool) -> dict[int, list[Any]]:
    """Distinct non-None values of ``values`` per cell number (compared by identity or by value)."""
    if by_identity:
        ids = np.fromiter(map(id, values.tolist()), dtype=np.int64, count=len(values))
        uniq_ids, first = np.unique(ids, return_index=True)
        codes = np.searchsorted(uniq_ids, ids)
        distinct = values[first]
    else:
        codes, found = pd.factorize(values)  # None -> -1
        codes = np.where(codes < 0, len(found), codes)
        distinct = np.empty(len(found) + 1, dtype=object)
        distinct[:] = [*found.tolist(), None]
    width = len(distinct)
    out: dict[int, list[Any]] = {}
    for pair in np.unique(cell * width + codes).tolist():
        c, k = divmod(pair, width)
        if distinct[k] is not None:
            out.setdefault(c, []).append(distinct[k])
    return out


def _column(frame: pd.DataFrame, name: str, n_rows: int) -> np.ndarray:
    if name in frame.columns:
        return frame[name].to_numpy(dtype=object)
    return np.full(n_rows, None, dtype=object)


def _cell_value(v: Any) -> Any:
    """Group values as hashable cell keys: NaN and None are the same (absent)."""
    if v is None:
        return None
    if isinstance(v, float) and math.isnan(v):
        return None
    return v


def check_single_recipe(cells: Sequence[RerunSet], where: str | None = None) -> None:
    """Raise :class:`QueryError` unless every cell belongs to one recipe identity.

    For the command-line path that makes one card: the identity of a cell is its recipe id, or its
    group values when it has none. ``where`` names the place in the message (default: the
    experiment recorded on the cells).
    """
    if not cells:
        raise QueryError("There are no reruns to make a card from.")
    identities = {
        c.recipe_id if c.recipe_id is not None else ("group", tuple(sorted(c.group.items(), key=str)))
        for c in cells
    }
    if len(identities) > 1:
        if where is None:
            exp = cells[0].experiment
            where = f"experiment {exp!r}" if exp else "these runs"
        raise QueryError(
            f"Runs of {len(identities)} recipes are mixed in {where}; group them with --group-by "
            "or pick one with --recipe-id."
        )
