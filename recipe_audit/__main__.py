"""``python -m recipe_audit``: the Hydra app. One job = one rerun (one seed of one recipe).

    python -m recipe_audit                      # one rerun, seed 0
    python -m recipe_audit -m                   # the default sweep: 59 seeds
    python -m recipe_audit -m 'seed=range(10)' recipe=default,stable

The ``DictConfig`` stops here: it becomes the typed dataclasses of ``config.py``.
"""

from __future__ import annotations

import gc
import logging
import sys

import hydra
from omegaconf import DictConfig, OmegaConf

from .config import register_configs

log = logging.getLogger("recipe_audit")

register_configs()

_FREEZES_LEFT = 4


def _freeze_setup() -> None:
    """Exempt what the sweep has set up so far from garbage collection (``gc.freeze``).

    Hydra, OmegaConf, MLflow, SQLAlchemy, torch and transformers leave about 700,000 long-lived
    objects in the process; every full collection walks all of them again, and imports and the
    training loop's allocations trigger such collections every second or so (0.1-0.2 s each
    once the process is big). The set-up is paid once per sweep, so it is frozen once, in four
    steps: at start-up (Hydra), when the first job starts (MLflow, the store, the composed job
    configs), before it trains (torch, transformers, the tokenised task) and before the second
    job trains (what the first rerun imported lazily). Objects alive then that later become
    garbage are never reclaimed: a job config and a few thousand objects, once per process."""
    global _FREEZES_LEFT
    if _FREEZES_LEFT:
        gc.freeze()
        _FREEZES_LEFT -= 1


class ConfigurationError(ValueError):
    """The composed configuration cannot be run (one sentence)."""


def run_job(cfg: DictConfig) -> dict[str, float] | None:
    """Train and log one rerun. Returns the audit accuracies (None when the rerun failed)."""
    from .distributed import DistributedError

    try:
        return _run_job(cfg)
    except (_Stop, DistributedError) as exc:
        _fail(str(exc))


def _run_job(cfg: DictConfig) -> dict[str, float] | None:
    from . import distributed

    if OmegaConf.select(cfg, "experiment.kind", default=None) == "acceptance":  # experiment=acceptance
        from .acceptance.experiment import run_cell_job

        if distributed.world_size() > 1:
            raise _Stop("experiment=acceptance trains in one process; run it with python -m recipe_audit, "
                        "not under a multi-process accelerate launch.")
        return run_cell_job(cfg)
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from .config import RunConfig
    from .train.loop import RecipeError, prepare_task, select_audits, train_rerun
    from .train.models import ModelError
    from .train.shift import prepare_extra_audits
    from .train.tasks import TaskError

    if _FREEZES_LEFT > 2:  # the first job
        _freeze_setup()
    run_cfg: RunConfig = OmegaConf.to_object(cfg)
    config_dict = OmegaConf.to_container(cfg, resolve=True)
    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN

    if run_cfg.threads:
        import torch

        torch.set_num_threads(run_cfg.threads)

    # Configuration problems are the same for every seed: stop before logging anything.
    try:
        if run_cfg.audit.unfinished not in ("fail", "refuse"):
            raise ConfigurationError("audit.unfinished must be 'fail' or 'refuse'.")
        for name, value in (("audit.eps", run_cfg.audit.eps), ("audit.delta", run_cfg.audit.delta)):
            if not 0 < value < 1:
                raise ConfigurationError(f"{name} must lie strictly between 0 and 1, not {value}.")
        prepared = prepare_task(run_cfg.task, run_cfg.model)
        audit_sets = select_audits(prepared.task, run_cfg.audit)
        extra_audits = prepare_extra_audits(run_cfg.audit.extra_tasks, run_cfg.audit.extra_task_options,
                                            prepared, run_cfg.model)  # task shift (SPEC 1.7)
    except (ConfigurationError, TaskError, ModelError, RecipeError) as exc:
        _fail(str(exc))

    # Only the main process touches the store (accelerate launch --num_processes N: every
    # process trains this rerun, data-parallel); what it decides, every process does.
    logger = None
    if distributed.is_main_process():
        try:
            outcome, logger = _open_rerun(run_cfg, cfg, config_dict, hc, multirun,
                                          [*audit_sets, *(x.name for x in extra_audits)])
        except _Stop as exc:
            outcome = ("stop", str(exc))
    else:
        outcome = None
    kind, payload = distributed.broadcast_from_main(outcome)
    if kind == "stop":
        _fail(payload)
    if kind == "skip":
        return payload
    _freeze_setup()
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
    except (ModelError, RecipeError) as exc:
        if logger is not None:
            logger.fail(exc)
        _fail(str(exc))
    except Exception as exc:  # a crashing rerun is data (SPEC 1.2): record it, go on
        msg = f"seed {run_cfg.seed} FAILED ({type(exc).__name__}: {exc})"
        if logger is not None:
            _stop_if_store_gone(logger.store, run_cfg.seed)
            logger.fail(exc)
            msg += f"; recorded in run {logger.run_id}"
        if not multirun:
            _fail(msg)
        log.error(msg)
        return None
    accs = {name: s.accuracy for name, s in result.audits.items()}
    if logger is None:
        return accs
    try:
        logger.finish()
    except Exception:
        _stop_if_store_gone(logger.store, run_cfg.seed)
        raise
    primary = run_cfg.audit.primary
    shown = f"{primary}={accs[primary]:.3f}" if primary in accs else ""
    log.info("seed %d %s recipe=%s %s (%.1fs) run %s", run_cfg.seed, run_cfg.model.name,
             run_cfg.recipe.name, shown, result.train_seconds, logger.run_id)
    return accs


class _Stop(Exception):
    """The job cannot go on (one sentence); raised on the main process, broadcast, then every
    process exits with it."""


def _open_rerun(run_cfg, cfg, config_dict, hc, multirun, audit_names):
    """On the main process: open the store, take the resume decision, open the rerun's run.
    Returns (("train", None), logger) or (("skip", metrics), None)."""
    import mlflow

    from . import keys, tracking

    try:
        store = tracking.open_store(run_cfg.tracking.uri, run_cfg.tracking.experiment_name)
    except tracking.TrackingError as exc:
        raise _Stop(str(exc)) from None
    mlflow.set_tracking_uri(store.uri)
    sweep = tracking.current_sweep(_sweep_dir(hc)) if multirun else None
    recipe_id = tracking.recipe_identity(config_dict)
    if run_cfg.tracking.resume:  # a seed already finished is not trained (nor counted) twice
        try:
            done = tracking.finished_rerun(store, recipe_id, run_cfg.seed,
                                           keys.accuracy_key(run_cfg.audit.primary), sweep)
        except Exception:
            _stop_if_store_gone(store, run_cfg.seed)
            raise
        if done is not None:
            log.info("seed %d recipe=%s: finished rerun %s exists, skipped (resume)", run_cfg.seed,
                     run_cfg.recipe.name, done.info.run_id)
            return ("skip", {k.split("/", 1)[1]: v for k, v in done.data.metrics.items()
                             if k.startswith("accuracy/")}), None
    try:
        logger = tracking.RerunLogger(store, config_dict, run_cfg.seed, recipe_id=recipe_id, sweep=sweep,
                                      audit_sets=audit_names)
        logger.log_text(OmegaConf.to_yaml(cfg, resolve=True), "config.yaml")
    except Exception:
        _stop_if_store_gone(store, run_cfg.seed)
        raise
    return ("train", None), logger


def _stop_if_store_gone(store, seed: int) -> None:
    """A tracking server that went away mid-sweep stops the sweep with one sentence (rather than
    recording reruns nowhere): every rerun that finished before is in the store, and relaunching
    with ``tracking.resume=true`` trains only the others."""
    from . import tracking

    try:
        tracking.check_reachable(store.uri)
    except tracking.TrackingError as exc:
        raise _Stop(f"{exc} Seed {seed} was not recorded and the sweep stops here; the reruns that "
                    "finished are in the store: relaunch the same command with tracking.resume=true "
                    "once it is back.") from None


def _sweep_dir(hc):
    from pathlib import Path

    try:
        return Path(hc.sweep.dir)
    except Exception:
        return None


def _fail(message: str) -> None:
    print(f"recipe_audit: error: {message}", file=sys.stderr)
    sys.exit(2)


@hydra.main(version_base="1.3", config_path="pkg://recipe_audit.conf", config_name="config")
def main(cfg: DictConfig) -> dict[str, float] | None:
    return run_job(cfg)


if __name__ == "__main__":
    _freeze_setup()
    main()
