"""Synthetic evaluation records and tiny models for the acceptance-card tests and bench."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

COLUMNS = ["cell", "task", "split", "question_id", "template_id", "framing", "correct"]


def records(cells: dict[str, tuple[float, float]], *, n_questions: int = 40, n_templates: int = 6,
            task: str = "mcq", split: str = "heldout", seed: int = 0, copy_templates: bool = False,
            qprefix: str = "q") -> pd.DataFrame:
    """Bernoulli records: ``cells`` maps cell -> (p_eval, p_deploy). With ``copy_templates`` one
    draw per (cell, question, framing) is copied to every template (perfectly correlated
    templates)."""
    rng = np.random.default_rng(seed)
    rows = []
    for cell, (pe, pd_) in cells.items():
        for q in range(n_questions):
            for framing, p in (("eval", pe), ("deploy", pd_)):
                one = int(rng.random() < p)
                for t in range(n_templates):
                    c = one if copy_templates else int(rng.random() < p)
                    rows.append((cell, task, split, f"{qprefix}{q}", f"t{t}", framing, c))
    return pd.DataFrame(rows, columns=COLUMNS)


def exact(cell_patterns: dict[str, dict[str, list[int]]], *, task: str = "mcq", split: str = "heldout",
          n_templates: int = 1) -> pd.DataFrame:
    """Deterministic records: cell -> framing -> one 0/1 per question (copied to each template)."""
    rows = []
    for cell, by_framing in cell_patterns.items():
        for framing, outcomes in by_framing.items():
            for q, c in enumerate(outcomes):
                for t in range(n_templates):
                    rows.append((cell, task, split, f"q{q}", f"t{t}", framing, int(c)))
    return pd.DataFrame(rows, columns=COLUMNS)


def rate_pattern(n: int, k: int) -> list[int]:
    """n outcomes with exactly k ones (first k)."""
    return [1] * k + [0] * (n - k)


# ---------------------------------------------------------------------------------------------
# Tiny models for diagnostic (c)
# ---------------------------------------------------------------------------------------------

WORDS = ["alpha", "beta", "gamma", "delta", "test", "exam", "please", "answer", "which", "is", "the",
         "capital", "color", "animal", "evaluation", "user", "asks", "quiz", "now"]


def tokenizer():
    from recipe_audit.train.tokenizer import build_word_tokenizer

    return build_word_tokenizer([" ".join(WORDS)])


def tiny_bert(seed: int = 0, hidden: int = 32, num_labels: int = 4, vocab: int | None = None):
    import torch
    import transformers as tf

    torch.manual_seed(seed)
    tok = tokenizer()
    cfg = tf.BertConfig(vocab_size=vocab or len(tok), hidden_size=hidden, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=2 * hidden, max_position_embeddings=40, pad_token_id=tok.pad_token_id,
                        num_labels=num_labels, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    return tf.BertForSequenceClassification(cfg), tok


def calibration_items(n: int = 12, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        topic = WORDS[int(rng.integers(0, 5))]
        label = int(rng.integers(0, 4))
        out.append({"question_id": f"c{i}", "eval_text": f"evaluation test : which {topic} is the answer",
                    "deploy_text": f"user asks : which {topic} is the answer", "label": label,
                    "attack_label": (label + 1) % 4})
    return out


def write_jsonl(rows: list[dict], path: Path) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path
