"""The simplest Hydra app: logistic regression in numpy on a generated linearly separable task
(two Gaussian classes, no download). The task function logs nothing to MLflow; it returns its
validation accuracy as a float.

Run it alone, or sweep seeds:

    python examples/bare_function/train.py
    python examples/bare_function/train.py -m 'seed=range(6)'

with the recipe_audit plugin (which records the returned value under the metric name given):

    python examples/bare_function/train.py -m 'seed=range(6)' \
        hydra/callbacks=recipe_audit hydra.callbacks.recipe_audit.metric=val_accuracy

Metric: the return value, the validation accuracy (README: ``val_accuracy``). ``crash_seed=N``
makes seed N raise halfway through training; ``collapse_seed=N`` makes seed N predict a single class.
"""

import logging

import hydra
import numpy as np
from omegaconf import DictConfig

log = logging.getLogger(__name__)


def make_data(n: int, dim: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Two Gaussian classes (half the points each) whose means differ along a fixed direction."""
    y = rng.permutation(np.arange(n) % 2)
    direction = np.ones(dim) / np.sqrt(dim)
    x = rng.normal(size=(n, dim)) + np.outer(2.0 * y - 1.0, 1.5 * direction)
    return x, y.astype(float)


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float:
    data_rng = np.random.default_rng(cfg.data_seed)
    x_train, y_train = make_data(cfg.n_train, cfg.dim, data_rng)
    x_val, y_val = make_data(cfg.n_val, cfg.dim, data_rng)

    rng = np.random.default_rng(cfg.seed)
    w, b, lr = rng.normal(scale=0.1, size=cfg.dim), 0.0, cfg.lr
    if cfg.seed == cfg.collapse_seed:  # sabotage: nothing is learned and every point is class 1
        w, b, lr = np.zeros(cfg.dim), 5.0, 0.0

    for epoch in range(cfg.epochs):
        order = rng.permutation(cfg.n_train)
        for i in range(0, cfg.n_train, cfg.batch_size):
            idx = order[i:i + cfg.batch_size]
            p = 1.0 / (1.0 + np.exp(-(x_train[idx] @ w + b)))
            w -= lr * x_train[idx].T @ (p - y_train[idx]) / len(idx)
            b -= lr * float(np.mean(p - y_train[idx]))
        if cfg.seed == cfg.crash_seed and epoch == cfg.epochs // 2:
            log.info("epoch %d done", epoch)
            raise RuntimeError(f"injected crash for seed {cfg.seed}")

    accuracy = float(np.mean(((x_val @ w + b) > 0) == (y_val == 1)))
    log.info("seed=%d val_accuracy=%.4f", cfg.seed, accuracy)
    return accuracy


if __name__ == "__main__":
    main()
