"""Clopper–Pearson bounds, the sample floor and tail_bound."""

from __future__ import annotations

import math
import time
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
from helpers import procs
from scipy.stats import beta, binomtest
from statsmodels.stats.proportion import proportion_confint

from recipe_audit.stats import (
    TailBound,
    checks,
    clopper_pearson_lower,
    clopper_pearson_upper,
    exact,
    more_clean_reruns_needed,
    sample_floor,
    tail_bound,
)

NS = [1, 2, 3, 5, 10, 22, 59, 100, 500]
DELTAS = [0.01, 0.05, 0.10, 0.25]


def _grid():
    for n in NS:
        for k in sorted({0, 1, n // 2, n - 1, n} & set(range(n + 1))):
            for d in DELTAS:
                yield k, n, d


GRID = list(_grid())


@pytest.mark.parametrize("k,n,d", GRID)
def test_bounds_match_scipy_beta_ppf(k, n, d):
    u = clopper_pearson_upper(k, n, d)
    lo = clopper_pearson_lower(k, n, d)
    exp_u = 1.0 if k == n else beta.ppf(1 - d, k + 1, n - k)
    exp_l = 0.0 if k == 0 else beta.ppf(d, k, n - k + 1)
    assert isinstance(u, float) and isinstance(lo, float)
    assert u == pytest.approx(exp_u, rel=1e-9, abs=1e-12)
    assert lo == pytest.approx(exp_l, rel=1e-9, abs=1e-12)
    assert 0.0 <= lo <= k / n <= u <= 1.0


@pytest.mark.parametrize("k,n,d", GRID)
def test_bounds_match_statsmodels_two_sided_at_2delta(k, n, d):
    # a two-sided "beta" interval at alpha = 2*delta puts delta in each tail: each end is a one-sided bound
    low, high = proportion_confint(k, n, alpha=2 * d, method="beta")
    assert clopper_pearson_upper(k, n, d) == pytest.approx(high, rel=1e-9, abs=1e-12)
    assert clopper_pearson_lower(k, n, d) == pytest.approx(low, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("k,n,d", GRID)
def test_bounds_match_scipy_binomtest_one_sided(k, n, d):
    high = binomtest(k, n, alternative="less").proportion_ci(confidence_level=1 - d, method="exact").high
    low = binomtest(k, n, alternative="greater").proportion_ci(confidence_level=1 - d, method="exact").low
    assert clopper_pearson_upper(k, n, d) == pytest.approx(high, rel=1e-9, abs=1e-12)
    assert clopper_pearson_lower(k, n, d) == pytest.approx(low, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("k,n", [(0, 10), (3, 30), (7, 22), (10, 10)])
def test_two_sided_scipy_interval_is_a_different_number(k, n):
    d = 0.10
    two = binomtest(k, n).proportion_ci(confidence_level=1 - d, method="exact")
    if k < n:
        assert two.high > clopper_pearson_upper(k, n, d) + 1e-4
    if k > 0:
        assert two.low < clopper_pearson_lower(k, n, d) - 1e-4


@pytest.mark.parametrize("n", [1, 2, 7, 22, 59, 1000])
@pytest.mark.parametrize("d", [0.01, 0.1, 0.49])
def test_k0_closed_form(n, d):
    # the floor formula 1 - delta**(1/n), evaluated without cancellation
    assert clopper_pearson_upper(0, n, d) == -math.expm1(math.log(d) / n)
    assert clopper_pearson_upper(0, n, d) == pytest.approx(1 - d ** (1 / n), rel=1e-13)
    assert tail_bound(0, n, 0.1, d).upper == clopper_pearson_upper(0, n, d)  # scalar and array agree
    assert clopper_pearson_lower(0, n, d) == 0.0
    assert clopper_pearson_upper(n, n, d) == 1.0
    assert clopper_pearson_lower(n, n, d) == d ** (1 / n)


def test_vectorised_broadcasting_equals_scalars():
    k = np.array([[0], [1], [5]])
    n = np.array([5, 10, 20, 59])
    d = 0.05
    up = clopper_pearson_upper(k, n, d)
    lo = clopper_pearson_lower(k, n, d)
    assert isinstance(up, np.ndarray) and up.shape == (3, 4) and lo.shape == (3, 4)
    for i in range(3):
        for j in range(4):
            assert up[i, j] == clopper_pearson_upper(int(k[i, 0]), int(n[j]), d)
            assert lo[i, j] == clopper_pearson_lower(int(k[i, 0]), int(n[j]), d)
    deltas = np.array([0.01, 0.1, 0.2])
    np.testing.assert_array_equal(
        clopper_pearson_upper(3, 30, deltas), [clopper_pearson_upper(3, 30, x) for x in deltas]
    )
    assert clopper_pearson_upper(np.int64(2), np.int32(9), np.float64(0.1)) == clopper_pearson_upper(
        2, 9, 0.1
    )


def test_upper_decreases_with_n_and_increases_with_k():
    n = np.arange(1, 200)
    u = clopper_pearson_upper(0, n, 0.1)
    assert np.all(np.diff(u) < 0)
    k = np.arange(0, 51)
    u = clopper_pearson_upper(k, 50, 0.1)
    assert np.all(np.diff(u) > 0)


def test_sample_floor_hand_values():
    assert sample_floor(0.10, 0.10) == 22  # ln 0.1 / ln 0.9 = 21.85
    assert sample_floor(0.05, 0.05) == 59
    assert sample_floor(0.10, 0.05) == 29
    assert sample_floor(0.01, 0.01) == 459
    # 0.9**21 = 0.1094 > 0.1 >= 0.9**22 = 0.0985: by hand
    assert Fraction(9, 10) ** 21 > Fraction(1, 10) >= Fraction(9, 10) ** 22


def _brute_floor(eps, delta):
    """The smallest N with (1 - eps)**N <= delta, counted up in exact rational arithmetic, on the
    fractions the floats stand for."""
    a, d = 1 - checks.rational(eps), checks.rational(delta)
    n, p = 1, a
    while p > d:
        n, p = n + 1, p * a
    return n


def _float_floor(eps, delta):
    n = 1
    while -math.expm1(math.log(delta) / n) > eps:
        n += 1
    return n


EPSS = [0.001, 0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 1 / 3, 0.5, 0.75, 0.9, 0.99, 0.999999]
DELS = [1e-300, 1e-6, 0.001, 0.01, 0.05, 0.1, 0.2, 0.25, 0.3, 0.49, 0.4999999]


def _certifies_at(n, eps, delta):
    """(1 - eps)**n <= delta on the fractions, with 80-digit logarithms (exact where the floors are large)."""
    mpmath = pytest.importorskip("mpmath")
    a, d = 1 - checks.rational(eps), checks.rational(delta)
    with mpmath.workdps(80):
        return n * mpmath.log(mpmath.mpf(a.numerator) / a.denominator) <= mpmath.log(
            mpmath.mpf(d.numerator) / d.denominator)


@pytest.mark.parametrize("eps", EPSS)
@pytest.mark.parametrize("delta", DELS)
def test_sample_floor_against_brute_force(eps, delta):
    got = sample_floor(eps, delta)
    if got <= 2000:  # small: count up, exactly
        assert got == _brute_floor(eps, delta)
    else:  # large: the defining property at N_min and one below, to 80 digits
        assert _certifies_at(got, eps, delta) and not _certifies_at(got - 1, eps, delta)
    ratio = math.log(delta) / math.log1p(-eps)
    if abs(ratio - round(ratio)) > 1e-9:  # away from exact ties every definition agrees
        assert got == math.ceil(ratio)
        assert got > 2000 or got == _float_floor(eps, delta)
        assert clopper_pearson_upper(0, got, delta) <= eps  # the bound itself
        assert got == 1 or clopper_pearson_upper(0, got - 1, delta) > eps


@pytest.mark.parametrize("eps,delta,n_min", [
    (0.3, 0.49, 2),  # 0.7**2 == 0.49: a tie, N = 2 certifies (the floats give ln ratio 2.0000000000000004)
    (0.5, 0.25, 2), (0.5, 0.125, 3), (0.5, Fraction(1, 2**50), 50), (0.9, 0.01, 2), (0.9, 0.001, 3),
    (0.5, 2**-50, 51),  # the float reads as its repr 8.881784197001252e-16, just below 2**-50
    (0.999999, 1e-300, 50),  # (1e-6)**50 == 1e-300
    (0.2, 0.4096, 4),  # 0.8**4
    (0.5, 0.4999999, 2), (0.5, 0.25000001, 2), (0.5, 0.24999999, 3),  # just either side of a tie
])  # fmt: skip
def test_sample_floor_exact_ties(eps, delta, n_min):
    assert sample_floor(eps, delta) == n_min == _brute_floor(eps, delta)
    tb = tail_bound(0, n_min, eps, delta)
    assert tb.verdict == "release-supported" and tb.more_clean_reruns_needed == 0
    assert tail_bound(0, n_min - 1, eps, delta).verdict == "insufficient-evidence" if n_min > 1 else True


def test_sample_floor_tiny_eps_is_exact_and_immediate():
    t0 = time.perf_counter()
    got = sample_floor(1e-12, 0.1)
    # ln(10) / -ln(1 - 1e-12) = 2302585092992.93...: decided from 40-digit logarithms
    assert got == 2302585092993
    assert sample_floor(1e-15, 0.05) == 2995732273553990  # 2995732273553989.496 (mpmath, 60 digits)
    assert sample_floor(5e-324, 0.1) > 10**323  # the smallest float: no overflow
    assert time.perf_counter() - t0 < procs.timeout(0.5)


def test_rational_reads_floats_as_their_shortest_repr():
    """A float is the decimal of its shortest repr (what was typed); exact numbers stay exact."""
    assert checks.rational(0.3) == Fraction(3, 10)
    assert checks.rational(0.49) == Fraction(49, 100)
    assert checks.rational(0.2724905250390625) == Fraction(17, 20) ** 8  # 16 digits: the tie 0.85**8
    assert checks.rational(2**-50) == Fraction("8.881784197001252e-16") != Fraction(1, 2**50)
    assert checks.rational(1 / 3) == Fraction("0.3333333333333333")
    assert checks.rational(Fraction(1, 3)) == Fraction(1, 3)
    for x in (0.1, 0.123456789012345, 0.16677181699666569, 1e-300, 5e-324, 0.9999999999999999, 2**-50):
        assert checks.rational(x) == Fraction(Decimal(repr(x)))  # the standard library's reading
        assert float(checks.rational(x)) == x


def _brute_more(k, n, eps, delta):
    n_min = sample_floor(eps, delta)
    m = 0
    while not (n + m >= n_min and clopper_pearson_upper(k, n + m, delta) <= eps):
        m += 1
    return m


@pytest.mark.parametrize(
    "k,n,eps,delta",
    [(0, 1, 0.1, 0.1), (0, 21, 0.1, 0.1), (0, 22, 0.1, 0.1), (0, 100, 0.1, 0.1), (1, 22, 0.1, 0.1),
     (3, 30, 0.1, 0.1), (5, 5, 0.1, 0.1), (10, 40, 0.05, 0.05), (2, 59, 0.05, 0.05), (1, 1, 0.3, 0.2)],
)  # fmt: skip
def test_more_clean_reruns_needed_brute_force(k, n, eps, delta):
    m = more_clean_reruns_needed(k, n, eps, delta)
    assert m == _brute_more(k, n, eps, delta)
    assert tail_bound(k, n + m, eps, delta).verdict == "release-supported"
    assert tail_bound(k, n, eps, delta).more_clean_reruns_needed == m


def test_tail_bound_fields():
    tb = tail_bound(0, 22)
    assert isinstance(tb, TailBound)
    assert (tb.k, tb.n, tb.eps, tb.delta, tb.sample_floor) == (0, 22, 0.1, 0.1, 22)
    assert tb.upper == pytest.approx(1 - 0.1 ** (1 / 22))
    assert tb.lower == 0.0
    assert tb.more_clean_reruns_needed == 0
    assert tb.verdict == "release-supported"
    assert tail_bound(0, 21).more_clean_reruns_needed == 1
    with pytest.raises(AttributeError):
        tb.k = 3  # frozen
    d = tb.to_dict()
    assert d["verdict"] == "release-supported" and d["sample_floor"] == 22


SCALAR_GRID = [(k, n, d) for n in (2, 3, 7, 22, 59, 200, 1000, 5000, 10**5, 10**7, 10**12)
               for k in sorted({x for x in (1, 2, 5, n // 10, n // 2, n - 1) if 1 <= x < n})
               for d in (1e-9, 0.01, 0.1, 0.3, 0.49)]


@pytest.mark.parametrize("k,n,d", SCALAR_GRID)
def test_scalar_bounds_match_scipy(k, n, d):
    """tail_bound's pure-Python bounds against SciPy's incomplete beta inverses (and their
    defining tail probabilities), for counts from 2 to 10^12."""
    from scipy import special

    up, lo = exact.upper_bound(k, n, d), exact.lower_bound(k, n, d)
    assert up == pytest.approx(special.betainccinv(k + 1, n - k, d), rel=2e-12)
    assert lo == pytest.approx(special.betaincinv(k, n - k + 1, d), rel=2e-12)
    assert 0.0 < lo < k / n < up <= 1.0  # U = 1.0 when the float below 1 is not conservative
    if n <= 10**5:  # conservative rounding: P(X <= k) at U and P(X >= k) at L are at most delta
        assert special.bdtr(k, n, up) <= d * (1 + 1e-9)
        assert special.betainc(k, n - k + 1, lo) <= d * (1 + 1e-9)


def test_scalar_bounds_are_fast_for_sweep_sizes():
    t0 = time.perf_counter()
    for n in (22, 59, 100, 500):
        for k in range(0, n + 1, max(1, n // 20)):
            tail_bound(k, n)
    assert time.perf_counter() - t0 < procs.timeout(2.0)


@pytest.mark.parametrize("delta", [0.5, 0.9, 0.99])
def test_delta_of_one_half_or_more_is_refused(delta):
    # at delta >= 0.5 the "upper" bound would fall below the "lower" one
    from recipe_audit.stats import StatsInputError

    for call in (lambda: tail_bound(1, 5, 0.1, delta), lambda: sample_floor(0.1, delta),
                 lambda: clopper_pearson_upper(1, 5, delta), lambda: clopper_pearson_lower(1, 5, delta)):
        with pytest.raises(StatsInputError, match="strictly between 0 and 0.5"):
            call()
    assert clopper_pearson_lower(3, 10, 0.4999) <= clopper_pearson_upper(3, 10, 0.4999)


def test_large_counts_are_checked_before_they_overflow():
    from recipe_audit.stats import StatsInputError

    for n in (10**16, 10**19, 10**30, np.uint64(10**19)):
        for f in (tail_bound, lambda k, m: clopper_pearson_upper(k, m, 0.1)):
            with pytest.raises(StatsInputError, match=r"reruns n must be at most 10\^15"):
                f(0, n)
    assert tail_bound(0, 10**15).verdict == "release-supported"
    with pytest.raises(StatsInputError, match="too small to certify"):
        tail_bound(0, 59, 1e-320)  # the floor exceeds 10^15 reruns
