"""The callback's parts, without Hydra running a sweep: what a job returned read through Hydra's
public API, a job's rerun tags, the sweep's environment put back."""

from __future__ import annotations

import ast
import os
from pathlib import Path

from recipe_audit import keys

REPO = Path(__file__).resolve().parents[1]


def test_a_failed_jobs_error_is_read_without_a_line_or_a_changed_traceback(capsys):
    from hydra.core.utils import JobReturn, JobStatus

    from recipe_audit.app.seams import job_result

    try:
        raise RuntimeError("injected")
    except RuntimeError as exc:
        error = exc
    tb = error.__traceback__
    ret = JobReturn(overrides=["seed=1"], status=JobStatus.FAILED)
    ret.return_value = error
    assert job_result(ret) == (None, error)
    assert error.__traceback__ is tb and ret.status == JobStatus.FAILED  # as Hydra left them
    assert capsys.readouterr().err == ""  # Hydra's "Error executing job" line is for a sweep that stops
    done = JobReturn(status=JobStatus.COMPLETED)
    done.return_value = {"acc": 0.9}
    assert job_result(done) == ({"acc": 0.9}, None)


def test_no_module_reads_a_private_attribute_of_hydras_job_return():
    bad = []
    for path in (REPO / "recipe_audit").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Attribute) and node.attr == "_return_value") or (
                    isinstance(node, ast.keyword) and node.arg == "_return_value"):
                bad.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert bad == []


def test_a_reruns_tags_say_what_it_is_where_it_runs_and_its_sweep(monkeypatch):
    from recipe_audit.store.rerun_runs import NewRerun, rerun_tags
    from recipe_audit.store.sweeps import SweepInfo

    monkeypatch.setenv("SLURM_JOB_ID", "77")
    new = NewRerun("default-seed3", 3, "r" * 16, "default", model="tiny_bert", task=None)
    sweep = SweepInfo("s" * 12, "p" * 32, "sqlite:///x.db", "exp", (3,))
    tags = rerun_tags(new, {"recipe_audit.devices": "0"}, sweep)
    assert tags == {keys.TAG_KIND: keys.KIND_RERUN, keys.TAG_RECIPE_ID: "r" * 16, keys.TAG_RECIPE_NAME: "default",
                    keys.TAG_SEED: "3", keys.TAG_HOST: tags[keys.TAG_HOST], keys.TAG_PID: str(os.getpid()),
                    keys.TAG_MODEL: "tiny_bert", keys.TAG_SLURM_JOB_ID: "77", "recipe_audit.devices": "0",
                    keys.TAG_SWEEP_ID: "s" * 12, keys.TAG_PARENT: "p" * 32}
    # an acceptance cell: its own tags over these, no model or task
    cell = NewRerun("cell", 3, "r" * 16, "default", model="m", task="t",
                    own_tags={keys.TAG_KIND: keys.KIND_ACCEPTANCE_CELL}, without=(keys.TAG_MODEL, keys.TAG_TASK))
    tags = rerun_tags(cell)
    assert tags[keys.TAG_KIND] == keys.KIND_ACCEPTANCE_CELL and keys.TAG_MODEL not in tags and keys.TAG_TASK not in tags


def test_the_sweeps_threads_are_handed_on_and_put_back(monkeypatch):
    from omegaconf import OmegaConf

    from recipe_audit.app import threads
    from recipe_audit.app.seams import SweepEnv

    monkeypatch.setenv(threads.ENV, "before")
    env = SweepEnv()
    decided = env.decide_threads(OmegaConf.create({}), 3, None)
    assert decided.threads == 3 and os.environ[threads.ENV] == "3"
    assert env.decide_threads(OmegaConf.create({}), None, None) is None  # unset: nothing decided
    env.restore()
    assert os.environ[threads.ENV] == "before"
    monkeypatch.delenv(threads.ENV)
    env.decide_threads(OmegaConf.create({}), 2, None)
    env.restore()
    assert threads.ENV not in os.environ


def test_the_sweeps_start_runs_with_the_garbage_collector_paused_and_puts_it_back():
    """The start of a sweep (MLflow's imports, the store) runs without the automatic collections
    its imports would trigger; the collector is as it was after it, also when it stops the
    process (one sentence, SystemExit) or raises. The end (the card) runs with the collector on:
    each card's figures are cycles only a collection frees (megabytes each)."""
    import gc

    import pytest

    from recipe_audit.app.callback import RecipeAuditCallback
    from recipe_audit.app.process import collector_paused

    seen = []

    @collector_paused
    def start(how):
        seen.append(gc.isenabled())
        if how == "stop":
            raise SystemExit(2)
        if how == "raise":
            raise ValueError("bad")
        return "started"

    was = gc.isenabled()
    try:
        gc.enable()
        assert start("run") == "started"
        assert gc.isenabled()
        with pytest.raises(SystemExit):
            start("stop")
        assert gc.isenabled()
        with pytest.raises(ValueError):
            start("raise")
        assert gc.isenabled()
        gc.disable()  # a process that runs without the collector keeps it off
        start("run")
        assert not gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()
    assert seen == [False, False, False, False]
    # the callback's start is the paused one (AcceptanceSweepCallback's start calls it); its end is not
    assert RecipeAuditCallback.on_multirun_start.__wrapped__.__qualname__ == "RecipeAuditCallback.on_multirun_start"
    assert not hasattr(RecipeAuditCallback.on_multirun_end, "__wrapped__")
