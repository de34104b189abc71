"""Sentiment classification with the Hugging Face ``Trainer``: a tiny ``BertForSequenceClassification``
(hidden size 32, built from a ``BertConfig``), a word-level tokenizer trained in code on the
generated sentences, and a generated data set (filler words plus a few words of one sentiment;
the sentiment decides the label). Nothing is downloaded.

The Trainer reports to MLflow (``report_to=["mlflow"]``): its ``MLflowCallback`` honours
``$MLFLOW_TRACKING_URI``, ``$MLFLOW_EXPERIMENT_NAME`` and ``$MLFLOW_RUN_ID`` when they are set.

Run it alone, or sweep seeds:

    python examples/hf_trainer/train.py
    python examples/hf_trainer/train.py -m 'seed=range(6)'

with the recipe_audit plugin:

    python examples/hf_trainer/train.py -m 'seed=range(6)' \
        hydra/callbacks=recipe_audit hydra.callbacks.recipe_audit.metric=eval_accuracy

Metrics: ``eval_accuracy`` (on the validation sentences after every epoch; ``compute_metrics``
returns ``accuracy``), and once training is over, as most Trainer scripts do,
``trainer.evaluate(test, metric_key_prefix="test")`` (``test_accuracy``, ``test_loss``, logged by
the Trainer's MLflowCallback after it ended its run) and ``trainer.predict(test)``, whose share of
positive predictions the script logs itself with ``mlflow.log_metric("test_positive_rate", ...)``.
``crash_seed=N`` makes seed N raise halfway through training; ``collapse_seed=N`` makes seed N
predict a single class.
"""

import logging
import os
import random

import datasets
import hydra
import mlflow
import numpy as np
import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig
from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    DataCollatorWithPadding,
    PreTrainedTokenizerFast,
    Trainer,
    TrainerCallback,
    TrainingArguments,
    set_seed,
)

log = logging.getLogger(__name__)

POSITIVE = ["good", "great", "excellent", "lovely", "superb", "wonderful", "pleasant", "brilliant"]
NEGATIVE = ["bad", "awful", "terrible", "poor", "dreadful", "horrible", "nasty", "dismal"]
FILLER = ["the", "a", "movie", "film", "plot", "actor", "was", "is", "and", "really", "very", "quite",
          "story", "ending", "music", "scene", "it", "this", "that", "of", "with", "overall", "cast", "script"]
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def make_sentences(n: int, min_len: int, max_len: int, rng: random.Random) -> dict[str, list]:
    """Half positive, half negative: filler words with one to three words of the label's sentiment."""
    texts, labels = [], []
    for i in range(n):
        label = i % 2
        words = rng.choices(FILLER, k=rng.randint(min_len, max_len))
        for _ in range(rng.randint(1, 3)):
            words.insert(rng.randrange(len(words) + 1), rng.choice(POSITIVE if label else NEGATIVE))
        texts.append(" ".join(words))
        labels.append(label)
    order = list(range(n))
    rng.shuffle(order)
    return {"text": [texts[i] for i in order], "label": [labels[i] for i in order]}


def build_tokenizer(corpus: list[str]) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.train_from_iterator(corpus, trainers.WordLevelTrainer(special_tokens=SPECIALS, show_progress=False))
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", tok.token_to_id("[CLS]")),
                                                 ("[SEP]", tok.token_to_id("[SEP]"))])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]",
                                   cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")


def compute_metrics(eval_pred) -> dict[str, float]:
    logits, labels = eval_pred
    return {"accuracy": float((np.argmax(logits, axis=-1) == labels).mean())}


class CrashCallback(TrainerCallback):
    """Fault injection: raise once training reaches ``at_step`` (some losses are logged by then)."""

    def __init__(self, at_step: int, seed: int):
        self.at_step, self.seed = at_step, seed

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= self.at_step:
            raise RuntimeError(f"injected crash for seed {self.seed}")


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    datasets.disable_progress_bars()
    rng = random.Random(cfg.data.seed)
    raw = datasets.DatasetDict({
        "train": datasets.Dataset.from_dict(make_sentences(cfg.data.n_train, cfg.data.min_len, cfg.data.max_len, rng)),
        "validation": datasets.Dataset.from_dict(make_sentences(cfg.data.n_val, cfg.data.min_len, cfg.data.max_len, rng)),
        "test": datasets.Dataset.from_dict(make_sentences(cfg.data.n_test, cfg.data.min_len, cfg.data.max_len, rng)),
    })
    tokenizer = build_tokenizer(raw["train"]["text"])
    tokenized = raw.map(lambda batch: tokenizer(batch["text"]), batched=True, remove_columns=["text"])

    collapse = cfg.seed == cfg.collapse_seed
    training = dict(cfg.training)
    if collapse:
        training["learning_rate"] = 0.0  # sabotage: nothing is learned ...
    args = TrainingArguments(
        output_dir=os.path.join(HydraConfig.get().runtime.output_dir, "trainer"),
        seed=cfg.seed,
        eval_strategy="epoch",
        save_strategy="no",
        logging_strategy="steps",
        report_to=["mlflow"],
        use_cpu=True,
        disable_tqdm=True,
        **training,
    )

    set_seed(args.seed)  # before the model is built, so the seed also decides the initial weights
    model = BertForSequenceClassification(BertConfig(
        vocab_size=tokenizer.vocab_size, num_labels=2, max_position_embeddings=64,
        pad_token_id=tokenizer.pad_token_id, **cfg.model))
    if collapse:  # ... and the head always says class 0
        with torch.no_grad():
            model.classifier.weight.zero_()
            model.classifier.bias.copy_(torch.tensor([5.0, -5.0]))

    callbacks = []
    if cfg.seed == cfg.crash_seed:
        steps_per_epoch = -(-cfg.data.n_train // cfg.training.per_device_train_batch_size)
        callbacks.append(CrashCallback(steps_per_epoch * cfg.training.num_train_epochs // 2, cfg.seed))

    trainer = Trainer(model=model, args=args, train_dataset=tokenized["train"],
                      eval_dataset=tokenized["validation"], processing_class=tokenizer,
                      data_collator=DataCollatorWithPadding(tokenizer), compute_metrics=compute_metrics,
                      callbacks=callbacks)
    try:
        trainer.train()
    except BaseException:
        # The MLflow callback ends its run only in on_train_end; end it here on a failure so the next
        # job of a sweep in this process does not log into it.
        if mlflow.active_run() is not None:
            mlflow.end_run(status="FAILED")
        raise
    # after training: the held-out test set, and predictions (the MLflowCallback ended its run in on_train_end)
    test = trainer.evaluate(tokenized["test"], metric_key_prefix="test")
    predicted = trainer.predict(tokenized["test"]).predictions.argmax(axis=-1)
    mlflow.log_metric("test_positive_rate", float((predicted == 1).mean()))
    log.info("seed=%d test_accuracy=%.4f", cfg.seed, test["test_accuracy"])


if __name__ == "__main__":
    main()
