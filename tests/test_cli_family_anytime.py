"""``recipe-audit bound --family-size M`` and ``--anytime``: the numbers of the stats modules, the
family-wise or anytime reading at the top (what was asked for), the pointwise one under ``pointwise``."""

from __future__ import annotations

import json

from recipe_audit.cli import main
from recipe_audit.stats.anytime import anytime_bound
from recipe_audit.stats.family import family_tail_bound


def _json(capsys, *argv):
    assert main(["bound", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_family_size_json(capsys):
    out = _json(capsys, "-k", "0", "-n", "30", "--family-size", "10")
    fb = family_tail_bound(0, 30, 0.1, 0.1, 10)
    # what a script reads first is the reading asked for; the pointwise one is named so
    assert (out["verdict"], out["upper_bound"], out["sample_floor"]) == ("insufficient-evidence", fb.upper, 44)
    assert out["reading"] == "family-wise" and out["pointwise"]["verdict"] == "release-supported"
    assert out["pointwise"]["sample_floor"] == 22
    assert out["family"] == {"size": 10, "delta": 0.01, "upper_bound": fb.upper, "lower_bound": fb.lower,
                             "sample_floor": 44, "verdict": "insufficient-evidence",
                             "more_clean_reruns_needed": 14}


def test_family_size_one_is_the_ordinary_card(capsys):
    out = _json(capsys, "-k", "2", "-n", "59", "--family-size", "1")
    assert out["family"]["verdict"] == out["verdict"] == out["pointwise"]["verdict"]
    assert out["family"]["upper_bound"] == out["upper_bound"] == out["pointwise"]["upper_bound"]


def test_family_size_json_issue_example(capsys):
    """2 failures in 59 chosen from 10: a script reading .verdict gets the family-wise one."""
    out = _json(capsys, "-k", "2", "-n", "59", "--family-size", "10")
    assert out["verdict"] == "unsupported" and out["pointwise"]["verdict"] == "release-supported"


def test_anytime_json(capsys):
    out = _json(capsys, "-k", "0", "-n", "30", "--anytime")
    ab = anytime_bound(0, 30)
    assert out["anytime"]["upper_bound"] == ab.upper and out["anytime"]["sample_floor"] == 34
    assert out["anytime"]["verdict"] == out["verdict"] == "insufficient-evidence"
    assert out["upper_bound"] == ab.upper and out["reading"] == "anytime"
    assert out["pointwise"]["verdict"] == "release-supported" and out["pointwise"]["sample_floor"] == 22
    assert "U_n <= eps" in out["anytime"]["rule"]


def test_text_leads_with_the_family_wise_verdict(capsys):
    assert main(["bound", "-k", "0", "-n", "30", "--family-size", "10"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("  chosen from a family of M = 10 recipes")
    assert lines[2].startswith("  family-wise verdict: insufficient-evidence")
    assert lines[-1] == "  pointwise verdict: release-supported"


def test_text_leads_with_the_anytime_verdict(capsys):
    assert main(["bound", "-k", "0", "-n", "40", "--anytime"]) == 0
    text = capsys.readouterr().out
    assert text.index("anytime verdict: release-supported") < text.index("pointwise verdict")
