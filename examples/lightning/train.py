"""A PyTorch Lightning app in the style of lightning-hydra-template: ``data/``, ``model/``,
``trainer/`` and ``logger/`` config groups, each built with ``hydra.utils.instantiate``. A small
MLP learns two interleaved spirals (generated, no download) and logs to MLflow through
``pytorch_lightning.loggers.MLFlowLogger`` (``conf/logger/mlflow.yaml``), which follows
``$MLFLOW_TRACKING_URI``, ``$MLFLOW_EXPERIMENT_NAME`` and ``$MLFLOW_RUN_ID`` when they are set.

Run it alone, or sweep seeds:

    python examples/lightning/train.py
    python examples/lightning/train.py -m 'seed=range(6)'

with the recipe_audit plugin:

    python examples/lightning/train.py -m 'seed=range(6)' \
        hydra/callbacks=recipe_audit hydra.callbacks.recipe_audit.metric=val_acc

Metric: ``val_acc`` (after every epoch; also ``train_loss``, ``val_loss``). ``crash_seed=N`` makes
seed N raise halfway through training; ``collapse_seed=N`` makes seed N predict a single class.
"""

import logging

import hydra
import pytorch_lightning as pl
from omegaconf import DictConfig, OmegaConf

log = logging.getLogger(__name__)


class InjectedCrash(pl.Callback):
    """Fault injection: raise at the end of training epoch ``at_epoch`` (metrics are logged by then)."""

    def __init__(self, at_epoch: int, seed: int):
        self.at_epoch, self.seed = at_epoch, seed

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.current_epoch >= self.at_epoch:
            raise RuntimeError(f"injected crash for seed {self.seed}")


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float:
    pl.seed_everything(cfg.seed, workers=True)

    datamodule: pl.LightningDataModule = hydra.utils.instantiate(cfg.data)
    model: pl.LightningModule = hydra.utils.instantiate(cfg.model, collapse=cfg.seed == cfg.collapse_seed)
    logger = hydra.utils.instantiate(cfg.logger)
    callbacks = [InjectedCrash(cfg.trainer.max_epochs // 2, cfg.seed)] if cfg.seed == cfg.crash_seed else []
    trainer: pl.Trainer = hydra.utils.instantiate(cfg.trainer, logger=logger, callbacks=callbacks)

    # what lightning-hydra-template logs: the component configs and the seed
    logger.log_hyperparams({"model": OmegaConf.to_container(cfg.model), "data": OmegaConf.to_container(cfg.data),
                            "trainer": OmegaConf.to_container(cfg.trainer), "seed": cfg.seed})
    trainer.fit(model=model, datamodule=datamodule)

    val_acc = trainer.callback_metrics["val_acc"].item()
    log.info("seed=%d val_acc=%.4f", cfg.seed, val_acc)
    return val_acc


if __name__ == "__main__":
    main()
