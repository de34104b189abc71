"""Submitit launchers that survive a rerun's process dying: the presets ``hydra/launcher=cluster_local``
and ``hydra/launcher=slurm`` (``recipe_audit/app/hydra_conf/hydra/launcher/``; launchers/README.md).

Hydra's submitit launchers raise as soon as one job produced no result (killed with SIGKILL, out
of memory, preempted, node lost), which aborts the whole multirun: no card, and the jobs still
running are abandoned. These wait for every job, log each job that died, and return it as a rerun
that failed (return value None, as ``run_job`` returns for a rerun that raised), so the sweep goes
on and the card is computed at the end; recipe_audit's callback then marks the dead rerun's MLflow
run KILLED, and the card lists it as unfinished (docs/guide/statistics.md: unfinished reruns count as failures).

Hydra's launcher submits and waits in one method (``launch``), so these submit the jobs the way
it does (the same executor from the same ``hydra.launcher`` parameters; the job function is the
launcher itself, as in Hydra) and then wait for each job on their own terms.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from omegaconf import OmegaConf

from recipe_audit.errors import first_line

log = logging.getLogger("recipe_audit")

try:
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import LocalLauncher, SlurmLauncher
except ImportError:  # pip install 'recipe_audit[cluster]'
    LocalLauncher = SlurmLauncher = None


def _tolerant(base):
    class Tolerant(base):
        def launch(self, job_overrides, initial_job_idx):
            return [self._result(job, overrides, initial_job_idx + i)
                    for i, (job, overrides) in enumerate(zip(self._submit(job_overrides, initial_job_idx),
                                                             job_overrides, strict=True))]

        def _executor(self):
            """The executor Hydra's ``BaseSubmititLauncher.launch`` builds (hydra-submitit-launcher
            1.2), from the same ``hydra.launcher`` parameters."""
            import submitit
            from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf

            init_keys = {"submitit_folder", "max_num_timeout"}
            executor = submitit.AutoExecutor(
                cluster=self._EXECUTOR, folder=self.params["submitit_folder"],
                **{f"{self._EXECUTOR}_{k}": v for k, v in self.params.items() if k == "max_num_timeout"})
            shared = set(OmegaConf.structured(BaseQueueConf).keys())
            executor.update_parameters(**{k if k in shared else f"{self._EXECUTOR}_{k}": v
                                          for k, v in self.params.items() if k not in init_keys})
            return executor

        def _submit(self, job_overrides, initial_job_idx):
            """Submit every job as Hydra's launcher does; return the submitit jobs unwaited."""
            from hydra.core.singleton import Singleton
            from hydra.core.utils import filter_overrides

            assert self.config is not None and len(job_overrides) > 0
            executor = self._executor()
            log.info("Submitit '%s' sweep output dir : %s", self._EXECUTOR, self.config.hydra.sweep.dir)
            sweep_dir = Path(str(self.config.hydra.sweep.dir))
            sweep_dir.mkdir(parents=True, exist_ok=True)
            if "mode" in self.config.hydra.sweep:
                os.chmod(sweep_dir, mode=int(str(self.config.hydra.sweep.mode), 8))
            job_params = []
            for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
                log.info("\t#%d : %s", idx, " ".join(filter_overrides(overrides)))
                job_params.append((list(overrides), "hydra.sweep.dir", idx, f"job_id_for_{idx}",
                                   Singleton.get_state()))
            return executor.map_array(self, *zip(*job_params, strict=True))

        def _result(self, job, overrides, idx):
            """The job's JobReturn; a job whose process died becomes a rerun that failed."""
            from hydra.core.utils import JobReturn, JobStatus

            if self._EXECUTOR == "local" and hasattr(job, "_results_timeout_s"):
                job._results_timeout_s = 2  # a local disk: no network filesystem lag to wait out
            try:
                return job.results()[0]
            except Exception as exc:  # the job's process died: a rerun that did not finish
                first = first_line(exc)
                log.error("job #%d (%s) died without a result: %s", idx, " ".join(overrides), first)
                ret = JobReturn(overrides=list(overrides), status=JobStatus.COMPLETED)
                ret.return_value = None
                return ret

    Tolerant.__name__ = Tolerant.__qualname__ = f"Tolerant{base.__name__}"
    return Tolerant


# Hydra instantiates only launchers defined under ``hydra_plugins``: these are the bases of
# ``hydra_plugins.recipe_audit.plugins.TolerantLocalLauncher`` and ``TolerantSlurmLauncher``
TolerantLocalLauncherBase = TolerantSlurmLauncherBase = None
if LocalLauncher is not None:
    TolerantLocalLauncherBase = _tolerant(LocalLauncher)
    TolerantSlurmLauncherBase = _tolerant(SlurmLauncher)
