"""recipe_audit's server app (recipe_audit/store/server_app.py), in process: basic-auth decides who
reads what on its routes as it does on MLflow's own (a permission matrix with real users, made
through basic-auth's own API), and the reads through it are the SQL reads: the same frames, the
same gate history, the same cards (byte for byte on one server URI), whichever path (the app, a stock server's REST API, the
database directly). tests/test_tracking_server.py runs the app in the launcher's real server."""

from __future__ import annotations

import json
import time

import pandas as pd
import pytest
from helpers.read_stores import METRIC, RICH_EXTRA, RICH_GROUP
from helpers.store import synthetic_sweep
from helpers.team_app import ADMIN_PW, call, mlflow_flask_app, point_server_at, serve, team_app
from mlflow.tracking import MlflowClient

from recipe_audit import keys
from recipe_audit.store import read_server
from recipe_audit.store.history import read_history
from recipe_audit.store.read import QueryError, read_runs
from recipe_audit.store.server_app import PREFIX

USERS = {"alice": "alice-pw-1234", "bob": "bob-pw-12345"}


@pytest.fixture(autouse=True)
def _probe_afresh():
    read_server.forget_servers()
    yield
    read_server.forget_servers()


@pytest.fixture
def as_admin(monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "admin")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", ADMIN_PW)


def _gate_store(uri: str) -> dict[int, str]:
    """Experiment 'exp' with what the gate reads: two sweeps, a failing rerun deleted, a value
    logged over a failing one after it ended, one FAILED and rerun; experiment 'other' beside it."""
    synthetic_sweep(uri, {s: (0.5 if s in (2, 5, 7) else 0.9) for s in range(12)}, sweep_id="first", bar_taus=(0.7,))
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("exp").experiment_id
    runs = {int(r.data.tags[keys.TAG_SEED]): r.info.run_id
            for r in client.search_runs([exp], f"tags.`{keys.TAG_KIND}` = 'rerun'")}
    client.delete_run(runs[2])
    client.log_metric(runs[5], METRIC, 0.95, timestamp=int(time.time() * 1000) + 5000)
    client.set_terminated(runs[7], "FAILED")
    synthetic_sweep(uri, {2: 0.9, 7: float("nan")}, sweep_id="retry", planned=[2, 7], bar_taus=(0.7,))
    synthetic_sweep(uri, {s: 0.8 for s in range(3)}, experiment="other", sweep_id="o")
    return runs


def test_every_route_asks_basic_auth_for_read_on_the_experiment(tmp_path, monkeypatch, store):
    """Users made through basic-auth's API, permissions set through it (default READ, as the
    launcher configures; DENY and EDIT granted per experiment): on each route a user gets 200 where MLflow's own experiments/get-by-name
    lets them read, 403 where it does not; no or wrong credentials 401; an unknown experiment 404."""
    synthetic_sweep(store, {s: 0.9 for s in range(3)}, sweep_id="a")
    synthetic_sweep(store, {s: 0.8 for s in range(3)}, experiment="other", sweep_id="o")
    point_server_at(store, tmp_path / "artifacts", monkeypatch)
    for uri in serve(team_app(tmp_path, monkeypatch)):
        ids = {}
        for name in ("exp", "other"):
            status, doc = call(uri, f"/api/2.0/mlflow/experiments/get-by-name?experiment_name={name}",
                               user="admin", pw=ADMIN_PW)
            assert status == 200, doc
            ids[name] = doc["experiment"]["experiment_id"]
        for user, pw in USERS.items():
            assert call(uri, "/api/2.0/mlflow/users/create", {"username": user, "password": pw},
                        user="admin", pw=ADMIN_PW)[0] == 200
        grants = [("alice", "other", "DENY"), ("bob", "exp", "DENY"), ("bob", "other", "EDIT")]
        for user, exp, perm in grants:
            status, doc = call(uri, "/api/3.0/mlflow/users/permissions/grant",
                               {"username": user, "resource_type": "experiment", "resource_id": ids[exp],
                                "permission": perm}, user="admin", pw=ADMIN_PW)
            assert status == 200, doc
        run_id = MlflowClient(tracking_uri=store).search_runs([ids["exp"]])[0].info.run_id
        bodies = {"runs": {"metrics": [METRIC], "tags": [keys.TAG_SEED]},
                  "params": {"run_ids": [run_id], "names": ["seed"]},
                  "keys": {"kind": "params", "run_ids": [run_id]},
                  "history": {"metric": METRIC, "tags": [keys.TAG_KIND]}}
        expected = {("admin", "exp"): 200, ("admin", "other"): 200, ("alice", "exp"): 200,
                    ("alice", "other"): 403, ("bob", "exp"): 403, ("bob", "other"): 200}
        seen = {}
        for (user, exp), want in expected.items():
            pw = ADMIN_PW if user == "admin" else USERS[user]
            mlflows = call(uri, f"/api/2.0/mlflow/experiments/get-by-name?experiment_name={exp}", user=user, pw=pw)[0]
            assert mlflows == want, (user, exp)  # the matrix is basic-auth's own
            for route, body in bodies.items():
                status, doc = call(uri, f"{PREFIX}/{route}", {"experiment_name": exp, **body}, user=user, pw=pw)
                seen[(user, exp, route)] = status
                if status == 200 and route == "runs":
                    assert len(doc["columns"]["run_id"]) == 4  # the parent and three reruns
        assert seen == {(u, e, r): want for (u, e), want in expected.items() for r in bodies}
        # a run of another experiment named under a readable one is left out
        status, doc = call(uri, f"{PREFIX}/params", {"experiment_name": "other", "run_ids": [run_id],
                                                     "names": ["seed"]}, user="bob", pw=USERS["bob"])
        assert status == 200 and doc == {}
        for user, pw in ((None, None), ("alice", "wrong"), ("nobody", "x")):
            assert call(uri, f"{PREFIX}/runs", {"experiment_name": "exp"}, user=user, pw=pw)[0] == 401
            assert call(uri, f"{PREFIX}/info", user=user, pw=pw)[0] == 401
        assert call(uri, f"{PREFIX}/info", user="bob", pw=USERS["bob"]) == (200, {"api": 1, "sql": True})
        status, doc = call(uri, f"{PREFIX}/runs", {"experiment_name": "nope"}, user="admin", pw=ADMIN_PW)
        assert status == 404 and doc["message"] == "No experiment named 'nope' in <store>.", doc
        assert call(uri, f"{PREFIX}/runs", {"experiment_name": "nope"}, user="bob", pw=USERS["bob"])[0] == 404
        status, doc = call(uri, f"{PREFIX}/runs", {"experiment_name": "exp", "metrics": "x"}, user="admin",
                           pw=ADMIN_PW)
        assert status == 400 and doc["message"] == "'metrics' must be a list of strings."
        # the client: a refusal is one sentence
        monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "bob")
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", USERS["bob"])
        with pytest.raises(QueryError, match=r"^The tracking server at http://127\.0\.0\.1:\d+ does not let this "
                                             r"user read experiment 'exp'\.$"):
            read_runs(uri, "exp", [METRIC])


def test_the_apps_frames_are_the_databases(rich_store, tmp_path, monkeypatch, as_admin, capsys):
    """read_runs through the app returns the SQL path's frame (every column kind of the rich
    store); its refusals are the SQL path's sentences with the server's URI; the path is said once."""
    uri_db, _ = rich_store
    point_server_at(uri_db, tmp_path / "artifacts", monkeypatch)
    kw = {"metric_keys": [METRIC, keys.METRIC_TRAIN_LOSS], "group_by": RICH_GROUP, "extra_keys": RICH_EXTRA}
    for uri in serve(team_app(tmp_path, monkeypatch)):
        served = read_runs(uri, "exp", **kw)
        again = read_runs(uri, "exp", **kw, params=["recipe.lr", "model.name"],
                          params_of=lambda f: f["run_id"].tolist()[:3])
        direct = read_runs(uri_db, "exp", **kw, params=["recipe.lr", "model.name"],
                           params_of=lambda f: f["run_id"].tolist()[:3])
        err = "".join(line for line in capsys.readouterr().err.splitlines(True) if line.startswith("recipe_audit:"))
        assert err.count("\n") == 1 and f"reading {uri} through its recipe_audit endpoints" in err
        assert served.attrs["path"] == "server" and direct.attrs["path"] == "sql" and len(served) > 0
        pd.testing.assert_frame_equal(served, direct, check_exact=True)
        assert again.attrs["params"] == direct.attrs["params"] and any(again.attrs["params"].values())
        for key in ("curtailment", "unlogged", "experiment_id"):
            assert served.attrs[key] == direct.attrs[key]
        with pytest.raises(QueryError, match="has the metric 'absent'; metrics logged there") as e_srv:
            read_runs(uri, "exp", ["absent"])
        with pytest.raises(QueryError) as e_db:
            read_runs(uri_db, "exp", ["absent"])
        assert str(e_srv.value) == str(e_db.value)  # the keys' message, read through the app
        with pytest.raises(QueryError, match=rf"^No experiment named 'nope' in {uri}\.$"):
            read_runs(uri, "nope", [METRIC])


def test_a_deleted_experiment_reads_as_on_the_database(errors_store, tmp_path, monkeypatch, as_admin):
    uri_db, _ = errors_store
    point_server_at(uri_db, tmp_path / "artifacts", monkeypatch)
    for uri in serve(team_app(tmp_path, monkeypatch)):
        with pytest.raises(QueryError, match=rf"^Experiment 'gone' in {uri} is deleted\.$"):
            read_runs(uri, "gone", [METRIC])


def test_cards_and_the_gates_history_are_the_same_on_every_path(store, tmp_path, monkeypatch, as_admin, capsys):
    """One store, four reads: the app, the REST path against the same server (the probe's answer
    taken as no), a stock MLflow server's REST API (the same store served without the app) and the
    database. The gate's history (every attempt, deleted runs, metric histories, rewrites) is the
    same, and so is the card (``created`` pinned): its files byte for byte for the app and the REST
    path of one server URI (the card does not record the path), and else but for the URI (the
    JSON's ``source.tracking_uri``) and the digests that cover it (in the JSON, and the content
    digest in the Markdown's last line)."""
    from recipe_audit.cards.files import render_files
    from recipe_audit.cards.model import CardOptions
    from recipe_audit.cards.render import to_markdown
    from recipe_audit.release.compute import SUMMARY_PARAMS, CardRequest, compute_card

    _gate_store(store)
    point_server_at(store, tmp_path / "artifacts", monkeypatch)
    fails = keys.fails_tag(METRIC, 0.7)
    opts = CardOptions.from_config(taus=[0.6, 0.7])

    def read(uri):
        hist = read_history(uri, "exp", METRIC, fails_tag=fails, params=SUMMARY_PARAMS)
        card = compute_card(CardRequest(experiment="exp", tracking_uri=uri, metric=METRIC), opts)
        return hist, card.updated(created="2026-12-06T00:00:00+00:00").sealed()

    for app_uri in serve(team_app(tmp_path, monkeypatch)):
        for stock_uri in serve(mlflow_flask_app()):
            got = {"server": read(app_uri), "rest": read(stock_uri), "sql": read(store)}
        with monkeypatch.context() as m:  # the same server read as a stock one: MLflow's REST API
            m.setattr(read_server, "offers_reads", lambda uri: False)
            m.setattr(read_server, "read_runs_server", None)  # never called on this path
            got["server, rest"] = read(app_uri)
    err = "".join(line for line in capsys.readouterr().err.splitlines(True) if line.startswith("recipe_audit:"))
    assert f"reading {app_uri} through its recipe_audit endpoints" in err
    assert f"{stock_uri} offers no recipe_audit reads (a stock MLflow server); reading through MLflow's REST" in err
    assert err.count("\n") == 2  # once per server, though each was read twice

    hist = got["sql"][0]
    assert len(hist.rewrites) == 1 and hist.frame["lifecycle_stage"].eq("deleted").sum() == 1
    assert hist.frame["history"].map(len).sum() > 0 and len(hist.frame) == 14
    for path in ("server", "rest", "server, rest"):
        other = got[path][0]
        def shown(frame):  # a tuple holding NaN equals only itself: compare the values' reprs
            return frame.assign(history=frame["history"].map(repr))

        pd.testing.assert_frame_equal(shown(other.frame), shown(hist.frame), check_exact=True)
        assert (other.rewrites, other.directions, other.sweep_ids) == (hist.rewrites, hist.directions, hist.sweep_ids)
        assert other.frame.attrs["curtailment"] == hist.frame.attrs["curtailment"]

    def where_read_aside(card) -> str:
        doc = card.to_json()
        assert "read_path" not in doc["source"]
        doc["source"].pop("tracking_uri")
        for k in ("digest", "content_digest"):
            doc.pop(k)
        return json.dumps(doc, sort_keys=True)

    cards = {path: card for path, (_, card) in got.items()}
    files = {p: render_files(c, tmp_path / "cards" / p.replace(", ", "_")) for p, c in cards.items()}
    assert {"json", "markdown", "html"} <= set(files["server"])
    for kind, path in files["server"].items():  # one server URI, two paths: the same bytes
        assert path.read_bytes() == files["server, rest"][kind].read_bytes(), kind
    assert cards["server"].to_json()["source"]["tracking_uri"] == app_uri
    assert where_read_aside(cards["server"]) == where_read_aside(cards["sql"]) == where_read_aside(cards["rest"])
    md = {p: to_markdown(c).replace(c.to_json()["content_digest"], "<digest>") for p, c in cards.items()}
    assert md["server"] == md["sql"] == md["rest"] and md["sql"].count("<digest>") == 1
    cell = cards["sql"].to_json()["cells"][0]
    assert cell["n_reruns"] == 12 and cell["n_failures"] >= 1


def test_a_store_that_is_no_database_is_read_through_rest(tmp_path, monkeypatch, capsys):
    """A server app over a file store offers no SQL reads: the probe says so and the REST path reads."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri_store = str(tmp_path / "mlruns")
    synthetic_sweep(uri_store, {s: 0.9 for s in range(3)}, sweep_id="a")
    point_server_at(uri_store, tmp_path / "artifacts", monkeypatch)
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "admin")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", ADMIN_PW)
    for uri in serve(team_app(tmp_path, monkeypatch)):
        assert call(uri, f"{PREFIX}/info", user="admin", pw=ADMIN_PW) == (200, {"api": 1, "sql": False})
        frame = read_runs(uri, "exp", [METRIC])
    assert frame.attrs["path"] == "rest" and len(frame) == 3
    assert "offers no recipe_audit reads" in capsys.readouterr().err


def test_the_apps_entry_point_is_registered():
    from mlflow.server import get_app_client
    from mlflow.utils.plugins import get_entry_points

    apps = {e.name: e.value for e in get_entry_points("mlflow.app")}
    assert apps["recipe-audit"] == "recipe_audit.store.server_app:create_app"
    assert type(get_app_client("recipe-audit", tracking_uri="http://127.0.0.1:1")).__name__ == "AuthServiceClient"


