"""Reading runs through MLflow's client side: ``MlflowClient.search_runs`` (file stores,
``databricks``, any URI) and, for tracking servers (``http:``, ``https:``), the server's
``runs/search`` endpoint asked for start-time slices of the experiment concurrently and read as
plain JSON. Both give the :class:`~recipe_audit.store.raw_runs.RawRuns` the SQL path gives.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from recipe_audit import keys
from recipe_audit.reruns import QueryError
from recipe_audit.store.raw_runs import RawRuns, floats, objects, redact

__all__ = ["PAGE_SIZE", "REST_PAGE", "REST_SLICES", "SMALL_PAGE_SIZE", "host_creds", "read_client", "read_params", "read_rest"]

PAGE_SIZE = 50_000
"""Runs per ``search_runs`` page (MLflow's SEARCH_MAX_RESULTS_THRESHOLD)."""
SMALL_PAGE_SIZE = 1_000
"""Runs per page for servers that refuse larger pages (MLflow's SEARCH_MAX_RESULTS_DEFAULT)."""
REST_THREADS = 4
"""Concurrent requests to a tracking server (the default of ``mlflow server --workers``)."""
REST_SLICES = 16
"""Start-time slices of an experiment read over REST (uneven slices balance out)."""
REST_PAGE = 500
"""Runs per REST request."""


def read_client(
    uri: str,
    experiment_name: str,
    tag_names: list[str],
    param_names: list[str],
    metric_names: list[str],
    attr_names: list[str],
) -> RawRuns:
    """Read through ``MlflowClient.search_runs`` (paged), for REST servers and file stores."""
    from mlflow.entities import ViewType
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment_name)
    if exp is None:
        raise QueryError(f"No experiment named {experiment_name!r} in {redact(uri)}.")
    if exp.lifecycle_stage != "active":
        raise QueryError(f"Experiment {experiment_name!r} in {redact(uri)} is deleted.")
    runs: list[Any] = []
    token: str | None = None
    page_size = PAGE_SIZE
    while True:
        try:
            page = client.search_runs(
                [exp.experiment_id],
                filter_string="",
                run_view_type=ViewType.ACTIVE_ONLY,
                max_results=page_size,
                page_token=token,
            )
        except MlflowException:
            if token is not None or page_size == SMALL_PAGE_SIZE:
                raise
            page_size = SMALL_PAGE_SIZE  # a server that caps pages lower than MLflow's own
            continue
        runs.extend(page)
        token = page.token
        if not token:
            break
    infos = [run.info for run in runs]
    tags = [run.data.tags for run in runs]
    params = [run.data.params for run in runs]
    metrics = [run.data.metrics for run in runs]
    return _raw_from_runs(
        client, str(exp.experiment_id), infos, tags, params, metrics, tag_names, param_names, metric_names,
        attr_names,
    )


def _raw_from_runs(
    client: Any,
    experiment_id: str,
    infos: Sequence[Any],
    tags: Sequence[dict[str, str]],
    params: Sequence[dict[str, str]],
    metrics: Sequence[dict[str, float]],
    tag_names: list[str],
    param_names: list[str],
    metric_names: list[str],
    attr_names: list[str],
) -> RawRuns:
    """The raw table of runs read as MLflow's run infos and tag, param and metric dicts."""
    from mlflow.exceptions import MlflowException

    cols: dict[str, np.ndarray] = {
        "run_id": objects(i.run_id for i in infos),
        "run_name": objects(i.run_name for i in infos),
        "status": objects(i.status for i in infos),
        "start_time": objects(i.start_time for i in infos),
        "end_time": objects(i.end_time for i in infos),
    }
    for a in attr_names:
        values = [getattr(i, a) for i in infos]
        if a == "experiment_id":
            values = [None if v is None else str(v) for v in values]
        cols[f"attributes.{a}"] = objects(values)
    for n in tag_names:
        cols[f"tags.{n}"] = objects(d.get(n) for d in tags)
    for n in param_names:
        cols[f"params.{n}"] = objects(d.get(n) for d in params)
    for n in metric_names:
        cols[f"metrics.{n}"] = floats(d.get(n) for d in metrics)
        cols[f"logged.{n}"] = np.array([n in d for d in metrics], dtype=bool)
    raw = RawRuns(experiment_id, cols)
    raw.errors = {
        i.run_id: d[keys.TAG_ERROR]
        for i, d in zip(infos, tags, strict=True)
        if i.status != "FINISHED" and d.get(keys.TAG_ERROR) is not None
    }
    by_id = dict(zip(cols["run_id"].tolist(), tags, strict=True))
    for pid in sorted({p for p in cols[f"tags.{keys.TAG_PARENT}"].tolist() if p}):
        ptags = by_id.get(pid)
        if ptags is None:  # a parent in another experiment, or deleted
            try:
                ptags = client.get_run(pid).data.tags
            except MlflowException:
                ptags = {}
        raw.parents[pid] = (ptags.get(keys.TAG_SWEEP_ID), ptags.get(keys.TAG_PLANNED_SEEDS))
        if ptags.get(keys.TAG_CURTAILMENT):
            raw.curtailment[pid] = ptags[keys.TAG_CURTAILMENT]
    by_kind = {"metrics": metrics, "params": params, "tags": tags}

    def keys_of(kind: str, run_ids: list[str]) -> set[str]:
        wanted = set(run_ids)
        return {k for i, d in zip(infos, by_kind[kind], strict=True) if i.run_id in wanted for k in d}

    raw.keys_of = keys_of
    return raw


# --------------------------------------------------------------------------------------------------
# REST path: MLflow's runs/search endpoint, concurrently, parsed as plain JSON


class _Info(NamedTuple):
    """The run-info fields read from a ``runs/search`` response, as MLflow's RunInfo gives them."""

    run_id: str
    run_name: str
    status: str
    start_time: int
    end_time: int | None
    user_id: str
    artifact_uri: str
    lifecycle_stage: str
    experiment_id: str


def _info_from_json(info: dict[str, Any]) -> _Info:
    """Absent fields as MLflow's RunInfo.from_proto fills them: "" and 0, an end time of 0 as None."""
    return _Info(
        info.get("run_id") or info.get("run_uuid", ""),
        info.get("run_name", ""),
        info.get("status", "RUNNING"),
        int(info.get("start_time", 0)),
        int(info.get("end_time", 0)) or None,
        info.get("user_id", ""),
        info.get("artifact_uri", ""),
        info.get("lifecycle_stage", ""),
        str(info.get("experiment_id", "")),
    )


def _rest_search(creds: Any, body: dict[str, Any]) -> dict[str, Any]:
    """One ``runs/search`` request, its JSON answer as dicts (no protobuf messages, no entities)."""
    from mlflow.utils.rest_utils import http_request, verify_rest_response

    endpoint = "/api/2.0/mlflow/runs/search"
    return verify_rest_response(http_request(creds, endpoint, "POST", json=body), endpoint).json()


def _rest_slices(creds: Any, experiment_id: str) -> list[str]:
    """Filters that split the experiment's active runs by start time into disjoint slices.

    The first and last start times come from two one-run searches; the range between them is cut
    into ``REST_SLICES`` equal parts, the first slice open below and the last open above, so
    every run is in exactly one slice (MLflow gives every run a start time).
    """
    ends = []
    for order in ("ASC", "DESC"):
        body = {"experiment_ids": [experiment_id], "run_view_type": "ACTIVE_ONLY", "max_results": 1,
                "order_by": [f"attributes.start_time {order}"]}
        runs = _rest_search(creds, body).get("runs", [])
        if not runs:
            return []
        ends.append(int(runs[0]["info"].get("start_time", 0)))
    lo, hi = ends
    n = max(1, min(REST_SLICES, hi - lo + 1))
    cuts = sorted({lo + (hi - lo + 1) * i // n for i in range(1, n)})
    bounds = [None, *cuts, None]
    filters = []
    for below, above in itertools.pairwise(bounds):
        parts = [] if below is None else [f"attributes.start_time >= {below}"]
        parts += [] if above is None else [f"attributes.start_time < {above}"]
        filters.append(" AND ".join(parts))
    return filters


def host_creds(uri: str) -> Any:
    """MLflow's credentials for the tracking server at ``uri`` (the ones its REST client sends:
    ``MLFLOW_TRACKING_USERNAME``/``_PASSWORD`` or a token, TLS settings), for requests made here."""
    from mlflow.tracking._tracking_service.utils import _get_store

    return _get_store(uri).get_host_creds()


def read_rest(
    uri: str,
    experiment_name: str,
    tag_names: list[str],
    param_names: list[str],
    metric_names: list[str],
    attr_names: list[str],
) -> RawRuns:
    """Read a tracking server's runs through its REST API, the slices of the experiment concurrently.

    MLflow's ``runs/search`` cannot leave anything out: every run comes with all its params, tags
    and latest metrics, and the server's time per run hardly depends on the page size (most of it
    loading the run, the rest writing JSON; ``bench/bench_query_rest.py``, docs/benchmarks.md).
    ``MlflowClient.search_runs`` asks for one page after another and turns the answer into
    protobuf messages and entities; here the experiment is split by start time into disjoint
    slices (:func:`_rest_slices`) whose pages are fetched by ``REST_THREADS`` threads at once,
    ``REST_PAGE`` runs a request (short requests: a uvicorn worker that does not answer its
    supervisor's health check for 5 s is killed, and with it a long request), and the JSON is read
    as plain dicts. The frame is the one :func:`read_client` reads (a test compares them).
    """
    from concurrent.futures import ThreadPoolExecutor

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment_name)
    if exp is None:
        raise QueryError(f"No experiment named {experiment_name!r} in {redact(uri)}.")
    if exp.lifecycle_stage != "active":
        raise QueryError(f"Experiment {experiment_name!r} in {redact(uri)} is deleted.")
    creds = host_creds(uri)
    experiment_id = str(exp.experiment_id)

    def fetch(filter_string: str) -> list[dict[str, Any]]:
        body: dict[str, Any] = {"experiment_ids": [experiment_id], "filter": filter_string,
                                "run_view_type": "ACTIVE_ONLY", "max_results": REST_PAGE}
        out: list[dict[str, Any]] = []
        while True:
            page = _rest_search(creds, body)
            out.extend(page.get("runs", []))
            token = page.get("next_page_token")
            if not token:
                return out
            body["page_token"] = token

    slices = _rest_slices(creds, experiment_id)
    with ThreadPoolExecutor(max_workers=min(REST_THREADS, max(1, len(slices)))) as pool:
        pages = list(pool.map(fetch, slices))
    seen: set[str] = set()
    infos: list[_Info] = []
    tags: list[dict[str, str]] = []
    params: list[dict[str, str]] = []
    metrics: list[dict[str, float]] = []
    for run in itertools.chain.from_iterable(pages):
        info = _info_from_json(run.get("info", {}))
        if info.run_id in seen:  # a run cannot be in two slices; keep one copy should it be
            continue
        seen.add(info.run_id)
        data = run.get("data", {})
        infos.append(info)
        tags.append({t["key"]: t.get("value", "") for t in data.get("tags", ())})
        params.append({t["key"]: t.get("value", "") for t in data.get("params", ())})
        metrics.append({m["key"]: float(m.get("value", 0.0)) for m in data.get("metrics", ())})
    return _raw_from_runs(
        client, experiment_id, infos, tags, params, metrics, tag_names, param_names, metric_names, attr_names
    )



def read_params(uri: str, run_ids: Sequence[str], names: Sequence[str]) -> dict[str, dict[str, str]]:
    """The params ``names`` of each of ``run_ids`` (a name a run did not log is left out), one
    ``get_run`` a run: for a few runs (one per cell), not for every rerun."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    wanted = set(names)
    out: dict[str, dict[str, str]] = {}
    for rid in dict.fromkeys(run_ids):
        try:
            params = client.get_run(rid).data.params
        except MlflowException:
            params = {}
        out[rid] = {k: v for k, v in params.items() if k in wanted}
    return out
