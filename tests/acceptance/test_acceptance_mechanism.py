"""Diagnostic (c) from weights: gradients on a declared slice of the base model, ΔW from a peft
LoRA adapter or a full fine-tune, constructed updates, and the one-sentence errors (tiny models
built from config, no download)."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from helpers.acceptance_synth import calibration_items, records, tiny_bert, write_jsonl
from helpers.cli import run_cli
from helpers.fast_sqlite import no_sync_module  # noqa: F401 (autouse: its stores commit without a disk sync)
from helpers.one_thread import one_torch_thread  # noqa: F401 (autouse: tiny models, one thread)

from recipe_audit.acceptance import mechanism as mech
from recipe_audit.acceptance import mechanism_spec
from recipe_audit.stats import acceptance as gates
from recipe_audit.train.acceptance import weights

QV = ["bert.encoder.layer.*.attention.self.query.weight", "bert.encoder.layer.*.attention.self.value.weight"]
R, ALPHA = 2, 4


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A saved base (with tokenizer), a LoRA adapter of it (with fingerprint), a full fine-tune,
    calibration items, and records for two cells."""
    import peft
    import torch

    root = tmp_path_factory.mktemp("mech")
    base, tok = tiny_bert(seed=0)
    base.save_pretrained(root / "base")
    tok.save_pretrained(root / "base")
    pm = peft.get_peft_model(copy.deepcopy(base), peft.LoraConfig(
        task_type=peft.TaskType.SEQ_CLS, r=R, lora_alpha=ALPHA, target_modules=["query", "value"]))
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for n, p in pm.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    pm.save_pretrained(root / "adapter")
    weights.write_base_fingerprint(root / "adapter", base)
    ft = copy.deepcopy(base)
    with torch.no_grad():
        for n, p in ft.named_parameters():
            if "attention.self" in n:
                p.add_(torch.randn(p.shape, generator=g) * 0.01)
    ft.save_pretrained(root / "finetuned")
    write_jsonl(calibration_items(12), root / "calib.jsonl")
    df = records({"base": (0.4, 0.8), "def": (0.7, 0.8), "ft": (0.7, 0.8)}, n_questions=20, n_templates=2, seed=3)
    df.to_csv(root / "recs.csv", index=False)
    return {"root": root, "base": base, "tok": tok, "peft": pm, "ft": ft,
            "items": mech.load_calibration(root / "calib.jsonl")}


def _names(world, patterns=QV):
    return weights.slice_names(world["base"], patterns)


def test_lora_delta_is_b_a_scaling_on_the_slice(world):
    names = _names(world)
    assert len(names) == 4
    dw, outside, notes = weights.update_vector(world["base"], names, adapter=str(world["root"] / "adapter"))
    sd = dict(world["peft"].named_parameters())
    parts = []
    for n in names:
        mod = n.removesuffix(".weight")
        a = sd[f"base_model.model.{mod}.lora_A.default.weight"].detach().double()
        b = sd[f"base_model.model.{mod}.lora_B.default.weight"].detach().double()
        parts.append((b @ a * (ALPHA / R)).numpy().ravel())
    np.testing.assert_allclose(dw, np.concatenate(parts), rtol=1e-5, atol=1e-7)
    assert outside == () and notes == ()
    # the same from the in-memory PeftModel; the base is never modified
    dw2, _, _ = weights.update_vector(world["base"], names, adapter=world["peft"])
    np.testing.assert_allclose(dw, dw2, rtol=1e-6, atol=1e-8)


def test_changes_outside_the_slice_are_noted(world):
    names = _names(world, ["bert.encoder.layer.*.attention.self.query.weight"])
    _, outside, _ = weights.update_vector(world["base"], names, adapter=str(world["root"] / "adapter"))
    assert len(outside) == 2 and all("value" in n for n in outside)


def test_gradients_are_the_documented_losses(world):
    import torch
    import torch.nn.functional as F

    base, tok, items = world["base"], world["tok"], world["items"]
    names = _names(world)
    v_t, v_a = weights.loss_gradients(base, tok, items, names, batch_size=5)
    base.eval()
    params = dict(base.named_parameters())

    def grad(texts, labels):
        enc = tok(texts, padding=True, return_tensors="pt")
        enc.pop("token_type_ids", None) if "token_type_ids" not in enc else None
        loss = F.cross_entropy(base(**enc).logits, torch.tensor(labels))
        gs = torch.autograd.grad(loss, [params[n] for n in names])
        return np.concatenate([g.double().numpy().ravel() for g in gs])

    task = grad([i.eval_text for i in items] + [i.deploy_text for i in items], [i.label for i in items] * 2)
    attack = grad([i.eval_text for i in items], [i.attack_label for i in items])
    np.testing.assert_allclose(v_t, task, rtol=1e-4, atol=1e-9)
    np.testing.assert_allclose(v_a, attack, rtol=1e-4, atol=1e-9)
    assert all(p.requires_grad for p in base.parameters())  # flags restored


def _with_delta(base, names, dw):
    import torch

    ft = copy.deepcopy(base)
    p = dict(ft.named_parameters())
    start = 0
    with torch.no_grad():
        for n in names:
            k = p[n].numel()
            p[n].add_(torch.from_numpy(dw[start:start + k]).reshape(p[n].shape).to(p[n].dtype))
            start += k
    return ft


def test_constructed_updates_on_a_real_model(world):
    base, tok, items = world["base"], world["tok"], world["items"]
    names = _names(world)
    v_t, v_a = weights.loss_gradients(base, tok, items, names)
    orth = v_t - (v_t @ v_a) / (v_a @ v_a) * v_a  # orthogonal to v_A, aligned with v_T
    orth *= 1e-3 / np.linalg.norm(orth)
    out = mech.mechanism_from_models(
        base, tok, items, QV,
        {"orth": {"finetuned": _with_delta(base, names, orth)},
         "orth_x5": {"finetuned": _with_delta(base, names, 5 * orth)},
         "attack": {"finetuned": _with_delta(base, names, 1e-3 * v_a / np.linalg.norm(v_a))}},
        claimed_class="attack-targeted")
    s = out["orth"].signature
    assert s.alpha_T > 0 and abs(s.alpha_A) < 1e-3 * abs(s.alpha_T)
    assert gates.gate_c(s, "attack-targeted").status == gates.PASS
    assert out["orth_x5"].signature.rho == pytest.approx(s.rho, rel=0.05, abs=1e-4)  # float32 weights
    sa_ = out["attack"].signature  # along v_A: ρ = 1/|cos(v_T, v_A)| ≥ 1 → shrinkage
    assert sa_.rho >= 1 and gates.gate_c(sa_, "attack-targeted").signed_class == gates.SHRINKAGE


def test_full_finetune_from_disk(world):
    names = _names(world)
    dw, outside, _ = weights.update_vector(world["base"], names, finetuned=str(world["root"] / "finetuned"))
    ref = np.concatenate([(dict(world["ft"].named_parameters())[n] - dict(world["base"].named_parameters())[n])
                          .detach().double().numpy().ravel() for n in names])
    np.testing.assert_allclose(dw, ref, atol=1e-7)
    assert outside and all("attention.self" in n for n in outside)  # the key weights and biases changed too


def test_slice_naming_missing_parameters(world):
    with pytest.raises(mech.MechanismError, match="matches no parameter of the base model"):
        weights.slice_names(world["base"], ["gpt_neox.layers.*.attention.query_key_value.weight"])


def test_adapter_of_another_base_model(world, tmp_path):
    other, _ = tiny_bert(seed=0, hidden=48)
    names = weights.slice_names(other, QV)
    with pytest.raises(mech.MechanismError, match="another base model"):
        weights.update_vector(other, names, adapter=str(world["root"] / "adapter"))
    same_shape, _ = tiny_bert(seed=5)  # identical shapes, other weights: caught by the fingerprint
    with pytest.raises(mech.MechanismError, match="another base model"):
        weights.update_vector(same_shape, _names(world), adapter=str(world["root"] / "adapter"))
    with pytest.raises(mech.MechanismError, match="another base model"):
        weights.update_vector(other, names, finetuned=str(world["root"] / "finetuned"))
    with pytest.raises(mech.MechanismError, match="no peft adapter"):
        weights.update_vector(world["base"], _names(world), adapter=str(tmp_path))


def test_calibration_and_spec_errors(world, tmp_path):
    bad = tmp_path / "c.jsonl"
    write_jsonl([{"eval_text": "a", "deploy_text": "b", "label": 0}], bad)
    with pytest.raises(mech.MechanismError, match="attack_label"):
        mech.load_calibration(bad)
    write_jsonl([{"eval_text": "test", "deploy_text": "user", "label": 9, "attack_label": 0}], bad)
    with pytest.raises(mech.MechanismError, match="label 9, outside the model's 4 classes"):
        weights.loss_gradients(world["base"], world["tok"], mech.load_calibration(bad), _names(world))
    spec = tmp_path / "m.yaml"
    spec.write_text("base_model: b\ncalibration: c\nslice: [x]\nclaimed_class: shrinkage\ncells: {zz: {adapter: a}}\n")
    with pytest.raises(mech.MechanismError, match="'zz', which is not a --defense cell"):
        mechanism_spec.load_mechanism_spec(spec, defense_cells=["def"])
    spec.write_text("base_model: b\ncalibration: c\nslice: [x]\ncells: {def: {adapter: a}}\n")
    with pytest.raises(mech.MechanismError, match="no claimed class"):
        mechanism_spec.load_mechanism_spec(spec, defense_cells=["def"])
    spec.write_text("base_model: b\ncalibration: c\nslice: [x]\nclaimd_class: shrinkage\n")
    with pytest.raises(mech.MechanismError, match="unknown key"):
        mechanism_spec.load_mechanism_spec(spec)


def test_alphas_json(tmp_path):
    p = tmp_path / "a.json"
    p.write_text(json.dumps({"alpha_T": -2.0, "alpha_A": 1.0}))
    with pytest.raises(mech.MechanismError, match="No claimed class"):
        mech.read_alphas(p, ["def"])
    got = mech.read_alphas(p, ["def"], claimed_class="attack-targeted")
    assert got["def"].signature.rho == 0.5 and got["def"].claimed_class == "attack-targeted"
    p.write_text(json.dumps({"claimed_class": "shrinkage", "cells": {"d1": {"alpha_T": 1, "alpha_A": 1},
                                                                      "d2": {"alpha_T": 1, "alpha_A": 0.1,
                                                                             "claimed_class": "attack-targeted"}}}))
    got = mech.read_alphas(p, ["d1", "d2"])
    assert got["d1"].claimed_class == "shrinkage" and got["d2"].claimed_class == "attack-targeted"
    with pytest.raises(mech.MechanismError, match="not a --defense cell"):
        mech.read_alphas(p, ["d1"])


def _spec(world, tmp_path, slice_=QV, cells="{def: {adapter: ADAPTER}, ft: {finetuned: FT, claimed_class: attack-targeted}}"):
    r = world["root"]
    cells = cells.replace("ADAPTER", str(r / "adapter")).replace("FT", str(r / "finetuned"))
    path = tmp_path / "mechanism.yaml"
    path.write_text(f"base_model: {r / 'base'}\ncalibration: {r / 'calib.jsonl'}\nslice: {json.dumps(slice_)}\n"
                    f"claimed_class: shrinkage\ncells: {cells}\n")
    return path


def test_cli_with_weights(world, tmp_path, capsys):
    out = tmp_path / "card"
    rc, stdout, err = run_cli(["acceptance", "--records", str(world["root"] / "recs.csv"), "--defense", "def",
                               "--defense", "ft", "--baseline", "base",
                               "--mechanism", str(_spec(world, tmp_path)), "--resamples", "500",
                               "--out", str(out)], capsys)
    assert rc == 0, err
    doc = json.loads((out / "acceptance_card.json").read_text())
    assert (out / "acceptance_card_alphas.png").is_file() and (out / "acceptance_card_deltas.png").is_file()
    for cell in doc["cells"]:
        c = cell["diagnostics"]["c"]
        assert c["status"] in ("pass", "fail") and c["rho_AT"] > 0
        assert c["rho_AT"] == pytest.approx(abs(c["alpha_A"]) / abs(c["alpha_T"]))
        assert c["alpha_T"] == pytest.approx(c["dot_T"] / c["norm_v_T"])
        assert [b["boundary"] for b in c["by_boundary"]] == [0.5, 0.6, 0.7]
        assert len(c["inputs"]["slice_parameters"]) == 4
    assert doc["cells"][1]["diagnostics"]["c"]["claimed_class"] == "attack-targeted"
    assert doc["source"]["mechanism"]["kind"] == "weights"


@pytest.mark.parametrize("case, needle", [
    ("slice", "matches no parameter of the base model"),
    ("other-base", "another base model"),
])
def test_cli_bad_mechanism_inputs_write_no_card(world, tmp_path, capsys, case, needle):
    if case == "slice":
        spec = _spec(world, tmp_path, slice_=["bert.encoder.layer.*.attention.self.qkv.weight"],
                     cells="{def: {adapter: ADAPTER}}")
    else:
        other, tok = tiny_bert(seed=0, hidden=48)
        other.save_pretrained(tmp_path / "other")
        tok.save_pretrained(tmp_path / "other")
        spec = _spec(world, tmp_path, cells="{def: {adapter: ADAPTER}}")
        spec.write_text(spec.read_text().replace(str(world["root"] / "base"), str(tmp_path / "other")))
    card = tmp_path / "card.json"
    capsys.readouterr()  # drop the progress output of saving the other base
    rc, out, err = run_cli(["acceptance", "--records", str(world["root"] / "recs.csv"), "--defense", "def",
                            "--baseline", "base", "--mechanism", str(spec), "--resamples", "200",
                            "--json", str(card)], capsys)
    assert rc == 2 and needle in err and err.count("\n") == 1 and not out
    assert not card.exists()


def test_causal_lm_option_scoring(tmp_path):
    import torch
    import transformers as tf
    from helpers.acceptance_synth import tokenizer

    torch.manual_seed(0)
    tok = tokenizer()
    cfg = tf.GPTNeoXConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=64, max_position_embeddings=64, pad_token_id=tok.pad_token_id)
    base = tf.GPTNeoXForCausalLM(cfg)
    rows = [{"eval_text": "evaluation test : which color", "deploy_text": "user asks : which color",
             "options": json.dumps(["alpha", "beta", "gamma"]), "label": i % 3, "attack_label": (i + 1) % 3}
            for i in range(4)]
    write_jsonl(rows, tmp_path / "c.jsonl")
    items = mech.load_calibration(tmp_path / "c.jsonl")
    names = weights.slice_names(base, ["gpt_neox.layers.*.attention.query_key_value.weight"])
    v_t, v_a = weights.loss_gradients(base, tok, items, names, model_type="causal-lm")
    # by hand for the attack loss: option log-probabilities after the prompt, CE over options
    params = dict(base.named_parameters())
    losses = []
    for it in items:
        p_ids = tok(it.eval_text)["input_ids"]
        scores = []
        for opt in it.options:
            o_ids = tok(" " + opt, add_special_tokens=False)["input_ids"]
            ids = torch.tensor([p_ids + o_ids])
            logp = torch.log_softmax(base(input_ids=ids).logits[0, :-1], -1)
            scores.append(sum(logp[len(p_ids) - 1 + j, o] for j, o in enumerate(o_ids)))
        losses.append(torch.nn.functional.cross_entropy(torch.stack(scores)[None], torch.tensor([it.attack_label])))
    gs = torch.autograd.grad(torch.stack(losses).mean(), [params[n] for n in names])
    np.testing.assert_allclose(v_a, np.concatenate([g.double().numpy().ravel() for g in gs]), rtol=1e-4, atol=1e-8)
    assert np.linalg.norm(v_t) > 0


def test_models_from_mlflow_artifacts(world, store, tmp_path):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(store)
    run = client.create_run(client.create_experiment("models")).info.run_id
    client.log_artifacts(run, str(world["root"] / "base"), "base")
    client.log_artifacts(run, str(world["root"] / "adapter"), "adapter")
    client.set_terminated(run)
    remote = tmp_path / "remote.yaml"
    remote.write_text(f"base_model: runs:/{run}/base\ncalibration: {world['root'] / 'calib.jsonl'}\n"
                      f"slice: {json.dumps(QV)}\nclaimed_class: shrinkage\ncells: {{def: {{adapter: runs:/{run}/adapter}}}}\n")
    got = mech.compute_signatures(mechanism_spec.load_mechanism_spec(remote, defense_cells=["def"]), tracking_uri=store)
    local = mech.compute_signatures(mechanism_spec.load_mechanism_spec(_spec(world, tmp_path, cells="{def: {adapter: ADAPTER}}"),
                                                             defense_cells=["def"]))
    assert got["def"].signature.rho == pytest.approx(local["def"].signature.rho, rel=1e-9)
    bad = tmp_path / "bad.yaml"
    bad.write_text(remote.read_text().replace(f"runs:/{run}/adapter", f"runs:/{run}/nothing"))
    with pytest.raises(mech.MechanismError, match="cannot be fetched"):
        mech.compute_signatures(mechanism_spec.load_mechanism_spec(bad, defense_cells=["def"]), tracking_uri=store)


def test_python_api_with_in_memory_models(world):
    import pandas as pd

    from recipe_audit.acceptance.audit import AcceptanceError, AcceptanceRequest, run_acceptance

    got = mech.mechanism_from_models(world["base"], world["tok"], world["items"], QV, {"def": {"adapter": world["peft"]}},
                                     claimed_class="shrinkage")
    df = pd.read_csv(world["root"] / "recs.csv")
    req = AcceptanceRequest(defense=("def",), baseline=("base",), resamples=300)
    card = run_acceptance(req, records=df, mechanisms=got)
    assert card.cells[0].diagnostics.c.detail["rho_AT"] == pytest.approx(got["def"].signature.rho)
    doc = card.to_json()
    assert doc["diagnostics"]["c"]["status"] in ("pass", "fail")
    assert doc["diagnostics"]["c"]["rho_AT"] == pytest.approx(got["def"].signature.rho)
    assert doc["source"]["mechanism"] == {"kind": "in-memory"}
    with pytest.raises(AcceptanceError, match="not a defense cell"):
        run_acceptance(req, records=df, mechanisms={"zz": got["def"]})


SPEC_HEAD = "base_model: b\ncalibration: c\nslice: [x]\n"


@pytest.mark.parametrize("text, sentence", [
    ("- a\n", "The mechanism config SPEC must be a mapping of keys."),
    (SPEC_HEAD + "claimd_class: shrinkage\n", "The mechanism config SPEC has unknown key(s) ['claimd_class']; known: "),
    ("base_model: b\ncalibration: c\nslice: []\ncells: {def: {adapter: a}}\n",
     "The mechanism config SPEC must declare 'slice'."),
    ("base_model: [b\n", None),  # not YAML
    ("base_model: b\ncalibration: c\nslice: [1]\ncells: {def: {adapter: a}}\n",
     "The slice in SPEC must be a list of parameter-name patterns."),
    (SPEC_HEAD + "claimed_class: shrinkage\ncells: {def: {adapter: a, finetuned: f}}\n",
     "Cell 'def' in SPEC must give exactly one of 'adapter' and 'finetuned'."),
    (SPEC_HEAD + "claimed_class: shrinkage\n",
     "The mechanism config SPEC names no cell update (cells: {CELL: {adapter: PATH}})."),
    (SPEC_HEAD + "claimed_class: shrinkage\nmodel_type: t5\ncells: {def: {adapter: a}}\n",
     "model_type must be one of ['sequence-classification', 'causal-lm'], not 't5'."),
    (SPEC_HEAD + "claimed_class: shrinkage\ntask_framings: [eval, exam]\ncells: {def: {adapter: a}}\n",
     "task_framings and attack_framing must name 'eval' or 'deploy'."),
    (SPEC_HEAD + "claimed_class: shrinkage\nmax_length: 0\ncells: {def: {adapter: a}}\n",
     "max_length in SPEC must be a positive integer, not 0."),
    (SPEC_HEAD + "claimed_class: shrinkage\nbatch_size: true\ncells: {def: {adapter: a}}\n",
     "batch_size in SPEC must be a positive integer, not True."),
    (SPEC_HEAD + "claimed_class: wrong\ncells: {def: {adapter: a}}\n",
     "The claimed class of cell 'def' is 'wrong'; use 'shrinkage' or 'attack-targeted'."),
    (SPEC_HEAD + "cells: {def: {adapter: a}}\n",
     "The mechanism config declares no claimed class for cell 'def'; set claimed_class to 'shrinkage' or "
     "'attack-targeted'."),
])
def test_cli_bad_mechanism_spec_is_one_sentence_and_exit_2(tmp_path, capsys, text, sentence):
    """A mechanism config with a bad value stops the command before any model is loaded: the spec's
    own sentence on stderr, exit 2, no card."""
    records({"base": (0.4, 0.8), "def": (0.7, 0.8)}, n_questions=8, n_templates=2).to_csv(tmp_path / "r.csv", index=False)
    spec = tmp_path / "m.yaml"
    spec.write_text(text)
    rc, out, err = run_cli(["acceptance", "--records", str(tmp_path / "r.csv"), "--defense", "def", "--baseline", "base",
                            "--mechanism", str(spec), "--resamples", "50", "--json", str(tmp_path / "card.json")], capsys)
    assert rc == 2 and not out and err.count("\n") == 1, err
    if sentence is None:
        assert err == f"recipe-audit: error: The mechanism config {spec} is not valid YAML or JSON.\n"
    else:
        assert err.startswith("recipe-audit: error: " + sentence.replace("SPEC", str(spec))), err
    assert not (tmp_path / "card.json").exists()


def test_a_spec_built_in_python_is_checked_the_same_way():
    """The checks live in the spec itself: a MechanismSpec made in Python fails with the same sentence
    (without a file to name), and a good one is read-only."""
    good = {"base_model": "b", "calibration": "c", "slice": ("x",), "claimed_class": "shrinkage",
            "cells": {"def": mechanism_spec.CellUpdate(adapter="a")}}
    spec = mechanism_spec.MechanismSpec(**good)
    assert spec.claimed_for("def") == "shrinkage" and spec.max_length == 128
    with pytest.raises(TypeError):
        spec.cells["other"] = mechanism_spec.CellUpdate(adapter="b")
    for change, sentence in (({"max_length": 0}, "max_length must be a positive integer, not 0."),
                             ({"attack_framing": "exam"}, "task_framings and attack_framing must name"),
                             ({"slice": ()}, "The slice must be a list of parameter-name patterns."),
                             ({"cells": {}}, "The mechanism config names no cell update"),
                             ({"claimed_class": None}, "The mechanism config declares no claimed class for cell 'def'")):
        with pytest.raises(mech.MechanismError) as err:
            mechanism_spec.MechanismSpec(**{**good, **change})
        assert str(err.value).startswith(sentence) and "\n" not in str(err.value)
