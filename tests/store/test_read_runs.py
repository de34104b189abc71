"""read_runs: the rows, the columns, and the SQL path against the search_runs path."""

from __future__ import annotations

import math

import mlflow
import numpy as np
import pandas as pd
import pytest
from helpers.read_stores import BYO_READ, METRIC, build_byo
from helpers.read_stores import RICH_EXTRA as EXTRA
from helpers.read_stores import RICH_GROUP as GROUP
from helpers.read_stores import RICH_METRICS as METRICS
from mlflow.tracking import MlflowClient

from recipe_audit import keys
from recipe_audit.store import read_client
from recipe_audit.store.read import is_sql_uri, read_runs


def _both(uri: str, experiment: str, **kw) -> tuple[pd.DataFrame, pd.DataFrame]:
    sql = read_runs(uri, experiment, backend="sql", **kw)
    client = read_runs(uri, experiment, backend="client", **kw)
    assert sql.attrs["path"] == "sql" and client.attrs["path"] == "client"
    return sql, client


def _same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    a = a.sort_values("run_id").reset_index(drop=True)
    b = b.sort_values("run_id").reset_index(drop=True)
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert list(a.columns) == list(b.columns)


def test_sql_and_search_runs_paths_return_the_same_frame(rich_store):
    uri, _ = rich_store
    sql, client = _both(uri, "exp", metric_keys=METRICS, group_by=GROUP, extra_keys=EXTRA)
    _same(sql, client)
    # both also agree on the row order (start_time, run_id)
    assert sql["run_id"].tolist() == client["run_id"].tolist()


def test_paths_agree_on_every_kind_filter(rich_store):
    uri, _ = rich_store
    for kind, metric in ((None, METRIC), (keys.KIND_CARD, "upper_bound")):
        kw = {"metric_keys": [metric], "filter_kind": kind, "require_seed": False}
        sql, client = _both(uri, "exp", **kw)
        assert len(sql) > 0, kind  # two empty frames would agree on nothing
        _same(sql, client)


def test_paths_agree_on_bring_your_own_runs(byo_store):
    uri, _ = byo_store
    sql, client = _both(uri, "byo", **BYO_READ)
    assert len(sql) > 0 and sql["tags.owner"].notna().any()  # not two empty frames agreeing
    _same(sql, client)


def test_columns_and_values_of_the_rich_experiment(rich_store):
    uri, built = rich_store
    ids = built.runs
    frame = read_runs(uri, "exp", METRICS, group_by=GROUP, extra_keys=EXTRA)
    assert list(frame.columns) == [
        "run_id",
        "run_name",
        "status",
        "start_time",
        "end_time",
        "parent_run_id",
        "seed",
        "recipe_id",
        "sweep_id",
        "planned_seeds",
        "error",
        *METRICS,
        *(f"logged[{m}]" for m in METRICS),
        *GROUP,
        *EXTRA,
    ]
    # reruns only: no sweep parent, no card run, no deleted run
    expected = {k for k in ids if k not in ("p1", "p2", "card", "deleted")}
    assert set(frame["run_id"]) == {ids[k] for k in expected}
    assert frame["start_time"].is_monotonic_increasing
    assert str(frame["start_time"].dtype) == "Int64" and str(frame["end_time"].dtype) == "Int64"
    row = frame.set_index("run_id")
    assert row.loc[ids["s0a"], "status"] == "FINISHED"
    assert row.loc[ids["s0a"], "seed"] == "0"  # the raw tag value
    assert row.loc[ids["s0a"], "recipe_id"] == "r1"
    assert row.loc[ids["s0a"], "run_name"] == "r1-0"
    assert row.loc[ids["s0a"], "parent_run_id"] == ids["p1"]
    assert row.loc[ids["s0a"], "sweep_id"] == "s1"
    assert row.loc[ids["s0a"], "planned_seeds"] == (0, 1, 2, 3, 4, 5, 6, 7)
    assert row.loc[ids["r2s0"], "planned_seeds"] == (0, 1, 2)
    assert row.loc[ids["s0a"], METRIC] == 0.9
    assert row.loc[ids["s0a"], keys.METRIC_TRAIN_LOSS] == pytest.approx(0.2)  # latest of the curve
    assert row.loc[ids["s2"], "status"] == "FAILED"
    assert row.loc[ids["s2"], "error"] == "RuntimeError: boom"
    assert row.loc[ids["s0a"], "error"] is None
    assert row.loc[ids["s3"], "status"] == "KILLED"
    assert row.loc[ids["s4"], "status"] == "RUNNING"
    assert pd.isna(row.loc[ids["s4"], "end_time"])
    # a logged NaN and a missing metric are both NaN, told apart by logged[...]
    assert math.isnan(row.loc[ids["s5"], METRIC]) and row.loc[ids["s5"], f"logged[{METRIC}]"]
    assert math.isnan(row.loc[ids["s6"], METRIC]) and not row.loc[ids["s6"], f"logged[{METRIC}]"]
    # MLflow's SQL store keeps inf as DBL_MAX: read back as inf
    assert row.loc[ids["s9"], METRIC] == math.inf
    assert row.loc[ids["s0a"], "params.recipe.lr"] == "0.001"
    assert row.loc[ids["s0a"], "tags." + keys.TAG_MODEL] == "m"
    assert row.loc[ids["s0a"], "metrics." + keys.METRIC_TRAIN_SECONDS] == 12.5
    assert row.loc[ids["s0a"], "attributes.experiment_id"] == built.experiment_id
    assert row.loc[ids["s0a"], "params.absent"] is None
    assert frame.attrs["experiment"] == "exp" and frame.attrs["group_by"] == GROUP
    assert frame.attrs["uri"] == uri and frame.attrs["path"] == "sql"


def test_kind_filters(rich_store):
    uri, built = rich_store
    ids = built.runs
    cards = read_runs(uri, "exp", ["upper_bound"], filter_kind=keys.KIND_CARD, require_seed=False)
    assert cards["run_id"].tolist() == [ids["card"]]
    assert cards["seed"].tolist() == [None]
    every = read_runs(uri, "exp", [METRIC], filter_kind=None, require_seed=False)
    assert len(every) == len(ids) - 1  # all active runs: the deleted one is gone
    by_id = every.set_index("run_id")
    assert by_id.loc[ids["p1"], "seed"] is None and by_id.loc[ids["p1"], "recipe_id"] is None


def test_bring_your_own_rows_are_the_runs_that_are_no_parent(byo_store):
    uri, built = byo_store
    frame = read_runs(uri, "byo", ["val_acc"], seed_key="params.seed", group_by=["params.model_name"])
    assert set(frame["run_id"]) == {v for k, v in built.runs.items() if k not in ("study", "card")}
    assert frame["recipe_id"].isna().all()
    assert frame.set_index("run_id").loc[built.runs["b3"], "parent_run_id"] is None


def test_file_store_is_read_through_the_client(file_store):
    build_byo(file_store)
    assert not is_sql_uri(file_store)
    frame = read_runs(file_store, "byo", ["val_acc"], seed_key="params.seed", group_by=["params.model_name"])
    assert frame.attrs["path"] == "client"
    assert len(frame) == 6
    assert sorted(frame["params.model_name"]) == ["a", "a", "a", "b", "b", "b"]


def test_file_store_and_sql_store_agree_apart_from_ids(file_store, empty_store):
    build_byo(file_store)
    build_byo(empty_store)
    kw = {"metric_keys": ["val_acc"], "seed_key": "params.seed", "group_by": ["params.model_name"]}
    a = read_runs(file_store, "byo", **kw)
    b = read_runs(empty_store, "byo", **kw)
    cols = ["run_name", "status", "start_time", "seed", "val_acc", "logged[val_acc]", "params.model_name"]
    pd.testing.assert_frame_equal(a[cols], b[cols])


def test_uri_defaults_to_mlflow_tracking_uri(rich_store, monkeypatch):
    uri, _ = rich_store
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    frame = read_runs(None, "exp", [METRIC])
    assert frame.attrs["uri"] == uri and frame.attrs["path"] == "sql"


def test_uri_schemes():
    assert is_sql_uri("sqlite:///x.db")
    assert is_sql_uri("postgresql://u:p@h/db") and is_sql_uri("postgresql+psycopg2://h/db")
    assert is_sql_uri("mysql://h/db") and is_sql_uri("mysql+pymysql://h/db") and is_sql_uri("mssql://h/db")
    for uri in ("http://h:5000", "https://h", "databricks", "file:///tmp/mlruns", "./mlruns", "/abs/mlruns"):
        assert not is_sql_uri(uri), uri


def test_runs_logged_with_fluent_nested_runs(empty_store):
    mlflow.set_tracking_uri(empty_store)
    exp_id = mlflow.create_experiment("fluent")
    with mlflow.start_run(
        experiment_id=exp_id,
        tags={keys.TAG_KIND: keys.KIND_SWEEP, keys.TAG_SWEEP_ID: "sw", keys.TAG_PLANNED_SEEDS: "[0, 1, 2]"},
    ) as parent:
        for seed in (0, 1):
            with mlflow.start_run(
                experiment_id=exp_id,
                nested=True,
                tags={keys.TAG_KIND: keys.KIND_RERUN, keys.TAG_RECIPE_ID: "rid", keys.TAG_SEED: str(seed)},
            ):
                mlflow.log_params({"seed": seed, "model.name": "tiny"})
                mlflow.log_metric(METRIC, 0.5 + seed / 10)
    frame = read_runs(empty_store, "fluent", [METRIC])
    assert (frame["parent_run_id"] == parent.info.run_id).all()
    assert frame["sweep_id"].tolist() == ["sw", "sw"]
    assert frame[METRIC].tolist() == [0.5, 0.6]


def test_parent_in_another_experiment_still_gives_planned_seeds(empty_store):
    client = MlflowClient(tracking_uri=empty_store)
    home = client.create_experiment("home")
    other = client.create_experiment("other")
    parent = client.create_run(
        other,
        tags={keys.TAG_KIND: keys.KIND_SWEEP, keys.TAG_SWEEP_ID: "far", keys.TAG_PLANNED_SEEDS: "[3, 4]"},
    ).info.run_id
    child = client.create_run(
        home,
        tags={
            keys.TAG_KIND: keys.KIND_RERUN,
            keys.TAG_SEED: "3",
            keys.TAG_PARENT: parent,
            keys.TAG_RECIPE_ID: "r",
        },
    ).info.run_id
    client.log_metric(child, METRIC, 0.7)
    client.set_terminated(child, "FINISHED")
    sql, client_frame = _both(empty_store, "home", metric_keys=[METRIC])
    _same(sql, client_frame)
    assert sql["planned_seeds"].tolist() == [(3, 4)] and sql["sweep_id"].tolist() == ["far"]


def test_many_keys_are_split_over_several_selects(empty_store):
    client = MlflowClient(tracking_uri=empty_store)
    exp = client.create_experiment("wide")
    for seed in range(3):
        rid = client.create_run(exp).info.run_id
        client.log_batch(
            rid,
            params=[mlflow.entities.Param(f"p{i}", f"{seed}-{i}") for i in range(60)]
            + [mlflow.entities.Param("seed", str(seed))],
            metrics=[mlflow.entities.Metric("m", seed, 0, 0)],
        )
        client.set_terminated(rid, "FINISHED")
    extra = [f"params.p{i}" for i in range(60)]
    sql, client_frame = _both(
        empty_store, "wide", metric_keys=["m"], seed_key="params.seed", extra_keys=extra
    )
    _same(sql, client_frame)
    assert sql.sort_values("seed")["params.p59"].tolist() == ["0-59", "1-59", "2-59"]
    assert np.array_equal(sql.sort_values("seed")["m"].to_numpy(), [0.0, 1.0, 2.0])


def test_search_runs_path_pages_through_the_runs(rich_store, monkeypatch):
    uri, _ = rich_store
    expected = read_runs(uri, "exp", [METRIC], backend="sql")
    monkeypatch.setattr(read_client, "PAGE_SIZE", 2)
    assert len(expected) > 2  # more runs than one page
    _same(expected, read_runs(uri, "exp", [METRIC], backend="client"))


def test_search_runs_path_falls_back_to_small_pages_when_refused(rich_store, monkeypatch):
    uri, _ = rich_store
    expected = read_runs(uri, "exp", [METRIC], backend="sql")
    monkeypatch.setattr(read_client, "PAGE_SIZE", 10**6)  # above what MLflow accepts
    monkeypatch.setattr(read_client, "SMALL_PAGE_SIZE", 3)
    _same(expected, read_runs(uri, "exp", [METRIC], backend="client"))


def test_read_params_of_a_few_runs_matches_read_runs(rich_store):
    from recipe_audit.store.read import read_params

    uri, _ = rich_store
    frame = read_runs(uri, "exp", [METRIC], extra_keys=["params.recipe.lr", "params.model.name"])
    ids = frame["run_id"].tolist()[:3]
    names = ["recipe.lr", "model.name", "absent"]
    want = {r: {k: v for k in names[:2] if (v := frame.set_index("run_id").at[r, f"params.{k}"]) is not None}
            for r in ids}
    assert any(want.values())  # not two empty answers agreeing
    assert read_params(uri, ids, names) == want
    assert read_client.read_params(uri, ids, names) == want  # the client path, as for file stores
    assert read_params(uri, [], names) == {}


@pytest.mark.parametrize("backend", ["sql", "client"])
def test_params_of_a_few_runs_come_with_the_runs(rich_store, backend, monkeypatch):
    from recipe_audit.store import read_sql

    uri, _ = rich_store
    names = ["recipe.lr", "model.name", "absent"]
    every = read_runs(uri, "exp", [METRIC], extra_keys=[f"params.{n}" for n in names[:2]]).set_index("run_id")
    asked = []

    def pick(frame):  # the finished frame, as the caller will get it
        asked.append(frame)
        return frame["run_id"].tolist()[1:3]

    snapshots = []
    real = read_sql.snapshot
    monkeypatch.setattr(read_sql, "snapshot", lambda *a: snapshots.append(a) or real(*a))
    frame = read_runs(uri, "exp", [METRIC], backend=backend, params=names, params_of=pick)
    ids = frame["run_id"].tolist()[1:3]
    want = {r: {n: v for n in names[:2] if (v := every.at[r, f"params.{n}"]) is not None} for r in ids}
    assert any(want.values()) and frame.attrs["params"] == want
    assert asked[0] is frame and "params.recipe.lr" not in frame.columns  # not read for every run
    assert len(snapshots) == (1 if backend == "sql" else 0)  # the runs and their params: one snapshot
    assert "params" not in read_runs(uri, "exp", [METRIC], backend=backend).attrs
