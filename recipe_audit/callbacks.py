"""Hydra callback: opens the sweep's parent run when a multirun starts; closes it and computes
the recipe cards from the tracking store when the multirun ends. Thin: the work is in
``tracking`` and ``cards``. Under a multi-process ``accelerate launch`` only the main process
does either (``recipe_audit.distributed``)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

log = logging.getLogger("recipe_audit")


def planned_seeds(config: DictConfig) -> list[int]:
    """The seeds the multirun will launch: the command-line ``seed=`` override if any, else
    ``hydra.sweeper.params.seed``, else the single configured seed."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    spec = None
    params = OmegaConf.select(config, "hydra.sweeper.params") or {}
    if "seed" in params:
        spec = f"seed={params['seed']}"
    for ov in OmegaConf.select(config, "hydra.overrides.task") or []:
        if ov.split("=", 1)[0].lstrip("+~") == "seed":
            spec = ov.lstrip("+")
    if spec is None:
        return [int(config.seed)]
    override = OverridesParser.create().parse_overrides([spec])[0]
    values = list(override.sweep_iterator()) if override.is_sweep_override() else [override.value()]
    try:
        return [int(v) for v in values]
    except (TypeError, ValueError):
        print(f"recipe_audit: error: seeds must be integers, not {spec.split('=', 1)[1]}.", file=sys.stderr)
        sys.exit(2)


class RecipeCardCallback(Callback):
    def __init__(self) -> None:
        self.sweep = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from . import distributed, tracking

        seeds = planned_seeds(config)
        try:
            if not distributed.is_main_process():  # accelerate launch: the main process writes
                return
        except distributed.DistributedError as exc:
            print(f"recipe_audit: error: {exc}", file=sys.stderr)
            sys.exit(2)
        try:
            store = tracking.open_store(OmegaConf.select(config, "tracking.uri"),
                                        OmegaConf.select(config, "tracking.experiment_name"))
        except tracking.TrackingError as exc:
            print(f"recipe_audit: error: {exc}", file=sys.stderr)
            sys.exit(2)
        sweep_dir = Path(str(config.hydra.sweep.dir))
        overrides = list(config.hydra.overrides.task)
        if OmegaConf.select(config, "tracking.resume", default=False):
            self.sweep = tracking.reopen_sweep(store, seeds, sweep_dir, overrides)
            if self.sweep is not None:
                log.info("resuming sweep %s", self.sweep.sweep_id)
        if self.sweep is None:
            self.sweep = tracking.start_sweep(store, seeds, sweep_dir, overrides)
        log.info("sweep %s: %d planned seeds, parent run %s in %s", self.sweep.sweep_id, len(seeds),
                 self.sweep.parent_run_id, store.uri)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from . import tracking

        if self.sweep is None:
            return
        for run_id in tracking.close_dead_reruns(self.sweep):  # every job has returned
            log.warning("rerun %s never finished (its process died): recorded as KILLED", run_id)
        tracking.end_sweep(self.sweep)
        if (OmegaConf.select(config, "tracking.card_on_multirun_end", default=True)
                and OmegaConf.select(config, "experiment.kind", default=None) == "acceptance"):
            from .acceptance.experiment import card_for_sweep

            card_for_sweep(self.sweep, config, Path(str(config.hydra.sweep.dir)))
        elif OmegaConf.select(config, "tracking.card_on_multirun_end", default=True):
            from .cards.sweep import cards_for_sweep

            cards_for_sweep(self.sweep, OmegaConf.to_container(config.audit, resolve=True),
                            Path(str(config.hydra.sweep.dir)))
        self.sweep = None
