"""A synthetic stand-in for the template's MNISTDataModule: ten Gaussian blobs (one per class) in
a few dimensions, generated from a fixed data seed, split train/val/test as the template splits
MNIST. Nothing is downloaded."""

from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset, random_split


class BlobsDataModule(pl.LightningDataModule):
    def __init__(
        self,
        data_seed: int = 1234,
        n_classes: int = 10,
        n_features: int = 32,
        train_val_test_split: tuple[int, int, int] = (1_600, 400, 400),
        batch_size: int = 64,
    ) -> None:
        super().__init__()
        # plain numbers in the checkpoint: torch.load(weights_only=True) refuses OmegaConf's ListConfig
        train_val_test_split = tuple(int(n) for n in train_val_test_split)
        self.save_hyperparameters(logger=False)
        self.data_train: Dataset | None = None
        self.data_val: Dataset | None = None
        self.data_test: Dataset | None = None

    @property
    def num_classes(self) -> int:
        return self.hparams.n_classes

    def setup(self, stage: str | None = None) -> None:
        if self.data_train is not None:
            return
        rng = np.random.default_rng(self.hparams.data_seed)
        n = sum(self.hparams.train_val_test_split)
        centers = rng.normal(0.0, 0.5, (self.hparams.n_classes, self.hparams.n_features))
        y = rng.integers(0, self.hparams.n_classes, n)
        x = centers[y] + rng.normal(0.0, 1.0, (n, self.hparams.n_features))
        dataset = TensorDataset(torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.long))
        self.data_train, self.data_val, self.data_test = random_split(
            dataset=dataset,
            lengths=self.hparams.train_val_test_split,
            generator=torch.Generator().manual_seed(42),
        )

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.data_train, batch_size=self.hparams.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.data_val, batch_size=self.hparams.batch_size, shuffle=False)

    def test_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.data_test, batch_size=self.hparams.batch_size, shuffle=False)
