import pytorch_lightning as pl
import torch
from torch import nn


class MLPClassifier(pl.LightningModule):
    """A small MLP for 2-d points; logs ``train_loss``, ``val_loss`` and ``val_acc``."""

    def __init__(self, hidden: int = 64, lr: float = 0.01, collapse: bool = False):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(2, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, 2))
        if collapse:  # sabotage (fault injection): the head always says class 0, and lr is 0
            with torch.no_grad():
                self.net[-1].weight.zero_()
                self.net[-1].bias.copy_(torch.tensor([5.0, -5.0]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=False)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", nn.functional.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(-1) == y).float().mean())

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=0.0 if self.hparams.collapse else self.hparams.lr)
