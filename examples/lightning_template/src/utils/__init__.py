"""The template's src/utils, the parts its train.py uses (its rich printing and tag prompts left out)."""

import logging
from collections.abc import Callable
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning import Callback
from pytorch_lightning.loggers import Logger

log = logging.getLogger(__name__)


def task_wrapper(task_func: Callable) -> Callable:
    """Log the exception of a failing task and raise it again (the template's ``task_wrapper``)."""

    def wrap(cfg: DictConfig) -> tuple[dict[str, Any], dict[str, Any]]:
        try:
            metric_dict, object_dict = task_func(cfg=cfg)
        except Exception as ex:
            log.exception("")
            raise ex
        finally:
            log.info(f"Output dir: {cfg.paths.output_dir}")
        return metric_dict, object_dict

    return wrap


def instantiate_callbacks(callbacks_cfg: DictConfig) -> list[Callback]:
    callbacks: list[Callback] = []
    if not callbacks_cfg:
        log.warning("No callback configs found! Skipping..")
        return callbacks
    for _, cb_conf in callbacks_cfg.items():
        if isinstance(cb_conf, DictConfig) and "_target_" in cb_conf:
            log.info(f"Instantiating callback <{cb_conf._target_}>")
            callbacks.append(hydra.utils.instantiate(cb_conf))
    return callbacks


def instantiate_loggers(logger_cfg: DictConfig) -> list[Logger]:
    logger: list[Logger] = []
    if not logger_cfg:
        log.warning("No logger configs found! Skipping...")
        return logger
    for _, lg_conf in logger_cfg.items():
        if isinstance(lg_conf, DictConfig) and "_target_" in lg_conf:
            log.info(f"Instantiating logger <{lg_conf._target_}>")
            logger.append(hydra.utils.instantiate(lg_conf))
    return logger


def log_hyperparameters(object_dict: dict[str, Any]) -> None:
    cfg = OmegaConf.to_container(object_dict["cfg"])
    model, trainer = object_dict["model"], object_dict["trainer"]
    if not trainer.logger:
        log.warning("Logger not found! Skipping hyperparameter logging...")
        return
    hparams = {
        "model": cfg["model"],
        "model/params/total": sum(p.numel() for p in model.parameters()),
        "data": cfg["data"],
        "trainer": cfg["trainer"],
        "callbacks": cfg.get("callbacks"),
        "task_name": cfg.get("task_name"),
        "tags": cfg.get("tags"),
        "ckpt_path": cfg.get("ckpt_path"),
        "seed": cfg.get("seed"),
    }
    for logger in trainer.loggers:
        logger.log_hyperparams(hparams)


def get_metric_value(metric_dict: dict[str, Any], metric_name: str | None) -> float | None:
    if not metric_name:
        log.info("Metric name is None! Skipping metric value retrieval...")
        return None
    if metric_name not in metric_dict:
        raise Exception(
            f"Metric value not found! <metric_name={metric_name}>\n"
            "Make sure metric name logged in LightningModule is correct!\n"
            "Make sure `optimized_metric` name in `hparams_search` config is correct!"
        )
    metric_value = metric_dict[metric_name].item()
    log.info(f"Retrieved metric value! <{metric_name}={metric_value}>")
    return metric_value
