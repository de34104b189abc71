"""Re-run seeds on the card (a rerun is another draw, not a second chance), the card digest over
every field and file of a card, cards of schema 1.0, and cards of a user's own metric."""

from __future__ import annotations

import json
import shutil

import pytest
from helpers.fast_sqlite import no_sync_module  # noqa: F401 (autouse: its stores commit without a disk sync)
from helpers.store import synthetic_sweep
from scipy import stats as sps

from recipe_audit.cards.digest import content_digest, document_digest, legacy_document_digest, seal
from recipe_audit.cards.files import file_sha256, render_files, validate
from recipe_audit.cards.model import DIGEST_SCHEME, CardOptions
from recipe_audit.cards.verify import self_check
from recipe_audit.release.card_files import read_card
from recipe_audit.release.compute import CardRequest, compute_cards
from recipe_audit.release.verify import verify_card


def _card(uri, taus=(0.7,), **kw):
    return compute_cards(CardRequest(experiment="exp", tracking_uri=uri, **kw), CardOptions(taus=taus))


def _shopped(store):
    """25 seeds at 0.9; seed 3 finished at 0.4, and a later rerun of seed 3 finished at 0.95."""
    values = {s: 0.9 for s in range(25)}
    values[3] = 0.4
    synthetic_sweep(store, values)
    synthetic_sweep(store, {3: 0.95}, planned=range(25))


def test_seed_shopping_counts_the_failing_rerun(store, tmp_path):
    _shopped(store)
    doc = _card(store, taus=(0.7, 0.3))
    validate(doc)
    at7, at3 = doc["cells"]
    assert (at7["n_reruns"], at7["n_failures"]) == (25, 1) and at7["failed_seeds"] == [3]
    assert at7["upper_bound"] == pytest.approx(sps.beta.ppf(0.9, 2, 24), rel=1e-12)
    assert at7["upper_bound"] > 0.1 > 1 - 0.1 ** (1 / 25)  # 0.147; counting the passing rerun gave 0.088
    assert at7["verdict"] == "unsupported"
    (dup,) = at7["duplicates"]
    first = next(r["run_id"] for r in at7["reruns"] if r["seed"] == 3)
    assert dup["seed"] == 3 and dup["values"] == [0.4, 0.95] and dup["results"] == [True, True]
    assert dup["decided_by"] == first == dup["run_ids"][0] and dup["counted_value"] == 0.4
    assert dup["disagree"] is True and dup["counted_as"] == "fail" and dup["nondeterministic"] is True
    # at τ = 0.3 both reruns pass: no disagreement about that bar, the seed passes
    assert at3["n_failures"] == 0 and at3["duplicates"][0]["disagree"] is False
    assert at3["duplicates"][0]["counted_as"] == "pass"
    assert at7["nondeterministic"] is True
    md = render_files(doc, tmp_path / "out")["markdown"].read_text()
    assert "**Seed 3** finished 2 times (0.400, 0.950); at τ = 0.7 its reruns disagree" in md
    assert "counts as **failing**, decided by run" in md and "not a second chance" in md


def test_a_killed_attempt_then_a_finished_rerun_counts_the_finished_one(store):
    values = {s: 0.9 for s in range(25)}
    values[5] = 0.4  # logged before it was killed
    synthetic_sweep(store, values, statuses={5: "KILLED"})
    synthetic_sweep(store, {5: 0.95}, planned=range(25))
    (e,) = _card(store)["cells"]
    assert (e["n_reruns"], e["n_failures"], e["unfinished"]) == (25, 0, [])
    assert e["verdict"] == "release-supported"
    (dup,) = e["duplicates"]
    assert dup["results"] == [False, True] and dup["decided_by"] == dup["run_ids"][1]
    assert dup["disagree"] is False and dup["nondeterministic"] is False and dup["counted_as"] == "pass"
    assert next(r["value"] for r in e["reruns"] if r["seed"] == 5) == 0.95
    assert e["nondeterministic"] is False


def test_the_digest_covers_every_field_and_file_of_the_card(store, tmp_path):
    synthetic_sweep(store, {s: 0.9 for s in range(25)})
    doc = _card(store)
    assert doc["digest_scheme"] == DIGEST_SCHEME and doc["schema_version"] == "1.1"
    assert doc["content_digest"] == content_digest(doc) and doc["digest"] == document_digest(doc)
    assert "artifacts" not in doc  # the JSON alone
    files = render_files(doc, tmp_path / "out")
    assert "artifacts" not in doc  # the caller's document is not changed
    card = json.loads(files["json"].read_text())
    names = {p.name for k, p in files.items() if k != "json"}
    assert set(card["artifacts"]) == names and "card.md" in names and any(n.endswith(".png") for n in names)
    assert all(card["artifacts"][n] == file_sha256(tmp_path / "out" / n) for n in names)
    assert card["content_digest"] == doc["content_digest"] and card["digest"] == document_digest(card)
    assert card["digest"] != doc["digest"]  # the files are part of it
    assert f"Card content digest `{doc['content_digest']}`" in files["markdown"].read_text()
    found = read_card(str(files["json"]))
    assert self_check(found.doc, found) == [] and verify_card(found.doc, store, found).ok

    def findings():
        c = read_card(str(tmp_path / "out"))
        return [f.message for f in self_check(c.doc, c)]

    backup = tmp_path / "backup"
    shutil.copytree(tmp_path / "out", backup)
    md = tmp_path / "out" / "card.md"
    md.write_text(md.read_text().replace("release-supported", "release-supported (approved by QA)"))
    assert findings() == ["card.md changed after the card was written (not the bytes its digest covers)"]
    png = next(p for p in (tmp_path / "out").iterdir() if p.suffix == ".png")
    png.write_bytes(png.read_bytes() + b"\0")
    assert len(findings()) == 1 and png.name in findings()[0]
    md.unlink()
    assert any("card.md of the card is missing" in m for m in findings())
    shutil.rmtree(tmp_path / "out")
    shutil.copytree(backup, tmp_path / "out")
    assert findings() == []
    # an edited Markdown or page with its hash put in the manifest and the digest resealed: the
    # derived files are rendered again from the JSON and compared
    for name in ("card.md", "card.html"):
        f = tmp_path / "out" / name
        f.write_text(f.read_text().replace("release-supported", "release-supported (approved by QA)"))
        sealed = json.loads(files["json"].read_text())
        files["json"].write_text(json.dumps(seal(sealed, {**sealed["artifacts"], name: file_sha256(f)},
                                                 content_digest=sealed["content_digest"])))
        assert findings() == [f"{name} differ(s) from what the card's JSON renders (a derived file was edited; "
                              "card.md and card.html are rendered from card.json)"]
        shutil.rmtree(tmp_path / "out")
        shutil.copytree(backup, tmp_path / "out")
    assert findings() == []
    # a field no number depends on: the recipe summary
    edited = json.loads(files["json"].read_text())
    edited["cells"][0]["recipe_summary"] = "a recipe that never collapses"
    files["json"].write_text(json.dumps(edited))
    assert findings() == ["the card's content does not match its digest (a field of the card JSON was changed "
                          "after it was written)"]
    # re-digested, it is caught by the store: its reruns give another summary
    resealed = seal(edited, edited["artifacts"])
    res = verify_card(resealed, store)
    assert not res.ok and res.kinds == ("hand-edited",) and "recipe_summary" in res.summary()


def test_a_card_that_records_the_path_that_read_it_still_verifies(store, tmp_path):
    """Cards of earlier versions record the read path in ``source.read_path``; cards no longer do
    (the bytes would depend on it), and such a card stays valid and verifies."""
    synthetic_sweep(store, {s: 0.9 for s in range(25)})
    doc = _card(store)
    assert "read_path" not in doc["source"]
    doc["source"] = {**doc["source"], "read_path": "sql"}  # as an earlier version wrote it
    files = render_files(seal(doc), tmp_path / "old")
    found = read_card(str(files["json"]))
    assert found.doc["source"]["read_path"] == "sql"
    validate(found.doc)
    assert self_check(found.doc, found) == [] and verify_card(found.doc, store, found).ok


def _legacy(doc):
    old = {k: v for k, v in doc.items() if k not in ("digest_scheme", "content_digest", "artifacts")}
    old["schema_version"] = "1.0"
    for e in old["cells"]:
        for d in e["duplicates"]:
            for k in ("results", "decided_by", "counted_value", "counted_as", "nondeterministic"):
                d.pop(k, None)
    old["digest"] = legacy_document_digest(old)
    return old


def test_a_card_of_the_previous_digest_scheme_is_read_and_reported(store, tmp_path):
    _shopped(store)
    old = _legacy(_card(store))
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    loaded = read_card(str(path))
    assert loaded.doc == old  # still a valid card: read, rendered
    render_files(old, tmp_path / "out")
    res = verify_card(loaded.doc, store, loaded)
    assert not res.ok and res.kinds[0] == "old-digest"
    assert "earlier recipe_audit" in res.summary() and "attach it again" in res.summary()
    old["cells"][0]["verdict"] = "release-supported"
    assert [f.kind for f in self_check(old)] == ["old-digest", "hand-edited"]


def test_a_card_of_the_users_own_metric_names_it_as_audit_set(store):
    synthetic_sweep(store, {s: 0.9 for s in range(25)}, metric="val_acc")
    (e,) = _card(store, metric="val_acc")["cells"]
    assert e["audit_set"] == "val_acc" and e["metric"] == "val_acc" and e["verdict"] == "release-supported"
    (e,) = _card(store, metric="metrics.val_acc")["cells"]
    assert e["audit_set"] == "val_acc"
