"""A plain PyTorch training loop with MLflow's fluent API: a small MLP on two noisy
interleaved half-moons (a generated binary classification task, no download).

Logs params, ``loss`` per epoch and the final ``val_accuracy`` into ``mlflow.start_run()``,
that is MLflow's defaults: ``$MLFLOW_TRACKING_URI`` and the run named by ``$MLFLOW_RUN_ID`` when
they are set.

Run it alone, or sweep seeds:

    python examples/plain_mlflow/train.py
    python examples/plain_mlflow/train.py -m 'seed=range(6)'

with the recipe_audit plugin:

    python examples/plain_mlflow/train.py -m 'seed=range(6)' \
        hydra/callbacks=recipe_audit hydra.callbacks.recipe_audit.metric=val_accuracy

Metric: ``val_accuracy``. ``crash_seed=N`` makes seed N raise halfway through training;
``collapse_seed=N`` makes seed N predict a single class; ``mislog_seed=N`` makes seed N log
``val_accuracy`` 0.1 in a run of its own (``mislog=nested`` or ``restarted``) and return its true
accuracy.
"""

import logging

import hydra
import mlflow
import numpy as np
import torch
from omegaconf import DictConfig
from torch import nn

log = logging.getLogger(__name__)


def make_moons(n: int, noise: float, rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Two interleaved half circles, half the points each, with Gaussian noise."""
    y = rng.permutation(np.arange(n) % 2)
    t = rng.uniform(0.0, np.pi, n)
    x = np.where(y[:, None] == 0,
                 np.stack([np.cos(t), np.sin(t)], 1),
                 np.stack([1.0 - np.cos(t), 0.5 - np.sin(t)], 1))
    x = x + rng.normal(0.0, noise, x.shape)
    return torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.float32)


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float | None:
    rng = np.random.default_rng(cfg.data.seed)
    x_train, y_train = make_moons(cfg.data.n_train, cfg.data.noise, rng)
    x_val, y_val = make_moons(cfg.data.n_val, cfg.data.noise, rng)

    torch.manual_seed(cfg.seed)
    model = nn.Sequential(nn.Linear(2, cfg.model.hidden), nn.ReLU(),
                          nn.Linear(cfg.model.hidden, cfg.model.hidden), nn.ReLU(),
                          nn.Linear(cfg.model.hidden, 1))
    lr = cfg.train.lr
    if cfg.seed == cfg.collapse_seed:
        lr = 0.0  # sabotage: nothing is learned and the head always says class 1
        with torch.no_grad():
            model[-1].weight.zero_()
            model[-1].bias.fill_(5.0)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    loss_fn = nn.BCEWithLogitsLoss()

    with mlflow.start_run():
        mlflow.log_params({"seed": cfg.seed, "lr": lr, "hidden": cfg.model.hidden,
                           "epochs": cfg.train.epochs, "batch_size": cfg.train.batch_size})
        for epoch in range(cfg.train.epochs):
            model.train()
            perm = torch.randperm(len(x_train))
            total = 0.0
            for i in range(0, len(x_train), cfg.train.batch_size):
                idx = perm[i:i + cfg.train.batch_size]
                loss = loss_fn(model(x_train[idx]).squeeze(-1), y_train[idx])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                total += loss.item() * len(idx)
            mlflow.log_metric("loss", total / len(x_train), step=epoch)
            if cfg.seed == cfg.crash_seed and epoch == cfg.train.epochs // 2:
                raise RuntimeError(f"injected crash for seed {cfg.seed}")

        model.eval()
        with torch.no_grad():
            acc = ((model(x_val).squeeze(-1) > 0).float() == y_val).float().mean().item()
        if cfg.seed == cfg.mislog_seed:
            return _mislogged(cfg.mislog, acc)
        mlflow.log_metric("val_accuracy", acc)
        log.info("seed=%d val_accuracy=%.4f", cfg.seed, acc)


def _mislogged(how: str, acc: float) -> float:
    """Fault injection: log val_accuracy = 0.1 in a run the task opens itself once its own run is
    over (``nested``: ``mlflow.start_run(nested=True)``; ``restarted``: ``mlflow.start_run()`` again
    after ``mlflow.end_run()``), then return the true accuracy, as a task that reports its metric
    to a hyperparameter search does. Under a tracking wrapper both runs resume the job's run."""
    mlflow.end_run()
    if how == "nested":
        with mlflow.start_run(nested=True):
            mlflow.log_metric("val_accuracy", 0.1)
    else:
        mlflow.start_run()
        mlflow.log_metric("val_accuracy", 0.1)
        mlflow.end_run()
    return acc


if __name__ == "__main__":
    main()
