"""The simultaneous upper band, all τ at once: exact coverage, constants, floor, bounds."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import procs
from scipy import stats as sps

import recipe_audit.stats.band as band_mod
from recipe_audit.stats import (
    StatsInputError,
    band_bounds,
    band_coverage,
    band_sample_floor,
    clopper_pearson_upper,
    sample_floor,
    simultaneous_band,
)
from recipe_audit.stats.band import birnbaum_tingey_sf, dkw_constant, ks_constant

# --- exact coverage ---------------------------------------------------------------------------


def _coverage_mc(levels, n, reps, rng):
    """P(U_(i) <= levels[i-1] for all i), by brute-force simulation."""
    u = np.sort(rng.random((reps, n)), axis=1)
    return float(np.mean(np.all(u <= np.asarray(levels)[None, :], axis=1)))


def test_coverage_closed_forms():
    # n = 1: P(U <= a); n = 2: P(U_(1) <= a, U_(2) <= b) = 2 (a b - a^2 / 2) for a <= b
    for a in (0.0, 0.1, 0.5, 0.99, 1.0):
        assert band_coverage([a], 1) == pytest.approx(a, abs=1e-12)
    for a, b in ((0.1, 0.2), (0.3, 0.8), (0.5, 0.5), (0.2, 1.0)):
        assert band_coverage([a, b], 2) == pytest.approx(2 * (a * b - a * a / 2), abs=1e-12)
    assert band_coverage([1.0] * 7, 7) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("n", [3, 6, 12])
def test_coverage_matches_simulation(n):
    rng = np.random.default_rng(n)
    for _ in range(3):
        levels = np.sort(rng.uniform(0.05, 1.0, n))
        exact = band_coverage(levels, n)
        mc = _coverage_mc(levels, n, 200_000, rng)
        assert abs(exact - mc) < 4.5 * math.sqrt(exact * (1 - exact) / 200_000) + 1e-4


@pytest.mark.parametrize("n", [1, 2, 3, 5, 10, 20, 59, 100, 300])
@pytest.mark.parametrize("delta", [0.05, 0.10, 0.25])
def test_ks_band_coverage_equals_scipy_ksone(n, delta):
    # an independent check of the recursion: the KS band's coverage is ksone's cdf
    c = ks_constant(n, delta)
    levels = np.minimum(1.0, np.arange(n) / n + c)
    assert band_coverage(levels, n) == pytest.approx(sps.ksone.cdf(c, n), abs=1e-9)
    assert band_coverage(levels, n) == pytest.approx(1 - delta, abs=1e-8)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 20, 59, 100])
@pytest.mark.parametrize("c", [0.05, 0.1, 0.2, 0.4, 0.7])
def test_birnbaum_tingey_formula_matches_ksone(n, c):
    assert birnbaum_tingey_sf(c, n) == pytest.approx(sps.ksone.sf(c, n), rel=1e-8, abs=1e-13)


def test_dkw_is_wider_than_exact_ks_and_still_covers():
    for n in (1, 5, 22, 59, 200):
        for d in (0.01, 0.1, 0.4):
            assert dkw_constant(n, d) >= ks_constant(n, d) - 1e-12
        c = dkw_constant(n, 0.1)
        assert band_coverage(np.minimum(1, np.arange(n) / n + c), n) >= 0.9
    assert dkw_constant(10, 0.1) == pytest.approx(math.sqrt(math.log(10) / 20))
    assert dkw_constant(10, 0.8) == pytest.approx(math.sqrt(math.log(2 / 0.8) / 20))  # two-sided above 1/2


# --- the bands --------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 5, 22, 59, 150])
@pytest.mark.parametrize("delta", [0.05, 0.10])
def test_exact_cp_band_is_calibrated_exactly(n, delta):
    b = simultaneous_band(n, delta)
    assert b.method == "exact-cp" and not b.fallback and b.c is None
    assert 1 - delta <= b.coverage <= 1 - delta + 1e-6
    assert band_coverage(b.levels[:-1], n) == pytest.approx(b.coverage, abs=1e-12)
    assert delta / n * (1 - 1e-6) <= b.local_level <= delta  # between Bonferroni and pointwise
    lv = np.asarray(b.levels)
    assert lv[-1] == 1.0 and np.all(np.diff(lv) >= 0)
    pointwise = np.asarray(clopper_pearson_upper(np.arange(n + 1), n, delta))
    assert np.all(lv >= pointwise - 1e-12)  # simultaneous costs width
    # the levels are Beta quantiles at the local level
    j = np.arange(n)
    assert np.allclose(lv[:-1], sps.beta.ppf(1 - b.local_level, j + 1, n - j), rtol=1e-8, atol=1e-12)


def test_exact_cp_is_tighter_than_ks_in_the_tail():
    for n in (30, 59, 200):
        cp, ks = simultaneous_band(n, 0.1, "exact-cp"), simultaneous_band(n, 0.1, "exact-ks")
        assert cp.levels[0] < ks.levels[0] and ks.c == pytest.approx(ks_constant(n, 0.1))
        assert ks.coverage == pytest.approx(0.9, abs=1e-8)


def test_methods_and_fallback_labels():
    assert simultaneous_band(59, 0.1, "dkw").fallback is True
    assert "fallback" in simultaneous_band(59, 0.1, "dkw").label
    assert simultaneous_band(band_mod.EXACT_CP_MAX_N + 1, 0.1).method == "exact-ks"
    with pytest.raises(StatsInputError, match="unknown band method"):
        simultaneous_band(10, 0.1, "wilson")
    with pytest.raises(StatsInputError):
        band_coverage([0.5, 0.4], 2)
    with pytest.raises(StatsInputError):
        band_coverage([0.5], 2)


# --- coverage by simulation, incl. discrete, bimodal and unfinished reruns ---------------------


def _band_fails(samples, cdf_left, levels):
    """Per replicate: does the band fail at some real τ? It fails iff G(x_(j+1)) > u_j for some j,
    G(x) = P(X < x) (x_(j+1) = -inf, an unfinished rerun, never fails since G(-inf) = 0)."""
    xs = np.sort(samples, axis=1)
    g = cdf_left(xs)
    return np.any(g > np.asarray(levels)[None, :-1] + 1e-12, axis=1)


def _mixture(rng, reps, n, p_collapse, p_nan, grid=None):
    work = rng.normal(0.85, 0.05, (reps, n))
    coll = rng.normal(0.5, 0.01, (reps, n))
    x = np.where(rng.random((reps, n)) < p_collapse, coll, work)
    if grid:
        x = np.round(x * grid) / grid
    x[rng.random((reps, n)) < p_nan] = -np.inf
    return x


def _mixture_cdf_left(p_collapse, p_nan, grid=None):
    def f(x):
        xx = x if grid is None else (np.round(x * grid) - 0.5) / grid  # P(round(Y) < x) for x on the grid
        cont = p_collapse * sps.norm.cdf(xx, 0.5, 0.01) + (1 - p_collapse) * sps.norm.cdf(xx, 0.85, 0.05)
        out = p_nan + (1 - p_nan) * cont
        return np.where(np.isneginf(x), 0.0, out)
    return f


@pytest.mark.parametrize("method", ["exact-cp", "exact-ks"])
@pytest.mark.parametrize("grid", [None, 120])
def test_band_covers_every_tau_by_simulation(method, grid):
    n, delta, reps = 59, 0.10, 20_000
    rng = np.random.default_rng(7 if grid else 8)
    b = simultaneous_band(n, delta, method)
    x = _mixture(rng, reps, n, 0.12, 0.02, grid)
    fail = _band_fails(x, _mixture_cdf_left(0.12, 0.02, grid), b.levels)
    rate = fail.mean()
    assert rate <= delta + 3 * math.sqrt(delta * (1 - delta) / reps)
    if grid is None:  # continuous apart from the unfinished mass: close to exact
        assert rate >= delta - 4 * math.sqrt(delta * (1 - delta) / reps) - 0.02


def test_pointwise_curve_does_not_cover_every_tau():
    # the pointwise Clopper-Pearson curve holds at one fixed τ, not at every τ at once
    n = 59
    pw = np.r_[np.asarray(clopper_pearson_upper(np.arange(n), n, 0.1)), 1.0]
    cov = band_coverage(pw[:-1], n)
    assert cov < 0.8
    rng = np.random.default_rng(3)
    x = rng.normal(size=(20_000, n))
    fail = _band_fails(x, lambda v: sps.norm.cdf(v), pw)
    assert fail.mean() == pytest.approx(1 - cov, abs=0.015)


# --- the band's sample floor -------------------------------------------------------------------


def test_band_sample_floor_values_and_checks():
    assert band_sample_floor(0.10, 0.10) == 46
    for eps, delta in ((0.10, 0.10), (0.05, 0.05), (0.2, 0.1), (0.1, 0.05)):
        for method in ("auto", "exact-ks", "dkw"):
            f = band_sample_floor(eps, delta, method)
            m = "exact-cp" if method == "auto" else method
            assert simultaneous_band(f, delta, m).levels[0] <= eps
            assert simultaneous_band(f - 1, delta, m).levels[0] > eps
            assert f >= sample_floor(eps, delta)
    assert band_sample_floor(0.1, 0.1, "exact-ks") <= band_sample_floor(0.1, 0.1, "dkw")
    assert band_sample_floor(0.1, 0.1, "dkw") == math.ceil(math.log(10) / (2 * 0.01))


def test_the_floors_kept_are_the_ones_the_search_finds_and_a_wrong_one_is_refused(monkeypatch):
    """band.FOUND_FLOORS spares the first card of a process the search at the default options:
    each entry is what the search finds, and a floor that is not the smallest passing n is
    refused by the check on the band itself before any card uses it."""
    from recipe_audit.stats import band

    assert band.FOUND_FLOORS
    for (eps, delta, method), kept in band.FOUND_FLOORS.items():
        with monkeypatch.context() as m:
            m.setattr(band, "FOUND_FLOORS", {})
            assert band._floor.__wrapped__(eps, delta, method, band._METHOD_MAX_N[method]) == kept
    for wrong in (45, 47):
        band._floor.cache_clear()
        with monkeypatch.context() as m:
            m.setattr(band, "FOUND_FLOORS", {(0.1, 0.1, "exact-cp"): wrong})
            with pytest.raises(AssertionError, match="band sample floor failed its check"):
                band_sample_floor(0.1, 0.1)
    band._floor.cache_clear()
    assert band_sample_floor(0.1, 0.1) == 46


@pytest.mark.parametrize("eps", [1e-4, 1e-5, 1e-7, 3.4e-8])
def test_band_sample_floor_of_a_tiny_eps_is_the_dkw_closed_form_at_once(eps):
    # beyond EXACT_KS_MAX_N reruns the auto band is DKW: its floor is ceil(ln(1/delta) / (2 eps^2)),
    # found without building a band of that size (1e-12 once asked NumPy for 16.8 TiB, 1e-4 took 596 s)
    import time

    t0 = time.perf_counter()
    f = band_sample_floor(eps, 0.1)
    assert time.perf_counter() - t0 < procs.timeout(2.0)
    x = math.log(10) / (2 * eps * eps)
    assert abs(f - x) <= max(2.0, 1e-12 * x)
    if f < 2**52:  # where a float tells n from n - 1, the constant itself decides
        assert dkw_constant(f, 0.1) <= eps < dkw_constant(f - 1, 0.1)
    bb = band_bounds([0.9] * 30, [0.7], eps=eps, delta=0.1)
    assert bb.sample_floor == f and bb.certified == (False,) and bb.band.method == "exact-cp"
    assert band_bounds([0.9] * 30, [0.7], eps=eps, with_floor=False).sample_floor is None


@pytest.mark.parametrize("eps, words", [
    (3.39e-8, "the band's sample floor at delta = 0.1 is 1e+15 reruns"),  # 3.4e-8: 9.96e14, accepted
    (1e-12, "the band's sample floor at delta = 0.1 is 1.15e+24 reruns"),  # it returned 1.15e24
    (1e-15, "the pointwise sample floor, below the band's, at delta = 0.1 is 2.3e+15 reruns"),
    (5e-324, "the pointwise sample floor, below the band's, at delta = 0.1 is 4.6e+323 reruns"),  # OverflowError
    (1e-200, "the pointwise sample floor, below the band's, at delta = 0.1 is 2.3e+200 reruns"),
])
def test_a_band_floor_past_the_rerun_limit_is_refused_in_one_sentence(eps, words):
    """Past 10^15 reruns (the most a count may hold) the band's floor is refused, as the card
    refuses it, and at an eps so small that its pointwise floor is beyond every float, before any
    band is searched; band_bounds, which states the floor, refuses alike."""
    import time

    t0 = time.perf_counter()
    for fn in (lambda: band_sample_floor(eps, 0.1), lambda: band_bounds([0.9] * 30, [0.7], eps=eps, delta=0.1)):
        with pytest.raises(StatsInputError) as info:
            fn()
        text = str(info.value)
        assert text.startswith(f"eps = {eps!r} is too small to certify with at most 10^15 reruns with a "
                               "simultaneous band (") and words in text and "\n" not in text
    assert time.perf_counter() - t0 < procs.timeout(2.0)


@pytest.mark.parametrize("method, cap", [("exact-cp", band_mod.EXACT_CP_MAX_N), ("exact-ks", band_mod.EXACT_KS_MAX_N)])
def test_an_exact_band_named_is_not_searched_beyond_its_size(method, cap):
    # its floor at eps = 1e-4 lies beyond the size the method is built for: refused, not computed
    assert sample_floor(1e-4, 0.1) > cap
    with pytest.raises(StatsInputError, match=f"the {method} band cannot certify eps = 0.0001 with up to {cap}"):
        band_sample_floor(1e-4, 0.1, method)
    with pytest.raises(StatsInputError, match="too small"):
        band_sample_floor(1e-300, 0.1, "dkw")


@pytest.mark.parametrize("method", ["exact-cp", "exact-ks", "dkw"])
def test_level_zero_decreases_with_n(method):
    # the floor's bisection relies on it
    ns = [*range(1, 61), 80, 100, 130]
    lv0 = [simultaneous_band(n, 0.1, method).levels[0] for n in ns]
    assert np.all(np.diff(lv0) <= 0) and np.all(np.diff(lv0)[2:] < 0)


# --- per-τ bounds from reruns ------------------------------------------------------------------


def test_band_bounds_counts_directions_and_unfinished():
    vals = np.r_[np.linspace(0.6, 0.95, 57), np.nan, np.inf]
    taus = [0.55, 0.7, 0.9]
    bb = band_bounds(vals, taus, eps=0.1, delta=0.1)
    below = [int(np.sum(vals[np.isfinite(vals)] < t)) + 2 for t in taus]
    assert list(bb.k) == below and bb.n == 59
    b = simultaneous_band(59, 0.1)
    assert list(bb.upper) == [b.levels[k] for k in below]
    assert list(bb.pointwise_upper) == pytest.approx([clopper_pearson_upper(k, 59, 0.1) for k in below])
    assert all(u >= p for u, p in zip(bb.upper, bb.pointwise_upper, strict=True))
    # lower-is-better is the mirror image
    lb = band_bounds(-vals, [-t for t in taus], eps=0.1, delta=0.1, higher_is_better=False)
    assert lb.k == bb.k and lb.upper == bb.upper
    # extra failures (an unlaunched remainder) count at every bar
    ex = band_bounds(vals[:50], taus, n_extra_failures=9)
    assert ex.n == 59 and ex.n_extra_failures == 9


def test_certified_tau_limit_is_the_edge_of_the_certified_bars():
    rng = np.random.default_rng(0)
    vals = np.round(rng.normal(0.85, 0.04, 120), 3)
    bb = band_bounds(vals, [0.5], eps=0.1, delta=0.1)
    lim = bb.certified_tau_limit
    assert lim is not None
    inside = band_bounds(vals, [lim, lim - 0.01, 0.0], eps=0.1, delta=0.1)
    assert all(inside.certified)
    assert not band_bounds(vals, [lim + 1e-9], eps=0.1, delta=0.1).certified[0]
    lo = band_bounds(-vals, [-lim, -lim + 0.01], eps=0.1, delta=0.1, higher_is_better=False)
    assert lo.certified_tau_limit == -lim and all(lo.certified)
    # below the band's floor nothing is certified
    assert band_bounds(vals[:40], [0.0], eps=0.1, delta=0.1).certified_tau_limit is None


def test_band_bounds_rejects_bad_input():
    with pytest.raises(StatsInputError):
        band_bounds([0.5, 0.6], [np.nan])
    with pytest.raises(StatsInputError):
        band_bounds([], [0.5])
    with pytest.raises(StatsInputError):
        band_bounds([0.5], [0.5], eps=1.5)


def test_poisson_pmf_is_scipys_bit_for_bit():
    """The band's coverage computes the Poisson pmf with scipy's own formula, not through
    scipy.stats (its per-call overhead dominated the band's sample floor); the numbers are the same."""
    rng = np.random.default_rng(0)
    for mu in np.r_[0.0, 1e-9, rng.uniform(0, 5, 200), rng.uniform(5, 3000, 200)]:
        k = np.arange(int(math.ceil(mu + 15 * math.sqrt(mu) + 40)))
        assert np.array_equal(band_mod._poisson_pmf(k, mu), sps.poisson.pmf(k, mu))
    for n in (1, 7, 59, 1000, 2999):
        assert float(band_mod._poisson_pmf(n, n)) == sps.poisson.pmf(n, n)
