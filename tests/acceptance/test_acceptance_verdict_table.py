"""The acceptance card's verdict against the reference verdict table, transcribed as data, over
every combination of the four diagnostic statuses (5^4) and of the primary gap's installability."""

from __future__ import annotations

import itertools

import pytest

from recipe_audit.stats import acceptance as gates

# The reference table, row by row, in its own words. The rows overlap (a card with a pass, a
# missing and an N/A diagnostic matches both `missing evidence` and `near miss`); the reading
# below takes `undefined` first ("no diagnostic means anything") and then the rows in table order.
VERDICT_TABLE = [
    ("full-card pass", "all four diagnostics are strict passes"),
    ("undefined", "the primary baseline gap itself is not installable"),
    ("missing evidence", "no diagnostic failed, but at least one is missing"),
    ("near miss", "at least one passes, and at least one fails, is N/A, or passed with caveat"),
    ("fail", "no diagnostic passes"),
]

STATUS_WORDS = {"pass": gates.PASS, "fail": gates.FAIL, "N/A": gates.NA, "pass-with-caveat": gates.CAVEAT,
                "missing": gates.MISSING}


def _condition(row: str, statuses: tuple[str, ...], installable: bool) -> bool:
    """Each row's condition, read from its words; "passes" is a strict pass (N/A is never a pass,
    and a pass with caveat is named apart from a pass)."""
    s = list(statuses)
    strict = s.count("pass")
    if row == "full-card pass":
        return strict == 4
    if row == "undefined":
        return not installable
    if row == "missing evidence":
        return "fail" not in s and "missing" in s
    if row == "near miss":
        return strict >= 1 and any(x in ("fail", "N/A", "pass-with-caveat") for x in s)
    if row == "fail":
        return strict == 0
    raise AssertionError(row)


def _expected(statuses, installable) -> str:
    order = ["undefined"] + [name for name, _ in VERDICT_TABLE if name != "undefined"]
    matches = [name for name in order if _condition(name, statuses, installable)]
    assert matches, f"the table gives no verdict for {statuses}"
    return matches[0]


def test_the_table_names_the_code_s_verdicts():
    assert {name for name, _ in VERDICT_TABLE} == {gates.FULL_PASS, gates.UNDEFINED, gates.MISSING_EVIDENCE,
                                                     gates.NEAR_MISS, gates.VERDICT_FAIL}


@pytest.mark.parametrize("installable", [True, False])
def test_every_status_combination_follows_the_table(installable):
    seen = set()
    for combo in itertools.product(STATUS_WORDS, repeat=4):
        statuses = dict(zip(gates.GATES, (STATUS_WORDS[w] for w in combo), strict=True))
        expected = _expected(combo, installable)
        assert gates.card_verdict(statuses, installable=installable) == expected, combo
        seen.add(expected)
    assert seen == ({gates.UNDEFINED} if not installable else
                    {gates.FULL_PASS, gates.MISSING_EVIDENCE, gates.NEAR_MISS, gates.VERDICT_FAIL})


def test_an_absent_diagnostic_is_missing():
    assert gates.card_verdict({"a": gates.PASS, "b": gates.PASS, "c": gates.PASS}) == gates.MISSING_EVIDENCE
