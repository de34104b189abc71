"""Cards of curtailed sweeps and the simultaneous band on every card."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers.fast_sqlite import no_sync_module  # noqa: F401 (autouse: its stores commit without a disk sync)
from helpers.store import synthetic_sweep

from recipe_audit import keys, stats
from recipe_audit.cards.build import build_card
from recipe_audit.cards.files import render_files, validate
from recipe_audit.cards.model import CardOptions, Cell
from recipe_audit.release.compute import CardRequest, compute_cards


def _card(uri, **kw):
    opts = kw.pop("opts", CardOptions(taus=(0.7,)))
    return compute_cards(CardRequest(experiment="exp", tracking_uri=uri, **kw), opts)


def _record(launched, n_planned, recipe_id="r" * 16, stop_on="decision", reason="stopped"):
    return {"version": 1, "sweeper": "curtail", "stop_on": stop_on, "batch_size": 4, "audit_set": "calibration",
            "taus": [0.7], "eps": 0.1, "delta": 0.1, "higher_is_better": True, "n_planned": n_planned,
            "n_launched": len(launched), "stopped_early": len(launched) < n_planned,
            "groups": [{"overrides": [], "recipe_id": recipe_id, "n_planned": n_planned,
                        "n_launched": len(launched), "launched_seeds": list(launched),
                        "stopped_early": len(launched) < n_planned, "failures": [0], "reason": reason}]}


def _tag(uri, parent, record):
    from mlflow.tracking import MlflowClient

    MlflowClient(tracking_uri=uri).set_tag(parent, keys.TAG_CURTAILMENT, json.dumps(record))


def test_curtailed_failing_recipe_states_the_verdict_at_planned_n(store, tmp_path):
    # 8 of 30 planned seeds launched; 4 failed (3 collapsed, 1 crashed and never logged the metric)
    values = {s: (0.5 if s in (1, 4, 6) else 0.86) for s in range(8)}
    values[7] = None
    parent = synthetic_sweep(store, values, planned=range(30), statuses={7: "FAILED"})
    before = _card(store)["cells"][0]  # without the record: the 22 unlaunched seeds are never-logged failures
    assert before["n_reruns"] == 30 and before["n_failures"] == 26 and "curtailment" not in before
    _tag(store, parent, _record(range(8), 30, reason="4 of 8 failed"))
    doc = _card(store, opts=CardOptions(taus=(0.7, 0.4)))
    validate(doc)
    e, e_low = doc["cells"]
    assert e["n_reruns"] == 8 and e["n_failures"] == 4 and e["n_unfinished"] == 1
    assert [u["reason"] for u in e["unfinished"]] == ["failed"]  # no never-logged seeds
    assert e["planned_seeds"] == list(range(8)) and len(e["reruns"]) == 8
    cur = e["curtailment"]
    assert (cur["n_planned"], cur["n_launched"], cur["remaining"], cur["stopped_early"]) == (30, 8, 22, True)
    assert cur["sweep_reason"] == "4 of 8 failed" and cur["decision_determined"]
    # the bounds at N: the 22 unlaunched counted as failing for U, as passing for L
    assert e["upper_bound"] == pytest.approx(stats.clopper_pearson_upper(26, 30, 0.1))
    assert e["lower_bound"] == pytest.approx(stats.clopper_pearson_lower(4, 30, 0.1))
    assert cur["upper_if_rest_pass"] == pytest.approx(stats.clopper_pearson_upper(4, 30, 0.1))
    assert e["verdict"] == stats.verdict(4, 30) == "unsupported"  # the most favourable verdict still possible
    assert set(cur["possible_verdicts"]) == {"unsupported", "strong-unsupported"}
    assert e["rules"]["card"] is False and e["more_clean_reruns_needed"] is None
    assert "Curtailed sweep: 8 of 30 planned" in e["reason"]
    # at another bar only the crashed rerun fails: at N = 30 one failure already rules out release
    assert e_low["n_failures"] == 1 and e_low["curtailment"]["decision_determined"]
    assert e_low["verdict"] == "unsupported"
    assert e["band"]["n"] == 30 and e["band"]["n_unlaunched_counted_as_failures"] == 22
    files = render_files(doc, tmp_path / "card")
    md = files["markdown"].read_text()
    assert "**Curtailed sweep:** 8 of the 30 planned reruns" in md and "4 of 8 failed" in md
    assert "4/8 (N = 30 planned)" in md
    assert files["band_0"].is_file() and "Every τ at once" in md


def test_record_of_another_recipe_is_ignored_and_a_long_record_is_an_artifact(store, tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    parent = synthetic_sweep(store, {s: 0.5 for s in range(4)}, planned=range(30))
    _tag(store, parent, _record(range(4), 30, recipe_id="x" * 16))
    (e,) = _card(store)["cells"]
    assert "curtailment" not in e and e["n_reruns"] == 30 and e["n_failures"] == 30
    client = MlflowClient(tracking_uri=store)
    client.log_text(parent, json.dumps(_record(range(4), 30)), "recipe_audit_curtailment.json")
    client.set_tag(parent, keys.TAG_CURTAILMENT, keys.CURTAILMENT_ARTIFACT_PREFIX + "recipe_audit_curtailment.json")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'elsewhere.db'}")  # the card's URI is used
    (e,) = _card(store)["cells"]
    assert e["curtailment"]["n_planned"] == 30 and e["n_reruns"] == 4


# --- without a store: cells built directly ------------------------------------------------------


def _cell(vals, n_planned=None, stop_on="decision"):
    vals = np.asarray(vals, dtype=float)
    n = vals.size
    extra = {}
    if n_planned is not None:
        extra["curtailment"] = {"sweep_run_id": "p" * 32, "n_planned": n_planned, "n_launched": n,
                                "stopped_early": n < n_planned, "stop_on": stop_on, "batch_size": 4,
                                "sweep_reason": "why", "sweep_audit_set": "calibration", "sweep_taus": [0.7],
                                "sweep_eps": 0.1, "sweep_delta": 0.1}
    return Cell(group={}, recipe_id="r" * 16, recipe_summary="", audit_set="calibration",
                metric="accuracy/calibration", seeds=tuple(range(n)), values=vals,
                run_ids=tuple(f"run{i}" for i in range(n)), statuses=("FINISHED",) * n,
                sweep_run_ids=("p" * 32,), planned_seeds=tuple(range(n)), digest="0" * 64, extra=extra)


def _doc(cells, **kw):
    opts = CardOptions(taus=kw.pop("taus", (0.7,)), bootstrap_B=50, **kw)
    return build_card(cells, opts, {"experiment": "exp", "metric": "accuracy/calibration"}).to_json()


def test_curtailed_supported_recipe():
    # 37 of 38 launched, no failure: even if the last one failed, 1 failure is allowed at N = 38
    (e,) = _doc([_cell([0.9] * 37, n_planned=38)])["cells"]
    assert stats.curtail_plan(38).supported_max_k == 1
    assert e["verdict"] == "release-supported" and e["rules"]["card"]
    assert e["upper_bound"] == pytest.approx(stats.clopper_pearson_upper(1, 38, 0.1))
    assert e["upper_bound"] <= 0.1 and e["curtailment"]["verdict_determined"]


def test_stop_on_verdict_and_a_sweep_that_ran_to_n():
    vals = [0.5] * 6 + [0.9] * 4
    (e,) = _doc([_cell(vals, n_planned=30, stop_on="verdict")])["cells"]
    assert e["verdict"] == "strong-unsupported" and e["curtailment"]["possible_verdicts"] == ["strong-unsupported"]
    full = [0.5] * 3 + [0.9] * 27
    plain = _doc([_cell(full)])["cells"][0]
    (ran,) = _doc([_cell(full, n_planned=30)])["cells"]
    assert ran["curtailment"]["stopped_early"] is False and ran["curtailment"]["remaining"] == 0
    for k in ("n_reruns", "n_failures", "upper_bound", "lower_bound", "verdict", "more_clean_reruns_needed",
              "band"):
        assert ran[k] == plain[k]
    # at a bar the sweep did not stop on, the verdict at N may not be settled, and the card says so
    (e,) = _doc([_cell([0.5] * 3 + [0.9] * 5, n_planned=30)], taus=(0.4,))["cells"]
    assert e["n_failures"] == 0 and not e["curtailment"]["decision_determined"]
    assert e["verdict"] == "unsupported" and "NOT settled" in e["reason"]
    assert e["upper_bound"] == pytest.approx(stats.clopper_pearson_upper(22, 30, 0.1))


def test_band_on_every_card(tmp_path):
    rng = np.random.default_rng(0)
    values = np.round(rng.normal(0.86, 0.03, 60), 3)
    doc = _doc([_cell(values)], taus=(0.7, 0.85))
    validate(doc)
    lo, hi = doc["cells"]
    b = lo["band"]
    assert b["method"] == "exact-cp" and b["sample_floor"] == stats.band_sample_floor(0.1, 0.1) == 46
    assert b["n"] == 60 and b["k"] == 0 and b["supported"] and b["coverage"] >= 0.9
    ref = stats.band_bounds(values, [0.7, 0.85])
    assert (lo["band"]["upper_bound"], hi["band"]["upper_bound"]) == ref.upper
    assert hi["band"]["upper_bound"] >= hi["upper_bound"]  # simultaneous costs width
    assert lo["band"]["pointwise_upper_bound"] == pytest.approx(lo["upper_bound"])
    lim = b["certified_tau_limit"]
    assert lim is not None and lim == hi["band"]["certified_tau_limit"]
    assert int(np.sum(~(values >= lim))) <= stats.simultaneous_band(60, 0.1).max_certified_failures(0.1)
    files = render_files(doc, tmp_path / "card")
    md = files["markdown"].read_text()
    assert f"every τ ≤ {lim:g}" in md and "band floor" not in md and "N ≥ 46" in md
    assert files["band_0"].stat().st_size > 10_000
    # below the band's floor it certifies nothing and says why
    small = _doc([_cell([0.9] * 30)])
    assert not small["cells"][0]["band"]["supported"]
    assert "below the band's sample floor 46" in render_files(small, tmp_path / "small")["markdown"].read_text()


def test_band_method_option():
    vals = [0.9] * 120
    ks = _doc([_cell(vals)], band_method="exact-ks")
    validate(ks)
    b = ks["cells"][0]["band"]
    assert b["method"] == "exact-ks" and b["c"] == pytest.approx(stats.band.ks_constant(120, 0.1))
    assert b["sample_floor"] == 112 and ks["options"]["band_method"] == "exact-ks"
    dkw = _doc([_cell(vals)], band_method="dkw")["cells"][0]["band"]
    assert dkw["fallback"] and "fallback" in dkw["label"] and dkw["sample_floor"] == 116
    from recipe_audit.cards.model import CardError

    with pytest.raises(CardError, match="band_method"):
        CardOptions(taus=(0.7,), band_method="wilson")
