"""A job's rerun, in the job's own process: opened before the task runs, closed after it.

:func:`open_job` opens the rerun's MLflow run (nested under the sweep's run) and :func:`start_job`
points what the task logs at it: MLflow's own variables, MLflow's fluent ``end_run`` and
Lightning's ``MLFlowLogger`` (the job's environment: :mod:`recipe_audit.app.job_env`), and refuses
a file store in the folder of the rerun's SQLite store.
:func:`close_job` records the truth whatever the task did to the run, and :func:`end_job` puts
the process back as it was. No Hydra here: the callback hands plain data in.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recipe_audit.app import job_env
from recipe_audit.app.outcomes import Bars, disagreement, no_metric, returned_metrics
from recipe_audit.app.process import one_line, stop


@dataclass(frozen=True)
class Rerun:
    """The rerun a job is logging into (what the built-in trainer reads through :func:`current_rerun`)."""

    run_id: str
    artifact_uri: str
    tracking_uri: str
    experiment_id: str
    experiment_name: str
    seed: int
    recipe_id: str
    sweep_id: str | None
    # tags a task function in this process adds; written with the rerun's closing batch
    tags: dict[str, str] = field(default_factory=dict, compare=False)


_CURRENT: list[Rerun] = []  # the rerun of the job running in this process (none between jobs)


def current_rerun() -> Rerun | None:
    """The rerun of the job running in this process, if the recipe_audit callback opened one."""
    return _CURRENT[0] if _CURRENT else None


def forget_current_rerun() -> None:
    """No job runs in this process any more (a job that stopped the process: tests run it in theirs)."""
    from recipe_audit.store import sqlite

    _CURRENT.clear()
    sqlite.refuse_file_stores_beside(None)


@dataclass(frozen=True)
class JobPlace:
    """What every job of a multirun shares: its store and experiment, whether it is a multirun,
    its directories and the app's job name."""

    uri: str
    experiment: str
    multirun: bool
    sweep_dir: str
    run_dir: str
    job_name: str


@dataclass
class Job:
    """A job whose rerun is open."""

    rerun: Rerun
    params: dict[str, str]
    saved_env: dict[str, str | None]
    label: str
    started: float = field(default_factory=time.monotonic)
    raw_config: Any = None  # the job's config as written (where it builds an MLFlowLogger)
    restore_loggers: Callable[[], None] | None = None


def open_job(place: JobPlace, new, *, label: str, params: dict[str, str], raw_config: Any,
             parent_checked: list[bool]) -> Job:
    """Open the rerun's run for a job (``new``: a :class:`recipe_audit.store.rerun_runs.NewRerun`),
    after the job's GPUs are set. ``parent_checked``: whether this process has checked that the
    sweep's parent run is in its store (checked once a process)."""
    from recipe_audit.store import rerun_runs, sqlite, sweeps, tracking

    placed = job_env.job_devices(place.sweep_dir)  # CUDA_VISIBLE_DEVICES, before the task runs
    store = tracking.open_store(place.uri, place.experiment, wait_for_server=place.multirun)
    sqlite.check_store_file(store.uri)
    sweep = sweeps.current_sweep(Path(place.sweep_dir)) if place.multirun else None
    if sweep is not None and not parent_checked:
        sweeps.check_sweep_parent(store, sweep)  # once a process: the store is the sweep's
        parent_checked.append(True)
    run_id, artifact_uri = rerun_runs.open_rerun(store, new, placed=placed, sweep=sweep)
    saved = job_env.saved_mlflow_env()
    seed = new.seed
    rerun = Rerun(run_id, artifact_uri, store.uri, store.experiment_id, store.experiment_name,
                  int(seed) if isinstance(seed, int) and not isinstance(seed, bool) else seed, new.recipe_id,
                  sweep.sweep_id if sweep else None)
    return Job(rerun, params, saved, label, raw_config=raw_config)


def start_job(job: Job) -> None:
    """Point what the task logs at the job's rerun, for the job's duration."""
    from recipe_audit.app.mlflow_loggers import point_mlflow_loggers
    from recipe_audit.store import rerun_runs, sqlite
    from recipe_audit.store.uris import mask_credentials

    rerun = job.rerun
    _CURRENT[:] = [rerun]
    job_env.point_mlflow_at(rerun.run_id, rerun.experiment_id, rerun.experiment_name, rerun.tracking_uri)
    rerun_runs.keep_rerun_resumable(rerun.run_id)
    sqlite.refuse_file_stores_beside(rerun.tracking_uri)
    job.restore_loggers = point_mlflow_loggers(rerun.tracking_uri, rerun.run_id, rerun.experiment_name,
                                               raw_config=job.raw_config, mask=mask_credentials)


def close_job(job: Job, returned: Any, error: BaseException | None, *, bars: Bars, kind: str,
              bar_tags: Callable[[Mapping[str, Any]], dict[str, str]],
              on_disk_full: Callable[[], None] | None = None) -> dict[str, Any]:
    """Record the job's end in its rerun's run: the params, the numbers it returned, the bars'
    tags (``bar_tags``) and the status (FAILED with ``error``; FAILED for want of a card metric
    when a rerun of ``kind`` rerun logged and returned none, or with both values when the value
    it returned is not the one its run holds). Returns the outcome
    (:func:`recipe_audit.store.rerun_runs.close_rerun`), with the rerun's recipe identity. A full
    disk stops the sweep here (``on_disk_full`` first: the sweep's own process closes its parent)."""
    from recipe_audit import keys
    from recipe_audit.store import rerun_runs, sqlite, tracking

    end_fluent_run()
    store = tracking.open_store(job.rerun.tracking_uri, job.rerun.experiment_name)
    try:
        sqlite.check_store_file(store.uri)
    except tracking.StoreGone as exc:
        stop(f"{exc} Seed {job.rerun.seed} and the sweep stop here; relaunch once the store is back.")
    try:
        outcome = rerun_runs.close_rerun(
            store, job.rerun.run_id, params=job.params, returned=returned_metrics(returned, bars.metrics),
            error=error, metrics=bars.metrics, tags_for=lambda o: {**job.rerun.tags, **bar_tags(o)},
            no_metric=(lambda missing: no_metric(returned, missing, bars.metrics)) if kind == keys.KIND_RERUN else None,
            disagree=disagreement if kind == keys.KIND_RERUN else None)
    except Exception as exc:
        if sqlite.disk_full(exc):
            rerun_runs.mark_failed(store, job.rerun.run_id)  # nothing left RUNNING where it can be helped
        stop_on_full_disk(exc, store.uri, job.rerun.seed, on_disk_full)
        raise
    outcome["recipe_id"] = job.rerun.recipe_id
    return outcome


def stop_on_full_disk(exc: BaseException, uri: str, seed: Any, on_disk_full: Callable[[], None] | None) -> None:
    """When ``exc`` says the disk of the tracking store ``uri`` is full, the sweep stops at this
    rerun (seed ``seed``), whether it could not be opened or closed: every later write would fail
    the same way. ``on_disk_full`` first (the sweep's own process closes its parent), then one
    sentence and exit 2; a later ``tracking.resume=true`` runs the seeds left. Otherwise returns."""
    from recipe_audit.store import sqlite

    if not sqlite.disk_full(exc):
        return
    if on_disk_full is not None:
        on_disk_full()
    stop(f"The disk of the tracking store {uri} is full ({one_line(exc)[:200]}); seed {seed} and the sweep stop "
         "here. Free space, then relaunch the same command with tracking.resume=true (the seeds that finished "
         "are kept).")


def stop_if_store_gone(uri: str, seed: Any, exc: BaseException) -> None:
    """A tracking server that went away mid-sweep (and did not come back while the store's calls
    waited for it) stops the sweep with one sentence, rather than recording reruns nowhere: every
    rerun that finished before is in the store, and relaunching with ``tracking.resume=true``
    trains only the others. Returns when the store answers (``exc`` was something else)."""
    from recipe_audit.store import tracking

    try:
        tracking.check_reachable(uri)
    except tracking.TrackingError as gone:
        stop(f"{gone} Seed {seed} was not recorded and the sweep stops here; the reruns that "
             "finished are in the store: relaunch the same command with tracking.resume=true "
             "once it is back.")


def end_job(job: Job) -> None:
    """The process as it was before the job: MLflow's variables and ``end_run``, Lightning's
    ``MLFlowLogger``, no current rerun."""
    _CURRENT.clear()
    if job.restore_loggers is not None:
        job.restore_loggers()
    job_env.restore(job.saved_env)


def stop_resuming() -> None:
    """MLflow's own ``end_run`` again, file stores no longer refused (the job's task has returned)."""
    from recipe_audit.store import rerun_runs, sqlite

    rerun_runs.keep_rerun_resumable(None)
    sqlite.refuse_file_stores_beside(None)


def end_fluent_run() -> None:
    """A run the task left active in MLflow's fluent API is ended, so the next job in this process
    does not log into it (its final status is set right after)."""
    mlflow = sys.modules.get("mlflow")
    if mlflow is None:
        return
    try:
        while mlflow.active_run() is not None:
            mlflow.end_run()
    except Exception:  # noqa: BLE001 - the run's status is set by the callback anyway
        pass
