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
from recipe_audit.app.outcomes import OUTCOMES_DIR

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
# a copy of the seed (as trainers' own seed options are often set): the seed, not the recipe
data:
  seed: ${seed}
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
    # a user's app under joblib: tests/test_examples.py (plain_mlflow, a crash, joblib; in CI); parallel
    # workers by default: tests/test_launchers.py
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
    assert len({r.data.tags[keys.TAG_RECIPE_ID] for r in reruns.values()}) == 1  # output paths, data.seed left out
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
    # the experiment's default page leads with the verdict (its description); the store is named last
    note = client.get_experiment_by_name("train").tags["mlflow.note.content"]
    assert note.startswith("insufficient-evidence · 2/6 failed τ 0.7 · U ")
    assert proc.stdout.rstrip().splitlines()[-2:] == [f"Tracking store: {store}",
                                                     f"  export MLFLOW_TRACKING_URI={store}"]


@pytest.mark.slow  # a returned metric by default: in process, test_the_callback_named_by_target_in_the_apps_own_config
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
    # it ends with its run id on a line of its own (for attach --run-id), then the store
    assert f"Run id: {r.info.run_id}\nTracking store: {store}\n  export MLFLOW_TRACKING_URI={store}" in proc.stdout


def test_resume_runs_only_the_unfinished_seeds(tmp_path, store):
    app = _app(tmp_path, PLAIN_APP)
    args = ["-m", "seed=range(5)", *PLUGIN, f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    # the interrupted sweep in this process (helpers.inprocess); the resume, the behaviour, in a process of its own
    first = run_script_here(app / "train.py", args, env_extra={"CRASH_SEED": "1"})
    assert first.returncode == 1, first.stderr[-3000:]
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


def test_resume_in_the_directory_of_another_recipe_refuses_naming_both(tmp_path, store):
    # it trained nothing, printed the other recipe's card and exited 0 before
    app = _app(tmp_path, PLAIN_APP)
    args = ["-m", "seed=range(1)", *PLUGIN, f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    first = run_script_here(app / "train.py", [*args, "lr=0.1"])
    assert first.returncode == 0, first.stderr[-2000:]
    again = run_script_here(app / "train.py", [*args, "lr=0.2", "hydra.callbacks.recipe_audit.resume=true"])
    assert again.returncode == 2
    lines = [ln for ln in again.stderr.splitlines() if ln.startswith("recipe_audit: error")]
    assert lines == [f"recipe_audit: error: resume=true: the sweep in {tmp_path / 'sweep'} (sweep "
                     f"{_kind(_runs(store)[1], keys.KIND_SWEEP)[0].data.tags[keys.TAG_SWEEP_ID]}) ran the recipe "
                     "'lr=0.1', this launch asks for 'lr=0.2'; relaunch with that sweep's overrides to resume it, "
                     "or give another hydra.sweep.dir to start a new sweep."], again.stderr[-2000:]
    assert len(_kind(_runs(store)[1], keys.KIND_RERUN)) == 1  # nothing trained
    # the same recipe with more seeds resumes
    more = run_script_here(app / "train.py", [*args[:1], "seed=range(2)", *args[2:], "lr=0.1",
                                              "hydra.callbacks.recipe_audit.resume=true"])
    assert more.returncode == 0, more.stderr[-2000:]
    assert sorted(int(r.data.tags[keys.TAG_SEED]) for r in _kind(_runs(store)[1], keys.KIND_RERUN)) == [0, 1]


@pytest.mark.parametrize("args, needle", [
    (["seed=range(3)", *PLUGIN, "hydra.callbacks.recipe_audit.metrc=x"], "metrc"),  # a typo: Hydra's own message
    (["seed=range(3)", "hydra/callbacks=recipe_audit"], "hydra.callbacks.recipe_audit.metric names no metric"),
    (["seed=range(3)", *PLUGIN, "hydra.callbacks.recipe_audit.seed_key=trainer.seed"],
     "seed key 'trainer.seed' is not in the app's config"),
    (["seed=range(3)", *PLUGIN, "hydra.callbacks.recipe_audit.eps=1.5"],
     "hydra.callbacks.recipe_audit.eps must lie strictly between 0 and 1"),
    (["seed=range(3)", *PLUGIN, "hydra.callbacks.recipe_audit.delta=0.5"],
     "hydra.callbacks.recipe_audit.delta must lie strictly between 0 and 0.5"),
    (["seed=range(3)", *PLUGIN, "hydra.callbacks.recipe_audit.taus=[]"], "hydra.callbacks.recipe_audit.taus must be finite numbers, at least one"),
    ([*PLUGIN, "seed=a,b"], "seed values must be integers"),
    (["seed=range(3)", *PLUGIN, "hydra.callbacks.recipe_audit.tracking_uri=http://u:secret@127.0.0.1:9"],
     "hydra.callbacks.recipe_audit.tracking_uri holds a password (http://u:***@127.0.0.1:9)"),  # never written
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
    assert out.count("the task returned None (NoneType) and logged no 'eval_acc'") == 2
    assert "eval_acc" in proc.stderr.splitlines()[-1]
    assert "Traceback" not in proc.stderr


RETURNING_APP = '''
import os
import hydra

@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg):
    return eval(os.environ["RETURN"])

main()
'''


@pytest.mark.parametrize("returned, shown", [
    ("None", "None (NoneType)"), ("'0.95'", "'0.95' (str)"), ("True", "True (bool)"), ("[0.95]", "[0.95] (list)"),
    ("{'val_accuracy': '0.9'}", "{'val_accuracy': '0.9'} (dict)"), ("{'other': 0.9}", "{'other': 0.9} (dict)"),
])
def test_an_unusable_return_value_is_an_error_that_says_what_is_accepted(tmp_path, store, returned, shown):
    # the task logged nothing and returned what is no metric: every seed was 'unfinished' and the
    # sweep exited 0 before; now each rerun is FAILED with what it returned, and the sweep exits non-zero
    app = _app(tmp_path, RETURNING_APP)
    proc = run_script_here(app / "train.py", ["-m", "seed=range(2)", *PLUGIN, f"hydra.sweep.dir={tmp_path / 'sweep'}"],
                           env_extra={"RETURN": returned})
    assert proc.returncode != 0, proc.stderr[-2000:]
    out = proc.stdout + proc.stderr
    assert out.count(f"the task returned {shown} and logged no 'val_accuracy': log the metric to the rerun's run "
                     "(mlflow.log_metric) or return it, as a number (read as 'val_accuracy') or a mapping of metric "
                     "names to numbers") == 2, out[-3000:]
    assert "Traceback" not in proc.stderr
    reruns = _kind(_runs(store)[1], keys.KIND_RERUN)
    assert sorted(r.info.status for r in reruns) == ["FAILED", "FAILED"]
    assert all(r.data.tags[keys.TAG_ERROR].startswith(f"the task returned {shown}") for r in reruns)


def test_the_curtailing_sweeper_stops_a_users_sweep(tmp_path, store):
    """hydra/sweeper=curtail works for a user's app: it reads the callback's metric and what the
    callback recorded for each job; a recipe whose reruns all collapse stops after one batch."""
    app = _app(tmp_path, BARE_APP)
    sweep_dir = tmp_path / "sweep"
    proc = run_script_here(app / "train.py", ["-m", "seed=range(30)", "hydra/sweeper=curtail",  # in this process
                                              "hydra.sweeper.batch_size=4", *PLUGIN, f"hydra.sweep.dir={sweep_dir}"],
                           env_extra={"COLLAPSE_ALL": "1"})
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
    assert not (sweep_dir / OUTCOMES_DIR).exists()  # the outcome channel closed with the sweep


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
    proc = run_script_here(app / "train.py", ["-m", "seed=range(5)", *PLUGIN,  # in this process (helpers.inprocess)
                                              f"hydra.sweep.dir={tmp_path / 'sweep'}"])
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
    proc = run_script_here(app / "train.py", ["-m", "seed=range(3)", *PLUGIN,  # in this process (helpers.inprocess)
                                              f"hydra.sweep.dir={tmp_path / 'sweep'}"],
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


# -- real clients in process: Lightning's MLFlowLogger, fluent calls after the job ended its run -----------

TEMPLATE_CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples",
                                "lightning_template", "configs")


def test_an_mlflow_logger_is_pointed_at_the_rerun_and_nothing_else_changes(tmp_path, store, monkeypatch, caplog):
    """lightning-hydra-template's logger/mlflow.yaml names a file store MLflow 3 refuses and no
    run id: while the job runs, the MLFlowLogger it builds gets the rerun's store, run and
    experiment, every other argument as given, and the job's log says so in one line; the logger
    then logs into the rerun (Lightning's own code, no run or experiment of its own). Once the
    job is over, the class is Lightning's own again."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from recipe_audit.app.mlflow_loggers import mlflow_logger_paths, point_mlflow_loggers
    from recipe_audit.store import tracking

    pytest.importorskip("pytorch_lightning")
    import hydra
    from pytorch_lightning.loggers import MLFlowLogger

    monkeypatch.setenv("PROJECT_ROOT", str(tmp_path))
    with initialize_config_dir(config_dir=TEMPLATE_CONFIGS, version_base="1.3"):
        cfg = compose("train", overrides=["logger=mlflow", "seed=1"])
    raw = OmegaConf.to_container(cfg, resolve=False)
    assert raw["logger"]["mlflow"]["tracking_uri"] == "${paths.log_dir}/mlflow/mlruns"
    assert "run_id" not in raw["logger"]["mlflow"]
    assert mlflow_logger_paths(raw) == [("logger", "mlflow")]
    st = tracking.open_store(store, "train")
    run_id = st.client.create_run(st.experiment_id).info.run_id
    own = MLFlowLogger.__init__
    with caplog.at_level("INFO", logger="recipe_audit"):
        restore = point_mlflow_loggers(store, run_id, "train", raw_config=raw)
        try:
            logger = hydra.utils.instantiate(cfg.logger.mlflow)
            again = MLFlowLogger(tracking_uri=store, run_id=run_id, experiment_name="train")  # already there
        finally:
            restore()
    assert MLFlowLogger.__init__ is own
    assert (logger._tracking_uri, logger._run_id, logger._experiment_name) == (store, run_id, "train")
    assert (logger._prefix, logger.tags, logger._artifact_location) == ("", None, None)  # as the node says
    assert again._run_id == run_id
    (line,) = [r.getMessage() for r in caplog.records if "logs into rerun" in r.getMessage()]  # nothing said for `again`
    assert line == (f"recipe_audit: the MLFlowLogger at logger.mlflow logs into rerun {run_id}: tracking_uri "
                    f"{tmp_path}/logs//mlflow/mlruns -> {store}, run_id unset -> {run_id}, experiment_name unset -> train")
    logger.log_metrics({"test/acc": 0.9}, step=1)
    logger.finalize("success")
    assert st.client.get_run(run_id).data.metrics == {"test/acc": 0.9}
    assert {e.name for e in st.client.search_experiments()} == {"train", "Default"}  # no lightning_logs
    assert len(st.client.search_runs([st.experiment_id])) == 1
    assert not (tmp_path / "logs").exists()
    # after the job: Lightning's own constructor, its own defaults
    assert MLFlowLogger(tracking_uri="sqlite:///other.db")._tracking_uri == "sqlite:///other.db"


def test_a_logger_built_in_code_is_pointed_too_and_a_job_that_exited_is_restored(store, caplog):
    """A logger the app builds itself (positional arguments included) is pointed as well; a job
    that left without its end (sys.exit in the task) is restored when the next job starts."""
    pytest.importorskip("pytorch_lightning")
    from pytorch_lightning.loggers import MLFlowLogger

    from recipe_audit.app.mlflow_loggers import point_mlflow_loggers

    own = MLFlowLogger.__init__
    point_mlflow_loggers(store, "a" * 32, "train")  # never restored
    restore = point_mlflow_loggers(store, "b" * 32, "train")
    try:
        with caplog.at_level("INFO", logger="recipe_audit"):
            logger = MLFlowLogger("mine", None, "sqlite:///elsewhere.db", prefix="p")
    finally:
        restore()
    assert MLFlowLogger.__init__ is own
    assert (logger._experiment_name, logger._tracking_uri, logger._run_id, logger._prefix) == (
        "train", store, "b" * 32, "p")
    assert f"an MLFlowLogger logs into rerun {'b' * 32}: tracking_uri sqlite:///elsewhere.db -> {store}" in caplog.text


def test_fluent_calls_after_the_job_ended_the_rerun_resume_it(tmp_path, store, monkeypatch):
    """The Hugging Face Trainer's MLflowCallback ends the rerun's run at the end of train(); what
    the job logs after that (trainer.evaluate(), mlflow.log_metric, a mlflow.start_run() block)
    resumes the rerun instead of opening a top-level run. Once the job is over, MLflow's own
    end_run is back and nothing is resumed any more."""
    import mlflow
    from mlflow.tracking import fluent

    from recipe_audit.store import rerun_runs, tracking

    st = tracking.open_store(store, "train")
    run_id = st.client.create_run(st.experiment_id, tags={"mlflow.parentRunId": "p"}).info.run_id
    monkeypatch.setenv("MLFLOW_RUN_ID", run_id)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "train")
    own = fluent.end_run
    rerun_runs.keep_rerun_resumable(run_id)
    try:
        mlflow.start_run()  # the MLflowCallback's setup: resumes $MLFLOW_RUN_ID, and unsets it
        mlflow.log_metric("loss", 0.5)
        mlflow.end_run()  # its on_train_end
        assert os.environ["MLFLOW_RUN_ID"] == run_id
        mlflow.log_metric("test_accuracy", 0.9)  # trainer.evaluate(..., metric_key_prefix="test")
        mlflow.end_run()
        with mlflow.start_run():
            mlflow.log_metric("test_positive_rate", 0.5)
    finally:
        rerun_runs.keep_rerun_resumable(None)
    assert fluent.end_run is own and mlflow.end_run is own
    runs = st.client.search_runs([st.experiment_id])
    assert [r.info.run_id for r in runs] == [run_id]
    assert runs[0].data.metrics == {"loss": 0.5, "test_accuracy": 0.9, "test_positive_rate": 0.5}
    # after the job (whose environment the callback restores): MLflow's end_run as it always is
    monkeypatch.delenv("MLFLOW_RUN_ID")
    with mlflow.start_run(run_id=run_id):
        pass
    assert "MLFLOW_RUN_ID" not in os.environ


def test_no_metric_logged_and_nothing_returned_says_what_to_set(tmp_path, store):
    from recipe_audit.app.sweep_end import nothing_logged as _nothing_logged
    from recipe_audit.store import sweeps, tracking

    st = tracking.open_store(store, "train")
    sweep = sweeps.start_sweep(st, [1, 2], tmp_path / "sweep", [])
    reruns = [st.client.create_run(st.experiment_id, tags={keys.TAG_KIND: keys.KIND_RERUN,
                                                           keys.TAG_SWEEP_ID: sweep.sweep_id}) for _ in range(2)]
    for r in reruns:
        st.client.set_terminated(r.info.run_id, "FINISHED")
    line = _nothing_logged(sweep, "test/acc", keys.KIND_RERUN)
    assert line.startswith("none of its 2 finished rerun(s) logged a metric to MLflow and the task function returned")
    assert "logger=mlflow" in line and "+optimized_metric=test/acc" in line and line.count(".") <= 3
    st.client.log_metric(reruns[0].info.run_id, "val/acc", 0.9)  # a metric, under another name: the card says which
    assert _nothing_logged(sweep, "test/acc", keys.KIND_RERUN) is None


NONE_APP = '''
import hydra

@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg):
    return None  # as lightning-hydra-template's main() while its optimized_metric is unset

main()
'''


def test_an_app_that_logs_and_returns_nothing_is_told_what_to_set(tmp_path, store):
    app = _app(tmp_path, NONE_APP)
    proc = run_script_here(app / "train.py", ["-m", "seed=range(1,3)", "hydra/callbacks=recipe_audit",  # in process
                                              "hydra.callbacks.recipe_audit.metric=test/acc",
                                              f"hydra.sweep.dir={tmp_path / 'sweep'}"])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("recipe_audit: error: no card for metric 'test/acc' of sweep"), proc.stderr[-2000:]
    assert "none of its 2 finished rerun(s) logged a metric" in last and "+optimized_metric=test/acc" in last


def test_a_password_in_the_tracking_uri_is_refused_and_the_environments_is_sent_never_shown(tmp_path, store,
                                                                                            monkeypatch):
    """tracking_uri=http://admin:PW@host is refused before anything is written (one sentence naming
    MLFLOW_TRACKING_USERNAME/_PASSWORD, exit 2, no sweep folder, no run): Hydra would write it into
    multirun.yaml and .hydra/, and a command line is in every local user's process list. Given
    there, the password goes to the server as HTTP basic auth and nowhere else: not in what the
    sweep prints (MLflow's own "View run ... at:" lines), not in a file of the sweep folder, not in
    a param, tag or artifact. The server is MLflow's own app in a thread of this process, as a
    user's server (tests/test_tracking_server.py does the same against a real one with basic auth)."""
    import base64
    import stat
    import threading

    from mlflow.server import app as flask_app
    from mlflow.server import handlers
    from mlflow.tracking import MlflowClient
    from werkzeug.serving import make_server

    from recipe_audit.store import sweeps

    backend = f"sqlite:///{tmp_path / 'server.db'}"
    monkeypatch.setenv("_MLFLOW_SERVER_FILE_STORE", backend)
    monkeypatch.setenv("_MLFLOW_SERVER_ARTIFACT_ROOT", str(tmp_path / "artifacts"))
    monkeypatch.setattr(handlers, "_tracking_store", None)
    seen = set()

    def recording(environ, start_response):  # the Authorization header of every request
        seen.add(environ.get("HTTP_AUTHORIZATION"))
        return flask_app(environ, start_response)

    server = make_server("127.0.0.1", 0, recording, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    password = "Pw-4f1e9c-secret"
    host = f"127.0.0.1:{server.server_port}"
    try:
        app = _app(tmp_path, PLAIN_APP)
        refused = run_script_here(app / "train.py", [
            "-m", "seed=range(2)", *PLUGIN, f"hydra.callbacks.recipe_audit.tracking_uri=http://admin:{password}@{host}",
            f"hydra.sweep.dir={tmp_path / 'refused'}"])
        assert refused.returncode == 2 and "Traceback" not in refused.stderr
        assert "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD" in refused.stderr.strip().splitlines()[-1]
        assert password not in refused.stdout + refused.stderr and not (tmp_path / "refused").exists()
        assert seen == set()  # not a request was made
        proc = run_script_here(app / "train.py", [
            "-m", "seed=range(2)", *PLUGIN, f"hydra.callbacks.recipe_audit.tracking_uri=http://{host}",
            f"hydra.sweep.dir={tmp_path / 'sweep'}"], env_extra={
                "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "false", "MLFLOW_TRACKING_USERNAME": "admin",
                "MLFLOW_TRACKING_PASSWORD": password})
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out[-3000:]
        assert "View run" in out and f"http://{host}/#/experiments/" in out  # MLflow's lines
        assert password not in out
        sweep_file = tmp_path / "sweep" / sweeps.SWEEP_FILE
        assert stat.S_IMODE(sweep_file.stat().st_mode) == 0o600
        written = [f for f in (tmp_path / "sweep").rglob("*") if f.is_file()]
        assert any(f.name == "multirun.yaml" for f in written) and any(f.name == "overrides.yaml" for f in written)
        assert [f for f in written if password.encode() in f.read_bytes()] == []
        client = MlflowClient(f"http://{host}")
        runs = client.search_runs([client.get_experiment_by_name("train").experiment_id])
        assert len(_kind(runs, keys.KIND_RERUN)) == 2
        for r in runs:
            assert password not in json.dumps([r.data.params, r.data.tags]), r.info.run_id
        artifacts = [f for f in (tmp_path / "artifacts").rglob("*") if f.is_file()]
        assert artifacts and [f for f in artifacts if password.encode() in f.read_bytes()] == []
        assert f"Basic {base64.b64encode(f'admin:{password}'.encode()).decode()}" in seen  # sent, as basic auth
    finally:
        server.shutdown()
        thread.join(timeout=10)
