"""Clopper–Pearson bounds, the sample floor and tail_bound (SPEC 1.3, 1.4)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import beta, binomtest
from statsmodels.stats.proportion import proportion_confint

from recipe_audit.stats import (
    TailBound,
    clopper_pearson_lower,
    clopper_pearson_upper,
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
@pytest.mark.parametrize("d", [0.01, 0.1, 0.5])
def test_k0_closed_form(n, d):
    assert clopper_pearson_upper(0, n, d) == 1 - d ** (1 / n)  # exactly the SPEC 1.4 formula
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
    assert sample_floor(0.10, 0.10) == 22
    assert sample_floor(0.05, 0.05) == 59
    assert sample_floor(0.10, 0.05) == 29
    assert sample_floor(0.01, 0.01) == 459


def _brute_floor(eps, delta):
    n = 1
    while 1.0 - delta ** (1.0 / n) > eps:
        n += 1
    return n


EPSS = [0.001, 0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.25, 1 / 3, 0.5, 0.75, 0.9, 0.99]
DELS = [1e-6, 0.001, 0.01, 0.05, 0.1, 0.2, 0.25, 0.5, 0.9, 0.99]


@pytest.mark.parametrize("eps", EPSS)
@pytest.mark.parametrize("delta", DELS)
def test_sample_floor_against_brute_force(eps, delta):
    got = sample_floor(eps, delta)
    ratio = math.log(delta) / math.log1p(-eps)
    # the defining property, checked with the bound itself
    assert clopper_pearson_upper(0, got, delta) <= eps
    if got > 1:
        assert clopper_pearson_upper(0, got - 1, delta) > eps
    if abs(ratio - round(ratio)) > 1e-9:  # away from exact ties all definitions agree
        assert got == _brute_floor(eps, delta) == math.ceil(ratio)
    else:
        assert abs(got - _brute_floor(eps, delta)) <= 1


def test_sample_floor_exact_tie_cases():
    # ln(0.25)/ln(0.5) == 2 exactly: N_min is 2, and at N = 2, k = 0 the card certifies
    assert sample_floor(0.5, 0.25) == 2
    assert clopper_pearson_upper(0, 2, 0.25) <= 0.5
    assert sample_floor(0.5, 0.5) == 1


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
