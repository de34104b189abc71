"""The block of the latest cards on an experiment's description: replaced, never appended; the
text a person wrote around it kept; within MLflow's 5,000 characters."""

from __future__ import annotations

from recipe_audit.cards import note


def _entry(**kw):
    e = {"label": "default", "recipe_id": "abc", "group": {}, "audit_set": "calibration",
         "metric": "accuracy/calibration", "tau": 0.7, "n_failures": 6, "n_reruns": 59,
         "upper_bound": 0.1717, "verdict": "unsupported"}
    return {**e, **kw}


LINK = "#/experiments/3/runs?workflowType=machine_learning"


def test_block_lines_and_link():
    rows = note.note_rows([_entry(), _entry(tau=0.8, n_failures=9, upper_bound=0.24)], "2026-12-02 08:10 UTC")
    block = note.note_block(rows, LINK)
    lines = block.splitlines()
    assert lines[0] == note.NOTE_BEGIN and lines[-1] == note.NOTE_END
    assert lines[1] == ("- **unsupported** · recipe `default` · calibration · τ 0.7 · 6/59 failed · U 0.172 · "
                        "2026-12-02 08:10 UTC")
    assert lines[2].startswith("- **unsupported** · recipe `default` · calibration · τ 0.8 · 9/59 failed · U 0.240")
    assert f"]({LINK})" in block


def test_replaced_in_place_and_the_persons_text_kept():
    rows = note.note_rows([_entry()], "t1")
    first = note.with_block("Above, mine.\n\nAlso mine.", note.note_block(rows, LINK))
    assert first.startswith(note.NOTE_BEGIN) and first.endswith("\n\nAbove, mine.\n\nAlso mine.")
    # the person moves the block under a heading of theirs and writes after it: both stay where they are
    moved = "# Our sweep\n\n" + first + "\n\nWritten later."
    newer = note.note_rows([_entry(verdict="release-supported", n_failures=0, upper_bound=0.038)], "t2")
    again = note.with_block(moved, note.note_block(newer, LINK))
    assert again.startswith("# Our sweep\n\n" + note.NOTE_BEGIN) and again.endswith("Written later.")
    assert again.count(note.NOTE_BEGIN) == again.count(note.NOTE_END) == 1
    assert "release-supported" in again and "**unsupported**" not in again


def test_a_begin_marker_without_its_end_loses_nothing():
    broken = note.NOTE_BEGIN + "\nsomething a person typed"
    out = note.with_block(broken, note.note_block([], None))
    assert out.endswith(broken) and out.startswith(note.NOTE_BEGIN)


def test_latest_per_recipe_metric_and_tau():
    old = note.note_rows([_entry(), _entry(label="stable", recipe_id="def")], "t1")
    new = note.note_rows([_entry(verdict="release-supported")], "t2")
    rows = note.merge_rows(new, old)
    assert [(r["recipe"], r["verdict"], r["time"]) for r in rows] == [
        ("default", "release-supported", "t2"), ("stable", "unsupported", "t1")]
    many = note.note_rows([_entry(tau=t / 100) for t in range(50, 70)], "t")
    assert len(note.merge_rows(many, [])) == note.MAX_ROWS


def test_fits_the_description_and_never_cuts_the_persons_text():
    rows = note.note_rows([_entry(tau=t / 100) for t in range(50, 58)], "2026-12-02 08:10 UTC")
    mine = "x" * 4400
    text = note.fit(mine, rows, LINK)
    assert len(text) <= note.MAX_NOTE and text.endswith(mine)
    assert 0 < sum(ln.startswith("- ") for ln in text.splitlines()) < len(rows)


def test_the_verdict_a_card_leads_with():
    fam = _entry(verdict="release-supported", family={"size": 4, "verdict": "unsupported", "upper_bound": 0.12})
    any_ = _entry(verdict="release-supported", anytime={"verdict": "insufficient-evidence", "upper_bound": 0.11})
    one = _entry(family={"size": 1, "verdict": "unsupported"})
    assert note.headline(fam) == ("unsupported", "family-wise", 0.12)
    assert note.headline(any_) == ("insufficient-evidence", "anytime", 0.11)
    assert note.headline(one) == ("unsupported", None, 0.1717)
    (line,) = [note.note_line(r) for r in note.note_rows([fam], "t")]
    assert line.startswith("- **unsupported** (family-wise; pointwise release-supported) · ")


def test_the_store_keeps_the_latest_rows_and_leaves_a_full_description_alone(store):
    """On a store: the rows of earlier cards are kept (JSON beside the block), the person's text
    is kept, and a description the person filled alone is left as it is."""
    import json

    from mlflow.tracking import MlflowClient

    from recipe_audit.store.experiment_note import TAG_NOTE, TAG_NOTE_ROWS, publish_experiment_note

    client = MlflowClient(store)
    exp_id = client.create_experiment("exp")
    client.set_experiment_tag(exp_id, TAG_NOTE, "Ours.")
    assert publish_experiment_note(store, "nope", [_entry()]) is None  # no such experiment: nothing written
    publish_experiment_note(store, "exp", [_entry()])
    publish_experiment_note(store, "exp", [_entry(label="stable", recipe_id="def", verdict="release-supported",
                                                  n_failures=0, upper_bound=0.038)])
    tags = client.get_experiment(exp_id).tags
    lines = [ln for ln in tags[TAG_NOTE].splitlines() if ln.startswith("- ")]
    assert [ln.split(" · ")[:2] for ln in lines] == [["- **release-supported**", "recipe `stable`"],
                                                      ["- **unsupported**", "recipe `default`"]]
    assert tags[TAG_NOTE].endswith("\n\nOurs.") and f"](#/experiments/{exp_id}/runs?" in tags[TAG_NOTE]
    assert [r["recipe"] for r in json.loads(tags[TAG_NOTE_ROWS])] == ["stable", "default"]
    full = "y" * note.MAX_NOTE
    client.set_experiment_tag(exp_id, TAG_NOTE, full)
    assert publish_experiment_note(store, "exp", [_entry()]) is None
    assert client.get_experiment(exp_id).tags[TAG_NOTE] == full


def test_a_line_never_prints_u_on_the_wrong_side_of_eps():
    """Three decimals would print 0.100 beside unsupported at ε = 0.1; the line prints enough."""
    row = note.note_rows([_entry(verdict="unsupported", upper_bound=0.1000081, eps=0.1)], "t")[0]
    assert "U 0.10001 ·" in note.note_line(row)
    ok = note.note_rows([_entry(verdict="release-supported", upper_bound=0.0712, eps=0.1)], "t")[0]
    assert "U 0.071 ·" in note.note_line(ok)
