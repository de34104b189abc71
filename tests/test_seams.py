"""What recipe_audit installs into a job's process around the user's task (recipe_audit/app/seams.py):
set up by one context and put back by it, after a task that returned, raised or was interrupted,
and after a job that stopped the process; installed from nowhere else. In process, no sweep."""

from __future__ import annotations

import ast
import os
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from recipe_audit.app import seams

REPO = Path(__file__).resolve().parents[1]
RERUN = seams.Rerun("r" * 32, "file:///a", "sqlite:///unset", "7", "exp", 3, "abc", "s1")
_TRIED: list[int] = []


def _refuses_file_stores() -> bool:
    """Whether an MLflow file store in the folder of the rerun's SQLite store is refused now."""
    import mlflow.store.tracking.file_store as file_store

    from recipe_audit.store import sqlite

    _TRIED.append(1)
    folder = Path(RERUN.tracking_uri[len("sqlite:///"):]).parent
    try:
        file_store.FileStore(str(folder / f"inner{len(_TRIED)}"))
    except sqlite.FileStoreRefused:
        return True
    return False


def _state():
    """Everything the seams touch, as it is now."""
    import mlflow
    from mlflow.tracking import fluent

    return ({k: os.environ.get(k) for k in seams.MLFLOW_ENV}, seams.current_rerun(), fluent.end_run, mlflow.end_run,
            _refuses_file_stores())


@pytest.fixture()
def recorded(monkeypatch, tmp_path):
    """A metric source that records when it is pointed at a rerun and put back; the rerun's store
    is a SQLite file in ``tmp_path``."""
    import dataclasses

    monkeypatch.setattr(sys.modules[__name__], "RERUN", dataclasses.replace(
        RERUN, tracking_uri=f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"))
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    calls = []

    @contextmanager
    def source(rerun, raw_config):
        calls.append(("point", rerun.run_id, raw_config))
        try:
            yield
        finally:
            calls.append(("back", rerun.run_id))

    monkeypatch.setitem(seams.METRIC_SOURCES, "recorded", source)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///before.db")
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    return calls


def _installed():
    env, current, end_run, mlflow_end_run, refusing = _state()
    assert env == {"MLFLOW_RUN_ID": RERUN.run_id, "MLFLOW_EXPERIMENT_ID": "7", "MLFLOW_EXPERIMENT_NAME": "exp",
                   "MLFLOW_TRACKING_URI": RERUN.tracking_uri}
    assert current is RERUN and refusing
    assert end_run is mlflow_end_run and end_run.__name__ == "_resuming_end_run"


@pytest.mark.parametrize("how", ["returns", "raises", "ctrl-c"])
def test_one_context_sets_up_and_puts_back_everything(recorded, how):
    """Entered, the job's environment names the rerun, the current rerun is it, MLflow's end_run
    keeps it resumable, file stores beside its SQLite store are refused and every metric source is
    pointed at it; left (the task returned, raised or was interrupted), each is as it was."""
    before = _state()
    with pytest.raises(KeyboardInterrupt if how == "ctrl-c" else RuntimeError) if how != "returns" else _nothing():
        with seams.JobSeams(RERUN, {"logger": {}}):
            _installed()
            assert recorded == [("point", RERUN.run_id, {"logger": {}})]
            if how == "raises":
                raise RuntimeError("the task failed")
            if how == "ctrl-c":
                raise KeyboardInterrupt
    assert _state() == before and before[0]["MLFLOW_TRACKING_URI"] == "sqlite:///before.db"
    assert recorded[-1] == ("back", RERUN.run_id)


@contextmanager
def _nothing():
    yield


def test_the_task_guards_are_lifted_before_the_job_is_put_back(recorded):
    """As the callback uses it: installed at the job's start; when the task returns, MLflow's own
    end_run is back and file stores are no longer refused while the rerun is closed (the
    environment still names it); then everything is put back, once, however often it is asked."""
    from mlflow.tracking import fluent

    own, before = fluent.end_run, _state()
    job = seams.JobSeams(RERUN)
    job.install()
    job.task_returned()
    assert fluent.end_run is own and not _refuses_file_stores()
    assert os.environ["MLFLOW_RUN_ID"] == RERUN.run_id and seams.current_rerun() is RERUN
    job.restore()
    job.restore()
    assert _state() == before and recorded.count(("back", RERUN.run_id)) == 1


def test_a_job_that_stopped_the_process_is_put_back_by_the_next(recorded):
    """A task that stopped the process (sys.exit: Hydra skips the job's end) leaves its seams
    installed; the next job of the process puts them back before installing its own, and
    restore_left puts back whatever is left."""
    import dataclasses

    before = _state()
    seams.JobSeams(RERUN).install()  # never restored
    other = dataclasses.replace(RERUN, run_id="o" * 32)
    seams.JobSeams(other).install()
    assert recorded == [("point", RERUN.run_id, None), ("back", RERUN.run_id), ("point", other.run_id, None)]
    assert os.environ["MLFLOW_RUN_ID"] == other.run_id
    seams.restore_left()
    assert _state() == before and recorded[-1] == ("back", other.run_id)
    seams.restore_left()  # nothing left: nothing done


def test_a_source_that_fails_to_install_leaves_nothing_installed(recorded, monkeypatch):
    @contextmanager
    def broken(rerun, raw_config):
        raise ValueError("cannot point it")
        yield  # pragma: no cover

    monkeypatch.setitem(seams.METRIC_SOURCES, "broken", broken)
    before = _state()
    with pytest.raises(ValueError, match="cannot point it"):
        seams.JobSeams(RERUN).install()
    assert _state() == before and recorded == [("point", RERUN.run_id, None), ("back", RERUN.run_id)]


def test_a_failed_job_of_a_multirun_is_handed_back_completed():
    from hydra.core.utils import JobReturn, JobStatus

    failed = JobReturn(overrides=["seed=1"], status=JobStatus.FAILED)
    failed.return_value = RuntimeError("x")
    seams.hand_back(failed)
    assert failed.status == JobStatus.COMPLETED and failed.return_value is None
    done = JobReturn(status=JobStatus.COMPLETED)
    done.return_value = 0.9
    seams.hand_back(done)
    assert done.status == JobStatus.COMPLETED and done.return_value == 0.9


#: What installs something into a job's process around its task, or puts it back: called from
#: recipe_audit/app/seams.py only.
INSTALLERS = {"point_mlflow_at", "restore_env", "keep_rerun_resumable", "refuse_file_stores_beside",
              "point_mlflow_loggers", "lightning_mlflow_logger", "end_fluent_run"}


def _calls(source: str) -> set[str]:
    """The installers ``source`` calls or hands on (``stack.callback(restore_env, ...)``)."""
    return {node.attr if isinstance(node, ast.Attribute) else node.id for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.Attribute, ast.Name))} & INSTALLERS


def test_only_the_seams_module_installs_into_a_jobs_process():
    """The calls that install something around a job's task are made in recipe_audit/app/seams.py
    only (a planted one elsewhere is seen)."""
    callers: dict[str, set[str]] = {}
    for path in sorted((REPO / "recipe_audit").rglob("*.py")):
        for name in _calls(path.read_text(encoding="utf-8")):
            callers.setdefault(name, set()).add(str(path.relative_to(REPO)))
    assert {k: v for k, v in callers.items() if v != {"recipe_audit/app/seams.py"}} == {}
    assert set(callers) == INSTALLERS
    assert _calls("from recipe_audit.store import sqlite\nsqlite.refuse_file_stores_beside(None)\n") == {
        "refuse_file_stores_beside"}
