"""What a sweep hands its jobs through the environment, and puts back afterwards.

* For a job: MLflow's own variables name the job's rerun (:func:`point_mlflow_at`; read by
  ``mlflow.start_run``, ``MlflowClient``, the Hugging Face ``Trainer``), restored when the job
  ends (:func:`restore`).
* For the sweep (:class:`SweepEnv`): the torch threads of every rerun (``$RECIPE_AUDIT_THREADS``)
  and the GPUs of every rerun (``$RECIPE_AUDIT_DEVICES``), decided once when the multirun
  starts, restored when it ends.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
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


def saved_mlflow_env() -> dict[str, str | None]:
    """MLflow's variables as they are now (what :func:`restore` puts back)."""
    return {k: os.environ.get(k) for k in MLFLOW_ENV}


def point_mlflow_at(run_id: str, experiment_id: str, experiment_name: str, tracking_uri: str) -> None:
    """MLflow's variables name the rerun's run, experiment and store."""
    for k, v in ((ENV_RUN_ID, run_id), (ENV_EXPERIMENT_ID, experiment_id), (ENV_EXPERIMENT_NAME, experiment_name),
                 (ENV_TRACKING_URI, tracking_uri)):
        os.environ[k] = v


def restore(saved: Mapping[str, str | None]) -> None:
    """Each variable of ``saved`` as it was (unset where it was unset)."""
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


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


def job_devices(sweep_dir: str) -> dict[str, str]:
    """This job's GPUs (``CUDA_VISIBLE_DEVICES``, set before the task runs) and their tags."""
    return devices.for_job(sweep_dir)


def sweep_tags(decided, placed) -> dict[str, str]:
    """The sweep parent's record of its torch threads decision and its GPU placement."""
    from recipe_audit import keys

    tags = {} if decided is None else {keys.TAG_THREADS: str(decided.threads), keys.TAG_THREADS_REASON: decided.line()}
    return {**tags, **devices.parent_tags(placed)}
