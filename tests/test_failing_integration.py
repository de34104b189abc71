"""A failing integration says what failed: reruns that all crash, a logger a task imports inside its
function, a file store beside the sweep's database, a task whose logged and returned metric
disagree. The apps run in this process (helpers.inprocess) as a user's ``train.py``; the one whose
subject is a fresh process (Lightning first imported inside the task function) runs in its own."""

from __future__ import annotations

import json
import os
import sys
import textwrap

import pytest
from helpers import procs
from helpers.cli import run_cli
from helpers.inprocess import run_script_here
from helpers.one_thread import one_torch_thread  # noqa: F401 (autouse: the tiny model of the progress test)

from recipe_audit import keys

CONFIG = "seed: 0\n"

# what lightning-hydra-template meets under torch 2.6 and later: its checkpoint keeps objects that
# torch.load's default weights_only=True refuses (here a functools.partial, as the template's optimizer)
UNPICKLING_APP = '''
import functools
import hydra, torch

@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg):
    torch.save({"optimizer": functools.partial(torch.optim.Adam, lr=0.1)}, "best.ckpt")
    torch.load("best.ckpt")  # the template's trainer.test(ckpt_path="best")
    return 0.9

main()
'''

DISAGREEING_APP = '''
import os
import hydra, mlflow

@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg):
    if os.environ["HOW"] == "nested":
        with mlflow.start_run(nested=True):  # MLflow resumes the rerun's run here
            mlflow.log_metric("test/acc", 0.1)
    else:
        mlflow.end_run()
        mlflow.start_run()
        mlflow.log_metric("test/acc", 0.1)
        mlflow.end_run()
    return 0.95

main()
'''

FILE_STORE_APP = '''
import os
import hydra, mlflow

@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg):
    mlflow.set_tracking_uri("file:" + os.environ["FILE_STORE"])  # a store of the task's own
    with mlflow.start_run():
        mlflow.log_metric("test/acc", 0.9)

main()
'''


def _app(tmp_path, source: str):
    app = tmp_path / "app"
    (app / "conf").mkdir(parents=True)
    (app / "train.py").write_text(textwrap.dedent(source))
    (app / "conf" / "config.yaml").write_text(CONFIG)
    return app


def _reruns(uri):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("train")
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    return sorted((r for r in runs if r.data.tags.get(keys.TAG_KIND) == keys.KIND_RERUN),
                  key=lambda r: int(r.data.tags[keys.TAG_SEED]))


PLUGIN = ["hydra/callbacks=recipe_audit", "hydra.callbacks.recipe_audit.metric=test/acc"]


def test_a_sweep_whose_reruns_all_crash_gets_its_card_and_says_why(tmp_path, store, capsys):
    """Every rerun crashes (torch's UnpicklingError, whose message carries a terminal's bold): the
    card counts them (3/3, U = 1), not "no run has the metric"; the last sentence names how many,
    which seeds, the first one's innermost cause and the fix; the error tags are plain text."""
    app = _app(tmp_path, UNPICKLING_APP)
    sweep_dir = tmp_path / "sweep"
    proc = run_script_here(app / "train.py", ["-m", "seed=range(1,4)", *PLUGIN, f"hydra.sweep.dir={sweep_dir}"])
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "has the metric" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("recipe_audit: error: 3 rerun(s) of sweep ")
    assert "did not finish: seed 1 (failed), seed 2 (failed), seed 3 (failed); the card counts them as failures" in last
    assert "; the first, seed 1, failed: UnpicklingError: Weights only load failed." in last
    assert "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1" in last and "\x1b" not in last
    card = json.loads((sweep_dir / "card" / "card.json").read_text())
    (cell,) = card["cells"]
    assert (cell["n_failures"], cell["n_reruns"], cell["upper_bound"]) == (3, 3, 1.0), cell
    reruns = _reruns(store)
    assert [r.info.status for r in reruns] == ["FAILED"] * 3
    for r in reruns:
        error = r.data.tags[keys.TAG_ERROR]
        assert error.startswith("UnpicklingError: Weights only load failed. This file can still be loaded")
        assert "\x1b" not in error and "do those steps only if you trust the source" in error
    # the same card from the store alone (recipe-audit card, the Python API): no "no run has the metric"
    capsys.readouterr()
    rc, out, err = run_cli(["card", "--experiment-name", "train", "--metric", "test/acc", "--tracking-uri", store],
                           capsys)
    assert rc == 0 and "3/3" in out and "has the metric" not in err, (out, err)
    import recipe_audit

    assert recipe_audit.card("train", "test/acc", tracking_uri=store).cells[0]["n_failures"] == 3


def test_a_card_refused_while_reruns_crashed_says_what_crashed_them(tmp_path, store):
    """unfinished=refuse: no card while reruns are unfinished; the sentence that says so names the
    first one's cause and the fix too."""
    app = _app(tmp_path, UNPICKLING_APP)
    proc = run_script_here(app / "train.py", ["-m", "seed=range(1,3)", *PLUGIN, f"hydra.sweep.dir={tmp_path / 's'}",
                                              "hydra.callbacks.recipe_audit.unfinished=refuse"])
    assert proc.returncode == 2, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("recipe_audit: error: no card for metric 'test/acc' of sweep "), last
    assert "The card refuses: 2 rerun(s) are unfinished: seed 1 (failed), seed 2 (failed); the first, seed 1, " \
           "failed: UnpicklingError: Weights only load failed." in last
    assert "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1" in last and last.endswith(").")


def test_a_sweep_whose_reruns_return_nothing_is_still_told_what_to_set(tmp_path, store):
    """Reruns that ended without an error and logged no metric are no crash: the sentence that says
    what to set stays (the card would count a misnamed metric as failures)."""
    app = _app(tmp_path, UNPICKLING_APP.replace('    torch.load("best.ckpt")', "    return None"))
    proc = run_script_here(app / "train.py", ["-m", "seed=range(1,3)", *PLUGIN, f"hydra.sweep.dir={tmp_path / 's'}"])
    assert proc.returncode == 2, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert "none of its 2 finished rerun(s) logged a metric" in last and "the first, seed" not in last


@pytest.mark.parametrize("how", ["nested", "ended"])
def test_a_logged_value_the_returned_one_contradicts_fails_the_rerun_with_both(tmp_path, store, how):
    """The task logs 0.1 inside its own mlflow.start_run(nested=True) (which MLflow resumes as the
    rerun's run), or after end_run() + start_run(), and returns 0.95: the rerun is FAILED with both
    values, not decided by either."""
    app = _app(tmp_path, DISAGREEING_APP)
    proc = run_script_here(app / "train.py", ["-m", "seed=range(1)", *PLUGIN, f"hydra.sweep.dir={tmp_path / 's'}"],
                           env_extra={"HOW": how})
    assert proc.returncode == 1, proc.stderr[-3000:]
    (rerun,) = _reruns(store)
    assert rerun.info.status == "FAILED"
    error = rerun.data.tags[keys.TAG_ERROR]
    assert error.startswith("the rerun's run holds test/acc = 0.1 (logged) but the task returned 0.95 for it;")
    assert rerun.data.tags[keys.fails_tag("test/acc", 0.7)] == "true"
    assert f"the first, seed 0, failed: {error}." in proc.stderr.strip().splitlines()[-1]


def test_a_file_store_in_the_stores_folder_is_refused_during_a_job(tmp_path, store):
    """MLflow's own hint (MLFLOW_ALLOW_FILE_STORE=true) would put a file store's runs in mlruns/
    beside the sweep's database: refused with one sentence, the rerun FAILED with it; outside a
    job, and in a folder of its own, MLflow's file store works as it does."""
    import mlflow.store.tracking.file_store as file_store

    from recipe_audit.store import sqlite

    folder = tmp_path / "store"
    app = _app(tmp_path, FILE_STORE_APP)
    proc = run_script_here(app / "train.py", ["-m", "seed=range(1)", *PLUGIN, f"hydra.sweep.dir={tmp_path / 's'}"],
                           env_extra={"MLFLOW_ALLOW_FILE_STORE": "true", "FILE_STORE": str(folder)})
    assert proc.returncode == 1, proc.stderr[-3000:]
    (rerun,) = _reruns(store)
    error = rerun.data.tags[keys.TAG_ERROR]
    assert error == (f"FileStoreRefused: An MLflow file store in {folder} is refused while a rerun runs: that is "
                     f"the folder of the sweep's tracking store {folder / 'mlflow.db'}, where its runs would lie "
                     "outside the sweep; log to the rerun's run (mlflow.start_run() and $MLFLOW_TRACKING_URI point "
                     "at it) or give that store a folder of its own.")
    assert not (folder / "0").exists() and not (folder / ".trash").exists()  # nothing of a file store made
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    try:
        sqlite.refuse_file_stores_beside(store)  # a job: elsewhere is the task's business
        file_store.FileStore(str(tmp_path / "own"))
        with pytest.raises(sqlite.FileStoreRefused):
            file_store.FileStore(str(folder / "inner"))
        sqlite.refuse_file_stores_beside(None)  # no job
        file_store.FileStore(str(folder))
    finally:
        sqlite.refuse_file_stores_beside(None)
        del os.environ["MLFLOW_ALLOW_FILE_STORE"]
    assert (folder / ".trash").is_dir()  # made by the file store constructed outside a job


def test_a_lightning_logger_first_imported_inside_the_task_is_pointed_at_the_rerun(tmp_path, new_store):
    """A fresh process: the task function imports Lightning and builds an MLFlowLogger with a file
    store of its own (MLflow 3 refuses it). Lightning's module loads during the first job, and
    that job's logger logs into its rerun as every later one does; no job fails."""
    pytest.importorskip("pytorch_lightning")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = os.path.join(root, "examples", "lightning_script", "train.py")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_RUN", "RECIPE_AUDIT_"))}
    env.update({"HYDRA_FULL_ERROR": "0", "OMP_NUM_THREADS": "1"})
    proc = procs.run([sys.executable, script, "-m", "seed=range(2)", "hydra/callbacks=recipe_audit",
                      "hydra.callbacks.recipe_audit.metric=val_acc", f"hydra.sweep.dir={tmp_path / 'sweep'}"],
                     cwd=tmp_path, env=env, capture_output=True, text=True, timeout=procs.timeout(300))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    assert out.count("an MLFlowLogger logs into rerun") == 2, out[-3000:]
    reruns = _reruns(new_store)
    assert [r.info.status for r in reruns] == ["FINISHED", "FINISHED"]
    assert all(0.0 <= r.data.metrics["val_acc"] <= 1.0 and "train_loss" in r.data.metrics for r in reruns)
    assert not (tmp_path / "mlruns").exists()  # no file store of the logger's own


INTERRUPTED_APP = '''
import os, signal
import hydra

@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg):
    if cfg.seed == 1:
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C in the second job
    return 0.9

main()
'''


def test_ctrl_c_ends_a_sweep_with_its_one_line_and_no_traceback(tmp_path, store):
    """Ctrl-C in a job: the process ends as an interrupted one (SIGINT), with the one line that
    says what was recorded, and no KeyboardInterrupt traceback through Hydra before it."""
    import signal

    app = _app(tmp_path, INTERRUPTED_APP)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_RUN", "RECIPE_AUDIT_"))}
    # SIGINT as a terminal's process has it: a test run started in the background by a shell without
    # job control inherits it ignored, and Python keeps it so (no KeyboardInterrupt at all)
    proc = procs.run([sys.executable, "train.py", "-m", "seed=range(3)", *PLUGIN, f"hydra.sweep.dir={tmp_path / 's'}"],
                     cwd=app, env=env, capture_output=True, text=True, timeout=procs.timeout(120),
                     preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.returncode == -signal.SIGINT, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "KeyboardInterrupt" not in proc.stderr, proc.stderr[-3000:]
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("recipe_audit")]
    assert line.startswith("recipe_audit: sweep ") and "stopped before its end" in line
    assert "1 unfinished rerun(s) KILLED; relaunch with resume=true" in line
    assert [r.info.status for r in _reruns(store)] == ["FINISHED", "KILLED"]


def test_progress_without_a_terminal_is_a_line_every_five_percent(capsys):
    """The built-in trainer's progress where stderr is no terminal (pytest's capture, a log file):
    one line per 5 % of the steps, not a bar redrawn at every step."""
    from recipe_audit.config import ModelConfig, RecipeConfig, TaskConfig
    from recipe_audit.train.loop import prepare_task, train_rerun

    model = ModelConfig(name="tiny_bert", kind="bert")
    prepared = prepare_task(TaskConfig(name="sentiment", kind="sentiment", options={"n_train": 240, "n_audit": 120}),
                            model)
    train_rerun(3, model, RecipeConfig(name="t", lr=3e-3, max_steps=20, batch_size=16), prepared,
                list(prepared.task.audits), progress=True)
    err = capsys.readouterr().err
    assert "\r" not in err
    lines = [ln for ln in err.splitlines() if ln.startswith("seed 3: step ")]
    assert len(lines) == 20 and lines[0] == "seed 3: step 1/20 (5%)", err[-2000:]
    assert lines[-1].startswith("seed 3: step 20/20 (100%), loss ")
