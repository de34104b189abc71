"""The floors: the one floor search (:func:`first_passing`) and every floor found with it, checked
against an independent computation with SciPy's binomial (a plain scan over the counts, no
search): the further clean reruns a fixed-N card needs, the anytime floor of the confidence
sequence and the simultaneous band's floor."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from recipe_audit.stats import StatsInputError, floors
from recipe_audit.stats.anytime import anytime_sample_floor
from recipe_audit.stats.band import band_sample_floor, simultaneous_band
from recipe_audit.stats.exact import more_clean_reruns_needed, tail_bound
from recipe_audit.stats.floors import first_passing, sample_floor


@pytest.mark.parametrize("threshold", [1, 2, 3, 7, 8, 9, 100, 1023, 1024, 1025, 10**6 + 3])
@pytest.mark.parametrize("start", [1, 2, 5, 64])
def test_first_passing_finds_the_threshold_of_any_monotone_test(threshold, start):
    asked = []

    def passes(n):
        asked.append(n)
        return n >= threshold

    lo = 0
    if start > threshold:  # the search is told passes(lo) is false: start above it must be below threshold
        lo = threshold - 1
        start = threshold
    assert first_passing(passes, lo, start) == threshold
    assert len(asked) <= 2 * math.log2(threshold + start) + 4  # doubling then bisection, no scan
    assert first_passing(lambda n: n >= threshold, lo, start, limit=threshold) == threshold
    assert first_passing(lambda n: n >= threshold, lo, start, limit=threshold - 1 if threshold > start else None) in (
        None, threshold)


def test_first_passing_never_asks_beyond_its_limit():
    asked = []
    assert first_passing(lambda n: asked.append(n) or False, 0, 1, limit=100) is None
    assert max(asked) == 100 and asked[-1] == 100


def test_checked_floor_refuses_beyond_the_most_reruns():
    assert floors.checked_floor(22, 0.1, 0.1) == 22
    with pytest.raises(StatsInputError, match=r"^eps = 1e-20 is too small to certify with at most 10\^15 reruns "
                                              r"\(the sample floor at delta = 0.1 is 2.3e\+20 reruns\)\.$"):
        floors.budget_floor(1e-20, 0.1)


# ---------------------------------------------------------------------------------------------
# Independent computations: SciPy's binomial, scanned count by count
# ---------------------------------------------------------------------------------------------


def _scipy_n_min(eps: float, delta: float) -> int:
    """Smallest N with (1 - eps)**N <= delta, scanned (SciPy's binomial pmf at k = 0)."""
    ns = np.arange(1, 5_000)
    return int(ns[stats.binom.pmf(0, ns, eps) <= delta][0])


def _scipy_more(k: int, n: int, eps: float, delta: float) -> int:
    """Smallest m >= 0 with n + m >= N_min and P(Binomial(n + m, eps) <= k) <= delta, scanned."""
    lo = max(0, _scipy_n_min(eps, delta) - n)
    ms = np.arange(lo, lo + 5_000)
    tail = stats.binom.cdf(k, n + ms, eps)
    near = np.abs(tail - delta) <= 1e-9 * delta
    assert not near.any(), "a grid point at a tie: floats cannot decide it independently"
    return int(ms[tail <= delta][0]) if k else lo


def _scipy_anytime_floor(eps: float, delta: float) -> int:
    """Smallest n with M_n^+(eps) >= 1/delta at k = 0: P(Binomial(n + 1, eps) >= 1) /
    ((n + 1) eps P(Binomial(n, eps) = 0)), scanned from n = 1."""
    ns = np.arange(1, 5_000)
    with np.errstate(divide="ignore", over="ignore"):  # the pmf underflows to 0 far beyond the floor
        m_up = stats.binom.sf(0, ns + 1, eps) / ((ns + 1) * eps * stats.binom.pmf(0, ns, eps))
    return int(ns[m_up >= 1 / delta][0])


GRID_EPS = (0.05, 0.1, 0.15, 0.2, 0.3)
GRID_DELTA = (0.01, 0.05, 0.1, 0.2, 0.4)


@pytest.mark.parametrize("eps", GRID_EPS)
@pytest.mark.parametrize("delta", GRID_DELTA)
def test_fixed_n_floor_and_further_reruns_match_scipy(eps, delta):
    assert sample_floor(eps, delta) == _scipy_n_min(eps, delta)
    for n in (1, 5, 22, 60, 200):
        for k in range(0, 8):
            if k > n:
                continue
            want = _scipy_more(k, n, eps, delta)
            assert more_clean_reruns_needed(k, n, eps, delta) == want, (k, n, eps, delta)
            assert tail_bound(k, n, eps, delta).more_clean_reruns_needed == want


@pytest.mark.parametrize("eps", GRID_EPS + (0.02,))
@pytest.mark.parametrize("delta", GRID_DELTA + (0.45,))
def test_anytime_floor_matches_scipy(eps, delta):
    assert anytime_sample_floor(eps, delta) == _scipy_anytime_floor(eps, delta)


@pytest.mark.parametrize("eps, delta", [(0.3, 0.1), (0.2, 0.2)])
def test_band_floor_matches_a_scan_of_the_band(eps, delta):
    floor = band_sample_floor(eps, delta, "exact-cp")
    scan = next(n for n in range(1, 400) if simultaneous_band(n, delta, "exact-cp").levels[0] <= eps)
    assert floor == scan
