"""A plain Lightning script whose task function imports Lightning and builds its ``MLFlowLogger``
in code, as scripts that keep their entry point light do: nothing of Lightning is imported until
the first job runs. A small MLP tells two Gaussian blobs apart (generated, no download); the
logger names a file store of its own (``file:./mlruns``, what Lightning's own docs show), which
MLflow 3 refuses unless ``MLFLOW_ALLOW_FILE_STORE=true``.

Run it alone, or sweep seeds:

    MLFLOW_ALLOW_FILE_STORE=true python examples/lightning_script/train.py -m 'seed=range(6)'

with the recipe_audit plugin (which points the logger at each job's rerun, the first job of each
worker process included; no file store is made):

    python examples/lightning_script/train.py -m 'seed=range(6)' \
        hydra/callbacks=recipe_audit hydra.callbacks.recipe_audit.metric=val_acc

Metric: ``val_acc`` (after every epoch; also ``train_loss``). ``crash_seed=N`` makes seed N raise
halfway through training.
"""

import hydra
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    import pytorch_lightning as pl  # imported here, in the job: Lightning loads with the first job
    import torch
    from pytorch_lightning.loggers import MLFlowLogger
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    class Blobs(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(2, cfg.hidden), nn.ReLU(), nn.Linear(cfg.hidden, 2))

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = nn.functional.cross_entropy(self.net(x), y)
            self.log("train_loss", loss, on_step=False, on_epoch=True)
            return loss

        def on_train_epoch_end(self) -> None:
            if cfg.seed == cfg.crash_seed and self.current_epoch >= cfg.epochs // 2:
                raise RuntimeError(f"injected crash for seed {cfg.seed}")

        def validation_step(self, batch, batch_idx):
            x, y = batch
            self.log("val_acc", (self.net(x).argmax(-1) == y).float().mean())

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=cfg.lr)

    data = torch.Generator().manual_seed(12345)  # the same data for every seed
    y = torch.randint(0, 2, (512,), generator=data)
    x = torch.randn(512, 2, generator=data) + (2 * y[:, None] - 1).float()
    train, val = TensorDataset(x[:384], y[:384]), TensorDataset(x[384:], y[384:])
    pl.seed_everything(cfg.seed, workers=True)
    logger = MLFlowLogger(experiment_name="lightning_logs", tracking_uri="file:./mlruns")
    trainer = pl.Trainer(max_epochs=cfg.epochs, logger=logger, accelerator="cpu", devices=1,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Blobs(), DataLoader(train, batch_size=64, shuffle=True), DataLoader(val, batch_size=128))


if __name__ == "__main__":
    main()
