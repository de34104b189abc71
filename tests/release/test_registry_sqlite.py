"""Cards on registered model versions, the release gate and verify, on the MLflow model registry
of a SQLite store (``recipe-audit attach / gate / verify``)."""

from __future__ import annotations

import json
import shutil

import pytest
from helpers.cli import run_cli
from helpers.fast_sqlite import no_sync_module  # noqa: F401 (autouse: its stores commit without a disk sync)
from helpers.one_thread import one_torch_thread  # noqa: F401 (autouse: tiny models, one thread)
from helpers.registry_world import BAD, EXP, GOOD, log_rerun, make_world
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

from recipe_audit import keys
from recipe_audit.release import registry
from recipe_audit.store.registry import ModelRegistry
from recipe_audit.store.tracking import use_tracking_uri


def _copy_db(src, dst):
    """A consistent copy of a SQLite store, its write-ahead log included (the file alone may miss
    the last commits)."""
    import sqlite3

    with sqlite3.connect(src) as a, sqlite3.connect(dst) as b:
        a.backup(b)
    a.close()
    b.close()


@pytest.fixture(scope="module")
def world(tmp_path_factory, migrated_mlflow_db):
    """The store every test starts from (built once, in a copy of the suite's empty tables; tests
    that change it work on a copy)."""
    root = tmp_path_factory.mktemp("world")
    shutil.copy(migrated_mlflow_db, root / "mlflow.db")
    return make_world(f"sqlite:///{root / 'mlflow.db'}", root)


@pytest.fixture
def copy(world, tmp_path, monkeypatch):
    """A private copy of the world's store (its artifacts stay where the world put them)."""
    _copy_db(world.root / "mlflow.db", tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)
    for name in ("card.json", "card_bad.json"):
        shutil.copy(world.root / name, tmp_path / name)
    yield world, uri, tmp_path
    import mlflow

    assert mlflow.active_run() is None


@pytest.fixture(scope="module")
def attached(world, tmp_path_factory):
    """A copy of the world with the GOOD recipe's logged model registered as 'clf' version 1
    (alias 'candidate') carrying the card file's cells of its recipe; tests only read it, or add
    what does not disturb the others."""
    from recipe_audit.release.card_files import load_card

    root = tmp_path_factory.mktemp("attached")
    _copy_db(world.root / "mlflow.db", root / "mlflow.db")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    registry.attach(uri, "clf", load_card(str(world.card)), run_id=world.runs[("good", 0)], set_alias="candidate")
    return uri


@pytest.fixture
def attached_copy(attached, copy):
    """A private copy of the attached store (``copy``'s, with version 1 of 'clf' carrying the card),
    for the tests that change what was attached."""
    world, uri, tmp = copy
    _copy_db(attached.removeprefix("sqlite:///"), tmp / "mlflow.db")
    return world, uri, tmp


@pytest.fixture
def in_tmp(world, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("card.json", "card_bad.json"):
        shutil.copy(world.root / name, tmp_path / name)
    return tmp_path


def _attach_from_run(uri, world, capsys, *extra):
    return run_cli(["attach", "--model-name", "clf", "--run-id", world.runs[("good", 0)],
                    "--card", "card.json", "--tracking-uri", uri, *extra], capsys)


def test_attach_registers_the_logged_model_and_tags_every_card(copy, capsys):
    world, uri, _ = copy
    rc, out, err = _attach_from_run(uri, world, capsys, "--set-alias", "candidate")
    assert rc == 0, err
    assert "registered as new version 1" in out
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    mv = client.get_model_version_by_alias("clf", "candidate")
    assert str(mv.version) == "1" and mv.run_id == world.runs[("good", 0)]
    cards = registry.attached_cards(mv.tags, uri)  # the fields beyond the tags, read from each card
    # the card file holds two recipes x two audit sets x two taus: the version's recipe's four attach
    assert sorted((f["audit_set"], float(f["tau"])) for f in cards.values()) == [
        ("calibration", 0.7), ("calibration", 0.8), ("shift_x", 0.7), ("shift_x", 0.8)]
    assert cards[keys.card_tag_stem("calibration", 0.7)]["verdict"] == "release-supported"
    stem = "recipe_audit.card.shift_x.tau_0.7"
    f = cards[stem]
    assert f["verdict"] == "strong-unsupported" and (f["n_reruns"], f["n_failures"]) == ("29", "10")
    assert f["recipe_id"] == GOOD and float(f["eps"]) == 0.1 and f["experiment"]
    # two tags per card: its summary (the first of its tags) and where the card is (its digest is
    # the card's own, read through the link); with the recipe, a card is three tags on a version
    assert sorted(k for k in mv.tags if k.startswith(stem)) == [stem, stem + ".card_uri"]
    assert len([k for k in mv.tags if k.startswith(keys.CARD_TAG_PREFIX)]) == 2 * 4
    run = client.get_run(mv.tags[stem + ".card_uri"].split("/")[1])  # the card's digest: its card run's
    assert f["card_digest"] == run.data.tags["recipe_audit.card_digest"] and len(f["card_digest"]) == 64
    assert mv.tags[stem] == f"strong-unsupported · 10/29 failed τ 0.7 · U {float(f['upper_bound']):.3f} > ε 0.1"
    assert mv.tags[keys.TAG_RECIPE_ID] == GOOD
    # the page reads top-down: the verdicts in one plain line (what the versions table shows), the
    # verdict table (spaced for MLflow's renderer), a link to each card run in the UI, then the card
    first, rest = mv.description.split("\n", 1)
    assert first.startswith("release-supported on calibration at τ 0.7 (0/29 failed, U ") and "|" not in first
    assert "; strong-unsupported on shift_x at τ 0.7 (10/29 failed, U " in first
    assert rest.startswith(registry.SECTION_MARKER + "\n\n| recipe cards (audit set)&nbsp;&nbsp; | τ&nbsp;&nbsp; |")
    assert "](#/experiments/" in mv.description
    assert mv.description.index("](#/experiments/") < mv.description.index("# Recipe card")
    assert len(mv.description) <= registry.MAX_DESCRIPTION
    # the card JSON sits in a card run beside the reruns, and reads back as a valid card
    card_run = mv.tags[stem + ".card_uri"].split("/")[1]
    run = client.get_run(card_run)
    assert run.data.tags[keys.TAG_KIND] == "card" and run.data.tags[registry.TAG_ATTACHED_TO] == "clf/1"
    # MLflow's own loader loads the registered model
    import mlflow

    with use_tracking_uri(uri):  # another test may have pinned MLflow's global URI
        pipe = mlflow.transformers.load_model("models:/clf@candidate")
    assert pipe("the movie was good")[0]["label"] in ("negative", "positive")


def test_gate_outcomes(attached, capsys):
    uri = attached
    gate = ["gate", "--model-name", "clf", "--tracking-uri", uri]
    rc, out, _ = run_cli([*gate, "--alias", "candidate", "--audit", "calibration", "--tau", "0.7"], capsys)
    assert rc == 0 and "PASS" in out and "verifies" in out
    for args, outcome in [(["--audit", "shift_x", "--tau", "0.7"], "unsupported"),  # a target audit the recipe fails
                          (["--audit", "shift_people", "--tau", "0.7"], "refused-shift"),  # no card for that audit
                          (["--audit", "calibration", "--tau", "0.9"], "no-card")]:
        rc, out, err = run_cli([*gate, "--version", "1", *args], capsys)
        assert rc == 1 and f"FAIL ({outcome})" in err and err.count("\n") == 1, (args, err)
    rc, out, _ = run_cli([*gate, "--version", "1", "--audit", "calibration", "--tau", "0.7", "--json"], capsys)
    res = json.loads(out)
    assert rc == 0 and res["passed"] is True
    assert {k: res["policy"][k] for k in ("tau", "metric", "higher_is_better", "max_eps", "max_delta")} == {
        "tau": 0.7, "metric": "accuracy/calibration", "higher_is_better": True, "max_eps": 0.1, "max_delta": 0.1}
    assert res["policy"]["from"]["tau"] == "flag" and res["policy"]["from"]["max_eps"] == "default"
    # what the gate recomputed over: every rerun of the recipe, in how many sweeps, deleted ones
    assert (res["evidence"]["n_reruns"], res["evidence"]["n_failures"], res["evidence"]["n_deleted"]) == (29, 0, 0)
    assert sorted(res["evidence"]["family"]) == sorted([GOOD, BAD])
    # the bar and the metric are the gate's: without them, one sentence, exit 2 (the card's are not read)
    for missing, needle in [(["--audit", "calibration"], "τ is the gate's to set"),
                            (["--tau", "0.7"], "The metric the release is judged on is the gate's")]:
        rc, _, err = run_cli([*gate, "--version", "1", *missing], capsys)
        assert rc == 2 and needle in err and err.count("\n") == 1, err
    # a version without a card
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    v1 = client.get_model_version("clf", "1")
    with use_tracking_uri(uri):  # MLflow resolves a models:/ source with the global URI
        v2 = client.create_model_version("clf", v1.source, run_id=v1.run_id)
    rc, _, err = run_cli([*gate, "--version", str(v2.version), "--audit", "calibration", "--tau", "0.7"], capsys)
    assert rc == 1 and "FAIL (no-card)" in err and "carries no recipe card" in err


def test_gate_fails_when_the_store_changed(attached_copy, capsys):
    world, uri, _ = attached_copy
    client = MlflowClient(tracking_uri=uri)
    client.log_batch(world.runs[("good", 7)], metrics=[Metric("accuracy/calibration", 0.4, 0, 99)])
    rc, _, err = run_cli(["gate", "--model-name", "clf", "--version", "1", "--audit", "calibration", "--tau", "0.7",
                          "--tracking-uri", uri], capsys)
    # the gate's own recomputation counts the value the store holds now: seed 7 fails
    assert rc == 1 and "FAIL (unsupported)" in err and "failing seeds: 7" in err and err.count("\n") == 1


def test_edited_version_tags_do_not_change_the_gate(attached_copy, capsys):
    world, uri, _ = attached_copy
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    client.set_model_version_tag("clf", "1", "recipe_audit.card.shift_x.tau_0.7.verdict", "release-supported")
    client.set_model_version_tag("clf", "1", "recipe_audit.card.shift_x.tau_0.7.family_verdict", "release-supported")
    rc, _, err = run_cli(["gate", "--model-name", "clf", "--version", "1", "--audit", "shift_x",
                          "--tau", "0.7", "--tracking-uri", uri], capsys)
    assert rc == 1 and "FAIL (unsupported)" in err and "10/29 failed" in err, err


def test_several_cards_from_several_attaches(copy, capsys):
    """Attach to an existing version, one audit set at a time; the same (audit, τ) replaces."""
    world, uri, _ = copy
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    assert _attach_from_run(uri, world, capsys, "--audit", "calibration", "--tau", "0.7")[0] == 0
    assert set(registry.attached_cards(client.get_model_version("clf", "1").tags)) == {
        "recipe_audit.card.calibration.tau_0.7"}
    base = ["attach", "--model-name", "clf", "--version", "1", "--card", "card.json", "--tracking-uri", uri]
    assert run_cli([*base, "--audit", "shift_x"], capsys)[0] == 0
    assert run_cli([*base, "--audit", "calibration", "--tau", "0.7"], capsys)[0] == 0
    mv = client.get_model_version("clf", "1")
    assert len(registry.attached_cards(mv.tags)) == 3
    assert mv.description.count(registry.SECTION_MARKER) == 1 and mv.description.count("| recipe cards (audit set)") == 1
    # text a person wrote above the cards' section stays; the section is rewritten below it
    client.update_model_version("clf", "1", description="Owner: team A.\n\n" + mv.description)
    assert run_cli([*base, "--audit", "shift_x"], capsys)[0] == 0
    desc = client.get_model_version("clf", "1").description
    assert desc.startswith("Owner: team A.\n\nrelease-supported on calibration at τ 0.7 (")
    assert desc.count("Owner") == 1 and desc.count(registry.SECTION_MARKER) == 1
    # the registered model's one verdict tag (what the registered-models list shows): the card attached last
    verdict = client.get_registered_model("clf").tags[registry.TAG_MODEL_VERDICT]
    assert verdict.startswith("strong-unsupported · 10/29 failed τ 0.7 · U ") and verdict.endswith(" · version 1")
    assert "calibration" not in verdict

    # a version attached before kept every field as a tag: attaching again leaves two per card
    tags = client.get_model_version("clf", "1").tags
    stem = keys.card_tag_stem("shift_x", 0.7)
    legacy = {**registry.attached_cards(tags, uri)[stem], "attached": "2026-11-30T00:00:00+00:00"}
    for name, value in legacy.items():
        client.set_model_version_tag("clf", "1", f"{stem}.{name}", value)
    assert registry.attached_cards(client.get_model_version("clf", "1").tags)[stem]["verdict"] == legacy["verdict"]
    assert run_cli([*base, "--audit", "shift_x", "--tau", "0.7"], capsys)[0] == 0
    tags = client.get_model_version("clf", "1").tags
    assert sorted(k for k in tags if k.startswith(stem)) == [stem, stem + ".card_uri"]  # the old fields gone


def test_a_failed_attach_to_a_version_restores_the_models_verdict(copy, capsys, monkeypatch):
    world, uri, _ = copy
    from recipe_audit.release.card_files import load_card

    assert _attach_from_run(uri, world, capsys, "--audit", "shift_x", "--tau", "0.7")[0] == 0
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    before = client.get_registered_model("clf").tags[registry.TAG_MODEL_VERDICT]
    tags_before = client.get_model_version("clf", "1").tags

    def boom(self, *a, **kw):
        raise RuntimeError("registry went away")

    monkeypatch.setattr(MlflowClient, "set_registered_model_alias", boom)  # the last write of an attach
    with pytest.raises(registry.RegistryError, match="failed and was undone"):
        registry.attach(uri, "clf", load_card("card.json"), version="1", audits=["calibration"], taus=[0.7],
                        set_alias="candidate")
    assert client.get_registered_model("clf").tags[registry.TAG_MODEL_VERDICT] == before
    assert client.get_model_version("clf", "1").tags == tags_before


@pytest.mark.parametrize("args, needle", [
    (["gate", "--model-name", "nope", "--version", "1", "--audit", "calibration", "--tau", "0.7"],
     "no registered model named 'nope'"),
    (["gate", "--model-name", "clf", "--version", "9", "--audit", "calibration", "--tau", "0.7"], "has no version 9"),
    (["gate", "--model-name", "clf", "--alias", "prod", "--audit", "calibration", "--tau", "0.7"],
     "has no alias 'prod'"),
    (["gate", "--model-name", "clf", "--version", "1", "--audit", "calibration", "--tau", "0.7", "--policy",
      "notjson.txt"], "has unknown key(s) verdict"),
    (["gate", "--model-name", "clf", "--version", "1", "--audit", "calibration", "--tau", "0.7", "--max-eps", "0.5",
      "--max-delta", "0.5"], "max_delta (--max-delta) must lie strictly between 0 and 0.5"),
    (["attach", "--model-name", "clf", "--version", "9", "--card", "card.json"], "has no version 9"),
    (["attach", "--model-name", "clf", "--version", "1", "--card", "missing.json"], "no card file"),
    (["attach", "--model-name", "clf", "--version", "1", "--card", "notacard.json"], "is not a recipe card"),
    (["attach", "--model-name", "clf", "--version", "1", "--card", "notjson.txt"], "not a JSON document"),
    (["attach", "--model-name", "clf", "--version", "1", "--card", "broken.json"], "Not a valid recipe card"),
    (["attach", "--model-name", "clf", "--version", "1", "--card", "card_bad.json"], "card is of recipe"),
    (["attach", "--model-name", "clf", "--version", "1", "--card", "card.json", "--audit", "shift_q"],
     "no cell for audit set"),
    (["attach", "--model-name", "clf", "--version", "1", "--card", "card.json", "--recipe-id", BAD],
     "is not the recipe of"),
    (["attach", "--model-name", "new", "--run-id", "BADRUN", "--card", "card.json"], "logged no model"),
    (["attach", "--model-name", "new", "--run-id", "0" * 32, "--card", "card.json"], "no run"),
    (["verify", "notacard.json"], "is not a recipe card"),
    (["gate", "--model-name", "clf", "--version", "1", "--audit", "calibration", "--tau", "0.7", "--tracking-uri",
      "sqlite:////no/such/mlflow.db"],
     "no tracking store at"),
    (["verify", "runs:/" + "0" * 32 + "/card.json"], "Cannot read a card"),
])
def test_bad_input_is_one_sentence_and_writes_nothing(world, attached, in_tmp, capsys, args, needle):
    uri, tmp = attached, in_tmp
    (tmp / "notacard.json").write_text(json.dumps({"kind": "something", "cells": []}))
    (tmp / "notjson.txt").write_text("verdict: release-supported\n")
    broken = json.loads((tmp / "card.json").read_text())
    broken["cells"][0]["verdict"] = "ship-it"
    (tmp / "broken.json").write_text(json.dumps(broken))
    args = [a.replace("BADRUN", world.runs[("bad", 0)]) for a in args]
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    def state():
        exp = client.get_experiment_by_name(EXP).experiment_id
        mv = client.get_model_version("clf", "1")
        return (mv.tags, mv.description, len(client.search_runs([exp], max_results=1000)),
                [(m.name, len(client.search_model_versions(f"name = '{m.name}'")))
                 for m in client.search_registered_models()])

    before = state()
    rc, out, err = run_cli(args if "--tracking-uri" in args else [*args, "--tracking-uri", uri], capsys)
    assert rc == 2 and needle in err and err.count("\n") == 1 and "Traceback" not in err, err
    assert state() == before


def test_a_failed_attach_is_undone(copy, monkeypatch):
    world, uri, _ = copy
    from recipe_audit.release.card_files import load_card

    doc = load_card("card.json")

    def boom(self, *a, **kw):
        raise RuntimeError("registry went away")

    monkeypatch.setattr(MlflowClient, "update_model_version", boom)
    with pytest.raises(registry.RegistryError, match="failed and was undone: registry went away"):
        registry.attach(uri, "clf", doc, run_id=world.runs[("good", 0)])
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    assert not client.search_registered_models()
    exp = client.get_experiment_by_name(EXP).experiment_id
    assert not client.search_runs([exp], "tags.`recipe_audit.kind` = 'card'")


def test_verify_says_what_changed(copy, capsys):
    world, uri, tmp = copy
    rc, out, _ = run_cli(["verify", "card.json", "--tracking-uri", uri], capsys)
    assert rc == 0 and "verifies" in out
    # hand-edited: a verdict, a listed metric, the shift table
    for edit, needle in [(lambda d: d["cells"][2].update(verdict="release-supported"), "hand-edited"),
                         (lambda d: d["cells"][0]["reruns"][3].update(value=0.95), "do not match their digest"),
                         (lambda d: d["shift"]["rows"][0]["audits"][1].update(verdict="release-supported"),
                          "shift table")]:
        d = json.loads((tmp / "card.json").read_text())
        edit(d)
        (tmp / "edited.json").write_text(json.dumps(d))
        rc, _, err = run_cli(["verify", "edited.json", "--tracking-uri", uri], capsys)
        assert rc == 1 and "hand-edited" in err and needle in err, err
    client = MlflowClient(tracking_uri=uri)
    # a changed metric
    client.log_batch(world.runs[("good", 4)], metrics=[Metric("accuracy/shift_x", 0.1, 0, 99)])
    rc, out, _ = run_cli(["verify", "card.json", "--tracking-uri", uri, "--json"], capsys)
    res = json.loads(out)
    assert rc == 1 and res["kinds"] == ["metric-changed"] and "seed 4" in res["summary"] and "0.9 -> 0.1" in \
        res["summary"]
    # an added rerun and a removed one
    log_rerun(uri, GOOD, 30, {"calibration": 0.9, "shift_x": 0.9})
    client.delete_run(world.runs[("bad", 3)])
    rc, out, _ = run_cli(["verify", "card.json", "--tracking-uri", uri, "--json"], capsys)
    res = json.loads(out)
    assert rc == 1 and {"rerun-added", "rerun-removed"} <= set(res["kinds"])
    assert any("seed 30" in f["message"] for f in res["findings"] if f["kind"] == "rerun-added")
    assert any("seed 3" in f["message"] for f in res["findings"] if f["kind"] == "rerun-removed")
    # every rerun of a recipe gone: its card says so, cell by cell
    for s in range(10):
        client.delete_run(world.runs[("bad", s)])
    rc, out, _ = run_cli(["verify", "card_bad.json", "--tracking-uri", uri, "--json"], capsys)
    res = json.loads(out)
    assert rc == 1 and res["kinds"] == ["rerun-removed"] and "no rerun" in res["summary"]


# ------------------------------------------------------------------------------------------
# re-run seeds, the release policy, attach's own check, the card's files, a user's own metric


def _artifact_dir(client, run_id):
    from pathlib import Path
    from urllib.parse import unquote, urlparse

    uri = client.get_run(run_id).info.artifact_uri
    return Path(unquote(urlparse(uri).path)) if uri.startswith("file:") else Path(uri)


def _card_file(uri, path, recipe_id, eps=0.1, delta=0.1, taus=(0.7,)):
    from recipe_audit.cards.files import write_json
    from recipe_audit.cards.model import CardOptions
    from recipe_audit.release.compute import CardRequest, compute_cards

    doc = compute_cards(CardRequest(experiment=EXP, tracking_uri=uri, recipe_id=recipe_id),
                        CardOptions(taus=taus, eps=eps, delta=delta))
    write_json(doc, path)
    return doc


def _nothing_attached(uri):
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    exp = client.get_experiment_by_name(EXP).experiment_id
    return (not client.search_registered_models()
            and not client.search_runs([exp], "tags.`recipe_audit.kind` = 'card'"))


def test_seed_shopping_does_not_pass_the_gate(copy, capsys):
    """Seed 3 finished at 0.4, a later rerun of seed 3 at 0.95: the seed fails, 1/25, unsupported."""
    from helpers.registry_world import tiny_model
    from scipy import stats as sps

    world, uri, tmp = copy
    shop = "c" * 16
    runs = {s: log_rerun(uri, shop, s, {"calibration": 0.4 if s == 3 else 0.9}, name="shop",
                         model=tiny_model() if s == 0 else None) for s in range(25)}
    again = log_rerun(uri, shop, 3, {"calibration": 0.95}, name="shop")
    doc = _card_file(uri, tmp / "shop.json", shop)
    (e,) = doc["cells"]
    assert (e["n_failures"], e["n_reruns"], e["verdict"]) == (1, 25, "unsupported")
    assert e["upper_bound"] == pytest.approx(sps.beta.ppf(0.9, 2, 24), rel=1e-12)
    (dup,) = e["duplicates"]
    assert dup["run_ids"] == [runs[3], again] and dup["decided_by"] == runs[3] and dup["disagree"]
    rc, out, err = run_cli(["attach", "--model-name", "shop", "--run-id", runs[0], "--card", "shop.json",
                            "--tracking-uri", uri], capsys)
    assert rc == 0, err
    gate = ["gate", "--model-name", "shop", "--version", "1", "--audit", "calibration", "--tau", "0.7",
            "--tracking-uri", uri]
    rc, _, err = run_cli([*gate, "--pointwise"], capsys)
    assert rc == 1 and "FAIL (unsupported)" in err and "1/25 failed" in err and err.count("\n") == 1
    # by default the gate reads the family-wise verdict: the experiment holds M = 3 recipe identities
    rc, _, err = run_cli(gate, capsys)
    assert rc == 1 and "FAIL (insufficient-evidence)" in err and "M = 3" in err and err.count("\n") == 1


def test_the_gate_refuses_a_card_looser_than_the_release_policy(copy, capsys):
    from helpers.registry_world import tiny_model

    world, uri, tmp = copy
    loose = "d" * 16
    runs = {s: log_rerun(uri, loose, s, {"calibration": 0.9}, name="loose",
                         model=tiny_model() if s == 0 else None) for s in range(4)}
    (e,) = _card_file(uri, tmp / "loose.json", loose, eps=0.5, delta=0.45)["cells"]
    assert (e["n_reruns"], e["verdict"]) == (4, "release-supported")
    assert run_cli(["attach", "--model-name", "loose", "--run-id", runs[0], "--card", "loose.json",
                    "--tracking-uri", uri], capsys)[0] == 0
    gate = ["gate", "--model-name", "loose", "--version", "1", "--audit", "calibration", "--tau", "0.7",
            "--tracking-uri", uri]
    rc, _, err = run_cli(gate, capsys)
    assert rc == 1 and "FAIL (looser-than-policy)" in err and err.count("\n") == 1
    assert "ε = 0.5 > 0.1; δ = 0.45 > 0.1" in err
    rc, _, err = run_cli([*gate, "--max-eps", "0.5", "--max-delta", "0.4"], capsys)
    assert rc == 1 and "δ = 0.45 > 0.4" in err and "ε = 0.5 >" not in err
    rc, out, err = run_cli([*gate, "--max-eps", "0.5", "--max-delta", "0.45"], capsys)
    assert rc == 0 and "PASS" in out, err
    for bad, needle in [(["--max-delta", "0.5"], "max_delta (--max-delta) must lie strictly between 0 and 0.5"),
                        (["--max-eps", "0"], "max_eps (--max-eps) must lie strictly between 0 and 1"),
                        (["--max-eps", "abc"], "'abc' is not a number")]:
        rc, _, err = run_cli([*gate, *bad], capsys)
        assert rc == 2 and needle in err and err.count("\n") == 1, (bad, err)
    # the registered model's tags (writable by whoever attaches) no longer loosen the policy
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    client.set_registered_model_tag("loose", "recipe_audit.policy.max_eps", "0.5")
    client.set_registered_model_tag("loose", "recipe_audit.policy.max_delta", "0.45")
    rc, _, err = run_cli(gate, capsys)
    assert rc == 1 and "FAIL (looser-than-policy)" in err and "ε = 0.5 > 0.1" in err
    # a policy file kept with the code: the same bar; the command line's options win over it
    (tmp / "release_policy.yaml").write_text("audit: calibration\ntau: 0.7\nmax_eps: 0.5\nmax_delta: 0.45\n")
    pol = ["gate", "--model-name", "loose", "--version", "1", "--policy", "release_policy.yaml", "--tracking-uri", uri]
    rc, out, err = run_cli([*pol, "--json"], capsys)
    assert rc == 0 and json.loads(out)["policy"]["from"]["max_eps"] == "policy file release_policy.yaml", err
    rc, _, err = run_cli([*pol, "--max-eps", "0.2"], capsys)
    assert rc == 1 and "looser-than-policy" in err and "ε = 0.5 > 0.2" in err
    (tmp / "bad_policy.yaml").write_text("tau: 0.7\naudit: calibration\nmax_epsilon: 0.5\n")
    rc, _, err = run_cli(["gate", "--model-name", "loose", "--version", "1", "--policy", "bad_policy.yaml",
                          "--tracking-uri", uri], capsys)
    assert rc == 2 and "unknown key(s) max_epsilon" in err and err.count("\n") == 1


def test_attach_refuses_a_card_that_does_not_verify(copy, capsys):
    from recipe_audit.cards.digest import legacy_document_digest, seal

    world, uri, tmp = copy
    card = json.loads((tmp / "card.json").read_text())
    i = next(i for i, e in enumerate(card["cells"]) if e["recipe_id"] == GOOD and e["audit_set"] == "shift_x")
    redigested = json.loads(json.dumps(card))
    redigested["cells"][i]["verdict"] = "release-supported"  # and the shift table to match, re-digested
    from recipe_audit.cards.document import RecipeCard
    from recipe_audit.cards.shift import shift_section

    redigested["shift"] = shift_section(RecipeCard.from_json(redigested).cells, redigested["shift"]["audits"])
    (tmp / "redigested.json").write_text(json.dumps(seal(redigested)))
    summary = json.loads(json.dumps(card))
    summary["cells"][0]["recipe_summary"] = "tested by QA"
    (tmp / "summary.json").write_text(json.dumps(summary))
    old = {k: v for k, v in card.items() if k not in ("digest_scheme", "content_digest")}
    old["schema_version"] = "1.0"
    old["digest"] = legacy_document_digest(old)
    (tmp / "old.json").write_text(json.dumps(old))
    for name, needle in [("redigested.json", "does not recompute from the tracking store (hand-edited"),
                         ("summary.json", "it does not verify (hand-edited: the card's content does not match"),
                         ("old.json", "old-digest: the card was written by an earlier recipe_audit")]:
        rc, out, err = run_cli(["attach", "--model-name", "clf", "--run-id", world.runs[("good", 0)],
                                "--card", name, "--tracking-uri", uri], capsys)
        assert rc == 2 and needle in err and "was not attached" in err and err.count("\n") == 1, (name, err)
        assert _nothing_attached(uri)
    rc, _, err = run_cli(["verify", "old.json", "--tracking-uri", uri], capsys)
    assert rc == 1 and "old-digest" in err and "attach it again" in err


def test_editing_a_card_in_the_artifact_store_fails_gate_and_verify(copy, capsys):
    import shutil

    world, uri, tmp = copy
    assert _attach_from_run(uri, world, capsys, "--audit", "calibration", "--tau", "0.7")[0] == 0
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    card_uri = client.get_model_version("clf", "1").tags["recipe_audit.card.calibration.tau_0.7.card_uri"]
    where = _artifact_dir(client, card_uri.split("/")[1])
    assert {"card.json", "card.md"} <= {p.name for p in where.iterdir()}
    backup = tmp / "backup"
    shutil.copytree(where, backup)
    gate = ["gate", "--model-name", "clf", "--version", "1", "--audit", "calibration", "--tau", "0.7",
            "--tracking-uri", uri]
    assert run_cli(gate, capsys)[0] == 0

    def edit(fn):
        fn()
        rc, _, err = run_cli(gate, capsys)
        rc_v, _, err_v = run_cli(["verify", card_uri, "--tracking-uri", uri], capsys)
        shutil.rmtree(where)
        shutil.copytree(backup, where)
        assert rc == 1 and "FAIL (card-does-not-verify)" in err and err.count("\n") == 1, err
        assert rc_v == 1 and "hand-edited" in err_v
        return err + err_v

    md = where / "card.md"
    err = edit(lambda: md.write_text(md.read_text() + "\nApproved.\n"))
    assert "hand-edited: card.md changed after the card was written" in err

    def resealed(name, change):
        """Edit a derived file, then put its hash in the manifest and reseal the digest."""
        from recipe_audit.cards.digest import seal
        from recipe_audit.cards.files import file_sha256

        f = where / name
        f.write_text(change(f.read_text()))
        d = json.loads((where / "card.json").read_text())
        seal(d, {**d["artifacts"], name: file_sha256(f)}, content_digest=d["content_digest"])
        (where / "card.json").write_text(json.dumps(d))

    for name in ("card.md", "card.html"):  # derived files are rendered again from card.json and compared
        err = edit(lambda n=name: resealed(n, lambda t: t.replace("Recipe card", "Recipe card (signed off)")))
        assert f"{name} differ(s) from what the card's JSON renders" in err, err
    png = next(p for p in where.iterdir() if p.suffix == ".png")
    assert png.name in edit(lambda: png.write_bytes(png.read_bytes()[:-8]))
    html = where / "card.html"  # the card with its plots embedded, covered by the digest like the rest
    assert "card.html changed after the card was written" in edit(lambda: html.write_text("<p>approved</p>"))
    assert "notes.html was added beside the card" in edit(lambda: (where / "notes.html").write_text("<p>ok</p>"))

    def summary():
        d = json.loads((where / "card.json").read_text())
        d["cells"][0]["recipe_summary"] = "the stable recipe, signed off"
        (where / "card.json").write_text(json.dumps(d))

    err = edit(summary)  # the gate and verify: the card's content no longer matches its digest
    assert "FAIL (card-does-not-verify)" in err and "the card's content does not match its digest" in err, err
    assert run_cli(gate, capsys)[0] == 0


def test_a_card_of_the_users_own_metric_gates_without_audit(copy, capsys):
    from mlflow.entities import Param

    world, uri, tmp = copy
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    exp = client.create_experiment("byo")
    runs = []
    for s in range(22):
        rid = client.create_run(exp).info.run_id
        client.log_batch(rid, metrics=[Metric("val_acc", 0.9, 0, 0)], params=[Param("seed", str(s))])
        client.set_terminated(rid, "FINISHED")
        runs.append(rid)
    source, _, _ = ModelRegistry(uri).logged_model(world.runs[("good", 0)])
    client.create_registered_model("byo-clf")
    with use_tracking_uri(uri):
        client.create_model_version("byo-clf", source, run_id=runs[0])
    rc, _, err = run_cli(["card", "--experiment-name", "byo", "--metric", "val_acc", "--seed-key", "params.seed",
                          "--json", "byo.json", "--tracking-uri", uri], capsys)
    assert rc == 0, err
    assert json.loads((tmp / "byo.json").read_text())["cells"][0]["audit_set"] == "val_acc"
    rc, out, err = run_cli(["attach", "--model-name", "byo-clf", "--version", "1", "--card", "byo.json",
                            "--tracking-uri", uri], capsys)
    assert rc == 0 and "val_acc τ = 0.7: release-supported" in out, err
    assert registry.attached_cards(client.get_model_version("byo-clf", "1").tags, uri)[
        "recipe_audit.card.val_acc.tau_0.7"]["audit_set"] == "val_acc"
    rc, out, err = run_cli(["gate", "--model-name", "byo-clf", "--version", "1", "--metric", "val_acc", "--tau", "0.7",
                            "--seed-key", "params.seed", "--tracking-uri", uri], capsys)
    assert rc == 0 and "release-supported on audit set 'val_acc'" in out and "22 seeds" in out, err


def test_attach_records_the_family_and_the_gate_reads_the_family_wise_verdict(attached, capsys):
    """The world's card covers two recipe identities: attach records the family on the version; the
    gate passes GOOD on the family-wise verdict (29 clean reruns, the floor at δ/2). The family is the
    gate's: a policy that declares ten candidates (floor 44) refuses, --pointwise (a recipe fixed
    before the sweep) passes."""
    uri = attached
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    stem = keys.card_tag_stem("calibration", 0.7)
    f = registry.attached_cards(client.get_model_version("clf", "1").tags, uri)[stem]  # read from the card
    assert f["family_size"] == "2" and f["family_verdict"] == "release-supported"
    assert sorted(f["family_members"].split(",")) == sorted([GOOD, BAD])
    rc, out, err = run_cli(["gate", "--model-name", "clf", "--version", "1", "--audit", "calibration", "--tau",
                            "0.7", "--tracking-uri", uri], capsys)
    assert rc == 0 and "family-wise (chosen from M = 2 recipe identities)" in out, err
    # the family is the gate's: a policy that declares ten candidates (floor 44 at δ/10) refuses the 29
    # clean reruns; --pointwise (a recipe fixed before the sweep) passes them
    gate = ["gate", "--model-name", "clf", "--version", "1", "--audit", "calibration", "--tau", "0.7",
            "--tracking-uri", uri]
    ten = ",".join([GOOD, BAD] + [f"{i:016x}" for i in range(8)])
    rc, _, err = run_cli([*gate, "--family", ten], capsys)
    assert rc == 1 and "FAIL (insufficient-evidence)" in err and "M = 10" in err and err.count("\n") == 1
    rc, out, err = run_cli([*gate, "--pointwise"], capsys)
    assert rc == 0 and "PASS" in out, err
    # a declared family without the version's recipe: refused
    rc, _, err = run_cli([*gate, "--family", BAD], capsys)
    assert rc == 1 and "FAIL (store-history)" in err and "not in the policy's declared family" in err
