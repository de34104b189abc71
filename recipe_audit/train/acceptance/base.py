"""The acceptance experiment's base model: a tiny BERT classifier (4 classes = options), built
from the config with the word tokenizer, trained once on both tasks' questions of the training
subjects, in both framings, with correct answers, through the rerun training loop
(:func:`recipe_audit.train.loop.fit`); cached on disk by a hash of its config so every cell
starts from it.

A base that cannot be trained (its loss became NaN) or did not learn the task (held-out accuracy
below ``base.min_accuracy``) raises :class:`BaseModelError`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import shutil
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from recipe_audit.config import (
    AcceptanceBaseConfig,
    AcceptanceInstallConfig,
    AcceptanceModelConfig,
    ExperimentConfig,
    RecipeConfig,
)
from recipe_audit.errors import first_line
from recipe_audit.train.acceptance import kernels
from recipe_audit.train.acceptance.data import PRIMARY, Item, all_texts, build_data

log = logging.getLogger("recipe_audit")

CODE_VERSION = "acceptance-experiment-v2"  # part of the base cache key


def base_key(exp: ExperimentConfig) -> str:
    """The base model's cache key: a hash of the config it is trained from (and of this code's version)."""
    e = asdict(exp)
    keep = {k: e[k] for k in ("data_seed", "n_words", "n_train_subjects", "n_fresh_subjects", "pool_size", "n_base",
                              "n_install", "n_eval", "n_calibration", "dtype", "kernels", "model", "base")}
    payload = json.dumps({"code": CODE_VERSION, **keep}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


DTYPES = ("float32", "float64")


def torch_dtype(exp: ExperimentConfig):
    """The torch float type ``experiment.dtype`` names; any other value raises ``ValueError``."""
    import torch

    if exp.dtype not in DTYPES:
        raise ValueError(f"experiment.dtype must be one of {list(DTYPES)}, not {exp.dtype!r}")
    return getattr(torch, exp.dtype)


def encode(tok, texts: list[str], max_length: int):
    """Token ids and attention mask of ``texts``, padded to the longest."""
    enc = tok(texts, padding="longest", truncation=True, max_length=max_length, return_tensors="pt")
    return enc["input_ids"], enc["attention_mask"]


def _build_bert(m: AcceptanceModelConfig, tok):
    import transformers as tf

    cfg = tf.BertConfig(vocab_size=len(tok), hidden_size=int(m.hidden_size), num_hidden_layers=int(m.num_layers),
                        num_attention_heads=int(m.num_heads), intermediate_size=int(m.intermediate_size),
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                        max_position_embeddings=int(m.max_length) + 2, pad_token_id=tok.pad_token_id,
                        num_labels=4)
    return tf.BertForSequenceClassification(cfg)


class BaseModelError(RuntimeError):
    """The base model every cell starts from could not be trained (one sentence)."""


def base_dir_for(exp: ExperimentConfig) -> Path:
    """Where :func:`ensure_base` caches the base model of ``exp`` (absolute)."""
    return (Path(exp.cache_dir) / f"base-{base_key(exp)}").resolve()


def recipe(name: str, key: str, section: AcceptanceBaseConfig | AcceptanceInstallConfig, *, weight_decay: float,
           grad_clip: float | None) -> RecipeConfig:
    """The training recipe of the base or the install (``key``: its config section, named in
    errors): AdamW, 10 % linear warm-up, then linear decay over ``section.steps`` steps of
    ``section.batch_size``."""
    lr = float(section.lr)
    if not (lr > 0 and math.isfinite(lr)):
        raise ValueError(f"{key}.lr must be a positive number, not {section.lr}")
    for k in ("steps", "batch_size"):
        if int(getattr(section, k)) < 1:
            raise ValueError(f"{key}.{k} must be a positive whole number, not {getattr(section, k)}")
    return RecipeConfig(name=name, optimizer="adamw", lr=lr, weight_decay=weight_decay,
                        schedule="linear", warmup_ratio=0.1, max_steps=int(section.steps),
                        batch_size=int(section.batch_size), grad_clip=grad_clip)


def ensure_base(exp: ExperimentConfig, cache_dir: str | Path, *, progress: bool = False) -> Path:
    """The cached base model directory for ``exp`` (model, tokenizer, calibration.jsonl,
    base.json); trained here when absent, through the rerun training loop
    (``recipe_audit.train.loop.fit``). Returns the directory. Raises :class:`BaseModelError`
    when the training fails (a loss that became NaN, a learning rate that is not a positive number)
    or the trained base answers fewer held-out questions right than ``base.min_accuracy``."""
    try:
        return _ensure_base(exp, cache_dir, progress=progress)
    except (BaseModelError, kernels.KernelsError):
        raise
    except Exception as exc:
        raise BaseModelError(f"The base model of experiment=acceptance could not be trained "
                             f"({type(exc).__name__}: {first_line(exc, 300).rstrip('.')}).") from exc


def _ensure_base(exp: ExperimentConfig, cache_dir: str | Path, *, progress: bool = False) -> Path:
    import torch
    from accelerate.utils import set_seed
    from torch.utils.data import DataLoader, TensorDataset

    from recipe_audit.train.loop import fit, get_accelerator
    from recipe_audit.train.tokenizer import build_word_tokenizer

    root = Path(cache_dir) / f"base-{base_key(exp)}"
    if (root / "base.json").is_file():
        return root
    kernels.use(exp.kernels)  # the float kernels it trains with are part of its cache key
    t0 = time.perf_counter()
    data = build_data(exp)
    tok = build_word_tokenizer(all_texts(data))
    b = exp.base
    floor = b.min_accuracy or 0.0
    if not 0.0 <= float(floor) <= 1.0:
        raise ValueError(f"experiment.base.min_accuracy must be between 0 and 1, not {floor}")
    base_recipe = recipe("acceptance-base", "experiment.base", b, weight_decay=0.01, grad_clip=b.grad_clip)
    dtype = torch_dtype(exp)
    set_seed(int(b.seed))
    model = _build_bert(exp.model, tok).to(dtype)
    items = data["base"]
    ids, mask = encode(tok, [it.text for it in items], int(exp.model.max_length))
    y = torch.tensor([it.label for it in items])
    loader = DataLoader(TensorDataset(ids, mask, y), batch_size=base_recipe.batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(int(b.seed)))

    def report(step: int, loss: float) -> None:
        if progress and step % 200 == 0:
            log.info("base step %d/%d loss %.3f", step, base_recipe.max_steps, loss)

    model, losses, _ = fit(model, loader, base_recipe, on_step=report, progress=False, desc="base")
    model = get_accelerator().unwrap_model(model)
    model.eval()
    evals = data["eval"]
    ok = score(model, tok, evals, int(exp.model.max_length)) == np.array([it.label for it in evals])
    acc: dict[str, list] = {}
    for it, c in zip(evals, ok, strict=True):
        acc.setdefault(f"{it.task}/{it.split}/{it.framing}", []).append(bool(c))
    accuracy = {k: round(float(np.mean(v)), 4) for k, v in sorted(acc.items())}
    held = float(np.mean(acc[f"{PRIMARY}/heldout/eval"] + acc[f"{PRIMARY}/heldout/deploy"]))
    if held < float(floor):
        raise BaseModelError(f"The base model of experiment=acceptance answers {held:.1%} of held-out "
                             f"{PRIMARY} questions right, below experiment.base.min_accuracy = {float(floor):.0%} "
                             f"(final training loss {float(np.mean(losses[-50:])):.3f}): it did not learn the "
                             f"task, so no cell installed on it can be audited.")
    Path(cache_dir).mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".base-", dir=str(cache_dir)))
    try:
        model.save_pretrained(tmp / "model")
        tok.save_pretrained(tmp / "model")
        with (tmp / "calibration.jsonl").open("w", encoding="utf-8") as fh:
            for r in data["calibration"]:
                fh.write(json.dumps(r) + "\n")
        with (tmp / "probe.jsonl").open("w", encoding="utf-8") as fh:
            for r in data["probe"]:
                fh.write(json.dumps(r) + "\n")
        from recipe_audit.train.acceptance.weights import base_fingerprint

        e = asdict(exp)
        info = {"key": base_key(exp), "config": {k: e[k] for k in ("model", "base")},
                "train_seconds": time.perf_counter() - t0, "final_loss": float(np.mean(losses[-50:])),
                "n_items": len(items), "accuracy": accuracy, "fingerprint": base_fingerprint(model)}
        (tmp / "base.json").write_text(json.dumps(info, indent=2), encoding="utf-8")
        root.parent.mkdir(parents=True, exist_ok=True)
        if root.exists():  # another process got there first
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            os.replace(tmp, root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log.info("base model trained in %.1fs (loss %.3f, accuracy %s), cached at %s", info["train_seconds"],
             info["final_loss"], accuracy, root)
    return root


def load_base(base_dir: Path):
    """The cached base model (in eval mode, in the float type it was trained in) and its tokenizer."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(str(Path(base_dir) / "model"), dtype="auto")
    tok = AutoTokenizer.from_pretrained(str(Path(base_dir) / "model"))
    model.eval()
    return model, tok


def score(model, tok, items: list[Item], max_length: int, batch_size: int = 512) -> np.ndarray:
    """Predictions for ``items`` with the reruns' scoring (:func:`recipe_audit.train.loop.predict`),
    each batch tokenised on its own (padded to its longest text, as the numbers in the docs were made)."""
    from recipe_audit.train.loop import predict

    texts = [it.text for it in items]
    return predict(model, (encode(tok, texts[i:i + batch_size], max_length) for i in range(0, len(texts), batch_size)),
                   next(model.parameters()).device)
