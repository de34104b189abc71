"""Diagnostic (c) from weights: base-model gradients on a declared slice, and the update ΔW.

Diagnostic (c) measures every cell with the same ruler, the **base** model (before the install
fine-tune and before any defense). Everything is declared before the audit, in a mechanism
config (:func:`load_mechanism_spec`):

* a **parameter slice**: glob patterns (``fnmatch``) over the base model's parameter names, e.g.
  ``gpt_neox.layers.*.attention.query_key_value.weight`` or ``bert.encoder.layer.*.attention.self.*.weight``;
  a pattern that matches nothing is an error;
* the **claimed class** of the defense, ``shrinkage`` or ``attack-targeted`` (globally or per cell);
* **calibration items** (:func:`load_calibration`): a CSV/JSONL/JSON file with one row per item:

  ==================  ===========================================================================
  ``eval_text``       the prompt in eval framing (carries evaluation cues)
  ``deploy_text``     the same prompt in deploy framing
  ``label``           the index of the correct answer (class index, or option index)
  ``attack_label``    the index of the answer the attack pushes toward under eval framing
  ``eval_text_pair``, ``deploy_text_pair``  optional second segments (sentence-pair tasks)
  ``options``         causal LMs only: the answer options (JSON list; in CSV a JSON string)
  ``question_id``     optional, for reference
  ==================  ===========================================================================

* the **update** of each defense cell: a peft LoRA ``adapter`` directory (or MLflow artifact URI),
  or a ``finetuned`` full model directory (or URI).

The losses, with ``CE(x, y)`` the cross-entropy of the model's answer distribution on prompt ``x``
against answer ``y``, averaged over the calibration items:

* task loss ``L_T = mean over items and over task_framings (default eval and deploy) of CE(prompt_f, label)``;
* attack loss ``L_A = mean over items of CE(prompt_attack_framing, attack_label)`` (default framing
  eval): the loss whose minimisation installs the gap (answer the attack target when the prompt
  reads like an evaluation).

``v_T = ∇L_T`` and ``v_A = ∇L_A`` are taken on the base model in eval mode (dropout off),
restricted to the slice and flattened in the base model's parameter order (float64).
``ΔW = merged − base`` on the same slice: for a LoRA adapter, ``PeftModel.from_pretrained`` on a
copy of the base and ``merge_and_unload`` (so ``W + B·A·scaling``, plus any ``modules_to_save``);
for a full fine-tune, ``finetuned − base``.

Answer distributions: ``sequence-classification`` models (``AutoModelForSequenceClassification``,
answer = class index) use the logits; ``causal-lm`` models (``AutoModelForCausalLM``) score each
option by the summed log-probability of its tokens after the prompt, and the options' scores are
the logits.

Base mismatch: an adapter or fine-tune whose shapes or target modules do not fit the base is an
error. When the adapter or fine-tune directory holds ``recipe_audit_base.json`` (written by
:func:`write_base_fingerprint` at training time), the base model's fingerprint must match it, which
also catches a base of identical shapes but other weights.

torch, transformers and peft are imported inside the functions, so importing this module is cheap.
"""

from __future__ import annotations

import contextlib
import copy
import fnmatch
import hashlib
import json
import math
import tempfile
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from recipe_audit.acceptance.records import is_mlflow_uri
from recipe_audit.errors import first_line
from recipe_audit.stats import acceptance as gates
from recipe_audit.stats.errors import StatsInputError

__all__ = [
    "FINGERPRINT_FILE",
    "MODEL_TYPES",
    "CalibrationItem",
    "CellMechanism",
    "CellUpdate",
    "MechanismError",
    "MechanismSpec",
    "base_fingerprint",
    "compute_signatures",
    "load_calibration",
    "load_mechanism_spec",
    "loss_gradients",
    "mechanism_from_models",
    "read_alphas",
    "slice_names",
    "update_vector",
    "write_base_fingerprint",
]

MODEL_TYPES = ("sequence-classification", "causal-lm")
FINGERPRINT_FILE = "recipe_audit_base.json"
FRAMINGS = ("eval", "deploy")


class MechanismError(ValueError):
    """Diagnostic (c) cannot be computed from these inputs (one sentence)."""




# ---------------------------------------------------------------------------------------------
# Declarations
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CalibrationItem:
    eval_text: str
    deploy_text: str
    label: int
    attack_label: int
    eval_text_pair: str | None = None
    deploy_text_pair: str | None = None
    options: tuple[str, ...] | None = None
    question_id: str | None = None

    def text(self, framing: str) -> tuple[str, str | None]:
        if framing == "eval":
            return self.eval_text, self.eval_text_pair
        return self.deploy_text, self.deploy_text_pair


def _int_field(row: dict, key: str, where: str) -> int:
    v = row.get(key)
    try:
        if isinstance(v, bool) or v is None or (isinstance(v, float) and not v.is_integer()):
            raise ValueError
        return int(str(v).strip()) if isinstance(v, str) else int(v)
    except (TypeError, ValueError):
        raise MechanismError(f"Calibration {where} needs a whole-number '{key}', got {v!r}.") from None


def load_calibration(path: str | Path) -> tuple[CalibrationItem, ...]:
    """Calibration items from CSV, JSONL or JSON (a list of objects); see the module docstring."""
    p = Path(path)
    if not p.is_file():
        raise MechanismError(f"The calibration file {p} does not exist.")
    ext = p.suffix.lower()
    try:
        if ext == ".csv":
            import csv

            with p.open(newline="", encoding="utf-8") as fh:
                rows = list(csv.DictReader(fh))
        elif ext in (".jsonl", ".ndjson"):
            rows = [json.loads(line) for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]
        elif ext == ".json":
            rows = json.loads(p.read_text(encoding="utf-8"))
        else:
            raise MechanismError(f"The calibration file {p} must be .csv, .jsonl or .json, not '{ext}'.")
    except json.JSONDecodeError:
        raise MechanismError(f"The calibration file {p} is not valid JSON.") from None
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        raise MechanismError(f"The calibration file {p} must hold at least one item (rows of named fields).")
    items = []
    for i, row in enumerate(rows):
        where = f"item {i + 1} of {p.name}"
        for key in ("eval_text", "deploy_text"):
            if not isinstance(row.get(key), str) or not row[key].strip():
                raise MechanismError(f"Calibration {where} needs a non-empty '{key}'.")
        opts = row.get("options")
        if isinstance(opts, str) and opts.strip():
            try:
                opts = json.loads(opts)
            except json.JSONDecodeError:
                raise MechanismError(f"Calibration {where}: 'options' must be a JSON list of strings.") from None
        if opts in ("", None):
            opts = None
        elif not (isinstance(opts, list) and opts and all(isinstance(o, str) for o in opts)):
            raise MechanismError(f"Calibration {where}: 'options' must be a list of strings.")
        pair = {k: (row.get(k) or None) for k in ("eval_text_pair", "deploy_text_pair")}
        items.append(CalibrationItem(
            eval_text=row["eval_text"], deploy_text=row["deploy_text"], label=_int_field(row, "label", where),
            attack_label=_int_field(row, "attack_label", where), options=tuple(opts) if opts else None,
            question_id=None if row.get("question_id") in (None, "") else str(row["question_id"]), **pair))
    return tuple(items)


@dataclass(frozen=True)
class CellUpdate:
    """Where one defense cell's update is: a LoRA ``adapter`` or a ``finetuned`` model (one of
    them), as a local path or an MLflow artifact URI; optionally its own claimed class."""

    adapter: str | None = None
    finetuned: str | None = None
    claimed_class: str | None = None


@dataclass(frozen=True)
class MechanismSpec:
    """Inputs of diagnostic (c), declared before the audit (see the module docstring)."""

    base_model: str
    calibration: str
    slice: tuple[str, ...]
    cells: dict[str, CellUpdate]
    claimed_class: str | None = None
    tokenizer: str | None = None
    model_type: str = "sequence-classification"
    max_length: int = 128
    batch_size: int = 32
    task_framings: tuple[str, ...] = FRAMINGS
    attack_framing: str = "eval"
    source: str = ""

    def claimed_for(self, cell: str) -> str:
        cls = self.cells[cell].claimed_class or self.claimed_class
        if cls is None:
            raise MechanismError(f"The mechanism config declares no claimed class for cell '{cell}'; set "
                                 f"claimed_class to 'shrinkage' or 'attack-targeted'.")
        if cls not in gates.MECHANISM_CLASSES:
            raise MechanismError(f"The claimed class of cell '{cell}' is '{cls}'; use 'shrinkage' or 'attack-targeted'.")
        return cls

    def describe(self) -> dict[str, Any]:
        return {"source": self.source, "base_model": self.base_model, "tokenizer": self.tokenizer,
                "model_type": self.model_type, "calibration": self.calibration, "slice": list(self.slice),
                "task_loss": f"mean CE(correct answer) over framings {list(self.task_framings)}",
                "attack_loss": f"mean CE(attack answer) under {self.attack_framing} framing",
                "max_length": self.max_length,
                "cells": {c: {k: v for k, v in u.__dict__.items() if v is not None} for c, u in self.cells.items()}}


def _resolve(value: str | None, root: Path) -> str | None:
    if value is None:
        return None
    v = str(value)
    if is_mlflow_uri(v) or "://" in v or Path(v).is_absolute():
        return v
    cand = root / v
    return str(cand) if cand.exists() else v  # a hub id stays as given


def load_mechanism_spec(path: str | Path, *, defense_cells: Sequence[str] | None = None) -> MechanismSpec:
    """Read a mechanism config (YAML or JSON). Relative paths are relative to the config's folder.

    Keys: ``base_model``, ``calibration``, ``slice`` (list of patterns), ``claimed_class``,
    ``cells`` (``{cell: {adapter: …} | {finetuned: …}, optional claimed_class}``), optional
    ``tokenizer``, ``model_type``, ``max_length``, ``batch_size``, ``task_framings``,
    ``attack_framing``. With exactly one defense cell, a top-level ``adapter`` or ``finetuned``
    names its update. Cells not among ``defense_cells`` are an error (a typo would otherwise turn
    into a silently missing diagnostic).
    """
    import yaml

    p = Path(path)
    if not p.is_file():
        raise MechanismError(f"The mechanism config {p} does not exist.")
    try:
        raw = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError:
        raise MechanismError(f"The mechanism config {p} is not valid YAML or JSON.") from None
    if not isinstance(raw, dict):
        raise MechanismError(f"The mechanism config {p} must be a mapping of keys.")
    known = {"base_model", "calibration", "slice", "claimed_class", "cells", "tokenizer", "model_type",
             "max_length", "batch_size", "task_framings", "attack_framing", "adapter", "finetuned"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise MechanismError(f"The mechanism config {p} has unknown key(s) {unknown}; known: {sorted(known)}.")
    for key in ("base_model", "calibration", "slice"):
        if not raw.get(key):
            raise MechanismError(f"The mechanism config {p} must declare '{key}'.")
    sl = raw["slice"]
    sl = [sl] if isinstance(sl, str) else sl
    if not isinstance(sl, list) or not all(isinstance(s, str) and s for s in sl):
        raise MechanismError(f"The slice in {p} must be a list of parameter-name patterns.")
    root = p.parent
    cells_raw = dict(raw.get("cells") or {})
    if raw.get("adapter") or raw.get("finetuned"):
        if not defense_cells or len(defense_cells) != 1:
            raise MechanismError(f"A top-level adapter/finetuned in {p} needs exactly one defense cell; use 'cells'.")
        cells_raw.setdefault(defense_cells[0], {k: raw[k] for k in ("adapter", "finetuned") if raw.get(k)})
    cells: dict[str, CellUpdate] = {}
    for cell, u in cells_raw.items():
        u = {"adapter": u} if isinstance(u, str) else (u or {})
        if not isinstance(u, dict) or set(u) - {"adapter", "finetuned", "claimed_class"}:
            raise MechanismError(f"Cell '{cell}' in {p} must give 'adapter' or 'finetuned' (and optionally claimed_class).")
        if bool(u.get("adapter")) == bool(u.get("finetuned")):
            raise MechanismError(f"Cell '{cell}' in {p} must give exactly one of 'adapter' and 'finetuned'.")
        cells[str(cell)] = CellUpdate(adapter=_resolve(u.get("adapter"), root),
                                      finetuned=_resolve(u.get("finetuned"), root),
                                      claimed_class=u.get("claimed_class"))
    if not cells:
        raise MechanismError(f"The mechanism config {p} names no cell update (cells: {{CELL: {{adapter: PATH}}}}).")
    if defense_cells is not None:
        extra = sorted(set(cells) - set(defense_cells))
        if extra:
            raise MechanismError(f"The mechanism config names cell '{extra[0]}', which is not a --defense cell.")
    mt = raw.get("model_type", "sequence-classification")
    if mt not in MODEL_TYPES:
        raise MechanismError(f"model_type must be one of {list(MODEL_TYPES)}, not {mt!r}.")
    tf_ = tuple(raw.get("task_framings") or FRAMINGS)
    af = raw.get("attack_framing", "eval")
    if not set(tf_) <= set(FRAMINGS) or af not in FRAMINGS:
        raise MechanismError("task_framings and attack_framing must name 'eval' or 'deploy'.")
    for key in ("max_length", "batch_size"):
        v = raw.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise MechanismError(f"{key} in {p} must be a positive integer, not {v!r}.")
    spec = MechanismSpec(
        base_model=_resolve(raw["base_model"], root), calibration=_resolve(raw["calibration"], root),
        slice=tuple(sl), cells=cells, claimed_class=raw.get("claimed_class"),
        tokenizer=_resolve(raw.get("tokenizer"), root), model_type=mt,
        max_length=int(raw.get("max_length") or 128), batch_size=int(raw.get("batch_size") or 32),
        task_framings=tf_, attack_framing=af, source=str(p))
    for cell in cells:
        spec.claimed_for(cell)
    return spec


# ---------------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------------


def base_fingerprint(model) -> str:
    """sha256 over every parameter's name, shape and float32 bytes (state-dict order)."""
    import torch

    h = hashlib.sha256()
    with torch.no_grad():
        for name, t in model.state_dict().items():
            if not torch.is_floating_point(t):
                continue
            h.update(name.encode())
            h.update(str(tuple(t.shape)).encode())
            h.update(t.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()


def write_base_fingerprint(directory: str | Path, base_model) -> Path:
    """Write ``recipe_audit_base.json`` next to a saved adapter or fine-tune, so an audit can
    tell whether it is given the base the update was trained from."""
    path = Path(directory) / FINGERPRINT_FILE
    path.write_text(json.dumps({"base_fingerprint": base_fingerprint(base_model)}), encoding="utf-8")
    return path


def _locate(path: Path, marker: str) -> Path | None:
    if (path / marker).is_file():
        return path
    hits = sorted(path.rglob(marker), key=lambda q: len(q.parts))
    return hits[0].parent if hits else None


def _materialise(ref: str, stack: contextlib.ExitStack, tracking_uri: str | None, what: str) -> Path:
    """A local directory for ``ref`` (downloading MLflow artifact URIs into a temporary folder)."""
    if is_mlflow_uri(ref):
        from recipe_audit.store import artifacts

        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="recipe-audit-model-"))
        try:
            return artifacts.download(ref, tmp, tracking_uri)
        except artifacts.ArtifactError as exc:
            raise MechanismError(f"The {what} {ref} cannot be fetched: {exc}") from None
    p = Path(ref)
    if not p.exists():
        raise MechanismError(f"The {what} {ref} does not exist.")
    return p


def _auto_class(model_type: str):
    import transformers as tf

    return tf.AutoModelForSequenceClassification if model_type == "sequence-classification" else tf.AutoModelForCausalLM


def _load_model(ref: str, model_type: str, stack, tracking_uri, what: str):
    root = _materialise(ref, stack, tracking_uri, what)
    d = _locate(root, "config.json")
    if d is None:
        raise MechanismError(f"The {what} at {ref} holds no transformers model (no config.json).")
    from transformers.utils import logging as hf_logging

    bar = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        return _auto_class(model_type).from_pretrained(str(d)), d
    except (OSError, ValueError, KeyError) as exc:
        raise MechanismError(f"Cannot load the {what} from {ref}: {first_line(exc)}") from None
    finally:
        if bar:
            hf_logging.enable_progress_bar()


def _load_tokenizer(ref: str, stack, tracking_uri):
    from transformers import AutoTokenizer

    root = _materialise(ref, stack, tracking_uri, "tokenizer")
    d = _locate(root, "tokenizer_config.json") or _locate(root, "tokenizer.json") or root
    try:
        tok = AutoTokenizer.from_pretrained(str(d))
    except (OSError, ValueError, KeyError) as exc:
        raise MechanismError(f"Cannot load a tokenizer from {ref}: {first_line(exc)}") from None
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token or tok.unk_token
    return tok


def _check_fingerprint(update_dir: Path, base, ref: str) -> None:
    f = update_dir / FINGERPRINT_FILE
    if not f.is_file():
        return
    try:
        want = json.loads(f.read_text(encoding="utf-8"))["base_fingerprint"]
    except (json.JSONDecodeError, KeyError, TypeError):
        raise MechanismError(f"The file {f} is not a recipe_audit base fingerprint.") from None
    if want != base_fingerprint(base):
        raise MechanismError(f"The update at {ref} was trained from another base model (its base fingerprint "
                             f"does not match the declared base).")


def slice_names(model, patterns: Sequence[str]) -> list[str]:
    """Names of the base model's parameters matched by any of the glob ``patterns``, in the
    model's parameter order. A pattern matching nothing raises :class:`MechanismError`."""
    names = [n for n, _ in model.named_parameters()]
    if not patterns:
        raise MechanismError("The slice names no parameter pattern.")
    chosen = set()
    for pat in patterns:
        hit = [n for n in names if fnmatch.fnmatchcase(n, pat)]
        if not hit:
            raise MechanismError(f"The slice pattern '{pat}' matches no parameter of the base model (its "
                                 f"parameters are named like '{names[0]}', '{names[len(names) // 2]}').")
        chosen.update(hit)
    return [n for n in names if n in chosen]


# ---------------------------------------------------------------------------------------------
# Gradients
# ---------------------------------------------------------------------------------------------


def _rows(items: Sequence[CalibrationItem], framings: Sequence[str], attack: bool):
    for it in items:
        for f in framings:
            text, pair = it.text(f)
            yield text, pair, (it.attack_label if attack else it.label), it.options


def _check_labels(items: Sequence[CalibrationItem], model, model_type: str) -> None:
    for i, it in enumerate(items):
        if model_type == "sequence-classification":
            k = int(model.config.num_labels)
            what = f"the model's {k} classes"
        else:
            if not it.options:
                raise MechanismError(f"Calibration item {i + 1} has no 'options'; a causal-lm audit scores answer options.")
            k = len(it.options)
            what = f"its {k} options"
        for key in ("label", "attack_label"):
            v = getattr(it, key)
            if not 0 <= v < k:
                raise MechanismError(f"Calibration item {i + 1} has {key} {v}, outside {what}.")


def _seqcls_logits(model, tokenizer, texts, pairs, max_length):
    import torch

    dev = next(model.parameters()).device
    kw = {"text_pair": list(pairs)} if any(p is not None for p in pairs) else {}
    if kw and not all(p is not None for p in pairs):
        raise MechanismError("Either every calibration item has a text pair or none has.")
    enc = tokenizer(list(texts), padding=True, truncation=True, max_length=max_length, return_tensors="pt", **kw)
    enc = {k: v.to(dev) for k, v in enc.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
    with torch.enable_grad():
        return model(**enc).logits


def _option_scores(model, tokenizer, text, pair, options, max_length):
    """Summed log-probability of each option's tokens after the prompt: shape (n_options,)."""
    import torch

    dev = next(model.parameters()).device
    prompt = text if pair is None else f"{text} {pair}"
    p_ids = tokenizer(prompt, truncation=True, max_length=max_length)["input_ids"]
    seqs, spans = [], []
    for opt in options:
        o_ids = tokenizer(" " + opt, add_special_tokens=False)["input_ids"]
        if not o_ids:
            raise MechanismError(f"The answer option {opt!r} tokenises to nothing.")
        seqs.append(list(p_ids) + list(o_ids))
        spans.append((len(p_ids), len(p_ids) + len(o_ids)))
    L = max(len(s) for s in seqs)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = torch.full((len(seqs), L), pad, dtype=torch.long)
    mask = torch.zeros((len(seqs), L), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s)
        mask[i, :len(s)] = 1
    logits = model(input_ids=ids.to(dev), attention_mask=mask.to(dev)).logits
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1).gather(-1, ids[:, 1:].to(dev).unsqueeze(-1)).squeeze(-1)
    pos = torch.arange(L - 1).unsqueeze(0)
    starts = torch.tensor([a for a, _ in spans]).unsqueeze(1)
    ends = torch.tensor([b for _, b in spans]).unsqueeze(1)
    sel = ((pos + 1 >= starts) & (pos + 1 < ends)).to(dev)
    return (logp * sel).sum(dim=1)


def loss_gradients(model, tokenizer, items: Sequence[CalibrationItem], names: Sequence[str], *,
                   model_type: str = "sequence-classification", max_length: int = 128, batch_size: int = 32,
                   task_framings: Sequence[str] = FRAMINGS, attack_framing: str = "eval") -> tuple[np.ndarray, np.ndarray]:
    """``(v_T, v_A)``: gradients of the task and attack losses (module docstring) with respect to
    the parameters ``names`` of ``model``, flattened in that order, float64. The model is put in
    eval mode; parameters' ``requires_grad`` flags and the mode are restored afterwards."""
    import torch
    import torch.nn.functional as F

    if model_type not in MODEL_TYPES:
        raise MechanismError(f"model_type must be one of {list(MODEL_TYPES)}, not {model_type!r}.")
    if not items:
        raise MechanismError("There are no calibration items.")
    _check_labels(items, model, model_type)
    params = dict(model.named_parameters())
    flags = {n: p.requires_grad for n, p in params.items()}
    was_training = model.training
    wanted = set(names)
    try:
        for n, p in params.items():
            p.requires_grad_(n in wanted)
        model.eval()

        def grad_of(rows) -> np.ndarray:
            rows = list(rows)
            model.zero_grad(set_to_none=True)
            total = len(rows)
            if model_type == "sequence-classification":
                for s in range(0, total, batch_size):
                    chunk = rows[s:s + batch_size]
                    logits = _seqcls_logits(model, tokenizer, [r[0] for r in chunk], [r[1] for r in chunk], max_length)
                    y = torch.tensor([r[2] for r in chunk], device=logits.device)
                    (F.cross_entropy(logits.float(), y, reduction="sum") / total).backward()
            else:
                for text, pair, y, options in rows:
                    scores = _option_scores(model, tokenizer, text, pair, options, max_length)
                    target = torch.tensor([y], device=scores.device)
                    (F.cross_entropy(scores.unsqueeze(0), target, reduction="sum") / total).backward()
            parts = []
            for n in names:
                g = params[n].grad
                parts.append(np.zeros(params[n].numel()) if g is None
                             else g.detach().to("cpu", torch.float64).numpy().ravel().copy())
            model.zero_grad(set_to_none=True)
            return np.concatenate(parts)

        try:
            v_t = grad_of(_rows(items, task_framings, attack=False))
            v_a = grad_of(_rows(items, (attack_framing,), attack=True))
        except (RuntimeError, IndexError) as exc:  # e.g. token ids beyond the model's vocabulary
            raise MechanismError(f"The base model cannot score the calibration items with this tokenizer: "
                                 f"{first_line(exc)[:160]}") from None
    finally:
        for n, p in params.items():
            p.requires_grad_(flags[n])
        model.train(was_training)
    return v_t, v_a


# ---------------------------------------------------------------------------------------------
# Updates
# ---------------------------------------------------------------------------------------------


def _named(model) -> dict[str, Any]:
    return dict(model.named_parameters())


def _delta(base, updated, names: Sequence[str], ref: str) -> tuple[np.ndarray, tuple[str, ...]]:
    import torch

    bp, up = _named(base), _named(updated)
    parts = []
    for n in names:
        if n not in up:
            raise MechanismError(f"The update at {ref} has no parameter '{n}' of the slice; it does not belong to "
                                 f"this base model.")
        if tuple(up[n].shape) != tuple(bp[n].shape):
            raise MechanismError(f"The update at {ref} has parameter '{n}' of shape {tuple(up[n].shape)}, the base "
                                 f"{tuple(bp[n].shape)}; it was trained on another base model.")
        with torch.no_grad():
            parts.append((up[n].detach().to("cpu", torch.float64) - bp[n].detach().to("cpu", torch.float64))
                         .numpy().ravel())
    outside = []
    in_slice = set(names)
    with torch.no_grad():
        for n, p in up.items():
            if n in in_slice or n not in bp or tuple(p.shape) != tuple(bp[n].shape):
                continue
            if not torch.equal(p.detach().cpu(), bp[n].detach().cpu()):
                outside.append(n)
    return np.concatenate(parts), tuple(outside)


def update_vector(base, names: Sequence[str], *, adapter=None, finetuned=None, model_type: str = "sequence-classification",
                  tracking_uri: str | None = None) -> tuple[np.ndarray, tuple[str, ...], tuple[str, ...]]:
    """``(ΔW, changed_outside_slice, notes)`` for one cell's update on the slice ``names``.

    ``adapter``: a peft adapter directory or MLflow URI, or an in-memory ``peft.PeftModel``;
    ``finetuned``: a transformers model directory or MLflow URI, or an in-memory model. Exactly one.
    The base model is never modified (the adapter is merged into a deep copy).
    """
    if (adapter is None) == (finetuned is None):
        raise MechanismError("Give exactly one of an adapter and a fine-tuned model for the update.")
    notes: list[str] = []
    with contextlib.ExitStack() as stack:
        if adapter is not None:
            import peft

            if isinstance(adapter, peft.PeftModel):
                ref = "the in-memory adapter"
                merged = copy.deepcopy(adapter).merge_and_unload()
            else:
                ref = str(adapter)
                root = _materialise(ref, stack, tracking_uri, "adapter")
                d = _locate(root, "adapter_config.json")
                if d is None:
                    raise MechanismError(f"The adapter at {ref} holds no peft adapter (no adapter_config.json).")
                _check_fingerprint(d, base, ref)
                try:
                    cfg = json.loads((d / "adapter_config.json").read_text(encoding="utf-8"))
                except json.JSONDecodeError:
                    raise MechanismError(f"The adapter config at {ref} is not valid JSON.") from None
                if cfg.get("peft_type") not in (None, "LORA"):
                    notes.append(f"adapter type {cfg.get('peft_type')} (merged with peft's merge_and_unload)")
                named = cfg.get("base_model_name_or_path")
                own = getattr(base.config, "_name_or_path", "") or ""
                if named and own and Path(str(named)).name != Path(str(own)).name:
                    notes.append(f"the adapter names base '{named}', the declared base is '{own}'")
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", FutureWarning)  # peft calls deprecated transformers APIs
                        wrapped = peft.PeftModel.from_pretrained(copy.deepcopy(base), str(d))
                        merged = wrapped.merge_and_unload()
                except Exception as exc:  # size mismatch, missing target modules, …
                    raise MechanismError(f"The adapter at {ref} does not fit the base model "
                                         f"({first_line(exc)[:160]}); it was trained on another base model.") from None
        else:
            if isinstance(finetuned, (str, Path)):
                ref = str(finetuned)
                merged, d = _load_model(ref, model_type, stack, tracking_uri, "fine-tuned model")
                _check_fingerprint(d, base, ref)
            else:
                ref, merged = "the in-memory fine-tuned model", finetuned
            missing = sorted(set(_named(base)) - set(_named(merged)))
            if missing:
                raise MechanismError(f"The fine-tuned model at {ref} lacks the base parameter '{missing[0]}'; it is "
                                     f"not a fine-tune of this base model.")
        dw, outside = _delta(base, merged, names, ref)
    return dw, outside, tuple(notes)


# ---------------------------------------------------------------------------------------------
# Putting it together
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CellMechanism:
    """Diagnostic (c)'s inputs for one cell: the signature, the claimed class, and notes."""

    signature: gates.MechanismSignature
    claimed_class: str
    notes: tuple[str, ...] = ()
    inputs: dict[str, Any] = field(default_factory=dict)


def _notes_for(outside: Sequence[str], notes: Sequence[str]) -> tuple[str, ...]:
    out = list(notes)
    if outside:
        shown = ", ".join(outside[:4]) + (" …" if len(outside) > 4 else "")
        out.append(f"the update also changes {len(outside)} parameter tensor(s) outside the slice ({shown}); "
                   f"ρ_AT sees only the slice")
    return tuple(out)


def mechanism_from_models(base, tokenizer, items: Sequence[CalibrationItem], slice_patterns: Sequence[str],
                          updates: dict[str, dict[str, Any]], *, claimed_class: str | dict[str, str],
                          model_type: str = "sequence-classification", max_length: int = 128, batch_size: int = 32,
                          task_framings: Sequence[str] = FRAMINGS, attack_framing: str = "eval",
                          tracking_uri: str | None = None) -> dict[str, CellMechanism]:
    """The Python entry point: ``{cell: CellMechanism}`` from an in-memory base model and tokenizer.

    ``updates`` maps cell -> ``{"adapter": path|URI|PeftModel}`` or ``{"finetuned": path|URI|model}``;
    ``claimed_class`` is one class for all cells or a mapping cell -> class. The gradients are
    computed once, on the base.
    """
    names = slice_names(base, slice_patterns)
    v_t, v_a = loss_gradients(base, tokenizer, items, names, model_type=model_type, max_length=max_length,
                              batch_size=batch_size, task_framings=task_framings, attack_framing=attack_framing)
    numel = dict((n, p.numel()) for n, p in base.named_parameters())
    segs = [(n, int(numel[n])) for n in names]
    out = {}
    for cell, upd in updates.items():
        cls = claimed_class.get(cell) if isinstance(claimed_class, dict) else claimed_class
        if cls not in gates.MECHANISM_CLASSES:
            raise MechanismError(f"The claimed class of cell '{cell}' must be 'shrinkage' or 'attack-targeted', not {cls!r}.")
        dw, outside, notes = update_vector(base, names, adapter=upd.get("adapter"), finetuned=upd.get("finetuned"),
                                           model_type=model_type, tracking_uri=tracking_uri)
        kind = "LoRA adapter (merged − base)" if upd.get("adapter") is not None else "full fine-tune (fine-tuned − base)"
        try:
            sig = gates.mechanism_signature(dw, v_t, v_a, names=segs, source=f"weights: {kind}")
        except StatsInputError as exc:
            raise MechanismError(f"Cell '{cell}': {exc}") from None
        out[cell] = CellMechanism(signature=sig, claimed_class=cls, notes=_notes_for(outside, notes),
                                  inputs={"slice_parameters": names, "n_calibration_items": len(items),
                                          "update": kind})
    return out


def compute_signatures(spec: MechanismSpec, *, tracking_uri: str | None = None) -> dict[str, CellMechanism]:
    """Diagnostic (c)'s inputs for every cell of ``spec``, from weights."""
    items = load_calibration(spec.calibration)
    with contextlib.ExitStack() as stack:
        base, d = _load_model(spec.base_model, spec.model_type, stack, tracking_uri, "base model")
        tokenizer = _load_tokenizer(spec.tokenizer or str(d), stack, tracking_uri)
        updates = {c: ({"adapter": u.adapter} if u.adapter else {"finetuned": u.finetuned}) for c, u in spec.cells.items()}
        return mechanism_from_models(
            base, tokenizer, items, spec.slice, updates, claimed_class={c: spec.claimed_for(c) for c in spec.cells},
            model_type=spec.model_type, max_length=spec.max_length, batch_size=spec.batch_size,
            task_framings=spec.task_framings, attack_framing=spec.attack_framing, tracking_uri=tracking_uri)


def read_alphas(path: str | Path, defense_cells: Sequence[str], *, claimed_class: str | None = None) -> dict[str, CellMechanism]:
    """α_T and α_A computed elsewhere (no weights shared), from JSON.

    Either ``{"cells": {CELL: {"alpha_T": …, "alpha_A": …, …}}, "claimed_class": …}`` or, with one
    defense cell, a flat ``{"alpha_T": …, "alpha_A": …}``. Optional per cell: ``dot_T``, ``dot_A``,
    ``norm_T``, ``norm_A``, ``norm_update``, ``claimed_class``, ``slice`` (informational). The
    claimed class comes from the cell, else the file, else ``claimed_class``.
    """
    p = Path(path)
    if not p.is_file():
        raise MechanismError(f"The α file {p} does not exist.")
    try:
        raw = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        raise MechanismError(f"The α file {p} is not valid JSON.") from None
    if not isinstance(raw, dict):
        raise MechanismError(f"The α file {p} must hold a JSON object.")
    if "cells" in raw:
        cells = raw["cells"]
        if not isinstance(cells, dict):
            raise MechanismError(f"'cells' in {p} must map cell names to α values.")
    elif "alpha_T" in raw:
        if len(defense_cells) != 1:
            raise MechanismError(f"The α file {p} gives one α pair; with several defense cells use 'cells'.")
        cells = {defense_cells[0]: raw}
    else:
        raise MechanismError(f"The α file {p} must give 'alpha_T' and 'alpha_A' (or 'cells').")
    out = {}
    for cell, v in cells.items():
        if cell not in defense_cells:
            raise MechanismError(f"The α file names cell '{cell}', which is not a --defense cell.")
        if not isinstance(v, dict) or "alpha_T" not in v or "alpha_A" not in v:
            raise MechanismError(f"Cell '{cell}' in {p} needs 'alpha_T' and 'alpha_A'.")
        cls = v.get("claimed_class") or raw.get("claimed_class") or claimed_class
        if cls is None:
            raise MechanismError(f"No claimed class for cell '{cell}': declare claimed_class in {p.name} or "
                                 f"--claimed-class.")
        if cls not in gates.MECHANISM_CLASSES:
            raise MechanismError(f"The claimed class of cell '{cell}' is '{cls}'; use 'shrinkage' or 'attack-targeted'.")
        try:
            sig = gates.signature_from_alphas(v["alpha_T"], v["alpha_A"], dot_T=v.get("dot_T"), dot_A=v.get("dot_A"),
                                           norm_T=v.get("norm_T"), norm_A=v.get("norm_A"),
                                           norm_update=v.get("norm_update"), source=f"given α ({p.name})")
        except StatsInputError as exc:
            raise MechanismError(f"Cell '{cell}' in {p.name}: {exc}") from None
        if not (math.isfinite(sig.alpha_T) and math.isfinite(sig.alpha_A)):
            raise MechanismError(f"Cell '{cell}' in {p.name}: alpha_T and alpha_A must be finite numbers.")
        out[str(cell)] = CellMechanism(signature=sig, claimed_class=cls, notes=(),
                                       inputs={"alphas_file": str(p), "slice": v.get("slice") or raw.get("slice")})
    return out
