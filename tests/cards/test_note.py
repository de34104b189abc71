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
    # the first line is the first card's verdict, plain (the experiments list shows it as text); the
    # marker, which the rendered description does not show, is last and counts the lines above it
    assert lines[0] == ("unsupported · 6/59 failed τ 0.7 · U 0.172 · recipe default · calibration · "
                        "2026-12-02 08:10 UTC  ")  # a Markdown line break before the next card
    assert lines[1].startswith("unsupported · 9/59 failed τ 0.8 · U 0.240 · recipe default · calibration")
    assert lines[-1] == note.NOTE_MARK.format(n=len(lines) - 1, s="s") and lines[-1].startswith("<!--")
    assert f"]({LINK})" in block and "<!--" not in "\n".join(lines[:-1])


def test_a_card_with_reruns_that_never_ran_says_so():
    """An interrupted sweep's planned seeds that never started are failures on the card; its line
    says how many and what completes them."""
    unf = [{"seed": s, "reason": "never-logged", "run_id": None} for s in (57, 58)] + [
        {"seed": 3, "reason": "failed", "run_id": "r3"}]
    (row,) = note.note_rows([_entry(n_failures=8, unfinished=unf)], "t")
    assert row["never_ran"] == 2
    assert " · 8/59 failed τ 0.7 (2 never ran: resume=true runs them) · U " in note.note_line(row)
    (plain,) = note.note_rows([_entry(unfinished=unf[2:])], "t")
    assert "never_ran" not in plain and "never ran" not in note.note_line(plain)


def test_a_label_reads_as_text_and_as_markdown():
    (row,) = note.note_rows([_entry(label="lr=1e-3,*x*,`y`,val_acc [a](b) <b>")], "t")
    assert " · recipe lr=1e-3,\\*x\\*,'y',val_acc [a]\\(b) \\<b> · " in note.note_line(row)
    (row,) = note.note_rows([_entry(label="[b3f34a05]")], "t")  # a recipe without a name: its id, as is
    assert " · U 0.172 · recipe [b3f34a05] · " in note.note_line(row)


def test_replaced_in_place_and_the_persons_text_kept():
    rows = note.note_rows([_entry()], "t1")
    first = note.with_block("Above, mine.\n\nAlso mine.", note.note_block(rows, LINK))
    assert first.startswith("unsupported · ") and first.endswith("-->\n\nAbove, mine.\n\nAlso mine.")
    # the person moves the block under a heading of theirs and writes after it: both stay where they are
    moved = "# Our sweep\n\n" + first + "\n\nWritten later."
    newer = note.note_rows([_entry(verdict="release-supported", n_failures=0, upper_bound=0.038)], "t2")
    again = note.with_block(moved, note.note_block(newer, LINK))
    assert again.startswith("# Our sweep\n\nrelease-supported · ") and again.endswith("-->\n\nAbove, mine.\n\nAlso mine.\n\nWritten later.")
    assert again.count("<!-- recipe_audit cards:") == 1
    assert "release-supported" in again and "unsupported ·" not in again
    # two cards where there was one, then one again: the marker's count finds the block each time
    two = note.with_block(again, note.note_block(rows + newer, LINK))
    assert two.count("<!-- recipe_audit cards:") == 1 and two.startswith("# Our sweep\n\nunsupported · ")
    assert note.with_block(two, note.note_block(newer, LINK)) == again


def test_a_block_of_the_older_form_is_replaced_where_it_is():
    older = (f"# Mine\n\n{note.NOTE_BEGIN}\n- **unsupported** · recipe `default` · calibration · τ 0.7 · "
             f"6/59 failed · U 0.172 · t0\n\nThe latest recipe cards, by recipe_audit.\n{note.NOTE_END}\n\nAfter.")
    out = note.with_block(older, note.note_block(note.note_rows([_entry()], "t1"), LINK))
    assert out.startswith("# Mine\n\nunsupported · 6/59 failed τ 0.7 · ") and out.endswith("-->\n\nAfter.")
    assert note.NOTE_BEGIN not in out and note.NOTE_END not in out and "t0" not in out


def test_a_marker_without_its_block_loses_nothing():
    for broken in (note.NOTE_BEGIN + "\nsomething a person typed",  # an older begin marker without its end
                   "typed\n" + note.NOTE_MARK.format(n=5, s="s")):  # a marker counting more lines than there are
        out = note.with_block(broken, note.note_block([], None))
        assert out.endswith(broken) and out.startswith("The latest recipe cards")


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
    assert 0 < sum(ln.startswith("unsupported · ") for ln in text.splitlines()) < len(rows)


def test_the_verdict_a_card_leads_with():
    fam = _entry(verdict="release-supported", family={"size": 4, "verdict": "unsupported", "upper_bound": 0.12})
    any_ = _entry(verdict="release-supported", anytime={"verdict": "insufficient-evidence", "upper_bound": 0.11})
    one = _entry(family={"size": 1, "verdict": "unsupported"})
    assert note.headline(fam) == ("unsupported", "family-wise", 0.12)
    assert note.headline(any_) == ("insufficient-evidence", "anytime", 0.11)
    assert note.headline(one) == ("unsupported", None, 0.1717)
    (line,) = [note.note_line(r) for r in note.note_rows([fam], "t")]
    assert line.startswith("unsupported (family-wise; pointwise release-supported) · ")


def test_the_store_keeps_the_latest_rows_and_leaves_a_full_description_alone(store):
    """On a store: the rows of earlier cards are kept (JSON beside the block, in a tag the UI does
    not show; an older visible tag is read, then removed), the person's text is kept, and a
    description the person filled alone is left as it is."""
    import json

    from mlflow.tracking import MlflowClient

    from recipe_audit.release.sweep import publish_experiment_note
    from recipe_audit.store.experiment_note import LEGACY_TAG_NOTE_ROWS, TAG_NOTE, TAG_NOTE_ROWS

    client = MlflowClient(store)
    exp_id = client.create_experiment("exp")
    client.set_experiment_tag(exp_id, TAG_NOTE, "Ours.")
    older = note.note_rows([_entry(label="older", recipe_id="old")], "t0")
    client.set_experiment_tag(exp_id, LEGACY_TAG_NOTE_ROWS, json.dumps(older))
    assert publish_experiment_note(store, "nope", [_entry()]) is None  # no such experiment: nothing written
    publish_experiment_note(store, "exp", [_entry()])
    publish_experiment_note(store, "exp", [_entry(label="stable", recipe_id="def", verdict="release-supported",
                                                  n_failures=0, upper_bound=0.038)])
    tags = client.get_experiment(exp_id).tags
    lines = [ln for ln in tags[TAG_NOTE].splitlines() if " · recipe " in ln]
    assert [ln.split(" · ")[::3] for ln in lines] == [["release-supported", "recipe stable"],
                                                       ["unsupported", "recipe default"], ["unsupported", "recipe older"]]
    assert tags[TAG_NOTE].endswith("\n\nOurs.") and f"](#/experiments/{exp_id}/runs?" in tags[TAG_NOTE]
    assert [r["recipe"] for r in json.loads(tags[TAG_NOTE_ROWS])] == ["stable", "default", "older"]
    assert TAG_NOTE_ROWS.startswith("mlflow.") and LEGACY_TAG_NOTE_ROWS not in tags
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
