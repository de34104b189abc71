"""The default launcher of ``python -m recipe_audit -m`` (``hydra/launcher=seeds``, set in
``conf/config.yaml``; ``hydra/launcher=basic`` gives Hydra's own).

Hydra's basic launcher runs the jobs one after another in this process and composes each job's
configuration from the config files again (defaults list, YAML, merges), which costs an order
of magnitude more than deriving it as below (``bench/bench_compose.py`` measures both; the docs'
benchmarks page has the numbers) and is a visible share of a short rerun. The jobs of a seed
sweep differ only in ``seed``, so this
launcher composes the first job of each recipe with Hydra and derives every other seed's
configuration from it, setting what ``load_sweep_config`` would have set differently: the
``seed`` value, the job's task overrides and ``hydra.job.override_dirname``. Everything else
(logging set-up, job numbering, output directories, ``run_job``, callbacks) is Hydra's, as in
``BasicLauncher``. A job whose overrides differ from a composed one in anything but a plain
integer ``seed=N`` is composed by Hydra. ``tests/test_seed_launcher.py`` checks derived
configurations equal Hydra's composition.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from functools import cache
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.core.utils import JobReturn, configure_log, filter_overrides, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from omegaconf import DictConfig, open_dict

log = logging.getLogger(__name__)

SEED = "seed"


@cache
def _parser() -> OverridesParser:
    return OverridesParser.create()


def plain_int_seed(line: str) -> int | None:
    """The integer of a plain ``seed=N`` override; None for anything else (``+seed=``, a sweep, a
    value that is not an integer, a line Hydra cannot parse: Hydra reports it when it composes)."""
    if line.split("=", 1)[0] != SEED:
        return None
    try:
        parsed = _parser().parse_override(line)
    except Exception:
        return None
    value = None if parsed.is_sweep_override() else parsed.value()
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class SeedLauncherBase(Launcher):
    """Hydra's basic launcher; one composition per recipe, the other seeds derived from it."""

    def __init__(self) -> None:
        super().__init__()
        self.config: DictConfig | None = None
        self.task_function = None
        self.hydra_context = None
        self._composed: dict[tuple[str, ...], tuple[DictConfig, list[str]]] = {}

    def setup(self, *, hydra_context, task_function, config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        setup_globals()
        assert self.hydra_context is not None and self.config is not None and self.task_function is not None
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        log.info(f"Launching {len(job_overrides)} jobs locally")
        runs: list[JobReturn] = []
        for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
            log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
            runs.append(self.run(idx, overrides, job_id=idx))
            configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        return runs

    def run(self, idx: int, overrides: Sequence[str], job_id) -> JobReturn:
        """Run job ``idx`` with Hydra's ``run_job`` (which also sets ``HydraConfig``)."""
        sweep_config = self.job_config(list(overrides))
        with open_dict(sweep_config):
            sweep_config.hydra.job.id = job_id
            sweep_config.hydra.job.num = idx
        return run_job(hydra_context=self.hydra_context, task_function=self.task_function, config=sweep_config,
                       job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")

    def job_config(self, overrides: list[str]) -> DictConfig:
        """The job's composed configuration, as ``config_loader.load_sweep_config`` returns it."""
        at = self._seed_position(overrides)
        key = None if at is None else tuple(overrides[:at] + overrides[at + 1:]) + (f"@{at}",)
        if key is not None and key in self._composed:
            return self._derive(*self._composed[key], overrides, at)
        cfg = self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
        if key is not None:  # kept untouched: run_job writes into the config it is given
            self._composed[key] = (copy.deepcopy(cfg), overrides)
        return cfg

    @staticmethod
    def _seed_position(overrides: list[str]) -> int | None:
        """Where the job's one plain ``seed=<integer>`` override is (None: not such a job)."""
        at = [i for i, o in enumerate(overrides) if o.split("=", 1)[0] == SEED]
        return at[0] if len(at) == 1 and plain_int_seed(overrides[at[0]]) is not None else None

    def _derive(self, template: DictConfig, template_overrides: list[str], overrides: list[str],
                at: int) -> DictConfig:
        """``template`` (the composed job ``template_overrides``) with this job's seed: the seed
        value, the task overrides and ``hydra.job.override_dirname``, as Hydra composes them."""
        cfg = copy.deepcopy(template)
        old, new = template_overrides[at], overrides[at]
        task = list(cfg.hydra.overrides.task)
        task[task.index(old)] = new
        cfg[SEED] = plain_int_seed(new)
        cfg.hydra.overrides.task = task
        dirname = cfg.hydra.job.config.override_dirname
        cfg.hydra.job.override_dirname = override_dirname(
            _parser().parse_overrides(task), kv_sep=dirname.kv_sep, item_sep=dirname.item_sep,
            exclude_keys=dirname.exclude_keys)
        return cfg


def override_dirname(overrides: Sequence[Override], *, kv_sep: str, item_sep: str,
                     exclude_keys: Sequence[str]) -> str:
    """``hydra.job.override_dirname`` as Hydra's config loader writes it (its own function is in
    ``hydra._internal``): the overrides whose key is not excluded, as typed, sorted, joined by
    ``item_sep``, each ``=`` written as ``kv_sep``."""
    lines = sorted(o.input_line for o in overrides if o.key_or_group not in exclude_keys)
    return item_sep.join(lines).replace("=", kv_sep)


# ----------------------------------------------------------------------------------------------
# Parallel workers (hydra/launcher=local_parallel: Hydra's joblib launcher)
# ----------------------------------------------------------------------------------------------

_WORKER: tuple[str, SeedLauncherBase] | None = None  # per worker process: (sweep dir, its launcher)


def execute_job_in_worker(idx: int, overrides: Sequence[str], hydra_context, config: DictConfig, task_function,
                          singleton_state) -> JobReturn:
    """One job in a joblib worker process: ``hydra_joblib_launcher._core.execute_job``, except that the
    job's configuration comes from a :class:`SeedLauncherBase` the worker keeps for the sweep, so each
    worker composes one job per recipe and derives the other seeds'."""
    from hydra.core.singleton import Singleton

    global _WORKER
    setup_globals()
    Singleton.set_state(singleton_state)
    sweep_dir = str(config.hydra.sweep.dir)
    if _WORKER is None or _WORKER[0] != sweep_dir:
        launcher = SeedLauncherBase()
        launcher.setup(hydra_context=hydra_context, task_function=task_function, config=config)
        _WORKER = (sweep_dir, launcher)
    return _WORKER[1].run(idx, overrides, job_id=f"{config.hydra.job.name}_{idx}")  # Hydra's joblib job id
