"""The sweepers' shared part and the default sweeper of ``python -m recipe_audit -m``.

:class:`RecipeSweeperBase` makes the sweep's jobs as Hydra's basic sweeper does
(:func:`sweep_batches`: the cartesian product of the sweep overrides, in the same order and
batches) and, before each batch, composes one job per recipe (:func:`validate_recipes`): jobs
that differ only in ``seed`` are the reruns of one recipe, so a configuration error is found
before any rerun starts without composing every seed. :class:`SeedSweeperBase`
(``hydra/sweeper=seeds``) launches the batches as they are; the curtailing sweeper
(``hydra/sweeper=curtail``, :mod:`recipe_audit.app.curtailing`) stops a recipe once its verdict is
settled. The curtailing sweeper's options are checked here (:func:`check_sweeper_config`), where
the callback checks them when the multirun starts.

Hydra only instantiates sweepers from the ``hydra_plugins`` namespace; the plugin classes are in
``hydra_plugins.recipe_audit.plugins`` (thin subclasses of the classes here and in
:mod:`recipe_audit.app.curtailing`).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.core.utils import JobReturn
from hydra.errors import HydraException
from hydra.plugins.sweeper import Sweeper
from omegaconf import DictConfig, OmegaConf

from recipe_audit.app.launchers import SeedLauncherBase, plain_int_seed


def check_curtail_options(batch_size: Any, stop_on: Any, max_reruns: Any, n_seeds: int | None = None) -> None:
    """The curtailing sweeper's options, checked (one sentence, ``HydraException``); ``n_seeds``:
    the seeds the sweep names, checked against ``max_reruns`` when given."""
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise HydraException(f"hydra.sweeper.batch_size must be a positive integer, not {batch_size!r}.")
    if stop_on not in ("decision", "verdict", "anytime"):
        raise HydraException(f"hydra.sweeper.stop_on must be 'decision', 'verdict' or 'anytime', not {stop_on!r}.")
    if stop_on == "anytime" and max_reruns is None:
        raise HydraException("An open-ended sweep (hydra.sweeper.stop_on=anytime) needs a maximum: set "
                             "hydra.sweeper.max_reruns.")
    if max_reruns is not None and stop_on != "anytime":
        raise HydraException(f"hydra.sweeper.max_reruns belongs to an open-ended sweep (stop_on=anytime); with "
                             f"stop_on={stop_on} the seed sweep plans N, and a card cannot mix a planned N "
                             f"with an open-ended one.")
    if max_reruns is not None and (not isinstance(max_reruns, int) or isinstance(max_reruns, bool)
                                   or max_reruns < 1):
        raise HydraException(f"hydra.sweeper.max_reruns must be a positive integer, not {max_reruns!r}.")
    if max_reruns is not None and n_seeds is not None and n_seeds < max_reruns:
        raise HydraException(
            f"An open-ended sweep runs up to hydra.sweeper.max_reruns={max_reruns} seeds, but the seed "
            f"sweep names only {n_seeds}; sweep at least as many, e.g. 'seed=range({max_reruns})'.")


def check_sweeper_config(config: DictConfig, n_seeds: int | None = None) -> None:
    """The curtailing sweeper's options in a composed config (nothing for other sweepers), checked
    where the multirun starts: Hydra makes the sweeper only after the callbacks' multirun start,
    which records the sweep in the store, so an option error found by the sweeper itself left a
    FAILED sweep run behind."""
    sw = OmegaConf.select(config, "hydra.sweeper")
    if sw is None or not str(sw.get("_target_", "")).endswith(".CurtailingSweeper"):
        return
    check_curtail_options(sw.get("batch_size", 4), sw.get("stop_on", "decision"), sw.get("max_reruns"), n_seeds)


def seed_key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def validate_recipes(sweeper: Sweeper, batch: Sequence[Sequence[str]]) -> None:
    """``Sweeper.validate_batch_is_legal`` for seed sweeps: compose one job per recipe.

    Hydra's sweepers compose every job's configuration before launching the batch (to fail early:
    a launcher may compose on another host), and the launcher composes it again. Jobs that differ
    only in ``seed`` compose identically up to that integer, so composing the first of each
    recipe catches every composition error but a bad seed, which is checked here directly (a
    seed that is not an integer composes its job, so Hydra reports it as usual). Saves one of
    Hydra's two compositions of each job (a composition: ``bench/bench_compose.py``). With the
    seed launcher (:class:`recipe_audit.app.launchers.SeedLauncherBase`, in this process) the
    compositions are the launcher's own: it keeps each recipe's and derives every job from it,
    the recipe's first job included, so a recipe is composed once a sweep."""
    first: dict[tuple[str, ...], list[str]] = {}
    to_compose: list[list[str]] = []
    for job in batch:
        rest = tuple(o for o in job if seed_key(o) != "seed")
        seeds = [o for o in job if seed_key(o) == "seed"]
        if rest not in first:
            first[rest] = list(job)
            to_compose.append(list(job))
        elif len(seeds) != 1 or plain_int_seed(seeds[0]) is None:
            to_compose.append(list(job))
    launcher = getattr(sweeper, "launcher", None)
    if not isinstance(launcher, SeedLauncherBase):
        Sweeper.validate_batch_is_legal(sweeper, to_compose)
        return
    for job in to_compose:  # as Sweeper.validate_batch_is_legal: load_sweep_config of each job
        launcher.job_config(list(job))


class RecipeSweeperBase(Sweeper):
    """What recipe_audit's sweepers share: the sweep parameters (``params``, as Hydra's basic
    sweeper), the launcher, the job list, and composing one job per recipe up front."""

    def __init__(self, params: dict[str, str] | None = None):
        super().__init__()
        self.params = dict(params or {})
        self.hydra_context = None
        self.config: DictConfig | None = None
        self.launcher = None

    def setup(self, *, hydra_context, task_function, config: DictConfig) -> None:
        from hydra.core.plugins import Plugins

        self.hydra_context = hydra_context
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config)

    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        validate_recipes(self, batch)

    def _batches(self, arguments: list[str], max_batch_size: int | None) -> list[list[list[str]]]:
        """The cartesian product of ``params`` and the command line's sweep overrides, in
        Hydra's basic-sweeper order, split into batches of at most ``max_batch_size`` jobs."""
        params_conf = [f"{k}={v}" for k, v in self.params.items()]
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        return sweep_batches(parser.parse_overrides(params_conf + list(arguments)), max_batch_size)

    def _save_sweep_config(self) -> Path:
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        return sweep_dir


def sweep_batches(overrides: Sequence[Override], max_batch_size: int | None) -> list[list[list[str]]]:
    """The jobs of Hydra's basic sweeper (its ``split_arguments``, which lives in ``hydra._internal``),
    through the public ``Override`` API: each key's values (a plain override is one value; a later
    override of a key replaces the earlier one, keeping its place), their cartesian product in
    that order, in batches of at most ``max_batch_size`` jobs (None: one batch)."""
    choices: dict[str, list[str]] = {}
    for override in overrides:
        key = override.get_key_element()
        if not override.is_sweep_override():
            choices[key] = [f"{key}={override.get_value_element_as_str()}"]
        elif override.is_discrete_sweep():
            choices[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
        else:  # Hydra's own words
            raise HydraException(f"BasicSweeper does not support sweep type : {override.value_type.name}")
    jobs = [list(job) for job in itertools.product(*choices.values())]
    size = max_batch_size or len(jobs)
    return [jobs[i:i + size] for i in range(0, len(jobs), size)]


class SeedSweeperBase(RecipeSweeperBase):
    """Hydra's basic sweeper (same parameters: ``max_batch_size``, ``params``; same jobs, order and
    batches), except that before each batch it composes one job per recipe, not every job
    (:func:`validate_recipes`). The default sweeper of ``python -m recipe_audit -m``."""

    def __init__(self, max_batch_size: int | None = None, params: dict[str, str] | None = None):
        super().__init__(params)
        if max_batch_size is not None and (not isinstance(max_batch_size, int) or max_batch_size < 1):
            raise HydraException(f"hydra.sweeper.max_batch_size must be a positive integer or null, "
                                 f"not {max_batch_size!r}.")
        self.max_batch_size = max_batch_size

    def sweep(self, arguments: list[str]) -> Any:
        assert self.config is not None and self.launcher is not None and self.hydra_context is not None
        batches = self._batches(arguments, self.max_batch_size)
        self._save_sweep_config()
        returns: list[Sequence[JobReturn]] = []
        job_idx = 0
        for batch in batches:
            self.validate_batch_is_legal(batch)
            results = self.launcher.launch(batch, initial_job_idx=job_idx)
            for r in results:
                _ = r.return_value  # a job that raised stops the sweep, as with the basic sweeper
            job_idx += len(batch)
            returns.append(results)
        return returns
