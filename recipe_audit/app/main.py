"""The Hydra app behind ``python -m recipe_audit``. One job = one rerun (one seed of one recipe).

    python -m recipe_audit                      # one rerun, seed 0
    python -m recipe_audit -m                   # the default sweep: 59 seeds
    python -m recipe_audit -m 'seed=range(10)' recipe=default,stable

The ``DictConfig`` stops here: it becomes the typed dataclasses of :mod:`recipe_audit.config`.
"""

from __future__ import annotations

import gc
import logging
import sys
from dataclasses import dataclass
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from recipe_audit.app import config_dir, threads
from recipe_audit.app.schema import register_configs
from recipe_audit.config import unknown_keys

log = logging.getLogger("recipe_audit")

register_configs()

_FREEZES_LEFT = 4


def _freeze_setup() -> None:
    """Exempt what the sweep has set up so far from garbage collection (``gc.freeze``).

    Hydra, OmegaConf, MLflow, SQLAlchemy, torch and transformers leave about 700,000 long-lived
    objects in the process; every full collection walks all of them again, and imports and the
    training loop's allocations trigger such collections often (each one slower as the process
    grows). The set-up is paid once per sweep, so it is frozen once, in four
    steps: at start-up (Hydra), when the first job starts (MLflow, the store, the composed job
    configs), before it trains (torch, transformers, the tokenised task: built with the collector
    paused, :func:`_set_up`) and before the second job trains (what the first rerun imported
    lazily). Objects alive then that later become garbage are never reclaimed: a job config and
    a few thousand objects, once per process."""
    global _FREEZES_LEFT
    if _FREEZES_LEFT:
        gc.freeze()
        _FREEZES_LEFT -= 1


class ConfigurationError(ValueError):
    """The composed configuration cannot be run (one sentence)."""


def run_rerun(cfg: DictConfig) -> dict[str, float] | None:
    """Train and log one rerun. Returns the audit accuracies (None when the rerun failed)."""
    from recipe_audit.app.distributed import DistributedError

    try:
        return _run_rerun(cfg)
    except DistributedError as exc:
        _fail(str(exc), exc)


def _run_rerun(cfg: DictConfig) -> dict[str, float] | None:
    from recipe_audit.app import distributed

    if OmegaConf.select(cfg, "experiment.kind", default=None) == "acceptance":  # experiment=acceptance
        if distributed.world_size() > 1:
            _fail("experiment=acceptance trains in one process; run it with python -m recipe_audit, "
                  "not under a multi-process accelerate launch.")
        return _run_acceptance_cell(cfg)
    from recipe_audit.app.process import collector_paused

    if _FREEZES_LEFT > 2:  # the first job: its set-up (torch, transformers, the task) is frozen before it trains
        _freeze_setup()
        run_cfg, known, logger, multirun = collector_paused(_set_up)(cfg)
    else:
        run_cfg, known, logger, multirun = _set_up(cfg)
    from recipe_audit.train.loop import RecipeError, train_rerun
    from recipe_audit.train.models import ModelError

    prepared, audit_sets, extra_audits = known.prepared, list(known.audit_sets), known.extra_audits
    try:
        result = train_rerun(
            run_cfg.seed, run_cfg.model, run_cfg.recipe, prepared, audit_sets,
            eval_batch_size=run_cfg.audit.eval_batch_size, progress=run_cfg.progress,
            keep_model=run_cfg.tracking.log_model and logger is not None,
            on_step=logger.log_step if logger is not None else None, extra_audits=extra_audits,
        )
        if logger is not None:
            logger.log_result(result)
            if run_cfg.tracking.log_model:
                logger.log_model(result.model, result.tokenizer, labels=prepared.task.labels)
    except (ModelError, RecipeError) as exc:  # the same for every seed: stop the sweep
        _fail(str(exc), exc)
    except Exception as exc:  # a crashing rerun is data: the callback records it FAILED, the sweep goes on
        if logger is not None:
            _stop_if_store_gone(logger.store.uri, run_cfg.seed)
            try:
                logger.flush()
            except Exception:  # noqa: BLE001 - the error that matters is the rerun's
                pass
        if not multirun:
            _fail(f"seed {run_cfg.seed} FAILED ({type(exc).__name__}: {exc})", exc)
        raise
    if logger is not None:
        try:
            logger.flush()
        except Exception:
            _stop_if_store_gone(logger.store.uri, run_cfg.seed)
            raise
    return {name: s.accuracy for name, s in result.audits.items()}


def _set_up(cfg: DictConfig):
    """A rerun's job up to its training: its config checked (once per configuration in this
    process) and typed, its threads set, its task prepared (:func:`_prepare`), its run's writer
    attached, and what the process has set up so far frozen (:func:`_freeze_setup`). Returns
    ``(run_cfg, recipe, logger, multirun)``. The first job of a process runs it with the garbage
    collector paused (:func:`recipe_audit.app.process.collector_paused`): what it builds (torch's
    and transformers' modules, the tokenised task) lives as long as the process; the cyclic
    garbage among it (a few thousand objects) is frozen with it, rather than walked by the
    collections it would trigger."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from recipe_audit.app import distributed
    from recipe_audit.config import RunConfig

    run_cfg: RunConfig = OmegaConf.to_object(cfg)
    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    recipe = _recipe_key(cfg)
    known = _RECIPES.get(recipe)

    # Configuration problems are the same for every seed: stop before logging anything (and the
    # options' own checks before importing torch: a mistyped option is answered seconds sooner).
    # A configuration this process has run already (every value but the seed the same) passed
    # them: only its seed is checked.
    try:
        if known is None:
            try:
                threads.parse(run_cfg.threads)  # applied below, after the checks
            except threads.ThreadsError as exc:
                raise ConfigurationError(str(exc)) from None
            stray = unknown_keys(run_cfg)
            if stray:
                raise ConfigurationError(f"{', '.join(stray)}: no such option (a misspelt key added with '+'?); "
                                         "see python -m recipe_audit --cfg job for the options that exist.")
        if not 0 <= run_cfg.seed < 2**32:
            raise ConfigurationError(f"seed must be a whole number from 0 to 2**32 - 1, not {run_cfg.seed}.")
        if known is None:
            _check_audit(run_cfg.audit)
    except ConfigurationError as exc:
        _fail(str(exc), exc)

    threads.apply(run_cfg.threads)  # auto: the sweep's decision (recipe_audit/app/threads.py)
    if known is None:
        known = _RECIPES[recipe] = _prepare(run_cfg, cfg)
    # The rerun's MLflow run was opened by the recipe_audit callback (recipe_audit.app.callback),
    # on the main process only under a multi-process accelerate launch; every process trains.
    distributed.world_size()  # refuses processes accelerate launched but did not connect
    logger = _attach_rerun([*known.audit_sets, *(x.name for x in known.extra_audits)], cfg,
                           known.config_yaml(run_cfg.seed))
    # frozen here, before the collector is back: what the first job built while it was paused is
    # not walked by the collection its first allocations would trigger
    _freeze_setup()
    return run_cfg, known, logger, multirun


@dataclass(frozen=True)
class _Recipe:
    """What the jobs of one configuration share in this process, found by its first job: the
    prepared task (:func:`recipe_audit.train.loop.prepare_task`), the audit sets scored, the
    other tasks' audit sets, and the config artifact's text around its seed line (None when
    there is no one such line: each job then writes its own)."""

    prepared: Any
    audit_sets: tuple[str, ...]
    extra_audits: tuple
    yaml_around_seed: tuple[str, str] | None

    def config_yaml(self, seed: int) -> str | None:
        """The ``config.yaml`` of the job with ``seed``: ``OmegaConf.to_yaml(cfg, resolve=True)``,
        whose only line that differs between the seeds of one configuration is ``seed: <seed>``."""
        if self.yaml_around_seed is None:
            return None
        before, after = self.yaml_around_seed
        return f"{before}seed: {seed}\n{after}"


#: The configurations this process has run, by :func:`_recipe_key`: the jobs of one recipe
#: (a seed sweep runs many in one process) check it and prepare its task once.
_RECIPES: dict[str, _Recipe] = {}


def _recipe_key(cfg: DictConfig) -> str:
    """The job's configuration without its seed, every value resolved (``repr`` of the plain
    containers: ``1`` and ``'1'``, 0.1 and 0.1000001 differ). Two jobs with the same key differ
    in their seed only, so what the checks and the task preparation found for one holds for the
    other; a value that differs in any way (a ``+key`` added, an option changed, an interpolation
    of the seed) gives another key."""
    plain = OmegaConf.to_container(cfg, resolve=True)
    plain["seed"] = ...  # in its place: the other keys' order is part of the key
    return repr(plain)


def _prepare(run_cfg, cfg: DictConfig) -> _Recipe:
    """The first job of a configuration in this process: its task prepared, its audit sets
    chosen and checked (one sentence and exit 2 when they cannot be), its config artifact's text
    split at its seed line. The jobs with the same :func:`_recipe_key` have the same values in
    the same order but the seed, so ``OmegaConf.to_yaml`` writes the same lines for them but
    that one."""
    from recipe_audit.app.task_configs import extra_task_configs
    from recipe_audit.train.loop import RecipeError, prepare_task, select_audits
    from recipe_audit.train.models import ModelError
    from recipe_audit.train.shift import prepare_extra_audits
    from recipe_audit.train.tasks import TaskError

    try:
        prepared = prepare_task(run_cfg.task, run_cfg.model)
        audit_sets = select_audits(prepared.task, run_cfg.audit)
        extra_audits = prepare_extra_audits(
            extra_task_configs(run_cfg.audit.extra_tasks, run_cfg.audit.extra_task_options),
            prepared, run_cfg.model)  # task shift (docs/guide/shift.md)
        scored = [*audit_sets, *(x.name for x in extra_audits)]
        if run_cfg.audit.primary not in scored:
            raise ConfigurationError(f"audit.primary '{run_cfg.audit.primary}' is not an audit set this sweep "
                                     f"scores (it scores {scored}).")
    except (ConfigurationError, TaskError, ModelError, RecipeError) as exc:
        _fail(str(exc), exc)
    lines = OmegaConf.to_yaml(cfg, resolve=True).splitlines(keepends=True)
    at = [i for i, line in enumerate(lines) if line == f"seed: {run_cfg.seed}\n"]  # top level: not indented
    around = ("".join(lines[:at[0]]), "".join(lines[at[0] + 1:])) if len(at) == 1 else None
    return _Recipe(prepared, tuple(audit_sets), extra_audits, around)


def _check_audit(audit) -> None:
    """The audit options through the one validator every door uses (recipe_audit.stats.options):
    the same requirement in the same words as the command line, the Python API and the callback."""
    from recipe_audit import keys
    from recipe_audit.stats.errors import StatsInputError
    from recipe_audit.stats.options import audit_options, option_fields

    try:
        audit_options(**{f.name: getattr(audit, f.name) for f in option_fields()},
                      metrics=[keys.accuracy_key(audit.primary)], name=lambda option: f"audit.{option}")
    except StatsInputError as exc:
        raise ConfigurationError(str(exc)) from None


def _run_acceptance_cell(cfg: DictConfig) -> dict[str, float]:
    """One cell x seed of experiment=acceptance, written into the run the callback opened for the
    job. A base model that cannot be trained stops the sweep (every cell starts from it); another
    failure is the cell's (recorded FAILED by the callback, the sweep goes on)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from recipe_audit.acceptance.experiment import cell_name, run_cell_job
    from recipe_audit.app.schema import typed
    from recipe_audit.config import DefenseConfig, ExperimentConfig
    from recipe_audit.train.acceptance import kernels
    from recipe_audit.train.acceptance.base import BaseModelError

    exp: ExperimentConfig = typed(cfg.experiment, ExperimentConfig)
    defense: DefenseConfig = typed(cfg.defense, DefenseConfig)
    try:
        # the kernels first: they must precede torch's first operation in this process
        said = kernels.use(exp.kernels, threads.for_job(cfg.threads))
        if said:
            log.info("experiment=acceptance computes with %s", said)
        threads.apply(cfg.threads)
    except (threads.ThreadsError, kernels.KernelsError) as exc:
        _fail(str(exc), exc)
    logger = _attach_rerun((), cfg)
    try:
        return run_cell_job(exp, defense, int(cfg.seed), logger, progress=bool(cfg.progress))
    except BaseModelError as exc:
        _fail(str(exc).rstrip(".") + "; every cell starts from it, so the sweep stops here.", exc)
    except kernels.KernelsError as exc:
        _fail(str(exc), exc)
    except Exception as exc:
        if logger is not None:
            _stop_if_store_gone(logger.store.uri, int(cfg.seed))
        if HydraConfig.get().mode != RunMode.MULTIRUN:
            _fail(f"cell {cell_name(str(defense.name), int(cfg.seed))} FAILED ({type(exc).__name__}: {exc})", exc)
        raise


def _attach_rerun(audit_names, cfg, config_yaml: str | None = None):
    """A writer for the rerun's run the callback opened for this job (None on other processes).
    ``config_yaml``: the job's config as ``OmegaConf.to_yaml(cfg, resolve=True)`` writes it,
    when the caller has it (else written here)."""
    from recipe_audit import keys
    from recipe_audit.app.seams import current_rerun
    from recipe_audit.store import rerun_log, tracking

    rerun = current_rerun()
    if rerun is None:
        return None
    try:
        store = tracking.open_store(rerun.tracking_uri, rerun.experiment_name)
        logger = rerun_log.RerunLogger.attach(store, rerun.run_id, rerun.artifact_uri)
        if audit_names:
            rerun.tags[keys.TAG_AUDIT_SETS] = ",".join(audit_names)  # written when the callback closes the run
        rerun.tags[keys.TAG_THREADS] = str(threads.in_use())  # threads=auto: the sweep's decision
        if config_yaml is None:
            config_yaml = OmegaConf.to_yaml(cfg, resolve=True)
        logger.log_text(config_yaml, "config.yaml")
    except tracking.TrackingError as exc:
        _fail(str(exc), exc)
    except Exception:  # noqa: BLE001 - a server that went away since the callback opened the run
        _stop_if_store_gone(rerun.tracking_uri, rerun.seed)
        raise
    return logger


def _stop_if_store_gone(uri: str, seed: int) -> None:
    """A tracking server that went away mid-sweep stops the sweep with one sentence (rather than
    recording reruns nowhere): every rerun that finished before is in the store, and relaunching
    with ``tracking.resume=true`` trains only the others."""
    from recipe_audit.app.jobs import stop_if_store_gone

    stop_if_store_gone(uri, seed)


def _fail(message: str, exc: BaseException | None = None, record: bool = True) -> None:
    """One sentence and exit 2. The rerun's run (if the callback opened one) is closed FAILED
    first: exiting skips the callback's end of the job."""
    from recipe_audit.app.seams import current_rerun

    rerun = current_rerun()
    if record and rerun is not None:
        from recipe_audit.store import rerun_runs, sweeps, tracking

        try:
            store = tracking.open_store(rerun.tracking_uri, rerun.experiment_name)
            rerun_runs.close_rerun(store, rerun.run_id, error=exc or ConfigurationError(message))
            # the sweep stops here: its parent run says so rather than staying RUNNING
            sweep = sweeps.current_sweep(None)
            if sweep is not None and sweep.sweep_id == rerun.sweep_id:
                sweeps.end_sweep(sweep, "FAILED", error=message)
        except Exception:  # noqa: BLE001 - the sentence below is what the user needs
            pass
    from recipe_audit.app.process import stop

    stop(message)


@hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="config")
def main(cfg: DictConfig) -> dict[str, float] | None:
    return run_rerun(cfg)


def _refuse_unconnected_processes() -> None:
    """Processes a launcher started together (WORLD_SIZE > 1) that accelerate does not connect
    would each log every rerun on its own: refused with one sentence before Hydra starts, so
    nothing reaches the store (the callback opens the sweep when the multirun starts)."""
    import os

    if int(os.environ.get("WORLD_SIZE", "1") or 1) > 1:
        from recipe_audit.app.distributed import DistributedError, world_size

        try:
            world_size()
        except DistributedError as exc:
            print(f"recipe_audit: error: {exc}", file=sys.stderr)
            sys.exit(2)


def run() -> None:
    """The Hydra app as ``python -m recipe_audit`` starts it (:mod:`recipe_audit.__main__` sends a
    recipe-audit command word to the command line instead, without loading Hydra)."""
    _refuse_unconnected_processes()
    _freeze_setup()
    main()
