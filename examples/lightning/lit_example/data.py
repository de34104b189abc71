import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset


def make_spirals(n: int, noise: float, rng: np.random.Generator) -> TensorDataset:
    """Two interleaved spirals (one per class, half the points each) with Gaussian noise."""
    y = rng.permutation(np.arange(n) % 2)
    t = rng.uniform(0.25, 1.0, n) * 2.0 * np.pi
    sign = np.where(y == 0, 1.0, -1.0)
    x = sign[:, None] * np.stack([t * np.cos(t), t * np.sin(t)], 1) / (2.0 * np.pi)
    x = x + rng.normal(0.0, noise, x.shape)
    return TensorDataset(torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.long))


class SpiralsDataModule(pl.LightningDataModule):
    def __init__(self, data_seed: int = 1234, n_train: int = 512, n_val: int = 256,
                 noise: float = 0.08, batch_size: int = 128):
        super().__init__()
        self.save_hyperparameters(logger=False)

    def setup(self, stage: str | None = None) -> None:
        rng = np.random.default_rng(self.hparams.data_seed)
        self.train_set = make_spirals(self.hparams.n_train, self.hparams.noise, rng)
        self.val_set = make_spirals(self.hparams.n_val, self.hparams.noise, rng)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.hparams.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=len(self.val_set))
