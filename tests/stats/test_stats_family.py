"""Family-wise cards: the floors (22 / 44 / 66), Holm against closed testing by brute force, the
family-wise error of choosing the best of M by exact enumeration, and bad input."""

from __future__ import annotations

import doctest
import itertools
import math

import numpy as np
import pytest
from scipy import stats

import recipe_audit.stats.family as family_mod
from recipe_audit.stats import (
    StatsInputError,
    clopper_pearson_lower,
    clopper_pearson_upper,
    exact,
    sample_floor,
    verdict,
)
from recipe_audit.stats.family import (
    check_family_size,
    family_bounds,
    family_delta,
    family_sample_floor,
    family_tail_bound,
    pointwise_p_value,
)


def test_doctests():
    assert doctest.testmod(family_mod, verbose=False).failed == 0


def test_family_floors_are_the_documented_numbers():
    assert [family_sample_floor(0.1, 0.1, m) for m in (1, 10, 100)] == [22, 44, 66]
    for m in (1, 3, 10, 30, 100, 1000):
        floor = family_sample_floor(0.1, 0.1, m)
        assert floor == sample_floor(0.1, 0.1 / m)
        # ln(M/delta)/eps-like growth, checked on the bound itself at the floor and one below
        assert family_tail_bound(0, floor, 0.1, 0.1, m).verdict == "release-supported"
        assert family_tail_bound(0, floor - 1, 0.1, 0.1, m).verdict == "insufficient-evidence"


def test_one_recipe_family_is_the_ordinary_card():
    for k, n in [(0, 22), (0, 21), (3, 30), (5, 5), (2, 59)]:
        fb = family_tail_bound(k, n, 0.1, 0.1, 1)
        assert fb.verdict == fb.pointwise_verdict == verdict(k, n)
        assert fb.upper == fb.pointwise_upper


def test_bonferroni_bounds_are_clopper_pearson_at_delta_over_m():
    for k, n, m in [(0, 44, 10), (3, 59, 3), (10, 30, 30), (0, 66, 100)]:
        fb = family_tail_bound(k, n, 0.1, 0.1, m)
        assert fb.family_delta == pytest.approx(0.1 / m)
        assert fb.upper == pytest.approx(float(clopper_pearson_upper(k, n, 0.1 / m)), rel=1e-12)
        assert fb.lower == pytest.approx(float(clopper_pearson_lower(k, n, 0.1 / m)), rel=1e-12)
        assert fb.upper >= fb.pointwise_upper and fb.lower <= fb.pointwise_lower


def test_p_value_is_scipy_binomial_cdf():
    for k, n in [(0, 22), (1, 44), (3, 59), (2, 100)]:
        assert pointwise_p_value(k, n, 0.1) == pytest.approx(stats.binom.cdf(k, n, 0.1), rel=1e-12)


def _closed_testing(ps, m, delta):
    """Holm by its definition as closed testing with Bonferroni local tests: H_i is rejected iff
    every intersection hypothesis containing it is rejected at delta / |S| (the untested members
    of the family have p = 1)."""
    full = list(ps) + [1.0] * (m - len(ps))
    out = []
    for i in range(len(ps)):
        others = [j for j in range(m) if j != i]
        ok = True
        for r in range(len(others) + 1):
            for sub in itertools.combinations(others, r):
                s = (i, *sub)
                if min(full[j] for j in s) > delta / len(s):
                    ok = False
                    break
            if not ok:
                break
        out.append(ok)
    return out


def test_holm_matches_closed_testing_brute_force():
    rng = np.random.default_rng(7)
    for _ in range(120):
        r = int(rng.integers(1, 5))
        m = r + int(rng.integers(0, 2))
        ns = rng.integers(15, 80, r)
        ks = [int(rng.integers(0, max(1, int(0.12 * n)))) for n in ns]
        card = family_bounds(list(zip(ks, ns.tolist(), strict=True)), 0.1, 0.1, m)
        ps = [stats.binom.cdf(k, int(n), 0.1) for k, n in zip(ks, ns, strict=True)]
        expect = _closed_testing(ps, m, 0.1)
        got = [x.verdict == "release-supported" for x in card.members]
        assert got == expect, (ks, ns.tolist(), m)
        assert card.certified == sum(expect)
        bonf = family_bounds(list(zip(ks, ns.tolist(), strict=True)), 0.1, 0.1, m, method="bonferroni")
        assert all(h or not b for h, b in zip(got, [x.verdict == "release-supported" for x in bonf.members], strict=True))


def _beta_upper(k: int, n: int, risk: float) -> float:
    """U by its definition, from SciPy: the 1 - risk quantile of Beta(k + 1, n - k)."""
    return 1.0 if k == n else float(stats.beta.ppf(1 - risk, k + 1, n - k))


def test_every_member_states_the_bound_at_the_level_it_names():
    """A family grid, checked against an independent computation (SciPy's binomial p-values, Holm
    by its definition, SciPy's beta quantiles): each member's ``upper`` is the exact bound at
    ``upper_level``, which is δ/M unless Holm certified the member only at its own larger level;
    a certified member's bound is at most ε there, an uncertified one's exceeds ε at δ/M, and no
    ``upper`` is ε standing in for a larger bound (the issue's example: 0/29 and 0/25 at ε = δ = 0.1
    stated U = 0.1 for 0/25, whose bound is 0.1129 at δ/M and 0.088 at its Holm level)."""
    cells = [(0, 10), (0, 25), (0, 29), (1, 29), (0, 44), (1, 44), (3, 44), (2, 60), (4, 60)]
    grid = [(eps, delta, m) for eps, delta in ((0.1, 0.1), (0.2, 0.05), (0.05, 0.1), (0.15, 0.2)) for m in (2,)]
    grid.append((0.1, 0.1, 3))
    checked = holm_only = 0
    for eps, delta, m in grid:
        for counts in itertools.combinations(cells, m):
            # p >= 1/2 (k >= nε) is never certified and sorts last, as 1.0
            ps = [1.0 if k >= n * eps else float(stats.binom.cdf(k, n, eps)) for k, n in counts]
            levels = [delta / (m - r) for r in range(m)]
            if any(abs(p - lv) <= 1e-9 * lv for p in ps for lv in levels):
                continue  # a tie within rounding: floats alone cannot decide it (tested elsewhere)
            order = sorted(range(m), key=lambda i: (ps[i], i))
            certified, going = {}, True
            for r, i in enumerate(order):
                going = going and ps[i] <= levels[r]
                certified[i] = (going, levels[r])
            card = family_bounds(list(counts), eps, delta)
            for i, ((k, n), mem) in enumerate(zip(counts, card.members, strict=True)):
                ok, level = certified[i]
                assert (mem.verdict == "release-supported") == ok, (counts, i)
                assert mem.level == pytest.approx(level, rel=1e-12)
                at = level if ok and ps[i] > delta / m else delta / m
                holm_only += at != delta / m
                assert mem.upper_level == pytest.approx(at, rel=1e-12), (counts, i)
                assert mem.upper == pytest.approx(_beta_upper(k, n, at), rel=1e-9, abs=1e-12), (counts, i)
                assert (mem.upper <= eps) == ok, (counts, i)
                if k < n:  # the defining property, from the binomial itself: P(X <= k) = level at p = U
                    assert stats.binom.cdf(k, n, mem.upper) == pytest.approx(at, rel=1e-7)
                assert mem.lower == pytest.approx(float(stats.beta.ppf(delta / m, k, n - k + 1)) if k else 0.0,
                                                  rel=1e-9, abs=1e-12)
                assert mem.more_clean_reruns_needed == 0 or not ok
                checked += 1
    assert checked > 500 and holm_only > 10  # the grid reaches members certified at Holm's level only


def test_the_issue_example_states_both_bounds_by_their_levels():
    a, b = family_bounds([(0, 29), (0, 25)], 0.1, 0.1).members
    assert (a.verdict, a.upper_level, b.verdict, b.upper_level) == ("release-supported", 0.05, "release-supported", 0.1)
    assert a.upper == pytest.approx(1 - 0.05 ** (1 / 29), rel=1e-12)  # 0.0981 at δ/M
    assert b.upper == pytest.approx(1 - 0.1 ** (1 / 25), rel=1e-12)  # 0.0880 at its Holm level (0.1129 at δ/M)
    assert b.upper != 0.1 and b.more_clean_reruns_needed == 0
    # ε in place of a larger bound is refused where it would be stated (it was the card's "0.100")
    with pytest.raises(AssertionError, match="not the bound at the level that certified it"):
        exact.capped(exact.upper_bound(0, 25, 0.05), 0.1, exact.SUPPORTED)
    assert exact.capped(0.30000000000000004, 0.3, exact.SUPPORTED) == 0.3  # an exact tie, rounded up: ε is the bound


@pytest.mark.parametrize("m,n", [(2, 30), (3, 30), (2, 59)])
def test_choosing_the_best_of_m_keeps_delta_exact_enumeration(m, n):
    """All M recipes at beta = eps (the supremum over recipes over budget): enumerate every
    failure-count vector; P(some recipe certified) <= delta family-wise, > delta pointwise.
    Whether some recipe is certified does not depend on the order of the counts, so each multiset
    of counts is read once, weighted by the number of vectors that order it (m! / prod(c_i!))."""
    top = int(0.2 * n)  # counts above cannot be certified at any level: one bucket, read as k = n
    pmf = np.r_[stats.binom.pmf(np.arange(top + 1), n, 0.1), stats.binom.sf(top, n, 0.1)]
    assert verdict(top + 1, n) != "release-supported"
    fam = point = total = 0.0
    for idx in itertools.combinations_with_replacement(range(top + 2), m):
        orders = math.factorial(m) // math.prod(math.factorial(idx.count(i)) for i in set(idx))
        prob = orders * float(np.prod(pmf[list(idx)]))
        total += prob
        ks = [k if k <= top else n for k in idx]
        card = family_bounds([(k, n) for k in ks], 0.1, 0.1)
        fam += prob * any(x.verdict == "release-supported" for x in card.members)
        point += prob * any(x.pointwise_verdict == "release-supported" for x in card.members)
    assert total == pytest.approx(1.0, abs=1e-12)  # every vector counted once
    assert fam <= 0.1 < (point if (m, n) != (2, 30) else 1.0)
    assert point == pytest.approx(1 - (1 - _ship_prob(n, 0.1)) ** m, abs=1e-9)


def _ship_prob(n, beta):
    ks = np.arange(n + 1)
    ok = np.array([verdict(int(k), n) == "release-supported" for k in ks])
    return float(stats.binom.pmf(ks, n, beta)[ok].sum())


def test_untested_members_count_in_m():
    card = family_bounds([(0, 44)], 0.1, 0.1, family_size=10)
    assert card.untested == 9 and card.family_size == 10
    assert card.members[0].verdict == "release-supported"
    assert family_bounds([(0, 43)], 0.1, 0.1, family_size=10).members[0].verdict == "insufficient-evidence"


def test_strong_unsupported_uses_the_family_risk():
    k, n = 8, 30
    fb = family_tail_bound(k, n, 0.1, 0.1, 30)
    assert fb.pointwise_verdict == "strong-unsupported"
    assert (fb.verdict == "strong-unsupported") == (float(clopper_pearson_lower(k, n, 0.1 / 30)) > 0.1)


def test_to_dict_is_json():
    import json

    card = family_bounds([(0, 44), (2, 59)], family_size=3)
    d = json.loads(json.dumps(card.to_dict()))
    assert d["family_size"] == 3 and len(d["members"]) == 2 and d["method"] == "holm"
    assert d["members"][0]["family_delta"] == pytest.approx(family_delta(0.1, 3))
    assert math.isclose(d["family_delta"], 0.1 / 3)


@pytest.mark.parametrize("call,fragment", [
    (lambda: check_family_size(0), "the family size M must be at least 1"),
    (lambda: check_family_size(-3), "the family size M must be at least 1"),
    (lambda: check_family_size(2.5), "must be a whole number of recipes"),
    (lambda: check_family_size(True), "must be a whole number of recipes"),
    (lambda: check_family_size("3"), "must be a whole number of recipes"),
    (lambda: check_family_size(10**16), "at most 10^15"),
    (lambda: family_tail_bound(0, 44, family_size=0), "at least 1"),
    (lambda: family_bounds([(0, 44), (1, 30)], family_size=1), "cannot be smaller than the number of recipes"),
    (lambda: family_bounds([(0, 44)], method="sidak"), "'holm' or 'bonferroni'"),
    (lambda: family_bounds([(0, 44, 3)]), "must be a (failures k, reruns n) pair"),
    (lambda: family_bounds("abc"), "sequence of (failures k, reruns n) pairs"),
    (lambda: family_bounds([]), "at least one recipe"),
    (lambda: family_bounds([(5, 3)]), "cannot exceed reruns n"),
])
def test_bad_input_one_sentence(call, fragment):
    with pytest.raises(StatsInputError) as info:
        call()
    msg = str(info.value)
    assert fragment in msg and msg.endswith(".") and "\n" not in msg
