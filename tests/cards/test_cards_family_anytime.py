"""Cards over several recipe identities (family-wise verdicts beside the pointwise ones) and cards
read as open-ended sweeps (the confidence sequence), from a tracking store."""

from __future__ import annotations

import io
import shutil

import pytest
from helpers.fast_sqlite import no_sync_module  # noqa: F401 (autouse: its stores commit without a disk sync)
from helpers.store import synthetic_sweep

from recipe_audit.cards.document import RecipeCard
from recipe_audit.cards.files import validate
from recipe_audit.cards.model import CardError, CardOptions
from recipe_audit.cards.render import to_markdown
from recipe_audit.cards.summary import print_card_summary, summary_markdown
from recipe_audit.release.compute import CardRequest, compute_cards
from recipe_audit.stats import anytime_bound, family_bounds, tail_bound


@pytest.fixture(scope="module")
def stores(tmp_path_factory, migrated_mlflow_db):
    """One store, written once (in a copy of the suite's empty tables): experiment 'three' holds
    three recipe identities, each its own sweep (40 clean reruns, 40 with one failure, 10 clean)."""
    tmp = tmp_path_factory.mktemp("family_anytime")
    shutil.copy(migrated_mlflow_db, tmp / "mlflow.db")
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    synthetic_sweep(uri, {s: 0.9 for s in range(40)}, experiment="three", recipe_id="a" * 16)
    synthetic_sweep(uri, {s: (0.5 if s == 3 else 0.9) for s in range(40)}, experiment="three", recipe_id="b" * 16)
    synthetic_sweep(uri, {s: 0.9 for s in range(10)}, experiment="three", recipe_id="c" * 16)
    return uri


def _card(uri, experiment="three", **kw):
    opts = kw.pop("opts", CardOptions(taus=(0.7,)))
    return compute_cards(CardRequest(experiment=experiment, tracking_uri=uri, **kw), opts)


def test_every_cell_states_the_family_and_both_verdicts(stores):
    doc = _card(stores)
    validate(doc)
    assert len(doc["cells"]) == 3
    fam = family_bounds([(0, 40), (1, 40), (0, 10)], 0.1, 0.1, family_size=3)
    by_rid = {e["recipe_id"]: e for e in doc["cells"]}
    for rid, (k, n), mem in zip(("a" * 16, "b" * 16, "c" * 16), [(0, 40), (1, 40), (0, 10)], fam.members,
                                strict=True):
        e = by_rid[rid]
        f = e["family"]
        assert f["size"] == 3 and f["method"] == "holm" and f["delta"] == pytest.approx(0.1 / 3)
        assert sorted(f["recipe_ids"]) == ["a" * 16, "b" * 16, "c" * 16] and len(f["members"]) == 3
        assert e["verdict"] == tail_bound(k, n).verdict == f["pointwise_verdict"]
        assert f["verdict"] == mem.verdict and f["upper_bound"] == mem.upper and f["sample_floor"] == 33
        assert "3 recipe identities" in f["why"]
    # the pointwise card supports all but the 10-rerun recipe; family-wise only the clean 40
    assert [by_rid[r]["verdict"] for r in ("a" * 16, "b" * 16)] == ["release-supported"] * 2
    assert by_rid["a" * 16]["family"]["verdict"] == "release-supported"
    assert by_rid["b" * 16]["family"]["verdict"] == "unsupported"


@pytest.mark.parametrize("family_size", [None, 2])
def test_a_member_certified_by_holm_states_its_bound_at_that_level(family_size):
    """The issue's example: 0/29 and 0/25 clean reruns, ε = δ = 0.1, M = 2. Holm certifies 0/29 at
    δ/2 and 0/25 at δ; the card stated "U at δ/M 0.100" for 0/25, whose bound is 0.1129 at δ/M and
    0.0880 at the level that certified it. Each number now is the bound at the level it names."""
    import pandas as pd

    import recipe_audit

    runs = pd.DataFrame({"seed": [*range(29), *range(25)], "lr": ["a"] * 29 + ["b"] * 25, "val_acc": 0.9})
    doc = recipe_audit.card_from_runs(runs, "val_acc", taus=0.7, group_by=["lr"], family_size=family_size).doc
    validate(doc)
    by_n = {e["n_reruns"]: e for e in doc["cells"]}
    first, second = by_n[29]["family"], by_n[25]["family"]
    assert first["verdict"] == second["verdict"] == "release-supported"
    assert "upper_bound_level" not in first and first["upper_bound"] == pytest.approx(1 - 0.05 ** (1 / 29))
    assert second["upper_bound_level"] == 0.1 and second["level"] == 0.1 and second["rank"] == 2
    assert second["upper_bound"] == pytest.approx(1 - 0.1 ** (1 / 25)) == pytest.approx(0.08799, abs=1e-5)
    assert second["more_clean_reruns_needed"] == 0
    md = to_markdown(RecipeCard.from_json(doc))
    rows = [line for line in md.splitlines() if line.startswith("| ") and "/25 |" in line and "0.088" in line]
    assert rows and "0.088 at Holm's level 0.1 |" in rows[0], md
    assert "| 0/29 | 0.098 |" in md and "0.100" not in md
    if family_size:  # the family-wise reading leads: its sentence names the level and the δ/M bound
        reason = by_n[25]["reason"]
        assert "δ/(M − r + 1) = 0.1 (rank r = 2 of 2), U = 0.08799 ≤ ε = 0.1" in reason, reason
        assert "(at δ/M = 0.05 it is 0.1129)" in reason and by_n[25]["upper_bound"] == second["upper_bound"]
        assert "U = 0.1 " not in reason


def test_summary_and_markdown_lead_with_the_family_wise_verdict(stores):
    doc = _card(stores)
    md = to_markdown(RecipeCard.from_json(doc))
    assert md.index("## Family-wise verdicts") < md.index("## Verdicts")
    assert "This card covers 3 recipe identities" in md
    out = io.StringIO()
    print_card_summary(RecipeCard.from_json(doc), stream=out)
    text = out.getvalue()
    assert text.index("Family-wise verdicts (M = 3") < text.index("Pointwise verdicts")
    assert summary_markdown([RecipeCard.from_json(doc)]).index("family-wise verdict") < summary_markdown([RecipeCard.from_json(doc)]).index("recipe_audit card")


def test_one_recipe_card_has_no_family_unless_stated(stores):
    (e,) = _card(stores, sweep_id="swaaaaaa")["cells"]  # one sweep, one identity
    assert "family" not in e
    doc = _card(stores, sweep_id="swaaaaaa", opts=CardOptions(taus=(0.7,), family_size=10))
    validate(doc)
    (e,) = doc["cells"]
    assert e["family"]["size"] == 10 and e["family"]["untested"] == 9
    # asked for with family_size: the family-wise reading leads the entry, the pointwise one is named so
    assert e["family"]["verdict"] == e["verdict"] == "insufficient-evidence"
    assert (e["upper_bound"], e["sample_floor"]) == (e["family"]["upper_bound"], e["family"]["sample_floor"])
    assert e["pointwise"]["verdict"] == e["family"]["pointwise_verdict"] == "release-supported"
    assert e["pointwise"]["sample_floor"] == 22 and not e["rules"]["card"]
    assert doc["options"]["family_size"] == 10
    card = RecipeCard.from_json(doc)
    md = to_markdown(card)
    assert md.index("## Family-wise verdicts") < md.index("**insufficient-evidence**")
    assert "The pointwise verdict, for a recipe fixed before the sweep: release-supported." in md
    out = io.StringIO()
    print_card_summary(card, stream=out)
    text = out.getvalue()
    row = next(line for line in text.splitlines() if "insufficient-evidence" in line)  # the lead table's row
    assert text.index(row) < text.index("Pointwise verdicts")
    assert row.index("insufficient-evidence") < row.index("release-supported")


def test_recipe_filter_keeps_the_experiment_family(stores):
    (e,) = _card(stores, recipe_id="a" * 16)["cells"]
    assert e["family"]["size"] == 3 and e["family"]["untested"] == 2


def test_family_size_smaller_than_the_identities_refuses(stores):
    with pytest.raises(CardError, match="smaller than the 3 recipe identities"):
        _card(stores, opts=CardOptions(taus=(0.7,), family_size=2))


def test_anytime_card_reads_the_confidence_sequence(stores):
    doc = _card(stores, sweep_id="swbbbbbb", opts=CardOptions(taus=(0.7,), anytime=True))
    validate(doc)
    (e,) = doc["cells"]
    ab = anytime_bound(1, 40)
    assert e["reading"] == "anytime" and doc["options"]["anytime"] is True
    assert (e["upper_bound"], e["lower_bound"], e["sample_floor"], e["verdict"]) == (
        ab.upper, ab.lower, 34, ab.verdict)
    assert e["anytime"]["fixed_n"]["verdict"] == tail_bound(1, 40).verdict == "release-supported"
    assert e["pointwise"]["verdict"] == "release-supported" and e["pointwise"]["upper_bound"] == tail_bound(1, 40).upper
    assert ab.verdict == "unsupported"
    assert e["anytime"]["looks"] == [{"n": 40, "k": 1, "upper": ab.upper, "lower": ab.lower, "verdict": ab.verdict}]
    assert "U_n <= eps" in e["anytime"]["rule"]
    md = to_markdown(RecipeCard.from_json(doc))
    assert "**Anytime card (open-ended sweep).**" in md and md.index("Anytime card") < md.index("| τ | failures/N")


def test_anytime_and_fixed_n_cards_differ_on_the_same_reruns(stores):
    (fixed,) = _card(stores, sweep_id="swbbbbbb")["cells"]
    (anyt,) = _card(stores, sweep_id="swbbbbbb", opts=CardOptions(taus=(0.7,), anytime=True))["cells"]
    assert fixed["verdict"] == "release-supported" and anyt["verdict"] == "unsupported"
    assert "reading" not in fixed and anyt["reading"] == "anytime"


def test_family_and_anytime_cards_verify_against_the_store(stores):
    from recipe_audit.release.verify import verify_card

    for opts in (CardOptions(taus=(0.7,)), CardOptions(taus=(0.7,), anytime=True, family_size=4)):
        doc = _card(stores, opts=opts)
        res = verify_card(doc, stores)
        assert res.ok, res.summary()


def test_a_curtailed_sweep_cannot_be_read_as_open_ended():
    import numpy as np

    from recipe_audit.cards.anytime import read_as_anytime
    from recipe_audit.cards.model import Cell

    cell = Cell(group={}, recipe_id="a" * 16, recipe_summary="", audit_set="calibration",
                metric="accuracy/calibration", seeds=(0,), values=np.array([0.9]), run_ids=("r",),
                statuses=("FINISHED",), extra={"curtailment": {"n_planned": 59}})
    with pytest.raises(CardError, match="planned N = 59: a card cannot mix that fixed-N reading with an anytime"):
        read_as_anytime([cell], CardOptions(taus=(0.7,), anytime=True))
    assert read_as_anytime([cell], CardOptions(taus=(0.7,))) is False  # a fixed-N card of it is read at N
