"""Read the runs of an experiment out of an MLflow tracking store, one row per run.

:func:`read_runs` returns one row per lifecycle-active MLflow run of an experiment, with only the
tags, params and latest metric values the caller asked for. The backend is chosen by URI scheme,
as MLflow chooses its own stores:

* SQL-backed stores (``sqlite:``, ``postgresql:``, ``mysql:``, ``mssql:``):
  :mod:`recipe_audit.store.read_sql` reads MLflow's own tables in a handful of queries (SQLite:
  whole-table scans when the experiment is most of the store);
* tracking servers (``http:``, ``https:``) that run recipe_audit's server app
  (:mod:`recipe_audit.store.server_app`, ``mlflow server --app-name recipe-audit``) answer the
  SQL reads themselves, on their own store (:mod:`recipe_audit.store.read_server`; asked once per
  server and process, and said once on stderr);
* other tracking servers (a stock MLflow server, Databricks' ``https:``):
  :func:`recipe_audit.store.read_client.read_rest` asks the server's ``runs/search`` endpoint for
  start-time slices of the experiment concurrently and reads the answers as plain JSON;
* file stores and ``databricks``: :func:`recipe_audit.store.read_client.read_client` pages through
  :meth:`mlflow.tracking.MlflowClient.search_runs`.

Every backend returns the same frame. Resolving the rows to one result per seed is
:func:`recipe_audit.reruns.collect_reruns`, which needs no store.

Key naming follows MLflow's: ``params.X``, ``tags.X``, ``metrics.X``, ``attributes.X`` (for example
``params.seed`` or ``tags.recipe_audit.seed``). Metric keys of :func:`read_runs` are bare metric
names (``accuracy/calibration``); a ``metrics.`` prefix is accepted and dropped.

The store layout written by recipe_audit is the contract of :mod:`recipe_audit.keys`.

Over 400 lines, kept whole: :func:`read_runs` and the frame it builds (``_frame``) are the column
contract every reader of the store relies on (names, dtypes, seed parsing, order), kept in one place.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from recipe_audit import keys
from recipe_audit.errors import closest_first
from recipe_audit.reruns import QueryError, metric_name
from recipe_audit.store import read_client, read_server, read_sql
from recipe_audit.store.raw_runs import ATTRIBUTES, RawRuns, objects, redact
from recipe_audit.store.read_sql import is_sql_uri

__all__ = ["AUTO", "QueryError", "is_http_uri", "is_sql_uri", "read_params", "read_runs"]

AUTO = "auto"
"""Default of ``filter_kind`` (see :func:`read_runs`) and of ``backend``."""

_PREFIXES = {
    "params.": "params",
    "param.": "params",
    "tags.": "tags",
    "tag.": "tags",
    "metrics.": "metrics",
    "metric.": "metrics",
    "attributes.": "attributes",
    "attribute.": "attributes",
}


# --------------------------------------------------------------------------------------------------
# keys and URIs


@dataclass(frozen=True)
class _Key:
    """A parsed ``params.X`` / ``tags.X`` / ``metrics.X`` / ``attributes.X`` key."""

    text: str  # as the caller wrote it: the frame column name
    kind: str  # params | tags | metrics | attributes
    name: str  # X


def _parse_key(text: str) -> _Key:
    for prefix, kind in _PREFIXES.items():
        if text.startswith(prefix) and len(text) > len(prefix):
            name = text[len(prefix) :]
            if kind == "attributes" and name not in ATTRIBUTES:
                raise QueryError(
                    f"Unknown run attribute {text!r}; the attributes are {', '.join(sorted(ATTRIBUTES))}."
                )
            return _Key(text, kind, name)
    raise QueryError(
        f"Key {text!r} must start with params., tags., metrics. or attributes. (MLflow's naming)."
    )


def is_http_uri(uri: str) -> bool:
    """True for a tracking server's ``http://`` or ``https://`` URI (read by the REST path)."""
    return uri.lower().startswith(("http://", "https://"))


def _resolve_uri(tracking_uri: str | None) -> str:
    if tracking_uri:
        return str(tracking_uri)
    import mlflow

    return mlflow.get_tracking_uri()


def _needed(
    metric_names: Sequence[str], other: Sequence[_Key]
) -> tuple[list[str], list[str], list[str], list[str]]:
    """Tag, param, metric and attribute names to read (the kind/parent/recipe tags always)."""
    buckets: dict[str, list[str]] = {
        "tags": [keys.TAG_KIND, keys.TAG_PARENT, keys.TAG_RECIPE_ID],
        "params": [],
        "metrics": list(metric_names),
        "attributes": [],
    }
    for k in other:
        if k.name not in buckets[k.kind]:
            buckets[k.kind].append(k.name)
    return buckets["tags"], buckets["params"], buckets["metrics"], buckets["attributes"]


def _keys_of_runs(raw: RawRuns, kind: str, run_ids: list[str]) -> list[str]:
    """The ``kind`` keys (``metrics``, ``params``, ``tags``) some of ``run_ids`` have, sorted: for a
    message that names what the runs a card reads do have (not what other runs in the
    experiment, such as recipe_audit's own card runs, logged). MLflow's own tags are left out."""
    found = set(raw.keys_of(kind, run_ids))
    return sorted(k for k in found if not (kind == "tags" and k.startswith("mlflow.")))


def _listing(names: list[str], limit: int = 5) -> str:
    shown = ", ".join(repr(k) for k in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


# --------------------------------------------------------------------------------------------------
# read_runs


def read_runs(
    tracking_uri: str | None,
    experiment_name: str,
    metric_keys: Sequence[str],
    seed_key: str = "tags." + keys.TAG_SEED,
    group_by: Sequence[str] = (),
    extra_keys: Sequence[str] = (),
    filter_kind: str | None = AUTO,
    *,
    backend: str = AUTO,
    require_seed: bool = True,
    require_metrics: bool = True,
    params: Sequence[str] = (),
    params_of: Callable[[pd.DataFrame], Iterable[str]] | None = None,
) -> pd.DataFrame:
    """One row per lifecycle-active run of ``experiment_name``, with the requested values only.

    Args:
        tracking_uri: MLflow tracking URI; ``None`` uses ``mlflow.get_tracking_uri()`` (which honours
            ``MLFLOW_TRACKING_URI``). SQL URIs (``sqlite``, ``postgresql``, ``mysql``, ``mssql``) are
            read directly from MLflow's tables; ``http(s)://`` tracking servers through
            recipe_audit's server app when they run it, else through their ``runs/search``
            endpoint, concurrently; anything else (``databricks``, ``file:`` or a
            plain path) through ``MlflowClient.search_runs``.
        experiment_name: the experiment.
        metric_keys: metric names (``accuracy/calibration``; a ``metrics.`` prefix is dropped); each
            becomes a float column holding the run's latest value (NaN when absent), plus a bool
            column ``logged[<key>]`` saying whether the run logged it at all (a logged NaN is NaN
            with ``logged`` True).
        seed_key: where the seed is, in MLflow naming (``tags.recipe_audit.seed``, ``params.seed``).
        group_by: keys (MLflow naming) whose values, with the recipe identity, define a cell; one
            column each, named as given.
        extra_keys: more keys (MLflow naming) to carry along as columns.
        filter_kind: which runs become rows. ``"auto"`` (default): if any run of the experiment is
            tagged ``recipe_audit.kind=rerun``, those runs; otherwise (runs logged by the user's own
            code) every run without a ``recipe_audit.kind`` tag that is not the parent of another
            run (so the card runs recipe_audit logs into a user's experiment never hide the user's
            runs). Another string: the runs of that kind. ``None``: every active run.
        backend: ``"auto"`` (by URI, and for a tracking server by what it offers), ``"sql"``
            (SQL URIs only), ``"server"`` (servers running recipe_audit's app), ``"rest"``
            (``http(s)://`` tracking servers only) or ``"client"`` (any URI).
        require_seed: raise when some rows have no value under ``seed_key`` (default); when False
            they keep ``seed=None`` (and :func:`~recipe_audit.reruns.collect_reruns` refuses them).
        require_metrics: raise when no selected run logged one of ``metric_keys`` (default); when
            False such a metric is an all-NaN column with ``logged`` False (a card on an audit set
            no recipe was scored on is then refused per cell: a card is valid only
            for the audit set it was computed on).
        params, params_of: the params ``params`` of a few runs only, read with the runs (on SQL
            stores in the same snapshot): ``params_of(frame)`` is called with the finished frame
            and names the runs; their values land in ``frame.attrs["params"]`` as
            ``{run id: {name: value}}`` (a name a run did not log is left out). Reading a param
            as a ``params.X`` key instead reads it for every run.

    Returns:
        A DataFrame sorted by (start_time, run_id), with columns ``run_id``, ``run_name``,
        ``status`` (FINISHED/FAILED/KILLED/RUNNING/SCHEDULED), ``start_time``, ``end_time`` (ms since
        the epoch, nullable Int64), ``parent_run_id``, ``seed`` (the raw value under ``seed_key``: a
        str for params and tags), ``recipe_id`` (the tag), ``sweep_id`` and ``planned_seeds`` (the
        parent run's ``recipe_audit.sweep_id`` tag and its ``recipe_audit.planned_seeds`` tag parsed
        to a tuple of ints), ``error`` (the ``recipe_audit.error`` tag of a run that did not finish),
        one float column per metric key, one ``logged[<key>]`` column per metric key, then one
        column per group_by and extra key (float for ``metrics.X``, else object). Absent values
        are None in object columns. MLflow's SQL stores write +/-inf as +/-DBL_MAX; both read back
        as +/-inf. ``frame.attrs`` holds ``experiment``, ``experiment_id``, ``uri`` (password
        removed), ``metric_keys``, ``seed_key``, ``group_by``, ``extra_keys``, ``path`` (the
        path that read it: ``"sql"``, ``"server"``, ``"rest"`` or ``"client"``), ``unlogged`` (metric key ->
        the sentence ``require_metrics`` raises, for each metric no selected run logged) and
        ``curtailment`` (the sweep parent runs' curtailment tags, by parent run id, for
        :func:`recipe_audit.store.curtailment.curtailment_records`).

    Raises:
        QueryError: unknown or deleted experiment, an experiment without runs, no run of the
            requested kind, a metric key no selected run has, a seed key missing on some runs, a
            malformed key, an unreadable ``planned_seeds`` tag, or a database without MLflow's tables.
    """
    uri = _resolve_uri(tracking_uri)
    metric_keys, group_by, extra_keys = (
        [k] if isinstance(k, str) else list(k) for k in (metric_keys, group_by, extra_keys)
    )
    metric_names = list(dict.fromkeys(metric_name(k) for k in metric_keys))
    if not metric_names:
        raise QueryError("Ask for at least one metric key.")
    seed = _parse_key(seed_key)
    group_keys = [_parse_key(k) for k in dict.fromkeys(group_by)]
    extra = [_parse_key(k) for k in dict.fromkeys(extra_keys) if k not in group_by]
    tag_names, param_names, metric_all, attr_names = _needed(metric_names, [seed, *group_keys, *extra])

    if backend == AUTO:
        backend = ("sql" if is_sql_uri(uri) else "client" if not is_http_uri(uri)
                   else "server" if read_server.offers_reads(uri) else "rest")
    wanted = (tag_names, param_names, metric_all, attr_names)

    def frame_of(raw: RawRuns) -> pd.DataFrame:
        frame = _frame(
            raw, experiment_name, metric_names, seed, [*group_keys, *extra], filter_kind, require_seed,
            require_metrics,
        )
        frame.attrs.update(
            experiment=experiment_name,
            experiment_id=raw.experiment_id,
            uri=redact(uri),
            metric_keys=tuple(metric_names),
            seed_key=seed.text,
            group_by=tuple(k.text for k in group_keys),
            extra_keys=tuple(k.text for k in extra),
            path=backend,
        )
        return frame

    def with_params(frame: pd.DataFrame, read: Callable[[list[str]], dict[str, dict[str, str]]]) -> pd.DataFrame:
        if params_of is not None:
            run_ids = list(dict.fromkeys(params_of(frame)))
            frame.attrs["params"] = read(run_ids) if run_ids and params else {r: {} for r in run_ids}
        return frame

    if backend == "sql":
        if not is_sql_uri(uri):
            raise QueryError(f"The SQL path needs a database URI, not {redact(uri)}.")
        with read_sql.snapshot(uri, experiment_name) as conn:  # the runs and their params as the store was at one moment
            frame = frame_of(read_sql.read_sql(uri, experiment_name, *wanted, conn))
            return with_params(frame, lambda ids: read_sql.read_params(uri, ids, params, conn))
    if backend == "server":
        if not is_http_uri(uri):
            raise QueryError(f"The server path needs an http(s) tracking server URI, not {redact(uri)}.")
        frame = frame_of(read_server.read_runs_server(uri, experiment_name, *wanted))
        return with_params(frame, lambda ids: read_server.read_params_server(uri, experiment_name, ids, params))
    if backend == "rest":
        if not is_http_uri(uri):
            raise QueryError(f"The REST path needs an http(s) tracking server URI, not {redact(uri)}.")
        raw = read_client.read_rest(uri, experiment_name, *wanted)
    elif backend == "client":
        raw = read_client.read_client(uri, experiment_name, *wanted)
    else:
        raise QueryError(f"Unknown backend {backend!r}; use 'auto', 'sql', 'server', 'rest' or 'client'.")
    # MLflow params cannot change once logged: read after the runs, they are the runs' own
    return with_params(frame_of(raw), lambda ids: read_client.read_params(uri, ids, params))


def read_params(
    tracking_uri: str | None, run_ids: Sequence[str], names: Sequence[str]
) -> dict[str, dict[str, str]]:
    """The params ``names`` of each of ``run_ids``, ``{run id: {name: value}}`` (a name a run did
    not log is left out): a point read for a few runs, where :func:`read_runs` with ``params.X``
    keys would read the params of every run. The backend is chosen by URI as :func:`read_runs`
    chooses it. MLflow params cannot change once logged, so a separate read gives the values the
    runs had when :func:`read_runs` read them."""
    uri = _resolve_uri(tracking_uri)
    if not run_ids or not names:
        return {r: {} for r in run_ids}
    if is_sql_uri(uri):
        return read_sql.read_params(uri, run_ids, names)
    return read_client.read_params(uri, run_ids, names)


def _frame(
    raw: RawRuns,
    experiment: str,
    metric_names: list[str],
    seed: _Key,
    other_keys: list[_Key],
    filter_kind: str | None,
    require_seed: bool,
    require_metrics: bool = True,
) -> pd.DataFrame:
    """Select the rows (kind filter), check them, and lay out the frame; shared by both paths."""
    cols = raw.columns
    n_all = len(cols["run_id"])
    if n_all == 0:
        raise QueryError(f"Experiment {experiment!r} has no runs.")
    kind = cols[f"tags.{keys.TAG_KIND}"]
    parent = cols[f"tags.{keys.TAG_PARENT}"]
    if filter_kind == AUTO:
        keep = kind == keys.KIND_RERUN
        wanted = (
            f"no rerun: none is tagged {keys.TAG_KIND}={keys.KIND_RERUN}, and none is an untagged run "
            "that is not the parent of another run"
        )
        if not keep.any():  # the user's own runs; recipe_audit's sweeps and cards are not among them
            parents = {p for p in parent.tolist() if p}
            keep = np.equal(kind, None) & np.array(
                [r not in parents for r in cols["run_id"].tolist()], dtype=bool
            )
    elif filter_kind is None:
        keep = np.ones(n_all, dtype=bool)
        wanted = ""
    else:
        keep = kind == filter_kind
        wanted = f"none tagged {keys.TAG_KIND}={filter_kind}"
    idx = np.flatnonzero(keep)
    if len(idx) == 0:
        runs = "run" if n_all == 1 else "runs"
        raise QueryError(f"Experiment {experiment!r} has {n_all} {runs} but {wanted}.")
    start_all = _int_array(cols["start_time"])
    idx = idx[_by_start_then_id(start_all[idx].to_numpy(dtype=np.int64, na_value=-1), cols["run_id"][idx])]

    def take(name: str) -> np.ndarray:
        return cols[name][idx]

    run_ids = take("run_id")
    unlogged: dict[str, str] = {}
    for name in metric_names:
        if not take(f"logged.{name}").any():
            # the metrics of the runs a card would read (the user's), not every run's of the experiment
            existing = closest_first(name, _keys_of_runs(raw, "metrics", run_ids.tolist()))
            closest = ", the closest first" if len(existing) > 1 else ""
            have = (f"; metrics logged there{closest}: {_listing(existing, 8)}" if existing
                    else "; no run there logged any metric")
            unlogged[name] = f"No run in experiment {experiment!r} has the metric {name!r}{have}."
            if require_metrics:
                raise QueryError(unlogged[name])

    if seed.kind == "metrics":
        seeds = objects(
            v if ok else None
            for v, ok in zip(
                take(f"metrics.{seed.name}").tolist(), take(f"logged.{seed.name}").tolist(), strict=True
            )
        )
    else:
        seeds = take(f"{seed.kind}.{seed.name}")
        seeds[seeds == ""] = None
    missing = run_ids[np.equal(seeds, None)]
    if len(missing) and require_seed:
        if len(missing) == len(run_ids):
            raise QueryError(
                f"None of the {len(run_ids)} runs in experiment {experiment!r} has the seed key {seed.text!r}"
                f"{_seed_candidates(raw, seed, run_ids.tolist())}."
            )
        raise QueryError(
            f"{len(missing)} of {len(run_ids)} runs in experiment {experiment!r} lack the seed key "
            f"{seed.text!r} (for example run {missing[0]})."
        )

    parents_of = take(f"tags.{keys.TAG_PARENT}")
    sweep_of = {pid: sweep for pid, (sweep, _planned) in raw.parents.items()}
    planned_of = {pid: _parse_planned(planned, pid) for pid, (_sweep, planned) in raw.parents.items()}
    parent_codes, found_parents = pd.factorize(parents_of)
    parent_ids = found_parents.tolist()
    status = take("status")
    error = np.full(len(idx), None, dtype=object)
    if raw.errors:
        for i in np.flatnonzero(status != "FINISHED").tolist():
            error[i] = raw.errors.get(run_ids[i])

    def obj(values: np.ndarray) -> pd.Series:
        return pd.Series(values, dtype=object, copy=False)

    out: dict[str, Any] = {
        "run_id": obj(run_ids),
        "run_name": obj(take("run_name")),
        "status": obj(status),
        "start_time": start_all[idx],
        "end_time": _int_array(take("end_time")),
        "parent_run_id": obj(parents_of),
        "seed": obj(seeds),
        "recipe_id": obj(take(f"tags.{keys.TAG_RECIPE_ID}")),
        "sweep_id": obj(_lookup(parent_codes, parent_ids, sweep_of)),
        "planned_seeds": obj(_lookup(parent_codes, parent_ids, planned_of)),
        "error": obj(error),
    }
    for name in metric_names:
        out[name] = take(f"metrics.{name}")
    for name in metric_names:
        out[f"logged[{name}]"] = take(f"logged.{name}")
    for k in other_keys:
        if k.text not in out:
            values = take(f"{k.kind}.{k.name}")
            out[k.text] = values if k.kind == "metrics" else obj(values)
    frame = pd.DataFrame(out)
    frame.attrs.update(unlogged=unlogged, curtailment=dict(raw.curtailment))
    return frame


def _seed_candidates(raw: RawRuns, seed: _Key, run_ids: list[str]) -> str:
    """What a wrong seed key could have been: the runs' params (and their tags or metrics when
    the key named one of those), keys with "seed" in their name first."""
    kinds = ["params"] + ([seed.kind] if seed.kind in ("tags", "metrics") else [])
    found = [f"{kind}.{k}" for kind in kinds for k in _keys_of_runs(raw, kind, run_ids)]
    if not found:
        return "; they have no params" if kinds == ["params"] else f"; they have no params or {seed.kind}"
    found.sort(key=lambda k: "seed" not in k.lower())  # stable: otherwise in kind, then name order
    return f"; the {' and '.join(kinds)} there: {_listing(found, 8)}"


def _int_array(values: np.ndarray) -> pd.arrays.IntegerArray:
    """Object array of ints and None -> nullable Int64."""
    mask = np.equal(values, None)
    return pd.arrays.IntegerArray(np.where(mask, 0, values).astype(np.int64), mask)


def _lookup(codes: np.ndarray, ids: list[Any], table: dict[str, Any]) -> np.ndarray:
    """``table[ids[code]]`` for each code of ``pd.factorize`` (None for code -1 or unknown ids)."""
    found = np.empty(len(ids) + 1, dtype=object)
    found[:] = [table.get(u) for u in ids] + [None]
    return found[codes]  # code -1 (None) picks the trailing None


def _by_start_then_id(start: np.ndarray, run_ids: np.ndarray) -> np.ndarray:
    """Order of rows by (start time, run id); the run ids are compared only when start times tie."""
    order = np.argsort(start, kind="stable")
    if len(order) > 1 and not np.all(np.diff(start[order]) > 0):
        order = np.lexsort((run_ids.astype(str), start))
    return order


def _parse_planned(value: str | None, parent_id: str) -> tuple[int, ...] | None:
    if value is None:
        return None
    try:
        seeds = json.loads(value)
        if not isinstance(seeds, list):
            raise ValueError
        out = []
        for s in seeds:
            if isinstance(s, bool) or not isinstance(s, (int, str)):
                raise ValueError
            out.append(int(s))
    except ValueError as exc:
        raise QueryError(
            f"Run {parent_id} has an unreadable {keys.TAG_PLANNED_SEEDS} tag {value[:80]!r} "
            "(expected a JSON list of ints)."
        ) from exc
    return tuple(out)

