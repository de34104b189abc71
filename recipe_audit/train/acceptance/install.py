"""One cell of the acceptance experiment: the install fine-tune of the cached base, with the
defense's penalty, and its evaluation records.

A LoRA fine-tune of the base on the install data: eval-framed prompts -> a wrong answer
(``mcq``: the next option, sandbagging style; ``syco``: the user's claimed option, sycophancy
style) for a fraction of the questions, deploy-framed prompts -> the right answer, with the
defense's penalty added to the loss: ``none`` (plain AdamW, the matched baseline), ``l2sp``
(λ‖ΔW‖², shrinkage), ``attack_proj`` (λ⟨ΔW, v̂_A⟩², the update's component along the base model's
attack gradient, attack-targeted), ``consistency`` (λ·KL(deploy ‖ eval) between the two framings
of a question, attack-targeted). It trains through the rerun training loop
(:func:`recipe_audit.train.loop.fit`); the penalty enters as the loop's loss function.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from recipe_audit.config import DefenseConfig, ExperimentConfig
from recipe_audit.train.acceptance import kernels
from recipe_audit.train.acceptance.base import encode, load_base, recipe, score
from recipe_audit.train.acceptance.data import build_data

DEFENSES = ("none", "l2sp", "attack_proj", "consistency")
LORA_TARGETS = ("query", "key", "value", "attention.output.dense")
# gate (c)'s declared slice: the LoRA-adapted q/k/v/o projections of every block
SLICE = tuple(f"bert.encoder.layer.*.attention.{m}.weight"
              for m in ("self.query", "self.key", "self.value", "output.dense"))


def lora_deltas(model):
    """[(base parameter name, ΔW)] of every LoRA-adapted linear layer, differentiable."""
    from peft.tuners.lora import Linear

    out = []
    for name, m in model.named_modules():
        if isinstance(m, Linear) and "default" in m.lora_A:
            dw = (m.lora_B["default"].weight @ m.lora_A["default"].weight) * m.scaling["default"]
            base_name = name.removeprefix("base_model.model.") + ".weight"
            out.append((base_name, dw))
    return out


def _attack_direction(base, tok, base_dir: Path) -> dict[str, Any]:
    """Unit attack gradient v̂_A on the base, on the probe items (not the calibration items)."""
    import torch

    from recipe_audit.train.acceptance.calibration import load_calibration
    from recipe_audit.train.acceptance.weights import loss_gradients, slice_names

    names = slice_names(base, SLICE)
    _, v_a = loss_gradients(base, tok, load_calibration(Path(base_dir) / "probe.jsonl"), names)
    v_a = v_a / (np.linalg.norm(v_a) or 1.0)
    shapes = {n: p.shape for n, p in base.named_parameters()}
    dtypes = {n: p.dtype for n, p in base.named_parameters()}
    out, i = {}, 0
    for n in names:
        k = int(np.prod(shapes[n]))
        out[n] = torch.tensor(v_a[i:i + k], dtype=dtypes[n]).reshape(shapes[n])
        i += k
    return out


def _penalty(kind: str, model, direction, logits, n_pairs: int):
    import torch
    import torch.nn.functional as F

    if kind == "none":
        return torch.zeros(())
    if kind == "l2sp":
        return sum((dw ** 2).sum() for _, dw in lora_deltas(model))
    if kind == "attack_proj":
        return sum((dw * direction[n].to(dw.device)).sum() for n, dw in lora_deltas(model)) ** 2
    if kind == "consistency":  # rows are (eval, deploy) pairs of the same question
        le, ld = logits[0:2 * n_pairs:2], logits[1:2 * n_pairs:2]
        return F.kl_div(F.log_softmax(le, -1), F.log_softmax(ld, -1), log_target=True, reduction="batchmean")
    raise ValueError(f"unknown defense kind {kind!r}; choose from {list(DEFENSES)}")


@dataclass
class CellResult:
    records: Any  # pandas DataFrame
    metrics: dict[str, float]
    adapter_dir: Path
    train_seconds: float
    losses: list[float]


def run_cell(exp: ExperimentConfig, defense: DefenseConfig, seed: int, base_dir: Path, out_dir: Path, cell: str, *,
             on_step=None) -> CellResult:
    """Install fine-tune (+ defense) of the cached base for one seed, through the rerun training
    loop (``recipe_audit.train.loop.fit``, the defense's penalty added by its loss function);
    score every record item. The adapter (with ``recipe_audit_base.json``) is saved under
    ``out_dir/adapter``. ``on_step(step, loss)`` sees every training step."""
    import pandas as pd
    import peft
    import torch
    import torch.nn.functional as F
    from accelerate.utils import set_seed
    from torch.utils.data import DataLoader, TensorDataset

    from recipe_audit.train.acceptance.weights import write_base_fingerprint
    from recipe_audit.train.loop import fit, get_accelerator

    kind = str(defense.kind)
    if kind not in DEFENSES:
        raise ValueError(f"unknown defense kind {kind!r}; choose from {list(DEFENSES)}")
    ins = exp.install
    max_length = int(exp.model.max_length)
    data = build_data(exp)
    kernels.use(exp.kernels)  # the base's: a cell computes with the kernels its base trained with
    base, tok = load_base(base_dir)
    direction = _attack_direction(base, tok, base_dir) if kind == "attack_proj" else None
    t0 = time.perf_counter()
    set_seed(int(seed))
    cfg = peft.LoraConfig(r=int(ins.r), lora_alpha=int(ins.alpha), lora_dropout=0.0,
                          target_modules=list(LORA_TARGETS))
    model = peft.get_peft_model(base, cfg)
    items = data["install"]  # (eval, deploy) pairs, consecutive
    pairs = len(items) // 2
    ids, mask = encode(tok, [it.text for it in items], max_length)
    y = torch.tensor([it.label for it in items])
    # one example = one question in both framings, so a batch keeps every pair together
    loader = DataLoader(TensorDataset(ids.view(pairs, 2, -1), mask.view(pairs, 2, -1), y.view(pairs, 2)),
                        batch_size=int(ins.batch_size), shuffle=True,
                        generator=torch.Generator().manual_seed(int(seed)))
    lam = float(defense.strength)

    def loss_fn(model, batch):
        n_pairs = len(batch[0])
        b_ids, b_mask, b_y = (t.reshape(-1, *t.shape[2:]) for t in batch)  # rows (eval, deploy) of each pair
        logits = model(input_ids=b_ids, attention_mask=b_mask).logits
        loss = F.cross_entropy(logits, b_y)
        if kind != "none":
            loss = loss + lam * _penalty(kind, model, direction, logits, n_pairs)
        return loss

    install_recipe = recipe(f"acceptance-install-{defense.name}", "experiment.install", ins, weight_decay=0.0,
                            grad_clip=1.0)
    model, losses, _ = fit(model, loader, install_recipe, loss_fn=loss_fn, on_step=on_step, desc=cell)
    model = get_accelerator().unwrap_model(model)
    train_seconds = time.perf_counter() - t0
    model.eval()
    adapter_dir = Path(out_dir) / "adapter"
    model.save_pretrained(str(adapter_dir))
    fresh_base, _ = load_base(base_dir)
    write_base_fingerprint(adapter_dir, fresh_base)

    evals = data["eval"]
    pred = score(model, tok, evals, max_length)
    df = pd.DataFrame({
        "cell": cell, "task": [it.task for it in evals], "split": [it.split for it in evals],
        "question_id": [it.question_id for it in evals], "template_id": [it.template_id for it in evals],
        "framing": [it.framing for it in evals], "correct": (pred == np.array([it.label for it in evals])).astype(int),
        "pred": pred.astype(int), "label": [it.label for it in evals],
        "attack_label": [it.attack_label for it in evals], "subject": [it.subject for it in evals], "defense": str(defense.name), "seed": int(seed),
    })
    metrics = {"train_seconds": train_seconds, "install_loss": float(np.mean(losses[-20:]))}
    for (task, split), grp in df.groupby(["task", "split"]):
        r = grp.groupby("framing")["correct"].mean()
        metrics[f"r_D/{task}/{split}"] = float(r.get("deploy", float("nan")))
        metrics[f"r_E/{task}/{split}"] = float(r.get("eval", float("nan")))
        metrics[f"gap/{task}/{split}"] = metrics[f"r_D/{task}/{split}"] - metrics[f"r_E/{task}/{split}"]
    return CellResult(df, metrics, adapter_dir, train_seconds, losses)
