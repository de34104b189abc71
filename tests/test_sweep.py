"""End to end: `python -m recipe_audit -m` in a subprocess, checked in the MLflow store."""

from __future__ import annotations

import json
import shutil

import pytest
from helpers.app import SMALL, run_app
from helpers.inprocess import run_module_here

from recipe_audit import keys


def _runs(uri):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("recipe_audit")
    return client, client.search_runs([exp.experiment_id], max_results=1000)


def test_multirun_logs_every_rerun_nested_under_its_sweep(tmp_path, store):
    # in this process (helpers.inprocess): what it checks is in the store; a sweep of this app in
    # processes of its own is tests/test_launchers.py's
    proc = run_module_here(["-m", "seed=0,1", "recipe.lr=0.003,1e9", f"hydra.sweep.dir={tmp_path}/sweep",
                            "tracking.card_on_multirun_end=false", *SMALL], cwd=tmp_path)
    # every planned rerun ran; the exit status tells a script that two of them failed
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "2 rerun(s) of sweep" in proc.stderr and "seed 0 (failed), seed 1 (failed)" in proc.stderr
    assert "Traceback" not in proc.stderr
    client, runs = _runs(store)
    sweeps = [r for r in runs if r.data.tags.get(keys.TAG_KIND) == keys.KIND_SWEEP]
    reruns = [r for r in runs if r.data.tags.get(keys.TAG_KIND) == keys.KIND_RERUN]
    assert len(sweeps) == 1 and len(reruns) == 4
    parent = sweeps[0]
    assert parent.info.status == "FINISHED"
    assert json.loads(parent.data.tags[keys.TAG_PLANNED_SEEDS]) == [0, 1]
    assert parent.data.tags[keys.TAG_HIGHER_IS_BETTER] == "true"  # the direction, recorded as the sweep starts
    for r in reruns:
        tags = r.data.tags
        assert tags[keys.TAG_PARENT] == parent.info.run_id
        assert tags[keys.TAG_SWEEP_ID] == parent.data.tags[keys.TAG_SWEEP_ID]
        assert tags[keys.TAG_SEED] == r.data.params["seed"]
        assert tags[keys.TAG_MODEL] == "tiny_bert" and tags[keys.TAG_TASK] == "sentiment"
        assert r.data.params["recipe.lr"] in ("0.003", "1000000000.0")
        assert r.data.params["model.hidden_size"] == "64"  # flattened resolved config
    ok = [r for r in reruns if r.data.params["recipe.lr"] == "0.003"]
    bad = [r for r in reruns if r.data.params["recipe.lr"] != "0.003"]
    # one identity per recipe, whatever the seed; another recipe, another identity
    assert len({r.data.tags[keys.TAG_RECIPE_ID] for r in ok}) == 1
    assert len({r.data.tags[keys.TAG_RECIPE_ID] for r in reruns}) == 2
    for r in ok:
        assert r.info.status == "FINISHED"
        m = r.data.metrics
        for audit in ("calibration", "shift_restaurants", "shift_gadgets"):
            assert 0 <= m[keys.accuracy_key(audit)] <= 1
            assert 0.5 <= m[keys.majority_rate_key(audit)] <= 1
        assert m[keys.METRIC_TRAIN_SECONDS] > 0
        hist = client.get_metric_history(r.info.run_id, keys.METRIC_TRAIN_LOSS)
        assert [h.step for h in hist] == list(range(1, 13))
        arts = {a.path for a in client.list_artifacts(r.info.run_id)}
        assert "config.yaml" in arts
    # each rerun's config artifact is its job's resolved config, as OmegaConf writes it (the second
    # seed of a recipe reuses the first one's text around its seed line: recipe_audit.app.main)
    from hydra import compose, initialize_config_dir
    from mlflow.artifacts import load_text
    from omegaconf import OmegaConf

    from recipe_audit.app import config_dir

    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        for r in reruns:
            job = compose("config", overrides=[*SMALL, "tracking.card_on_multirun_end=false",
                                               f"seed={r.data.params['seed']}", f"recipe.lr={r.data.params['recipe.lr']}"])
            assert load_text(f"{r.info.artifact_uri}/config.yaml") == OmegaConf.to_yaml(job, resolve=True)
    for r in bad:  # a rerun that raised: FAILED, with its error, and the sweep went on
        assert r.info.status == "FAILED"
        assert "NonFiniteLossError" in r.data.tags[keys.TAG_ERROR]
        assert keys.accuracy_key("calibration") not in r.data.metrics


def test_single_run_and_default_store_location(tmp_path, monkeypatch, migrated_mlflow_db):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    (tmp_path / "mlruns").mkdir()  # MLflow's tables made already (seconds); the app picks the file
    shutil.copy(migrated_mlflow_db, tmp_path / "mlruns" / "mlflow.db")
    proc = run_module_here(["seed=5", *SMALL], cwd=tmp_path)  # in this process (helpers.inprocess)
    assert proc.returncode == 0, proc.stderr[-3000:]
    db = tmp_path / "mlruns" / "mlflow.db"
    assert db.is_file()
    client, runs = _runs(f"sqlite:///{db}")
    assert len(runs) == 1 and runs[0].data.tags[keys.TAG_SEED] == "5"
    assert keys.TAG_PARENT not in runs[0].data.tags
    assert (tmp_path / "mlruns" / "artifacts").is_dir()


def test_tracking_uri_override_wins_over_environment(tmp_path, store, migrated_mlflow_db):
    shutil.copy(migrated_mlflow_db, tmp_path / "other.db")
    other = f"sqlite:///{tmp_path / 'other.db'}"
    proc = run_module_here([f"tracking.uri={other}", *SMALL], cwd=tmp_path)  # in this process (helpers.inprocess)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(_runs(other)[1]) == 1


@pytest.mark.parametrize(
    "args, needle",
    [
        (["model=nope"], "nope"),
        (["recipe.lrr=0.1"], "lrr"),
        (["seed=abc"], "seed"),
        (["-m", "seed=a,b"], "The seed values must be integers, not a,b."),
        (["task.options.train_domain=mars"], "mars"),
        (["audit.eps=1.5"], "audit.eps"),
        (["audit.sets=[calibration,nowhere]"], "nowhere"),
        (["tracking.uri=http://127.0.0.1:9"], "not reachable"),
        (["tracking.uri=sqlite:////proc/forbidden/mlflow.db"], "tracking store"),
        (["model=hf", "model.name_or_path=/nonexistent/dir"], "Cannot load"),
        (["task.options.n_train=0"], "task.options.n_train must be a positive whole number"),
        (["+task.options.negation_rate=2"], "task.options.negation_rate is a probability"),
        (["seed=-1"], "seed must be a whole number from 0"),
        (["+recipe.lrr=0.001"], "recipe.lrr: no such option"),
        (["audit.primary=nope"], "audit.primary 'nope' is not an audit set"),
        (["audit.taus=[1.5]"], "The release bar tau = 1.5 lies outside [0, 1], where the accuracy"),
    ],
)
def test_bad_input_is_one_sentence(tmp_path, store, args, needle):
    """``python -m recipe_audit`` run in this process (helpers.inprocess): the same entry point,
    composition, callback and checks; the subprocess below runs one case as a user would."""
    flags = [a for a in args if a.startswith("-")]  # before the overrides, which win over SMALL's
    overrides = [a for a in args if not a.startswith("-")]
    proc = run_module_here([*flags, *SMALL, *overrides, f"hydra.sweep.dir={tmp_path}/sweep"], cwd=tmp_path)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    assert needle in proc.stderr, proc.stderr[-2000:]


@pytest.mark.parametrize("flags, override, needle", [
    ([], "tracking.uri=http://admin:{pw}@127.0.0.1:9",
     "tracking.uri holds a password (http://admin:***@127.0.0.1:9), and Hydra would write it"),
    (["-m", "seed=range(2)"], "tracking.uri=http://admin:{pw}@127.0.0.1:9",
     "tracking.uri holds a password (http://admin:***@127.0.0.1:9), and Hydra would write it"),
    (["-m", "seed=range(2)"], "+hydra.job.env_set.MLFLOW_TRACKING_PASSWORD={pw}",
     "The override +hydra.job.env_set.MLFLOW_TRACKING_PASSWORD=... would put"),
], ids=["run", "multirun", "env_set"])
def test_a_password_in_the_tracking_uri_is_refused_before_anything_is_written(tmp_path, store, flags, override,
                                                                               needle):
    """Hydra writes the overrides into .hydra/ (and multirun.yaml) as a job starts: the password is
    refused in the callback's first hook, before, with one sentence that says where it goes."""
    password = "Pw-7c2e-secret"
    before = {p for p in tmp_path.rglob("*")}
    proc = run_module_here([*flags, *SMALL, override.format(pw=password), f"hydra.sweep.dir={tmp_path}/sweep"],
                           cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr + proc.stdout
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("recipe_audit: error: ") and needle in last, last
    assert "MLFLOW_TRACKING_PASSWORD" in last
    assert password not in proc.stdout + proc.stderr
    assert {p for p in tmp_path.rglob("*")} == before  # no outputs/, no sweep folder, nothing


def test_bad_input_in_a_process_of_its_own_is_one_sentence(tmp_path, store):
    proc = run_app([*SMALL, "recipe.lrr=0.1", f"hydra.sweep.dir={tmp_path}/sweep"], cwd=tmp_path, timeout=120)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    assert "Could not override 'recipe.lrr'" in proc.stderr


def test_rerun_logger_writes_the_first_step_at_once_then_batches(store):
    """A live rerun shows in the store that it trains (the first loss is written at once); later
    steps are batched and all written by the end."""
    from mlflow.tracking import MlflowClient

    from recipe_audit import keys
    from recipe_audit.store import rerun_log, tracking

    st = tracking.open_store(store, "recipe_audit")
    cfg = {"recipe": {"name": "default"}, "model": {"name": "tiny_bert"}, "task": {"name": "sentiment"}}
    logger = rerun_log.RerunLogger(st, cfg, 7, recipe_id="r" * 16, audit_sets=["calibration"])
    client = MlflowClient(store)

    def written():
        return [m.step for m in client.get_metric_history(logger.run_id, keys.METRIC_TRAIN_LOSS)]

    logger.log_step(1, 0.7)
    assert written() == [1]
    for step in range(2, 6):
        logger.log_step(step, 0.6)
    assert written() == [1]  # buffered
    logger.finish()
    assert sorted(written()) == [1, 2, 3, 4, 5]
    assert client.get_run(logger.run_id).info.status == "FINISHED"


def test_a_new_sqlite_store_keeps_a_write_ahead_log_and_folds_it_back(tmp_path):
    """The store the callback opens writes through SQLite's write-ahead log (one append a commit,
    readers do not block writers), and a checkpoint leaves the whole sweep in ``mlflow.db``."""
    import sqlite3

    from mlflow import MlflowClient

    from recipe_audit.store import sqlite, tracking

    db = tmp_path / "wal" / "mlflow.db"
    uri = f"sqlite:///{db}"
    st = tracking.open_store(uri, "wal-check")
    assert sqlite3.connect(db).execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    run = MlflowClient(uri).create_run(st.experiment_id)
    MlflowClient(uri).log_metric(run.info.run_id, "val_accuracy", 0.9)
    assert db.with_name("mlflow.db-wal").stat().st_size > 0  # the commit went to the log
    sqlite.checkpoint_store(uri)
    assert db.with_name("mlflow.db-wal").stat().st_size == 0
    copy = tmp_path / "copy.db"  # the database file alone now holds the metric
    copy.write_bytes(db.read_bytes())
    row = sqlite3.connect(copy).execute("select value from metrics where key='val_accuracy'").fetchone()
    assert row == (0.9,)


def test_commits_to_a_store_in_write_ahead_log_mode_skip_the_disk_sync_and_others_keep_it(tmp_path):
    """The store open_store switched to the log commits with ``synchronous=NORMAL`` (1) on the
    connections MLflow's engine hands out; a SQLite file the process did not open as a store, and
    a store left in rollback mode, keep SQLite's default ``FULL`` (2)."""
    import sqlite3

    from sqlalchemy import create_engine, text

    from recipe_audit.store import sqlite, tracking

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    st = tracking.open_store(uri, "sync-check")
    st.client.create_run(st.experiment_id)  # a transaction: every pooled connection sees the log
    engine = create_engine(uri)  # the same file, through another engine: the setting is per file
    with engine.connect() as con:
        assert con.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert con.execute(text("PRAGMA synchronous")).scalar() == 1
    engine.dispose()

    other = tmp_path / "other.db"  # a user's own SQLite file in the same process
    sqlite3.connect(other).execute("PRAGMA journal_mode=WAL").fetchone()
    engine = create_engine(f"sqlite:///{other}")
    with engine.connect() as con:
        assert con.execute(text("PRAGMA synchronous")).scalar() == 2
    engine.dispose()

    rollback = tmp_path / "rollback.db"  # registered, but not in write-ahead-log mode
    sqlite3.connect(rollback).execute("create table t (x)")
    sqlite.commit_without_sync(f"sqlite:///{rollback}")
    engine = create_engine(f"sqlite:///{rollback}")
    with engine.connect() as con:
        assert con.execute(text("PRAGMA journal_mode")).scalar() == "delete"
        assert con.execute(text("PRAGMA synchronous")).scalar() == 2
    engine.dispose()


def test_a_configuration_error_in_a_sweep_closes_its_parent_failed(tmp_path, store):
    """A sweep whose configuration cannot run stops at its first job; its parent run says why
    rather than staying RUNNING, and the job's rerun is recorded FAILED with the same sentence."""
    proc = run_module_here(["-m", "seed=range(2)", *SMALL, "recipe.max_steps=0",  # in this process (helpers.inprocess)
                            f"hydra.sweep.dir={tmp_path}/sweep"], cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    _, runs = _runs(store)
    by_kind = {r.data.tags.get(keys.TAG_KIND): r for r in runs}
    assert {r.info.status for r in runs} == {"FAILED"}
    assert "must be positive" in by_kind[keys.KIND_SWEEP].data.tags[keys.TAG_ERROR]
    assert "must be positive" in by_kind[keys.KIND_RERUN].data.tags[keys.TAG_ERROR]


def test_jobs_of_one_configuration_share_its_checks_and_no_other_does():
    """The app checks a configuration and prepares its task once per process
    (recipe_audit.app.main._recipe_key): the seeds of one configuration share the key; any other
    value, a key added with '+', a number given as a string, or the seed interpolated elsewhere
    gives another, so its checks run."""
    from hydra import compose, initialize_config_dir

    from recipe_audit.app import config_dir
    from recipe_audit.app import main as app_main

    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        def key(*overrides):
            return app_main._recipe_key(compose("config", overrides=[*SMALL, *overrides]))

        assert key("seed=0") == key("seed=7") == key("seed=4294967295")
        others = [key("seed=0", o) for o in ("recipe.lr=0.002", "+recipe.lrr=0.001", "+task.options.k=1",
                                             "+task.options.k='1'", "+x=${seed}")]
        assert len({key("seed=0"), *others}) == 1 + len(others)
        assert key("seed=0", "+x=${seed}") != key("seed=1", "+x=${seed}")
