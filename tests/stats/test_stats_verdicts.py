"""Verdicts and their precedence, checked against the reference verdict table as data."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from recipe_audit.stats import (
    INSUFFICIENT,
    REFUSED_SHIFT,
    STRONG_UNSUPPORTED,
    SUPPORTED,
    UNSUPPORTED,
    clopper_pearson_lower,
    clopper_pearson_upper,
    sample_floor,
    tail_bound,
    verdict,
    verdict_array,
)


def test_strings_are_the_spec_strings():
    assert INSUFFICIENT == "insufficient-evidence"
    assert SUPPORTED == "release-supported"
    assert STRONG_UNSUPPORTED == "strong-unsupported"
    assert UNSUPPORTED == "unsupported"
    assert REFUSED_SHIFT == "refused-shift"


@pytest.mark.parametrize("eps,delta", [(0.1, 0.1), (0.05, 0.05), (0.2, 0.01)])
def test_floor_boundary(eps, delta):
    n_min = sample_floor(eps, delta)
    assert verdict(0, n_min, eps, delta) == SUPPORTED
    assert verdict(0, n_min - 1, eps, delta) == INSUFFICIENT


def test_strong_unsupported_wins_over_insufficient():
    # N = 5 < N_min = 22 (insufficient) but L(5, 5) = 0.1**(1/5) = 0.63 > 0.1
    assert 5 < sample_floor(0.1, 0.1)
    assert clopper_pearson_lower(5, 5, 0.1) > 0.1
    assert verdict(5, 5) == STRONG_UNSUPPORTED
    assert tail_bound(5, 5).verdict == STRONG_UNSUPPORTED


def test_boundary_of_strong_unsupported():
    # k = n = 1: L = delta**(1/1) = 0.1, which is not > eps = 0.1 (strict), so insufficient-evidence
    assert clopper_pearson_lower(1, 1, 0.1) == pytest.approx(0.1)
    assert verdict(1, 1) == INSUFFICIENT
    assert verdict(2, 2) == STRONG_UNSUPPORTED  # L = 0.1**0.5 = 0.316


def test_unsupported_and_supported_cases():
    assert verdict(3, 30) == UNSUPPORTED
    assert verdict(0, 100) == SUPPORTED
    assert verdict(1, 40) == SUPPORTED  # U(1, 40) = 0.0952 <= 0.1
    assert clopper_pearson_upper(1, 40, 0.1) <= 0.1
    assert verdict(1, 37) == UNSUPPORTED
    assert verdict(30, 40) == STRONG_UNSUPPORTED


def test_verdict_array_matches_scalar():
    n = np.arange(1, 80)
    for k_frac in (0.0, 0.05, 0.2, 1.0):
        k = np.floor(k_frac * n).astype(int)
        arr = verdict_array(k, n, 0.1, 0.1)
        assert arr.shape == n.shape
        assert list(arr) == [verdict(int(a), int(b)) for a, b in zip(k, n, strict=True)]


# The verdict table of the statistics reference, transcribed as data (the rows that depend on k
# and N only; refused-shift, "asked about an audit set the recipe was not measured on", is tested
# with the cards). Each condition is read by ``_holds`` below, not by the code under test.
VERDICT_TABLE = """
| verdict | condition |
| --- | --- |
| `insufficient-evidence` | N < N_min |
| `release-supported` | N ≥ N_min and U ≤ ε |
| `strong-unsupported` | L > ε |
| `unsupported` | otherwise |
"""
# "strong-unsupported takes precedence over insufficient-evidence when both hold"
PRECEDENCE = {frozenset({STRONG_UNSUPPORTED, INSUFFICIENT}): STRONG_UNSUPPORTED}


def _table_rows():
    rows = []
    for line in VERDICT_TABLE.strip().splitlines()[2:]:
        name, cond = (c.strip() for c in line.strip().strip("|").split("|"))
        rows.append((name.strip("`"), cond))
    return rows


def _holds(cond: str, env: dict) -> bool:
    expr = cond.replace("≥", ">=").replace("≤", "<=").replace("ε", "eps")
    return bool(eval(expr, {"__builtins__": {}}, env))


def _independent_bounds(n: int, delta: float) -> tuple[np.ndarray, np.ndarray]:
    """One-sided Clopper–Pearson bounds for k = 0..n from scipy's beta quantiles (not the project's
    code)."""
    k = np.arange(n + 1)
    with np.errstate(all="ignore"):
        u = np.where(k == n, 1.0, sps.beta.ppf(1 - delta, k + 1, np.maximum(n - k, 1)))
        lo = np.where(k == 0, 0.0, sps.beta.ppf(delta, np.maximum(k, 1), n - k + 1))
    return u, lo


def _floor_by_search(eps: float, delta: float) -> int:
    """The smallest N at which no failure in N reruns gives U = 1 - δ^(1/N) <= ε."""
    n = 1
    while (1 - eps) ** n > delta:
        n += 1
    return n


@pytest.mark.parametrize("eps,delta", [(0.1, 0.1), (0.05, 0.05), (0.2, 0.01)])
def test_verdicts_follow_the_reference_table(eps, delta):
    rows = _table_rows()
    assert [r[0] for r in rows] == [INSUFFICIENT, SUPPORTED, STRONG_UNSUPPORTED, UNSUPPORTED]
    n_min = _floor_by_search(eps, delta)
    assert sample_floor(eps, delta) == n_min
    checked = 0
    seen = set()
    for n in range(1, 2 * n_min + 20):
        us, los = _independent_bounds(n, delta)
        got = verdict_array(np.arange(n + 1), np.full(n + 1, n), eps, delta)
        for k in range(n + 1):
            u, lo = float(us[k]), float(los[k])
            if min(abs(u - eps), abs(lo - eps)) < 1e-9:
                continue  # a bound on ε itself: decided by the exact bound, checked by hand above
            env = {"N": n, "N_min": n_min, "U": u, "L": lo, "eps": eps}
            matches = {name for name, cond in rows if cond != "otherwise" and _holds(cond, env)}
            if not matches:
                expected = UNSUPPORTED
            elif len(matches) == 1:
                (expected,) = matches
            else:
                expected = PRECEDENCE[frozenset(matches)]  # KeyError: the table would be ambiguous
            assert got[k] == expected, (k, n)
            checked += 1
            seen.add(expected)
    assert seen == {INSUFFICIENT, SUPPORTED, STRONG_UNSUPPORTED, UNSUPPORTED}
    assert checked > 1000
