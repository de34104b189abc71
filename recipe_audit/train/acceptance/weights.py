"""Diagnostic (c) from weights: base-model gradients on a declared parameter slice, and the
update ΔW of a defense cell (a peft LoRA adapter or a full fine-tune).

The losses, with ``CE(x, y)`` the cross-entropy of the model's answer distribution on prompt ``x``
against answer ``y``, averaged over the calibration items
(:mod:`recipe_audit.train.acceptance.calibration`):

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
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from recipe_audit.errors import first_line
from recipe_audit.store.artifacts import is_artifact_uri
from recipe_audit.train.acceptance.calibration import FRAMINGS, MODEL_TYPES, CalibrationItem, MechanismError

FINGERPRINT_FILE = "recipe_audit_base.json"


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
    if is_artifact_uri(ref):
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


def load_model(ref: str, model_type: str, stack, tracking_uri, what: str):
    """``(model, directory)``: the transformers model at ``ref`` (a directory or an MLflow artifact URI,
    downloaded into a folder ``stack`` removes); ``what`` names it in errors."""
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


def load_tokenizer(ref: str, stack, tracking_uri):
    """The tokenizer at ``ref`` (a directory or an MLflow artifact URI), with a pad token."""
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


def _at_least_float32(t):
    """``t`` in float32 when it is of a narrower float type (half precision), else as it is (float64 stays)."""
    import torch

    return t.to(torch.promote_types(t.dtype, torch.float32))


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
    logp = torch.log_softmax(_at_least_float32(logits[:, :-1]), dim=-1).gather(-1, ids[:, 1:].to(dev).unsqueeze(-1)).squeeze(-1)
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
                    (F.cross_entropy(_at_least_float32(logits), y, reduction="sum") / total).backward()
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
                own = getattr(base.config, "name_or_path", "") or ""  # transformers: the public property
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
                merged, d = load_model(ref, model_type, stack, tracking_uri, "fine-tuned model")
                _check_fingerprint(d, base, ref)
            else:
                ref, merged = "the in-memory fine-tuned model", finetuned
            missing = sorted(set(_named(base)) - set(_named(merged)))
            if missing:
                raise MechanismError(f"The fine-tuned model at {ref} lacks the base parameter '{missing[0]}'; it is "
                                     f"not a fine-tune of this base model.")
        dw, outside = _delta(base, merged, names, ref)
    return dw, outside, tuple(notes)
