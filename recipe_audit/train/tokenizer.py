"""A deterministic word-level tokenizer, built from a task's own text (no download)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
# the same split as tokenizers.pre_tokenizers.Whitespace
_WORD = re.compile(r"\w+|[^\w\s]+")


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def build_word_tokenizer(texts: Iterable[str], max_vocab: int = 30000):
    """Word-level ``PreTrainedTokenizerFast`` whose vocabulary is the specials followed by the
    words of ``texts`` by descending frequency, ties broken alphabetically: the same texts give
    the same ids on every machine. Pairs are encoded BERT-style: [CLS] a [SEP] b [SEP]."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    counts = Counter(w for t in texts for w in words(t))
    ranked = sorted(counts, key=lambda w: (-counts[w], w))[: max_vocab - len(SPECIALS)]
    vocab = {tok: i for i, tok in enumerate(SPECIALS + ranked)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
        sep_token="[SEP]", mask_token="[MASK]",
        # what the models are trained on (no token_type_ids), so a saved pipeline feeds the same
        model_input_names=["input_ids", "attention_mask"],
    )
