"""``recipe-audit acceptance``: the JSON card contract, the Markdown card, figures, many cells
(progressive filter, threshold sensitivity), and bad input (one sentence, exit 2, no card)."""

from __future__ import annotations

import dataclasses
import json

import pandas as pd
import pytest
from helpers.acceptance_synth import records
from helpers.cli import run_cli

from recipe_audit.cards.acceptance import AcceptanceCard, AcceptanceCardError, to_markdown, validate
from recipe_audit.stats import acceptance as gates

GOOD = {"base": (0.4, 0.85), "def": (0.75, 0.85)}
NOTHING = {"base": (0.4, 0.85), "def": (0.4, 0.85)}


def _frame(cells=GOOD, cross=GOOD, seed=0, n=40):
    parts = [records(cells, n_questions=n, n_templates=4, seed=seed),
             records(cells, n_questions=n, n_templates=4, split="fresh", seed=seed + 1, qprefix="f")]
    if cross is not None:
        parts.append(records(cross, n_questions=n, n_templates=4, task="arith", seed=seed + 2, qprefix="x"))
    return pd.concat(parts, ignore_index=True)


def _round_trip(doc: dict) -> AcceptanceCard:
    """The typed card read back from a card.json writes the same document, key order included."""
    card = AcceptanceCard.from_json(doc)
    assert card.to_json() == doc
    assert json.dumps(card.to_json(), indent=2, ensure_ascii=False) == json.dumps(doc, indent=2, ensure_ascii=False)
    assert card.content_digest() == doc["digest"]
    return card


@pytest.fixture
def files(tmp_path):
    df = _frame()
    held, rest = df[df["split"] == "heldout"], df[df["split"] != "heldout"]
    held.to_csv(tmp_path / "held.csv", index=False)
    rest.to_parquet(tmp_path / "rest.parquet")
    (tmp_path / "alphas.json").write_text(json.dumps({"alpha_T": 1.0, "alpha_A": 0.2, "claimed_class": "attack-targeted"}))
    return tmp_path


def test_json_card_contract(files, capsys):
    card = files / "card.json"
    rc, out, err = run_cli(["acceptance", "--records", str(files / "held.csv"),
                            "--records", str(files / "rest.parquet"), "--defense", "def",
                            "--baseline", "base", "--task", "mcq", "--cross-task", "arith",
                            "--alphas", str(files / "alphas.json"), "--resamples", "1000",
                            "--json", str(card)], capsys)
    assert rc == 0, err
    doc = json.loads(card.read_text())
    validate(doc)
    typed = _round_trip(doc)
    assert typed.cells[0].statuses == {g: doc["diagnostics"][g]["status"] for g in "abcd"}
    assert set(doc["diagnostics"]) == {"a", "b", "c", "d"}
    for g in "abcd":
        assert doc["diagnostics"][g]["status"] in gates.STATUSES
        assert {"statistic", "threshold", "reason", "does_not_prove"} <= set(doc["diagnostics"][g])
    assert doc["verdict"] in gates.VERDICTS
    assert doc["verdict"] == "full-card pass" and doc["diagnostics"]["c"]["rho_AT"] == pytest.approx(0.2)
    a = doc["diagnostics"]["a"]
    assert a["resamples"] == 1000 and a["seed"] == 0 and a["ci_delta_gap"][1] < 0
    assert doc["delta_deploy"]["interval"] == a["ci_delta_deploy"]
    assert len(doc["weaker_claims"]) == 4
    assert doc["options"]["primary_task"] == "mcq" and doc["options"]["cross_task"] == "arith"
    assert "full-card pass" in out


def test_same_inputs_same_card(files, capsys):
    args = ["acceptance", "--records", str(files / "held.csv"), "--records", str(files / "rest.parquet"),
            "--defense", "def", "--baseline", "base", "--task", "mcq", "--resamples", "500"]
    run_cli([*args, "--json", str(files / "1.json")], capsys)
    run_cli([*args, "--json", str(files / "2.json")], capsys)
    one, two = (json.loads((files / f"{i}.json").read_text()) for i in (1, 2))
    assert one["digest"] == two["digest"] and one["cells"] == two["cells"]


def test_markdown_and_figures(files, capsys):
    out = files / "out"
    md = files / "card.md"
    rc, _, err = run_cli(["acceptance", "--records", str(files / "held.csv"),
                          "--records", str(files / "rest.parquet"), "--defense", "def", "--baseline", "base",
                          "--task", "mcq", "--alphas", str(files / "alphas.json"),
                          "--resamples", "500", "--out", str(out), "--markdown", str(md)], capsys)
    assert rc == 0, err
    text = (out / "acceptance_card.md").read_text()
    assert "## Verdicts" in md.read_text() and "## Figures" not in md.read_text()
    for needle in ("| diagnostic | statistic | threshold | status | what it does not prove |",
                   "upper end of the 95% interval", "+ 2·SE_paired", "ρ_AT = 0.2000", "**missing**",
                   "Δdeploy = r_D^R − r_D^0", "Weaker claims that survive", "## Progressive filter",
                   "## Threshold sensitivity", "too narrow, not the gate", "acceptance_card_deltas.png",
                   "acceptance_card_alphas.png", *sa_does_not_prove()):
        assert needle in text, needle
    assert (out / "acceptance_card_deltas.png").stat().st_size > 1000
    assert (out / "acceptance_card_alphas.png").stat().st_size > 1000


def sa_does_not_prove():
    from recipe_audit.cards.acceptance import DOES_NOT_PROVE

    return list(DOES_NOT_PROVE.values())


def test_many_cells_filter_and_sensitivity(tmp_path, capsys):
    # three seeds: a working defense, a no-op, and one that only helps on the primary task
    frames = []
    for s, (cells, cross) in enumerate([(GOOD, GOOD), (NOTHING, NOTHING), (GOOD, NOTHING)]):
        df = _frame(cells, cross, seed=10 * s)
        frames.append(df.assign(cell=df["cell"] + f"_s{s}"))
    pd.concat(frames).to_csv(tmp_path / "r.csv", index=False)
    alphas = {"claimed_class": "attack-targeted",
              "cells": {"def_s0": {"alpha_T": 1.0, "alpha_A": 0.55}, "def_s1": {"alpha_T": 1.0, "alpha_A": 0.9},
                        "def_s2": {"alpha_T": 1.0, "alpha_A": 0.2}}}
    (tmp_path / "a.json").write_text(json.dumps(alphas))
    args = ["acceptance", "--records", str(tmp_path / "r.csv"), "--cross-task", "arith", "--alphas",
            str(tmp_path / "a.json"), "--resamples", "500", "--json", str(tmp_path / "c.json"),
            "--markdown", str(tmp_path / "c.md")]
    for s in range(3):
        args += ["--defense", f"def_s{s}", "--baseline", f"base_s{s}"]
    rc, out, err = run_cli(args, capsys)
    assert rc == 0, err
    doc = json.loads((tmp_path / "c.json").read_text())
    card = _round_trip(doc)
    assert "diagnostics" not in doc and len(doc["cells"]) == 3
    verdicts = [c["verdict"] for c in doc["cells"]]
    assert verdicts[0] == gates.FULL_PASS and verdicts[1] == gates.VERDICT_FAIL and verdicts[2] == gates.NEAR_MISS
    assert doc["cells"][2]["statuses"]["d"] in (gates.FAIL, gates.NA)
    pf = {r["filter"]: (r["n_with_result"], r["n_pass"]) for r in doc["progressive_filter"]}
    assert pf["all four"][1] == 1 and pf["(a)"] == (3, 2) and pf["(b)"][1] == 2
    changes = [r for r in doc["threshold_sensitivity"] if r["verdict_changes"]]
    assert ("def_s0", "boundary 0.5", gates.NEAR_MISS) in [(r["cell"], r["variant"], r["verdict_variant"])
                                                        for r in changes]  # ρ = 0.55: shrinkage at 0.5
    assert all(r["verdict"] != r["verdict_variant"] for r in changes)
    md = (tmp_path / "c.md").read_text()
    assert to_markdown(card) == md == to_markdown(doc)
    assert "| def_s0 | (c) | boundary 0.5 | pass | fail | full-card pass | near miss | **yes** |" in md
    assert out.count("\n") >= 5


def test_undefined_when_the_baseline_gap_is_not_installed(tmp_path, capsys):
    _frame({"base": (0.6, 0.6), "def": (0.6, 0.6)}, None).to_csv(tmp_path / "r.csv", index=False)
    rc, _, err = run_cli(["acceptance", "--records", str(tmp_path / "r.csv"), "--defense", "def",
                          "--baseline", "base", "--resamples", "200", "--json", str(tmp_path / "c.json")],
                         capsys)
    assert rc == 0, err
    doc = json.loads((tmp_path / "c.json").read_text())
    _round_trip(doc)
    assert doc["verdict"] == gates.UNDEFINED and doc["weaker_claims"] == []
    assert doc["cells"][0]["primary_baseline_gap"]["installable"] is False


def _bad(df: pd.DataFrame, case: str) -> pd.DataFrame:
    if case == "missing-column":
        return df.drop(columns=["template_id"])
    if case == "one-framing":
        return df[~((df["question_id"] == "q5") & (df["framing"] == "eval") & (df["cell"] == "def"))]
    if case == "one-cell":
        return df[~((df["question_id"] == "f3") & (df["cell"] == "base"))]
    return df


@pytest.mark.parametrize("case, extra, needle", [
    ("missing-column", [], "lack the column(s) 'template_id'"),
    ("one-framing", [], "Question 'q5' (task 'mcq', split 'heldout', cell 'def') is scored only under deploy framing"),
    ("one-cell", [], "Question 'f3' (task 'mcq', split 'fresh') is scored for cell 'def' but not for cell 'base'"),
    ("ok", ["--defense", "nope", "--baseline", "base"], "no records for cell 'nope'"),
    ("ok", ["--cross-task", "poetry"], "no records on the cross task 'poetry'"),
    ("ok", ["--baseline", "def"], "Give one --baseline for all defenses or one per --defense"),
    ("ok", ["--alphas", "ALPHAS"], "No claimed class"),
    ("ok", ["--resamples", "0"], "--resamples must be at least 1"),
    ("ok", ["--level", "95"], "between 0 and 1"),
])
def test_bad_input_one_sentence_no_card(tmp_path, capsys, case, extra, needle):
    df = _bad(_frame(cross=None, n=12), case)
    df.to_csv(tmp_path / "r.csv", index=False)
    (tmp_path / "a.json").write_text(json.dumps({"alpha_T": 1.0, "alpha_A": 0.2}))
    extra = [str(tmp_path / "a.json") if x == "ALPHAS" else x for x in extra]
    base = ["--defense", "def", "--baseline", "base"] if case != "ok" or "--defense" not in extra else []
    if extra[:1] == ["--baseline"]:
        base = ["--defense", "def", "--baseline", "base"]
    rc, out, err = run_cli(["acceptance", "--records", str(tmp_path / "r.csv"), *base, *extra, "--resamples",
                            extra[1] if extra[:1] == ["--resamples"] else "200",
                            "--json", str(tmp_path / "c.json"), "--out", str(tmp_path / "out")], capsys)
    assert rc == 2, (out, err)
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err and not out
    assert not (tmp_path / "c.json").exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize("flag", [["--cross-restricted"], ["--cross-restricted", "def"]])
def test_restricted_cross_task_variant_is_a_caveat(files, capsys, flag):
    card = files / "card.json"
    rc, _, err = run_cli(["acceptance", "--records", str(files / "held.csv"),
                          "--records", str(files / "rest.parquet"), "--defense", "def", "--baseline", "base",
                          "--cross-task", "arith", *flag, "--alphas", str(files / "alphas.json"),
                          "--resamples", "500", "--json", str(card)], capsys)
    assert rc == 0, err
    doc = json.loads(card.read_text())
    _round_trip(doc)
    assert doc["diagnostics"]["d"]["status"] == gates.CAVEAT and doc["diagnostics"]["d"]["restricted_variant"]
    assert doc["verdict"] == gates.NEAR_MISS
    assert any("restricted recipe variant (caveat)" in w for w in doc["weaker_claims"])


def test_the_card_is_frozen_and_typed(files, capsys):
    path = files / "card.json"
    rc, _, err = run_cli(["acceptance", "--records", str(files / "held.csv"), "--records", str(files / "rest.parquet"),
                          "--defense", "def", "--baseline", "base", "--task", "mcq", "--alphas",
                          str(files / "alphas.json"), "--resamples", "200", "--json", str(path)], capsys)
    assert rc == 0, err
    doc = json.loads(path.read_text())
    card = AcceptanceCard.from_json(doc)
    assert isinstance(card.cells, tuple) and isinstance(card.cells[0].weaker_claims, tuple)
    assert isinstance(card.options["sensitivity_boundaries"], tuple)
    assert card.cells[0].diagnostics.a.statistic.value == doc["diagnostics"]["a"]["statistic"]["value"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        card.cells[0].verdict = gates.FULL_PASS
    with pytest.raises(TypeError):
        card.cells[0].diagnostics.a.detail["delta_gap"] = 0.0
    bad = json.loads(path.read_text())
    bad["cells"][0]["statuses"]["a"] = gates.FAIL
    with pytest.raises(AcceptanceCardError, match="statuses"):
        AcceptanceCard.from_json(bad)
    bad = json.loads(path.read_text())
    bad["verdict"] = gates.VERDICT_FAIL
    with pytest.raises(AcceptanceCardError, match="top-level 'verdict'"):
        AcceptanceCard.from_json(bad)
