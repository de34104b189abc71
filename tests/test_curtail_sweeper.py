"""The curtailing sweeper: batches through the launcher, stops once the verdict at N is
settled, records where and why. In-process with a fake launcher, then once end to end."""

from __future__ import annotations

import json

import pytest
from helpers.app import SMALL, run_app
from helpers.sweepers import FakeLauncher, Sweeper, make_sweeper
from hydra.core.utils import JobReturn, JobStatus
from hydra.errors import HydraException

from recipe_audit import keys, stats
from recipe_audit.app.curtailing import RECORD_FILE, CurtailingSweeperBase
from recipe_audit.app.outcomes import OUTCOMES_DIR, OutcomeChannel


@pytest.fixture(autouse=True)
def _no_sweep_parent(monkeypatch):
    """No sweep parent run unless a test opens one (the record then goes to the sweep dir only)."""
    monkeypatch.delenv("RECIPE_AUDIT_SWEEP", raising=False)


def _sweeper(tmp_path, outcome, *, batch_size=3, stop_on="decision", taus=(0.7,), hib=True):
    return make_sweeper(tmp_path, outcome, taus=taus, hib=hib, batch_size=batch_size, stop_on=stop_on)


def test_failing_recipe_stops_early_good_recipe_runs_to_n(tmp_path):
    def outcome(ov):  # recipe "bad" crashes (None), recipe "good" scores 0.9
        return None if ov["recipe"] == "bad" else {"calibration": 0.9}

    sw = _sweeper(tmp_path, outcome)
    sw.sweep(["recipe=bad,good", "seed=range(30)"])
    bad, good = sw.groups
    assert (bad.launched, good.launched) == (3, 30)  # N = 30 allows no failure: the first batch settles it
    rec = json.loads((tmp_path / "sweep" / RECORD_FILE).read_text())
    assert rec == sw.record and rec["n_planned"] == 60 and rec["n_launched"] == 33 and rec["stopped_early"]
    g_bad, g_good = rec["groups"]
    assert g_bad["overrides"] == ["recipe=bad"] and g_bad["launched_seeds"] == [0, 1, 2]
    assert g_bad["stopped_early"] and g_bad["failures"] == [3] and g_bad["verdicts_at_n"] == ["unsupported"]
    assert "not release-supported" in g_bad["reason"]
    assert not g_good["stopped_early"] and g_good["verdicts_at_n"] == ["release-supported"]
    # batches: both recipes in the first round, then only the good one; job indices run on
    idx = [i for i, _ in sw.launcher.batches]
    sizes = [len(b) for _, b in sw.launcher.batches]
    assert sizes[0] == 6 and all(s == 3 for s in sizes[1:]) and idx == [sum(sizes[:i]) for i in range(len(sizes))]


def test_stop_on_verdict_waits_for_strong_unsupported(tmp_path):
    sw = _sweeper(tmp_path, lambda ov: {"calibration": 0.5}, stop_on="verdict")
    sw.sweep(["seed=range(30)"])
    (g,) = sw.groups
    assert stats.curtail_plan(30).strong_min_k == 6 and g.launched == 6
    assert g.state[0].verdict == "strong-unsupported" and g.state[0].verdict_determined


def test_every_tau_must_be_settled_and_lower_is_better(tmp_path):
    # 0.6 fails the bar 0.7 but passes 0.5: at 0.5 nothing is settled before N
    sw = _sweeper(tmp_path, lambda ov: {"calibration": 0.6}, taus=(0.7, 0.5))
    sw.sweep(["seed=range(30)"])
    assert sw.groups[0].launched == 30 and sw.record["groups"][0]["failures"] == [30, 0]
    assert "At τ = 0.7" in sw.record["groups"][0]["reason"]
    low = _sweeper(tmp_path, lambda ov: {"calibration": 0.6}, taus=(0.5,), hib=False)  # a loss above 0.5
    low.sweep(["seed=range(30)"])
    assert low.groups[0].launched == 3
    # a plan below the sample floor can never be supported: the first batch settles the decision
    short = _sweeper(tmp_path, lambda ov: {"calibration": 0.9})
    short.sweep(["seed=range(12)"])
    assert short.groups[0].launched == 3 and "cannot certify" in short.record["groups"][0]["reason"]


def test_missing_or_bad_metrics(tmp_path):
    assert CurtailingSweeperBase.failed(_ret({"other": 0.9}), "calibration", [0.7], True) == [True]
    assert CurtailingSweeperBase.failed(_ret({"calibration": float("nan")}), "calibration", [0.7], True) == [True]
    assert CurtailingSweeperBase.failed(_ret({"calibration": 0.8}), "calibration", [0.7, 0.9], True) == [False, True]
    # a task function that returns its metric as a number (a user's own app without the callback)
    assert CurtailingSweeperBase.failed(_ret(0.8), "calibration", [0.7, 0.9], True) == [False, True]
    assert CurtailingSweeperBase.failed(_ret("0.8"), "calibration", [0.7], True) == [True]
    # with the recipe_audit callback, what it recorded for the job decides, not the return value
    done = {"status": "FINISHED", "metrics": {"eval_accuracy": 0.75}}
    assert CurtailingSweeperBase.failed(_ret(None), "eval_accuracy", [0.7, 0.8], True, done) == [False, True]
    crashed = {"status": "FAILED", "metrics": {"eval_accuracy": 0.95}}
    assert CurtailingSweeperBase.failed(_ret(0.95), "eval_accuracy", [0.7], True, crashed) == [True]
    with pytest.raises(HydraException, match="seed sweep"):
        _sweeper(tmp_path, lambda ov: None).sweep(["recipe.lr=1,2"])
    with pytest.raises(HydraException, match="batch_size"):
        Sweeper(batch_size=0)
    with pytest.raises(HydraException, match="stop_on"):
        Sweeper(stop_on="never")


class _PostingLauncher(FakeLauncher):
    """Each job returns None and posts its outcome by job index, as the recipe_audit callback does in
    the job's process (a job whose worker died posts nothing)."""

    def __init__(self, sweep_dir, value_of):
        super().__init__(lambda ov: None)
        self.channel, self.value_of = OutcomeChannel(sweep_dir), value_of

    def launch(self, job_overrides, initial_job_idx):
        for i, job in enumerate(job_overrides):
            value = self.value_of(dict(o.split("=", 1) for o in job))
            if value is not None:
                self.channel.post(initial_job_idx + i, {"run_id": "r", "status": "FINISHED", "recipe_id": "abc",
                                                        "metrics": {"accuracy/calibration": value}, "error": None})
        return super().launch(job_overrides, initial_job_idx)


def test_outcomes_reach_the_sweeper_by_job_index(tmp_path):
    """What the callback recorded for each job reaches the sweeper through the outcome channel, by
    job index, not on Hydra's JobReturn: a job returning None whose outcome is FINISHED at 0.9
    passes; seeds 3 and 4 (their worker died: no outcome, no value) fail; the channel's folder is
    gone after the sweep, and one an earlier launch left behind is emptied before it starts."""
    stale = OutcomeChannel(tmp_path / "sweep")
    stale.open()
    stale.post(0, {"status": "FAILED", "metrics": {}})  # an earlier launch's job 0: not this one's
    sw = _sweeper(tmp_path, None)
    sw.launcher = _PostingLauncher(tmp_path / "sweep", lambda ov: None if ov["seed"] in ("3", "4") else 0.9)
    sw.sweep(["seed=range(30)"])
    (g,) = sw.groups
    assert g.launched == 6 and g.failures == [2] and g.recipe_id == "abc"  # two failures settle N = 30
    assert not (tmp_path / "sweep" / OUTCOMES_DIR).exists()
    assert sorted(p.name for p in (tmp_path / "sweep").iterdir()) == sorted([RECORD_FILE, "multirun.yaml"])


def test_a_job_whose_worker_always_died_posts_killed(tmp_path):
    """The parallel launcher's result for a job whose worker died every time: no value on the
    JobReturn, and a KILLED outcome posted for its index."""
    from recipe_audit.app.parallel import _killed_return

    channel = OutcomeChannel(tmp_path)
    channel.open()
    ret = _killed_return(["seed=7"], tmp_path, 12)
    assert ret.status == JobStatus.COMPLETED and ret.return_value is None and ret.overrides == ["seed=7"]
    assert channel.take(12) == {"run_id": None, "status": "KILLED", "metrics": {}, "error": "its worker process died"}
    assert CurtailingSweeperBase.failed(ret, "calibration", [0.7], True, None) == [True]


def _ret(value):
    ret = JobReturn(status=JobStatus.COMPLETED)
    ret.return_value = value
    return ret


def test_record_goes_onto_the_sweep_parent(tmp_path, store, monkeypatch):
    from mlflow.tracking import MlflowClient

    from recipe_audit.store import curtailment, sweeps, tracking

    info = sweeps.start_sweep(tracking.open_store(store, "exp"), range(30), tmp_path / "sweep", [])
    try:
        sw = _sweeper(tmp_path, lambda ov: None)
        sw.sweep(["seed=range(30)"])
        client = MlflowClient(tracking_uri=store)
        tags = client.get_run(info.parent_run_id).data.tags
        assert json.loads(tags[keys.TAG_CURTAILMENT]) == sw.record
        assert tags[keys.TAG_CURTAIL_SUMMARY].startswith("3 of 30 planned reruns launched (stopped early)")
        monkeypatch.setattr(curtailment, "_MAX_TAG", 10)  # a long record goes to an artifact
        sw = _sweeper(tmp_path, lambda ov: None)
        sw.sweep(["seed=range(30)"])
        tags = client.get_run(info.parent_run_id).data.tags
        assert tags[keys.TAG_CURTAILMENT] == keys.CURTAILMENT_ARTIFACT_PREFIX + RECORD_FILE
    finally:
        sweeps.end_sweep(info)


@pytest.mark.slow
def test_curtailing_sweep_end_to_end(tmp_path, store):
    """A recipe whose reruns all crash: the sweep stops after its first batch, and the card at the
    end of the multirun states the verdict at the planned N with N, m and the reason. (By default a
    user's app runs the curtailing sweep end to end: tests/test_plugin.py, its reruns collapsing.)"""
    sweep_dir = tmp_path / "sweep"
    proc = run_app(["-m", "hydra/sweeper=curtail", "hydra.sweeper.batch_size=4", "seed=range(30)",
                    "recipe.lr=1e9", f"hydra.sweep.dir={sweep_dir}", *SMALL], cwd=tmp_path)
    # the card is written; the exit status says that reruns failed
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "4 rerun(s) of sweep" in proc.stderr and "did not finish" in proc.stderr
    assert "Traceback" not in proc.stderr
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=store)
    exp = client.get_experiment_by_name("recipe_audit")
    runs = client.search_runs([exp.experiment_id], max_results=100)
    reruns = [r for r in runs if r.data.tags.get(keys.TAG_KIND) == keys.KIND_RERUN]
    (parent,) = [r for r in runs if r.data.tags.get(keys.TAG_KIND) == keys.KIND_SWEEP]
    assert sorted(int(r.data.tags[keys.TAG_SEED]) for r in reruns) == [0, 1, 2, 3]
    assert all(r.info.status == "FAILED" for r in reruns)
    assert json.loads(parent.data.tags[keys.TAG_PLANNED_SEEDS]) == list(range(30))  # the plan stays recorded
    assert json.loads(parent.data.tags[keys.TAG_CURTAILMENT])["n_launched"] == 4
    card = json.loads((sweep_dir / "card" / "card.json").read_text())
    (e,) = card["cells"]
    assert (e["n_reruns"], e["n_failures"], e["verdict"]) == (4, 4, "unsupported")
    assert {u["reason"] for u in e["unfinished"]} == {"failed"}
    assert e["curtailment"]["n_planned"] == 30 and e["curtailment"]["stopped_early"]
    assert "release-supported at N = 30 allows at most 0 failures" in e["curtailment"]["sweep_reason"]
    assert "4/4 (N = 30 planned)" in proc.stdout
