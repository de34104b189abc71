"""Open-ended sweeps (``hydra/sweeper=curtail hydra.sweeper.stop_on=anytime``): seeds in batches up to
a maximum, stopped by the confidence sequence; the record's looks replayed independently; bad
settings; the card of such a sweep read from the store (anytime, never mixed with fixed N)."""

from __future__ import annotations

import json

import pytest
from helpers.sweepers import Sweeper, make_sweeper
from hydra.errors import HydraException

from recipe_audit import keys, stats
from recipe_audit.app.curtailing import RECORD_FILE


@pytest.fixture(autouse=True)
def _no_sweep_parent(monkeypatch):
    monkeypatch.delenv("RECIPE_AUDIT_SWEEP", raising=False)


def _sweeper(tmp_path, outcome, *, batch_size=5, max_reruns=200, taus=(0.7,)):
    return make_sweeper(tmp_path, outcome, taus=taus, batch_size=batch_size, stop_on="anytime", max_reruns=max_reruns)


def _fails(seed: int) -> bool:
    return seed % 25 == 7  # one failure in 25 seeds


def test_clean_recipe_stops_at_the_first_look_past_the_anytime_floor(tmp_path):
    sw = _sweeper(tmp_path, lambda ov: {"calibration": 0.9})
    sw.sweep(["seed=range(300)"])
    (g,) = sw.groups
    floor = stats.anytime_sample_floor(0.1, 0.1)
    assert floor == 34 and g.launched == 35  # looks at 5, 10, ..., 35
    rec = json.loads((tmp_path / "sweep" / RECORD_FILE).read_text())
    assert rec["stop_on"] == "anytime" and rec["max_reruns"] == 200 and rec["batch_size"] == 5
    (grp,) = rec["groups"]
    assert [x["n"] for x in grp["looks"]] == list(range(5, 36, 5)) and grp["stop_reason"] == "settled"
    assert grp["verdicts"] == ["release-supported"] and grp["launched_seeds"] == list(range(35))
    assert [len(b) for _, b in sw.launcher.batches] == [5] * 7


def test_looks_match_an_independent_replay(tmp_path):
    for outcome_of in (_fails, lambda s: s % 3 == 0, lambda s: s in (1, 2)):
        sw = _sweeper(tmp_path, lambda ov, f=outcome_of: {"calibration": 0.5 if f(int(ov["seed"])) else 0.9},
                      max_reruns=120)
        sw.sweep(["seed=range(150)"])
        (grp,) = sw.record["groups"]
        replay = stats.anytime_sequence([outcome_of(s) for s in range(120)], 0.1, 0.1, batch_size=5,
                                        max_reruns=120)
        assert [x["n"] for x in grp["looks"]] == [x.n for x in replay.looks]
        assert [x["k"][0] for x in grp["looks"]] == [x.k for x in replay.looks]
        assert grp["verdicts"] == [replay.looks[-1].verdict]
        assert (grp["stop_reason"] == "maximum") == (replay.stop_reason == "maximum")


def test_a_failing_recipe_stops_strong_unsupported(tmp_path):
    sw = _sweeper(tmp_path, lambda ov: None)  # every rerun crashes
    sw.sweep(["recipe=x", "seed=range(200)"])
    (grp,) = sw.record["groups"]
    first = next(n for n in range(5, 201, 5) if stats.anytime_bound(n, n).verdict == "strong-unsupported")
    assert grp["n_launched"] == first and grp["verdicts"] == ["strong-unsupported"]


@pytest.mark.parametrize("kwargs,needle", [
    ({"stop_on": "anytime"}, "needs a maximum: set hydra.sweeper.max_reruns"),
    ({"stop_on": "decision", "max_reruns": 100}, "cannot mix a planned N with an open-ended one"),
    ({"stop_on": "anytime", "max_reruns": 0}, "max_reruns must be a positive integer"),
    ({"stop_on": "anytime", "max_reruns": "many"}, "max_reruns must be a positive integer"),
    ({"stop_on": "sometimes"}, "'decision', 'verdict' or 'anytime'"),
])
def test_bad_settings_are_one_sentence(kwargs, needle):
    with pytest.raises(HydraException) as info:
        Sweeper(**kwargs)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_seed_sweep_shorter_than_the_maximum(tmp_path):
    sw = _sweeper(tmp_path, lambda ov: {"calibration": 0.9}, max_reruns=200)
    with pytest.raises(HydraException, match=r"names only 59; sweep at least as many, e.g. 'seed=range\(200\)'"):
        sw.sweep(["seed=range(59)"])
    assert sw.launcher.batches == []  # nothing ran


@pytest.mark.slow
def test_card_of_an_open_ended_sweep_is_an_anytime_card_ci(tmp_path, store):
    """A sweep parent carrying an anytime record: the card drops the seeds never launched, reads the
    confidence sequence with the sweep's looks; beside a fixed-N sweep it refuses to mix."""
    from helpers.store import synthetic_sweep
    from mlflow.tracking import MlflowClient

    from recipe_audit.cards.files import validate
    from recipe_audit.cards.model import CardError, CardOptions
    from recipe_audit.release.compute import CardRequest, compute_cards

    sw = _sweeper(tmp_path, lambda ov: {"calibration": 0.5 if _fails(int(ov["seed"])) else 0.9}, max_reruns=40)
    sw.sweep(["seed=range(40)"])
    (grp,) = sw.record["groups"]
    launched = grp["n_launched"]
    values = {s: (0.5 if _fails(s) else 0.9) if s < launched else None for s in range(40)}
    parent = synthetic_sweep(store, {s: v for s, v in values.items() if v is not None}, planned=range(40),
                             recipe_id="a" * 16)
    grp["recipe_id"] = "a" * 16
    MlflowClient(tracking_uri=store).set_tag(parent, keys.TAG_CURTAILMENT, json.dumps(sw.record))
    doc = compute_cards(CardRequest(experiment="exp", tracking_uri=store), CardOptions(taus=(0.7,)))
    validate(doc)
    (e,) = doc["cells"]
    k = sum(_fails(s) for s in range(launched))
    ab = stats.anytime_bound(k, launched)
    assert e["reading"] == "anytime" and e["n_reruns"] == launched and e["n_unfinished"] == 0
    assert (e["verdict"], e["upper_bound"], e["sample_floor"]) == (ab.verdict, ab.upper, 34)
    assert [x["n"] for x in e["anytime"]["looks"]] == [x["n"] for x in grp["looks"]]
    assert e["anytime"]["batch_size"] == 5 and e["anytime"]["max_reruns"] == 40
    assert e["anytime"]["fixed_n"]["verdict"] == stats.tail_bound(k, launched).verdict
    # a fixed-N sweep of another recipe in the same experiment: the card refuses to mix the readings
    synthetic_sweep(store, {s: 0.9 for s in range(5)}, recipe_id="b" * 16)
    with pytest.raises(CardError, match="would mix an open-ended"):
        compute_cards(CardRequest(experiment="exp", tracking_uri=store), CardOptions(taus=(0.7,)))
    both = compute_cards(CardRequest(experiment="exp", tracking_uri=store), CardOptions(taus=(0.7,), anytime=True))
    assert {x["reading"] for x in both["cells"]} == {"anytime"} and both["cells"][0]["family"]["size"] == 2


@pytest.mark.parametrize("options, needle", [
    (["hydra.sweeper.stop_on=anytime"], "needs a maximum: set hydra.sweeper.max_reruns"),
    (["hydra.sweeper.stop_on=anytime", "hydra.sweeper.max_reruns=0"], "max_reruns must be a positive integer"),
    (["hydra.sweeper.batch_size=0"], "batch_size must be a positive integer, not 0"),
    (["hydra.sweeper.stop_on=never"], "stop_on must be 'decision', 'verdict' or 'anytime'"),
    (["hydra.sweeper.max_reruns=10"], "max_reruns belongs to an open-ended sweep"),
    (["hydra.sweeper.stop_on=anytime", "hydra.sweeper.max_reruns=10"], "the seed sweep names only 4"),
])
def test_an_option_error_writes_nothing(tmp_path, store, options, needle):
    """Refused where the multirun starts, before the store holds a run of it (a FAILED sweep run
    was left behind when the sweeper itself refused, after the callback had recorded the sweep)."""
    from helpers.app import SMALL
    from helpers.inprocess import run_module_here
    from mlflow.tracking import MlflowClient

    proc = run_module_here(["-m", "hydra/sweeper=curtail", "seed=range(4)", *options, *SMALL,
                            f"hydra.sweep.dir={tmp_path / 'sweep'}"], cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("recipe_audit: error")]
    assert len(lines) == 1 and needle in lines[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    client = MlflowClient(store)
    exps = client.search_experiments()
    assert [r for e in exps for r in client.search_runs([e.experiment_id])] == []
    assert not (tmp_path / "sweep" / "recipe_audit_sweep.json").exists()
