"""Everything recipe_audit installs into a process around the user's task, and puts back: one room.

**Around a job** (:class:`JobSeams`, in the job's own process, whichever launcher runs it): set up
when the callback has opened the job's rerun (Hydra's ``on_job_start``), put back when the job
ends (``on_job_end``, also when the task raised). A job whose task stopped the process instead
(``sys.exit``, Ctrl-C: Hydra then skips ``on_job_end``) is put back when the next job of the
process installs its own (:func:`restore_left`), or by whoever runs the task in their process.

* the job's environment: MLflow's own variables name the rerun (``MLFLOW_RUN_ID``,
  ``MLFLOW_EXPERIMENT_ID``, ``MLFLOW_EXPERIMENT_NAME``, ``MLFLOW_TRACKING_URI``; read by
  ``mlflow.start_run``, ``MlflowClient``, the Hugging Face ``Trainer``), each put back as it was;
* the current rerun (:func:`current_rerun`), which the built-in trainer logs into;
* while the task runs, and lifted as it returns, before the rerun is closed
  (:meth:`JobSeams.task_returned`): MLflow's fluent ``end_run`` keeps the rerun resumable
  (:func:`recipe_audit.store.rerun_runs.keep_rerun_resumable`), and an MLflow file store made in
  the folder of the rerun's SQLite store is refused
  (:func:`recipe_audit.store.sqlite.refuse_file_stores_beside`); a run the task left active in
  MLflow's fluent API is ended then;
* every metric source of :data:`METRIC_SOURCES`: a library that logs the card's metric its own
  way and does not read MLflow's variables, pointed at the rerun for the job's duration
  (Lightning's ``MLFlowLogger``: :mod:`recipe_audit.app.mlflow_loggers`, with its post-import
  hook for a Lightning first imported by the task).

The job's GPUs (``CUDA_VISIBLE_DEVICES``, :func:`job_devices`) are set before the rerun opens (its
tags name them) and kept: CUDA reads the variable once a process, so putting it back between jobs
would only make the next job of the process warn that CUDA started before it.

**Hydra's** ``JobReturn``: a failed job's error is read without Hydra re-raising it
(:func:`job_result`), and a failed job of a multirun is handed back completed so the sweep goes
on (:func:`hand_back`).

**Around a sweep** (:class:`SweepEnv`, in the sweep's processes): the torch threads of every rerun
(``$RECIPE_AUDIT_THREADS``) and the GPUs of every rerun (``$RECIPE_AUDIT_DEVICES``), decided once
when the multirun starts and put back when it ends.

A new metric source (a Keras callback, another logger that keeps its own run) is one entry of
:data:`METRIC_SOURCES`: a function of the job's :class:`Rerun` and its config as written that
returns a context manager pointing the source at the rerun and putting it back on exit
(``docs/development.md``, "A new metric source").
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

from recipe_audit.app import devices, threads
from recipe_audit.app.process import rank, stop

log = logging.getLogger("recipe_audit")

# MLflow's own variables, read by mlflow.start_run, MlflowClient, the HF Trainer and Lightning
ENV_RUN_ID = "MLFLOW_RUN_ID"
ENV_EXPERIMENT_ID = "MLFLOW_EXPERIMENT_ID"
ENV_EXPERIMENT_NAME = "MLFLOW_EXPERIMENT_NAME"
ENV_TRACKING_URI = "MLFLOW_TRACKING_URI"
MLFLOW_ENV = (ENV_RUN_ID, ENV_EXPERIMENT_ID, ENV_EXPERIMENT_NAME, ENV_TRACKING_URI)


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


# -- metric sources ------------------------------------------------------------------------------

#: A metric source: given the job's rerun and its config as written (a plain container; None when
#: not known), a context manager under which the source logs into the rerun, and which puts the
#: source back as it was on exit (also when the task raised).
MetricSource = Callable[[Rerun, Any], AbstractContextManager[Any]]


@contextmanager
def lightning_mlflow_logger(rerun: Rerun, raw_config: Any):
    """Lightning's ``MLFlowLogger`` (both packages) logs into the rerun while the job runs
    (:func:`recipe_audit.app.mlflow_loggers.point_mlflow_loggers`)."""
    from recipe_audit.app.mlflow_loggers import point_mlflow_loggers
    from recipe_audit.store.uris import mask_credentials

    restore = point_mlflow_loggers(rerun.tracking_uri, rerun.run_id, rerun.experiment_name, raw_config=raw_config,
                                   mask=mask_credentials)
    try:
        yield
    finally:
        restore()


#: The metric sources pointed at every job's rerun, in this order (put back in the reverse one).
#: What reads MLflow's variables (``mlflow.start_run``, ``mlflow.autolog``, the Hugging Face
#: ``Trainer``) needs no entry.
METRIC_SOURCES: dict[str, MetricSource] = {
    "lightning": lightning_mlflow_logger,
}


# -- around a job ----------------------------------------------------------------------------------

_INSTALLED: list[JobSeams] = []  # the job whose seams are installed in this process


class JobSeams:
    """What is installed around one job's task (see the module docstring), in two exit stacks:
    the task's (lifted by :meth:`task_returned`) inside the job's (lifted by :meth:`restore`).
    Also a context manager: ``with JobSeams(rerun): task()``."""

    def __init__(self, rerun: Rerun, raw_config: Any = None) -> None:
        self.rerun = rerun
        self.raw_config = raw_config  # the job's config as written (where it builds an MLFlowLogger)
        self._job = ExitStack()
        self._task = ExitStack()

    def install(self) -> None:
        """Point the process at the job's rerun (what a job left installed is put back first)."""
        from recipe_audit.store import rerun_runs, sqlite

        restore_left()
        rerun, job, task = self.rerun, self._job, self._task
        try:
            _CURRENT[:] = [rerun]
            job.callback(_CURRENT.clear)
            job.callback(restore_env, saved_mlflow_env())
            point_mlflow_at(rerun.run_id, rerun.experiment_id, rerun.experiment_name, rerun.tracking_uri)
            rerun_runs.keep_rerun_resumable(rerun.run_id)
            task.callback(rerun_runs.keep_rerun_resumable, None)
            sqlite.refuse_file_stores_beside(rerun.tracking_uri)
            task.callback(sqlite.refuse_file_stores_beside, None)
            for source in METRIC_SOURCES.values():
                job.enter_context(source(rerun, self.raw_config))
        except BaseException:
            self.restore()
            raise
        _INSTALLED[:] = [self]

    def task_returned(self) -> None:
        """The task has returned: MLflow's own ``end_run`` again, file stores no longer refused,
        and a run the task left active in MLflow's fluent API ended (so the next job in this
        process does not log into it; the callback sets the rerun's status right after)."""
        self._task.close()
        end_fluent_run()

    def restore(self) -> None:
        """The process as it was before :meth:`install` (each part, also when another fails)."""
        if _INSTALLED and _INSTALLED[0] is self:
            _INSTALLED.clear()
        with self._job:
            self._task.close()

    def __enter__(self) -> JobSeams:
        self.install()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.task_returned()
        finally:
            self.restore()


def restore_left() -> None:
    """Put back what a job left installed in this process (its task stopped the process, as with
    ``sys.exit``, and Hydra skipped the job's end); nothing when no job did."""
    while _INSTALLED:
        _INSTALLED[0].restore()


def end_fluent_run() -> None:
    """A run the task left active in MLflow's fluent API is ended."""
    mlflow = sys.modules.get("mlflow")
    if mlflow is None:
        return
    try:
        while mlflow.active_run() is not None:
            mlflow.end_run()
    except Exception:  # noqa: BLE001 - the run's status is set by the callback anyway
        pass


def saved_mlflow_env() -> dict[str, str | None]:
    """MLflow's variables as they are now (what :func:`restore_env` puts back)."""
    return {k: os.environ.get(k) for k in MLFLOW_ENV}


def point_mlflow_at(run_id: str, experiment_id: str, experiment_name: str, tracking_uri: str) -> None:
    """MLflow's variables name the rerun's run, experiment and store."""
    for k, v in ((ENV_RUN_ID, run_id), (ENV_EXPERIMENT_ID, experiment_id), (ENV_EXPERIMENT_NAME, experiment_name),
                 (ENV_TRACKING_URI, tracking_uri)):
        os.environ[k] = v


def restore_env(saved: Mapping[str, str | None]) -> None:
    """Each variable of ``saved`` as it was (unset where it was unset)."""
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def job_devices(sweep_dir: str) -> dict[str, str]:
    """This job's GPUs (``CUDA_VISIBLE_DEVICES``, set before the task runs and kept: see the module
    docstring) and their tags."""
    return devices.for_job(sweep_dir)


# -- Hydra's JobReturn ---------------------------------------------------------------------------


def job_result(job_return: Any) -> tuple[Any, BaseException | None]:
    """What a job's task returned, or the error it raised, through Hydra's public ``return_value``.

    For a failed job the property would re-raise the task's error (adding its own frames to the
    error's traceback, which ``error.txt`` records) after a line on stderr meant for a sweep that
    stops there; this one goes on. So the value it holds is read with the status COMPLETED for
    the one read, and the status put back after it.
    """
    from hydra.core.utils import JobStatus

    status = job_return.status
    if status == JobStatus.COMPLETED:
        return job_return.return_value, None
    job_return.status = JobStatus.COMPLETED
    try:
        value = job_return.return_value
    finally:
        job_return.status = status
    if status == JobStatus.FAILED:
        return None, value if isinstance(value, BaseException) else None
    return value, None


def hand_back(job_return: Any) -> None:
    """A failed job of a multirun, whose rerun is recorded FAILED, handed back to Hydra's sweeper
    as completed with no value: Hydra's basic sweeper would re-raise its error after the batch and
    never reach the end of the multirun (the other seeds, the card)."""
    from hydra.core.utils import JobStatus

    if job_return.status == JobStatus.FAILED:
        job_return.status = JobStatus.COMPLETED
        job_return.return_value = None


# -- around a sweep --------------------------------------------------------------------------------


class SweepEnv:
    """The sweep's decisions handed to its jobs (threads, GPUs) and what they replaced."""

    def __init__(self) -> None:
        self._threads_before: tuple[bool, str | None] | None = None  # $RECIPE_AUDIT_THREADS before the sweep

    def decide_threads(self, config: Any, option: Any, n_jobs: int | None):
        """``threads=auto``: the torch threads of every rerun, decided once, now
        (recipe_audit/app/threads.py), logged in one line and handed to the jobs as
        ``$RECIPE_AUDIT_THREADS``. A number is the decision as it is. None (the option unset):
        nothing. ``n_jobs``: the sweep's jobs (None: not known)."""
        if option is None:
            return None
        try:
            value = threads.parse(option)
        except threads.ThreadsError as exc:
            stop(str(exc))
        if value == threads.AUTO:
            decided = threads.decide(config, n_jobs)
        else:
            decided = threads.Decision(int(value), f"threads={value}")
        if rank() == 0:
            log.info("%s", decided.line())
        if self._threads_before is None:
            self._threads_before = (threads.ENV in os.environ, os.environ.get(threads.ENV))
        os.environ[threads.ENV] = str(decided.threads)
        return decided

    @staticmethod
    def place_devices(config: Any, n_jobs: int | None, option: Any, reruns_per_gpu: Any):
        """The GPUs of every rerun, decided once, now (recipe_audit/app/devices.py), logged in one
        line and handed to the jobs as ``$RECIPE_AUDIT_DEVICES``; nothing on a machine without GPUs."""
        try:
            placed = devices.decide(config, n_jobs, option, reruns_per_gpu)
        except devices.DevicesError as exc:
            stop(str(exc))
        if placed.reason and rank() == 0:
            log.info("%s", placed.line())
        devices.hand_to_jobs(placed)
        return placed

    def restore(self) -> None:
        """``$RECIPE_AUDIT_DEVICES`` and ``$RECIPE_AUDIT_THREADS`` as they were before the sweep."""
        devices.restore()
        saved, self._threads_before = self._threads_before, None
        if saved is None:
            return
        if saved[0]:
            os.environ[threads.ENV] = saved[1] or ""
        else:
            os.environ.pop(threads.ENV, None)


def sweep_tags(decided, placed) -> dict[str, str]:
    """The sweep parent's record of its torch threads decision and its GPU placement."""
    from recipe_audit import keys

    tags = {} if decided is None else {keys.TAG_THREADS: str(decided.threads), keys.TAG_THREADS_REASON: decided.line()}
    return {**tags, **devices.parent_tags(placed)}
