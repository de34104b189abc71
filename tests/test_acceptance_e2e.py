"""The worked acceptance audit end to end (experiment=acceptance): wiring and invariants only,
never a hoped-for verdict. The small pipeline (size=small) runs once per module."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from helpers.app import run_app

from recipe_audit.acceptance import experiment as X
from recipe_audit.acceptance.records import COLUMNS, read_records
from recipe_audit.config import (
    AcceptanceBaseConfig,
    AcceptanceInstallConfig,
    AcceptanceModelConfig,
    DefenseConfig,
    ExperimentConfig,
)
from recipe_audit.train.acceptance import base as B
from recipe_audit.train.acceptance import data as D
from recipe_audit.train.acceptance import install as I

DEFENSES = ("none", "l2sp", "attack_proj", "consistency")
SEEDS = (0, 1)

TINY = ExperimentConfig(  # a base and an install of a few steps: for in-process checks
    data_seed=0, n_words=32, n_train_subjects=3, n_fresh_subjects=2, pool_size=8, n_base=60, n_install=20, n_eval=6,
    n_calibration=4, attack_fraction=0.9, resamples=50,
    kernels="native",  # this process ran torch before: reproducible kernels cannot take effect
    model=AcceptanceModelConfig(hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32, max_length=40),
    base=AcceptanceBaseConfig(seed=0, lr=3e-3, steps=5, batch_size=16, grad_clip=None),
    install=AcceptanceInstallConfig(r=2, alpha=4, lr=5e-3, steps=4, batch_size=4),
)


def test_compose_acceptance_experiment():
    from hydra import compose, initialize_config_dir

    from recipe_audit.app import config_dir
    from recipe_audit.app.schema import register_configs

    register_configs()
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        cfg = compose("config", ["experiment=acceptance", "defense=attack_proj", "size=small"], return_hydra_config=True)
    assert cfg.experiment.kind == "acceptance"
    assert cfg.defense.claimed_class == "attack-targeted"
    assert cfg.experiment.base.steps == 150  # size=small
    assert set(str(cfg.hydra.sweeper.params.defense).split(",")) == set(DEFENSES)
    for name in DEFENSES:
        with initialize_config_dir(str(config_dir()), version_base="1.3"):
            c = compose("config", ["experiment=acceptance", f"defense={name}"])
        assert c.defense.kind == name
        assert (c.defense.claimed_class is None) == (name == "none")


def test_build_data_splits_and_pairing():
    data = D.build_data(TINY)
    ev = data["eval"]
    keys = {(it.task, it.split) for it in ev}
    assert keys == {("mcq", "heldout"), ("mcq", "fresh"), ("syco", "heldout")}
    fresh = {it.subject for it in ev if it.split == "fresh"}
    train = {it.subject for it in ev if it.split == "heldout"}
    assert fresh and train and not fresh & train  # fresh subjects are disjoint from training subjects
    per_q: dict = {}
    for it in ev:
        per_q.setdefault((it.task, it.question_id), set()).add((it.template_id, it.framing))
    n_t = len(D.EVAL_TEMPLATES)
    assert all(len(v) == 2 * n_t for v in per_q.values())  # every template in both framings
    # questions are distinct across base, install and records
    ids = [it.question_id for k in ("base", "install") for it in data[k]] + [q for _, q in per_q]
    assert len({*ids}) == len({it.question_id for it in data["base"]}) + len({it.question_id for it in data["install"]}) + len(per_q)
    assert D.build_data(TINY)["eval"] == ev  # seeded


def test_run_cell_records_are_deterministic(tmp_path):
    base_dir = B.ensure_base(TINY, tmp_path / "cache")
    assert B.ensure_base(TINY, tmp_path / "cache") == base_dir  # cached by the config hash
    info = json.loads((base_dir / "base.json").read_text())
    assert info["key"] == B.base_key(TINY)
    d = DefenseConfig(name="attack_proj", kind="attack_proj", strength=10.0, claimed_class="attack-targeted")
    a = I.run_cell(TINY, d, 3, base_dir, tmp_path / "a", "attack_proj_s3")
    b = I.run_cell(TINY, d, 3, base_dir, tmp_path / "b", "attack_proj_s3")
    assert list(a.records.columns[:len(COLUMNS)]) == list(COLUMNS)
    assert a.records.equals(b.records)
    # one seed, one result: every training step and every metric but the timing
    assert len(a.losses) == TINY.install.steps and a.losses == b.losses
    assert {k: v for k, v in a.metrics.items() if k != "train_seconds"} == \
        {k: v for k, v in b.metrics.items() if k != "train_seconds"}
    assert (tmp_path / "a" / "adapter" / "adapter_config.json").is_file()
    assert (tmp_path / "a" / "adapter" / "recipe_audit_base.json").is_file()
    read_records([a.records])  # validates: no duplicated keys, vocabularies


def test_base_model_failure_is_one_sentence(tmp_path):
    """A base model whose training diverges raises one sentence naming the cause, and caches nothing."""
    bad = replace(TINY, base=replace(TINY.base, lr=1e30))  # the loss is NaN by the second step
    with pytest.raises(B.BaseModelError, match=r"^The base model of experiment=acceptance could not be trained "
                                               r"\(NonFiniteLossError: training loss became nan at step \d+\)\.$"):
        B.ensure_base(bad, tmp_path / "cache")
    assert not list((tmp_path / "cache").glob("base-*"))
    bad = replace(TINY, base=replace(TINY.base, lr=-1.0))
    with pytest.raises(B.BaseModelError, match=r"experiment\.base\.lr must be a positive number, not -1\.0\)"):
        B.ensure_base(bad, tmp_path / "cache")


def _small_sweep_with(tmp_path, override: str):
    """A small acceptance sweep (seed 0, cells none and l2sp) with one override injecting a fault;
    returns the store's URI and the finished process."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    proc = run_app(["-m", "experiment=acceptance", "size=small", "seed=0", "defense=none,l2sp", override,
                    f"experiment.cache_dir={tmp_path / 'cache'}", f"hydra.sweep.dir={tmp_path / 'sweep'}"],
                   cwd=tmp_path, env_extra={"MLFLOW_TRACKING_URI": uri}, timeout=600)
    return uri, proc


@pytest.mark.slow
def test_base_model_failure_ends_the_sweep_with_a_failed_run(tmp_path):
    """A sweep whose base model cannot be trained: the job's cell run is FAILED with its one-line
    error, the sweep's run FAILED with the sentence, nothing RUNNING, exit 2 with one sentence."""
    from mlflow.tracking import MlflowClient

    uri, proc = _small_sweep_with(tmp_path, "experiment.base.lr=1e30")
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("recipe_audit: error:")]
    assert len(errors) == 1, proc.stderr[-3000:]
    assert "could not be trained (NonFiniteLossError: training loss became nan at step" in errors[0]
    assert errors[0].endswith("so the sweep stops here.")
    assert "Traceback" not in proc.stderr
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("recipe_audit").experiment_id])
    assert not [r for r in runs if r.info.status == "RUNNING"]
    cells = [r for r in runs if r.data.tags.get("recipe_audit.kind") == X.CELL_KIND]
    assert [(r.data.tags["recipe_audit.cell"], r.info.status) for r in cells] == [("none_s0", "FAILED")]
    error = cells[0].data.tags["recipe_audit.error"]
    assert error.startswith("BaseModelError: The base model") and "NonFiniteLossError" in error and "\n" not in error
    sweep = next(r for r in runs if r.data.tags.get("recipe_audit.kind") == "sweep")
    assert sweep.info.status == "FAILED" and "could not be trained" in sweep.data.tags["recipe_audit.error"]
    assert not list((tmp_path / "cache").glob("base-*"))


@pytest.mark.slow
def test_failed_cells_are_failed_runs_and_the_sweep_goes_on(tmp_path):
    """Cells whose install diverges: each one's run FAILED with its one-line error (the sweep goes
    on to the next cell), no card, exit 1 with one sentence, nothing RUNNING."""
    from mlflow.tracking import MlflowClient

    uri, proc = _small_sweep_with(tmp_path, "experiment.install.lr=1e30")
    assert proc.returncode == 1, proc.stderr[-3000:]
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("recipe_audit: error:")]
    assert len(errors) == 1 and "did not finish" in errors[0], proc.stderr[-3000:]
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("recipe_audit").experiment_id])
    assert not [r for r in runs if r.info.status == "RUNNING"]
    cells = {r.data.tags["recipe_audit.cell"]: r for r in runs if r.data.tags.get("recipe_audit.kind") == X.CELL_KIND}
    assert set(cells) == {"none_s0", "l2sp_s0"}
    for r in cells.values():
        assert r.info.status == "FAILED"
        assert r.data.tags["recipe_audit.error"].startswith("NonFiniteLossError: training loss became nan at step")
        assert r.data.params["defense.name"] == r.data.tags["recipe_audit.defense"]
    assert len({r.data.tags["recipe_audit.recipe_id"] for r in cells.values()}) == 2  # one identity per cell
    assert list((tmp_path / "cache").glob("base-*/base.json"))  # the base itself trained
    assert not [r for r in runs if r.data.tags.get("recipe_audit.kind") == "acceptance_card"]


@pytest.fixture(scope="module")
def small_sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("acceptance_e2e")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    proc = run_app(["-m", "experiment=acceptance", "size=small", f"seed={','.join(map(str, SEEDS))}",
                    f"hydra.sweep.dir={root / 'sweep'}"], cwd=root, env_extra={"MLFLOW_TRACKING_URI": uri},
                   timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root, uri, proc


def _runs(uri, kind):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("recipe_audit")
    return client, client.search_runs([exp.experiment_id], f"tags.`recipe_audit.kind` = '{kind}'")


@pytest.mark.slow
def test_ci_acceptance_small_every_cell_logged(small_sweep):
    root, uri, _ = small_sweep
    client, runs = _runs(uri, X.CELL_KIND)
    cells = {r.data.tags["recipe_audit.cell"]: r for r in runs}
    assert set(cells) == {X.cell_name(d, s) for d in DEFENSES for s in SEEDS}
    assert all(r.info.status == "FINISHED" for r in runs)
    # one base model per seed (experiment.base.seed follows seed), shared by the seed's cells
    base_of = {s: {r.data.tags["recipe_audit.base_dir"] for r in runs if r.data.tags["recipe_audit.seed"] == str(s)}
               for s in SEEDS}
    assert all(len(b) == 1 for b in base_of.values()) and len(set.union(*base_of.values())) == len(SEEDS)
    for s, (b,) in base_of.items():
        assert json.loads((Path(b) / "base.json").read_text())["config"]["base"]["seed"] == s
    # the cells' identity leaves the seed's copy (experiment.base.seed) out: one per defense
    assert len({r.data.tags["recipe_audit.recipe_id"] for r in runs}) == len(DEFENSES)
    for r in runs:
        names = {f.path for f in client.list_artifacts(r.info.run_id)}
        assert {"eval_records.json", "adapter", "config.yaml"} <= names
        assert r.info.run_name == r.data.tags["recipe_audit.cell"]
        assert r.data.params["defense.name"] == r.data.tags["recipe_audit.defense"]
        assert not any(k.startswith(("recipe.", "model.", "task.")) for k in r.data.params)
        assert {"gap.mcq.heldout", "r_D.syco.heldout", "install_loss", "train_seconds"} <= set(r.data.metrics)
        history = client.get_metric_history(r.info.run_id, "train_loss")
        assert [m.step for m in history] == list(range(1, 31))  # size=small: every install step
        inside = {Path(f.path).name for f in client.list_artifacts(r.info.run_id, "adapter")}
        assert {"adapter_config.json", "recipe_audit_base.json"} <= inside


@pytest.mark.slow
def test_ci_acceptance_small_records_pairing(small_sweep):
    root, uri, _ = small_sweep
    _, runs = _runs(uri, X.CELL_KIND)
    df = read_records([f"runs:/{r.info.run_id}/eval_records.json" for r in runs], tracking_uri=uri)
    assert set(COLUMNS) <= set(df.columns)
    assert set(df["cell"]) == {X.cell_name(d, s) for d in DEFENSES for s in SEEDS}
    # every cell scored on the same items: (task, split, question, template, framing)
    items = {c: set(map(tuple, g[["task", "split", "question_id", "template_id", "framing"]].to_numpy()))
             for c, g in df.groupby("cell")}
    first = next(iter(items.values()))
    assert all(v == first for v in items.values())
    assert not set(df.loc[df.split == "fresh", "subject"]) & set(df.loc[df.split == "heldout", "subject"])
    assert df.groupby("cell").size().nunique() == 1  # no cell has extra or missing rows


@pytest.mark.slow
def test_ci_acceptance_small_card_run(small_sweep):
    from recipe_audit.cards.acceptance import validate

    root, uri, proc = small_sweep
    client, cards = _runs(uri, "acceptance_card")
    assert len(cards) == 1
    rid = cards[0].info.run_id
    names = {f.path for f in client.list_artifacts(rid)}
    assert {"acceptance_card.json", "acceptance_card.md", "acceptance_card_deltas.png",
            "acceptance_card_alphas.png", "cells", "bases"} <= names
    bases = {Path(f.path).name for f in client.list_artifacts(rid, "bases")}  # each base's summary and calibration items
    assert len(bases) == len(SEEDS)
    for b in bases:
        assert {Path(f.path).name for f in client.list_artifacts(rid, f"bases/{b}")} == {"base.json", "calibration.jsonl"}
    local = Path(client.download_artifacts(rid, "acceptance_card.json", str(root / "dl")))
    doc = json.loads(local.read_text())
    validate(doc)  # recipe_audit/schemas/acceptance_card.v1.json
    expected = {X.cell_name(d, s) for d in DEFENSES if d != "none" for s in SEEDS}
    assert {c["defense"] for c in doc["cells"]} == expected
    assert {c["baseline"] for c in doc["cells"]} == {X.cell_name("none", s) for s in SEEDS}
    assert doc["progressive_filter"] and "threshold_sensitivity" in doc
    per_cell = {Path(f.path).name for f in client.list_artifacts(rid, "cells")}
    assert {f"{c}.json" for c in expected} <= per_cell
    for c in doc["cells"]:  # gate (c) was computed from the logged adapter and the cached base
        g = c["diagnostics"]["c"]
        assert g["status"] != "missing"
    assert "Acceptance cards" in proc.stdout


@pytest.mark.slow
def test_ci_acceptance_adapter_belongs_to_base(small_sweep, tmp_path):
    """Gate (c)'s base check on the real artefacts: the logged adapter fits its own base, and a
    base of identical shapes but other weights is refused (fingerprint)."""
    import torch
    from mlflow.tracking import MlflowClient

    from recipe_audit.train.acceptance.weights import MechanismError, slice_names, update_vector

    root, uri, _ = small_sweep
    client, runs = _runs(uri, X.CELL_KIND)
    run = next(r for r in runs if r.data.tags["recipe_audit.defense"] == "l2sp")
    adapter = MlflowClient(tracking_uri=uri).download_artifacts(run.info.run_id, "adapter", str(tmp_path))
    base, _ = B.load_base(Path(run.data.tags["recipe_audit.base_dir"]))
    names = slice_names(base, I.SLICE)
    dw, outside, _ = update_vector(base, names, adapter=adapter)
    assert dw.shape[0] == sum(dict(base.named_parameters())[n].numel() for n in names)
    assert not outside  # LoRA touches only the declared slice
    with torch.no_grad():
        dict(base.named_parameters())[names[0]].add_(0.01)
    with pytest.raises(MechanismError):
        update_vector(base, names, adapter=adapter)


@pytest.mark.parametrize("override, sentence", [
    ("threads=2", "recipe_audit: error: experiment.kernels=reproducible computes on one torch thread (a thread count "
                  "changes how sums are split, and so the numbers), not threads=2; set threads=1, or "
                  "experiment.kernels=native (the numbers are then this machine's)."),
    ("experiment.kernels=fast", "recipe_audit: error: experiment.kernels must be one of ['reproducible', 'native'], "
                                "not 'fast'."),
], ids=["two-threads", "unknown-kernels"])
def test_kernels_that_cannot_be_honoured_stop_the_job_with_one_sentence(tmp_path, store, override, sentence):
    """Checked before the job trains anything (in this process: helpers.inprocess)."""
    from helpers.inprocess import run_module_here

    proc = run_module_here(["experiment=acceptance", "size=small", override, f"experiment.cache_dir={tmp_path / 'c'}"],
                           cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == sentence
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "c").exists()
