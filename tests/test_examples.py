"""The client examples (``examples/``): each Hydra app, which knows nothing about recipe_audit,
swept over 6 seeds with the plugin on the command line, one seed made to crash or collapse, with
Hydra's basic and joblib launchers. Checked: the card's N, k and verdict, that every rerun's run
holds the client's own logged metrics (so its logging went into the rerun, not elsewhere), and
that no job created a run outside the sweep's tree (every run but the sweep's has a parent).

Every sweep here is marked slow: by default, a user's app swept into reruns and a card is
``tests/test_plugin.py::test_a_users_sweep_becomes_reruns_and_a_card`` (an app as plain_mlflow's,
a crash), an MLflowLogger pointed at the rerun is checked in process there too, and a sweep under
parallel workers is ``tests/test_launchers.py``. CI runs the ``ci`` ones: plain-MLflow under joblib
with a crash, the replica of lightning-hydra-template (its own ``logger/mlflow.yaml``, file store
included, used unchanged) and the Hugging Face ``Trainer`` script whose card metric is logged only
by ``trainer.evaluate()`` after ``train()``. The framework apps need the ``examples`` extra
(``pytorch-lightning``).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass

import pytest
from helpers import procs

from recipe_audit import keys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass(frozen=True)
class Example:
    name: str
    metric: str
    own_metrics: tuple[str, ...]  # what the client logs itself (or returns)
    script: str = "train.py"  # under examples/<name>/
    args: tuple[str, ...] = ()  # the app's own options on the command line, as its README gives them


EXAMPLES = {
    "plain_mlflow": Example("plain_mlflow", "val_accuracy", ("loss", "val_accuracy")),
    "bare_function": Example("bare_function", "val_accuracy", ("val_accuracy",)),
    # test_accuracy and test_positive_rate are logged only after train() (evaluate, predict)
    "hf_trainer": Example("hf_trainer", "test_accuracy",
                          ("eval_accuracy", "eval_loss", "test_accuracy", "test_positive_rate")),
    "lightning": Example("lightning", "val_acc", ("val_acc",)),
    # lightning-hydra-template's layout, its logger/mlflow.yaml (a file store MLflow 3 refuses) as it is
    "lightning_template": Example("lightning_template", "test/acc", ("train/loss", "val/acc", "test/acc"),
                                  script="src/train.py", args=("logger=mlflow",)),
    # Lightning imported, and its MLFlowLogger built with a file store, inside the task function
    "lightning_script": Example("lightning_script", "val_acc", ("val_acc", "train_loss")),
}
LAUNCHERS = {"basic": [], "joblib": ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"]}


def _sweep(tmp_path, ex: Example, launcher: str, fault: str):
    sweep_dir = tmp_path / "sweep"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_RUN", "RECIPE_AUDIT_"))}
    env["HYDRA_FULL_ERROR"] = "0"
    env["OMP_NUM_THREADS"] = "1"  # two joblib workers on two cores: no oversubscription
    # the template writes its logs (and would write its file store) under paths.log_dir
    own = [*ex.args, f"paths.log_dir={tmp_path / 'logs'}"] if ex.name == "lightning_template" else [*ex.args]
    args = [sys.executable, os.path.join(REPO, "examples", ex.name, ex.script), "-m", "seed=range(6)",
            "hydra/callbacks=recipe_audit", f"hydra.callbacks.recipe_audit.metric={ex.metric}",
            f"{fault}_seed=2", f"hydra.sweep.dir={sweep_dir}", *own, *LAUNCHERS[launcher]]
    proc = procs.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    return proc, sweep_dir


def _check(tmp_path, store, ex: Example, launcher: str, fault: str):
    from mlflow.tracking import MlflowClient

    proc, sweep_dir = _sweep(tmp_path, ex, launcher, fault)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    # a crash, or a logged value the returned one contradicts, fails the exit status (after the card);
    # a collapse is a result, not an error
    failing = fault in ("crash", "mislog")
    assert proc.returncode == (1 if failing else 0), proc.stderr[-3000:]
    client = MlflowClient(tracking_uri=store)
    exp = client.get_experiment_by_name("train")
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    (parent,) = [r for r in runs if r.data.tags.get(keys.TAG_KIND) == keys.KIND_SWEEP]
    # no job created a run outside the sweep's tree: the sweep's run is the only one without a parent
    assert [r.info.run_id for r in runs if "mlflow.parentRunId" not in r.data.tags] == [parent.info.run_id]
    # nor an experiment of its own (Lightning's MLFlowLogger would open "lightning_logs")
    assert {e.name for e in client.search_experiments()} <= {"train", "Default"}
    assert all(not client.search_runs([e.experiment_id]) for e in client.search_experiments() if e.name != "train")
    reruns = {int(r.data.tags[keys.TAG_SEED]): r for r in runs if r.data.tags.get(keys.TAG_KIND) == keys.KIND_RERUN}
    assert sorted(reruns) == list(range(6))
    # nothing the client logged went to a run of its own outside the sweep
    assert {r.data.tags.get(keys.TAG_KIND) for r in runs} == {keys.KIND_SWEEP, keys.KIND_RERUN, keys.KIND_CARD}
    assert len({r.data.tags[keys.TAG_RECIPE_ID] for r in reruns.values()}) == 1
    for seed, r in reruns.items():
        assert r.data.tags[keys.TAG_PARENT] == parent.info.run_id
        if fault == "mislog" and seed == 2:  # 0.1 logged in a run of the task's own, the true value returned
            assert r.info.status == "FAILED" and r.data.tags[keys.TAG_ERROR].startswith(
                f"the rerun's run holds {ex.metric} = 0.1 (logged) but the task returned "), r.data.tags
            continue
        if fault == "crash" and seed == 2:
            assert r.info.status == "FAILED" and "injected crash" in r.data.tags[keys.TAG_ERROR]
            if ex.name == "lightning_template":  # built by hydra.utils.instantiate: the cause, then Hydra's line
                assert r.data.tags[keys.TAG_ERROR].startswith("RuntimeError: injected crash"), r.data.tags
                assert "(raised as InstantiationException: Error in call to target" in r.data.tags[keys.TAG_ERROR]
            continue
        assert r.info.status == "FINISHED", (seed, r.data.tags.get(keys.TAG_ERROR))
        for m in ex.own_metrics:
            assert m in r.data.metrics, (seed, m, sorted(r.data.metrics))
        collapsed = fault == "collapse" and seed == 2
        assert (r.data.metrics[ex.metric] < 0.7) == collapsed, (seed, r.data.metrics[ex.metric])
    if ex.name == "lightning_template":  # pointed at the rerun: the template's file store never made
        assert not (tmp_path / "logs" / "mlflow").exists()
        assert "the MLFlowLogger at logger.mlflow logs into rerun" in proc.stdout + proc.stderr
    (cell,) = json.loads((sweep_dir / "card" / "card.json").read_text())["cells"]
    assert (cell["n_reruns"], cell["n_failures"], cell["tau"]) == (6, 1, 0.7)
    assert cell["verdict"] == "insufficient-evidence"  # 6 reruns: below the sample floor of 22
    assert [u["seed"] for u in cell["unfinished"]] == ([2] if failing else [])


@pytest.mark.slow  # 8 to 19 s each on two quiet cores; by default: test_plugin's user's sweep
@pytest.mark.parametrize("name, fault, launcher", [
    pytest.param("plain_mlflow", "crash", "joblib", id="plain_mlflow-crash-joblib-ci"),
    ("bare_function", "collapse", "basic"),
    ("plain_mlflow", "crash", "basic"),
    ("bare_function", "collapse", "joblib"),
    # a task that logs 0.1 in its own mlflow.start_run(nested=True) and returns its true value
    ("plain_mlflow", "mislog", "basic"),
])
def test_light_examples(tmp_path, store, name, fault, launcher):
    _check(tmp_path, store, EXAMPLES[name], launcher, fault)


@pytest.mark.slow  # each imports its framework in every process (18 s for lightning_template-basic)
@pytest.mark.parametrize("name, launcher, fault", [
    # (a Trainer evaluated after train() and an MLFlowLogger pointed at the rerun are checked in
    # process by test_plugin)
    pytest.param("lightning_template", "basic", "crash", id="lightning_template-basic"),
    pytest.param("hf_trainer", "basic", "crash", id="hf_trainer-basic"),
    pytest.param("lightning_template", "joblib", "crash", id="lightning_template-joblib-ci"),
    pytest.param("hf_trainer", "joblib", "collapse", id="hf_trainer-joblib-ci"),
    # (CI runs Lightning under joblib through lightning_template-joblib-ci above)
    pytest.param("lightning", "joblib", "crash", id="lightning-joblib"),
    pytest.param("lightning", "basic", "collapse", id="lightning-basic"),
    # Lightning first imported inside the first job of each worker (basic: test_failing_integration)
    pytest.param("lightning_script", "joblib", "crash", id="lightning_script-joblib"),
])
def test_framework_examples(tmp_path, store, name, launcher, fault):
    _check(tmp_path, store, EXAMPLES[name], launcher, fault)


@pytest.mark.slow  # Lightning in a process of its own, three seeds that train and then crash (about 20 s quiet)
def test_the_template_whose_checkpoint_torch_refuses_gets_a_card_of_failures_and_the_fix(tmp_path, store):
    """The replica with the template's own optimizer config (a functools.partial among the
    hyperparameters, so in the checkpoint): under torch 2.6 and later every rerun's test step
    crashes with UnpicklingError. The card counts them all (3/3), the error tags are plain text, and
    the last sentence names the seeds, the cause and TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD."""
    import torch
    from mlflow.tracking import MlflowClient

    if tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < (2, 6):
        pytest.skip("torch before 2.6 loads checkpoints with weights_only=False")
    ex = EXAMPLES["lightning_template"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_RUN", "RECIPE_AUDIT_", "TORCH_FORCE"))}
    env.update({"HYDRA_FULL_ERROR": "0", "OMP_NUM_THREADS": "1"})
    sweep_dir = tmp_path / "sweep"
    proc = procs.run([sys.executable, os.path.join(REPO, "examples", ex.name, ex.script), "-m", "seed=range(1,4)",
                      "logger=mlflow", "model=mlp_partial", f"paths.log_dir={tmp_path / 'logs'}",
                      "hydra/callbacks=recipe_audit", f"hydra.callbacks.recipe_audit.metric={ex.metric}",
                      f"hydra.sweep.dir={sweep_dir}"], cwd=tmp_path, env=env, capture_output=True, text=True,
                     timeout=900)
    assert proc.returncode == 1, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert "did not finish: seed 1 (failed), seed 2 (failed), seed 3 (failed)" in last, last
    assert "the first, seed 1, failed: UnpicklingError: Weights only load failed." in last
    assert "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1" in last
    (cell,) = json.loads((sweep_dir / "card" / "card.json").read_text())["cells"]
    assert (cell["n_reruns"], cell["n_failures"]) == (3, 3)
    client = MlflowClient(tracking_uri=store)
    runs = client.search_runs([client.get_experiment_by_name("train").experiment_id], max_results=100)
    errors = [r.data.tags[keys.TAG_ERROR] for r in runs if r.data.tags.get(keys.TAG_KIND) == keys.KIND_RERUN]
    assert len(errors) == 3 and all(e.startswith("UnpicklingError: ") and "\x1b" not in e for e in errors)
