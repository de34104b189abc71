"""One rerun: deterministic per seed, real models from local directories, files as tasks."""

from __future__ import annotations

import json

import pytest
from helpers.one_thread import one_torch_thread  # noqa: F401 (autouse: tiny models, one thread)

from recipe_audit.config import LoraConfig, ModelConfig, RecipeConfig, TaskConfig
from recipe_audit.train.loop import NonFiniteLossError, prepare_task, train_rerun
from recipe_audit.train.tasks import TaskError, build_task

TASK = TaskConfig(name="sentiment", kind="sentiment", options={"n_train": 240, "n_audit": 120})
BERT = ModelConfig(name="tiny_bert", kind="bert")
RECIPE = RecipeConfig(name="t", lr=3e-3, max_steps=15, batch_size=16)


def _run(seed, model=BERT, recipe=RECIPE, task=TASK):
    prepared = prepare_task(task, model)
    return train_rerun(seed, model, recipe, prepared, list(prepared.task.audits), progress=False)


def test_same_seed_same_metrics_other_seed_other_run():
    a, b, c = _run(3), _run(3), _run(4)
    assert a.audits == b.audits and a.train_loss == b.train_loss
    assert a.train_loss != c.train_loss
    assert a.steps == 15 and len(a.train_loss) == 15
    for score in a.audits.values():
        assert 0 <= score.accuracy <= 1 and 0.5 <= score.majority_rate <= 1
        assert 0.5 <= score.pred_mode_share <= 1


def test_the_prepared_task_is_built_once_for_its_task_and_tokenisation(monkeypatch):
    """The jobs of one process share the task built for their task config and model's tokeniser;
    another task config, tokeniser or length gets its own."""
    from recipe_audit.train import loop

    monkeypatch.setattr(loop, "_PREPARED", {})
    first = prepare_task(TASK, BERT)
    same = TaskConfig(name="sentiment", kind="sentiment", options={"n_audit": 120, "n_train": 240})
    assert prepare_task(same, ModelConfig(name="tiny_bert", kind="bert", hidden_size=32, dropout=0.3)) is first
    others = {
        "data_seed": (TaskConfig(name="sentiment", kind="sentiment", data_seed=1, options=TASK.options), BERT),
        "options": (TaskConfig(name="sentiment", kind="sentiment", options={"n_train": 200, "n_audit": 120}), BERT),
        "max_length": (TASK, ModelConfig(name="tiny_bert", kind="bert", max_length=8)),
        "model kind": (TASK, ModelConfig(name="tiny_neox", kind="gpt_neox")),
    }
    built = {what: prepare_task(t, m) for what, (t, m) in others.items()}
    assert len({id(p) for p in [first, *built.values()]}) == 5
    assert built["data_seed"].task.train != first.task.train
    assert len(built["options"].task.train) == 200 and len(first.task.train) == 240
    assert built["max_length"].train.input_ids.shape[1] == 8 < first.train.input_ids.shape[1]
    assert all(prepare_task(t, m) is built[what] for what, (t, m) in others.items())


def test_a_seed_trains_the_same_on_the_shared_task_as_on_its_own(monkeypatch):
    """Every seed is applied where it was: a seed trained after others on the process's shared task
    gives the same losses and scores, to the bit, as in a process that trains it alone."""
    from recipe_audit.train import loop

    monkeypatch.setattr(loop, "_PREPARED", {})
    after_others = [_run(s) for s in (0, 1)][1]
    monkeypatch.setattr(loop, "_PREPARED", {})
    alone = _run(1)
    assert alone.train_loss == after_others.train_loss and alone.audits == after_others.audits


def test_lora_decoder_trains_adapters_only():
    model = ModelConfig(name="tiny_neox", kind="gpt_neox")
    recipe = RecipeConfig(name="l", lr=3e-3, max_steps=5, batch_size=16,
                          lora=LoraConfig(enabled=True, target_modules=["query_key_value"],
                                          modules_to_save=["score"]))
    prepared = prepare_task(TASK, model)
    res = train_rerun(0, model, recipe, prepared, ["calibration"], progress=False, keep_model=True)
    names = [n for n, p in res.model.named_parameters() if p.requires_grad]
    assert names and all("lora_" in n or "score" in n for n in names)
    assert _run(0, model, recipe).audits["calibration"] == res.audits["calibration"]


def test_divergence_raises_non_finite():
    with pytest.raises(NonFiniteLossError, match="nan|inf"):
        _run(1, recipe=RecipeConfig(name="boom", lr=1e5, max_steps=400, batch_size=16))


def test_local_pretrained_directory(tmp_path):
    """``model.kind=pretrained`` loads a transformers checkpoint from a local path, offline."""
    import transformers as tf

    from recipe_audit.train.tokenizer import build_word_tokenizer

    data = build_task(TASK)
    tok = build_word_tokenizer(data.texts())
    cfg = tf.BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64, num_labels=2)
    tf.BertForSequenceClassification(cfg).save_pretrained(tmp_path / "ckpt")
    tok.save_pretrained(tmp_path / "ckpt")
    model = ModelConfig(name="local", kind="pretrained", name_or_path=str(tmp_path / "ckpt"))
    res = _run(0, model=model)
    assert set(res.audits) == set(data.audits)


def test_missing_local_model_is_one_sentence(tmp_path):
    from recipe_audit.train.models import ModelError

    model = ModelConfig(name="x", kind="pretrained", name_or_path=str(tmp_path / "nothing"))
    with pytest.raises(ModelError, match="Cannot load a tokenizer"):
        prepare_task(TASK, model)


def test_file_task_csv_and_jsonl(tmp_path):
    rows = [("good film", "pos"), ("bad film", "neg")] * 20
    (tmp_path / "train.csv").write_text("text,label\n" + "\n".join(f"{t},{y}" for t, y in rows))
    with (tmp_path / "cal.jsonl").open("w") as fh:
        for t, y in rows[:10]:
            fh.write(json.dumps({"text": t, "label": y}) + "\n")
    task = TaskConfig(name="mine", kind="files", options={
        "train": str(tmp_path / "train.csv"), "audits": {"calibration": str(tmp_path / "cal.jsonl")}})
    data = build_task(task)
    assert data.labels == ("neg", "pos") and len(data.train) == 40
    res = _run(0, task=task)
    assert set(res.audits) == {"calibration"}
    bad = TaskConfig(name="mine", kind="files", options={
        "train": str(tmp_path / "train.csv"), "audits": {"calibration": str(tmp_path / "nope.csv")}})
    with pytest.raises(TaskError, match="does not exist"):
        build_task(bad)
