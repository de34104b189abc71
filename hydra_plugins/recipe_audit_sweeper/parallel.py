"""Local parallel workers: ``hydra/launcher=local_parallel`` (``recipe_audit/app/hydra_conf/hydra/launcher/``, launchers/README.md).

Hydra's joblib launcher (same parameters: ``n_jobs``, ``backend``, ``prefer``, ...; same loky
worker processes), except that each worker composes one job per recipe and derives the other
seeds' configurations from it (:func:`recipe_audit.launcher.execute_job_in_worker`) instead of
composing every job from the config files again (``bench/bench_compose.py``). Hydra's launcher names
its job function inside ``launch``, so this submits the jobs the way it does, with that function.
"""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger("recipe_audit")

try:
    from hydra_plugins.hydra_joblib_launcher.joblib_launcher import JoblibLauncher
except ImportError:  # pip install 'recipe_audit[parallel]'
    JoblibLauncher = None


if JoblibLauncher is not None:

    class SeedJoblibLauncher(JoblibLauncher):
        """Hydra's joblib launcher; its workers derive each seed's job configuration."""

        def launch(self, job_overrides, initial_job_idx):
            """``hydra_joblib_launcher._core.launch`` (hydra-joblib-launcher 1.2), with
            :func:`recipe_audit.launcher.execute_job_in_worker` as the job function."""
            from hydra.core.singleton import Singleton
            from hydra.core.utils import configure_log, filter_overrides, setup_globals
            from hydra_plugins.hydra_joblib_launcher._core import process_joblib_cfg
            from joblib import Parallel, delayed

            from recipe_audit.launcher import execute_job_in_worker

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
            runs = Parallel(**joblib_cfg)(
                delayed(execute_job_in_worker)(initial_job_idx + idx, overrides, self.hydra_context, self.config,
                                               self.task_function, singleton_state)
                for idx, overrides in enumerate(job_overrides))
            return list(runs)
