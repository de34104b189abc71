"""One rerun: seed, build, fine-tune with an ``accelerate`` loop, score every audit set.

The loop itself (:func:`fit`) also trains the acceptance experiment's base model and install
fine-tunes, whose defense penalties enter through its ``loss_fn``.

The same function runs in one process on a CPU, or under ``accelerate launch`` on several
devices (the data loader is sharded by ``Accelerator.prepare``; every process scores the full
audit sets and only the main process logs them: ``recipe_audit.app.distributed``).
Everything that depends on the seed (initialisation, data order, dropout) is seeded here.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from recipe_audit.config import AuditConfig, ModelConfig, RecipeConfig, TaskConfig
from recipe_audit.train.models import build_model, build_tokenizer
from recipe_audit.train.tasks import Example, TaskData, majority_rate


class RecipeError(ValueError):
    """The recipe cannot be run as configured (one sentence)."""


class NonFiniteLossError(FloatingPointError):
    """Training diverged: the loss became NaN or infinite. The rerun stops and is recorded as
    failed (a rerun that produced NaN/inf did not finish, and counts as a failure)."""


OPTIMIZERS = ("adamw", "adam", "sgd")
SCHEDULES = ("constant", "linear", "cosine")


@dataclass(frozen=True)
class AuditScore:
    accuracy: float
    majority_rate: float  # accuracy of the best constant predictor on this audit set
    pred_mode_share: float  # share of predictions equal to the model's most common prediction
    n: int


@dataclass(frozen=True)
class RerunResult:
    seed: int
    audits: dict[str, AuditScore]
    train_loss: list[float] = field(repr=False)
    train_seconds: float
    steps: int
    model: object = field(default=None, repr=False, compare=False)
    tokenizer: object = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class Encoded:
    input_ids: object  # LongTensor (n, L)
    attention_mask: object
    labels: object


@dataclass
class PreparedTask:
    """A task tokenised once for a model; shared by every rerun of a sweep in one process."""

    task: TaskData
    tokenizer: object
    train: Encoded
    audits: dict[str, Encoded]


_PREPARED: dict[tuple, PreparedTask] = {}


def encode_examples(tokenizer, examples: tuple[Example, ...], max_length: int) -> Encoded:
    import torch

    texts = [ex.text for ex in examples]
    pairs = [ex.text_pair for ex in examples] if examples and examples[0].text_pair is not None else None
    enc = tokenizer(texts, pairs, padding="longest", truncation=True, max_length=max_length,
                    return_tensors="pt")
    return Encoded(enc["input_ids"], enc["attention_mask"],
                   torch.tensor([ex.label for ex in examples], dtype=torch.long))


def prepare_task(tcfg: TaskConfig, mcfg: ModelConfig) -> PreparedTask:
    """Build (or reuse) the task's data and tokenised tensors for this model.

    Built once per process for each task config (every field and option, in any order) and what
    the tokenised tensors depend on in the model config (its kind, ``name_or_path`` and
    ``max_length``): the seeds of a recipe share one object, and the seed of each rerun is applied
    after it, in :func:`train_rerun`."""
    import dataclasses
    import json

    from recipe_audit.train.tasks import build_task

    task_key = json.dumps(dataclasses.asdict(tcfg), sort_keys=True, default=repr)
    key = (task_key, mcfg.kind, mcfg.name_or_path, mcfg.max_length)
    if key not in _PREPARED:
        task = build_task(tcfg)
        tok = build_tokenizer(mcfg, task)
        _PREPARED[key] = PreparedTask(
            task, tok, encode_examples(tok, task.train, mcfg.max_length),
            {name: encode_examples(tok, exs, mcfg.max_length) for name, exs in task.audits.items()},
        )
    return _PREPARED[key]


def select_audits(task: TaskData, audit: AuditConfig) -> list[str]:
    names = list(task.audits) if list(audit.sets) == ["all"] else list(audit.sets)
    unknown = [n for n in names if n not in task.audits]
    if unknown:
        raise RecipeError(f"Task '{task.name}' has no audit set {unknown}; it has {sorted(task.audits)}.")
    return names


_ACCELERATOR = None


def get_accelerator():
    """One ``Accelerator`` per process (its state is a process-wide singleton anyway)."""
    global _ACCELERATOR
    if _ACCELERATOR is None:
        from accelerate import Accelerator

        _ACCELERATOR = Accelerator()
    return _ACCELERATOR


def _check_recipe(recipe: RecipeConfig) -> None:
    if recipe.optimizer not in OPTIMIZERS:
        raise RecipeError(f"Unknown optimizer '{recipe.optimizer}'; choose from {list(OPTIMIZERS)}.")
    if recipe.schedule not in SCHEDULES:
        raise RecipeError(f"Unknown schedule '{recipe.schedule}'; choose from {list(SCHEDULES)}.")
    if not (recipe.lr > 0 and math.isfinite(recipe.lr)):
        raise RecipeError(f"recipe.lr must be a positive number, not {recipe.lr}.")
    if recipe.batch_size < 1 or recipe.epochs < 1 or (recipe.max_steps is not None and recipe.max_steps < 1):
        raise RecipeError("recipe.batch_size, recipe.epochs and recipe.max_steps must be positive.")


def make_optimizer(params, recipe: RecipeConfig):
    """The optimizer ``recipe`` names, over ``params`` (the trainable parameters)."""
    import torch

    if recipe.optimizer == "sgd":
        return torch.optim.SGD(params, lr=recipe.lr, momentum=recipe.betas[0], weight_decay=recipe.weight_decay)
    cls = torch.optim.AdamW if recipe.optimizer == "adamw" else torch.optim.Adam
    return cls(params, lr=recipe.lr, betas=tuple(recipe.betas), weight_decay=recipe.weight_decay)


def default_loss(model, batch):
    """The model's own loss on a batch ``(input_ids, attention_mask, labels)``."""
    input_ids, mask, labels = batch
    return model(input_ids=input_ids, attention_mask=mask, labels=labels).loss


def _terminal() -> bool:
    """Whether stderr is a terminal (where a progress bar redraws itself in place)."""
    import sys

    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced by an object without it, or closed
        return False


class LineProgress:
    """Progress where stderr is no terminal (a log file, a pipe, a CI log): one line each time
    another ``every`` percent of the steps is done, not a bar redrawn with a carriage return at
    every update (which a file keeps, thousands of lines a sweep). What :func:`fit` calls of
    tqdm's bar: ``update``, ``set_postfix``, ``close``.

    >>> import contextlib, io, sys
    >>> err = io.StringIO()
    >>> with contextlib.redirect_stderr(err):
    ...     p = LineProgress(40, "seed 3", every=25)
    ...     for step in range(40):
    ...         p.set_postfix(loss=f"{1 / (step + 1):.3f}")
    ...         p.update(1)
    >>> print(err.getvalue(), end="")
    seed 3: step 10/40 (25%), loss 0.100
    seed 3: step 20/40 (50%), loss 0.050
    seed 3: step 30/40 (75%), loss 0.033
    seed 3: step 40/40 (100%), loss 0.025
    """

    def __init__(self, total: int, desc: str, every: int = 5) -> None:
        self.total, self.desc, self.every = max(int(total), 1), desc, every
        self.n = 0
        self.said = 0  # the last percentage a line was written for
        self.postfix = ""

    def set_postfix(self, **values: Any) -> None:
        self.postfix = ", ".join(f"{k} {v}" for k, v in values.items())

    def update(self, n: int = 1) -> None:
        import sys

        self.n += n
        done = self.n * 100 // self.total
        if done >= self.said + self.every:
            self.said = done - done % self.every
            print(f"{self.desc}: step {self.n}/{self.total} ({done}%)" + (f", {self.postfix}" if self.postfix else ""),
                  file=sys.stderr, flush=True)

    def close(self) -> None:
        pass


def fit(model, loader, recipe: RecipeConfig, *,
        loss_fn: Callable[[object, object], object] | None = None,
        on_step: Callable[[int, float], None] | None = None,
        progress: bool = False, desc: str = ""):
    """Train ``model`` on ``loader`` with ``recipe``'s optimizer, schedule, warm-up, step count
    (``max_steps``, else ``epochs`` passes over the loader) and gradient clipping, through the
    process's ``Accelerator`` (which shards the loader across processes). ``loss_fn(model, batch)``
    gives the loss of one batch (default: the model's own loss on ``(input_ids, attention_mask,
    labels)``); a training objective with a penalty passes its own. Raises
    :class:`NonFiniteLossError` when the loss becomes NaN or infinite. Returns ``(model, losses,
    steps)``, the model as ``Accelerator.prepare`` returned it."""
    from tqdm.auto import tqdm
    from transformers import get_scheduler

    _check_recipe(recipe)
    accelerator = get_accelerator()
    loss_fn = loss_fn or default_loss
    opt = make_optimizer([p for p in model.parameters() if p.requires_grad], recipe)
    steps_per_epoch = math.ceil(len(loader) / accelerator.num_processes)
    total = recipe.max_steps or recipe.epochs * steps_per_epoch
    sched = get_scheduler(recipe.schedule, opt, num_warmup_steps=int(recipe.warmup_ratio * total),
                          num_training_steps=total)
    model, opt, loader, sched = accelerator.prepare(model, opt, loader, sched)

    losses: list[float] = []
    show = progress and accelerator.is_local_main_process
    bar = (tqdm(total=total, desc=desc, leave=False, dynamic_ncols=True, disable=not show) if not show
           or _terminal() else LineProgress(total, desc))
    model.train()
    multi = accelerator.num_processes > 1
    step = 0
    while step < total:
        for batch in loader:
            out = loss_fn(model, batch)
            accelerator.backward(out)
            if recipe.grad_clip:
                accelerator.clip_grad_norm_(model.parameters(), recipe.grad_clip)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            # the loss averaged over processes: every process sees the same value, so they all
            # stop together when it is not finite (one process alone would leave the rest waiting)
            loss = float(accelerator.reduce(out.detach(), "mean") if multi else out.detach())
            losses.append(loss)
            if not math.isfinite(loss):
                bar.close()
                raise NonFiniteLossError(f"training loss became {loss} at step {step + 1}")
            step += 1
            if on_step is not None:
                on_step(step, loss)
            bar.update(1)
            if step % 10 == 0:
                bar.set_postfix(loss=f"{loss:.3f}")
            if step >= total:
                break
    bar.close()
    return model, losses, step


def train_rerun(
    seed: int,
    model_cfg: ModelConfig,
    recipe: RecipeConfig,
    prepared: PreparedTask,
    audit_names: list[str],
    eval_batch_size: int = 256,
    progress: bool = True,
    keep_model: bool = False,
    on_step: Callable[[int, float], None] | None = None,
    extra_audits: Sequence = (),
) -> RerunResult:
    """Fine-tune one seed of a recipe and score it on ``audit_names``, then on ``extra_audits``
    (other tasks' audit sets, ``shift.prepare_extra_audits``) under their qualified names."""
    import torch
    from accelerate.utils import set_seed
    from torch.utils.data import DataLoader, TensorDataset

    _check_recipe(recipe)
    accelerator = get_accelerator()
    t0 = time.perf_counter()
    set_seed(seed)  # python, numpy, torch: initialisation and dropout
    model = build_model(model_cfg, recipe.lora, prepared.tokenizer, prepared.task.num_labels)
    tr = prepared.train
    loader = DataLoader(
        TensorDataset(tr.input_ids, tr.attention_mask, tr.labels), batch_size=recipe.batch_size,
        shuffle=True, generator=torch.Generator().manual_seed(seed),  # data order
    )
    model, losses, step = fit(model, loader, recipe, on_step=on_step, progress=progress, desc=f"seed {seed}")
    train_seconds = time.perf_counter() - t0

    model.eval()
    scores = {name: _score(accelerator, model, prepared.audits[name], prepared.task, name, eval_batch_size)
              for name in audit_names}
    for x in extra_audits:  # task shift: the same checkpoint on another task's audit sets
        scores[x.name] = _score(accelerator, model, x.encoded, x.task, x.audit, eval_batch_size)
    return RerunResult(seed, scores, losses, train_seconds, step,
                       model=accelerator.unwrap_model(model) if keep_model else None,
                       tokenizer=prepared.tokenizer if keep_model else None)


def predict(model, batches: Iterable[tuple[Any, Any]], device) -> np.ndarray:
    """The predicted class of every example, batch by batch (``(input_ids, attention_mask)``
    tensors), without gradients: how reruns and acceptance cells alike are scored."""
    import torch

    preds = []
    with torch.inference_mode():
        for input_ids, attention_mask in batches:
            logits = model(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device)).logits
            preds.append(logits.argmax(-1).cpu().numpy())
    return np.concatenate(preds)


def _score(accelerator, model, enc: Encoded, task: TaskData, name: str, batch_size: int) -> AuditScore:
    pred = predict(model, ((enc.input_ids[i:i + batch_size], enc.attention_mask[i:i + batch_size])
                           for i in range(0, len(enc.labels), batch_size)), accelerator.device)
    labels = enc.labels.numpy()
    counts = np.bincount(pred, minlength=task.num_labels)
    return AuditScore(
        accuracy=float((pred == labels).mean()),
        majority_rate=majority_rate(task.audits[name], task.num_labels),
        pred_mode_share=float(counts.max() / len(pred)),
        n=len(labels),
    )
