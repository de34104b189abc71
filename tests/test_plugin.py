"""The recipe_audit callback in a Hydra app that knows nothing about recipe_audit.

The apps here are written into tmp_path and run in a subprocess from there, as a user runs their
own ``train.py``: the option ``hydra/callbacks=recipe_audit`` is found through the search-path
plugin, not through anything the app imports. (The four client examples in ``examples/`` are
swept in ``tests/test_examples.py``.)
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap

import pytest
from helpers import procs
from helpers.inprocess import run_script_here

from recipe_audit import keys

PLAIN_APP = '''
import os, random
import hydra, mlflow

@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg):
    rng = random.Random(cfg.seed)
    env_run_id = os.environ.get("MLFLOW_RUN_ID")  # mlflow.start_run() consumes (unsets) it
    with mlflow.start_run():
        mlflow.log_param("env_run_id", env_run_id)
        mlflow.log_metric("loss", 1.0, step=0)
        if str(cfg.seed) == os.environ.get("CRASH_SEED"):
            raise RuntimeError(f"injected crash for seed {cfg.seed}")
        acc = 0.5 if cfg.seed == cfg.collapse_seed else 0.85 + 0.1 * rng.random()
        mlflow.log_metric("val_accuracy", acc)

main()
'''

BARE_APP = '''
import os, random
import hydra

@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg):
    if cfg.seed == cfg.collapse_seed or os.environ.get("COLLAPSE_ALL"):
        return 0.5
    return 0.85 + 0.1 * random.Random(cfg.seed).random()

main()
'''

CONFIG = '''
seed: 0
lr: 0.1
collapse_seed: 4
model:
  width: 8
# paths that differ per job: not part of the recipe identity
out_dir: ${hydra:runtime.output_dir}
ckpt: ${out_dir}/model.pt
'''


def _app(tmp_path, source: str):
    app = tmp_path / "app"
    (app / "conf").mkdir(parents=True)
    (app / "train.py").write_text(textwrap.dedent(source))
    (app / "conf" / "config.yaml").write_text(textwrap.dedent(CONFIG))
    return app


def _run(app, args, env_extra=None, timeout=600):
    # as from a user's shell: no run or sweep of another test's process
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_RUN", "RECIPE_AUDIT_"))}
    env.update({"HYDRA_FULL_ERROR": "0", **(env_extra or {})})
    return procs.run([sys.executable, "train.py", *args], cwd=app, env=env, capture_output=True, text=True,
                     timeout=timeout)


def _runs(uri, experiment="train"):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return client, []
    return client, client.search_runs([exp.experiment_id], max_results=1000)


def _kind(runs, kind):
    return [r for r in runs if r.data.tags.get(keys.TAG_KIND) == kind]


PLUGIN = ["hydra/callbacks=recipe_audit", "hydra.callbacks.recipe_audit.metric=val_accuracy"]


@pytest.mark.parametrize("launcher", [
    [],
    # a user's app under joblib, by default: tests/test_examples.py (plain_mlflow, a crash, joblib)
    pytest.param(["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"], marks=pytest.mark.slow),
], ids=["basic", "joblib"])
def test_a_users_sweep_becomes_reruns_and_a_card(tmp_path, store, launcher):
    app = _app(tmp_path, PLAIN_APP)
    sweep_dir = tmp_path / "sweep"
    proc = _run(app, ["-m", "seed=range(6)", *PLUGIN, *launcher, f"hydra.sweep.dir={sweep_dir}"],
                env_extra={"CRASH_SEED": "2"})
    # every planned seed ran and the card was written; the exit status says a rerun failed
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert "1 rerun(s) of sweep" in proc.stderr and "seed 2 (failed)" in proc.stderr
    client, runs = _runs(store)
    (parent,) = _kind(runs, keys.KIND_SWEEP)
    reruns = {int(r.data.tags[keys.TAG_SEED]): r for r in _kind(runs, keys.KIND_RERUN)}
    assert sorted(reruns) == [0, 1, 2, 3, 4, 5]
    assert parent.info.status == "FINISHED"
    assert json.loads(parent.data.tags[keys.TAG_PLANNED_SEEDS]) == list(range(6))
    assert len({r.data.tags[keys.TAG_RECIPE_ID] for r in reruns.values()}) == 1  # output paths left out
    pids = set()
    for seed, r in reruns.items():
        tags, params = r.data.tags, r.data.params
        assert tags[keys.TAG_PARENT] == parent.info.run_id
        assert tags[keys.TAG_SWEEP_ID] == parent.data.tags[keys.TAG_SWEEP_ID]
        assert params["env_run_id"] == r.info.run_id  # the user's mlflow.start_run() logged into the rerun
        assert params["seed"] == str(seed) and params["model.width"] == "8" and params["lr"] == "0.1"
        assert "loss" in r.data.metrics  # the user's own metrics are in the rerun
        pids.add(int(tags[keys.TAG_PID]))
        if seed == 2:
            assert r.info.status == "FAILED"
            assert tags[keys.TAG_ERROR] == "RuntimeError: injected crash for seed 2"
            assert "val_accuracy" not in r.data.metrics
        else:
            assert r.info.status == "FINISHED"
            assert (r.data.metrics["val_accuracy"] < 0.7) == (seed == 4)
    if launcher:  # joblib: the jobs ran in worker processes, each logging into its own rerun
        assert proc.returncode == 1 and os.getpid() not in pids and len(pids) >= 1
    card = json.loads((sweep_dir / "card" / "card.json").read_text())
    (cell,) = card["cells"]
    assert (cell["n_reruns"], cell["n_failures"], cell["tau"]) == (6, 2, 0.7)  # the crash and the collapse
    assert cell["verdict"] == "insufficient-evidence"  # 6 reruns are under the sample floor of 22
    assert [u["seed"] for u in cell["unfinished"]] == [2]
    # where people look: the experiment opens on its runs; the sweep's row shows the verdict;
    # a search lists the reruns that failed the bar
    assert client.get_experiment_by_name("train").tags["mlflow.experimentKind"] == "custom_model_development"
    parent = client.get_run(parent.info.run_id)
    assert parent.data.tags["recipe_audit.verdict"] == "insufficient-evidence"
    assert (parent.data.metrics["n_reruns"], parent.data.metrics["n_failures"]) == (6, 2)
    assert "| 0.7 | 2/6 |" in parent.data.tags["mlflow.note.content"]
    failing = {int(r.data.tags[keys.TAG_SEED]) for r in client.search_runs(
        [parent.info.experiment_id], f"tags.`{keys.fails_tag('val_accuracy', 0.7)}` = 'true'")}
    assert failing == {2, 4}
    (card_run,) = _kind(runs, keys.KIND_CARD)
    arts = {a.path for a in client.list_artifacts(card_run.info.run_id)}
    assert {"card.json", "card.md"} <= arts
    assert "val_accuracy" in proc.stdout and "2/6" in proc.stdout  # the printed verdict table


@pytest.mark.slow  # by default: tests/test_examples.py (bare_function, a collapse, basic launcher)
def test_a_task_that_returns_its_metric(tmp_path, store):
    app = _app(tmp_path, BARE_APP)
    proc = _run(app, ["-m", "seed=range(5)", *PLUGIN, f"hydra.sweep.dir={tmp_path / 'sweep'}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, runs = _runs(store)
    reruns = _kind(runs, keys.KIND_RERUN)
    assert len(reruns) == 5 and all(r.info.status == "FINISHED" for r in reruns)
    collapsed = [int(r.data.tags[keys.TAG_SEED]) for r in reruns if r.data.metrics["val_accuracy"] < 0.7]
    assert collapsed == [4]
    cell = json.loads((tmp_path / "sweep" / "card" / "card.json").read_text())["cells"][0]
    assert (cell["n_reruns"], cell["n_failures"]) == (5, 1)


def test_one_run_without_multirun_is_a_rerun_without_a_sweep(tmp_path, store):
    app = _app(tmp_path, PLAIN_APP)
    proc = run_script_here(app / "train.py", ["seed=3", *PLUGIN])  # in this process (helpers.inprocess)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, runs = _runs(store)
    (r,) = runs
    assert r.data.tags[keys.TAG_KIND] == keys.KIND_RERUN and r.data.tags[keys.TAG_SEED] == "3"
    assert r.info.status == "FINISHED" and keys.TAG_PARENT not in r.data.tags


def test_resume_runs_only_the_unfinished_seeds(tmp_path, store):
    app = _app(tmp_path, PLAIN_APP)
    args = ["-m", "seed=range(5)", *PLUGIN, f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    first = _run(app, args, env_extra={"CRASH_SEED": "1"})
    assert first.returncode == 1
    second = _run(app, [*args, "hydra.callbacks.recipe_audit.resume=true"])
    assert second.returncode == 0, second.stderr[-3000:]
    out = second.stdout + second.stderr
    assert out.count("skipped (resume)") == 4 and "seed 1: val_accuracy=" in out
    _, runs = _runs(store)
    assert len(_kind(runs, keys.KIND_SWEEP)) == 1  # the same sweep, reopened
    seeds = sorted(int(r.data.tags[keys.TAG_SEED]) for r in _kind(runs, keys.KIND_RERUN))
    assert seeds == [0, 1, 1, 2, 3, 4]
    # nothing left to run: no job starts, so in this process (helpers.inprocess)
    third = run_script_here(app / "train.py", [*args, "hydra.callbacks.recipe_audit.resume=true"])
    assert third.returncode == 0 and "nothing to run" in third.stdout + third.stderr
    assert len(_kind(_runs(store)[1], keys.KIND_RERUN)) == 6


@pytest.mark.parametrize("args, needle", [
    (["seed=range(3)", *PLUGIN, "hydra.callbacks.recipe_audit.metrc=x"], "metrc"),  # a typo: Hydra's own message
    (["seed=range(3)", "hydra/callbacks=recipe_audit"], "hydra.callbacks.recipe_audit.metric names no metric"),
    (["seed=range(3)", *PLUGIN, "hydra.callbacks.recipe_audit.seed_key=trainer.seed"],
     "seed key 'trainer.seed' is not in the app's config"),
    (["seed=range(3)", *PLUGIN, "hydra.callbacks.recipe_audit.eps=1.5"],
     "hydra.callbacks.recipe_audit.eps must lie strictly between 0 and 1"),
    (["seed=range(3)", *PLUGIN, "hydra.callbacks.recipe_audit.delta=0.5"],
     "hydra.callbacks.recipe_audit.delta must lie strictly between 0 and 0.5"),
    (["seed=range(3)", *PLUGIN, "hydra.callbacks.recipe_audit.taus=[]"], "is empty"),
    ([*PLUGIN, "seed=a,b"], "seed values must be integers"),
    (["seed=range(3)", *PLUGIN, "hydra.callbacks.recipe_audit.tracking_uri=http://u:secret@127.0.0.1:9"],
     "The MLflow tracking server at http://u:***@127.0.0.1:9 is not reachable"),
])
def test_bad_input_stops_before_any_job(tmp_path, store, args, needle):
    """The user's ``train.py`` run in this process (helpers.inprocess): the same Hydra entry
    point, plugin and callback; the subprocess below runs one case as a user would."""
    app = _app(tmp_path, PLAIN_APP)
    proc = run_script_here(app / "train.py", ["-m", *args])
    assert proc.returncode != 0
    assert needle in proc.stderr, proc.stderr[-2000:]
    assert "secret" not in proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr
    assert _kind(_runs(store)[1], keys.KIND_RERUN) == []  # no job ran


def test_bad_input_in_a_process_of_its_own_stops_before_any_job(tmp_path, store):
    app = _app(tmp_path, PLAIN_APP)
    proc = _run(app, ["-m", "seed=range(3)", "hydra/callbacks=recipe_audit"], timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip() == ("recipe_audit: error: hydra.callbacks.recipe_audit.metric names no metric; "
                                   "give the key your training code logs, e.g. metric=eval_accuracy.")
    assert _kind(_runs(store)[1], keys.KIND_RERUN) == []


def test_a_metric_no_job_logged_is_named(tmp_path, store):
    app = _app(tmp_path, PLAIN_APP)
    proc = run_script_here(app / "train.py", ["-m", "seed=range(2)", "hydra/callbacks=recipe_audit",  # in process
                                              "hydra.callbacks.recipe_audit.metric=eval_acc",
                                              f"hydra.sweep.dir={tmp_path / 'sweep'}"])
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert out.count("eval_acc never logged") == 2 and "eval_acc" in proc.stderr.splitlines()[-1]
    assert "Traceback" not in proc.stderr


def test_the_curtailing_sweeper_stops_a_users_sweep(tmp_path, store):
    """hydra/sweeper=curtail works for a user's app: it reads the callback's metric and what the
    callback recorded for each job; a recipe whose reruns all collapse stops after one batch."""
    app = _app(tmp_path, BARE_APP)
    sweep_dir = tmp_path / "sweep"
    proc = _run(app, ["-m", "seed=range(30)", "hydra/sweeper=curtail", "hydra.sweeper.batch_size=4", *PLUGIN,
                      f"hydra.sweep.dir={sweep_dir}"], env_extra={"COLLAPSE_ALL": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, runs = _runs(store)
    reruns = _kind(runs, keys.KIND_RERUN)
    assert sorted(int(r.data.tags[keys.TAG_SEED]) for r in reruns) == [0, 1, 2, 3]
    (parent,) = _kind(runs, keys.KIND_SWEEP)
    assert json.loads(parent.data.tags[keys.TAG_PLANNED_SEEDS]) == list(range(30))  # the plan stays recorded
    assert json.loads(parent.data.tags[keys.TAG_CURTAILMENT])["n_launched"] == 4
    cell = json.loads((sweep_dir / "card" / "card.json").read_text())["cells"][0]
    assert (cell["n_reruns"], cell["n_failures"], cell["verdict"]) == (4, 4, "unsupported")
    assert cell["curtailment"]["n_planned"] == 30 and cell["curtailment"]["stopped_early"]
    assert "release-supported at N = 30 allows at most 0 failures" in cell["curtailment"]["sweep_reason"]
    assert "4/4 (N = 30 planned)" in proc.stdout


def test_only_the_main_process_writes_under_a_multi_process_launch(tmp_path, store):
    """Under accelerate launch / torchrun (RANK set) only rank 0 opens runs and the card; another
    rank runs the same jobs and writes nothing of recipe_audit's."""
    app = _app(tmp_path, BARE_APP)
    proc = run_script_here(app / "train.py", ["-m", "seed=range(2)", *PLUGIN, f"hydra.sweep.dir={tmp_path / 'sweep'}"],
                           env_extra={"RANK": "1", "WORLD_SIZE": "2"})  # in this process (helpers.inprocess)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _runs(store)[1] == [] and not (tmp_path / "sweep" / "card").exists()


def test_the_callback_named_by_target_in_the_apps_own_config(tmp_path, store):
    app = _app(tmp_path, BARE_APP)
    with open(app / "conf" / "config.yaml", "a") as f:
        f.write(textwrap.dedent("""
            hydra:
              callbacks:
                recipe_audit:
                  _target_: recipe_audit.app.callback.RecipeAuditCallback
                  metric: val_accuracy
                  taus: [0.6, 0.9]
            """))
    proc = run_script_here(app / "train.py", ["-m", "seed=range(3)", f"hydra.sweep.dir={tmp_path / 'sweep'}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = json.loads((tmp_path / "sweep" / "card" / "card.json").read_text())["cells"]
    assert [(c["tau"], c["n_reruns"]) for c in cells] == [(0.6, 3), (0.9, 3)]


@pytest.mark.slow
def test_concurrent_sweeps_on_a_new_store_each_get_their_parent_and_card_ci(tmp_path, new_store):
    """Four sweeps started together on a store that does not exist yet: MLflow's tables and the
    experiment are created once, under a lock, and every sweep gets its parent run, its reruns
    and its card."""
    app = _app(tmp_path, BARE_APP)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_RUN", "RECIPE_AUDIT_"))}
    started = [procs.spawn([sys.executable, "train.py", "-m", "seed=range(2)", *PLUGIN,
                               f"hydra.sweep.dir={tmp_path / f'sweep{i}'}"], cwd=app, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(4)]
    outs = [p.communicate(timeout=procs.timeout(600)) for p in started]
    assert [p.returncode for p in started] == [0] * 4, [o[1][-1500:] for o in outs]
    _, runs = _runs(new_store)
    assert len(_kind(runs, keys.KIND_SWEEP)) == 4 and len(_kind(runs, keys.KIND_RERUN)) == 8
    assert len(_kind(runs, keys.KIND_CARD)) == 4
    assert all((tmp_path / f"sweep{i}" / "card" / "card.json").is_file() for i in range(4))


DELETING_APP = '''
import os
import hydra

@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg):
    if cfg.seed == 2:  # someone removes the store mid-sweep
        os.remove(os.environ["MLFLOW_TRACKING_URI"][len("sqlite:///"):])
    return 0.9

if __name__ == "__main__":
    main()
'''


def test_a_store_deleted_mid_sweep_stops_the_sweep_non_zero(tmp_path, store):
    """SQLite writes on into a deleted file without a word: the sweep notices the file is gone,
    says so in one sentence and exits non-zero rather than recording its card into nothing."""
    app = _app(tmp_path, DELETING_APP)
    proc = _run(app, ["-m", "seed=range(5)", *PLUGIN, f"hydra.sweep.dir={tmp_path / 'sweep'}"])
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert "was deleted or replaced while this sweep was writing to it" in proc.stderr
    assert "seed 3" not in proc.stdout + proc.stderr  # it stopped at the seed that lost the store


@pytest.fixture
def full_artifact_disk(tmp_path):
    """The store's artifact directory on a 64 KiB tmpfs that is already full (root only)."""
    artifacts = tmp_path / "store" / "artifacts"
    artifacts.mkdir(parents=True)
    if procs.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(artifacts)],
                 capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        with open(artifacts / "filler", "wb") as fh:
            with contextlib.suppress(OSError):
                fh.write(b"\0" * 65536)
        yield f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    finally:
        procs.run(["umount", "-l", str(artifacts)], capture_output=True)


def test_a_full_artifact_disk_fails_the_card_run_and_the_exit_status(tmp_path, full_artifact_disk):
    """The card cannot be written: one sentence, exit 2, the card run FAILED (no half-written card
    counts as a card), every rerun recorded (FINISHED; none left RUNNING)."""
    app = _app(tmp_path, PLAIN_APP)
    proc = _run(app, ["-m", "seed=range(3)", *PLUGIN, f"hydra.sweep.dir={tmp_path / 'sweep'}"],
                env_extra={"MLFLOW_TRACKING_URI": full_artifact_disk})
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "No space left on device" in proc.stderr
    _, runs = _runs(full_artifact_disk)
    assert sorted(r.info.status for r in _kind(runs, keys.KIND_RERUN)) == ["FINISHED"] * 3
    assert [r.info.status for r in _kind(runs, keys.KIND_CARD)] == ["FAILED"]
    assert not [r for r in runs if r.info.status == "RUNNING"]


KILLING_APP = '''
import os, signal, time
import hydra

@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg):
    if cfg.seed == 1:  # the out-of-memory killer takes this worker
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(1)
    return 0.9

if __name__ == "__main__":
    main()
'''


def test_a_killed_joblib_worker_leaves_nothing_running(tmp_path, store):
    """Hydra's joblib launcher ends its pool when a worker is killed and raises: the sweep cannot
    go on (``hydra/launcher=local_parallel`` does), but the store is left true: the killed rerun
    KILLED, the parent FAILED with the reason, nothing RUNNING, and a non-zero exit."""
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    app = _app(tmp_path, KILLING_APP)
    proc = _run(app, ["-m", "seed=range(4)", *PLUGIN, "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
                      f"hydra.sweep.dir={tmp_path / 'sweep'}"])
    assert proc.returncode != 0
    assert "stopped before its end" in proc.stderr
    _, runs = _runs(store)
    assert not [r for r in runs if r.info.status == "RUNNING"]
    (parent,) = _kind(runs, keys.KIND_SWEEP)
    assert parent.info.status == "FAILED" and "stopped before its end" in parent.data.tags[keys.TAG_ERROR]
    killed = [r for r in _kind(runs, keys.KIND_RERUN) if r.data.tags[keys.TAG_SEED] == "1"]
    assert [r.info.status for r in killed] == ["KILLED"]
