"""Recipe cards from a tracking store: numbers, verdicts, unfinished reruns, refusals, files."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers.fast_sqlite import no_sync_module, own_copy, written_once  # noqa: F401 (no_sync_module: autouse)
from helpers.store import synthetic_sweep
from scipy import stats as sps

from recipe_audit.cards.document import RecipeCard
from recipe_audit.cards.files import render_files, validate
from recipe_audit.cards.model import CardError, CardOptions
from recipe_audit.release.card_runs import CardOutput
from recipe_audit.release.compute import CardRequest, compute_cards

# 59 seeds: 52 in the working mode, 7 collapsed to the majority rate
BIMODAL = {s: (0.85 + 0.001 * s if s % 8 else 0.5) for s in range(59)}


@pytest.fixture(scope="module")
def _bimodal_db(tmp_path_factory, migrated_mlflow_db):
    """The BIMODAL sweep, written once (its parent run id returned with it)."""
    return written_once(tmp_path_factory.mktemp("bimodal"), migrated_mlflow_db,
                        lambda uri: synthetic_sweep(uri, BIMODAL))


@pytest.fixture
def bimodal(_bimodal_db, store):
    """(this test's store, its own copy of the BIMODAL sweep; the sweep's parent run id)."""
    db, parent = _bimodal_db
    return own_copy(db, store), parent


def _card(uri, **kw):
    opts = kw.pop("opts", CardOptions(taus=(0.7,)))
    return compute_cards(CardRequest(experiment="exp", tracking_uri=uri, **kw), opts)


def test_bimodal_mean_ships_card_does_not(bimodal):
    store, _ = bimodal
    doc = _card(store)
    validate(doc)
    (e,) = doc["cells"]
    k = sum(v < 0.7 for v in BIMODAL.values())
    assert (e["n_reruns"], e["n_failures"]) == (59, k) == (59, 8)
    # independent check of the one-sided bounds
    assert e["upper_bound"] == pytest.approx(sps.beta.ppf(0.9, k + 1, 59 - k), rel=1e-12)
    assert e["lower_bound"] == pytest.approx(sps.beta.ppf(0.1, k, 59 - k + 1), rel=1e-12)
    assert e["verdict"] == "unsupported"
    assert e["rules"] == {"mean": True, "median": True, "bootstrap": True, "mean_minus_2sd": False,
                          "card": False}
    assert e["rule_statistics"]["mean"] == pytest.approx(np.mean(list(BIMODAL.values())))
    assert len(e["reruns"]) == 59 and sorted(e["failed_seeds"]) == [s for s in range(59) if s % 8 == 0]


def test_clean_recipe_is_supported_and_grid_over_tau(store):
    synthetic_sweep(store, {s: 0.8 + 0.002 * s for s in range(30)})
    doc = _card(store, opts=CardOptions(taus=(0.7, 0.85)))
    lo, hi = doc["cells"]
    assert lo["verdict"] == "release-supported" and lo["upper_bound"] == pytest.approx(1 - 0.1 ** (1 / 30))
    assert hi["n_failures"] == sum(0.8 + 0.002 * s < 0.85 for s in range(30))
    assert hi["verdict"] == "strong-unsupported"


def test_small_sample_certifies_nothing(store):
    synthetic_sweep(store, {s: 0.9 for s in range(10)})
    (e,) = _card(store)["cells"]
    assert e["verdict"] == "insufficient-evidence" and e["n_failures"] == 0
    assert e["sample_floor"] == 22 and e["more_clean_reruns_needed"] == 12
    assert e["rules"]["mean"] and not e["rules"]["card"]


def test_unfinished_reruns_are_failures_or_refuse(store):
    values = {s: 0.9 for s in range(25)}
    values[3] = None  # finished without the metric
    values[4] = float("nan")
    synthetic_sweep(store, values, planned=range(27), statuses={5: "FAILED", 6: "KILLED"})
    (e,) = _card(store)["cells"]
    reasons = {u["seed"]: u["reason"] for u in e["unfinished"]}
    assert reasons == {3: "missing-metric", 4: "nan-metric", 5: "failed", 6: "killed",
                       25: "never-logged", 26: "never-logged"}
    assert (e["n_reruns"], e["n_failures"]) == (27, 6)
    assert e["rule_statistics"]["n_ignored_by_practice_rules"] == 6
    with pytest.raises(CardError, match="refuses: 6 rerun"):
        _card(store, opts=CardOptions(taus=(0.7,), unfinished="refuse"))


def test_planned_reruns_that_never_ran_are_said_on_every_surface(store, tmp_path, capsys):
    """An interrupted sweep: 30 of 40 planned seeds logged (one crashed), 10 never started. They
    count as failures (SPEC 1.2) and the card says how many failed, how many never ran and what
    runs them: in its JSON, its Markdown (and so card.html), the terminal and the sweep's summary."""
    from recipe_audit.cards.summary import print_card_summary, summary_markdown

    values = {s: 0.9 if s % 7 else 0.5 for s in range(30)}  # seeds 0, 7, 14, 21, 28 fail the bar
    synthetic_sweep(store, values, planned=range(40), statuses={5: "FAILED"})
    doc = _card(store, opts=CardOptions(taus=(0.7, 0.8)))
    validate(doc)
    e = doc["cells"][0]
    assert (e["n_reruns"], e["n_failures"], e["n_unfinished"], e["n_never_ran"]) == (40, 5 + 1 + 10, 11, 10)
    assert "(11 unfinished, counted as failures: 10 never ran; resume=true runs them)" in e["reason"]
    md = render_files(doc, tmp_path / "out")["markdown"].read_text()
    assert "| 0.7 | 16/40 (10 never ran) |" in md
    said = ("16 of 40 reruns failed at τ = 0.7, 10 of them planned reruns that never ran (the sweep stopped "
            "before them: counted as failures). Relaunch the sweep's command with resume=true")
    assert said in md and md.count(said) == 1
    card = RecipeCard.from_json(doc)
    print_card_summary(card)
    out = capsys.readouterr().out
    assert "16/40 (10 never ran)" in out and said in out
    assert "| 0.8 | 16/40 (10 never ran) |" in summary_markdown([card])
    # a card with unfinished reruns that all started has no such field or sentence: as it was
    synthetic_sweep(store, values, experiment="started", planned=range(30), statuses={5: "FAILED"})
    (plain, _) = compute_cards(CardRequest(experiment="started", tracking_uri=store),
                               CardOptions(taus=(0.7, 0.8)))["cells"]
    assert "n_never_ran" not in plain and plain["reason"].startswith("6 of 30 reruns failed (1 unfinished, counted as "
                                                                     "failures); ")


def test_two_recipes_are_never_pooled(store):
    synthetic_sweep(store, {s: 0.9 for s in range(25)}, recipe_id="a" * 16)
    synthetic_sweep(store, {s: 0.5 for s in range(25)}, recipe_id="b" * 16)
    doc = _card(store)
    by = {e["recipe_id"]: e for e in doc["cells"]}
    assert by["a" * 16]["verdict"] == "release-supported"
    assert by["b" * 16]["verdict"] == "strong-unsupported"
    only = _card(store, recipe_id="b" * 16)
    assert [e["recipe_id"] for e in only["cells"]] == ["b" * 16]


def test_audit_set_never_measured_is_refused_shift(store):
    synthetic_sweep(store, {s: 0.9 for s in range(25)}, recipe_id="a" * 16)
    synthetic_sweep(store, {s: 0.9 for s in range(25)}, recipe_id="b" * 16, metric="accuracy/shift_x")
    doc = _card(store, metric="accuracy/shift_x")
    by = {e["recipe_id"]: e for e in doc["cells"]}
    assert by["b" * 16]["verdict"] == "release-supported"
    refused = by["a" * 16]
    assert refused["verdict"] == "refused-shift" and "shift_x" in refused["reason"]
    assert refused["upper_bound"] is None and not any(refused["rules"].values())
    validate(doc)


def test_bad_options():
    for kw, needle in [({"taus": ()}, "at least one"), ({"taus": (float("nan"),)}, "finite"),
                       ({"taus": (0.7,), "eps": 1.5}, "eps"), ({"taus": (0.7,), "delta": 0}, "delta")]:
        with pytest.raises(CardError, match=needle):
            CardOptions(**kw)


def test_files_are_whole_and_valid(bimodal, tmp_path):
    store, _ = bimodal
    doc = compute_cards(CardRequest(experiment="exp", tracking_uri=store), CardOptions(taus=(0.7, 0.8)),
                        split_audit=True, responsiveness=True, n_splits=50)
    files = render_files(doc, tmp_path / "out")
    assert {"json", "markdown", "hist_0", "responsiveness"} <= set(files)
    for p in files.values():
        assert p.is_file() and p.stat().st_size > 0
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]
    md = files["markdown"].read_text()
    assert "unsupported" in md and "| mean ≥ τ |" in md and "Held-out split audit" in md
    back = json.loads(files["json"].read_text())
    validate(back)
    assert back["split_audit"]["rules"]["card"]["cells_shipped_full"] == 0
    assert back["split_audit"]["rules"]["mean"]["cells_shipped_full"] == 2
    # a broken document is rejected before anything is written
    bad = {**doc, "cells": [{**doc["cells"][0], "verdict": "ship-it"}]}
    with pytest.raises(CardError, match="verdict"):
        render_files(bad, tmp_path / "bad")
    assert not (tmp_path / "bad" / "card.json").exists()


def test_card_runs_in_mlflow(bimodal):
    store, parent = bimodal
    doc = _card(store, opts=CardOptions(taus=(0.7, 0.8)))
    (logged,) = CardOutput(RecipeCard.from_json(doc)).log(store, "exp", tag_reruns=False)
    rid = logged.run_id
    from mlflow.tracking import MlflowClient

    run = MlflowClient(tracking_uri=store).get_run(rid)
    assert run.data.tags["recipe_audit.kind"] == "card"
    assert run.data.tags["recipe_audit.verdict"] == "unsupported"
    assert run.data.tags["mlflow.parentRunId"] == parent
    assert run.data.metrics["n_failures"] == 8 and run.data.metrics["n_reruns"] == 59
    assert run.data.metrics["upper_bound"] == pytest.approx(doc["cells"][0]["upper_bound"])
    assert "upper_bound/tau_0.8" in run.data.metrics
    arts = {a.path for a in MlflowClient(tracking_uri=store).list_artifacts(rid)}
    assert {"card.json", "card.md"} <= arts and any(a.endswith(".png") for a in arts)
    # card runs are not reruns: the next card reads the same 59
    again = _card(store)
    assert again["cells"][0]["n_reruns"] == 59


def test_every_shipped_schema_is_valid_against_its_meta_schema():
    """The validators skip the meta-schema check at run time (recipe_audit.cards.schemas.validator):
    each schema file that ships is checked here, and its validator is the one its $schema names."""
    from importlib import resources

    import jsonschema

    from recipe_audit.cards import schemas

    names = sorted(p.name for p in resources.files("recipe_audit").joinpath("schemas").iterdir()
                   if p.name.endswith(".json"))
    assert {"recipe_card.v1.json", "acceptance_card.v1.json"} <= set(names)
    for name in names:
        schema = schemas.load(name)
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)  # raises SchemaError for a schema that is not one
        assert type(schemas.validator(name)) is cls
