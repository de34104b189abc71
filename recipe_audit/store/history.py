"""The store's history of an experiment's reruns, for the release gate.

:func:`recipe_audit.store.read.read_runs` reads what a card reads: the lifecycle-active runs and
each metric's latest value. The gate reads more, because the store's history is evidence:

- every run of the experiment, deleted ones included (MLflow's ``deleted`` lifecycle stage);
- every value of the metric each rerun logged, with its timestamp (MLflow keeps them all), so a
  value logged after the run ended (a rewrite) is seen, and the value a run had when it ended is
  the one read;
- the pass/fail tags recipe_audit wrote on each rerun when it ended
  (:func:`recipe_audit.keys.fails_tag`) and the direction each sweep recorded when it started.

:func:`read_history` returns a frame with the columns of ``read_runs`` (so the card's own
resolution, :func:`recipe_audit.reruns.collect_reruns`, reads it unchanged) plus the gate's.
It reads a database in SQL (:func:`recipe_audit.store.read_sql.read_history_sql`), a tracking
server that offers recipe_audit's reads through them (the same SQL, run on the server:
:mod:`recipe_audit.store.server_app`), and any other store through
:class:`mlflow.tracking.MlflowClient`; every backend gives the same :class:`History`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from recipe_audit import keys
from recipe_audit.reruns import QueryError
from recipe_audit.store.raw_runs import redact

# a value stamped up to this long after its run's end time is the run's own (clocks of the process
# that logged it and of the one that ended the run may differ slightly)
REWRITE_TOLERANCE_MS = 2000


@dataclass(frozen=True)
class Rewrite:
    """A metric value logged after its run ended."""

    run_id: str
    seed: Any
    value: float
    logged_ms: int
    end_ms: int


@dataclass
class History:
    """What :func:`read_history` read: ``frame`` (one row per rerun, deleted ones included),
    ``rewrites``, and each sweep parent's recorded direction (``True``: higher is better; parent
    run id -> value, only for parents that recorded one)."""

    frame: pd.DataFrame
    rewrites: list[Rewrite] = field(default_factory=list)
    directions: dict[str, bool] = field(default_factory=dict)
    sweep_ids: dict[str, str | None] = field(default_factory=dict)  # parent run id -> sweep id


HISTORY_TAGS = (keys.TAG_KIND, keys.TAG_SEED, keys.TAG_PARENT, keys.TAG_RECIPE_ID, keys.TAG_ERROR,
                keys.TAG_SWEEP_ID, keys.TAG_AUDIT_SETS, keys.TAG_PLANNED_SEEDS, keys.TAG_HIGHER_IS_BETTER,
                keys.TAG_CURTAILMENT, keys.TAG_DUPLICATE_OF, keys.TAG_CREATE_TOKEN)
"""The tags :func:`read_history` reads of every run (with the fails tag and a seed tag it is asked for)."""


class Point(NamedTuple):
    """One logged value of a metric, as MLflow's ``get_metric_history`` gives it."""

    value: float
    timestamp: int
    step: int


class Info(NamedTuple):
    """The run attributes :func:`read_history` reads."""

    run_id: str
    run_name: str | None
    status: str
    start_time: int | None
    end_time: int | None
    lifecycle_stage: str


class HistoryRun(NamedTuple):
    """One run of the experiment as :func:`read_history` reads it: its attributes, the tags and
    params asked for (a name the run has not is left out), whether it logged the metric, whether
    it holds no param and no metric at all (``empty``: what tells a copy a retried request made
    from a run; the SQL read asks it of runs tagged as such copies only, False for the others) and
    (SQL reads) the metric's every value in MLflow's order (timestamp, step, value)."""

    info: Info
    tags: dict[str, str]
    params: dict[str, str]
    has_metric: bool
    empty: bool
    history: tuple[Point, ...] | None = None


@dataclass
class HistoryRead:
    """What a backend read for :func:`read_history`: every run of the experiment, deleted ones
    included, and ``history_of(run id)``, the metric's values of a run that logged it."""

    experiment_id: str
    runs: list[HistoryRun]
    history_of: Callable[[str], Sequence[Point]]

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> HistoryRead:
        """The read from its JSON form, as :func:`recipe_audit.store.read_sql.read_history_sql` builds it
        (what the server app sends)."""
        runs = [HistoryRun(Info(*info), tags, params, has, empty, tuple(Point(float(v), t, s) for v, t, s in points))
                for info, tags, params, has, empty, points in doc["runs"]]
        return cls(str(doc["experiment_id"]), runs, _lookup({r.info.run_id: r.history for r in runs}))


def _lookup(histories: dict[str, tuple[Point, ...] | None]) -> Callable[[str], Sequence[Point]]:
    return lambda run_id: histories.get(run_id) or ()


def history_names(metric: str, seed_key: str, fails_tag: str | None, params: Sequence[str]) -> tuple[list[str], list[str]]:
    """The tag and param names :func:`read_history` reads of each run."""
    kind, _, name = seed_key.partition(".")
    tags = list(dict.fromkeys([*HISTORY_TAGS, *([fails_tag] if fails_tag else []),
                               *([name] if kind == "tags" and name else [])]))
    names = list(dict.fromkeys([*params, *([name] if kind == "params" and name else [])]))
    return tags, names


def _search_all(client, experiment_id: str) -> list[Any]:
    from mlflow.entities import ViewType

    runs: list[Any] = []
    token = None
    while True:
        page = client.search_runs([experiment_id], filter_string="", run_view_type=ViewType.ALL,
                                  max_results=1000, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def read_history_client(tracking_uri: str, experiment: str, metric: str, tag_names: Sequence[str],
                        param_names: Sequence[str]) -> HistoryRead:
    """Through :class:`mlflow.tracking.MlflowClient` (any tracking URI): ``search_runs`` over every
    run, then ``get_metric_history`` for each rerun that logged the metric, when it is asked for."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        raise QueryError(f"No experiment named {experiment!r} in {redact(tracking_uri)}.")
    runs = [HistoryRun(Info(r.info.run_id, r.info.run_name, r.info.status, r.info.start_time, r.info.end_time,
                            r.info.lifecycle_stage),
                       {k: r.data.tags[k] for k in tag_names if k in r.data.tags},
                       {k: r.data.params[k] for k in param_names if k in r.data.params},
                       metric in r.data.metrics, not r.data.params and not r.data.metrics)
            for r in _search_all(client, exp.experiment_id)]
    return HistoryRead(str(exp.experiment_id), runs,
                       lambda run_id: [Point(m.value, m.timestamp, m.step)
                                       for m in client.get_metric_history(run_id, metric)])


def _copy_of_a_run(run: HistoryRun, by_id: dict[str, HistoryRun]) -> bool:
    """Whether ``run`` is a second copy of another run that a retried request created
    (``recipe_audit/store/retrying.py``): tagged so, naming a run of the experiment created with the
    same token, and holding nothing (no param, no metric). A rerun retagged as a copy still counts."""
    tags = run.tags
    of = by_id.get(tags.get(keys.TAG_DUPLICATE_OF, ""))
    token = tags.get(keys.TAG_CREATE_TOKEN)
    return (tags.get(keys.TAG_KIND) == keys.KIND_DUPLICATE and of is not None and token is not None
            and of.tags.get(keys.TAG_CREATE_TOKEN) == token and run.empty)


def _planned(value: str | None) -> tuple[int, ...] | None:
    if value is None:
        return None
    try:
        seeds = json.loads(value)
        return tuple(int(s) for s in seeds) if isinstance(seeds, list) else None
    except (ValueError, TypeError):
        return None


def read_history(tracking_uri: str, experiment: str, metric: str, *, seed_key: str = "tags." + keys.TAG_SEED,
                 fails_tag: str | None = None, params: Sequence[str] = ()) -> History:
    """Every rerun of ``experiment`` (deleted ones included) with ``metric`` as it was when the run
    ended, the rewrites of it, the tag ``fails_tag`` (a column ``fails_tag``), the params ``params``
    (a column ``params.X`` each, None where not logged) and the sweeps' recorded directions. Raises ``QueryError`` (one sentence) for an unknown experiment, an
    experiment without reruns, or a rerun without its seed.

    The backend is chosen by URI as :func:`recipe_audit.store.read.read_runs` chooses it: a
    database is read in SQL (:func:`recipe_audit.store.read_sql.read_history_sql`, one snapshot),
    a tracking server that offers recipe_audit's reads answers the same SQL itself
    (:mod:`recipe_audit.store.read_server`), anything else goes through ``MlflowClient``."""
    from recipe_audit.store import read_server, read_sql

    tag_names, param_names = history_names(metric, seed_key, fails_tag, params)
    if read_sql.is_sql_uri(tracking_uri):
        read = HistoryRead.from_json(read_sql.read_history_sql(tracking_uri, experiment, metric, tag_names,
                                                               param_names))
    elif read_server.offers_reads(tracking_uri):
        read = HistoryRead.from_json(read_server.read_history_server(tracking_uri, experiment, metric, tag_names,
                                                                     param_names))
    else:
        read = read_history_client(tracking_uri, experiment, metric, tag_names, param_names)
    return _history(read, tracking_uri, experiment, metric, seed_key, fails_tag, params)


def _history(read: HistoryRead, tracking_uri: str, experiment: str, metric: str, seed_key: str,
             fails_tag: str | None, params: Sequence[str]) -> History:
    """The gate's frame and records from what a backend read (the same whichever backend)."""
    runs = read.runs
    by_id = {r.info.run_id: r for r in runs}
    kind_of = {r.info.run_id: r.tags.get(keys.TAG_KIND) for r in runs}
    # a rerun: tagged so, or carrying a rerun's seed tag under another kind than a sweep's or an
    # acceptance cell's (a rerun retagged as something else still counts)
    reruns = [r for r in runs if kind_of[r.info.run_id] == keys.KIND_RERUN
              or (keys.TAG_SEED in r.tags and kind_of[r.info.run_id] not in (keys.KIND_SWEEP,
                                                                             keys.KIND_ACCEPTANCE_CELL)
                  and not _copy_of_a_run(r, by_id))]
    if not reruns:  # runs logged by the user's own code: those without a kind that are nobody's parent
        parents = {r.tags.get(keys.TAG_PARENT) for r in runs}
        reruns = [r for r in runs if kind_of[r.info.run_id] is None and r.info.run_id not in parents]
    if not reruns:
        raise QueryError(f"Experiment {experiment!r} holds no rerun.")
    kind, _, name = seed_key.partition(".")
    if kind not in ("tags", "params") or not name:
        raise QueryError(f"The seed key {seed_key!r} must be tags.X or params.X.")

    rows, rewrites = [], []
    for r in reruns:
        info, tags = r.info, r.tags
        seed = (tags if kind == "tags" else r.params).get(name)
        if seed in (None, ""):
            raise QueryError(f"Run {info.run_id} of experiment {experiment!r} has no seed under {seed_key!r}.")
        value, logged, history = np.nan, False, ()
        if r.has_metric:
            history = tuple(read.history_of(info.run_id))
            logged = bool(history)
            own = [m for m in history if _while_open(info, m)]
            rewrites += [Rewrite(info.run_id, seed, float(m.value), int(m.timestamp), int(info.end_time))
                         for m in history if not _while_open(info, m)]
            if own:
                value = float(max(own, key=lambda m: (m.step, m.timestamp)).value)
            else:
                logged = False
        parent = tags.get(keys.TAG_PARENT)
        ptags = by_id[parent].tags if parent in by_id else {}
        rows.append({
            "run_id": info.run_id, "run_name": info.run_name, "status": info.status,
            "start_time": info.start_time, "end_time": info.end_time, "parent_run_id": parent,
            "seed": seed, "recipe_id": tags.get(keys.TAG_RECIPE_ID),
            "sweep_id": ptags.get(keys.TAG_SWEEP_ID), "planned_seeds": _planned(ptags.get(keys.TAG_PLANNED_SEEDS)),
            "error": tags.get(keys.TAG_ERROR) if info.status != "FINISHED" else None,
            metric: value, f"logged[{metric}]": logged,
            "tags." + keys.TAG_SWEEP_ID: tags.get(keys.TAG_SWEEP_ID),
            "tags." + keys.TAG_AUDIT_SETS: tags.get(keys.TAG_AUDIT_SETS),
            "lifecycle_stage": info.lifecycle_stage,
            "fails_tag": tags.get(fails_tag) if fails_tag else None,
            "history": tuple(float(m.value) for m in history if _while_open(info, m)),
            **{f"params.{p}": r.params.get(p) for p in params},
        })
    frame = pd.DataFrame(rows)
    frame["start_time"] = frame["start_time"].astype("Int64")
    frame["end_time"] = frame["end_time"].astype("Int64")
    frame[metric] = frame[metric].astype(float)
    frame[f"logged[{metric}]"] = frame[f"logged[{metric}]"].astype(bool)
    frame = frame.sort_values(["start_time", "run_id"], kind="stable").reset_index(drop=True)
    frame.attrs.update(experiment=experiment, experiment_id=read.experiment_id, uri=redact(tracking_uri),
                       metric_keys=(metric,), seed_key=seed_key, group_by=(), extra_keys=(), path="history")
    parents = {p for p in frame["parent_run_id"].tolist() if p}
    directions = {}
    for p in parents:
        recorded = by_id[p].tags.get(keys.TAG_HIGHER_IS_BETTER) if p in by_id else None
        if recorded in ("true", "false"):
            directions[p] = recorded == "true"
    sweep_ids = {p: by_id[p].tags.get(keys.TAG_SWEEP_ID) if p in by_id else None for p in parents}
    # the sweeps' curtailment records, read with the runs (recipe_audit.store.curtailment.curtailment_records)
    frame.attrs["curtailment"] = {p: by_id[p].tags[keys.TAG_CURTAILMENT] for p in parents
                                  if p in by_id and by_id[p].tags.get(keys.TAG_CURTAILMENT)}
    return History(frame, rewrites, directions, sweep_ids)


def _while_open(info, m) -> bool:
    """Whether the metric value ``m`` was logged while its run was open (else it is a rewrite)."""
    ended = info.end_time if info.status not in ("RUNNING", "SCHEDULED") else None
    return ended is None or m.timestamp is None or m.timestamp <= ended + REWRITE_TOLERANCE_MS
