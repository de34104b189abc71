"""The client side of recipe_audit's server app (:mod:`recipe_audit.store.server_app`): a tracking
server that offers recipe_audit's reads answers them in SQL on its own store, and these functions
ask it. :func:`offers_reads` asks a server once per process whether it does (one cheap request);
:func:`recipe_audit.store.read.read_runs` and :func:`recipe_audit.store.history.read_history` then
read through it, or through MLflow's REST API when it does not (a stock MLflow server, Databricks).
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from recipe_audit.reruns import QueryError
from recipe_audit.store.raw_runs import RawRuns, floats, objects, redact
from recipe_audit.store.read_client import host_creds
from recipe_audit.store.server_app import API_VERSION, PREFIX, STORE

__all__ = ["offers_reads", "read_history_server", "read_params_server", "read_runs_server"]

_OFFERS: dict[str, bool] = {}
_OFFERS_LOCK = threading.Lock()
PROBE_TIMEOUT_S = 10
"""How long the probe waits for the server's answer."""


def offers_reads(uri: str) -> bool:
    """Whether the tracking server at ``uri`` offers recipe_audit's reads (the server app runs and
    its store is a database): asked once per URI and process (``GET .../info``, no retries), and
    said once on stderr, naming the path the reads of ``uri`` take. Any answer but the app's (a
    stock server's 404, a refusal, no answer) is no."""
    with _OFFERS_LOCK:
        if uri in _OFFERS:
            return _OFFERS[uri]
        from mlflow.utils.rest_utils import http_request

        try:
            resp = http_request(host_creds(uri), f"{PREFIX}/info", "GET", max_retries=0, timeout=PROBE_TIMEOUT_S,
                                raise_on_status=False)
            doc = json.loads(resp.text) if resp.status_code == 200 else {}
        except Exception:  # noqa: BLE001 - no answer is no; the read that follows says what is wrong
            doc = {}
        offered = isinstance(doc, dict) and doc.get("api") == API_VERSION and doc.get("sql") is True
        _OFFERS[uri] = offered
        where = redact(uri)
        print(f"recipe_audit: reading {where} through its recipe_audit endpoints (SQL on the server's store)"
              if offered else
              f"recipe_audit: {where} offers no recipe_audit reads (a stock MLflow server); reading through "
              "MLflow's REST API (runs/search: every run's params, tags and metrics)", file=sys.stderr)
        return offered


def forget_servers() -> None:
    """Forget what the servers answered (tests; a server restarted with another app)."""
    with _OFFERS_LOCK:
        _OFFERS.clear()


def _post(uri: str, route: str, body: dict[str, Any]) -> Any:
    """One request to the server app; its refusals as ``QueryError`` (one sentence), other
    failures as MLflow's own exceptions (what the REST path raises)."""
    from mlflow.utils.rest_utils import http_request, verify_rest_response

    endpoint = f"{PREFIX}/{route}"
    resp = http_request(host_creds(uri), endpoint, "POST", json=body, raise_on_status=False)
    name = body["experiment_name"]
    if resp.status_code == 403:
        raise QueryError(f"The tracking server at {redact(uri)} does not let this user read experiment {name!r}.")
    if resp.status_code != 200:
        try:
            doc = json.loads(resp.text)
        except ValueError:
            doc = {}
        code = doc.get("error_code") if isinstance(doc, dict) else None
        if code == "RESOURCE_DOES_NOT_EXIST":
            raise QueryError(f"No experiment named {name!r} in {redact(uri)}.")
        if code == "INVALID_STATE":
            raise QueryError(str(doc.get("message", "")).replace(STORE, redact(uri)))
        verify_rest_response(resp, endpoint)  # raises MLflow's error for the rest
    return json.loads(resp.text)


def read_runs_server(uri: str, experiment_name: str, tag_names: list[str], param_names: list[str],
                     metric_names: list[str], attr_names: list[str]) -> RawRuns:
    """:func:`recipe_audit.store.read_sql.read_sql` run on the server: the same :class:`RawRuns`."""
    doc = _post(uri, "runs", {"experiment_name": experiment_name, "tags": tag_names, "params": param_names,
                              "metrics": metric_names, "attributes": attr_names})
    columns: dict[str, np.ndarray] = {}
    for name, values in doc["columns"].items():
        if name.startswith("metrics."):
            columns[name] = floats(values)
        elif name.startswith("logged."):
            columns[name] = np.array(values, dtype=bool)
        else:
            columns[name] = objects(values)
    raw = RawRuns(str(doc["experiment_id"]), columns,
                  parents={p: (s, planned) for p, (s, planned) in doc["parents"].items()},
                  curtailment=dict(doc["curtailment"]), errors=dict(doc["errors"]))

    def keys_of(kind: str, run_ids: list[str]) -> list[str]:
        return _post(uri, "keys", {"experiment_name": experiment_name, "kind": kind, "run_ids": list(run_ids)})

    raw.keys_of = keys_of
    return raw


def read_params_server(uri: str, experiment_name: str, run_ids: Sequence[str],
                       names: Sequence[str]) -> dict[str, dict[str, str]]:
    """:func:`recipe_audit.store.read_sql.read_params` of runs of the experiment, run on the server."""
    found = _post(uri, "params", {"experiment_name": experiment_name, "run_ids": list(run_ids),
                                  "names": list(names)})
    return {r: found.get(r, {}) for r in run_ids}


def read_history_server(uri: str, experiment_name: str, metric: str, tag_names: Sequence[str],
                        param_names: Sequence[str]) -> dict[str, Any]:
    """:func:`recipe_audit.store.read_sql.read_history_sql` run on the server (its JSON form)."""
    return _post(uri, "history", {"experiment_name": experiment_name, "metric": metric, "tags": list(tag_names),
                                  "params": list(param_names)})
