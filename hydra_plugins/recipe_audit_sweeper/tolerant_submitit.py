"""Submitit launchers that survive a rerun's process dying: ``hydra/launcher=submitit_local_tolerant``
and ``hydra/launcher=submitit_slurm_tolerant`` (``conf/hydra/launcher/``; launchers/README.md).

Hydra's submitit launchers raise as soon as one job produced no result (killed with SIGKILL, out
of memory, preempted, node lost), which aborts the whole multirun: no card, and the jobs still
running are abandoned. These wait for every job, log each job that died, and return it as a rerun
that failed (return value None, as ``run_job`` returns for a rerun that raised), so the sweep goes
on and the card is computed at the end; recipe_audit's callback then marks the dead rerun's MLflow
run KILLED, and the card lists it as unfinished (SPEC 1.2).
"""

from __future__ import annotations

import logging

log = logging.getLogger("recipe_audit")

try:
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import LocalLauncher, SlurmLauncher
except ImportError:  # pip install 'recipe_audit[cluster]'
    LocalLauncher = SlurmLauncher = None


def _tolerant(base):
    class Tolerant(base):
        def launch(self, job_overrides, initial_job_idx):
            import submitit
            from hydra.core.utils import JobReturn, JobStatus

            jobs = []
            real_map = submitit.AutoExecutor.map_array

            def map_array(executor, *args, **kwargs):  # keep the jobs; wait for them below
                jobs.extend(real_map(executor, *args, **kwargs))
                return []

            submitit.AutoExecutor.map_array = map_array
            try:
                super().launch(job_overrides, initial_job_idx)
            finally:
                submitit.AutoExecutor.map_array = real_map
            out = []
            for idx, (job, overrides) in enumerate(zip(jobs, job_overrides, strict=True)):
                if self._EXECUTOR == "local" and hasattr(job, "_results_timeout_s"):
                    job._results_timeout_s = 2  # a local disk: no network filesystem lag to wait out
                try:
                    out.append(job.results()[0])
                except Exception as exc:  # the job's process died: a rerun that did not finish
                    log.error("job #%d (%s) died without a result: %s", initial_job_idx + idx,
                              " ".join(overrides), str(exc).strip().splitlines()[0] if str(exc).strip() else exc)
                    ret = JobReturn(overrides=list(overrides), status=JobStatus.COMPLETED)
                    ret.return_value = None
                    out.append(ret)
            return out

    Tolerant.__name__ = Tolerant.__qualname__ = f"Tolerant{base.__name__}"
    return Tolerant


if LocalLauncher is not None:
    TolerantLocalLauncher = _tolerant(LocalLauncher)
    TolerantSlurmLauncher = _tolerant(SlurmLauncher)
