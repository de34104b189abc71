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
Everything goes through :class:`mlflow.tracking.MlflowClient` (any tracking URI).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

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


def _copy_of_a_run(run, by_id: dict[str, Any]) -> bool:
    """Whether ``run`` is a second copy of another run that a retried request created
    (``recipe_audit/store/retrying.py``): tagged so, naming a run of the experiment created with the
    same token, and holding nothing (no param, no metric). A rerun retagged as a copy still counts."""
    tags = run.data.tags
    of = by_id.get(tags.get(keys.TAG_DUPLICATE_OF, ""))
    token = tags.get(keys.TAG_CREATE_TOKEN)
    return (tags.get(keys.TAG_KIND) == keys.KIND_DUPLICATE and of is not None and token is not None
            and of.data.tags.get(keys.TAG_CREATE_TOKEN) == token and not run.data.params and not run.data.metrics)


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
    experiment without reruns, or a rerun without its seed."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        raise QueryError(f"No experiment named {experiment!r} in {redact(tracking_uri)}.")
    runs = _search_all(client, exp.experiment_id)
    by_id = {r.info.run_id: r for r in runs}
    kind_of = {r.info.run_id: r.data.tags.get(keys.TAG_KIND) for r in runs}
    # a rerun: tagged so, or carrying a rerun's seed tag under another kind than a sweep's or an
    # acceptance cell's (a rerun retagged as something else still counts)
    reruns = [r for r in runs if kind_of[r.info.run_id] == keys.KIND_RERUN
              or (keys.TAG_SEED in r.data.tags and kind_of[r.info.run_id] not in (keys.KIND_SWEEP,
                                                                                  keys.KIND_ACCEPTANCE_CELL)
                  and not _copy_of_a_run(r, by_id))]
    if not reruns:  # runs logged by the user's own code: those without a kind that are nobody's parent
        parents = {r.data.tags.get(keys.TAG_PARENT) for r in runs}
        reruns = [r for r in runs if kind_of[r.info.run_id] is None and r.info.run_id not in parents]
    if not reruns:
        raise QueryError(f"Experiment {experiment!r} holds no rerun.")
    kind, _, name = seed_key.partition(".")
    if kind not in ("tags", "params") or not name:
        raise QueryError(f"The seed key {seed_key!r} must be tags.X or params.X.")

    rows, rewrites = [], []
    for r in reruns:
        info, tags = r.info, r.data.tags
        seed = (tags if kind == "tags" else r.data.params).get(name)
        if seed in (None, ""):
            raise QueryError(f"Run {info.run_id} of experiment {experiment!r} has no seed under {seed_key!r}.")
        value, logged, history = np.nan, False, ()
        if metric in r.data.metrics:
            history = tuple(client.get_metric_history(info.run_id, metric))
            logged = bool(history)
            own = [m for m in history if _while_open(info, m)]
            rewrites += [Rewrite(info.run_id, seed, float(m.value), int(m.timestamp), int(info.end_time))
                         for m in history if not _while_open(info, m)]
            if own:
                value = float(max(own, key=lambda m: (m.step, m.timestamp)).value)
            else:
                logged = False
        parent = tags.get(keys.TAG_PARENT)
        ptags = by_id[parent].data.tags if parent in by_id else {}
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
            **{f"params.{p}": r.data.params.get(p) for p in params},
        })
    frame = pd.DataFrame(rows)
    frame["start_time"] = frame["start_time"].astype("Int64")
    frame["end_time"] = frame["end_time"].astype("Int64")
    frame[metric] = frame[metric].astype(float)
    frame[f"logged[{metric}]"] = frame[f"logged[{metric}]"].astype(bool)
    frame = frame.sort_values(["start_time", "run_id"], kind="stable").reset_index(drop=True)
    frame.attrs.update(experiment=experiment, experiment_id=exp.experiment_id, uri=redact(tracking_uri),
                       metric_keys=(metric,), seed_key=seed_key, group_by=(), extra_keys=(), path="history")
    parents = {p for p in frame["parent_run_id"].tolist() if p}
    directions = {}
    for p in parents:
        recorded = by_id[p].data.tags.get(keys.TAG_HIGHER_IS_BETTER) if p in by_id else None
        if recorded in ("true", "false"):
            directions[p] = recorded == "true"
    sweep_ids = {p: by_id[p].data.tags.get(keys.TAG_SWEEP_ID) if p in by_id else None for p in parents}
    # the sweeps' curtailment records, read with the runs (recipe_audit.store.curtailment.curtailment_records)
    frame.attrs["curtailment"] = {p: by_id[p].data.tags[keys.TAG_CURTAILMENT] for p in parents
                                  if p in by_id and by_id[p].data.tags.get(keys.TAG_CURTAILMENT)}
    return History(frame, rewrites, directions, sweep_ids)


def _while_open(info, m) -> bool:
    """Whether the metric value ``m`` was logged while its run was open (else it is a rewrite)."""
    ended = info.end_time if info.status not in ("RUNNING", "SCHEDULED") else None
    return ended is None or m.timestamp is None or m.timestamp <= ended + REWRITE_TOLERANCE_MS
