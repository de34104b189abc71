"""The acceptance page's table decided over seeds (bench/acceptance_tables.py) and the sweep's
pairing of each defense cell with a baseline installed on the same base model."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from recipe_audit.acceptance import experiment as X
from recipe_audit.config import ExperimentConfig

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def tables(monkeypatch):
    import importlib

    monkeypatch.syspath_prepend(str(REPO / "bench"))
    return importlib.import_module("acceptance_tables")


SAME = "Decided over seeds (gates and verdicts; + pass, \u2212 fail, ~ undecided, ? missing): the same in every run."
NOT_SAME = SAME.replace("the same", "not the same")


def _card(passes: dict[str, list[str]], other: str = "fail") -> dict:
    """A card whose cells ``<defense>_s<k>`` pass the gates listed for seed k (e.g. ``"ab"``); the
    other gates have status ``other``."""
    cells = []
    for defense, by_seed in passes.items():
        for k, gates in enumerate(by_seed):
            cells.append({"label": f"{defense}_s{k}", "verdict": "?",
                          "diagnostics": {g: {"status": "pass" if g in gates else other} for g in "abcd"}})
    return {"cells": cells}


def test_the_table_is_decided_by_the_stated_test(tables):
    """The bench decides as recipe_audit.stats.acceptance.seeds does (tested there against SciPy and
    statsmodels): with ten seeds, gates agreeing on all ten are decided, 7 of 10 is not; N/A and
    missing are never a fail; five seeds decide nothing (the first Holm level needs 8)."""
    card = _card({
        "l2sp": ["abcd"] * 10,                     # every gate 10 of 10
        "attack_proj": [""] * 10,                  # everything fails on every seed
        "consistency": ["abd"] * 7 + ["ab"] * 3,  # d passes on 7 of 10: p = 0.17, undecided
    })
    dec = tables.decided(card)
    assert [dec.of("l2sp")[g].decided for g in "abcd"] == ["pass"] * 4
    assert dec.verdicts == {"l2sp": "full-card pass", "attack_proj": "fail", "consistency": "near miss"}
    assert [dec.of("consistency")[g].decided for g in "abcd"] == ["pass", "pass", "fail", "undecided"]
    table = tables.decided_table(card)
    assert "| consistency | 10 | pass (10 pass; p = 0.00098) | pass (10 pass; p = 0.00098) | " \
           "fail (10 fail; p = 0.00098) | undecided (7 pass, 3 fail; p = 0.17) | **near miss** |" in table
    assert "Holm-adjusted over all 24 tests at family-wise error 0.1" in tables.decided_heading(card)
    # N/A on 4 seeds and a pass on 1 was a fail; gate (c) missing on every seed was a fail
    na = _card({"l2sp": ["abd"] + ["ab"] * 4}, other="n/a")
    for cell in na["cells"]:
        del cell["diagnostics"]["c"]["status"]
        cell["diagnostics"]["c"]["status"] = "missing"
    got = tables.decided(na)
    assert [got.of("l2sp")[g].decided for g in "abcd"] == ["undecided", "undecided", "missing", "undecided"]
    assert got.verdicts["l2sp"] == "missing evidence"
    five = tables.decided(_card({"l2sp": ["abcd"] * 5, "attack_proj": [""] * 5, "consistency": ["ab"] * 5}))
    assert {g.decided for g in five.gates} == {"undecided"} and five.seeds_to_decide == 8


def test_the_comparison_says_whether_the_decided_tables_agree(tables):
    one = _card({"l2sp": ["abcd"] * 10, "attack_proj": [""] * 10})
    other = _card({"l2sp": ["abcd"] * 11 + ["abc"], "attack_proj": ["a"] + [""] * 11})  # other cells, same decisions
    assert SAME in tables.compare([("run 1", one), ("run 2", other)]).splitlines()
    moved = _card({"l2sp": ["abcd"] * 7 + ["abc"] * 3, "attack_proj": [""] * 10})
    text = tables.compare([("run 1", one), ("run 2", moved)])
    assert NOT_SAME in text.splitlines()
    assert "| l2sp | full-card pass (+ + + +) | missing evidence (+ + + ~) |" in text
    # a gate that moves from decided to undecided changes the decision even when the verdict does not
    undecided = _card({"l2sp": ["abcd"] * 10, "attack_proj": ["a"] * 3 + [""] * 7})
    assert NOT_SAME in tables.compare([("run 1", one), ("run 2", undecided)]).splitlines()


def _run(cell: str, seed: int, base_dir: str) -> SimpleNamespace:
    return SimpleNamespace(info=SimpleNamespace(run_id=f"id-{cell}"),
                           data=SimpleNamespace(tags={"recipe_audit.cell": cell, "recipe_audit.seed": str(seed),
                                                      "recipe_audit.defense": cell.rsplit("_s", 1)[0],
                                                      "recipe_audit.base_dir": base_dir}, params={}))


def test_a_defense_and_its_baseline_on_different_bases_are_refused():
    runs = [_run("none_s0", 0, "/cache/base-a"), _run("l2sp_s0", 0, "/cache/base-b")]
    with pytest.raises(ValueError, match=r"^cell l2sp_s0 and its baseline none_s0 were installed on different base models$"):
        X.acceptance_document(runs, ExperimentConfig(), "sqlite:///nowhere.db")


def test_cells_that_make_no_card_end_the_sweep_with_one_sentence_and_exit_2(monkeypatch, capsys):
    """Cells finished but make no card (here: a defense and its baseline on two bases): the sweep
    does not end as if it had succeeded; one sentence, exit 2 (it used to print and exit 0)."""
    from omegaconf import OmegaConf

    from recipe_audit.app.callback import AcceptanceSweepCallback
    from recipe_audit.store import rerun_runs
    from recipe_audit.store.sweeps import SweepInfo

    runs = [_run("none_s0", 0, "/cache/base-a"), _run("l2sp_s0", 0, "/cache/base-b")]
    monkeypatch.setattr(rerun_runs, "sweep_runs", lambda *a, **k: runs)
    sweep = SweepInfo("abc123", "parent", "sqlite:///nowhere.db", "recipe_audit", (0,))
    with pytest.raises(X.AcceptanceCardError, match=r"^no acceptance card for sweep abc123: ValueError: cell l2sp_s0 "):
        X.acceptance_card_for_sweep(sweep, ExperimentConfig())
    config = OmegaConf.create({"experiment": {"kind": "acceptance"}, "hydra": {"sweep": {"dir": "unused"}}})
    with pytest.raises(SystemExit) as stopped:
        AcceptanceSweepCallback(metric=None)._cards(sweep, config)
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err == ("recipe_audit: error: no acceptance card for sweep abc123: ValueError: cell l2sp_s0 and its "
                   "baseline none_s0 were installed on different base models")


def test_compare_counts_the_card_numbers_equal_to_the_first_runs(tables):
    """The last line counts every number of the cells (nested ones and lists too) that is equal, to
    the last bit, to the first run's: one changed in the last place is not equal."""
    def card(x: float) -> dict:
        c = _card({"l2sp": ["abcd"]})
        c["cells"][0]["diagnostics"]["a"].update({"delta_gap": -0.25, "ci_delta_gap": [-0.5, x]})
        return c

    import math

    one, same, moved = card(-0.125), card(-0.125), card(math.nextafter(-0.125, 0.0))
    assert tables.card_numbers(one) == {"l2sp_s0.diagnostics.a.delta_gap": -0.25,
                                        "l2sp_s0.diagnostics.a.ci_delta_gap[0]": -0.5,
                                        "l2sp_s0.diagnostics.a.ci_delta_gap[1]": -0.125}
    last = tables.compare([("run 1", one), ("run 2", same), ("run 3", moved)]).splitlines()[-1]
    assert last == "Numbers of the cards' cells equal to run 1's, to the last bit: run 2 3 of 3; run 3 2 of 3."
