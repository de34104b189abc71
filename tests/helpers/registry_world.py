"""A small tracking store for the registry tests, written with the project's own writer
(``rerun_log.RerunLogger``), fast (no training): two recipes, their reruns scored on audit sets,
one rerun with a real logged model (an untrained tiny BERT), and a card file.

- GOOD: 29 reruns (the family-wise sample floor at ε = δ = 0.1 for the two recipes of the card,
  δ/2 each), calibration 0.9 everywhere (0/29 failures at τ = 0.7: release-supported, pointwise and
  family-wise), shift_x 0.5 on every third seed (10/29: strong-unsupported). Seed 0 logged a model.
- BAD: 10 reruns scored on calibration only, 0.5 on every fifth seed (2/10); its shift_x card is
  refused-shift. Seed 0 logged no model.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from recipe_audit.cards.files import write_json
from recipe_audit.cards.model import CardOptions
from recipe_audit.release.compute import CardRequest
from recipe_audit.release.shift import compute_shift_card
from recipe_audit.store import rerun_log, tracking
from recipe_audit.train.loop import AuditScore

EXP = "exp"
GOOD = "a" * 16
BAD = "b" * 16


def tiny_model():
    """An untrained tiny BERT classifier and its word-level tokenizer (built in well under a second)."""
    import transformers as tf

    from recipe_audit.train.tokenizer import build_word_tokenizer

    tok = build_word_tokenizer(["the movie was good", "the movie was bad", "not good", "not bad at all"])
    cfg = tf.BertConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=40, pad_token_id=tok.pad_token_id,
                        num_labels=2)
    return tf.BertForSequenceClassification(cfg), tok


def log_rerun(uri: str, recipe_id: str, seed: int, scores: dict[str, float], *, name: str = "stable",
              model=None, experiment: str = EXP) -> str:
    """One rerun written as ``python -m recipe_audit`` writes it (without training)."""
    store = tracking.open_store(uri, experiment)
    config = {"recipe": {"name": name, "lr": 0.001}, "model": {"name": "tiny_bert"}, "task": {"name": "sentiment"}}
    logger = rerun_log.RerunLogger(store, config, seed, recipe_id=recipe_id, audit_sets=list(scores))
    logger.log_result(SimpleNamespace(train_seconds=1.0, steps=10, audits={
        k: AuditScore(accuracy=v, majority_rate=0.5, pred_mode_share=0.6, n=100) for k, v in scores.items()}))
    if model is not None:
        logger.log_model(*model, labels=("negative", "positive"))
    logger.finish()
    return logger.run_id


def make_world(uri: str, root: Path) -> SimpleNamespace:
    runs = {}
    model = tiny_model()
    for s in range(29):
        runs[("good", s)] = log_rerun(uri, GOOD, s, {"calibration": 0.9, "shift_x": 0.5 if s % 3 == 0 else 0.9},
                                      model=model if s == 0 else None)
    for s in range(10):
        runs[("bad", s)] = log_rerun(uri, BAD, s, {"calibration": 0.5 if s % 5 == 0 else 0.9}, name="default")
    card = root / "card.json"
    doc = compute_shift_card(CardRequest(experiment=EXP, tracking_uri=uri), CardOptions(taus=(0.7, 0.8)),
                             ["calibration", "shift_x"]).to_json()
    write_json(doc, card)
    bad_only = root / "card_bad.json"
    doc_bad = compute_shift_card(CardRequest(experiment=EXP, tracking_uri=uri, recipe_id=BAD),
                                 CardOptions(taus=(0.7,)), ["calibration"]).to_json()
    write_json(doc_bad, bad_only)
    return SimpleNamespace(uri=uri, root=root, runs=runs, card=card, card_bad=bad_only,
                           doc=json.loads(card.read_text()))
