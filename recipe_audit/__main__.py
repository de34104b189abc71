"""``python -m recipe_audit``: the Hydra app. One job = one rerun (one seed of one recipe).

    python -m recipe_audit                      # one rerun, seed 0
    python -m recipe_audit -m                   # the default sweep: 59 seeds
    python -m recipe_audit -m 'seed=range(10)' recipe=default,stable

The ``DictConfig`` stops here: it becomes the typed dataclasses of ``config.py``.
"""

from __future__ import annotations

import logging
import sys

import hydra
from omegaconf import DictConfig, OmegaConf

from .config import register_configs

log = logging.getLogger("recipe_audit")

register_configs()


class ConfigurationError(ValueError):
    """The composed configuration cannot be run (one sentence)."""


def run_job(cfg: DictConfig) -> dict[str, float] | None:
    """Train and log one rerun. Returns the audit accuracies (None when the rerun failed)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from . import tracking
    from .config import RunConfig
    from .train.loop import RecipeError, prepare_task, select_audits, train_rerun
    from .train.models import ModelError
    from .train.tasks import TaskError

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
        store = tracking.open_store(run_cfg.tracking.uri, run_cfg.tracking.experiment_name)
    except (ConfigurationError, TaskError, ModelError, RecipeError, tracking.TrackingError) as exc:
        _fail(str(exc))

    import mlflow

    mlflow.set_tracking_uri(store.uri)
    sweep = tracking.current_sweep(_sweep_dir(hc)) if multirun else None
    recipe_id = tracking.recipe_identity(config_dict)
    logger = tracking.RerunLogger(store, config_dict, run_cfg.seed, recipe_id=recipe_id, sweep=sweep,
                                  audit_sets=audit_sets)
    logger.log_text(OmegaConf.to_yaml(cfg, resolve=True), "config.yaml")
    try:
        result = train_rerun(
            run_cfg.seed, run_cfg.model, run_cfg.recipe, prepared, audit_sets,
            eval_batch_size=run_cfg.audit.eval_batch_size, progress=run_cfg.progress,
            keep_model=run_cfg.tracking.log_model, on_step=logger.log_step,
        )
        logger.log_result(result)
        if run_cfg.tracking.log_model:
            logger.log_model(result.model, result.tokenizer)
    except (ModelError, RecipeError) as exc:
        logger.fail(exc)
        _fail(str(exc))
    except Exception as exc:  # a crashing rerun is data (SPEC 1.2): record it, go on
        logger.fail(exc)
        msg = f"seed {run_cfg.seed} FAILED ({type(exc).__name__}: {exc}); recorded in run {logger.run_id}"
        if not multirun:
            _fail(msg)
        log.error(msg)
        return None
    logger.finish()
    accs = {name: s.accuracy for name, s in result.audits.items()}
    primary = run_cfg.audit.primary
    shown = f"{primary}={accs[primary]:.3f}" if primary in accs else ""
    log.info("seed %d %s recipe=%s %s (%.1fs) run %s", run_cfg.seed, run_cfg.model.name,
             run_cfg.recipe.name, shown, result.train_seconds, logger.run_id)
    return accs


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
    main()
