"""Cards on registered model versions, the release gate and verify, on the MLflow model registry
of a SQLite store (``recipe-audit attach / gate / verify``)."""

from __future__ import annotations

import json
import shutil

import pytest
from cli_helpers import run_cli
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient
from registry_world import BAD, EXP, GOOD, log_rerun, make_world

from recipe_audit import keys, registry
from recipe_audit.tracking import use_tracking_uri


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The store every test starts from (built once; tests that change it work on a copy)."""
    root = tmp_path_factory.mktemp("world")
    return make_world(f"sqlite:///{root / 'mlflow.db'}", root)


@pytest.fixture
def copy(world, tmp_path, monkeypatch):
    """A private copy of the world's store (its artifacts stay where the world put them)."""
    shutil.copy(world.root / "mlflow.db", tmp_path / "mlflow.db")
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
    from recipe_audit.cards.verify import load_card

    root = tmp_path_factory.mktemp("attached")
    shutil.copy(world.root / "mlflow.db", root / "mlflow.db")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    registry.attach(uri, "clf", load_card(str(world.card)), run_id=world.runs[("good", 0)], set_alias="candidate")
    return uri


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
    cards = registry.attached_cards(mv.tags)
    # the card file holds two recipes x two audit sets x two taus: the version's recipe's four attach
    assert sorted((f["audit_set"], float(f["tau"])) for f in cards.values()) == [
        ("calibration", 0.7), ("calibration", 0.8), ("shift_x", 0.7), ("shift_x", 0.8)]
    cal = mv.tags[keys.card_tag_stem("calibration", 0.7) + ".verdict"]
    assert cal == "release-supported"
    stem = "recipe_audit.card.shift_x.tau_0.7"
    assert mv.tags[stem + ".verdict"] == "strong-unsupported"
    assert (mv.tags[stem + ".n_reruns"], mv.tags[stem + ".n_failures"]) == ("22", "8")
    assert mv.tags[stem + ".recipe_id"] == GOOD and mv.tags[stem + ".source_run_in_card"] == "true"
    for name in ("upper_bound", "tau", "eps", "delta", "audit_set", "card_uri", "card_digest"):
        assert mv.tags[f"{stem}.{name}"]
    assert mv.tags[keys.TAG_RECIPE_ID] == GOOD
    assert "## Recipe cards on this version" in mv.description and "shift_x" in mv.description
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
    for args, outcome in [(["--audit", "shift_x"], "unsupported"),  # a target audit the recipe fails
                          (["--audit", "shift_people"], "refused-shift"),  # no card for that audit set
                          (["--tau", "0.9"], "no-card")]:
        rc, out, err = run_cli([*gate, "--version", "1", *args], capsys)
        assert rc == 1 and f"FAIL ({outcome})" in err and err.count("\n") == 1, (args, err)
    rc, out, _ = run_cli([*gate, "--version", "1", "--json"], capsys)
    assert rc == 0 and json.loads(out)["passed"] is True
    # a version without a card
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    v1 = client.get_model_version("clf", "1")
    with use_tracking_uri(uri):  # MLflow resolves a models:/ source with the global URI
        v2 = client.create_model_version("clf", v1.source, run_id=v1.run_id)
    rc, _, err = run_cli([*gate, "--version", str(v2.version)], capsys)
    assert rc == 1 and "FAIL (no-card)" in err and "carries no recipe card" in err


def test_gate_fails_when_the_store_changed(copy, capsys):
    world, uri, _ = copy
    assert _attach_from_run(uri, world, capsys)[0] == 0
    client = MlflowClient(tracking_uri=uri)
    client.log_batch(world.runs[("good", 7)], metrics=[Metric("accuracy/calibration", 0.4, 0, 99)])
    rc, _, err = run_cli(["gate", "--model-name", "clf", "--version", "1", "--tracking-uri", uri], capsys)
    assert rc == 1 and "FAIL (card-does-not-verify)" in err and "metric-changed" in err and "seed 7" in err


def test_gate_fails_when_tags_were_edited(copy, capsys):
    world, uri, _ = copy
    assert _attach_from_run(uri, world, capsys)[0] == 0
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    client.set_model_version_tag("clf", "1", "recipe_audit.card.shift_x.tau_0.7.verdict", "release-supported")
    rc, _, err = run_cli(["gate", "--model-name", "clf", "--version", "1", "--audit", "shift_x",
                          "--tau", "0.7", "--tracking-uri", uri], capsys)
    assert rc == 1 and "do not match the card" in err and "verdict" in err


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
    assert mv.description.count(registry.DESCRIPTION_MARKER) == 1


@pytest.mark.parametrize("args, needle", [
    (["gate", "--model-name", "nope", "--version", "1"], "no registered model named 'nope'"),
    (["gate", "--model-name", "clf", "--version", "9"], "has no version 9"),
    (["gate", "--model-name", "clf", "--alias", "prod"], "has no alias 'prod'"),
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
    (["gate", "--model-name", "clf", "--version", "1", "--tracking-uri", "sqlite:////no/such/mlflow.db"],
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
    from recipe_audit.cards.verify import load_card

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
