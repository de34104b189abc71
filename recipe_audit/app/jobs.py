"""A job's rerun, in the job's own process: opened before the task runs, closed after it.

:func:`open_job` opens the rerun's MLflow run (nested under the sweep's run), with what the job's
process needs around the task to log into it (a :class:`recipe_audit.app.seams.JobSeams`,
installed and put back by the callback); :func:`close_job` records the truth whatever the task
did to the run. No Hydra here: the callback hands plain data in.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recipe_audit.app import seams
from recipe_audit.app.outcomes import Bars, disagreement, no_metric, returned_metrics
from recipe_audit.app.process import one_line, stop


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
    """A job whose rerun is open, and what its process needs around the task to log into it."""

    rerun: seams.Rerun
    params: dict[str, str]
    seams: seams.JobSeams
    label: str
    started: float = field(default_factory=time.monotonic)


def open_job(place: JobPlace, new, *, label: str, params: dict[str, str], raw_config: Any,
             parent_checked: list[bool]) -> Job:
    """Open the rerun's run for a job (``new``: a :class:`recipe_audit.store.rerun_runs.NewRerun`),
    after the job's GPUs are set. ``parent_checked``: whether this process has checked that the
    sweep's parent run is in its store (checked once a process)."""
    from recipe_audit.store import rerun_runs, sqlite, sweeps, tracking

    placed = seams.job_devices(place.sweep_dir)  # CUDA_VISIBLE_DEVICES, before the task runs
    store = tracking.open_store(place.uri, place.experiment, wait_for_server=place.multirun)
    sqlite.check_store_file(store.uri)
    sweep = sweeps.current_sweep(Path(place.sweep_dir)) if place.multirun else None
    if sweep is not None and not parent_checked:
        sweeps.check_sweep_parent(store, sweep)  # once a process: the store is the sweep's
        parent_checked.append(True)
    run_id, artifact_uri = rerun_runs.open_rerun(store, new, placed=placed, sweep=sweep)
    seed = new.seed
    rerun = seams.Rerun(run_id, artifact_uri, store.uri, store.experiment_id, store.experiment_name,
                        int(seed) if isinstance(seed, int) and not isinstance(seed, bool) else seed, new.recipe_id,
                        sweep.sweep_id if sweep else None)
    return Job(rerun, params, seams.JobSeams(rerun, raw_config), label)


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


def stop_if_store_gone(uri: str, seed: Any) -> None:
    """A tracking server that went away mid-sweep (and did not come back while the store's calls
    waited for it) stops the sweep with one sentence, rather than recording reruns nowhere: every
    rerun that finished before is in the store, and relaunching with ``tracking.resume=true``
    trains only the others. Returns when the store answers (the error was something else: the caller
    raises it)."""
    from recipe_audit.store import tracking

    try:
        tracking.check_reachable(uri)
    except tracking.TrackingError as gone:
        stop(f"{gone} Seed {seed} was not recorded and the sweep stops here; the reruns that "
             "finished are in the store: relaunch the same command with tracking.resume=true "
             "once it is back.")
