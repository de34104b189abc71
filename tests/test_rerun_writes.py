"""What a rerun writes to the store, done with less work and the same result.

A rerun's run holds the same whether the built-in trainer's last metrics are written by its
rerun logger as it ends, or handed to the close the Hydra callback makes in the same process
(store/rerun_runs.HeldWrites): every param, metric (value, step, timestamp), tag and status, and
the same outcome. The old path is the one a run this process did not open through
``rerun_runs.open_rerun`` takes (nothing is handed over), so each case runs both, side by side."""

from __future__ import annotations

import math
import time as _time
from types import SimpleNamespace

import pytest
from helpers.app import SMALL
from helpers.inprocess import run_module_here

from recipe_audit import keys
from recipe_audit.app.outcomes import disagreement, no_metric, returned_metrics
from recipe_audit.store import rerun_log, rerun_runs, tracking

AUDITS = ("calibration", "shift_a")
METRICS = [keys.accuracy_key("calibration")]


class _Clock:
    """``time`` for the store modules: a wall clock that moves 1 ms a call from a fixed start."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def time(self) -> float:
        self.now += 0.001
        return self.now

    monotonic = staticmethod(_time.monotonic)


def _result(accuracy: float):
    audits = {name: SimpleNamespace(accuracy=accuracy if name == "calibration" else 0.5, majority_rate=0.6,
                                    pred_mode_share=float("nan") if name == "shift_a" else 0.7) for name in AUDITS}
    return SimpleNamespace(train_seconds=1.25, steps=5, audits=audits)


def _rerun(st, handed: bool, case: str, monkeypatch):
    """One rerun as the built-in app and the callback write it; returns (run id, outcome)."""
    monkeypatch.setattr(rerun_log, "time", _Clock())
    monkeypatch.setattr(rerun_runs, "time", rerun_log.time)
    new = rerun_runs.NewRerun("r-seed3", 3, "f" * 16, "r", model="tiny_bert", task="sentiment")
    if handed:  # as the callback opens it: this process will close it
        run_id, artifact_uri = rerun_runs.open_rerun(st, new)
    else:
        run = st.client.create_run(st.experiment_id, run_name=new.run_name, tags=rerun_runs.rerun_tags(new))
        run_id, artifact_uri = run.info.run_id, run.info.artifact_uri
    logger = rerun_log.RerunLogger.attach(st, run_id, artifact_uri)
    for step, loss in enumerate([0.7, float("nan"), 0.5, 0.5, float("inf")], start=1):
        logger.log_step(step, loss)
    if case == "another writer":  # e.g. the model logged through MLflow's own API: the close reads the run
        logger.log_params({"extra": 1})
    accuracy = {"disagrees": 0.25, "nan": float("nan")}.get(case, 0.875)
    logger.log_result(_result(accuracy))
    if case == "another writer":
        logger.log_params({"later": 2})
    logger.flush()
    returned = {} if case == "returns nothing" else {name: 0.875 for name in AUDITS}
    if case in ("returns the metric", "disagrees"):
        returned = {METRICS[0]: 0.875, "extra_metric": 3.0}
    metrics = [*METRICS, "eval_f1"] if case == "misses a metric" else METRICS
    error = RuntimeError("boom") if case == "raised" else None
    params = {"seed": "3", "recipe.lr": "0.003", "model.name": "tiny_bert", "extra": "1"}
    outcome = rerun_runs.close_rerun(
        st, run_id, params=params, returned=returned_metrics(returned, metrics), error=error, metrics=metrics,
        tags_for=lambda o: {keys.TAG_THREADS: "1", "recipe_audit.fails.x": str(o["status"] != "FINISHED")},
        no_metric=lambda missing: no_metric(returned, missing, metrics), disagree=disagreement)
    return run_id, outcome


def _held(st, run_id):
    """What the store holds of a run: status, params, tags (but the run's own name), every
    metric's history as (step, timestamp, value) and the latest values."""
    client = st.client
    run = client.get_run(run_id)

    def val(v):
        return "nan" if math.isnan(v) else v

    history = {k: sorted((m.step, m.timestamp, val(m.value)) for m in client.get_metric_history(run_id, k))
               for k in run.data.metrics}
    return (run.info.status, dict(run.data.params), dict(run.data.tags),
            {k: val(v) for k, v in run.data.metrics.items()}, history)


@pytest.mark.parametrize("case", ["finished", "disagrees", "nan", "returns nothing", "returns the metric",
                                  "misses a metric", "raised", "another writer"])
def test_a_reruns_run_is_the_same_whether_its_last_metrics_go_with_the_close(store, monkeypatch, case):
    st = tracking.open_store(store, "recipe_audit")
    old_id, old = _rerun(st, False, case, monkeypatch)
    new_id, new = _rerun(st, True, case, monkeypatch)
    assert rerun_runs.held_writes(new_id) is None  # the close took what was handed to it
    assert {**old, "run_id": None} == {**new, "run_id": None} or (
        case == "nan" and repr({**old, "run_id": None}) == repr({**new, "run_id": None}))
    assert _held(st, old_id) == _held(st, new_id)
    status, params, _tags, latest, history = _held(st, new_id)
    assert history[keys.METRIC_TRAIN_LOSS][0][0] == 1 and len(history[keys.METRIC_TRAIN_LOSS]) == 5
    assert status == ("FAILED" if case in ("disagrees", "misses a metric", "raised") else "FINISHED")
    assert (new["error"] is None) == (status == "FINISHED")
    assert ("later" in params) == (case == "another writer")


def test_the_close_reads_the_run_back_unless_the_logger_is_its_only_writer(store, monkeypatch):
    """The built-in trainer's run needs no ``get_run`` at its close; a run MLflow's own API also
    wrote to does (here: a param the task logged itself, kept as it is)."""
    st = tracking.open_store(store, "recipe_audit")
    reads = []
    real = type(st.client).get_run
    monkeypatch.setattr(type(st.client), "get_run", lambda self, run_id: reads.append(run_id) or real(self, run_id))
    _rerun(st, True, "finished", monkeypatch)
    assert reads == []
    run_id, _ = _rerun(st, True, "another writer", monkeypatch)
    assert reads == [run_id]


def test_a_rerun_killed_before_its_close_stays_running_with_its_first_step(store, monkeypatch):
    """What a process killed after the task's last metrics but before the close leaves: the run
    RUNNING (the sweep's end closes it KILLED), its first training step written at once."""
    st = tracking.open_store(store, "recipe_audit")
    run_id, artifact_uri = rerun_runs.open_rerun(st, rerun_runs.NewRerun("r-seed1", 1, "f" * 16, "r"))
    logger = rerun_log.RerunLogger.attach(st, run_id, artifact_uri)
    logger.log_step(1, 0.7)
    logger.log_step(2, 0.6)
    logger.log_result(_result(0.875))
    logger.flush()
    run = st.client.get_run(run_id)
    assert run.info.status == "RUNNING"
    assert set(run.data.metrics) == {keys.METRIC_TRAIN_LOSS}
    assert [m.step for m in st.client.get_metric_history(run_id, keys.METRIC_TRAIN_LOSS)] == [1]
    rerun_runs.close_rerun(st, run_id, metrics=METRICS)  # the close writes what was handed to it
    assert st.client.get_run(run_id).data.metrics[METRICS[0]] == 0.875


def test_the_close_splits_its_writes_within_mlflows_limits():
    from recipe_audit.store.tracking import MAX_METRICS_PER_CALL, MAX_PARAMS_PER_CALL

    metrics, params, tags = list(range(1500)), [f"p{i}" for i in range(250)], [f"t{i}" for i in range(30)]
    calls = list(rerun_runs._batches(metrics, params, tags))
    assert [x for m, _, _ in calls for x in m] == metrics and [x for _, p, _ in calls for x in p] == params
    assert [x for _, _, t in calls for x in t] == tags
    assert all(len(p) <= MAX_PARAMS_PER_CALL and len(t) <= MAX_PARAMS_PER_CALL and len(m) + len(p) + len(t)
               <= MAX_METRICS_PER_CALL for m, p, t in calls)
    assert list(rerun_runs._batches([], [], [])) == [([], [], [])]


def _sweep_runs(uri):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("recipe_audit")
    runs = client.search_runs([exp.experiment_id], f"tags.`{keys.TAG_KIND}` = '{keys.KIND_RERUN}'")
    out = {}
    for r in runs:
        tags = {k: v for k, v in r.data.tags.items() if k not in (keys.TAG_SWEEP_ID, keys.TAG_PARENT,
                                                                   "mlflow.parentRunId")}
        history = {k: [(m.step, m.value) for m in sorted(client.get_metric_history(r.info.run_id, k),
                                                          key=lambda m: (m.step, m.timestamp))]
                   for k in r.data.metrics if k != keys.METRIC_TRAIN_SECONDS}
        params = dict(r.data.params)
        assert params.pop("tracking.uri") == uri  # the one param told apart: each way has its store
        out[params["recipe.lr"]] = (r.info.status, params, tags, history,
                                           sorted(r.data.metrics))
    return out


def test_the_apps_reruns_are_the_same_whether_their_last_metrics_go_with_the_close(tmp_path, migrated_mlflow_db,
                                                                                   monkeypatch):
    """The built-in app, in this process, once as now and once with nothing handed to the close
    (the way before): the same run (the training seconds' value and the timestamps aside, which
    differ from run to run). A rerun that raised hands nothing over (the cases above)."""
    import shutil

    held = {}
    for way in ("handed", "written by the logger"):
        (tmp_path / way).mkdir()
        shutil.copy(migrated_mlflow_db, tmp_path / way / "mlflow.db")
        uri = f"sqlite:///{tmp_path / way / 'mlflow.db'}"
        with monkeypatch.context() as m:
            if way != "handed":
                m.setattr(rerun_log, "held_writes", lambda run_id: None)
            proc = run_module_here(["-m", "seed=3", f"hydra.sweep.dir={tmp_path / way}/sweep",
                                    f"tracking.uri={uri}", "tracking.card_on_multirun_end=false", *SMALL],
                                   cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        held[way] = _sweep_runs(uri)
    for lr, run in held["handed"].items():
        for part, new, old in zip(("status", "params", "tags", "history", "keys"), run, held["written by the logger"][lr],
                                  strict=True):
            assert new == old, (lr, part, {k: (new[k], old.get(k)) for k in new if new[k] != old.get(k)}
                                if isinstance(new, dict) else None)
    assert held["handed"] == held["written by the logger"]
    ((status, params, _tags, history, metrics),) = held["handed"].values()
    assert status == "FINISHED" and params["seed"] == "3" and keys.accuracy_key("calibration") in metrics
    assert [step for step, _ in history[keys.METRIC_TRAIN_LOSS]] == list(range(1, 13))


def _job_config_by_copy(config):
    """The job's config as sweep_plan.job_config read it before (a copy without Hydra's node)."""
    from omegaconf import OmegaConf

    task = OmegaConf.masked_copy(config, [k for k in config if k != "hydra"])
    return OmegaConf.to_container(task, resolve=True), OmegaConf.to_container(task, resolve=False)


def test_a_jobs_config_is_read_as_from_a_copy_without_hydras_node():
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf, open_dict

    from recipe_audit.app import sweep_plan
    from recipe_audit.app.main import config_dir

    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        app = compose("config", overrides=["seed=3", "threads=1"], return_hydra_config=True)
    assert sweep_plan.job_config(app) == _job_config_by_copy(app)
    odd = OmegaConf.create({
        "hydra": {"job": {"name": "j"}}, "seed": 3, "name": "${model.name}-${seed}", "missing": "???",
        "model": {"name": "m", "size": "${seed}", "up": "${name}", "list": [1, "${seed}", {"x": "${..0}"}],
        "gone": "???"},
        "alias": "${model}", "none": None, "up": "${model.size}", "whole": "${shift}", "flag": True, "shift": {"sets": ["a", "b"]},
    })
    with open_dict(odd):
        odd.typed_none = OmegaConf.create(None)
    assert sweep_plan.job_config(odd) == _job_config_by_copy(odd)
    resolved, raw = sweep_plan.job_config(odd)
    assert raw["alias"] == "${model}" and resolved["alias"]["size"] == 3 and raw["model"]["list"][1] == "${seed}"
    # a reference to Hydra's node fails in the copy, as in the task's own config: read as before
    with open_dict(odd):
        odd.model.job = "${hydra.job.name}"
    with pytest.raises(Exception) as copied:
        _job_config_by_copy(odd)
    with pytest.raises(type(copied.value)):
        sweep_plan.job_config(odd)
    # the key alone, and through oc.select: the copy has no such key (None, the default) either
    for written in ("${oc.select:hydra,none}", "${oc.select:hydra, dflt}"):
        with open_dict(odd):
            odd.model.job = written
        assert sweep_plan.job_config(odd) == _job_config_by_copy(odd)
        assert sweep_plan.job_config(odd)[0]["model"]["job"] in (None, "none", "dflt")
