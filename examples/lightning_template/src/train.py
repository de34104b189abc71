"""A replica of lightning-hydra-template's ``src/train.py`` (ashleve/lightning-hydra-template,
MIT), laid out as the template is: ``configs/`` groups, ``logger/mlflow.yaml`` with its file
store, ``train()`` returning ``metric_dict`` and ``main()`` returning the value of
``optimized_metric`` (None while it is unset). It knows nothing about recipe_audit. Differences:
a synthetic data module instead of MNIST, ``pytorch_lightning`` for ``lightning``, two lines for
``rootutils``, and ``crash_seed`` (fault injection).

Run it alone, or with the plugin, exactly as the template:

    python examples/lightning_template/src/train.py
    python examples/lightning_template/src/train.py -m 'seed=range(1,7)' logger=mlflow \\
        hydra/callbacks=recipe_audit hydra.callbacks.recipe_audit.metric=test/acc

As in the template, the seed is applied only when ``if cfg.get("seed"):`` is true: seed 0 is not
applied at all (that job trains unseeded), so sweep ``seed=range(1,N)``.
"""

import os
import sys
from pathlib import Path
from typing import Any

import hydra
import pytorch_lightning as L
from omegaconf import DictConfig
from pytorch_lightning import Callback, LightningDataModule, LightningModule, Trainer
from pytorch_lightning.loggers import Logger

# what the template's `rootutils.setup_root(__file__, indicator=".project-root", pythonpath=True)` does here
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ["PROJECT_ROOT"] = str(ROOT)

from src.utils import (  # noqa: E402
    get_metric_value,
    instantiate_callbacks,
    instantiate_loggers,
    log_hyperparameters,
    task_wrapper,
)

log = __import__("logging").getLogger(__name__)


@task_wrapper
def train(cfg: DictConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    # set seed for random number generators in pytorch, numpy and python.random
    if cfg.get("seed"):
        L.seed_everything(cfg.seed, workers=True)

    log.info(f"Instantiating datamodule <{cfg.data._target_}>")
    datamodule: LightningDataModule = hydra.utils.instantiate(cfg.data)

    log.info(f"Instantiating model <{cfg.model._target_}>")
    crash = cfg.get("crash_seed") is not None and cfg.get("seed") == cfg.crash_seed  # not in the template
    model: LightningModule = hydra.utils.instantiate(cfg.model, crash=crash)

    log.info("Instantiating callbacks...")
    callbacks: list[Callback] = instantiate_callbacks(cfg.get("callbacks"))

    log.info("Instantiating loggers...")
    logger: list[Logger] = instantiate_loggers(cfg.get("logger"))

    log.info(f"Instantiating trainer <{cfg.trainer._target_}>")
    trainer: Trainer = hydra.utils.instantiate(cfg.trainer, callbacks=callbacks, logger=logger)

    object_dict = {
        "cfg": cfg,
        "datamodule": datamodule,
        "model": model,
        "callbacks": callbacks,
        "logger": logger,
        "trainer": trainer,
    }

    if logger:
        log.info("Logging hyperparameters!")
        log_hyperparameters(object_dict)

    if cfg.get("train"):
        log.info("Starting training!")
        trainer.fit(model=model, datamodule=datamodule, ckpt_path=cfg.get("ckpt_path"))

    train_metrics = trainer.callback_metrics

    if cfg.get("test"):
        log.info("Starting testing!")
        ckpt_path = trainer.checkpoint_callback.best_model_path
        if ckpt_path == "":
            log.warning("Best ckpt not found! Using current weights for testing...")
            ckpt_path = None
        trainer.test(model=model, datamodule=datamodule, ckpt_path=ckpt_path)
        log.info(f"Best ckpt path: {ckpt_path}")

    test_metrics = trainer.callback_metrics

    # merge train and test metrics
    metric_dict = {**train_metrics, **test_metrics}

    return metric_dict, object_dict


@hydra.main(version_base="1.3", config_path="../configs", config_name="train.yaml")
def main(cfg: DictConfig) -> float | None:
    # train the model
    metric_dict, _ = train(cfg)

    # safely retrieve metric value for hydra-based hyperparameter optimization
    metric_value = get_metric_value(metric_dict=metric_dict, metric_name=cfg.get("optimized_metric"))

    # return optimized metric
    return metric_value


if __name__ == "__main__":
    main()
