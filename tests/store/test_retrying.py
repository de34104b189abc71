"""Calls to a tracking server that outlast its restart, and writes a retry cannot double
(recipe_audit/store/retrying.py), in process: a real MlflowClient on a SQLite store behind a shim
that fails the way a server under load or restarting does (the first try lost, or done twice)."""

from __future__ import annotations

import logging

import pytest
import requests
from mlflow.entities import Metric, Param, RunTag
from mlflow.exceptions import MlflowException
from mlflow.protos import databricks_pb2 as codes
from mlflow.tracking import MlflowClient

from recipe_audit import keys
from recipe_audit.store import history, retrying, tracking


def _lost(what: str) -> MlflowException:
    """What MLflow's HTTP client raises once its own retries are spent on a refused connection."""
    try:
        raise requests.exceptions.ConnectionError(f"HTTPConnectionPool: Max retries exceeded ({what}; "
                                                  "Failed to establish a new connection: [Errno 111] Connection refused)")
    except requests.exceptions.ConnectionError:
        try:
            raise MlflowException(f"API request to http://127.0.0.1:5000/{what} failed with exception "
                                  "HTTPConnectionPool(host='127.0.0.1', port=5000): Max retries exceeded "
                                  "(Caused by NewConnectionError(... [Errno 111] Connection refused))")
        except MlflowException as exc:
            return exc


class Flaky:
    """A client whose named calls misbehave: ``lose[name]`` times, the call is carried out and its
    answer lost (the error a client sees); ``refuse[name]`` times, it is refused before it reaches
    the store; ``twice[name]`` times, it is carried out twice (MLflow's own retry of a POST whose
    first answer timed out) and the second answer returned."""

    def __init__(self, client, lose=None, refuse=None, twice=None):
        self.client, self.calls = client, []
        self.lose, self.refuse, self.twice = dict(lose or {}), dict(refuse or {}), dict(twice or {})

    def __getattr__(self, name):
        real = getattr(self.client, name)

        def call(*a, **kw):
            self.calls.append(name)
            if self.refuse.get(name):
                self.refuse[name] -= 1
                raise _lost(name)
            if self.twice.get(name):
                self.twice[name] -= 1
                real(*a, **kw)
                return real(*a, **kw)
            out = real(*a, **kw)
            if self.lose.get(name):
                self.lose[name] -= 1
                raise _lost(name)
            return out
        return call


class Clock:
    def __init__(self):
        self.now, self.slept = 0.0, []

    def sleep(self, s):
        self.slept.append(s)
        self.now += s

    def __call__(self):
        return self.now


def _client(store, wait_s=60.0, **kw):
    real = MlflowClient(tracking_uri=store)
    clock = Clock()
    return retrying.RetryingClient(Flaky(real, **kw), "http://server", wait_s=wait_s, sleep=clock.sleep,
                                   clock=clock), real, clock


def _runs(real, exp_id):
    return real.search_runs([exp_id], "")


def test_transient_tells_a_server_away_from_a_wrong_request():
    assert retrying.transient(_lost("runs/create"))
    assert retrying.transient(MlflowException("x", error_code=codes.TEMPORARILY_UNAVAILABLE))
    assert not retrying.transient(MlflowException("x", error_code=codes.INVALID_PARAMETER_VALUE))
    assert not retrying.transient(MlflowException("x", error_code=codes.RESOURCE_ALREADY_EXISTS))
    refused = requests.Response()
    refused.status_code = 503
    assert retrying.transient(requests.exceptions.HTTPError(response=refused))
    refused.status_code = 403
    assert not retrying.transient(requests.exceptions.HTTPError(response=refused))
    assert not retrying.transient(requests.exceptions.SSLError("certificate verify failed"))


def test_a_run_created_but_its_answer_lost_is_created_once(store, caplog):
    client, real, clock = _client(store, lose={"create_run": 1}, refuse={"search_runs": 2})
    exp = real.create_experiment("e")
    with caplog.at_level(logging.WARNING, logger="recipe_audit"):
        run = client.create_run(exp, run_name="r", tags={keys.TAG_KIND: keys.KIND_RERUN, keys.TAG_SEED: "3"})
    runs = _runs(real, exp)
    assert [r.info.run_id for r in runs] == [run.info.run_id]  # found again, not created a second time
    assert client.wrapped.calls.count("create_run") == 1
    assert runs[0].data.tags[keys.TAG_SEED] == "3" and len(runs[0].data.tags[keys.TAG_CREATE_TOKEN]) == 32
    said = [r.getMessage() for r in caplog.records]
    assert said[0] == ("recipe_audit: the tracking server http://server did not answer creating a run (connection "
                       "refused); waiting for it, up to 60 s")
    # the lost create, then two refused look-ups: 2 + 4 + 5 s of waiting
    assert said[-1] == "recipe_audit: the tracking server http://server answers again (after 11 s)"
    assert clock.slept == [2.0, 4.0, 5.0]


def test_a_run_created_twice_by_a_retried_request_keeps_one(store):
    """MLflow's client sent the create twice (its first answer timed out): the run answered is the
    run; the copy is closed KILLED as a duplicate and no reader counts it."""
    client, real, _ = _client(store, twice={"create_run": 1})
    exp = real.create_experiment("e")
    run = client.create_run(exp, run_name="r", tags={keys.TAG_KIND: keys.KIND_RERUN, keys.TAG_SEED: "0",
                                                     keys.TAG_RECIPE_ID: "abc"})
    client.log_batch(run.info.run_id, metrics=[Metric("acc", 0.9, 1, 0)], params=[Param("lr", "0.1")])
    client.set_terminated(run.info.run_id, "FINISHED")
    by_id = {r.info.run_id: r for r in _runs(real, exp)}
    assert len(by_id) == 2
    dup = next(r for rid, r in by_id.items() if rid != run.info.run_id)
    assert dup.info.status == "KILLED" and dup.data.tags[keys.TAG_KIND] == keys.KIND_DUPLICATE
    assert dup.data.tags[keys.TAG_DUPLICATE_OF] == run.info.run_id
    assert by_id[run.info.run_id].data.tags[keys.TAG_KIND] == keys.KIND_RERUN
    assert not [r for r in by_id.values() if r.info.status == "RUNNING"]
    # the release gate's reader (every run, as evidence) sees one rerun; a rerun merely retagged
    # as a copy still counts
    assert list(history.read_history(store, "e", "acc").frame["run_id"]) == [run.info.run_id]
    real.set_tag(run.info.run_id, keys.TAG_KIND, keys.KIND_DUPLICATE)
    real.set_tag(run.info.run_id, keys.TAG_DUPLICATE_OF, dup.info.run_id)
    assert list(history.read_history(store, "e", "acc").frame["run_id"]) == [run.info.run_id]


def test_repeated_writes_leave_the_store_as_one_write(store):
    """Metrics, params and tags sent again after an answer was lost: one row each."""
    client, real, _ = _client(store, lose={"log_batch": 2, "set_terminated": 1})
    exp = real.create_experiment("e")
    rid = real.create_run(exp).info.run_id
    client.log_batch(rid, metrics=[Metric("loss", 0.5, 1000, 1), Metric("loss", 0.4, 1001, 2)],
                     params=[Param("lr", "0.1")], tags=[RunTag("t", "v")])
    client.log_batch(rid, metrics=[Metric("acc", 0.8, 1002, 2)])
    client.set_terminated(rid, "FINISHED")
    assert [(m.step, m.value) for m in real.get_metric_history(rid, "loss")] == [(1, 0.5), (2, 0.4)]
    assert len(real.get_metric_history(rid, "acc")) == 1
    run = real.get_run(rid)
    assert run.data.params == {"lr": "0.1"} and run.data.tags["t"] == "v" and run.info.status == "FINISHED"
    assert client.wrapped.calls.count("log_batch") == 4


def test_an_experiment_created_but_its_answer_lost_is_the_one(store):
    client, real, _ = _client(store, lose={"create_experiment": 1})
    exp_id = client.create_experiment("team")
    assert real.get_experiment_by_name("team").experiment_id == exp_id
    assert client.wrapped.calls.count("create_experiment") == 1


def test_open_store_takes_an_experiment_another_sweep_just_created(store, monkeypatch):
    """Two sweeps starting at once both see no experiment; the second create is refused as existing:
    that experiment is the one wanted (all four sweeps exited 2 before)."""
    real = MlflowClient(tracking_uri=store)
    looks = []

    class Racing:
        def __getattr__(self, name):
            return getattr(real, name)

        def get_experiment_by_name(self, name):
            looks.append(name)
            if len(looks) == 1:  # the other sweep creates it right after this look
                real.create_experiment(name)
                return None
            return real.get_experiment_by_name(name)

    monkeypatch.setattr(tracking, "client_for", lambda uri: Racing())
    monkeypatch.setattr(tracking, "_STORES", {})
    s = tracking.open_store(store, "raced")
    assert s.experiment_id == real.get_experiment_by_name("raced").experiment_id


def test_a_server_away_longer_than_the_budget_raises_its_error(store, caplog):
    client, real, clock = _client(store, wait_s=40.0, refuse={"get_run": 10**6})
    with caplog.at_level(logging.WARNING, logger="recipe_audit"), pytest.raises(MlflowException, match="API request"):
        client.get_run("0" * 32)
    assert 40 <= clock.now < 46
    said = [r.getMessage() for r in caplog.records]
    assert [s for s in said if s.startswith("recipe_audit: still waiting for the tracking server http://server (")]
    assert "has not answered for 40 s; giving up" in said[-1]


def test_no_waiting_when_turned_off_or_for_a_wrong_request(store, monkeypatch):
    monkeypatch.setenv(retrying.WAIT_ENV, "0")
    assert retrying.wait_budget() == 0
    client, real, clock = _client(store, wait_s=None, refuse={"get_run": 1})
    with pytest.raises(MlflowException):
        client.get_run("0" * 32)
    assert clock.slept == []
    client, real, clock = _client(store, wait_s=60)
    with pytest.raises(MlflowException) as err:  # no such run: a wrong request, answered at once
        client.get_run("0" * 32)
    assert not retrying.transient(err.value) and clock.slept == []


def test_client_for_wraps_a_server_only(store):
    assert isinstance(tracking.client_for("http://127.0.0.1:1"), retrying.RetryingClient)
    assert isinstance(tracking.client_for(store), MlflowClient)


def test_a_rerun_s_artifacts_are_uploaded_again(store, tmp_path):
    """The acceptance experiment's adapter files go through the artifact repository, not the
    client: their upload waits out the server too."""
    from recipe_audit.store import rerun_log

    client, real, clock = _client(store)
    exp = real.create_experiment("e")
    run = real.create_run(exp)
    logger = rerun_log.RerunLogger.attach(tracking.Store(store, exp, "e"), run.info.run_id, run.info.artifact_uri)
    logger.client = client

    class Repo:
        calls = 0

        def log_artifacts(self, local_dir, artifact_path):
            self.calls += 1
            if self.calls == 1:
                raise _lost("mlflow-artifacts/artifacts")

    logger._artifacts = repo = Repo()
    logger.log_artifacts(tmp_path, "adapter")
    assert repo.calls == 2 and clock.slept == [2.0]


def test_a_server_that_did_not_come_back_stops_the_sweep_in_one_sentence(store, capsys):
    """A job whose rerun could not be opened or closed because the server is gone (its calls
    waited and gave up) stops the sweep with the resume sentence; a store that answers does not."""
    from socket import socket

    from recipe_audit.app import jobs

    with socket() as s:  # a port nobody listens on: connection refused
        s.bind(("127.0.0.1", 0))
        gone = f"http://127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(SystemExit) as stopped:
        jobs.stop_if_store_gone(gone, 3)
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"recipe_audit: error: The MLflow tracking server at {gone} is not reachable (")
    assert err.endswith("Seed 3 was not recorded and the sweep stops here; the reruns that finished are in the "
                        "store: relaunch the same command with tracking.resume=true once it is back.")
    jobs.stop_if_store_gone(store, 3)  # answers: returns, the caller raises
