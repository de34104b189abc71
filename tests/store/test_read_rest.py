"""read_runs through a tracking server's REST API (concurrent start-time slices, plain JSON) returns
the frame the MlflowClient.search_runs path returns.

The server is MLflow's own Flask app (the handlers ``mlflow server`` runs), served from a thread of
the test process on loopback: the same requests and answers as a real server, without its start-up
time. bench/bench_query_rest.py measures the same path against a real ``mlflow server``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from helpers.read_stores import BYO_READ, METRIC, RICH_EXTRA, RICH_GROUP
from helpers.team_app import point_server_at, serve

from recipe_audit import keys
from recipe_audit.reruns import collect_reruns
from recipe_audit.store import read_client
from recipe_audit.store.read import QueryError, read_runs


def _serve(uri: str, artifacts: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    from mlflow.server import app

    point_server_at(uri, artifacts, monkeypatch)
    yield from serve(app)


@pytest.fixture
def rich_server(rich_store, tmp_path, monkeypatch) -> Iterator[str]:
    yield from _serve(rich_store[0], tmp_path / "artifacts", monkeypatch)


@pytest.fixture
def byo_server(byo_store, tmp_path, monkeypatch) -> Iterator[str]:
    yield from _serve(byo_store[0], tmp_path / "artifacts", monkeypatch)


def _same(rest: pd.DataFrame, client: pd.DataFrame, metric: str) -> None:
    assert rest.attrs["path"] == "rest" and client.attrs["path"] == "client"
    assert len(rest) > 0
    pd.testing.assert_frame_equal(rest, client, check_exact=True)
    assert list(rest.columns) == list(client.columns)
    rest_cells, client_cells = collect_reruns(rest, metric), collect_reruns(client, metric)
    assert [c.digest() for c in rest_cells] == [c.digest() for c in client_cells]


@pytest.mark.parametrize(("slices", "page"), [(16, 500), (3, 2), (1, 1)])
def test_rest_path_returns_the_client_paths_frame(rich_server, monkeypatch, slices, page):
    """Several slices and pages (3 slices of 2-run pages), or one slice of 1-run pages: same rows."""
    monkeypatch.setattr(read_client, "REST_SLICES", slices)
    monkeypatch.setattr(read_client, "REST_PAGE", page)
    kw = {"metric_keys": [METRIC, keys.METRIC_TRAIN_LOSS], "group_by": RICH_GROUP, "extra_keys": RICH_EXTRA}
    rest = read_runs(rich_server, "exp", **kw)  # http: the REST path by default
    client = read_runs(rich_server, "exp", backend="client", **kw)
    _same(rest, client, METRIC)
    assert rest["run_id"].is_unique


def test_rest_path_on_bring_your_own_runs_and_every_kind(byo_server):
    kw = BYO_READ
    _same(read_runs(byo_server, "byo", **kw), read_runs(byo_server, "byo", backend="client", **kw),
          "val_acc")
    kw = {"metric_keys": ["val_acc"], "filter_kind": None, "require_seed": False}
    rest = read_runs(byo_server, "byo", **kw)
    client = read_runs(byo_server, "byo", backend="client", **kw)
    pd.testing.assert_frame_equal(rest, client, check_exact=True)


def test_rest_path_errors_read_like_the_client_paths(rich_server):
    for backend in ("rest", "client"):
        with pytest.raises(QueryError, match="No experiment named 'nope'"):
            read_runs(rich_server, "nope", [METRIC], backend=backend)
    with pytest.raises(QueryError, match="REST path needs an http"):
        read_runs("sqlite:///x.db", "exp", [METRIC], backend="rest")
