"""recipe_audit's server app (``mlflow server --app-name recipe-audit``) served from a thread of the
test process on loopback, with basic-auth's users in a SQLite file beside the store: the routes,
hooks and permission logic a real server runs, without its start-up time.

``mlflow server`` builds the app once per worker process from MLflow's module-level Flask app; a
test process serves several apps, so each gets a fresh Flask app with MLflow's routes copied onto it
(basic-auth's hooks and our routes land on that copy, never on MLflow's own app, which other tests
serve plain). basic-auth reads its config when imported: the config is swapped for the test's.
"""

from __future__ import annotations

import base64
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

ADMIN_PW = "admin-pw-for-tests"


def mlflow_flask_app():
    """A fresh Flask app with every route of ``mlflow.server.app`` (what ``mlflow server`` serves)."""
    from flask import Flask
    from mlflow.server import app as mlflow_app

    fresh = Flask("mlflow.server", static_folder=mlflow_app.static_folder,
                  template_folder=mlflow_app.template_folder)
    fresh.config.update(mlflow_app.config)
    for rule in mlflow_app.url_map.iter_rules():
        if rule.endpoint != "static":
            fresh.add_url_rule(rule.rule, rule.endpoint, mlflow_app.view_functions[rule.endpoint],
                               methods=rule.methods)
    return fresh


def serve(app) -> Iterator[str]:
    from werkzeug.serving import make_server

    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(timeout=10)


def point_server_at(store_uri: str, artifacts: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The variables ``mlflow server`` hands its workers: the backend store and artifact root."""
    from mlflow.server import handlers

    monkeypatch.setenv("_MLFLOW_SERVER_FILE_STORE", store_uri)
    monkeypatch.setenv("_MLFLOW_SERVER_ARTIFACT_ROOT", str(artifacts))
    monkeypatch.setattr(handlers, "_tracking_store", None)


def team_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, default_permission: str = "READ"):
    """recipe_audit's app (basic-auth inside) on a fresh Flask app, its users in ``tmp_path``."""
    from mlflow.server import auth

    from recipe_audit.store.server_app import create_app

    monkeypatch.setattr(auth, "auth_config", auth.auth_config._replace(
        default_permission=default_permission, database_uri=f"sqlite:///{tmp_path / 'auth.db'}",
        admin_username="admin", admin_password=ADMIN_PW, read_database_uri=None))
    # basic-auth's own login cache (auth_cache_ttl_seconds): each password hashed once, not per request
    from cachetools import TTLCache

    monkeypatch.setattr(auth, "_USER_AUTH_CACHE", TTLCache(maxsize=100, ttl=600))
    monkeypatch.setenv("MLFLOW_FLASK_SERVER_SECRET_KEY", "test-secret")
    monkeypatch.delenv("_MLFLOW_SGI_NAME", raising=False)  # the Flask app, not uvicorn's wrapper
    return create_app(mlflow_flask_app())


def call(uri: str, path: str, body: dict | None = None, user: str | None = None, pw: str | None = None,
         method: str | None = None) -> tuple[int, object]:
    """One request (JSON body for POST), as ``user``: (status, the JSON answer or the text)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(uri + path, data=data, method=method or ("POST" if body is not None else "GET"),
                                 headers={"Content-Type": "application/json"})
    if user is not None:
        req.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{pw}".encode()).decode())
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            status, text = r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        status, text = exc.code, exc.read().decode()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text
