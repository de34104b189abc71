"""The two ways read_runs reads an SQLite store (whole-table scans, or one joined lookup per run and
key) return the same frame, and the choice between them follows the experiment's share of the runs."""

from __future__ import annotations

import sqlite3

import pandas as pd
import pytest
from helpers.read_stores import BYO_READ, METRIC, RICH_EXTRA, RICH_GROUP, RICH_METRICS, build_byo
from mlflow.tracking import MlflowClient

from recipe_audit import keys
from recipe_audit.reruns import collect_reruns
from recipe_audit.store import read_sql
from recipe_audit.store.read import read_runs


def _read(monkeypatch: pytest.MonkeyPatch, share: float, *args, **kw) -> tuple[pd.DataFrame, int]:
    """read_runs with the scan threshold set to ``share``; (frame, how many times the joins ran)."""
    calls = []
    joins = read_sql.sql_joins
    monkeypatch.setattr(read_sql, "SCAN_SHARE", share)
    monkeypatch.setattr(read_sql, "sql_joins", lambda *a, **k: calls.append(1) or joins(*a, **k))
    return read_runs(*args, **kw), len(calls)


@pytest.mark.parametrize("store", ["rich", "byo"])
def test_scan_and_joins_return_the_same_frame(store, request, monkeypatch):
    uri = request.getfixturevalue(f"{store}_store")[0]  # one store per test: both use tmp_path
    if store == "rich":
        experiment = "exp"
        kw = {"metric_keys": [*RICH_METRICS, "absent_metric"], "group_by": RICH_GROUP, "extra_keys": RICH_EXTRA,
              "require_metrics": False}
    else:
        experiment = "byo"
        kw = {**BYO_READ, "extra_keys": [*BYO_READ["extra_keys"], "tags.mlflow.runName"]}
    scanned, joins_a = _read(monkeypatch, 0.0, uri, experiment, **kw)
    joined, joins_b = _read(monkeypatch, 2.0, uri, experiment, **kw)
    assert (joins_a, joins_b) == (0, 1)
    assert len(scanned) > 0
    pd.testing.assert_frame_equal(scanned, joined, check_exact=True)
    cells_a = collect_reruns(scanned, kw["metric_keys"][0])
    cells_b = collect_reruns(joined, kw["metric_keys"][0])
    assert [c.digest() for c in cells_a] == [c.digest() for c in cells_b]


def test_values_a_json_array_would_change_read_back_exactly(empty_store, monkeypatch):
    """Floats with 17 significant digits, DBL_MAX, unicode, quotes and backslashes in tags."""
    uri = empty_store
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("odd")
    values = [0.1 + 0.2, 1.7976931348623157e308, -1.7976931348623157e308, 5e-324, 0.8812345678901234]
    texts = ['say "hi"', "back\\slash", "uni\u00e9\u4e2d", "", "line\nbreak"]
    for i, (v, text) in enumerate(zip(values, texts, strict=True)):
        rid = client.create_run(exp, tags={keys.TAG_SEED: str(i), "odd": text}).info.run_id
        client.log_metric(rid, "m", v)
        client.set_terminated(rid, "FINISHED")
    frame, joins = _read(monkeypatch, 0.0, uri, "odd", ["m"], extra_keys=["tags.odd"])
    assert joins == 0
    got = dict(zip(frame["seed"].astype(int), zip(frame["m"], frame["tags.odd"], strict=True), strict=True))
    want_values = [0.1 + 0.2, float("inf"), float("-inf"), 5e-324, 0.8812345678901234]
    assert got == {i: (want_values[i], texts[i]) for i in range(5)}


def test_the_plan_follows_the_experiments_share_of_the_runs(rich_store, monkeypatch):
    uri = rich_store[0]
    build_byo(uri, "other")  # 8 more runs in another experiment
    n_exp = len(read_runs(uri, "exp", [METRIC], filter_kind=None, require_seed=False))
    with sqlite3.connect(uri.removeprefix("sqlite:///")) as con:
        n_all = con.execute("SELECT count(*) FROM runs").fetchone()[0]  # deleted runs too
    assert n_all >= n_exp + 8
    share = n_exp / n_all
    for threshold, joins in ((share - 0.01, 0), (share + 0.01, 1)):
        frame, calls = _read(monkeypatch, threshold, uri, "exp", [METRIC])
        assert calls == joins, threshold
        client = read_runs(uri, "exp", [METRIC], backend="client")
        pd.testing.assert_frame_equal(frame, client, check_exact=True)
