"""recipe_audit's MLflow server app: MLflow's basic-auth app plus the reads a card, the gate and
``verify`` make, answered in SQL on the server's own backend store.

``mlflow server --app-name recipe-audit`` (the ``mlflow.app`` entry point ``recipe-audit``) calls
:func:`create_app`. It adds its routes to MLflow's Flask app, registers for each the validator that
basic-auth's ``before_request`` hook runs (READ on the experiment the request names, by name, through
basic-auth's own permission logic; admins pass as they pass everywhere), and hands the app to
basic-auth's ``create_app``: basic-auth keeps deciding who may do what (its users, permissions and
hooks), and under uvicorn wraps the Flask app in MLflow's FastAPI app as it does for itself.

The routes (JSON in and out; NaN and infinities as JSON's ``NaN``/``Infinity``):

- ``GET  {PREFIX}/info``: ``{"api": API_VERSION, "sql": bool}``, whether the reads are offered (the
  backend store is a database); what the client asks once per server;
- ``POST {PREFIX}/runs``: :func:`recipe_audit.store.read_sql.read_sql`'s columns of the experiment's
  active runs, with the tags, params, metrics and attributes asked for;
- ``POST {PREFIX}/params``: :func:`~recipe_audit.store.read_sql.read_params` of runs of the experiment;
- ``POST {PREFIX}/keys``: the metric, param or tag keys some runs of the experiment have (for messages);
- ``POST {PREFIX}/history``: :func:`~recipe_audit.store.read_sql.read_history_sql` (the gate's read).

Every POST names ``experiment_name``, whose READ permission it needs; run ids outside that
experiment are left out. A store error is ``{"error_code", "message"}`` with the store's URI written
``<store>`` (the client puts its own URI there: the server's database URI never leaves it).
"""

from __future__ import annotations

import json
import os
from typing import Any

from recipe_audit import keys
from recipe_audit.reruns import QueryError
from recipe_audit.store import read_sql
from recipe_audit.store.raw_runs import redact

__all__ = ["API_VERSION", "PREFIX", "STORE", "create_app"]

PREFIX = "/api/2.0/recipe-audit"
API_VERSION = 1
STORE = "<store>"
"""What stands for the store's URI in an error message the server sends."""


def _backend_uri() -> str:
    from mlflow.server import BACKEND_STORE_URI_ENV_VAR

    return os.environ.get(BACKEND_STORE_URI_ENV_VAR, "")


def _offers_sql() -> bool:
    return read_sql.is_sql_uri(_backend_uri())


def _answer(doc: Any, status: int = 200) -> Any:
    from flask import Response

    return Response(json.dumps(doc, separators=(",", ":")), status=status, mimetype="application/json")


def _refusal(exc: QueryError) -> Any:
    message = str(exc).replace(redact(_backend_uri()), STORE)
    missing = message.startswith("No experiment named ")
    return _answer({"error_code": "RESOURCE_DOES_NOT_EXIST" if missing else "INVALID_STATE", "message": message},
                   404 if missing else 400)


def _bad(message: str) -> Any:
    return _answer({"error_code": "INVALID_PARAMETER_VALUE", "message": message}, 400)


def _body(**fields: type) -> dict[str, Any]:
    """The request's JSON object with ``fields`` checked: ``str`` or ``list`` (of strings)."""
    from flask import request

    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise ValueError("The request body must be a JSON object.")
    out = {}
    for name, kind in fields.items():
        value = body.get(name, "" if kind is str else [])
        ok = isinstance(value, str) if kind is str else (
            isinstance(value, list) and all(isinstance(v, str) for v in value))
        if not ok:
            raise ValueError(f"'{name}' must be {'a string' if kind is str else 'a list of strings'}.")
        out[name] = value
    return out


def _reading(read: Any) -> Any:
    """Answer with what ``read(uri)`` returns (it reads the request's body itself); bad input 400, a store error its refusal."""
    def view() -> Any:
        if not _offers_sql():
            return _answer({"error_code": "ENDPOINT_NOT_FOUND",
                            "message": "This server's backend store is not a database."}, 404)
        try:
            return _answer(read(_backend_uri()))
        except QueryError as exc:  # a ValueError too: first
            return _refusal(exc)
        except ValueError as exc:
            return _bad(str(exc))

    return view


def info() -> Any:
    return _answer({"api": API_VERSION, "sql": _offers_sql()})


def runs(uri: str) -> dict[str, Any]:
    b = _body(experiment_name=str, tags=list, params=list, metrics=list, attributes=list)
    from recipe_audit.store.raw_runs import ATTRIBUTES

    unknown = [a for a in b["attributes"] if a not in ATTRIBUTES]
    if unknown:
        raise ValueError(f"Unknown run attribute {unknown[0]!r}.")
    tags = list(dict.fromkeys([keys.TAG_KIND, keys.TAG_PARENT, keys.TAG_RECIPE_ID, *b["tags"]]))  # every read has them
    raw = read_sql.read_sql(uri, b["experiment_name"], tags, b["params"], b["metrics"], b["attributes"])
    return {"experiment_id": raw.experiment_id, "columns": {k: v.tolist() for k, v in raw.columns.items()},
            "parents": raw.parents, "curtailment": raw.curtailment, "errors": raw.errors}


def params(uri: str) -> dict[str, Any]:
    b = _body(experiment_name=str, run_ids=list, names=list)
    with read_sql.snapshot(uri, b["experiment_name"]) as conn:
        experiment_id, _stage = read_sql.experiment_row(conn, uri, b["experiment_name"])
        mine = read_sql.runs_of_experiment(conn, experiment_id, b["run_ids"])
        return read_sql.read_params(uri, mine, b["names"], conn) if mine and b["names"] else {r: {} for r in mine}


def keys_of(uri: str) -> list[str]:
    b = _body(experiment_name=str, kind=str, run_ids=list)
    if b["kind"] not in ("metrics", "params", "tags"):
        raise ValueError("'kind' must be metrics, params or tags.")
    with read_sql.snapshot(uri, b["experiment_name"]) as conn:
        experiment_id, _stage = read_sql.experiment_row(conn, uri, b["experiment_name"])
        mine = read_sql.runs_of_experiment(conn, experiment_id, b["run_ids"])
        return sorted(read_sql.keys_of_runs(uri, b["kind"], mine, conn))


def history(uri: str) -> dict[str, Any]:
    b = _body(experiment_name=str, metric=str, tags=list, params=list)
    return read_sql.read_history_sql(uri, b["experiment_name"], b["metric"], b["tags"], b["params"])


def _authenticated() -> bool:
    """The probe's validator: any user basic-auth authenticated (it says nothing of any experiment)."""
    return True


def create_app(app: Any = None) -> Any:
    """MLflow's server app with recipe_audit's reads, behind basic-auth (module docstring).
    ``app``: MLflow's Flask app (default: ``mlflow.server.app``, what ``mlflow server`` serves)."""
    from mlflow.server import app as mlflow_app
    from mlflow.server import auth

    app = mlflow_app if app is None else app
    app.add_url_rule(f"{PREFIX}/info", "recipe_audit_info", info, methods=["GET"])
    auth.BEFORE_REQUEST_VALIDATORS[(f"{PREFIX}/info", "GET")] = _authenticated
    for route, read in {"runs": runs, "params": params, "keys": keys_of, "history": history}.items():
        path = f"{PREFIX}/{route}"
        app.add_url_rule(path, f"recipe_audit_{route}", _reading(read), methods=["POST"])
        # basic-auth's own check, the one MLflow's experiments/get-by-name has: READ on the experiment
        auth.BEFORE_REQUEST_VALIDATORS[(path, "POST")] = auth.validate_can_read_experiment_by_name
    return auth.create_app(app)
