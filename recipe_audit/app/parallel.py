"""Local parallel workers: ``hydra/launcher=local_parallel`` (``recipe_audit/app/hydra_conf/hydra/launcher/``, launchers/README.md).

Hydra's joblib launcher (same parameters: ``n_jobs``, ``backend``, ``prefer``, ...; same loky
worker processes), except that each worker composes one job per recipe and derives the other
seeds' configurations from it (:func:`recipe_audit.app.launchers.execute_job_in_worker`) instead of
composing every job from the config files again (``bench/bench_compose.py``). Hydra's launcher names
its job function inside ``launch``, so this submits the jobs the way it does, with that function.
"""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger("recipe_audit")

try:  # Hydra's class only: joblib itself is imported when the launcher runs (Hydra imports this module in every app)
    from hydra_plugins.hydra_joblib_launcher.joblib_launcher import JoblibLauncher
except ImportError:  # pip install 'recipe_audit[parallel]'
    JoblibLauncher = None

SeedJoblibLauncherBase = None  # the base of hydra_plugins.recipe_audit.plugins.SeedJoblibLauncher


if JoblibLauncher is not None:

    class SeedJoblibLauncherBase(JoblibLauncher):
        """Hydra's joblib launcher; its workers derive each seed's job configuration."""

        def launch(self, job_overrides, initial_job_idx):
            """``hydra_joblib_launcher._core.launch`` (hydra-joblib-launcher 1.2), with
            :func:`recipe_audit.app.launchers.execute_job_in_worker` as the job function."""
            from hydra.core.singleton import Singleton
            from hydra.core.utils import configure_log, filter_overrides, setup_globals
            from hydra_plugins.hydra_joblib_launcher._core import process_joblib_cfg
            from joblib import Parallel, delayed
            from joblib.externals.loky.process_executor import TerminatedWorkerError


            setup_globals()
            assert self.config is not None and self.task_function is not None and self.hydra_context is not None
            configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
            sweep_dir = Path(str(self.config.hydra.sweep.dir))
            sweep_dir.mkdir(parents=True, exist_ok=True)
            joblib_cfg = self.joblib
            joblib_cfg["backend"] = "loky"  # as Hydra's: the threading backend is incompatible with Hydra
            process_joblib_cfg(joblib_cfg)
            log.info("Joblib.Parallel(%s) is launching %d jobs",
                     ",".join(f"{k}={v}" for k, v in joblib_cfg.items()), len(job_overrides))
            log.info("Launching jobs, sweep output dir : %s", sweep_dir)
            for idx, overrides in enumerate(job_overrides):
                log.info("\t#%d : %s", idx, " ".join(filter_overrides(overrides)))
            singleton_state = Singleton.get_state()
            results: dict[int, object] = {}
            tries = dict.fromkeys(range(len(job_overrides)), 0)
            pending = list(range(len(job_overrides)))
            while pending:
                for i in pending:
                    tries[i] += 1
                try:
                    for i, ret in Parallel(**joblib_cfg, return_as="generator_unordered")(
                            delayed(_indexed)(i, initial_job_idx + i, job_overrides[i], self.hydra_context, self.config,
                                              self.task_function, singleton_state) for i in pending):
                        results[i] = ret
                    pending = []
                except TerminatedWorkerError as exc:
                    # a worker died (SIGKILL, out of memory): loky ends the pool with every job it
                    # was running. Their reruns are recorded KILLED; each lost job runs again, up
                    # to MAX_TRIES times (a killed attempt followed by a finished rerun of the
                    # same seed counts the finished one), and the sweep goes on
                    lost = [i for i in pending if i not in results]
                    closed = _close_reruns_of_dead_workers(str(self.config.hydra.sweep.dir))
                    log.warning("a worker died (%s): %d rerun(s) recorded KILLED; %d job(s) lost with the pool",
                                type(exc).__name__, len(closed), len(lost))
                    pending = [i for i in lost if tries[i] < MAX_TRIES]
                    for i in lost:
                        if tries[i] >= MAX_TRIES:
                            results[i] = _killed_return(job_overrides[i], sweep_dir, initial_job_idx + i)
            return [results[i] for i in range(len(job_overrides))]


MAX_TRIES = 2


def _indexed(i, idx, overrides, hydra_context, config, task_function, singleton_state):
    from recipe_audit.app.launchers import execute_job_in_worker

    return i, execute_job_in_worker(idx, overrides, hydra_context, config, task_function, singleton_state)


def _killed_return(overrides, sweep_dir: Path, job_index: int):
    """The result of a job whose worker died every time it ran: a completed job with no value, whose
    outcome is KILLED (posted where the recipe_audit callback would have posted it, had it lived)."""
    from hydra.core.utils import JobReturn, JobStatus

    from recipe_audit.app.outcomes import OutcomeChannel

    OutcomeChannel(sweep_dir).post(job_index, {"run_id": None, "status": "KILLED", "metrics": {},
                                               "error": "its worker process died"})
    return JobReturn(overrides=list(overrides), status=JobStatus.COMPLETED)  # its return value: None


def _close_reruns_of_dead_workers(sweep_dir: str) -> list[str]:
    from recipe_audit.store import rerun_runs, sweeps

    info = sweeps.current_sweep(Path(sweep_dir))
    return [] if info is None else rerun_runs.close_dead_reruns(info, only_dead_processes=True)
